//! Join requests an operator decides (enrollment): opened by an attestor for a machine it
//! cannot place, approved or denied by an operator, consumed by the next round with the same
//! CSR. Reads and writes are scoped to the attestor that opened them.

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

fn new_id() -> String {
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
        .bind(new_id())
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

    /// Marks an approved, unexpired request of `attestor` used, so it admits once. False if
    /// it is not approved, expired, used, or not this attestor's.
    pub async fn consume_join_request(
        &mut self,
        attestor: &str,
        id: &str,
    ) -> Result<bool, StoreError> {
        let sql = self.pick(
            concat!(
                "UPDATE join_requests SET state = 'expired' WHERE attestor = $1 AND id = $2 \
                 AND state = 'approved' AND expires_at > ",
                sqlite_now!()
            ),
            concat!(
                "UPDATE join_requests SET state = 'expired' WHERE attestor = $1 AND id = $2 \
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
}
