//! `POST /v1/join`.

use axum::Extension;
use axum::Json;
use axum::extract::State;
use gatehouse_proto::{JoinRequest, JoinResponse};

use super::error::ApiError;
use super::{AppState, Peer};
use crate::join::{ClientInfo, JoinError};

/// One join round. A refusal is 403 ACCESS_DENIED whatever the reason; a round the host could
/// not decide (its database, or a busy attestor) is 503 retryable.
pub(super) async fn join(
    State(state): State<AppState>,
    Extension(peer): Extension<Peer>,
    body: Result<Json<JoinRequest>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<JoinResponse>, ApiError> {
    let Json(request) = body.map_err(ApiError::from)?;
    let client = ClientInfo {
        addr: Some(peer.addr),
    };
    match state.join.join(request, &client).await {
        Ok(response) => Ok(Json(response)),
        Err(JoinError::Denied) => Err(ApiError::AccessDenied),
        Err(JoinError::Unavailable(detail)) => Err(ApiError::Internal(detail)),
        Err(JoinError::Busy) => Err(ApiError::Busy),
        Err(JoinError::RateLimited(wait)) => Err(ApiError::RateLimited(wait)),
    }
}
