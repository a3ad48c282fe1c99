//! `/v1/admin/tokens`: mint, list, revoke.

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::response::Response;

use super::{AdminActor, body, page, query};
use crate::api::{ApiError, AppState};
use crate::ops::types::{CreateToken, CreatedToken, RevokedToken, Token};
use crate::ops::{Id, PageRequest, tokens};

/// Mints a join token; the token is shown once.
#[utoipa::path(post, path = "/v1/admin/tokens", tag = "tokens", request_body = CreateToken,
    responses((status = 200, body = CreatedToken), (status = 400, description = "INVALID_INPUT")))]
pub(in crate::api) async fn create(
    AdminActor(actor): AdminActor,
    State(state): State<AppState>,
    req: Result<Json<CreateToken>, JsonRejection>,
) -> Result<Json<CreatedToken>, ApiError> {
    Ok(Json(tokens::create(&state.db, &actor, body(req)?).await?))
}

/// Tokens, oldest first, a page at a time (`x-next-cursor` names the next page).
#[utoipa::path(get, path = "/v1/admin/tokens", tag = "tokens",
    params(("after" = Option<String>, Query), ("limit" = Option<u32>, Query)),
    responses((status = 200, body = Vec<Token>)))]
pub(in crate::api) async fn list(
    AdminActor(_): AdminActor,
    State(state): State<AppState>,
    q: Result<Query<PageRequest>, QueryRejection>,
) -> Result<Response, ApiError> {
    Ok(page(tokens::list(&state.db, &query(q)?).await?))
}

/// Revokes a token.
#[utoipa::path(post, path = "/v1/admin/tokens/{id}/revoke", tag = "tokens",
    params(("id" = String, Path)),
    responses((status = 200, body = RevokedToken), (status = 404, description = "NOT_FOUND")))]
pub(in crate::api) async fn revoke(
    AdminActor(actor): AdminActor,
    State(state): State<AppState>,
    Path(id): Path<Id>,
) -> Result<Json<RevokedToken>, ApiError> {
    Ok(Json(tokens::revoke(&state.db, &actor, &id).await?))
}
