//! Operator approval of join requests, behind the admin key: list what attestors are waiting
//! on (with what each saw), approve into a tenant, pool and site, or deny.
//!
//! An attestor opens a request in a join round it cannot decide ([`crate::store::Tx`]'s
//! `open_join_request`, through the WIT `tx`) and defers; the machine's agent retries with the
//! same CSR. A decision is one transaction that records it only while the request is still
//! pending and unexpired (a later decision is [`ApiError::Conflict`]) and appends its event,
//! `join-request.approved` or `join-request.denied`. The attestor reads the decision on the
//! machine's next round: an approval admits that CSR once, into the placement chosen here.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::AppState;
use super::admin::{ListPage, authorize, is_id, page};
use super::error::ApiError;
use crate::store::{Cursor, JoinDecision, JoinRequestRow, JoinRequestState, NewEvent};

/// A join request as the admin API shows it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct JoinRequestView {
    id: String,
    attestor: String,
    /// What the attestor identified the machine by (for example `uuid:<product uuid>` or an
    /// EK hash).
    subject: String,
    /// The attestor's `details`: what it saw (claims, evidence summary), as JSON.
    details: Value,
    /// Hex SHA-256 of the CSR the request was opened for: only that CSR is admitted.
    csr_sha256: String,
    /// `pending`, `approved`, `denied` or `expired` (also once an approval was used), as of
    /// database time.
    state: JoinRequestState,
    tenant_id: Option<String>,
    pool_id: Option<String>,
    site_id: Option<String>,
    created_at: i64,
    decided_at: Option<i64>,
    expires_at: i64,
}

impl From<JoinRequestRow> for JoinRequestView {
    fn from(r: JoinRequestRow) -> Self {
        // The store only accepts JSON `details`; a row that still is not shows as a string.
        let details = serde_json::from_str(&r.details).unwrap_or(Value::String(r.details));
        JoinRequestView {
            id: r.id,
            attestor: r.attestor,
            subject: r.subject,
            details,
            csr_sha256: hex::encode(r.csr_sha256),
            state: r.state,
            tenant_id: r.tenant_id,
            pool_id: r.pool_id,
            site_id: r.site_id,
            created_at: r.created_at,
            decided_at: r.decided_at,
            expires_at: r.expires_at,
        }
    }
}

/// `GET /v1/admin/join-requests?state=pending|approved|denied|expired|used|all&after=&limit=`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    /// `pending` when absent.
    state: Option<String>,
    /// Where the page starts (the [`super::admin::NEXT_CURSOR`] of the page before).
    after: Option<String>,
    /// Rows per page.
    limit: Option<u32>,
}

/// The state filter of a listing: `None` for `all`.
fn state_filter(state: Option<&str>) -> Result<Option<JoinRequestState>, ApiError> {
    match state.unwrap_or("pending") {
        "all" => Ok(None),
        other => other.parse().map(Some).map_err(|_| {
            ApiError::InvalidInput(
                "state must be pending, approved, denied, expired, used or all".into(),
            )
        }),
    }
}

/// The request id of a path, checked.
fn path_request_id(id: &str) -> Result<(), ApiError> {
    if is_id(id) {
        Ok(())
    } else {
        Err(ApiError::InvalidInput(
            "the join request id is not an id".into(),
        ))
    }
}

/// `GET /v1/admin/join-requests`: newest first, a page at a time; pending ones unless `state`
/// says otherwise.
pub(super) async fn list_join_requests(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<axum::response::Response, ApiError> {
    authorize(&state, &headers)?;
    let Query(query) = query.map_err(ApiError::from)?;
    let filter = state_filter(query.state.as_deref())?;
    let (before, limit) = ListPage {
        after: query.after,
        limit: query.limit,
    }
    .resolve::<Cursor>()?;
    let before = before.unwrap_or_else(Cursor::end);
    let mut tx = state.db.begin().await?;
    let rows = tx.list_join_requests(filter, &before, limit).await?;
    tx.commit().await?;
    let views: Vec<JoinRequestView> = rows.into_iter().map(JoinRequestView::from).collect();
    Ok(page(views, limit, |v: &JoinRequestView| Cursor {
        created_at: v.created_at,
        id: v.id.clone(),
    }))
}

/// `GET /v1/admin/join-requests/{id}`.
pub(super) async fn show_join_request(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<JoinRequestView>, ApiError> {
    authorize(&state, &headers)?;
    path_request_id(&id)?;
    let mut tx = state.db.begin().await?;
    let row = tx.find_join_request(&id).await?;
    tx.commit().await?;
    row.map(|r| Json(r.into())).ok_or(ApiError::NotFound)
}

/// `POST /v1/admin/join-requests/{id}/approve` body (optional: an empty body approves into
/// the root tenant, no pool, no site).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Approve {
    #[serde(default = "root")]
    tenant_id: String,
    #[serde(default)]
    pool_id: Option<String>,
    #[serde(default)]
    site_id: Option<String>,
}

fn root() -> String {
    "root".into()
}

/// The approval a body asks for, its ids checked.
fn approval(body: &[u8]) -> Result<JoinDecision, ApiError> {
    let approve: Approve = if body.iter().all(u8::is_ascii_whitespace) {
        Approve {
            tenant_id: root(),
            pool_id: None,
            site_id: None,
        }
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::InvalidInput(format!("the approval: {e}")))?
    };
    for (what, v) in [
        ("tenantId", Some(&approve.tenant_id)),
        ("poolId", approve.pool_id.as_ref()),
        ("siteId", approve.site_id.as_ref()),
    ] {
        if let Some(v) = v
            && !is_id(v)
        {
            return Err(ApiError::InvalidInput(format!("{what} is not an id")));
        }
    }
    Ok(JoinDecision::Approve {
        tenant_id: approve.tenant_id,
        pool_id: approve.pool_id,
        site_id: approve.site_id,
    })
}

