//! Events and audit records, read a page at a time.
//!
//! Events come in feed order, which on Postgres is not id order: the cursor is the id of the
//! last event of the previous page, and no event is skipped or repeated (see
//! `Tx::event_feed`). Audit records come in id order, filtered by node, attestor, result and
//! time.

use super::types::{Audit, AuditQuery, Event};
use super::{OpsError, Page, PageRequest};
use crate::store::{AuditFilter, AuditRow, Db, EventRow};

fn event_view(e: EventRow) -> Event {
    Event {
        id: e.id,
        at: e.at,
        kind: e.kind,
        tenant_id: e.tenant_id,
        node_id: e.node_id,
        attestor: e.attestor,
        reason: e.reason,
        token_id: e.token_id,
        actor: e.actor,
        payload: e.payload,
    }
}

fn audit_view(a: AuditRow) -> Audit {
    Audit {
        id: a.id,
        at: a.at,
        attestor: a.attestor,
        round: a.round,
        result: a.result,
        reason: a.reason,
        node_id: a.node_id,
        token_id: a.token_id,
        subject: a.subject,
        node_key: a.node_key,
        csr_sha256: a.csr_sha256.map(hex::encode),
        client_addr: a.client_addr,
    }
}

/// Events after the event `page.after` (from the start when absent), in feed order. A
/// follower that reached the end keeps asking with the id of the last event it saw.
pub async fn events(db: &Db, page: &PageRequest) -> Result<Page<Event>, OpsError> {
    let (after, limit) = page.resolve::<i64>()?;
    let mut tx = db.begin().await?;
    let rows = tx.event_feed(after.unwrap_or(0), limit).await?;
    tx.commit().await?;
    let rows: Vec<Event> = rows.into_iter().map(event_view).collect();
    Ok(Page::new(rows, limit, |e: &Event| e.id))
}

/// Audit records matching `query`'s filters, in id order, a page at a time.
pub async fn audits(db: &Db, query: &AuditQuery) -> Result<Page<Audit>, OpsError> {
    let (after, limit) = PageRequest {
        after: query.after.clone(),
        limit: query.limit,
    }
    .resolve::<i64>()?;
    let filter = AuditFilter {
        node_id: query.node_id.as_ref().map(|id| id.to_string()),
        attestor: query.attestor.as_ref().map(|id| id.to_string()),
        result: query.result,
        since: query.since,
    };
    let mut tx = db.begin().await?;
    let rows = tx
        .list_audits_matching(after.unwrap_or(0), limit, &filter)
        .await?;
    tx.commit().await?;
    let rows: Vec<Audit> = rows.into_iter().map(audit_view).collect();
    Ok(Page::new(rows, limit, |a: &Audit| a.id))
}
