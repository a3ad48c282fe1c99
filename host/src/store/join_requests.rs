//! Join requests an operator decides (enrollment): opened by an attestor for a machine it
//! cannot place, approved or denied by an operator, consumed by the next round with the same
//! CSR. Reads and writes are scoped to the attestor that opened them; the operator's reads
//! ([`Tx::list_join_requests`], [`Tx::find_join_request`]) and decision are not.

use serde::de::IgnoredAny;
use sqlx::any::AnyRow;

use super::decode::Fields;
use super::{JoinDecision, JoinRequestRow, JoinRequestState, StoreError, Tx};

/// The largest `details` accepted.
const DETAILS_MAX: usize = 64 * 1024;

/// The columns [`request`] reads, but `state`, which each query spells.
macro_rules! columns {
    () => {
        "id, attestor, subject, csr_sha256, details, tenant_id, pool_id, site_id, created_at, \
         decided_at, expires_at"
    };
}

/// `state`, with a pending or approved request past its expiry read as expired.
macro_rules! effective_state {
    ($now:expr) => {
        concat!(
            "CASE WHEN state IN ('pending', 'approved') AND expires_at <= ",
            $now,
            " THEN 'expired' ELSE state END AS state"
        )
    };
}

fn request(row: &AnyRow) -> Result<JoinRequestRow, StoreError> {
    let f = Fields::new(row, "join_requests");
    Ok(JoinRequestRow {
        id: f.text("id")?,
        attestor: f.text("attestor")?,
        subject: f.text("subject")?,
        csr_sha256: f.sha256("csr_sha256")?,
        details: f.text("details")?,
        state: f.parse("state")?,
        tenant_id: f.opt_text("tenant_id")?,
        pool_id: f.opt_text("pool_id")?,
        site_id: f.opt_text("site_id")?,
        created_at: f.i64("created_at")?,
        decided_at: f.opt_i64("decided_at")?,
        expires_at: f.i64("expires_at")?,
    })
}

/// A fresh join request id.
pub(crate) fn new_id() -> String {
    format!("jr_{}", hex::encode(rand::random::<[u8; 16]>()))
}

impl Tx {
    /// Opens a pending request for `attestor`'s `subject` and this CSR, lapsing at
    /// `expires_at`, or returns the pending or approved one already open for the same three
    /// (so retries do not pile up requests, even concurrent ones). `details` must be JSON.
    pub async fn open_join_request(
        &mut self,
        attestor: &str,
        subject: &str,
        csr_sha256: &[u8; 32],
        details: &str,
        now: i64,
        expires_at: i64,
    ) -> Result<JoinRequestRow, StoreError> {
        self.open_join_request_as(
            &new_id(),
            attestor,
            subject,
            csr_sha256,
            details,
            now,
            expires_at,
        )
        .await
    }

    /// The pending or approved request of `attestor` for `subject` and this CSR that has not
    /// lapsed by `now`: the one [`Tx::open_join_request`] would return rather than open one.
    pub async fn open_join_request_for(
        &mut self,
        attestor: &str,
        subject: &str,
        csr_sha256: &[u8; 32],
        now: i64,
    ) -> Result<Option<JoinRequestRow>, StoreError> {
        let q = sqlx::query(concat!(
            "SELECT state, ",
            columns!(),
            " FROM join_requests WHERE attestor = $1 AND subject = $2 AND csr_sha256 = $3 \
             AND state IN ('pending', 'approved') AND expires_at > $4"
        ))
        .bind(attestor)
        .bind(subject)
        .bind(&csr_sha256[..])
        .bind(now);
        let row = self.fetch_optional(q).await?;
        row.as_ref().map(request).transpose()
    }

