//! `/v1/admin/attestors`.

use axum::Json;
use axum::extract::State;

use super::AdminActor;
use crate::api::{ApiError, AppState};
use crate::ops::types::Attestor;

/// The attestors this host runs, shadows included.
#[utoipa::path(get, path = "/v1/admin/attestors", tag = "attestors",
    responses((status = 200, body = Vec<Attestor>)))]
pub(in crate::api) async fn list(
    AdminActor(_): AdminActor,
    State(state): State<AppState>,
) -> Result<Json<Vec<Attestor>>, ApiError> {
    let list = state.join.runtime().attestors();
    Ok(Json(
        list.into_iter().map(crate::ops::attestors::view).collect(),
    ))
}
