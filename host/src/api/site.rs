//! The site node's API over mTLS: its boot lease (`POST /v1/leases/{name}/acquire|renew|release`)
//! and fetching the discovery tokens of the machines an operator's discovery workflow lets its
//! boot server serve (`POST /v1/site/discovery-tokens`).
//!
//! The handlers parse the body and call [`crate::ops::site`], which authenticates the node
//! from the leaf the TLS handshake proved ([`super::mtls`]) and owns every rule. Every refusal
//! is `403 ACCESS_DENIED` ("Site request refused"); losing a lease race is `409 CONFLICT`.

use axum::Json;
use axum::extract::{Path, State};
use axum::{Extension, extract::rejection::JsonRejection};
use gatehouse_proto::site::{DiscoveryToken, DiscoveryTokenRequest, LeaseRequest, LeaseState};

use super::error::ApiError;
use super::{AppState, Peer};
use crate::ops::site::{self, LeaseOp, SiteClient, SiteError};

impl From<SiteError> for ApiError {
    fn from(e: SiteError) -> Self {
        match e {
            SiteError::Refused(_) => ApiError::SiteDenied,
            SiteError::Ops(e) => e.into(),
        }
    }
}

fn client(peer: &Peer) -> SiteClient<'_> {
    SiteClient {
        addr: peer.addr,
        leaf: peer.client_cert.as_deref().map(Vec::as_slice),
    }
}

fn body<T>(body: Result<Json<T>, JsonRejection>) -> Result<T, ApiError> {
    body.map(|Json(b)| b).map_err(ApiError::from)
}

async fn lease(
    state: AppState,
    peer: Peer,
    name: String,
    request: Result<Json<LeaseRequest>, JsonRejection>,
    op: LeaseOp,
) -> Result<Json<LeaseState>, ApiError> {
    let req = body(request)?;
    Ok(Json(
        site::lease(&state.db, &client(&peer), &name, &req, op).await?,
    ))
}

/// `POST /v1/leases/{name}/acquire`: `{ttlSeconds}`.
pub(super) async fn acquire(
    State(state): State<AppState>,
    Extension(peer): Extension<Peer>,
    Path(name): Path<String>,
    request: Result<Json<LeaseRequest>, JsonRejection>,
) -> Result<Json<LeaseState>, ApiError> {
    lease(state, peer, name, request, LeaseOp::Acquire).await
}

/// `POST /v1/leases/{name}/renew`: `{epoch, ttlSeconds}`.
pub(super) async fn renew_lease(
    State(state): State<AppState>,
    Extension(peer): Extension<Peer>,
    Path(name): Path<String>,
    request: Result<Json<LeaseRequest>, JsonRejection>,
) -> Result<Json<LeaseState>, ApiError> {
    lease(state, peer, name, request, LeaseOp::Renew).await
}

/// `POST /v1/leases/{name}/release`: `{epoch}`.
pub(super) async fn release(
    State(state): State<AppState>,
    Extension(peer): Extension<Peer>,
    Path(name): Path<String>,
    request: Result<Json<LeaseRequest>, JsonRejection>,
) -> Result<Json<LeaseState>, ApiError> {
    lease(state, peer, name, request, LeaseOp::Release).await
}

/// `POST /v1/site/discovery-tokens`: `{mac, epoch, workflowId?}`; see
/// [`site::discovery_token`].
pub(super) async fn discovery_token(
    State(state): State<AppState>,
    Extension(peer): Extension<Peer>,
    request: Result<Json<DiscoveryTokenRequest>, JsonRejection>,
) -> Result<Json<DiscoveryToken>, ApiError> {
    let req = body(request)?;
    Ok(Json(
        site::discovery_token(&state.db, &client(&peer), &req).await?,
    ))
}
