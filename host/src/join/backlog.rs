//! Audit rows the database could not take when their round ended (it was unreachable),
//! written once it takes writes again.
//!
//! Every round leaves its audit row and event, a round the host could not decide because its
//! database failed included. When even that record cannot be written, JoinService keeps it
//! here, in memory, with the time the round ended, and writes it after the next round that
//! reaches the database, oldest first, in a transaction of its own. The queue is bounded
//! ([`CAPACITY`]): beyond it the oldest record is dropped, counted and logged. The refusal sink
//! has a copy of each either way, and a host stopped before the database came back loses what
//! is queued (the sink and the log still have it).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::record::{self, Decision, Round};
use crate::store::Db;

/// Records kept at most.
pub(super) const CAPACITY: usize = 10_000;
/// Records written per transaction when the database is back.
const FLUSH_BATCH: usize = 256;

/// A round's record that is not in the database yet.
pub(super) struct Unwritten {
    round: Round,
    decision: Decision,
    /// When the round ended: the host's clock, ms since the Unix epoch.
    at: i64,
}

/// The queue of [`Unwritten`] records.
#[derive(Default)]
pub(super) struct Backlog {
    queue: Mutex<VecDeque<Unwritten>>,
    /// Set while one task writes the queue out, so rounds do not race to write it.
    flushing: AtomicBool,
    /// Records dropped because the queue was full.
    dropped: AtomicU64,
}

impl Backlog {
    /// Keeps a record the database could not take.
    pub(super) fn push(&self, round: Round, decision: Decision) {
        let at = crate::wall_clock::now_ms();
        let Ok(mut queue) = self.queue.lock() else {
            return;
        };
        if queue.len() >= CAPACITY {
            queue.pop_front();
            let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            tracing::error!(
                dropped,
                "audit backlog full: the oldest unwritten record dropped"
            );
        }
        queue.push_back(Unwritten {
            round,
            decision,
            at,
        });
    }

    /// How many records wait.
    pub(super) fn len(&self) -> usize {
        self.queue.lock().map_or(0, |q| q.len())
    }

    /// Whether no record waits.
    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes the waiting records, oldest first, a batch per transaction, until the queue is
    /// empty or the database fails again (then what was not committed goes back to the front).
    /// Returns at once if another task is writing them.
    pub(super) async fn flush(&self, db: &Db) {
        if self.is_empty() || self.flushing.swap(true, Ordering::AcqRel) {
            return;
        }
        loop {
            let batch: Vec<Unwritten> = match self.queue.lock() {
                Ok(mut queue) => {
                    let n = queue.len().min(FLUSH_BATCH);
                    queue.drain(..n).collect()
                }
                Err(_) => break,
            };
            if batch.is_empty() {
                break;
            }
            if let Err(e) = write_batch(db, &batch).await {
                tracing::warn!(error = %e, waiting = batch.len() + self.len(), "audit backlog not written yet");
                if let Ok(mut queue) = self.queue.lock() {
                    for unwritten in batch.into_iter().rev() {
                        queue.push_front(unwritten);
                    }
                }
                break;
            }
            tracing::info!(written = batch.len(), "audit backlog written");
        }
        self.flushing.store(false, Ordering::Release);
    }
}

async fn write_batch(db: &Db, batch: &[Unwritten]) -> Result<(), crate::store::StoreError> {
    let mut tx = db.begin().await?;
    for u in batch {
        record::write_at(&mut tx, &u.round, &u.decision, u.at).await?;
    }
    tx.commit().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::join::refusal::Refusal;

    fn round(i: u8) -> Round {
        Round::new("join-token".into(), i, record::ClientInfo::default())
    }

    /// A record kept while the database was away is written once it is back, with the time
    /// the round ended; a full queue drops the oldest.
    #[tokio::test]
    async fn kept_records_are_written_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        let url = crate::store::sqlite_url(&dir.path().join("db.sqlite")).unwrap();
        let db = Db::connect(&url).await.unwrap();
        db.migrate().await.unwrap();
        let backlog = Backlog::default();
        for i in 1..=3 {
            backlog.push(round(i), Decision::host(Refusal::StorageError));
        }
        assert_eq!(backlog.len(), 3);
        backlog.flush(&db).await;
        assert_eq!(backlog.len(), 0);
        let mut tx = db.begin().await.unwrap();
        let audits = tx.list_audits(0, 10).await.unwrap();
        let rounds: Vec<u32> = audits.iter().map(|a| a.round).collect();
        assert_eq!(rounds, [1, 2, 3]);
        assert!(
            audits
                .iter()
                .all(|a| a.reason.as_deref() == Some("storage-error"))
        );
        tx.commit().await.unwrap();

        for i in 0..=CAPACITY {
            backlog.push(
                round((i % 200) as u8),
                Decision::host(Refusal::StorageError),
            );
        }
        assert_eq!(backlog.len(), CAPACITY);
        assert_eq!(backlog.dropped.load(Ordering::Relaxed), 1);
    }
}
