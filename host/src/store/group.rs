//! SQLite's group commit: many write transactions, one `COMMIT`, one wait for the disk.
//!
//! SQLite admits one writer, and with `synchronous = FULL` every `COMMIT` waits for the disk
//! (1 to 3 ms on this project's machine), so with one commit per join the disk sets the pace,
//! not the work. So on SQLite every [`super::Tx`] is a savepoint inside a *batch*: one
//! `BEGIN IMMEDIATE` transaction on the single write connection. A transaction's own commit
//! releases its savepoint, hands the connection to the next transaction waiting for it, and
//! waits: a flusher task, queued for the connection behind the transactions already waiting
//! when the batch's first member released, then commits them all with one `COMMIT`.
//!
//! What this keeps:
//! - A caller hears "committed" only after the batch's `COMMIT` returned: nothing it was told
//!   is durable can be lost, and no join is answered before its rows are.
//! - A transaction that rolls back (or is dropped, or whose statement failed) rolls back its
//!   own savepoint only; the batch's other members are untouched.
//! - Transactions still run one at a time, each seeing what earlier members wrote, so every
//!   exactly-once check (a token's uses, the ledger, a binding) holds as before.
//! - If the batch itself cannot be kept (a savepoint that cannot be rolled back, a `COMMIT`
//!   that fails), the batch is rolled back whole and every member waiting on it fails: none of
//!   their writes committed, so each caller's "try again" is true. A member dropped after its
//!   release ran is not such a failure: its writes are whole and commit with the batch
//!   ([`GroupCommit::adopt_released`]).
//! - An open batch always has a flusher queued or is closed at once, so SQLite's write lock is
//!   never left held by a batch with nobody to commit it.
//!
//! PostgreSQL needs none of this: its commits from many connections already share one flush
//! of the write-ahead log.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use sqlx::{AnyConnection, Executor};
use tokio::sync::oneshot;

use super::checkpoint::Checkpointer;
use super::lease::Connections;

/// Opens a batch and the first member's savepoint in one round trip.
pub(super) const OPEN_BATCH: &str = "BEGIN IMMEDIATE; SAVEPOINT tx";
/// A further member's savepoint inside the open batch.
pub(super) const JOIN_BATCH: &str = "SAVEPOINT tx";
/// [`RELEASE`]'s text, for statements that end with it (`Tx::commit_with_audit_and_event`).
macro_rules! release_member {
    () => {
        "RELEASE tx"
    };
}
pub(super) use release_member;
/// A member's commit: its writes become part of the batch.
pub(super) const RELEASE: &str = release_member!();
/// A member's rollback: its writes are undone, the batch's other members' are not.
pub(super) const ROLLBACK_MEMBER: &str = "ROLLBACK TO tx; RELEASE tx";

/// Whether `e`, the answer to [`ROLLBACK_MEMBER`], says the member's savepoint does not exist.
pub(super) fn savepoint_gone(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(e) if e.message().starts_with("no such savepoint"))
}

/// The batch state of the one SQLite write connection. Only the task holding that connection
/// changes it, so it always describes the connection.
#[derive(Debug)]
pub(super) struct GroupCommit {
    pool: Arc<Connections>,
    /// Told of every committed batch, to copy the WAL into the database file soon after.
    checkpointer: Arc<Checkpointer>,
    batch: Mutex<Batch>,
}

#[derive(Debug, Default)]
struct Batch {
    /// The batch's `BEGIN IMMEDIATE` ran on the connection and it has not ended.
    open: bool,
    /// Members that released their savepoint into the batch, waiting for its `COMMIT`.
    members: Vec<oneshot::Sender<Result<(), String>>>,
    /// A flusher is queued for the connection (always, while `members` is not empty).
    flusher: bool,
    /// Batches committed so far.
    committed: u64,
}

/// What a member waits on after releasing its savepoint: the batch's `COMMIT`, or why the
/// batch was lost.
pub(super) type Committed = oneshot::Receiver<Result<(), String>>;

impl GroupCommit {
    /// Batches for the write pool `pool`, which must hold a single connection.
    pub(super) fn new(pool: Arc<Connections>, checkpointer: Arc<Checkpointer>) -> Arc<Self> {
        Arc::new(Self {
            pool,
            checkpointer,
            batch: Mutex::default(),
        })
    }

