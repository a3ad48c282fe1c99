//! The transaction type, and how it stays safe when it is dropped half-way.
//!
//! A [`Tx`] owns a leased connection ([`super::lease`]) and manages the transaction with plain `BEGIN` /
//! `COMMIT` / `ROLLBACK` statements rather than sqlx's `Transaction`, whose `begin` can leave a
//! connection inside a transaction when cancelled between sending `BEGIN` and reading the
//! answer. The rule here: a connection goes back to the pool only after a `COMMIT` or
//! `ROLLBACK` of ours succeeded on it. A `Tx` dropped unfinished (a refusal path, a client that
//! hung up and cancelled the join's future at any await point, a failed commit) hands its
//! connection to a task that runs `ROLLBACK` (bounded by [`WAIT`]) and returns it to the pool
//! only if that succeeds; otherwise, or without a runtime to run the task, the connection is
//! closed, which makes the server (or SQLite) roll back.

use std::sync::Arc;

use futures::TryStreamExt as _;
use sqlx::any::{Any, AnyArguments, AnyRow};
use sqlx::query::Query;
use sqlx::{AnyConnection, Either, Execute as _, Executor};

use super::clock::Clock;
use super::db::WAIT;
use super::group::{self, GroupCommit};
use super::lease::{self, Connections, Lease};
use super::{Backend, StoreError};

/// Database time in ms since the Unix epoch.
const POSTGRES_NOW: &str = concat!("SELECT ", postgres_now!(), " AS now");

/// An open write transaction, owning its connection (`'static`, `Send`).
///
/// Finish it with [`Tx::commit`] or [`Tx::rollback`]. Dropping it, or cancelling any of its
/// futures, rolls it back (see the module documentation). Prefer an explicit `rollback` where
/// the code path allows: it reports failures. After a statement fails with
/// [`StoreError::Query`], `commit` rolls back and returns [`StoreError::Aborted`] (on Postgres
/// the transaction is already aborted; SQLite gets the same rule so callers behave alike).
///
/// Hold one `Tx` at a time per task: on SQLite the pool has a single connection, so a second
/// `begin` waits for the first `Tx` to end. On SQLite a `Tx` is a savepoint in a batch that
/// commits with one `COMMIT` ([`group`]); its `commit` returns once that batch committed. The
/// savepoint is taken by the transaction's first statement, in the same round trip. On
/// Postgres `BEGIN` is sent just before the first statement, so a transaction whose one
/// statement is its last can run it alone, in autocommit ([`Tx::commit_after`],
/// `super::admission`).
#[derive(Debug)]
pub struct Tx {
    /// Some until dropped.
    conn: Option<Lease>,
    backend: Backend,
    /// A `COMMIT` or `ROLLBACK` succeeded: the connection may go back to the pool.
    finished: bool,
    /// A statement failed: the transaction may only be rolled back.
    failed: bool,
    /// SQLite's batch this transaction is a member of; none on Postgres.
    group: Option<Arc<GroupCommit>>,
    /// A transaction whose begin is not sent yet: a batch member's
    /// ([`GroupCommit::begin_statement`]) goes in front of the first statement, one round trip
    /// to SQLite's worker thread fewer per transaction; Postgres' `BEGIN` just before it, or
    /// never when the one statement runs alone. Until then the connection is as the
    /// transaction found it, so one that ends without a statement has nothing to commit or
    /// roll back.
    unsent_begin: bool,
    /// A query ending with this batch member's release was sent: dropped unfinished, its
    /// release may have run, and its rollback must tell ([`PendingRollback::roll_back`]).
    /// Never cleared: a query that failed stopped before its release, which the rollback
    /// finds as it finds any savepoint.
    releasing: bool,
    /// The database's clock ([`Tx::now`]), shared by the [`super::Db`]'s transactions.
    clock: Arc<Clock>,
}

