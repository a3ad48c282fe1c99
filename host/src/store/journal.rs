//! Events and audit records: append-only, read from a cursor.
//!
//! Ids increase in insertion order, but on Postgres a transaction that commits later can hold
//! a smaller id than one already visible, so `id > last` would skip it. A follower therefore
//! reads events in feed order, which no late commit can slip behind ([`Tx::event_feed`]). Audit
//! records are still read in id order: a reader that must see every one should re-read a
//! short window behind its cursor.

use sqlx::any::AnyRow;

use super::decode::Fields;
use super::{AuditResult, AuditRow, EventRow, NewAudit, NewEvent, StoreError, TokenRow, Tx};

/// Which audit records [`Tx::list_audits_matching`] reads: each field, when set, must match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditFilter {
    /// The node admitted or concerned.
    pub node_id: Option<String>,
    /// The attestor that ran.
    pub attestor: Option<String>,
    /// How the round ended.
    pub result: Option<AuditResult>,
    /// Rounds that ended at or after this time.
    pub since: Option<i64>,
}

/// The columns [`event`] reads.
const EVENT_COLUMNS: &str =
    "id, at, kind, tenant_id, node_id, attestor, reason, token_id, actor, payload";

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
        actor: f.opt_text("actor")?,
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

/// `q` with an audit record's eleven columns bound as `$1` to `$11`.
fn bind_audit<'q>(
    q: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    a: &'q NewAudit,
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    q.bind(a.at)
        .bind(&a.attestor)
        .bind(i64::from(a.round))
        .bind(a.result.as_str())
        .bind(&a.reason)
        .bind(&a.node_id)
        .bind(&a.token_id)
        .bind(&a.subject)
        .bind(&a.node_key)
        .bind(a.csr_sha256.as_ref().map(|d| &d[..]))
        .bind(&a.client_addr)
}

/// SQLite's audit row and event ([`Tx::insert_audit_and_event`]): two statements, numbered
/// parameters counting across both. A macro, so that [`SQLITE_AUDIT_EVENT_RELEASE`] can extend
/// it.
macro_rules! sqlite_audit_and_event {
    () => {
        "INSERT INTO audits (at, attestor, round, result, reason, node_id, token_id, \
         subject, node_key, csr_sha256, client_addr) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11); \
         INSERT INTO events (at, kind, tenant_id, node_id, attestor, reason, token_id, actor, \
         payload) VALUES ($12, $13, $14, $15, $16, $17, $18, $19, $20)"
    };
}

/// [`sqlite_audit_and_event`], then a batch member's commit ([`super::group::RELEASE`]).
const SQLITE_AUDIT_EVENT_RELEASE: &str = concat!(
    sqlite_audit_and_event!(),
    "; ",
    super::group::release_member!()
);

/// Postgres' audit row and event: one statement (a data-modifying `WITH` runs whether or not
/// the statement reads it).
const POSTGRES_AUDIT_AND_EVENT: &str = "WITH audit AS (INSERT INTO audits (at, attestor, round, \
     result, reason, node_id, token_id, subject, node_key, csr_sha256, client_addr) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING id) \
     INSERT INTO events (at, kind, tenant_id, node_id, attestor, reason, token_id, actor, \
     payload) VALUES ($12, $13, $14, $15, $16, $17, $18, $19, $20)";

/// Postgres' spend of a token's use with the round's audit row and event
/// ([`Tx::spend_token_recording`]): one statement, whose inserts run once per row spent, so
/// none when the token had no use left. `$21` is the token.
const POSTGRES_SPEND_AND_RECORD: &str = concat!(
    "WITH spent AS (UPDATE join_tokens SET uses_left = uses_left - 1 \
     WHERE id = $21 AND uses_left > 0 RETURNING ",
    token_columns!(),
    "), ",
    record_from_spent!(),
    " SELECT ",
    token_columns!(),
    " FROM spent"
);

/// SQLite's ([`POSTGRES_SPEND_AND_RECORD`]): three statements sent as one query, the inserts
/// each conditional on the statement before it having changed a row (`changes()`).
const SQLITE_SPEND_AND_RECORD: &str = concat!(
    "UPDATE join_tokens SET uses_left = uses_left - 1 WHERE id = $21 AND uses_left > 0 \
     RETURNING ",
    token_columns!(),
    "; ",
    sqlite_record_after_change!()
);

/// `sql` (one of the above) with an audit record bound as `$1` to `$11` and its event (the
/// host's own: no actor) as `$12` to `$20`.
pub(super) fn bind_audit_and_event<'q>(
    sql: &'static str,
    a: &'q NewAudit,
    e: &'q NewEvent,
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    bind_event(bind_audit(sqlx::query(sql), a), e, None)
}

/// `q` with an event's nine columns bound next, in `events`' column order (`at` to `payload`).
fn bind_event<'q>(
    q: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    e: &'q NewEvent,
    actor: Option<&'q str>,
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    q.bind(e.at)
        .bind(&e.kind)
        .bind(&e.tenant_id)
        .bind(&e.node_id)
        .bind(&e.attestor)
        .bind(&e.reason)
        .bind(&e.token_id)
        .bind(actor)
        .bind(e.payload.to_string())
}

impl Tx {
    /// Appends an event the host raised on its own (no actor); its id.
    pub async fn insert_event(&mut self, e: &NewEvent) -> Result<i64, StoreError> {
        self.insert_event_by(e, None).await
    }

