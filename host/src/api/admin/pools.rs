//! `/v1/admin/pools`: create, list, show, replace the policy.

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::response::Response;

use super::{AdminActor, body, page, query};
use crate::api::{ApiError, AppState};
use crate::join::DEFAULT_ATTESTOR;
use crate::ops::types::{CreatePool, Pool, UpdatePool, UpdatedPool};
use crate::ops::{Id, PageRequest, pools};

/// Whether this host runs attestor `id`: `join-token` and every loaded attestor.
fn runs(state: &AppState) -> impl Fn(&str) -> bool + '_ {
    move |id| id == DEFAULT_ATTESTOR || state.join.runtime().contains(id)
}

/// Creates a pool.
#[utoipa::path(post, path = "/v1/admin/pools", tag = "pools", request_body = CreatePool,
    responses((status = 200, body = Pool), (status = 400, description = "INVALID_INPUT")))]
pub(in crate::api) async fn create(
    AdminActor(actor): AdminActor,
    State(state): State<AppState>,
    req: Result<Json<CreatePool>, JsonRejection>,
) -> Result<Json<Pool>, ApiError> {
    let req = body(req)?;
    Ok(Json(
        pools::create(&state.db, &actor, &runs(&state), req).await?,
    ))
}

/// Pools by tenant and id, a page at a time.
#[utoipa::path(get, path = "/v1/admin/pools", tag = "pools",
    params(("after" = Option<String>, Query), ("limit" = Option<u32>, Query)),
    responses((status = 200, body = Vec<Pool>)))]
pub(in crate::api) async fn list(
    AdminActor(_): AdminActor,
    State(state): State<AppState>,
    q: Result<Query<PageRequest>, QueryRejection>,
) -> Result<Response, ApiError> {
    Ok(page(pools::list(&state.db, &query(q)?).await?))
}

/// One pool.
#[utoipa::path(get, path = "/v1/admin/pools/{tenant}/{id}", tag = "pools",
    params(("tenant" = String, Path), ("id" = String, Path)),
    responses((status = 200, body = Pool), (status = 404, description = "NOT_FOUND")))]
pub(in crate::api) async fn show(
    AdminActor(_): AdminActor,
    State(state): State<AppState>,
    Path((tenant, id)): Path<(Id, Id)>,
) -> Result<Json<Pool>, ApiError> {
    Ok(Json(pools::show(&state.db, &tenant, &id).await?))
}

/// Replaces a pool's policy as a whole (`PUT`, or `POST`).
#[utoipa::path(put, path = "/v1/admin/pools/{tenant}/{id}", tag = "pools",
    params(("tenant" = String, Path), ("id" = String, Path)), request_body = UpdatePool,
    responses((status = 200, body = UpdatedPool)))]
pub(in crate::api) async fn update(
    AdminActor(actor): AdminActor,
    State(state): State<AppState>,
    Path((tenant, id)): Path<(Id, Id)>,
    req: Result<Json<UpdatePool>, JsonRejection>,
) -> Result<Json<UpdatedPool>, ApiError> {
    let req = body(req)?;
    Ok(Json(
        pools::update(&state.db, &actor, &runs(&state), &tenant, &id, req).await?,
    ))
}
