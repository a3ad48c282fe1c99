//! `/v1/admin/admins`: named admin identities.

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::response::Response;

use super::{AdminActor, body, page, query};
use crate::api::{ApiError, AppState};
use crate::ops::types::{Admin, CreateAdmin, CreatedAdmin, RevokedAdmin};
use crate::ops::{Id, PageRequest, admins};

/// Makes a named admin identity; its key is shown once.
#[utoipa::path(post, path = "/v1/admin/admins", tag = "admins", request_body = CreateAdmin,
    responses((status = 200, body = CreatedAdmin), (status = 409, description = "CONFLICT: the name is taken")))]
pub(in crate::api) async fn create(
    AdminActor(actor): AdminActor,
    State(state): State<AppState>,
    req: Result<Json<CreateAdmin>, JsonRejection>,
) -> Result<Json<CreatedAdmin>, ApiError> {
    Ok(Json(admins::create(&state.db, &actor, body(req)?).await?))
}

/// Admin identities by name, revoked ones included.
#[utoipa::path(get, path = "/v1/admin/admins", tag = "admins",
    params(("after" = Option<String>, Query), ("limit" = Option<u32>, Query)),
    responses((status = 200, body = Vec<Admin>)))]
pub(in crate::api) async fn list(
    AdminActor(_): AdminActor,
    State(state): State<AppState>,
    q: Result<Query<PageRequest>, QueryRejection>,
) -> Result<Response, ApiError> {
    Ok(page(admins::list(&state.db, &query(q)?).await?))
}

/// Revokes an identity: its key is refused from the next request on.
#[utoipa::path(post, path = "/v1/admin/admins/{name}/revoke", tag = "admins",
    params(("name" = String, Path)),
    responses((status = 200, body = RevokedAdmin), (status = 404, description = "NOT_FOUND")))]
pub(in crate::api) async fn revoke(
    AdminActor(actor): AdminActor,
    State(state): State<AppState>,
    Path(name): Path<Id>,
) -> Result<Json<RevokedAdmin>, ApiError> {
    Ok(Json(admins::revoke(&state.db, &actor, &name).await?))
}
