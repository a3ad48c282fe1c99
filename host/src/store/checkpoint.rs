//! SQLite's WAL checkpoints, run beside the write connection instead of inside its commits.
//!
//! By default SQLite checkpoints from the connection that commits, once the WAL holds 1,000
//! pages: that commit copies them into the database file and waits for the file's `fsync`
//! before it returns. Here that connection is the one every write transaction waits for
//! ([`super::group`]), so every join in flight waited behind the copy and the `fsync` (3–4 ms
//! with 100,000 nodes; see docs/benchmarks.md). So the write connection checkpoints only
//! as a backstop ([`writer_backstop_pages!`]), and a task on a connection of its own runs a
//! `PASSIVE` checkpoint [`PAUSE`] after commits. A passive checkpoint takes no lock a writer
//! needs: commits go on while it copies and syncs.
//!
//! What bounds the WAL: SQLite starts the WAL over at a write transaction that begins with
//! every frame copied, which a busy writer, opening its next batch as the last one commits,
//! may never do. Then the writer's backstop checkpoint copies what this task has not yet
//! (little: the frames of the last [`PAUSE`]) and the next batch starts the WAL over. If this
//! task fails, the backstop alone keeps the WAL bounded, as SQLite's default would.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use sqlx::{AnyConnection, Connection, Executor};
use tokio::sync::{Notify, oneshot};
use tokio::task::JoinHandle;

/// WAL pages after which the write connection checkpoints itself (SQLite's
/// `wal_autocheckpoint`; its default is 1,000). Reached only when the writer never pauses long
/// enough for the WAL to start over; 4,000 pages of 4 KiB keep the WAL file at 16 MiB. A
/// macro, so the write connection's settings can spell it in their text.
macro_rules! writer_backstop_pages {
    () => {
        4000
    };
}
pub(super) use writer_backstop_pages;

/// How long after a commit the task checkpoints: commits in the meantime share the pass.
const PAUSE: Duration = Duration::from_millis(200);

/// Set on the checkpointer's connection: it only checkpoints, and never waits for a lock (a
/// passive checkpoint does not), but a statement that must read the schema may.
const SETTINGS: &str = "PRAGMA busy_timeout = 5000; PRAGMA query_only = ON;";

/// The checkpointing task of one SQLite database. It ends when [`Checkpointer::stop`] is
/// called or this value is dropped.
#[derive(Debug)]
pub(super) struct Checkpointer {
    /// Told after each committed batch.
    committed: Arc<Notify>,
    /// The task and what ends it (sending, or dropping the sender); `None` once stopped.
    running: Mutex<Option<(oneshot::Sender<()>, JoinHandle<()>)>>,
}

impl Checkpointer {
    /// Opens a connection of its own to `url` and starts the task on the current runtime.
    pub(super) async fn start(url: &str) -> Result<Checkpointer, sqlx::Error> {
        let mut conn = AnyConnection::connect(url).await?;
        conn.execute(SETTINGS).await?;
        let committed = Arc::new(Notify::new());
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(run(conn, committed.clone(), stopped));
        Ok(Checkpointer {
            committed,
            running: Mutex::new(Some((stop, task))),
        })
    }

    /// A batch committed: a checkpoint follows within [`PAUSE`] and whatever it takes.
    pub(super) fn committed(&self) {
        self.committed.notify_one();
    }

    /// Ends the task, after the checkpoint it may be running, and closes its connection.
    pub(super) async fn stop(&self) {
        let running = self
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some((stop, task)) = running {
            let _ = stop.send(());
            let _ = task.await;
        }
    }
}

async fn run(mut conn: AnyConnection, committed: Arc<Notify>, mut stop: oneshot::Receiver<()>) {
    // Logged when checkpoints start failing and when they work again, not at every pass.
    let mut failing = false;
    loop {
        tokio::select! {
            _ = &mut stop => break,
            () = committed.notified() => {}
        }
        tokio::select! {
            _ = &mut stop => break,
            () = tokio::time::sleep(PAUSE) => {}
        }
        match conn.execute("PRAGMA wal_checkpoint(PASSIVE)").await {
            Ok(_) if failing => {
                failing = false;
                tracing::info!("SQLite checkpoints work again");
            }
            Ok(_) => {}
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(
                    error = %e,
                    "a SQLite checkpoint failed; the write connection checkpoints every {} pages meanwhile",
                    writer_backstop_pages!()
                );
            }
            Err(_) => {}
        }
    }
    let _ = conn.close().await;
}
