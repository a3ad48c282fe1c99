//! Pruning: what the database no longer needs, deleted a batch at a time.
//!
//! Every prune is one short transaction deleting at most `batch` rows (default 5,000, as the
//! seed prunes the ledger), so it never holds SQLite's write lock or a Postgres row lock for
//! long; it answers `{deleted, batch}` and the caller calls again while a batch comes back
//! full (`gatehouse prune ...` does). The age is measured on the database's clock:
//!
//! - `attestation-uses`: single-use evidence records that expired.
//! - `tokens`: tokens created more than `olderThanSeconds` ago that can admit no one (spent,
//!   revoked or expired). A token with a use left that is live is never pruned.
//! - `events`, `audits`: records stamped more than `olderThanSeconds` ago, oldest first, never
//!   one younger (see `crate::store`'s pruning for why they go as a prefix in id order).
//!
//! A prune deletes records; it writes no event of its own (an event per batch would be the
//! next thing to prune), and logs who ran it.

use super::types::{PruneByAge, PruneUses, Pruned};
use super::{Actor, OpsError};
use crate::store::Db;

/// Default and largest batch of a prune (seed: 5,000 per call).
const DEFAULT_PRUNE_BATCH: u32 = 5_000;
const MAX_PRUNE_BATCH: u32 = 100_000;
/// The largest age a prune takes: a hundred years, far inside i64 milliseconds.
const MAX_OLDER_THAN_SECONDS: u64 = 100 * 366 * 24 * 3600;

/// What a prune by age deletes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prunable {
    /// Tokens that can admit no one.
    Tokens,
    /// Events.
    Events,
    /// Audit records.
    Audits,
}

fn batch(batch: Option<u32>) -> Result<u32, OpsError> {
    let batch = batch.unwrap_or(DEFAULT_PRUNE_BATCH);
    if (1..=MAX_PRUNE_BATCH).contains(&batch) {
        Ok(batch)
    } else {
        Err(OpsError::invalid(format!(
            "batch must be 1 to {MAX_PRUNE_BATCH}"
        )))
    }
}

/// The body's age in ms, range-checked before any arithmetic.
fn older_than_ms(body: &PruneByAge) -> Result<i64, OpsError> {
    if body.older_than_seconds > MAX_OLDER_THAN_SECONDS {
        return Err(OpsError::invalid(format!(
            "olderThanSeconds must be 0 to {MAX_OLDER_THAN_SECONDS}"
        )));
    }
    // At most ~3.2e12 ms: no overflow.
    Ok(body.older_than_seconds as i64 * 1000)
}

/// Deletes up to `batch` single-use records that expired by database time.
pub async fn uses(db: &Db, actor: &Actor, body: PruneUses) -> Result<Pruned, OpsError> {
    let batch = batch(body.batch)?;
    let mut tx = db.begin().await?;
    let now = tx.now().await?;
    let deleted = tx.prune_uses(now, batch).await?;
    tx.commit().await?;
    if deleted > 0 {
        tracing::info!(deleted, batch, %actor, "expired single-use records pruned");
    }
    Ok(Pruned { deleted, batch })
}

/// Deletes up to `batch` rows of `what` older than the age.
pub async fn by_age(
    db: &Db,
    actor: &Actor,
    what: Prunable,
    body: PruneByAge,
) -> Result<Pruned, OpsError> {
    let (age, batch) = (older_than_ms(&body)?, batch(body.batch)?);
    let mut tx = db.begin().await?;
    let now = tx.now().await?;
    let deleted = match what {
        Prunable::Tokens => tx.prune_tokens(now, now - age, batch).await?,
        Prunable::Events => tx.prune_events(now - age, batch).await?,
        Prunable::Audits => tx.prune_audits(now - age, batch).await?,
    };
    tx.commit().await?;
    if deleted > 0 {
        tracing::info!(deleted, batch, what = ?what, %actor, "pruned");
    }
    Ok(Pruned { deleted, batch })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_and_ages_are_bounded() {
        assert_eq!(batch(None).unwrap(), DEFAULT_PRUNE_BATCH);
        assert!(batch(Some(0)).is_err() && batch(Some(MAX_PRUNE_BATCH + 1)).is_err());
        let age = |s| PruneByAge {
            older_than_seconds: s,
            batch: None,
        };
        assert_eq!(older_than_ms(&age(2)).unwrap(), 2000);
        assert!(older_than_ms(&age(u64::MAX)).is_err());
    }
}
