//! `/v1/admin/workflows`: start, list, show, complete, cancel.

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::response::Response;

use super::{AdminActor, body, page, query};
use crate::api::{ApiError, AppState};
use crate::ops::types::{
    FinishedWorkflow, StartWorkflow, StartedWorkflow, Workflow, WorkflowDetail,
};
use crate::ops::workflows::{self, Finish};
use crate::ops::{Id, PageRequest};

/// Starts a provisioning workflow (`kind` absent or `provision`) or a discovery one.
#[utoipa::path(post, path = "/v1/admin/workflows", tag = "workflows", request_body = StartWorkflow,
    responses((status = 200, body = StartedWorkflow), (status = 409, description = "CONFLICT: one running already")))]
pub(in crate::api) async fn start(
    AdminActor(actor): AdminActor,
    State(state): State<AppState>,
    req: Result<Json<StartWorkflow>, JsonRejection>,
) -> Result<Json<StartedWorkflow>, ApiError> {
    Ok(Json(workflows::start(&state.db, &actor, body(req)?).await?))
}

/// Workflows of both kinds, oldest first, a page at a time.
#[utoipa::path(get, path = "/v1/admin/workflows", tag = "workflows",
    params(("after" = Option<String>, Query), ("limit" = Option<u32>, Query)),
    responses((status = 200, body = Vec<Workflow>)))]
pub(in crate::api) async fn list(
    AdminActor(_): AdminActor,
    State(state): State<AppState>,
    q: Result<Query<PageRequest>, QueryRejection>,
) -> Result<Response, ApiError> {
    Ok(page(workflows::list(&state.db, &query(q)?).await?))
}

/// A workflow and where its token stands.
#[utoipa::path(get, path = "/v1/admin/workflows/{id}", tag = "workflows",
    params(("id" = String, Path)),
    responses((status = 200, body = WorkflowDetail), (status = 404, description = "NOT_FOUND")))]
pub(in crate::api) async fn show(
    AdminActor(_): AdminActor,
    State(state): State<AppState>,
    Path(id): Path<Id>,
) -> Result<Json<WorkflowDetail>, ApiError> {
    Ok(Json(workflows::show(&state.db, &id).await?))
}

/// Marks a running workflow succeeded (its unspent token is revoked).
#[utoipa::path(post, path = "/v1/admin/workflows/{id}/complete", tag = "workflows",
    params(("id" = String, Path)), responses((status = 200, body = FinishedWorkflow)))]
pub(in crate::api) async fn complete(
    AdminActor(actor): AdminActor,
    State(state): State<AppState>,
    Path(id): Path<Id>,
) -> Result<Json<FinishedWorkflow>, ApiError> {
    Ok(Json(
        workflows::finish(&state.db, &actor, &id, Finish::Complete).await?,
    ))
}

/// Cancels a running workflow (its unspent token is revoked).
#[utoipa::path(post, path = "/v1/admin/workflows/{id}/cancel", tag = "workflows",
    params(("id" = String, Path)), responses((status = 200, body = FinishedWorkflow)))]
pub(in crate::api) async fn cancel(
    AdminActor(actor): AdminActor,
    State(state): State<AppState>,
    Path(id): Path<Id>,
) -> Result<Json<FinishedWorkflow>, ApiError> {
    Ok(Json(
        workflows::finish(&state.db, &actor, &id, Finish::Cancel).await?,
    ))
}
