//! What every join round and every renewal leaves behind: one audit row, one event and one
//! log line.
//!
//! A renewal runs no attestor; its audit rows name the pseudo-attestor [`RENEW`] and round 0.

use std::net::SocketAddr;
use std::time::Duration;

use super::types::NodeKey;
use crate::store::{AuditResult, NewAudit, NewEvent, StoreError, Tx};

/// Who sent the round.
#[derive(Debug, Clone, Default)]
pub struct ClientInfo {
    /// The peer address of the connection.
    pub addr: Option<SocketAddr>,
}

/// The `attestor` of a renewal's audit row.
pub(super) const RENEW: &str = "renew";

/// Which operation a [`Round`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    Join,
    Renew,
}

/// What is known about a round as it goes.
#[derive(Clone)]
pub(super) struct Round {
    pub op: Op,
    pub attestor: String,
    pub round: u8,
    pub client: ClientInfo,
    pub csr_sha256: Option<[u8; 32]>,
    pub token_id: Option<String>,
    pub node_id: Option<String>,
    pub tenant_id: Option<String>,
    pub subject: Option<String>,
    pub node_key: NodeKey,
    pub elapsed: Duration,
    /// SHA-256 of the attestor version that decided the round (the event says which).
    pub attestor_sha256: Option<String>,
    /// Whether that version is the one built into the binary (not a file replacing it).
    pub attestor_built_in: bool,
}

impl Round {
    pub(super) fn new(attestor: String, round: u8, client: ClientInfo) -> Self {
        Self {
            op: Op::Join,
            attestor,
            round,
            client,
            csr_sha256: None,
            token_id: None,
            node_id: None,
            tenant_id: None,
            subject: None,
            node_key: NodeKey::Unattested,
            elapsed: Duration::ZERO,
            attestor_sha256: None,
            attestor_built_in: false,
        }
    }

    /// A renewal (round 0 of the pseudo-attestor [`RENEW`]).
    pub(super) fn renewal(client: ClientInfo) -> Self {
        Self {
            op: Op::Renew,
            ..Self::new(RENEW.to_owned(), 0, client)
        }
    }
}

/// How a round ended.
#[derive(Clone)]
pub(super) struct Decision {
    result: AuditResult,
    reason: Option<String>,
    /// For the log only (never the agent, never the event): what exactly went wrong.
    detail: Option<String>,
    /// JoinService's policy, not the attestor, refused: the event's payload also carries the
    /// reason as the seed names it, `join:<reason>` (`qualifiedReason`). The `reason` column
    /// and the audit row keep the bare code.
    by_join_service: bool,
    /// More fields for the event's payload (the pool and its owner of a `pool-attestor`
    /// refusal).
    extra: serde_json::Map<String, serde_json::Value>,
}

impl Decision {
    pub(super) fn admitted() -> Self {
        Self {
            result: AuditResult::Admitted,
            reason: None,
            detail: None,
            by_join_service: false,
            extra: serde_json::Map::new(),
        }
    }

    pub(super) fn deferred() -> Self {
        Self {
            result: AuditResult::Deferred,
            reason: None,
            detail: None,
            by_join_service: false,
            extra: serde_json::Map::new(),
        }
    }

    pub(super) fn refused(reason: &str) -> Self {
        Self {
            result: AuditResult::Refused,
            reason: Some(reason.to_owned()),
            detail: None,
            by_join_service: false,
            extra: serde_json::Map::new(),
        }
    }

    /// A refusal by JoinService itself; `by_join_service` when its policy overrode an
    /// admission ([`super::Refusal::overrides_admission`]).
    pub(super) fn host(refusal: super::Refusal) -> Self {
        Self {
            by_join_service: refusal.overrides_admission(),
            ..Self::refused(&refusal.reason())
        }
    }

    /// How the round ended.
    pub(super) fn result(&self) -> AuditResult {
        self.result
    }