impl Drop for Tx {
    fn drop(&mut self) {
        if self.finished || self.unsent_begin {
            return; // The connection goes back to the pool with the field.
        }
        let Some(conn) = self.conn.take() else { return };
        let mut pending = PendingRollback {
            conn,
            group: self.group.clone(),
            maybe_released: self.releasing,
            rolled_back: false,
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let rollback = pending.roll_back();
                if let Ok(true) = tokio::time::timeout(WAIT, rollback).await {
                    pending.rolled_back();
                }
            });
        }
        // Without a runtime, `pending` drops here and closes the connection.
    }
}

/// A connection whose transaction was abandoned. Dropped before its rollback succeeded (the
/// rollback failed or timed out, or its task never ran), it closes the connection instead
/// of returning it to the pool.
struct PendingRollback {
    conn: Lease,
    group: Option<Arc<GroupCommit>>,
    /// [`Tx::releasing`]: the member was dropped while the query releasing its savepoint ran.
    maybe_released: bool,
    rolled_back: bool,
}

impl PendingRollback {
    /// The rollback succeeded: the connection may go back to the pool.
    fn rolled_back(&mut self) {
        self.rolled_back = true;
    }

    /// Rolls the abandoned transaction back; whether the connection is clean.
    async fn roll_back(&mut self) -> bool {
        match &self.group {
            None => self.conn.execute("ROLLBACK").await.is_ok(),
            Some(group) => member_rolled_back(group, &mut self.conn, self.maybe_released).await,
        }
    }
}

impl Drop for PendingRollback {
    fn drop(&mut self) {
        if !self.rolled_back {
            if let Some(group) = &self.group {
                group.fail_all("the write connection was closed after a failed rollback");
            }
            self.conn.discard();
        }
    }
}

/// Rolls back a batch member's savepoint, or the whole batch if that fails; whether the
/// connection is clean.
///
/// `maybe_released`: the member was dropped while the query ending with its release ran (its
/// client hung up, its request timed out), so its savepoint may be gone because the release
/// ran, and its writes, whole, are now the batch's, which cannot drop them without dropping
/// every other member's too. So they stay and commit with the batch, unanswered (as a
/// PostgreSQL statement in autocommit that completes after its caller left), rather than
/// failing the batch's other members ([`GroupCommit::adopt_released`]).
async fn member_rolled_back(
    group: &Arc<GroupCommit>,
    conn: &mut AnyConnection,
    maybe_released: bool,
) -> bool {
    match conn.execute(group::ROLLBACK_MEMBER).await {
        Ok(_) => group.after_rollback(conn).await,
        Err(e) if maybe_released && group::savepoint_gone(&e) => group.adopt_released(conn).await,
        Err(e) => group.abort(conn, &e.to_string()).await,
    }
}

impl Tx {
    pub(super) async fn begin(
        pool: &Arc<Connections>,
        backend: Backend,
        group: Option<&Arc<GroupCommit>>,
        clock: &Arc<Clock>,
    ) -> Result<Tx, StoreError> {
        let conn = pool.acquire().await?;
        // From here on, dropping this future drops the Tx, which rolls back.
        let mut tx = Tx {
            conn: Some(conn),
            backend,
            finished: false,
            failed: false,
            group: group.cloned(),
            unsent_begin: false,
            releasing: false,
            clock: clock.clone(),
        };
        if tx.group.is_some() || backend == Backend::Postgres {
            tx.unsent_begin = true;
            return Ok(tx);
        }
        // Takes SQLite's write lock at once: a deferred `BEGIN` that reads first fails with
        // "database is locked" on its first write, without waiting for the busy timeout.
        let done = tx.conn()?.execute("BEGIN IMMEDIATE").await;
        tx.check(done)?;
        Ok(tx)
    }

    /// A connection in autocommit mode: every statement is its own transaction, nothing to
    /// roll back when dropped. Only for reads (the read pool refuses writes on SQLite).
    pub(super) async fn autocommit(
        pool: &Arc<Connections>,
        backend: Backend,
        clock: &Arc<Clock>,
    ) -> Result<Tx, StoreError> {
        let conn = pool.acquire().await?;
        Ok(Tx {
            conn: Some(conn),
            backend,
            finished: true,
            failed: false,
            group: None,
            unsent_begin: false,
            releasing: false,
            clock: clock.clone(),
        })
    }

