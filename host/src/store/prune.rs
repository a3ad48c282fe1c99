//! Pruning by age: tokens that can admit no one any more, and old events and audit records.
//! Each call deletes at most `batch` rows, so a caller runs it in short transactions of its
//! own, in a loop, until a call deletes fewer than `batch` (as `prune_uses` is run).
//!
//! Events and audit records go oldest first and only as a prefix in id order: a reader that
//! follows either list by the id of the last row it saw (`Tx::event_feed`, `Tx::list_audits`)
//! keeps its place, because every row at or below a surviving row's id survives too. A record
//! stamped at or after the cutoff stops the prefix, so nothing younger than the cutoff is ever
//! deleted (an older record behind it waits for the next prune).

use super::{StoreError, Tx};

/// A token that can admit no one at `$1` (database time): spent, revoked or expired.
macro_rules! dead_token {
    () => {
        "(uses_left = 0 OR revoked = 1 OR expires_at <= $1) AND created_at < $2"
    };
}

/// The prefix of a log table older than `$1`, in id order, at most `$2` rows.
macro_rules! old_prefix {
    ($table:literal) => {
        concat!(
            "DELETE FROM ",
            $table,
            " WHERE id IN (SELECT id FROM ",
            $table,
            " WHERE id < COALESCE((SELECT id FROM ",
            $table,
            " WHERE at >= $1 ORDER BY id LIMIT 1), 9223372036854775807) ORDER BY id LIMIT $2)"
        )
    };
}

impl Tx {
    /// Deletes up to `batch` tokens created before `created_before` that can admit no one at
    /// `now` (no use left, revoked, or expired), oldest first; how many it deleted. A token
    /// with a use left that is neither revoked nor expired is never deleted, however old. A
    /// token only ever loses uses, is revoked or expires, never the reverse, so one found dead
    /// stays dead while the delete waits for a join holding its row.
    pub async fn prune_tokens(
        &mut self,
        now: i64,
        created_before: i64,
        batch: u32,
    ) -> Result<u64, StoreError> {
        let q = sqlx::query(concat!(
            "DELETE FROM join_tokens WHERE id IN (SELECT id FROM join_tokens WHERE ",
            dead_token!(),
            " ORDER BY created_at, id LIMIT $3) AND ",
            dead_token!()
        ))
        .bind(now)
        .bind(created_before)
        .bind(i64::from(batch));
        self.execute(q).await
    }

    /// Deletes up to `batch` events stamped before `before`, oldest first, as a prefix in id
    /// order (see the module documentation); how many it deleted.
    pub async fn prune_events(&mut self, before: i64, batch: u32) -> Result<u64, StoreError> {
        let q = sqlx::query(old_prefix!("events"))
            .bind(before)
            .bind(i64::from(batch));
        self.execute(q).await
    }

    /// Deletes up to `batch` audit records stamped before `before`, oldest first, as a prefix
    /// in id order (see the module documentation); how many it deleted.
    pub async fn prune_audits(&mut self, before: i64, batch: u32) -> Result<u64, StoreError> {
        let q = sqlx::query(old_prefix!("audits"))
            .bind(before)
            .bind(i64::from(batch));
        self.execute(q).await
    }
}

#[cfg(test)]
mod tests {
    use super::super::{
        AuditResult, NewAudit, NewEvent, NewToken, TokenExpect, TokenRole, testing,
    };

    fn token(id: &str, created_at: i64, expires_at: i64, uses: u32) -> NewToken {
        NewToken {
            id: id.into(),
            role: TokenRole::Node,
            secret_sha256: [7; 32],
            tenant_id: "root".into(),
            pool_id: None,
            site_id: None,
            expires_at,
            uses,
            expect: TokenExpect::default(),
            reclaim: false,
            created_at,
        }
    }

    fn event(at: i64) -> NewEvent {
        NewEvent {
            at,
            kind: "node.joined".into(),
            tenant_id: None,
            node_id: None,
            attestor: None,
            reason: None,
            token_id: None,
            payload: serde_json::json!({}),
        }
    }

