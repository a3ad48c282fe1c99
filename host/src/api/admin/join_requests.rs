//! `/v1/admin/join-requests`: list, show, approve, deny.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::response::Response;

use super::{AdminActor, page, query};
use crate::api::{ApiError, AppState};
use crate::ops::types::{Approve, JoinRequest, JoinRequestQuery};
use crate::ops::{Id, join_requests};

/// The approval a body asks for: an empty body approves into `root`, no pool, no site.
fn approval(body: &[u8]) -> Result<Approve, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Approve::default());
    }
    // axum's own JSON reading, for its messages naming the field (`poolId: is not an id`).
    Json::<Approve>::from_bytes(body)
        .map(|Json(approve)| approve)
        .map_err(|e| ApiError::InvalidInput(format!("the approval: {}", e.body_text())))
}

/// Join requests, newest first, a page at a time; pending ones unless `state` says otherwise.
#[utoipa::path(get, path = "/v1/admin/join-requests", tag = "join-requests",
    params(("state" = Option<String>, Query), ("after" = Option<String>, Query), ("limit" = Option<u32>, Query)),
    responses((status = 200, body = Vec<JoinRequest>)))]
pub(in crate::api) async fn list(
    AdminActor(_): AdminActor,
    State(state): State<AppState>,
    q: Result<Query<JoinRequestQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    Ok(page(join_requests::list(&state.db, &query(q)?).await?))
}

/// One join request and what its attestor saw.
#[utoipa::path(get, path = "/v1/admin/join-requests/{id}", tag = "join-requests",
    params(("id" = String, Path)),
    responses((status = 200, body = JoinRequest), (status = 404, description = "NOT_FOUND")))]
pub(in crate::api) async fn show(
    AdminActor(_): AdminActor,
    State(state): State<AppState>,
    Path(id): Path<Id>,
) -> Result<Json<JoinRequest>, ApiError> {
    Ok(Json(join_requests::show(&state.db, &id).await?))
}

/// Approves a pending request (the body is optional).
#[utoipa::path(post, path = "/v1/admin/join-requests/{id}/approve", tag = "join-requests",
    params(("id" = String, Path)), request_body = Approve,
    responses((status = 200, body = JoinRequest), (status = 409, description = "CONFLICT: not pending")))]
pub(in crate::api) async fn approve(
    AdminActor(actor): AdminActor,
    State(state): State<AppState>,
    Path(id): Path<Id>,
    body: Bytes,
) -> Result<Json<JoinRequest>, ApiError> {
    let req = approval(&body)?;
    Ok(Json(
        join_requests::approve(&state.db, &actor, &id, req).await?,
    ))
}

/// Denies a pending request.
#[utoipa::path(post, path = "/v1/admin/join-requests/{id}/deny", tag = "join-requests",
    params(("id" = String, Path)),
    responses((status = 200, body = JoinRequest), (status = 409, description = "CONFLICT: not pending")))]
pub(in crate::api) async fn deny(
    AdminActor(actor): AdminActor,
    State(state): State<AppState>,
    Path(id): Path<Id>,
) -> Result<Json<JoinRequest>, ApiError> {
    Ok(Json(join_requests::deny(&state.db, &actor, &id).await?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn approvals_default_to_root_and_check_ids() {
        assert_eq!(approval(b"").unwrap(), Approve::default());
        assert_eq!(approval(b"{}").unwrap(), Approve::default());
        let a = approval(br#"{"tenantId":"t","poolId":"p","siteId":"s"}"#).unwrap();
        assert_eq!(
            (
                a.tenant_id.as_str(),
                a.pool_id.as_deref(),
                a.site_id.as_deref()
            ),
            ("t", Some("p"), Some("s"))
        );
        for bad in [
            &br#"{"tenantId":"a/b"}"#[..],
            br#"{"poolId":""}"#,
            br#"{"siteId":"x y"}"#,
            br#"{"tenant":"t"}"#,
            b"not json",
        ] {
            assert!(
                matches!(approval(bad), Err(ApiError::InvalidInput(_))),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
