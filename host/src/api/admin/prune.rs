//! `/v1/admin/{attestation-uses,tokens,events,audits}/prune`.

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;

use super::{AdminActor, body};
use crate::api::{ApiError, AppState};
use crate::ops::prune::{self, Prunable};
use crate::ops::types::{PruneByAge, PruneUses, Pruned};

/// Deletes up to `batch` expired single-use evidence records.
#[utoipa::path(post, path = "/v1/admin/attestation-uses/prune", tag = "prune",
    request_body = PruneUses, responses((status = 200, body = Pruned)))]
pub(in crate::api) async fn uses(
    AdminActor(actor): AdminActor,
    State(state): State<AppState>,
    req: Result<Json<PruneUses>, JsonRejection>,
) -> Result<Json<Pruned>, ApiError> {
    Ok(Json(prune::uses(&state.db, &actor, body(req)?).await?))
}

async fn by_age(
    actor: &crate::ops::Actor,
    state: &AppState,
    what: Prunable,
    req: Result<Json<PruneByAge>, JsonRejection>,
) -> Result<Json<Pruned>, ApiError> {
    Ok(Json(
        prune::by_age(&state.db, actor, what, body(req)?).await?,
    ))
}

/// Deletes up to `batch` tokens older than the age that can admit no one.
#[utoipa::path(post, path = "/v1/admin/tokens/prune", tag = "prune",
    request_body = PruneByAge, responses((status = 200, body = Pruned)))]
pub(in crate::api) async fn tokens(
    AdminActor(actor): AdminActor,
    State(state): State<AppState>,
    req: Result<Json<PruneByAge>, JsonRejection>,
) -> Result<Json<Pruned>, ApiError> {
    by_age(&actor, &state, Prunable::Tokens, req).await
}

/// Deletes up to `batch` events older than the age.
#[utoipa::path(post, path = "/v1/admin/events/prune", tag = "prune",
    request_body = PruneByAge, responses((status = 200, body = Pruned)))]
pub(in crate::api) async fn events(
    AdminActor(actor): AdminActor,
    State(state): State<AppState>,
    req: Result<Json<PruneByAge>, JsonRejection>,
) -> Result<Json<Pruned>, ApiError> {
    by_age(&actor, &state, Prunable::Events, req).await
}

/// Deletes up to `batch` audit records older than the age.
#[utoipa::path(post, path = "/v1/admin/audits/prune", tag = "prune",
    request_body = PruneByAge, responses((status = 200, body = Pruned)))]
pub(in crate::api) async fn audits(
    AdminActor(actor): AdminActor,
    State(state): State<AppState>,
    req: Result<Json<PruneByAge>, JsonRejection>,
) -> Result<Json<Pruned>, ApiError> {
    by_age(&actor, &state, Prunable::Audits, req).await
}
