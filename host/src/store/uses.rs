//! The single-use ledger (`attestation_uses`): evidence an attestor must see only once.

use super::{StoreError, Tx, UseOutcome};

impl Tx {
    /// Records that `attestor` saw `subject`, until `expires_at`. [`UseOutcome::Reused`] when
    /// it was recorded before and that record has not expired by `now` (database time). A
    /// concurrent recorder of the same subject waits for the first to commit or roll back,
    /// and the statement never fails on the key, so the transaction stays usable.
    pub async fn record_use(
        &mut self,
        attestor: &str,
        subject: &str,
        expires_at: i64,
        now: i64,
    ) -> Result<UseOutcome, StoreError> {
        let q = sqlx::query(
            "INSERT INTO attestation_uses (attestor, subject, expires_at) VALUES ($1, $2, $3) \
             ON CONFLICT (attestor, subject) DO UPDATE SET expires_at = excluded.expires_at \
             WHERE attestation_uses.expires_at <= $4 \
             RETURNING expires_at",
        )
        .bind(attestor)
        .bind(subject)
        .bind(expires_at)
        .bind(now);
        Ok(match self.fetch_optional(q).await? {
            Some(_) => UseOutcome::Recorded,
            None => UseOutcome::Reused,
        })
    }

    /// Whether `attestor` recorded `subject` and that record is still live at `now`: what
    /// [`Tx::record_use`] would answer [`UseOutcome::Reused`] for, read without writing.
    pub async fn use_live(
        &mut self,
        attestor: &str,
        subject: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        let q = sqlx::query(
            "SELECT expires_at FROM attestation_uses \
             WHERE attestor = $1 AND subject = $2 AND expires_at > $3",
        )
        .bind(attestor)
        .bind(subject)
        .bind(now);
        Ok(self.fetch_optional(q).await?.is_some())
    }

    /// Deletes up to `batch` records that expired by `now`; how many it deleted. Run it in
    /// its own short transactions, in a loop, until it deletes fewer than `batch`.
    pub async fn prune_uses(&mut self, now: i64, batch: u32) -> Result<u64, StoreError> {
        let q = sqlx::query(
            "DELETE FROM attestation_uses WHERE (attestor, subject) IN \
             (SELECT attestor, subject FROM attestation_uses WHERE expires_at <= $1 LIMIT $2)",
        )
        .bind(now)
        .bind(i64::from(batch));
        self.execute(q).await
    }
}
