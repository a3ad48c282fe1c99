//! Events and audit records: append-only, read from a cursor.
//!
//! Ids increase in insertion order, but on Postgres a transaction that commits later can hold
//! a smaller id than one already visible, so `id > last` would skip it. A follower therefore
//! reads events in feed order, which no late commit can slip behind ([`Tx::event_feed`]). Audit
//! records are still read in id order: a reader that must see every one should re-read a
//! short window behind its cursor.

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

    /// Up to `limit` events with ids above `after_id`, in id order: every event visible now,
    /// but a reader following `id > last` can skip one that commits late (see
    /// [`Tx::event_feed`]).
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

    /// Up to `limit` events after the event `after_id` (0: from the start) in feed order:
    /// follow the feed by passing the last id returned. Never skips an event, and never
    /// returns one twice.
    ///
    /// Feed order is `(txid, id)`, where `txid` is the writing transaction's id. On Postgres
    /// ids come from a sequence and commit out of order, but a transaction id below the
    /// snapshot's `xmin` (the oldest transaction still running) belongs to a transaction that
    /// has finished, and every transaction still running or yet to write has an id at or above
    /// it. So the feed returns only events with `txid < xmin`: everything before that point is
    /// final, and whatever commits later sorts after it. The horizon is read in a statement of
    /// its own before the rows, whose snapshot therefore sees every transaction below it. An
    /// event is held back while an older writing transaction is still open (anywhere in the
    /// cluster), and appears once it ends. On SQLite writers are serialised, so ids are
    /// already in commit order and `txid` is 0.
    ///
    /// An `after_id` that is no event's id reads from the newest event below it.
    pub async fn event_feed(
        &mut self,
        after_id: i64,
        limit: u32,
    ) -> Result<Vec<EventRow>, StoreError> {
        let sql = self.pick(
            "SELECT 9223372036854775807 AS horizon",
            "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS horizon",
        );
        let row = self.fetch_one(sqlx::query(sql)).await?;
        let horizon = Fields::new(&row, "events").i64("horizon")?;
        let q = sqlx::query(
            "SELECT id, at, kind, tenant_id, node_id, attestor, reason, token_id, payload \
             FROM events WHERE txid < $1 AND (txid, id) > ( \
               COALESCE((SELECT txid FROM events WHERE id <= $2 ORDER BY id DESC LIMIT 1), -1), \
               $2) \
             ORDER BY txid, id LIMIT $3",
        )
        .bind(horizon)
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