    fn batch(&self) -> MutexGuard<'_, Batch> {
        self.batch.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The statement that begins a member, by the holder of the connection. The batch counts
    /// as open from here: if the statement fails or is cancelled, the member's rollback path
    /// ends the batch ([`GroupCommit::abort`]), which is harmless when nothing began.
    pub(super) fn begin_statement(&self) -> &'static str {
        let mut batch = self.batch();
        if batch.open {
            JOIN_BATCH
        } else {
            batch.open = true;
            OPEN_BATCH
        }
    }

    /// A member released its savepoint: it waits for the batch's `COMMIT`, which a flusher
    /// queued for the connection performs (this queues one if none is).
    pub(super) fn join(self: &Arc<Self>) -> Committed {
        let (tell, committed) = oneshot::channel();
        let mut batch = self.batch();
        batch.members.push(tell);
        if !batch.flusher {
            batch.flusher = true;
            tokio::spawn(self.clone().flush());
        }
        committed
    }

    /// After a member's savepoint was rolled back: a batch nobody waits on is ended now, so
    /// the write lock is not held with no flusher to end it. Whether the connection is clean.
    pub(super) async fn after_rollback(&self, conn: &mut AnyConnection) -> bool {
        let idle = {
            let batch = self.batch();
            batch.open && batch.members.is_empty()
        };
        if !idle {
            return true;
        }
        let ended = conn.execute("ROLLBACK").await.is_ok();
        self.batch().open = false;
        ended
    }

    /// A member was dropped while the query ending with its release ran, and its savepoint is
    /// gone ([`savepoint_gone`]): either the release ran, and its writes are whole in the
    /// batch, or nothing of the query ran (its savepoint was never taken). Unless it was to
    /// open the batch and the batch never began, it joins the batch as a member nobody waits
    /// for; a `BEGIN` tells which (it fails inside the batch's transaction, and outside any it
    /// opens one, which [`GroupCommit::abort`]'s `ROLLBACK` ends). Whether the connection is
    /// clean.
    pub(super) async fn adopt_released(self: &Arc<Self>, conn: &mut AnyConnection) -> bool {
        if conn.execute("BEGIN").await.is_ok() {
            return self
                .abort(conn, "its first member's begin did not run")
                .await;
        }
        drop(self.join());
        true
    }

    /// The batch cannot be kept (a member's savepoint could not be rolled back, its begin
    /// failed half-way): it is rolled back whole and every member waiting on it fails.
    /// Whether the connection is clean (else the caller closes it, which ends any
    /// transaction left on it).
    pub(super) async fn abort(&self, conn: &mut AnyConnection, why: &str) -> bool {
        // Fails harmlessly ("no transaction is active") when the batch never began.
        let rolled_back = conn.execute("ROLLBACK").await.is_ok();
        let members = {
            let mut batch = self.batch();
            batch.open = false;
            std::mem::take(&mut batch.members)
        };
        if !members.is_empty() {
            tracing::error!(members = members.len(), %why, "a SQLite commit batch was rolled back");
        }
        for member in members {
            let _ = member.send(Err(format!("the commit batch was rolled back: {why}")));
        }
        rolled_back
    }

    /// Commits the batch once the connection comes to this task: after the transactions that
    /// were waiting for it when the flusher was queued, each of which joins the batch.
    async fn flush(self: Arc<Self>) {
        let mut conn = loop {
            match self.pool.acquire().await {
                Ok(conn) => break conn,
                // The connection is busy for longer than the pool's wait (a slow statement):
                // keep waiting. Giving up would tell members their writes failed while the
                // next flusher might still commit them.
                Err(sqlx::Error::PoolTimedOut) => continue,
                // The pool is closed (the host is stopping): the connection is closed with
                // the batch uncommitted, which SQLite rolls back.
                Err(e) => {
                    self.fail_all(&format!("the write connection is gone: {e}"));
                    return;
                }
            }
        };
        let members = {
            let mut batch = self.batch();
            batch.flusher = false;
            std::mem::take(&mut batch.members)
        };
        if members.is_empty() {
            return; // An abort ended them meanwhile.
        }
        let committed = conn.execute("COMMIT").await;
        let outcome = match committed {
            Ok(_) => Ok(()),
            Err(e) => {
                tracing::error!(error = %e, members = members.len(), "a SQLite commit batch failed");
                if conn.execute("ROLLBACK").await.is_err() {
                    conn.discard();
                }
                Err(format!("COMMIT failed: {e}"))
            }
        };
        {
            let mut batch = self.batch();
            batch.open = false;
            batch.committed += u64::from(outcome.is_ok());
        }
        if outcome.is_ok() {
            self.checkpointer.committed();
        }
        for member in members {
            let _ = member.send(outcome.clone());
        }
    }

    /// Ends the checkpoints that follow its commits ([`Checkpointer::stop`]), before the
    /// connections close.
    pub(super) async fn stop_checkpoints(&self) {
        self.checkpointer.stop().await;
    }

    /// Batches committed so far (each one `COMMIT`, however many transactions it held).
    #[cfg(test)]
    pub(super) fn committed(&self) -> u64 {
        self.batch().committed
    }

    /// The connection is being closed with the batch on it (SQLite rolls it back): every
    /// member waiting on it fails.
    pub(super) fn fail_all(&self, why: &str) {
        let members = {
            let mut batch = self.batch();
            batch.open = false;
            batch.flusher = false;
            std::mem::take(&mut batch.members)
        };
        for member in members {
            let _ = member.send(Err(why.to_owned()));
        }
    }
}
