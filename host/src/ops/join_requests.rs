//! Operator approval of join requests: list what attestors are waiting on (with what each
//! saw), approve into a tenant, pool and site, or deny.
//!
//! An attestor opens a request in a join round it cannot decide and defers; the machine's
//! agent retries with the same CSR. A decision is one transaction that records it only while
//! the request is still pending and unexpired (a later decision is [`OpsError::Conflict`]) and
//! appends its event, `join-request.approved` or `join-request.denied`, naming the operator.
//! The attestor reads the decision on the machine's next round: an approval admits that CSR
//! once, into the placement chosen here.

use serde_json::{Value, json};

use super::types::{Approve, JoinRequest, JoinRequestQuery};
use super::{Actor, Id, OpsError, Page, PageRequest, event, record};
use crate::store::{Cursor, Db, JoinDecision, JoinRequestRow, JoinRequestState};

/// A join request row as the API shows it.
pub(crate) fn view(r: JoinRequestRow) -> JoinRequest {
    // The store only accepts JSON `details`; a row that still is not shows as a string.
    let details = serde_json::from_str(&r.details).unwrap_or(Value::String(r.details));
    JoinRequest {
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

/// The state filter of a listing: `None` for `all`.
fn state_filter(state: Option<&str>) -> Result<Option<JoinRequestState>, OpsError> {
    match state.unwrap_or("pending") {
        "all" => Ok(None),
        other => other.parse().map(Some).map_err(|_| {
            OpsError::invalid("state must be pending, approved, denied, expired, used or all")
        }),
    }
}

/// Join requests, newest first, a page at a time; pending ones unless `state` says otherwise.
pub async fn list(db: &Db, query: &JoinRequestQuery) -> Result<Page<JoinRequest>, OpsError> {
    let filter = state_filter(query.state.as_deref())?;
    let (before, limit) = PageRequest {
        after: query.after.clone(),
        limit: query.limit,
    }
    .resolve::<Cursor>()?;
    let before = before.unwrap_or_else(Cursor::end);
    let mut tx = db.begin().await?;
    let rows = tx.list_join_requests(filter, &before, limit).await?;
    tx.commit().await?;
    let rows: Vec<JoinRequest> = rows.into_iter().map(view).collect();
    Ok(Page::new(rows, limit, |r: &JoinRequest| Cursor {
        created_at: r.created_at,
        id: r.id.clone(),
    }))
}

/// One join request.
pub async fn show(db: &Db, id: &Id) -> Result<JoinRequest, OpsError> {
    let mut tx = db.begin().await?;
    let row = tx.find_join_request(id).await?;
    tx.commit().await?;
    row.map(view).ok_or(OpsError::NotFound)
}

/// Approves a pending request: the machine's next round with the same CSR is admitted, once,
/// into the tenant (which must exist), pool (which must be the tenant's) and site chosen.
pub async fn approve(
    db: &Db,
    actor: &Actor,
    id: &Id,
    req: Approve,
) -> Result<JoinRequest, OpsError> {
    decide(
        db,
        actor,
        id,
        JoinDecision::Approve {
            tenant_id: req.tenant_id.into_string(),
            pool_id: req.pool_id.map(Id::into_string),
            site_id: req.site_id.map(Id::into_string),
        },
    )
    .await
}

/// Denies a pending request: the machine's next round is refused.
pub async fn deny(db: &Db, actor: &Actor, id: &Id) -> Result<JoinRequest, OpsError> {
    decide(db, actor, id, JoinDecision::Deny).await
}

/// Records `decision` on a pending request and its event, in one transaction; answers the
/// request as decided.
async fn decide(
    db: &Db,
    actor: &Actor,
    id: &Id,
    decision: JoinDecision,
) -> Result<JoinRequest, OpsError> {
    let mut tx = db.begin().await?;
    let Some(request) = tx.find_join_request(id).await? else {
        tx.rollback().await?;
        return Err(OpsError::NotFound);
    };
    if request.state != JoinRequestState::Pending {
        tx.rollback().await?;
        return Err(OpsError::Conflict(format!(
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
            return Err(OpsError::invalid(format!(
                "tenantId: there is no tenant {tenant_id}"
            )));
        }
        if let Some(pool_id) = pool_id
            && tx.pool(tenant_id, pool_id).await?.is_none()
        {
            tx.rollback().await?;
            return Err(OpsError::invalid(format!(
                "poolId: tenant {tenant_id} has no pool {pool_id}"
            )));
        }
    }
    let at = tx.now().await?;
    if !tx.decide_join_request(id, &decision, at).await? {
        // It expired (or another decision landed) between the read and the update.
        tx.rollback().await?;
        return Err(OpsError::Conflict(
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
    let mut e = event(
        at,
        kind,
        json!({
            "requestId": id,
            "attestor": request.attestor,
            "subject": request.subject,
            "csrSha256": hex::encode(request.csr_sha256),
            "tenantId": tenant_id,
            "poolId": pool_id,
            "siteId": site_id,
        }),
    );
    e.tenant_id = tenant_id.clone();
    e.attestor = Some(request.attestor.clone());
    record(&mut tx, actor, &e).await?;
    let decided = tx.find_join_request(id).await?;
    tx.commit().await?;
    tracing::info!(
        request_id = %id,
        attestor = %request.attestor,
        subject = %request.subject,
        tenant_id = tenant_id.as_deref().unwrap_or("-"),
        decision = kind,
        %actor,
        "join request decided"
    );
    decided.map(view).ok_or(OpsError::NotFound)
}

#[cfg(test)]
mod tests {
    use super::*;

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
