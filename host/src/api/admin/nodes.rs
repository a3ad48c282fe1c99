//! `/v1/admin/nodes`: list, show, and the operator's actions on one node.

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::response::Response;

use super::{AdminActor, body, page, query};
use crate::api::{ApiError, AppState};
use crate::ops::types::{
    CertRevoked, Cordoned, Deleted, IdentityRevoked, Inventory, Node, NodeDetail, RecordInventory,
    Retired,
};
use crate::ops::{Id, PageRequest, nodes};

/// Nodes that are not deleted, oldest first, a page at a time.
#[utoipa::path(get, path = "/v1/admin/nodes", tag = "nodes",
    params(("after" = Option<String>, Query), ("limit" = Option<u32>, Query)),
    responses((status = 200, body = Vec<Node>)))]
pub(in crate::api) async fn list(
    AdminActor(_): AdminActor,
    State(state): State<AppState>,
    q: Result<Query<PageRequest>, QueryRejection>,
) -> Result<Response, ApiError> {
    Ok(page(nodes::list(&state.db, &query(q)?).await?))
}

/// A node (a deleted one too, with `deletedAt`), its certificates and bindings.
#[utoipa::path(get, path = "/v1/admin/nodes/{id}", tag = "nodes", params(("id" = String, Path)),
    responses((status = 200, body = NodeDetail), (status = 404, description = "NOT_FOUND")))]
pub(in crate::api) async fn show(
    AdminActor(_): AdminActor,
    State(state): State<AppState>,
    Path(id): Path<Id>,
) -> Result<Json<NodeDetail>, ApiError> {
    Ok(Json(nodes::show(&state.db, &id).await?))
}

/// Cordons a node.
#[utoipa::path(post, path = "/v1/admin/nodes/{id}/cordon", tag = "nodes",
    params(("id" = String, Path)), responses((status = 200, body = Cordoned)))]
pub(in crate::api) async fn cordon(
    AdminActor(actor): AdminActor,
    State(state): State<AppState>,
    Path(id): Path<Id>,
) -> Result<Json<Cordoned>, ApiError> {
    Ok(Json(nodes::set_cordon(&state.db, &actor, &id, true).await?))
}

/// Lifts a node's cordon.
#[utoipa::path(post, path = "/v1/admin/nodes/{id}/uncordon", tag = "nodes",
    params(("id" = String, Path)), responses((status = 200, body = Cordoned)))]
pub(in crate::api) async fn uncordon(
    AdminActor(actor): AdminActor,
    State(state): State<AppState>,
    Path(id): Path<Id>,
) -> Result<Json<Cordoned>, ApiError> {
    Ok(Json(
        nodes::set_cordon(&state.db, &actor, &id, false).await?,
    ))
}

/// Retires a node: it never joins or renews again; its certificates are revoked.
#[utoipa::path(post, path = "/v1/admin/nodes/{id}/retire", tag = "nodes",
    params(("id" = String, Path)), responses((status = 200, body = Retired)))]
pub(in crate::api) async fn retire(
    AdminActor(actor): AdminActor,
    State(state): State<AppState>,
    Path(id): Path<Id>,
) -> Result<Json<Retired>, ApiError> {
    Ok(Json(nodes::retire(&state.db, &actor, &id).await?))
}

/// Deletes a node: retired, certificates revoked, bindings and hardware key freed.
#[utoipa::path(delete, path = "/v1/admin/nodes/{id}", tag = "nodes",
    params(("id" = String, Path)), responses((status = 200, body = Deleted)))]
pub(in crate::api) async fn delete(
    AdminActor(actor): AdminActor,
    State(state): State<AppState>,
    Path(id): Path<Id>,
) -> Result<Json<Deleted>, ApiError> {
    Ok(Json(nodes::delete(&state.db, &actor, &id).await?))
}

/// Raises the node's identity generation and revokes its certificates.
#[utoipa::path(post, path = "/v1/admin/nodes/{id}/revoke-identity", tag = "nodes",
    params(("id" = String, Path)), responses((status = 200, body = IdentityRevoked)))]
pub(in crate::api) async fn revoke_identity(
    AdminActor(actor): AdminActor,
    State(state): State<AppState>,
    Path(id): Path<Id>,
) -> Result<Json<IdentityRevoked>, ApiError> {
    Ok(Json(nodes::revoke_identity(&state.db, &actor, &id).await?))
}

/// Revokes one certificate of a node.
#[utoipa::path(post, path = "/v1/admin/nodes/{id}/certs/{serial}/revoke", tag = "nodes",
    params(("id" = String, Path), ("serial" = String, Path)),
    responses((status = 200, body = CertRevoked)))]
pub(in crate::api) async fn revoke_cert(
    AdminActor(actor): AdminActor,
    State(state): State<AppState>,
    Path((id, serial)): Path<(Id, String)>,
) -> Result<Json<CertRevoked>, ApiError> {
    Ok(Json(
        nodes::revoke_cert(&state.db, &actor, &id, &serial).await?,
    ))
}

/// Records an inventory of a node.
#[utoipa::path(post, path = "/v1/admin/nodes/{id}/inventories", tag = "nodes",
    params(("id" = String, Path)), request_body = RecordInventory,
    responses((status = 200, body = Inventory)))]
pub(in crate::api) async fn record_inventory(
    AdminActor(actor): AdminActor,
    State(state): State<AppState>,
    Path(id): Path<Id>,
    req: Result<Json<RecordInventory>, JsonRejection>,
) -> Result<Json<Inventory>, ApiError> {
    Ok(Json(
        nodes::record_inventory(&state.db, &actor, &id, body(req)?).await?,
    ))
}

/// A node's inventories, newest first, a page at a time.
#[utoipa::path(get, path = "/v1/admin/nodes/{id}/inventories", tag = "nodes",
    params(("id" = String, Path), ("after" = Option<String>, Query), ("limit" = Option<u32>, Query)),
    responses((status = 200, body = Vec<Inventory>)))]
pub(in crate::api) async fn inventories(
    AdminActor(_): AdminActor,
    State(state): State<AppState>,
    Path(id): Path<Id>,
    q: Result<Query<PageRequest>, QueryRejection>,
) -> Result<Response, ApiError> {
    Ok(page(nodes::inventories(&state.db, &id, &query(q)?).await?))
}