    /// [`Tx::open_join_request`] with the id a new request gets chosen by the caller (a
    /// running attestor is told the id before the request is written).
    #[allow(clippy::too_many_arguments)]
    pub async fn open_join_request_as(
        &mut self,
        id: &str,
        attestor: &str,
        subject: &str,
        csr_sha256: &[u8; 32],
        details: &str,
        now: i64,
        expires_at: i64,
    ) -> Result<JoinRequestRow, StoreError> {
        if details.len() > DETAILS_MAX {
            return Err(StoreError::TooLarge {
                what: "join request details",
                len: details.len(),
                max: DETAILS_MAX,
            });
        }
        serde_json::from_str::<IgnoredAny>(details).map_err(|source| StoreError::InvalidJson {
            what: "join request details",
            source,
        })?;
        // Lapsed requests leave the unique index, so a fresh one can be opened.
        let lapse = sqlx::query(
            "UPDATE join_requests SET state = 'expired' \
             WHERE attestor = $1 AND subject = $2 AND csr_sha256 = $3 \
             AND state IN ('pending', 'approved') AND expires_at <= $4",
        )
        .bind(attestor)
        .bind(subject)
        .bind(&csr_sha256[..])
        .bind(now);
        self.execute(lapse).await?;
        // The no-op update returns the open request that conflicts.
        let open = sqlx::query(concat!(
            "INSERT INTO join_requests (id, attestor, subject, csr_sha256, details, state, \
             created_at, expires_at) VALUES ($1, $2, $3, $4, $5, 'pending', $6, $7) \
             ON CONFLICT (attestor, subject, csr_sha256) WHERE state IN ('pending', 'approved') \
             DO UPDATE SET state = join_requests.state RETURNING state, ",
            columns!()
        ))
        .bind(id)
        .bind(attestor)
        .bind(subject)
        .bind(&csr_sha256[..])
        .bind(details)
        .bind(now)
        .bind(expires_at);
        let row = self.fetch_one(open).await?;
        request(&row)
    }

    /// Reads a request `attestor` opened, as of database time.
    pub async fn join_request(
        &mut self,
        attestor: &str,
        id: &str,
    ) -> Result<Option<JoinRequestRow>, StoreError> {
        let sql = self.pick(
            concat!(
                "SELECT ",
                effective_state!(sqlite_now!()),
                ", ",
                columns!(),
                " FROM join_requests WHERE attestor = $1 AND id = $2"
            ),
            concat!(
                "SELECT ",
                effective_state!(postgres_now!()),
                ", ",
                columns!(),
                " FROM join_requests WHERE attestor = $1 AND id = $2"
            ),
        );
        let row = self
            .fetch_optional(sqlx::query(sql).bind(attestor).bind(id))
            .await?;
        row.as_ref().map(request).transpose()
    }

    /// Marks an approved, unexpired request of `attestor` `used`, so it admits once. False if
    /// it is not approved, expired, used, or not this attestor's.
    pub async fn consume_join_request(
        &mut self,
        attestor: &str,
        id: &str,
    ) -> Result<bool, StoreError> {
        let sql = self.pick(
            concat!(
                "UPDATE join_requests SET state = 'used' WHERE attestor = $1 AND id = $2 \
                 AND state = 'approved' AND expires_at > ",
                sqlite_now!()
            ),
            concat!(
                "UPDATE join_requests SET state = 'used' WHERE attestor = $1 AND id = $2 \
                 AND state = 'approved' AND expires_at > ",
                postgres_now!()
            ),
        );
        Ok(self
            .execute(sqlx::query(sql).bind(attestor).bind(id))
            .await?
            > 0)
    }

    /// Records an operator's decision on a pending, unexpired request (at `now`). False if
    /// there is no such request or it is no longer pending.
    pub async fn decide_join_request(
        &mut self,
        id: &str,
        decision: &JoinDecision,
        now: i64,
    ) -> Result<bool, StoreError> {
        let (state, tenant_id, pool_id, site_id) = match decision {
            JoinDecision::Approve {
                tenant_id,
                pool_id,
                site_id,
            } => (
                JoinRequestState::Approved,
                Some(tenant_id),
                pool_id.as_ref(),
                site_id.as_ref(),
            ),
            JoinDecision::Deny => (JoinRequestState::Denied, None, None, None),
        };
        let q = sqlx::query(
            "UPDATE join_requests SET state = $2, tenant_id = $3, pool_id = $4, site_id = $5, \
             decided_at = $6 WHERE id = $1 AND state = 'pending' AND expires_at > $6",
        )
        .bind(id)
        .bind(state.as_str())
        .bind(tenant_id)
        .bind(pool_id)
        .bind(site_id)
        .bind(now);
        Ok(self.execute(q).await? > 0)
    }

