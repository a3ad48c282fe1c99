//! Events and audit records: append-only, read in id order from a cursor.
//!
//! Ids increase in insertion order. On Postgres a transaction that commits later can hold a
//! smaller id than one already visible, so a reader following the cursor should re-read a
//! short window behind it (or read only rows older than a few seconds) if it must see every
//! row; on SQLite writers are serialised and ids appear in order.

use sqlx::any::AnyRow;

use super::decode::Fields;
use super::{AuditRow, EventRow, NewAudit, NewEvent, StoreError, Tx};

fn event(row: &AnyRow) -> Result<EventRow, StoreError> {
    let f = Fields::new(row, "events");
    Ok(EventRow {
        id: f.i64("id")?,
        at: f.i64("at")?,
        kind: f.text("kind")?,
        tenant_id: f.opt_text("tenant_id")?,
        node_id: f.opt_text("node_id")?,
        attestor: f.opt_text("attestor")?,
        reason: f.opt_text("reason")?,
        token_id: f.opt_text("token_id")?,
        payload: f.json("payload")?,
    })
}

fn audit(row: &AnyRow) -> Result<AuditRow, StoreError> {
    let f = Fields::new(row, "audits");
    Ok(AuditRow {
        id: f.i64("id")?,
        at: f.i64("at")?,
        attestor: f.text("attestor")?,
        round: f.u32("round")?,
        result: f.parse("result")?,
        reason: f.opt_text("reason")?,
        node_id: f.opt_text("node_id")?,
        token_id: f.opt_text("token_id")?,
        subject: f.opt_text("subject")?,
        node_key: f.opt_text("node_key")?,
        csr_sha256: f.opt_sha256("csr_sha256")?,
        client_addr: f.opt_text("client_addr")?,
    })
}

impl Tx {
    /// Appends an event; its id.
    pub async fn insert_event(&mut self, e: &NewEvent) -> Result<i64, StoreError> {
        let q = sqlx::query(
            "INSERT INTO events (at, kind, tenant_id, node_id, attestor, reason, token_id, payload) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
        )
        .bind(e.at)
        .bind(&e.kind)
        .bind(&e.tenant_id)
        .bind(&e.node_id)
        .bind(&e.attestor)
        .bind(&e.reason)
        .bind(&e.token_id)
        .bind(e.payload.to_string());
        let row = self.fetch_one(q).await?;
        Fields::new(&row, "events").i64("id")
    }

    /// Appends an audit record; its id.
    pub async fn insert_audit(&mut self, a: &NewAudit) -> Result<i64, StoreError> {
        let q = sqlx::query(
            "INSERT INTO audits (at, attestor, round, result, reason, node_id, token_id, subject, \
             node_key, csr_sha256, client_addr) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING id",
        )
        .bind(a.at)
        .bind(&a.attestor)
        .bind(i64::from(a.round))
        .bind(a.result.as_str())
        .bind(&a.reason)
        .bind(&a.node_id)
        .bind(&a.token_id)
        .bind(&a.subject)
        .bind(&a.node_key)
        .bind(a.csr_sha256.as_ref().map(|d| &d[..]))
        .bind(&a.client_addr);
        let row = self.fetch_one(q).await?;
        Fields::new(&row, "audits").i64("id")
    }

    /// Up to `limit` events with ids above `after_id`, in id order.
    pub async fn list_events(
        &mut self,
        after_id: i64,
        limit: u32,
    ) -> Result<Vec<EventRow>, StoreError> {
        let q = sqlx::query(
            "SELECT id, at, kind, tenant_id, node_id, attestor, reason, token_id, payload \
             FROM events WHERE id > $1 ORDER BY id LIMIT $2",
        )
        .bind(after_id)
        .bind(i64::from(limit));
        let rows = self.fetch_all(q).await?;
        rows.iter().map(event).collect()
    }

    /// Up to `limit` audit records with ids above `after_id`, in id order.
    pub async fn list_audits(
        &mut self,
        after_id: i64,
        limit: u32,
    ) -> Result<Vec<AuditRow>, StoreError> {
        let q = sqlx::query(
            "SELECT id, at, attestor, round, result, reason, node_id, token_id, subject, \
             node_key, csr_sha256, client_addr FROM audits WHERE id > $1 ORDER BY id LIMIT $2",
        )
        .bind(after_id)
        .bind(i64::from(limit));
        let rows = self.fetch_all(q).await?;
        rows.iter().map(audit).collect()
    }
}