    fn audit(at: i64) -> NewAudit {
        NewAudit {
            at,
            attestor: "join-token".into(),
            round: 1,
            result: AuditResult::Refused,
            reason: Some("no-uses-left".into()),
            node_id: None,
            token_id: None,
            subject: None,
            node_key: None,
            csr_sha256: None,
            client_addr: None,
        }
    }

    /// Old tokens go once they can admit no one (spent, revoked, expired); a live one stays
    /// however old, and a dead one stays while it is younger than the cutoff.
    #[tokio::test]
    async fn prune_tokens_takes_only_old_dead_tokens() {
        for t in testing::all().await {
            let mut tx = t.db.begin().await.unwrap();
            let now = 1_000_000;
            tx.insert_token(&token("old_spent", 10, now * 2, 1))
                .await
                .unwrap();
            assert_eq!(tx.consume_token("old_spent").await.unwrap(), 0);
            tx.insert_token(&token("old_revoked", 11, now * 2, 3))
                .await
                .unwrap();
            assert!(tx.revoke_token("old_revoked").await.unwrap());
            tx.insert_token(&token("old_expired", 12, now, 3))
                .await
                .unwrap();
            tx.insert_token(&token("old_live", 13, now * 2, 3))
                .await
                .unwrap();
            tx.insert_token(&token("old_half_spent", 14, now * 2, 2))
                .await
                .unwrap();
            tx.consume_token("old_half_spent").await.unwrap();
            tx.insert_token(&token("young_spent", 900_000, now * 2, 1))
                .await
                .unwrap();
            tx.consume_token("young_spent").await.unwrap();

            // Two per batch, oldest first, until a batch comes back short.
            assert_eq!(tx.prune_tokens(now, 500_000, 2).await.unwrap(), 2);
            assert_eq!(tx.prune_tokens(now, 500_000, 2).await.unwrap(), 1);
            assert_eq!(tx.prune_tokens(now, 500_000, 2).await.unwrap(), 0);
            let left: Vec<String> = tx
                .list_tokens()
                .await
                .unwrap()
                .into_iter()
                .map(|t| t.id)
                .collect();
            assert_eq!(left, ["old_live", "old_half_spent", "young_spent"]);
            // The live ones can still be spent.
            assert_eq!(tx.consume_token("old_live").await.unwrap(), 2);
            tx.commit().await.unwrap();
        }
    }

    /// Events and audits older than the cutoff go, oldest first, in batches; a record at or
    /// after the cutoff stays, and so does every record after it in id order.
    #[tokio::test]
    async fn prune_logs_takes_an_old_prefix() {
        for t in testing::all().await {
            let mut tx = t.db.begin().await.unwrap();
            // Stamps in id order; the 400 is older than the cutoff but follows a young one.
            let stamps = [100, 110, 120, 130, 500, 400, 600];
            let mut events = Vec::new();
            let mut audits = Vec::new();
            for at in stamps {
                events.push(tx.insert_event(&event(at)).await.unwrap());
                audits.push(tx.insert_audit(&audit(at)).await.unwrap());
            }
            assert_eq!(tx.prune_events(450, 3).await.unwrap(), 3);
            assert_eq!(tx.prune_events(450, 3).await.unwrap(), 1);
            assert_eq!(tx.prune_events(450, 3).await.unwrap(), 0);
            assert_eq!(tx.prune_audits(450, 10).await.unwrap(), 4);
            let kept_events: Vec<i64> = tx
                .list_events(0, 100)
                .await
                .unwrap()
                .into_iter()
                .map(|e| e.id)
                .collect();
            let kept_audits: Vec<i64> = tx
                .list_audits(0, 100)
                .await
                .unwrap()
                .into_iter()
                .map(|a| a.id)
                .collect();
            assert_eq!(kept_events, events[4..]);
            assert_eq!(kept_audits, audits[4..]);
            // With nothing younger left, everything before the cutoff goes.
            assert_eq!(tx.prune_events(10_000, 100).await.unwrap(), 3);
            assert!(tx.list_events(0, 100).await.unwrap().is_empty());
            tx.commit().await.unwrap();
        }
    }
}
