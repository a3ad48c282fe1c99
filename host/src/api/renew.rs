//! `POST /v1/renew`, over mTLS.

use axum::Extension;
use axum::Json;
use axum::extract::State;
use gatehouse_proto::{JoinResponse, RenewRequest};

use super::error::ApiError;
use super::{AppState, Peer};
use crate::join::{ClientInfo, JoinError};

/// Renews the client certificate the connection presented. A refusal is 403 ACCESS_DENIED
/// ("Renew refused") whatever the reason.
pub(super) async fn renew(
    State(state): State<AppState>,
    Extension(peer): Extension<Peer>,
    body: Result<Json<RenewRequest>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<JoinResponse>, ApiError> {
    let Json(request) = body.map_err(ApiError::from)?;
    let client = ClientInfo {
        addr: Some(peer.addr),
    };
    let leaf = peer.client_cert.as_deref().map(Vec::as_slice);
    match state.join.renew(leaf, request, &client).await {
        Ok(response) => Ok(Json(response)),
        Err(JoinError::Denied) => Err(ApiError::RenewDenied),
        Err(JoinError::Unavailable(detail)) => Err(ApiError::Internal(detail)),
        Err(JoinError::Busy) => Err(ApiError::Busy),
        Err(JoinError::RateLimited(wait)) => Err(ApiError::RateLimited(wait)),
    }
}