    /// Which backend this transaction runs on.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Commits. If a statement failed earlier, rolls back instead and returns
    /// [`StoreError::Aborted`]. On SQLite, returns once the batch this transaction joined
    /// committed ([`group`]).
    pub async fn commit(mut self) -> Result<(), StoreError> {
        if self.failed {
            self.roll_back().await?;
            return Err(StoreError::Aborted);
        }
        if self.unsent_begin {
            return Ok(()); // No statement ran: nothing to commit.
        }
        let Some(group) = self.group.clone() else {
            return self.end("COMMIT").await;
        };
        // A failed release leaves the Tx unfinished: dropped, it rolls back. Dropped while
        // the release ran, its rollback finds out whether it did (`PendingRollback`).
        self.releasing = true;
        self.end(group::RELEASE).await?;
        self.released(group).await
    }

    /// Runs a last statement and commits, in one round trip where a batch member's commit is
    /// a statement ([`group::RELEASE`]): `last(true)` must then end with it; otherwise
    /// `last(false)` runs and then the commit. As [`Tx::commit`], a transaction whose statement
    /// failed rolls back instead (running neither) and returns [`StoreError::Aborted`]; a failure
    /// of the last statement leaves it uncommitted, and dropped it rolls back.
    pub(super) async fn commit_after<'q>(
        mut self,
        last: impl FnOnce(bool) -> Query<'q, Any, AnyArguments<'q>>,
    ) -> Result<(), StoreError> {
        if self.failed {
            self.roll_back().await?;
            return Err(StoreError::Aborted);
        }
        let Some(group) = self.group.clone() else {
            if self.unsent_begin {
                // Nothing sent yet: the last statement is the whole transaction, which the
                // server commits on its own (autocommit), one round trip for three.
                return self.fetch_in_autocommit(last(false)).await.map(drop);
            }
            self.execute(last(false)).await?;
            return self.end("COMMIT").await;
        };
        self.releasing = true;
        self.execute(last(true)).await?;
        self.released(group).await
    }

    /// Runs `query` on its own, in autocommit: the server commits it when it ends. Only for a
    /// Postgres transaction of which nothing was sent ([`Tx::nothing_sent`]; else
    /// [`StoreError::Aborted`], nothing sent), whose one statement is its whole write; the
    /// transaction stays unsent, so it has nothing to commit or roll back after.
    pub(super) async fn fetch_in_autocommit<'q>(
        &mut self,
        query: Query<'q, Any, AnyArguments<'q>>,
    ) -> Result<Option<AnyRow>, StoreError> {
        if !self.unsent_begin || self.group.is_some() || self.failed {
            return Err(StoreError::Aborted);
        }
        let result = self.conn()?.fetch_optional(query).await;
        self.check(result)
    }

    /// Runs `query`, whose last statement releases this batch member's savepoint
    /// ([`group::RELEASE`]), in one round trip with the savepoint itself, and waits for the
    /// batch's `COMMIT`; the rows the query returned. Only for a SQLite batch member of which
    /// nothing was sent ([`Tx::nothing_sent`]; else [`StoreError::Aborted`], nothing sent). A
    /// failure of the query leaves the member unfinished: dropped, it rolls back.
    pub(super) async fn fetch_all_releasing<'q>(
        mut self,
        query: Query<'q, Any, AnyArguments<'q>>,
    ) -> Result<Vec<AnyRow>, StoreError> {
        let Some(group) = self.group.clone().filter(|_| self.unsent_begin) else {
            return Err(StoreError::Aborted);
        };
        self.releasing = true;
        let rows = self.fetch_all(query).await?;
        self.released(group).await?;
        Ok(rows)
    }

    /// Whether nothing of this transaction was sent yet ([`Tx::commit_after`] would run its
    /// last statement on its own, in autocommit, on Postgres; a SQLite batch member's next
    /// query would take its savepoint).
    pub(super) fn nothing_sent(&self) -> bool {
        self.unsent_begin
    }

    /// After a statement released this member's savepoint: waits for the batch's `COMMIT`.
    async fn released(mut self, group: Arc<GroupCommit>) -> Result<(), StoreError> {
        self.finished = true;
        let committed = group.join();
        // The connection goes back to the pool for the batch's next member or its flusher.
        drop(self);
        match committed.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(why)) => Err(StoreError::BatchLost(why)),
            Err(_) => Err(StoreError::BatchLost("its flusher stopped".into())),
        }
    }

    /// Rolls back.
    pub async fn rollback(mut self) -> Result<(), StoreError> {
        self.roll_back().await
    }

    async fn roll_back(&mut self) -> Result<(), StoreError> {
        if self.unsent_begin {
            return Ok(()); // No statement ran: nothing to roll back.
        }
        let Some(group) = self.group.clone() else {
            return self.end("ROLLBACK").await;
        };
        // Unfinished on failure: dropped, the connection is closed (and the batch with it).
        // Never after a release: a member that released is finished, or dropped.
        if member_rolled_back(&group, self.conn()?, false).await {
            self.finished = true;
            Ok(())
        } else {
            Err(StoreError::BatchLost("a rollback failed".into()))
        }
    }

    async fn end(&mut self, statement: &'static str) -> Result<(), StoreError> {
        self.conn()?.execute(statement).await?;
        self.finished = true;
        Ok(())
    }

    /// The database's clock in ms since the Unix epoch: the one clock expiry is decided by,
    /// shared by every replica. A statement only on Postgres, and there at most once a second
    /// per [`super::Db`]: see [`super::clock`].
    pub async fn now(&mut self) -> Result<i64, StoreError> {
        if let Some(ms) = self.clock.here() {
            return Ok(ms);
        }
        let row = self.fetch_one(sqlx::query(POSTGRES_NOW)).await?;
        let ms = super::decode::Fields::new(&row, "now").i64("now")?;
        self.clock.read(ms);
        Ok(ms)
    }

    /// A statement that reads nothing, sent to the database: whether it answers. Not
    /// [`Tx::now`], which on Postgres may answer from the last reading of its clock.
    pub async fn ping(&mut self) -> Result<(), StoreError> {
        self.fetch_one(sqlx::query("SELECT 1 AS one"))
            .await
            .map(drop)
    }

    /// Chooses the statement for this backend.
    pub(super) fn pick(&self, sqlite: &'static str, postgres: &'static str) -> &'static str {
        match self.backend {
            Backend::Sqlite => sqlite,
            Backend::Postgres => postgres,
        }
    }

    /// The connection; [`StoreError::Aborted`] once it was handed to a rollback (which only
    /// happens in `drop`, so no caller sees it).
    fn conn(&mut self) -> Result<&mut AnyConnection, StoreError> {
        self.conn.as_deref_mut().ok_or(StoreError::Aborted)
    }

    fn check<T>(&mut self, result: Result<T, sqlx::Error>) -> Result<T, StoreError> {
        if let Err(e) = &result {
            self.failed = true;
            if lease::lost(e)
                && let Some(conn) = &mut self.conn
            {
                conn.discard();
            }
        }
        result.map_err(StoreError::Query)
    }

    /// Runs a statement; the number of rows it changed.
    pub(super) async fn execute<'q>(
        &mut self,
        query: Query<'q, Any, AnyArguments<'q>>,
    ) -> Result<u64, StoreError> {
        if let Some(group) = self.send_unsent_begin().await? {
            return Ok(self.after_begin(&group, query).await?.rows_affected);
        }
        let result = self.conn()?.execute(query).await;
        self.check(result).map(|done| done.rows_affected())
    }

    /// Runs a query that returns at most one row.
    pub(super) async fn fetch_optional<'q>(
        &mut self,
        query: Query<'q, Any, AnyArguments<'q>>,
    ) -> Result<Option<AnyRow>, StoreError> {
        if let Some(group) = self.send_unsent_begin().await? {
            return Ok(self
                .after_begin(&group, query)
                .await?
                .rows
                .into_iter()
                .next());
        }
        let result = self.conn()?.fetch_optional(query).await;
        self.check(result)
    }

    /// Runs a query that returns exactly one row.
    pub(super) async fn fetch_one<'q>(
        &mut self,
        query: Query<'q, Any, AnyArguments<'q>>,
    ) -> Result<AnyRow, StoreError> {
        if let Some(group) = self.send_unsent_begin().await? {
            let row = self
                .after_begin(&group, query)
                .await?
                .rows
                .into_iter()
                .next();
            return self.check(row.ok_or(sqlx::Error::RowNotFound));
        }
        let result = self.conn()?.fetch_one(query).await;
        self.check(result)
    }

    /// Runs a query and collects its rows.
    pub(super) async fn fetch_all<'q>(
        &mut self,
        query: Query<'q, Any, AnyArguments<'q>>,
    ) -> Result<Vec<AnyRow>, StoreError> {
        if let Some(group) = self.send_unsent_begin().await? {
            return Ok(self.after_begin(&group, query).await?.rows);
        }
        let result = self.conn()?.fetch_all(query).await;
        self.check(result)
    }

    /// A transaction whose begin is still to be sent: a batch member's batch, whose begin the
    /// caller sends in front of its statement; Postgres' `BEGIN` is sent here, alone (the
    /// extended protocol's statements cannot carry it).
    async fn send_unsent_begin(&mut self) -> Result<Option<Arc<GroupCommit>>, StoreError> {
        if !std::mem::take(&mut self.unsent_begin) {
            return Ok(None);
        }
        if let Some(group) = &self.group {
            return Ok(Some(group.clone()));
        }
        // The write pool's connections bound every statement (`db::POSTGRES_WRITE_SETTINGS`).
        let done = self.conn()?.execute("BEGIN").await;
        self.check(done)?;
        Ok(None)
    }

    /// Runs the member's begin and then `query` as one query, one round trip: SQLite runs a
    /// query's statements in order and stops at the first that fails, so this is the begin
    /// sent alone and then `query`.
    async fn after_begin<'q>(
        &mut self,
        group: &GroupCommit,
        mut query: Query<'q, Any, AnyArguments<'q>>,
    ) -> Result<Ran, StoreError> {
        let arguments = match query.take_arguments() {
            Ok(arguments) => arguments,
            Err(e) => {
                self.unsent_begin = true; // Nothing was sent.
                return self.check(Err(sqlx::Error::Encode(e)));
            }
        };
        let begin = group.begin_statement();
        let sql = format!("{begin}; {}", query.sql());
        let query = match arguments {
            Some(arguments) => sqlx::query_with(&sql, arguments),
            None => sqlx::query(&sql),
        };
        // The begin statements hold no `;` of their own.
        let ran = collect(self.conn()?, query, begin.split(';').count()).await;
        self.check(ran)
    }
}

/// Runs `query`, whose first `skip` statements are a batch member's begin: the rows of the
/// rest and the rows they changed (SQLite reports, for a `BEGIN` or `SAVEPOINT`, the change
/// count of an earlier statement, so theirs are not counted).
async fn collect<'q>(
    conn: &mut AnyConnection,
    query: Query<'q, Any, AnyArguments<'q>>,
    mut skip: usize,
) -> Result<Ran, sqlx::Error> {
    let mut steps = conn.fetch_many(query);
    let mut ran = Ran::default();
    while let Some(step) = steps.try_next().await? {
        match step {
            Either::Left(_) if skip > 0 => skip -= 1,
            Either::Left(done) => ran.rows_affected += done.rows_affected(),
            Either::Right(row) => ran.rows.push(row),
        }
    }
    Ok(ran)
}

/// What a query sent with a batch member's begin returned ([`Tx::after_begin`]).
#[derive(Default)]
struct Ran {
    rows: Vec<AnyRow>,
    rows_affected: u64,
}