    /// The reason of a refusal.
    pub(super) fn reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }

    /// Adds a field to the event's payload.
    pub(super) fn with(mut self, key: &str, value: impl Into<serde_json::Value>) -> Self {
        self.extra.insert(key.to_owned(), value.into());
        self
    }

    /// `join:<reason>` for a refusal by JoinService's policy.
    fn qualified_reason(&self) -> Option<String> {
        self.reason
            .as_deref()
            .filter(|_| self.by_join_service)
            .map(|r| format!("join:{r}"))
    }

    pub(super) fn detail(mut self, detail: String) -> Self {
        self.detail = Some(detail);
        self
    }

    fn event_kind(&self, op: Op) -> &'static str {
        match (op, self.result) {
            (Op::Join, AuditResult::Admitted) => "node.joined",
            (Op::Join, AuditResult::Deferred) => "join.deferred",
            (Op::Join, AuditResult::Refused) => "security.join.refused",
            // Never written through here: a shadow's verdict has an audit row and no event.
            (Op::Join, _) => "join.shadow",
            (Op::Renew, AuditResult::Refused) => "security.renew.refused",
            // A renewal is never deferred.
            (Op::Renew, _) => "node.renewed",
        }
    }
}

/// Writes the round's audit row and event in `tx`; their time (database time, ms).
pub(super) async fn write(
    tx: &mut Tx,
    round: &Round,
    decision: &Decision,
) -> Result<i64, StoreError> {
    let at = tx.now().await?;
    write_at(tx, round, decision, at).await?;
    Ok(at)
}

/// Writes the round's audit row and event in `tx`, stamped `at` (ms since the Unix epoch): a
/// record written later than its round ended ([`super::backlog`]).
pub(super) async fn write_at(
    tx: &mut Tx,
    round: &Round,
    decision: &Decision,
    at: i64,
) -> Result<(), StoreError> {
    let (audit, event) = rows(round, decision, at);
    tx.insert_audit_and_event(&audit, &event).await
}

/// [`write_at`], then commits `tx`: on SQLite one round trip for both
/// ([`Tx::commit_with_audit_and_event`]), the last of a join's locked phase.
pub(super) async fn write_and_commit(
    tx: Tx,
    round: &Round,
    decision: &Decision,
    at: i64,
) -> Result<(), StoreError> {
    let (audit, event) = rows(round, decision, at);
    tx.commit_with_audit_and_event(&audit, &event).await
}

