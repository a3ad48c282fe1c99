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
    /// The host failed (database, signing); logged with the detail.
    #[error("internal error: {0}")]
    Internal(String),
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
            ApiError::Internal(_) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "UNAVAILABLE",
                "try again later".into(),
            ),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Internal(detail) = &self {
            tracing::error!(%detail, "request failed");
        }
        let (status, code, message) = self.parts();
        (
            status,
            Json(Body {
                code: code.into(),
                message,
            }),
        )
            .into_response()
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
