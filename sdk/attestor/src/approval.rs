//! Operator approval: the protocol an attestor follows to make a machine wait until an
//! operator approves its join request, and to admit it once, into the placement the operator
//! chose.
//!
//! The request for a CSR is remembered in the attestor's key/value space
//! (`jr:<hex sha256(csr)>`) and read back with `join-request` first, because
//! `open-join-request` returns only pending or approved requests: a denied or lapsed one would
//! otherwise be silently replaced by a fresh pending one. Then:
//!
//! - no request yet: one is opened (with the details shown to the operator) and the round
//!   defers;
//! - pending: the round defers again;
//! - approved: [`Decision::Approved`]; the attestor finishes its checks and calls
//!   [`Approved::spend`] on the round that admits, which marks the request used;
//! - denied, expired, used, or remembered for another subject or CSR: a refusal
//!   (`join-request-denied`, `join-request-expired`, `join-request-used`,
//!   `join-request-mismatch`).
//!
//! ```
//! use gatehouse_sdk::{approval, Context, JoinRequest, Outcome, Refusal, refuse};
//!
//! fn verify(cx: &Context<'_>, request: &JoinRequest) -> Result<Outcome, Refusal> {
//!     let subject = "serial:ABC123";
//!     let refusal = |code: &str| refuse(code);
//!     let decision = approval::request(cx, request, subject, || "{}".into(), 30, refusal)?;
//!     let approved = match decision {
//!         approval::Decision::Waiting(deferral) => return Ok(deferral.into()),
//!         approval::Decision::Approved(approved) => approved,
//!     };
//!     let row = approved.spend(cx, refusal)?;
//!     Ok(gatehouse_sdk::AttestationResult {
//!         tenant_id: row.tenant_id,
//!         pool_id: row.pool_id,
//!         site_id: row.site_id,
//!         subject: Some(subject.into()),
//!         ..Default::default()
//!     }
//!     .into())
//! }
//! ```

use crate::{
    Approval, Context, Deferral, JoinRequest, JoinRequestRow, JoinRequestState, Refusal, hex,
    reason,
};
use alloc::format;
use alloc::string::String;

/// What the key/value entry holds once the approval admitted the machine.
const USED_PREFIX: &str = "used:";

/// Where a machine's join request stands.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    /// Pending (or just opened): return this deferral.
    Waiting(Deferral),
    /// Approved: finish the checks, then [`Approved::spend`] it.
    Approved(Approved),
}

/// An approved join request, not yet spent.
#[derive(Debug, PartialEq, Eq)]
pub struct Approved {
    key: String,
    row: JoinRequestRow,
}

impl Approved {
    /// The request as the operator approved it (the placement they chose).
    pub fn row(&self) -> &JoinRequestRow {
        &self.row
    }

    /// Spends the approval on the round that admits: marks the request used (which fails if it
    /// lapsed or was used meanwhile: `join-request-expired`) and remembers it as used. Returns
    /// the row, whose tenant, pool and site are the operator's placement.
    pub fn spend(
        self,
        cx: &Context<'_>,
        refusal: impl Fn(&str) -> Refusal,
    ) -> Result<JoinRequestRow, Refusal> {
        cx.tx
            .consume_join_request(&self.row.id)
            .map_err(|_| refusal(reason::JOIN_REQUEST_EXPIRED))?;
        cx.tx
            .kv_put(
                &self.key,
                format!("{USED_PREFIX}{}", self.row.id).as_bytes(),
            )
            .map_err(|_| refusal(reason::STORAGE))?;
        Ok(self.row)
    }
}

/// The approval of this request's CSR for `subject`: opened on the first round with the
/// `details` (UTF-8 JSON shown to the operator, built only then) and the agent told to retry
/// after `retry_after_seconds`, read back on the next rounds. `refusal` builds a refusal from a
/// code (add the token, node or tenant the attestor knows).
pub fn request(
    cx: &Context<'_>,
    request: &JoinRequest,
    subject: &str,
    details: impl FnOnce() -> String,
    retry_after_seconds: u32,
    refusal: impl Fn(&str) -> Refusal,
) -> Result<Decision, Refusal> {
    let key = format!("jr:{}", hex::encode(&request.csr_sha256));
    let storage = |_| refusal(reason::STORAGE);
    let row = match cx.tx.kv_get(&key).map_err(storage)? {
        None => {
            let row = cx
                .tx
                .open_join_request(subject, &details())
                .map_err(storage)?;
            cx.tx.kv_put(&key, row.id.as_bytes()).map_err(storage)?;
            row
        }
        Some(value) => {
            let value = String::from_utf8(value).map_err(|_| refusal(reason::STORAGE))?;
            if value.starts_with(USED_PREFIX) {
                return Err(refusal(reason::JOIN_REQUEST_USED));
            }
            cx.tx
                .join_request(&value)
                .map_err(storage)?
                .ok_or_else(|| refusal(reason::JOIN_REQUEST_EXPIRED))?
        }
    };
    if row.subject != subject || row.csr_sha256 != request.csr_sha256 {
        return Err(refusal(reason::JOIN_REQUEST_MISMATCH));
    }
    match row.state {
        JoinRequestState::Pending => Ok(Decision::Waiting(Deferral::Approval(Approval {
            request_id: row.id,
            retry_after_seconds,
        }))),
        JoinRequestState::Approved => Ok(Decision::Approved(Approved { key, row })),
        JoinRequestState::Denied => Err(refusal(reason::JOIN_REQUEST_DENIED)),
        JoinRequestState::Expired => Err(refusal(reason::JOIN_REQUEST_EXPIRED)),
        JoinRequestState::Used => Err(refusal(reason::JOIN_REQUEST_USED)),
    }
}
