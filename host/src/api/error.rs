//! The API's error type: a status and a stable code per variant; internal detail is logged,
//! never sent (STYLE: the sqlx axum example's `http/error.rs`).

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use gatehouse_proto::ApiError as Body;

/// Everything an API handler can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApiError {
    /// A join was refused; the reason is in the event and audit only.
    #[error("access denied")]
    AccessDenied,
    /// A renewal was refused; the reason is in the event and audit only.
    #[error("renew refused")]
    RenewDenied,
    /// A site node's request (leases, discovery tokens) was refused; the reason is in the
    /// `security.site.refused` event only.
    #[error("site request refused")]
    SiteDenied,
    /// The request is malformed.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// No or a wrong admin key.
    #[error("unauthenticated")]
    Unauthenticated,
    /// No such object.
    #[error("not found")]
    NotFound,
    /// The object is not in a state that allows the action (a decision on a join request
    /// that is no longer pending).
    #[error("conflict: {0}")]
    Conflict(String),
    /// The request body is larger than the server accepts.
    #[error("request body too large")]
    PayloadTooLarge,
    /// The client sent too many requests; it may try again after this long.
    #[error("rate limited")]
    RateLimited(std::time::Duration),
    /// The request took longer than the server allows (a body that never arrives).
    #[error("request timed out")]
    Timeout,
    /// The route exists but not with this method.
    #[error("method not allowed")]
    MethodNotAllowed,
    /// The host failed (database, signing); logged with the detail.
    #[error("internal error: {0}")]
    Internal(String),
    /// A join round found its attestor's call slots all taken (recorded as `attestor-busy`).
    #[error("attestor busy")]
    Busy,
}

impl ApiError {
    fn parts(&self) -> (StatusCode, &'static str, String) {
        match self {
            ApiError::AccessDenied => (
                StatusCode::FORBIDDEN,
                gatehouse_proto::ACCESS_DENIED,
                "Join refused".into(),
            ),
            ApiError::RenewDenied => (
                StatusCode::FORBIDDEN,
                gatehouse_proto::ACCESS_DENIED,
                "Renew refused".into(),
            ),
            ApiError::SiteDenied => (
                StatusCode::FORBIDDEN,
                gatehouse_proto::ACCESS_DENIED,
                "Site request refused".into(),
            ),
            ApiError::InvalidInput(m) => (StatusCode::BAD_REQUEST, "INVALID_INPUT", m.clone()),
            ApiError::Unauthenticated => (
                StatusCode::UNAUTHORIZED,
                "UNAUTHENTICATED",
                "a valid admin key is required".into(),
            ),
            ApiError::NotFound => (StatusCode::NOT_FOUND, "NOT_FOUND", "not found".into()),
            ApiError::Conflict(m) => (StatusCode::CONFLICT, "CONFLICT", m.clone()),
            ApiError::PayloadTooLarge => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "PAYLOAD_TOO_LARGE",
                "the request body is too large".into(),
            ),
            ApiError::RateLimited(_) => (
                StatusCode::TOO_MANY_REQUESTS,
                "RATE_LIMITED",
                "too many requests; try again later".into(),
            ),
            ApiError::Timeout => (
                StatusCode::REQUEST_TIMEOUT,
                "REQUEST_TIMEOUT",
                "the request took too long".into(),
            ),
            ApiError::MethodNotAllowed => (
                StatusCode::METHOD_NOT_ALLOWED,
                "METHOD_NOT_ALLOWED",
                "method not allowed".into(),
            ),
            ApiError::Internal(_) | ApiError::Busy => (
                StatusCode::SERVICE_UNAVAILABLE,
                gatehouse_proto::UNAVAILABLE,
                "try again later".into(),
            ),
        }
    }

    /// Whether the same request may succeed later: a host failure, a busy attestor, a rate.
    fn retryable(&self) -> Option<bool> {
        matches!(
            self,
            ApiError::Internal(_) | ApiError::Busy | ApiError::RateLimited(_)
        )
        .then_some(true)
    }

    /// The JSON answer for a bare status some layer produced (a 404 of no route, a rejection
    /// of a path or query extractor), so that every error a client sees has a body.
    pub(super) fn for_status(status: StatusCode, message: String) -> Response {
        let code = match status {
            StatusCode::NOT_FOUND => "NOT_FOUND",
            StatusCode::METHOD_NOT_ALLOWED => "METHOD_NOT_ALLOWED",
            StatusCode::PAYLOAD_TOO_LARGE => "PAYLOAD_TOO_LARGE",
            StatusCode::REQUEST_TIMEOUT => "REQUEST_TIMEOUT",
            StatusCode::UNSUPPORTED_MEDIA_TYPE => "UNSUPPORTED_MEDIA_TYPE",
            StatusCode::TOO_MANY_REQUESTS => "RATE_LIMITED",
            s if s.is_server_error() => gatehouse_proto::UNAVAILABLE,
            _ => "INVALID_INPUT",
        };
        let message = if status.is_server_error() {
            "try again later".to_owned()
        } else {
            message
        };
        (
            status,
            Json(Body {
                code: code.into(),
                message,
                retryable: status.is_server_error().then_some(true),
            }),
        )
            .into_response()
    }
}

impl From<axum::extract::rejection::JsonRejection> for ApiError {
    fn from(e: axum::extract::rejection::JsonRejection) -> Self {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge
        } else {
            ApiError::InvalidInput(e.body_text())
        }
    }
}

impl From<axum::extract::rejection::QueryRejection> for ApiError {
    fn from(e: axum::extract::rejection::QueryRejection) -> Self {
        ApiError::InvalidInput(e.body_text())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Internal(detail) = &self {
            tracing::error!(%detail, "request failed");
        }
        let (status, code, message) = self.parts();
        let body = Json(Body {
            code: code.into(),
            message,
            retryable: self.retryable(),
        });
        if let ApiError::RateLimited(wait) = self {
            let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            return (
                status,
                [(axum::http::header::RETRY_AFTER, seconds.max(1).to_string())],
                body,
            )
                .into_response();
        }
        (status, body).into_response()
    }
}

impl From<crate::ops::OpsError> for ApiError {
    fn from(e: crate::ops::OpsError) -> Self {
        use crate::ops::OpsError;
        match e {
            OpsError::InvalidInput(m) => ApiError::InvalidInput(m),
            OpsError::NotFound => ApiError::NotFound,
            OpsError::Conflict(m) => ApiError::Conflict(m),
            OpsError::Store(e) => e.into(),
        }
    }
}

impl From<crate::store::StoreError> for ApiError {
    fn from(e: crate::store::StoreError) -> Self {
        ApiError::Internal(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_say_nothing_more() {
        let (status, code, message) = ApiError::AccessDenied.parts();
        assert_eq!(
            (status, code, message.as_str()),
            (StatusCode::FORBIDDEN, "ACCESS_DENIED", "Join refused")
        );
        let (status, code, message) = ApiError::RenewDenied.parts();
        assert_eq!(
            (status, code, message.as_str()),
            (StatusCode::FORBIDDEN, "ACCESS_DENIED", "Renew refused")
        );
        let (status, code, _) = ApiError::Conflict("the join request is denied".into()).parts();
        assert_eq!((status, code), (StatusCode::CONFLICT, "CONFLICT"));
        let (_, _, message) = ApiError::Internal("db password wrong".into()).parts();
        assert!(!message.contains("password"));
    }
}