    /// At most `limit` join requests of every attestor before `before` (start with
    /// [`super::Cursor::end`]), newest first, with their state as of database time; only those
    /// in `state` when given (a pending request past its expiry is listed as expired, not
    /// pending).
    pub async fn list_join_requests(
        &mut self,
        state: Option<JoinRequestState>,
        before: &super::Cursor,
        limit: u32,
    ) -> Result<Vec<JoinRequestRow>, StoreError> {
        macro_rules! list {
            ($now:expr) => {
                concat!(
                    "SELECT * FROM (SELECT ",
                    effective_state!($now),
                    ", ",
                    columns!(),
                    " FROM join_requests WHERE created_at < $2 OR (created_at = $2 AND id < $3)) \
                     AS r WHERE ($1 IS NULL OR r.state = $1) \
                     ORDER BY r.created_at DESC, r.id DESC LIMIT $4"
                )
            };
        }
        let sql = self.pick(list!(sqlite_now!()), list!(postgres_now!()));
        let q = sqlx::query(sql)
            .bind(state.map(|s| s.as_str()))
            .bind(before.created_at)
            .bind(before.id.as_str())
            .bind(i64::from(limit));
        let rows = self.fetch_all(q).await?;
        rows.iter().map(request).collect()
    }

    /// Reads a join request, whichever attestor opened it, as of database time.
    pub async fn find_join_request(
        &mut self,
        id: &str,
    ) -> Result<Option<JoinRequestRow>, StoreError> {
        macro_rules! find {
            ($now:expr) => {
                concat!(
                    "SELECT ",
                    effective_state!($now),
                    ", ",
                    columns!(),
                    " FROM join_requests WHERE id = $1"
                )
            };
        }
        let sql = self.pick(find!(sqlite_now!()), find!(postgres_now!()));
        let row = self.fetch_optional(sqlx::query(sql).bind(id)).await?;
        row.as_ref().map(request).transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Cursor, testing};
    use super::*;

    #[tokio::test]
    async fn operators_list_and_find_every_attestors_requests() {
        for t in testing::all().await {
            let mut tx = t.db.begin().await.unwrap();
            let now = tx.now().await.unwrap();
            let later = now + 60_000;
            let first = tx
                .open_join_request("tpm", "ek:1", &[1; 32], "{}", now, later)
                .await
                .unwrap();
            let second = tx
                .open_join_request("approval", "uuid:2", &[2; 32], "{}", now + 1, later)
                .await
                .unwrap();
            let lapsed = tx
                .open_join_request("tpm", "ek:3", &[3; 32], "{}", now - 10_000, now - 1)
                .await
                .unwrap();
            let ids =
                |rows: Vec<JoinRequestRow>| rows.into_iter().map(|r| r.id).collect::<Vec<_>>();

            // Newest first; a pending request past its expiry is not pending.
            let start = Cursor::end();
            let pending = tx
                .list_join_requests(Some(JoinRequestState::Pending), &start, 10)
                .await
                .unwrap();
            assert_eq!(ids(pending), [second.id.as_str(), first.id.as_str()]);
            let expired = tx
                .list_join_requests(Some(JoinRequestState::Expired), &start, 10)
                .await
                .unwrap();
            assert_eq!(ids(expired), [lapsed.id.as_str()]);
            assert_eq!(
                tx.list_join_requests(None, &start, 10).await.unwrap().len(),
                3
            );
            // A page at a time: the page after the newest holds the next one, and so on.
            let newest = tx.list_join_requests(None, &start, 1).await.unwrap();
            assert_eq!(ids(newest.clone()), [second.id.as_str()]);
            let after = Cursor {
                created_at: newest[0].created_at,
                id: newest[0].id.clone(),
            };
            let rest = tx.list_join_requests(None, &after, 10).await.unwrap();
            assert_eq!(ids(rest), [first.id.as_str(), lapsed.id.as_str()]);

            let deny = JoinDecision::Deny;
            assert!(
                tx.decide_join_request(&first.id, &deny, now + 2)
                    .await
                    .unwrap()
            );
            let found = tx.find_join_request(&first.id).await.unwrap().unwrap();
            assert_eq!(
                (found.attestor.as_str(), found.state, found.decided_at),
                ("tpm", JoinRequestState::Denied, Some(now + 2))
            );
            let denied = tx
                .list_join_requests(Some(JoinRequestState::Denied), &Cursor::end(), 10)
                .await
                .unwrap();
            assert_eq!(ids(denied), [first.id.as_str()]);
            assert_eq!(
                tx.find_join_request(&lapsed.id)
                    .await
                    .unwrap()
                    .unwrap()
                    .state,
                JoinRequestState::Expired
            );
            assert!(tx.find_join_request("jr_none").await.unwrap().is_none());
            tx.commit().await.unwrap();
        }
    }
}
