//! `/v1/admin/tenants`: create and list.

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::response::Response;

use super::{AdminActor, body, page, query};
use crate::api::{ApiError, AppState};
use crate::ops::types::{CreateTenant, Tenant};
use crate::ops::{PageRequest, tenants};

/// Creates a tenant (400 if it exists).
#[utoipa::path(post, path = "/v1/admin/tenants", tag = "tenants", request_body = CreateTenant,
    responses((status = 200, body = Tenant), (status = 400, description = "INVALID_INPUT")))]
pub(in crate::api) async fn create(
    AdminActor(actor): AdminActor,
    State(state): State<AppState>,
    req: Result<Json<CreateTenant>, JsonRejection>,
) -> Result<Json<Tenant>, ApiError> {
    Ok(Json(tenants::create(&state.db, &actor, body(req)?).await?))
}

/// Tenants by id, a page at a time.
#[utoipa::path(get, path = "/v1/admin/tenants", tag = "tenants",
    params(("after" = Option<String>, Query), ("limit" = Option<u32>, Query)),
    responses((status = 200, body = Vec<Tenant>)))]
pub(in crate::api) async fn list(
    AdminActor(_): AdminActor,
    State(state): State<AppState>,
    q: Result<Query<PageRequest>, QueryRejection>,
) -> Result<Response, ApiError> {
    Ok(page(tenants::list(&state.db, &query(q)?).await?))
}