/// The round's audit row and event, stamped `at`.
pub(super) fn rows(round: &Round, decision: &Decision, at: i64) -> (NewAudit, NewEvent) {
    let node_key = round.node_key.label();
    let mut payload = serde_json::json!({
        "attestor": round.attestor,
        "round": round.round,
        "reason": decision.reason,
        "tokenId": round.token_id,
        "nodeId": round.node_id,
        "tenantId": round.tenant_id,
        "subject": round.subject,
        "nodeKey": node_key,
        "attestorSha256": round.attestor_sha256,
    });
    if let Some(fields) = payload.as_object_mut() {
        if let Some(qualified) = decision.qualified_reason() {
            fields.insert("qualifiedReason".to_owned(), qualified.into());
        }
        for (k, v) in &decision.extra {
            fields.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    let audit = NewAudit {
        at,
        attestor: round.attestor.clone(),
        round: u32::from(round.round),
        result: decision.result,
        reason: decision.reason.clone(),
        node_id: round.node_id.clone(),
        token_id: round.token_id.clone(),
        subject: round.subject.clone(),
        node_key: Some(node_key.to_owned()),
        csr_sha256: round.csr_sha256,
        client_addr: round.client.addr.map(|a| a.to_string()),
    };
    let event = NewEvent {
        at,
        kind: decision.event_kind(round.op).to_owned(),
        tenant_id: round.tenant_id.clone(),
        node_id: round.node_id.clone(),
        attestor: Some(round.attestor.clone()),
        reason: decision.reason.clone(),
        token_id: round.token_id.clone(),
        payload,
    };
    (audit, event)
}

/// A shadow attestor's verdict on a round: an audit row of its own (attestor: the shadow's
/// id; result: `shadow-*`; the round's CSR hash, so it reads beside the live row), no event,
/// no sink copy, a log line. What the shadow named (node, token, subject) is recorded as it
/// said it, unchecked: nothing acts on it.
pub(super) async fn write_shadow(
    db: &crate::store::Db,
    round: &Round,
    shadow: &ShadowVerdict,
) -> Result<(), StoreError> {
    tracing::info!(
        attestor = %shadow.attestor,
        shadow_of = %round.attestor,
        round = round.round,
        result = shadow.result.as_str(),
        reason = shadow.reason.as_deref().unwrap_or(""),
        call_us = shadow.elapsed.as_micros() as u64,
        "shadow verdict"
    );
    let mut tx = db.begin().await?;
    let at = tx.now().await?;
    tx.insert_audit(&NewAudit {
        at,
        attestor: shadow.attestor.clone(),
        round: u32::from(round.round),
        result: shadow.result,
        reason: shadow.reason.clone(),
        node_id: shadow.node_id.clone(),
        token_id: shadow.token_id.clone().or_else(|| round.token_id.clone()),
        subject: shadow.subject.clone(),
        node_key: None,
        csr_sha256: round.csr_sha256,
        client_addr: round.client.addr.map(|a| a.to_string()),
    })
    .await?;
    tx.commit().await
}

/// What a shadow attestor said about a round.
pub(super) struct ShadowVerdict {
    pub attestor: String,
    pub result: AuditResult,
    pub reason: Option<String>,
    pub node_id: Option<String>,
    pub token_id: Option<String>,
    pub subject: Option<String>,
    pub elapsed: Duration,
}

impl ShadowVerdict {
    /// The verdict of shadow `attestor`'s call: its outcome, or the refusal a fault would have
    /// been (`attestor-busy` for a shadow that did not run because it had no free slot).
    pub(super) fn of(
        attestor: String,
        result: Result<crate::runtime::bindings::types::Outcome, crate::runtime::Fault>,
        elapsed: Duration,
    ) -> Self {
        use crate::runtime::bindings::types::Outcome;
        let verdict = |result, reason| Self {
            attestor: attestor.clone(),
            result,
            reason,
            node_id: None,
            token_id: None,
            subject: None,
            elapsed,
        };
        match result {
            Ok(Outcome::Admitted(r)) => Self {
                node_id: r.node_id,
                token_id: r.token_id,
                subject: r.subject,
                ..verdict(AuditResult::ShadowAdmitted, None)
            },
            Ok(Outcome::Deferred(_)) => verdict(AuditResult::ShadowDeferred, None),
            Ok(Outcome::Refused(r)) => Self {
                node_id: r.node_id,
                token_id: r.token_id,
                ..verdict(AuditResult::ShadowRefused, Some(r.reason))
            },
            Err(fault) => verdict(AuditResult::ShadowRefused, Some(shadow_fault(&fault))),
        }
    }
}

/// The reason a shadow's fault is recorded with: finer than the live path's `attestor-fault`,
/// since telling a candidate's timeout from its trap is what the shadow is run for.
fn shadow_fault(fault: &crate::runtime::Fault) -> String {
    use crate::runtime::Fault;
    match fault {
        Fault::Timeout => "attestor-timeout".to_owned(),
        Fault::OutOfMemory => "attestor-out-of-memory".to_owned(),
        Fault::Trap(_) => "attestor-trap".to_owned(),
        Fault::Malformed(_) => "attestor-malformed".to_owned(),
        other => super::Refusal::of_fault(other).reason(),
    }
}

/// The sink's copy of a refused round, at the time of its audit row (or, if that was not
/// written, the host's clock).
pub(super) fn refusal(round: &Round, decision: &Decision, at: Option<i64>) -> super::sink::Refusal {
    let at = at.unwrap_or_else(crate::wall_clock::now_ms);
    super::sink::Refusal {
        kind: decision.event_kind(round.op),
        attestor: round.attestor.clone(),
        reason: decision.reason.clone().unwrap_or_default(),
        token_id: round.token_id.clone(),
        node_id: round.node_id.clone(),
        tenant_id: round.tenant_id.clone(),
        round: round.round,
        at,
    }
}

/// Logs the round with structured fields.
pub(super) fn log(round: &Round, decision: &Decision) {
    let client = round.client.addr.map(|a| a.to_string());
    match decision.result {
        AuditResult::Refused => tracing::warn!(
            attestor = %round.attestor,
            round = round.round,
            reason = decision.reason.as_deref().unwrap_or(""),
            detail = decision.detail.as_deref().unwrap_or(""),
            token_id = round.token_id.as_deref().unwrap_or(""),
            node_id = round.node_id.as_deref().unwrap_or(""),
            client = client.as_deref().unwrap_or(""),
            "{}",
            match round.op {
                Op::Join => "join refused",
                Op::Renew => "renew refused",
            }
        ),
        result => tracing::info!(
            attestor = %round.attestor,
            round = round.round,
            result = result.as_str(),
            node_id = round.node_id.as_deref().unwrap_or(""),
            token_id = round.token_id.as_deref().unwrap_or(""),
            call_us = round.elapsed.as_micros() as u64,
            "{}",
            match round.op {
                Op::Join => "join round",
                Op::Renew => "renewed",
            }
        ),
    }
}