/// `POST /v1/admin/join-requests/{id}/approve`: the machine's next round with the same CSR
/// is admitted, once, into the tenant (which must exist), pool (which must be the tenant's)
/// and site chosen.
pub(super) async fn approve_join_request(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<JoinRequestView>, ApiError> {
    authorize(&state, &headers)?;
    path_request_id(&id)?;
    let decision = approval(&body)?;
    decide(&state, &id, decision).await
}

/// `POST /v1/admin/join-requests/{id}/deny`: the machine's next round is refused.
pub(super) async fn deny_join_request(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<JoinRequestView>, ApiError> {
    authorize(&state, &headers)?;
    path_request_id(&id)?;
    decide(&state, &id, JoinDecision::Deny).await
}

/// Records `decision` on a pending request and its event, in one transaction; answers the
/// request as decided.
async fn decide(
    state: &AppState,
    id: &str,
    decision: JoinDecision,
) -> Result<Json<JoinRequestView>, ApiError> {
    let mut tx = state.db.begin().await?;
    let Some(request) = tx.find_join_request(id).await? else {
        tx.rollback().await?;
        return Err(ApiError::NotFound);
    };
    if request.state != JoinRequestState::Pending {
        tx.rollback().await?;
        return Err(ApiError::Conflict(format!(
            "the join request is {}, not pending",
            request.state.as_str()
        )));
    }
    if let JoinDecision::Approve {
        tenant_id, pool_id, ..
    } = &decision
    {
        if !tx.tenant_exists(tenant_id).await? {
            tx.rollback().await?;
            return Err(ApiError::InvalidInput(format!(
                "tenantId: there is no tenant {tenant_id}"
            )));
        }
        if let Some(pool_id) = pool_id
            && tx.pool(tenant_id, pool_id).await?.is_none()
        {
            tx.rollback().await?;
            return Err(ApiError::InvalidInput(format!(
                "poolId: tenant {tenant_id} has no pool {pool_id}"
            )));
        }
    }
    let at = tx.now().await?;
    if !tx.decide_join_request(id, &decision, at).await? {
        // It expired (or another decision landed) between the read and the update.
        tx.rollback().await?;
        return Err(ApiError::Conflict(
            "the join request is no longer pending".into(),
        ));
    }
    let (kind, tenant_id, pool_id, site_id) = match &decision {
        JoinDecision::Approve {
            tenant_id,
            pool_id,
            site_id,
        } => (
            "join-request.approved",
            Some(tenant_id.clone()),
            pool_id.clone(),
            site_id.clone(),
        ),
        JoinDecision::Deny => ("join-request.denied", None, None, None),
    };
    tx.insert_event(&NewEvent {
        at,
        kind: kind.to_owned(),
        tenant_id: tenant_id.clone(),
        node_id: None,
        attestor: Some(request.attestor.clone()),
        reason: None,
        token_id: None,
        payload: json!({
            "requestId": id,
            "attestor": request.attestor,
            "subject": request.subject,
            "csrSha256": hex::encode(request.csr_sha256),
            "tenantId": tenant_id,
            "poolId": pool_id,
            "siteId": site_id,
        }),
    })
    .await?;
    let decided = tx.find_join_request(id).await?;
    tx.commit().await?;
    tracing::info!(
        request_id = %id,
        attestor = %request.attestor,
        subject = %request.subject,
        tenant_id = tenant_id.as_deref().unwrap_or("-"),
        decision = kind,
        "join request decided"
    );
    decided.map(|r| Json(r.into())).ok_or(ApiError::NotFound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn approvals_default_to_root_and_check_ids() {
        let root = JoinDecision::Approve {
            tenant_id: "root".into(),
            pool_id: None,
            site_id: None,
        };
        assert_eq!(approval(b"").unwrap(), root);
        assert_eq!(approval(b"{}").unwrap(), root);
        assert_eq!(
            approval(br#"{"tenantId":"t","poolId":"p","siteId":"s"}"#).unwrap(),
            JoinDecision::Approve {
                tenant_id: "t".into(),
                pool_id: Some("p".into()),
                site_id: Some("s".into()),
            }
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

    #[test]
    fn listings_filter_by_state() {
        assert_eq!(state_filter(None).unwrap(), Some(JoinRequestState::Pending));
        assert_eq!(state_filter(Some("all")).unwrap(), None);
        assert_eq!(
            state_filter(Some("denied")).unwrap(),
            Some(JoinRequestState::Denied)
        );
        assert!(state_filter(Some("open")).is_err());
    }
}