    /// Appends an event, naming the admin identity whose action it records; its id.
    pub async fn insert_event_by(
        &mut self,
        e: &NewEvent,
        actor: Option<&str>,
    ) -> Result<i64, StoreError> {
        let q = sqlx::query(
            "INSERT INTO events (at, kind, tenant_id, node_id, attestor, reason, token_id, actor, \
             payload) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id",
        );
        let row = self.fetch_one(bind_event(q, e, actor)).await?;
        Fields::new(&row, "events").i64("id")
    }

    /// Appends a round's audit record and its event in one round trip, a statement fewer in
    /// every join's locked phase: on Postgres one statement; on SQLite, which has no
    /// data-modifying `WITH`, two statements sent as one query (sqlx runs each in turn).
    pub async fn insert_audit_and_event(
        &mut self,
        a: &NewAudit,
        e: &NewEvent,
    ) -> Result<(), StoreError> {
        let sql = self.pick(sqlite_audit_and_event!(), POSTGRES_AUDIT_AND_EVENT);
        self.execute(bind_audit_and_event(sql, a, e)).await?;
        Ok(())
    }

    /// [`Tx::insert_audit_and_event`], then [`Tx::commit`]. On SQLite the two inserts and the
    /// release of this transaction's savepoint into its batch (the group commit) are one
    /// query: the last round trip of a join's locked phase is its record's. As with
    /// [`Tx::commit`], a transaction whose statement failed rolls back and answers
    /// [`StoreError::Aborted`]; a failure of the record itself leaves the transaction
    /// uncommitted, and dropped it rolls back, as after any failed statement.
    pub async fn commit_with_audit_and_event(
        self,
        a: &NewAudit,
        e: &NewEvent,
    ) -> Result<(), StoreError> {
        let alone = self.pick(sqlite_audit_and_event!(), POSTGRES_AUDIT_AND_EVENT);
        self.commit_after(|releases| {
            let sql = if releases {
                SQLITE_AUDIT_EVENT_RELEASE
            } else {
                alone
            };
            bind_audit_and_event(sql, a, e)
        })
        .await
    }

    /// Spends a use of token `id` ([`Tx::spend_token`]) and appends a round's audit record and
    /// event ([`Tx::insert_audit_and_event`]), in one round trip: the last statements of an
    /// admitting round before its commit. On Postgres the spend takes the token's row lock, so
    /// the joins on one many-use token hold it for this statement and the commit only. The
    /// record is written only with the spend: [`StoreError::NoUsesLeft`] (no use left, or no
    /// such token) writes nothing.
    pub async fn spend_token_recording(
        &mut self,
        id: &str,
        a: &NewAudit,
        e: &NewEvent,
    ) -> Result<TokenRow, StoreError> {
        let sql = self.pick(SQLITE_SPEND_AND_RECORD, POSTGRES_SPEND_AND_RECORD);
        // All rows: sqlx stops SQLite's statements at the first row it was asked for.
        let rows = self
            .fetch_all(bind_audit_and_event(sql, a, e).bind(id))
            .await?;
        match rows.first() {
            Some(row) => super::tokens::token(row),
            None => Err(StoreError::NoUsesLeft),
        }
    }

    /// Appends an audit record; its id.
    pub async fn insert_audit(&mut self, a: &NewAudit) -> Result<i64, StoreError> {
        let q = sqlx::query(
            "INSERT INTO audits (at, attestor, round, result, reason, node_id, token_id, subject, \
             node_key, csr_sha256, client_addr) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING id",
        );
        let row = self.fetch_one(bind_audit(q, a)).await?;
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
        let sql = format!("SELECT {EVENT_COLUMNS} FROM events WHERE id > $1 ORDER BY id LIMIT $2");
        let q = sqlx::query(&sql).bind(after_id).bind(i64::from(limit));
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
        let sql = format!(
            "SELECT {EVENT_COLUMNS} \
             FROM events WHERE txid < $1 AND (txid, id) > ( \
               COALESCE((SELECT txid FROM events WHERE id <= $2 ORDER BY id DESC LIMIT 1), -1), \
               $2) \
             ORDER BY txid, id LIMIT $3"
        );
        let q = sqlx::query(&sql)
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
        self.list_audits_matching(after_id, limit, &AuditFilter::default())
            .await
    }

    /// Up to `limit` audit records with ids above `after_id` that match `filter`, in id
    /// order.
    pub async fn list_audits_matching(
        &mut self,
        after_id: i64,
        limit: u32,
        filter: &AuditFilter,
    ) -> Result<Vec<AuditRow>, StoreError> {
        // An unset filter binds NULL and matches every row; the `CAST`s give Postgres the
        // parameters' types where NULL alone has none.
        let q = sqlx::query(
            "SELECT id, at, attestor, round, result, reason, node_id, token_id, subject, \
             node_key, csr_sha256, client_addr FROM audits WHERE id > $1 \
             AND (CAST($3 AS TEXT) IS NULL OR node_id = $3) \
             AND (CAST($4 AS TEXT) IS NULL OR attestor = $4) \
             AND (CAST($5 AS TEXT) IS NULL OR result = $5) \
             AND (CAST($6 AS BIGINT) IS NULL OR at >= $6) \
             ORDER BY id LIMIT $2",
        )
        .bind(after_id)
        .bind(i64::from(limit))
        .bind(&filter.node_id)
        .bind(&filter.attestor)
        .bind(filter.result.map(AuditResult::as_str))
        .bind(filter.since);
        let rows = self.fetch_all(q).await?;
        rows.iter().map(audit).collect()
    }
}
