//! `/v1/admin/events` and `/v1/admin/audits`.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::response::Response;

use super::{AdminActor, page, query};
use crate::api::{ApiError, AppState};
use crate::ops::types::{Audit, AuditQuery, Event};
use crate::ops::{PageRequest, journal};

/// Events in feed order after the event `after` (`x-next-cursor` is the last one's id).
#[utoipa::path(get, path = "/v1/admin/events", tag = "events",
    params(("after" = Option<String>, Query), ("limit" = Option<u32>, Query)),
    responses((status = 200, body = Vec<Event>)))]
pub(in crate::api) async fn events(
    AdminActor(_): AdminActor,
    State(state): State<AppState>,
    q: Result<Query<PageRequest>, QueryRejection>,
) -> Result<Response, ApiError> {
    Ok(page(journal::events(&state.db, &query(q)?).await?))
}

/// Audit records of join rounds in id order, filtered by node, attestor, result and time.
#[utoipa::path(get, path = "/v1/admin/audits", tag = "events",
    params(("nodeId" = Option<String>, Query), ("attestor" = Option<String>, Query),
        ("result" = Option<String>, Query), ("since" = Option<i64>, Query),
        ("after" = Option<String>, Query), ("limit" = Option<u32>, Query)),
    responses((status = 200, body = Vec<Audit>)))]
pub(in crate::api) async fn audits(
    AdminActor(_): AdminActor,
    State(state): State<AppState>,
    q: Result<Query<AuditQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    Ok(page(journal::audits(&state.db, &query(q)?).await?))
}
