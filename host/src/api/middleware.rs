//! The layers in front of every handler: a JSON body for every error, no control characters
//! in the URI, a request deadline, the body size checked before it is read, and the per-source
//! join rate.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::limits::RateLimiter;
use super::{ApiError, Peer};

/// How much of a non-JSON error body is kept as the JSON body's message.
const MESSAGE_MAX: usize = 1024;

/// Turns every error answer that is not JSON yet (a rejection of a path or query extractor, a
/// 404 of no route, a 405) into `{code, message}`.
pub(super) async fn json_errors(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if is_json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, MESSAGE_MAX * 4)
        .await
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let mut message: String = text
        .chars()
        .filter(|c| !c.is_control())
        .take(MESSAGE_MAX)
        .collect();
    if message.is_empty() {
        message = status
            .canonical_reason()
            .unwrap_or("error")
            .to_ascii_lowercase();
    }
    let mut answer = ApiError::for_status(status, message);
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            answer.headers_mut().insert(name.clone(), value.clone());
        }
    }
    answer
}

/// No route: 404 `NOT_FOUND`.
pub(super) async fn not_found() -> ApiError {
    ApiError::NotFound
}

/// A route, but not this method: 405 `METHOD_NOT_ALLOWED`.
pub(super) async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}

/// Refuses a URI whose path or query carries a percent-encoded control character (`%00` and
/// friends): no id, name or parameter legitimately holds one, and PostgreSQL refuses NUL in
/// text, which would otherwise surface as a 5xx.
pub(super) async fn clean_uri(request: Request, next: Next) -> Response {
    let uri = request.uri();
    let bad = encoded_control(uri.path()) || uri.query().is_some_and(encoded_control);
    if bad {
        return ApiError::InvalidInput("control characters in the URI".into()).into_response();
    }
    next.run(request).await
}

/// Whether `s` holds `%XX` decoding to a C0 control character or DEL.
fn encoded_control(s: &str) -> bool {
    let b = s.as_bytes();
    b.windows(3).any(|w| {
        w[0] == b'%'
            && std::str::from_utf8(&w[1..])
                .ok()
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
                .is_some_and(|v| v < 0x20 || v == 0x7f)
    })
}

/// Answers 408 when the handler (reading the body included) is not done in time. Dropping the
/// handler's future rolls back its open transaction, as a cut connection does.
pub(super) async fn timeout(
    State(limit): State<Duration>,
    request: Request,
    next: Next,
) -> Response {
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::Timeout.into_response(),
    }
}

/// Answers 413 at once when `Content-Length` says the body is too large, without reading it
/// (a body without a length is cut at the same limit by the extractors).
pub(super) async fn content_length(
    State(max): State<usize>,
    request: Request,
    next: Next,
) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return ApiError::PayloadTooLarge.into_response();
    }
    next.run(request).await
}

/// Join rounds per source address: over the rate, 429 with `Retry-After`.
pub(super) async fn rate_limit(
    State(limiter): State<Arc<RateLimiter>>,
    request: Request,
    next: Next,
) -> Response {
    if let Some(peer) = request.extensions().get::<Peer>()
        && let Err(wait) = limiter.check(peer.addr.ip(), std::time::Instant::now())
    {
        tracing::debug!(peer = %peer.addr, "join rate limit reached");
        return ApiError::RateLimited(wait).into_response();
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoded_controls_are_found() {
        assert!(encoded_control("/v1/admin/nodes/a%00b"));
        assert!(encoded_control("x=%1b%5b31m"));
        assert!(encoded_control("%7F"));
        assert!(!encoded_control("/v1/admin/nodes/a%20b%2F"));
        assert!(!encoded_control("%zz%0"));
    }
}
