//! JoinService: one join round, natively.
//!
//! The work that needs no row runs before the transaction (parse and verify the CSR, open the
//! sealed token); then one transaction: the attestor's call, JoinService's own policy
//! ([`policy`]), the node and certificate rows, the audit row and the event, then commit, and
//! only then the signed answer. A refusal rolls the attestor's writes back (no token use, no
//! evidence recorded) and records the refusal in a transaction of its own; a deferral commits
//! the attestor's rows and issues and spends nothing.

mod key_attestation;
pub mod policy;
mod record;
pub(crate) mod renew;
pub mod sink;

use std::sync::Arc;

use gatehouse_proto::{
    Challenge, Deferral as WireDeferral, JoinRequest, JoinResponse, JoinResponseBody, Pending, Role,
};

use crate::imports::Session;
use crate::pki::{IssueRequest, Pki, VerifiedCsr, verify_csr};
use crate::runtime::Runtime;
use crate::runtime::bindings::types::{
    self as wit, Deferral, HardwareClaims, JoinRole, NodeKeyAttestation, OpenedToken, Outcome,
};
use crate::store::{Db, NewNode, NewNodeCert, NodeRole, StoreError, Tx};
pub use record::ClientInfo;
use record::{Decision, Round};

/// The attestor a request that names none goes to.
pub const DEFAULT_ATTESTOR: &str = "join-token";
/// Certificates of ramdisks last at most this long (seed: discovery).
const RAMDISK_MAX_TTL_SECONDS: u32 = 2 * 3600;
/// Retry-after when an approval deferral says 0.
const DEFAULT_RETRY_AFTER_SECONDS: u32 = 30;
/// Most rounds one join may take.
const MAX_ROUND: u8 = 16;

/// Why a round produced no signed answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JoinError {
    /// Refused. The agent sees only ACCESS_DENIED; the reason is in the event, audit and log.
    #[error("join refused")]
    Denied,
    /// The host could not decide (database unavailable, signing failed). Nothing was spent.
    #[error("join failed: {0}")]
    Unavailable(String),
}

/// JoinService's settings.
#[derive(Debug, Clone)]
pub struct JoinSettings {
    /// Lifetime of node and site certificates, in seconds.
    pub cert_ttl_seconds: u32,
}

impl Default for JoinSettings {
    fn default() -> Self {
        Self {
            cert_ttl_seconds: 24 * 3600,
        }
    }
}

/// Runs join rounds.
pub struct JoinService {
    db: Db,
    runtime: Arc<Runtime<Tx>>,
    pki: Arc<Pki>,
    settings: JoinSettings,
    /// Where refusals are copied to, if configured ([`sink`]).
    sink: Option<sink::RefusalSink>,
}

impl JoinService {
    /// A JoinService over a database, the loaded attestors and the PKI.
    pub fn new(db: Db, runtime: Arc<Runtime<Tx>>, pki: Arc<Pki>, settings: JoinSettings) -> Self {
        Self {
            db,
            runtime,
            pki,
            settings,
            sink: None,
        }
    }

    /// Copies every refusal to `sink` too (after its audit row and event are written).
    pub fn with_sink(mut self, sink: sink::RefusalSink) -> Self {
        self.sink = Some(sink);
        self
    }

    /// The attestors this service runs.
    pub fn runtime(&self) -> &Runtime<Tx> {
        &self.runtime
    }

    /// Decides one join round.
    pub async fn join(
        &self,
        request: JoinRequest,
        client: &ClientInfo,
    ) -> Result<JoinResponse, JoinError> {
        let attestor = if request.attestor.is_empty() {
            DEFAULT_ATTESTOR.to_owned()
        } else {
            request.attestor.clone()
        };
        let mut round = Round::new(attestor, request.round.clamp(1, MAX_ROUND), client.clone());

        // Before the transaction: everything that needs no row.
        let csr = match verify_csr(&request.csr) {
            Ok(csr) => csr,
            Err(e) => {
                return Err(self
                    .refuse(
                        &mut round,
                        Decision::refused("bad-csr").detail(e.to_string()),
                    )
                    .await);
            }
        };
        round.csr_sha256 = Some(csr.sha256);
        let token = match &request.sealed_token {
            None => None,
            Some(sealed) => {
                match gatehouse_proto::open_token(self.pki.token_opening_key(), sealed, &csr.sha256)
                {
                    Ok(token) => Some(token),
                    Err(e) => {
                        return Err(self
                            .refuse(
                                &mut round,
                                Decision::refused("token-unsealable").detail(e.to_string()),
                            )
                            .await);
                    }
                }
            }
        };
        round.token_id = token.as_ref().map(|t| t.id.clone());
        if !self.runtime.contains(&round.attestor) {
            return Err(self
                .refuse(&mut round, Decision::refused("unknown-attestor"))
                .await);
        }
        if !valid_claims(&request.claims) {
            return Err(self
                .refuse(&mut round, Decision::refused("bad-claims"))
                .await);
        }

        let wit_request = wit::JoinRequest {
            attestor: round.attestor.clone(),
            role: wit_role(request.role),
            attestation: request.attestation.clone(),
            token: token.as_ref().map(|t| OpenedToken {
                id: t.id.clone(),
                secret: t.secret.clone(),
            }),
            csr_der: csr.der.clone(),
            csr_sha256: csr.sha256.to_vec(),
            csr_spki_sha256: csr.spki_sha256.to_vec(),
            claims: HardwareClaims {
                macs: request.claims.macs.clone(),
                product_uuid: request.claims.product_uuid.clone(),
            },
            round: round.round,
        };

        let tx = self.db.begin().await.map_err(|e| unavailable("begin", e))?;
        let session = Session::new(
            round.attestor.clone(),
            tx,
            self.pki.clone(),
            csr.sha256.to_vec(),
        );
        let call = self
            .runtime
            .verify(&round.attestor, session, &wit_request)
            .await;
        round.elapsed = call.elapsed;
        let outcome = match call.result {
            Ok(outcome) => outcome,
            Err(fault) => {
                // The session (and its transaction) is dropped here: rolled back.
                drop(call.session);
                let decision = Decision::refused(fault.reason()).detail(fault.to_string());
                let refused = self.refuse(&mut round, decision).await;
                // The host's storage failed, not the machine: the round is recorded (audit
                // row, or the refusal sink when the database is down) and answered 503
                // retryable, never 403.
                if fault == crate::runtime::Fault::Storage {
                    return Err(JoinError::Unavailable(fault.to_string()));
                }
                return Err(refused);
            }
        };
        let Some(session) = call.session else {
            return Err(self
                .refuse(&mut round, Decision::refused("attestor-fault"))
                .await);
        };

        match outcome {
            Outcome::Refused(r) => {
                drop(session);
                round.token_id = r.token_id.clone().or(round.token_id.take());
                round.node_id = r.node_id.clone();
                round.tenant_id = r.tenant_id.clone();
                Err(self.refuse(&mut round, Decision::refused(&r.reason)).await)
            }
            Outcome::Deferred(deferral) => self.defer(&mut round, session, deferral, &csr).await,
            Outcome::Admitted(result) => {
                self.admit(&mut round, session, result, &request, &csr)
                    .await
            }
        }
    }

    async fn defer(
        &self,
        round: &mut Round,
        session: Session<Tx>,
        deferral: Deferral,
        csr: &VerifiedCsr,
    ) -> Result<JoinResponse, JoinError> {
        let mut tx = session.backend;
        let wire = match deferral {
            Deferral::Approval(a) => {
                round.subject = Some(format!("join-request:{}", a.request_id));
                let retry = if a.retry_after_seconds == 0 {
                    DEFAULT_RETRY_AFTER_SECONDS
                } else {
                    a.retry_after_seconds
                };
                WireDeferral::Pending(Pending {
                    request_id: a.request_id,
                    retry_after_seconds: retry,
                })
            }
            Deferral::Challenge(c) => {
                // Never advertise a deadline later than challenge state can live.
                let now = tx.now().await.map_err(|e| unavailable("now", e))?;
                WireDeferral::Challenge(Challenge {
                    attestor: round.attestor.clone(),
                    payload: c.payload,
                    not_after: c
                        .not_after
                        .min(now.saturating_add(crate::pki::MAX_STATE_TTL_MS)),
                })
            }
        };
        let body = JoinResponseBody {
            v: 1,
            csr_sha256: hex::encode(csr.sha256),
            node_id: String::new(),
            chain: vec![],
            deferral: Some(wire),
        };
        let response = self
            .pki
            .sign_response(&body)
            .map_err(|e| unavailable("sign", e))?;
        record::write(&mut tx, round, &Decision::deferred())
            .await
            .map_err(|e| unavailable("record", e))?;
        tx.commit().await.map_err(|e| unavailable("commit", e))?;
        record::log(round, &Decision::deferred());
        Ok(response)
    }

    async fn admit(
        &self,
        round: &mut Round,
        session: Session<Tx>,
        result: wit::AttestationResult,
        request: &JoinRequest,
        csr: &VerifiedCsr,
    ) -> Result<JoinResponse, JoinError> {
        let Session {
            backend: mut tx,
            effects,
            ..
        } = session;
        round.subject = result.subject.clone();
        round.node_key = result.node_key;
        round.token_id = result.token_id.clone().or(round.token_id.take());
        let now = tx.now().await.map_err(|e| unavailable("now", e))?;
        let stored = match &result.node_id {
            Some(id) => tx.node(id).await.map_err(|e| unavailable("node", e))?,
            None => None,
        };
        let existing_role = stored.as_ref().map(|n| n.role);
        let node = stored.map(crate::imports::wit_node);
        let minted_for = provisioned_target(&mut tx, &effects, &result)
            .await
            .map_err(|e| unavailable("token workflow", e))?;
        let facts = policy::Facts {
            result: &result,
            effects: &effects,
            request_token: round
                .token_id
                .as_deref()
                .filter(|_| request.sealed_token.is_some()),
            role: request.role,
            claims: &request.claims,
            now,
            node: node.as_ref(),
            minted_for: minted_for.as_deref(),
        };
        let placement = match policy::check(&facts) {
            Ok(p) => p,
            Err(refusal) => {
                drop(tx);
                round.node_id = result.node_id.clone();
                round.tenant_id = result.tenant_id.clone();
                return Err(self
                    .refuse(round, Decision::refused_by_policy(refusal))
                    .await);
            }
        };
        round.tenant_id = Some(placement.tenant_id.clone());

        // The pool's joinAttestors, before any reclaim, binding or insert. The attestor has
        // verified the machine already, so the refusal is the pool owner's: the event is the
        // pool's tenant's and names the pool and its owner.
        if let Some(pool_id) = &placement.pool_id {
            let pool = tx
                .pool(&placement.tenant_id, pool_id)
                .await
                .map_err(|e| unavailable("pool", e))?;
            if let Err(refusal) = policy::pool_admits(pool.as_ref(), &round.attestor) {
                drop(tx);
                round.node_id = placement.node_id.clone();
                let owner = pool.and_then(|p| p.owner);
                let decision = Decision::refused_by_policy(refusal)
                    .with("poolId", pool_id.as_str())
                    .with("owner", owner);
                return Err(self.refuse(round, decision).await);
            }
        }

        // Bindings: a hardware identity bound to another node never admits this one.
        for b in &result.bindings {
            match tx
                .bound_node(&b.kind, &b.value)
                .await
                .map_err(|e| unavailable("bound_node", e))?
            {
                Some(other) if Some(&other) != placement.node_id.as_ref() => {
                    drop(tx);
                    round.node_id = Some(other);
                    return Err(self
                        .refuse(round, Decision::refused("bound-elsewhere"))
                        .await);
                }
                _ => {}
            }
        }

        let (node_id, generation) = match (&placement.node_id, &node) {
            (Some(id), Some(existing)) => {
                // Re-key in place: a new identity generation; every older certificate revoked.
                let generation = existing.identity_generation + 1;
                let moved = tx
                    .rekey_node(id, generation, now)
                    .await
                    .map_err(|e| unavailable("rekey", e))?;
                if !moved {
                    // Another reclaim committed first, or the node was retired or deleted
                    // meanwhile: the agent retries and is then admitted or refused afresh.
                    return Err(unavailable("rekey", "a concurrent reclaim moved the node"));
                }
                tx.revoke_node_certs_below(id, generation)
                    .await
                    .map_err(|e| unavailable("revoke", e))?;
                (id.clone(), generation)
            }
            _ => {
                let id = new_id("node_");
                tx.insert_node(&NewNode {
                    id: id.clone(),
                    tenant_id: placement.tenant_id.clone(),
                    pool_id: placement.pool_id.clone(),
                    site_id: placement.site_id.clone(),
                    role: node_role(request.role),
                    identity_generation: 1,
                    hardware_key: request.claims.product_uuid.clone(),
                    created_at: now,
                })
                .await
                .map_err(|e| unavailable("insert node", e))?;
                (id, 1)
            }
        };
        round.node_id = Some(node_id.clone());
        for b in &result.bindings {
            match tx.bind(&b.kind, &b.value, &node_id).await {
                Ok(()) => {}
                // A concurrent join bound it first.
                Err(StoreError::BoundElsewhere(other)) => {
                    drop(tx);
                    round.node_id = Some(other);
                    return Err(self
                        .refuse(round, Decision::refused("bound-elsewhere"))
                        .await);
                }
                Err(e) => return Err(unavailable("bind", e)),
            }
        }

        let role = issued_role(
            request.role,
            existing_role.filter(|_| placement.node_id.is_some()),
        );
        // Both checked by the policy already: a certified key's AK statement (the second URI
        // SAN, after the SPIFFE ID, which every renewal must prove again) and a ramdisk's kinds.
        let statements: Vec<String> = result
            .node_key_uri
            .clone()
            .into_iter()
            .chain(
                policy::kinds_statement(&result, request.role)
                    .ok()
                    .flatten(),
            )
            .collect();
        let response = self
            .issue(
                &mut tx,
                &Issue {
                    node_id: &node_id,
                    role,
                    generation,
                    statements: &statements,
                    shorter_ttl_seconds: result.cert_ttl_seconds,
                    now,
                },
                csr,
            )
            .await?;
        let decision = Decision::admitted();
        record::write(&mut tx, round, &decision)
            .await
            .map_err(|e| unavailable("record", e))?;
        tx.commit().await.map_err(|e| unavailable("commit", e))?;
        record::log(round, &decision);
        Ok(response)
    }

    /// Issues a certificate for the CSR's key, records its `node_certs` row in `tx`, and signs
    /// the answer (which the caller returns only after committing `tx`).
    async fn issue(
        &self,
        tx: &mut Tx,
        cert: &Issue<'_>,
        csr: &VerifiedCsr,
    ) -> Result<JoinResponse, JoinError> {
        let mut ttl = self.settings.cert_ttl_seconds;
        if cert.role == NodeRole::Ramdisk {
            ttl = ttl.min(RAMDISK_MAX_TTL_SECONDS);
        }
        if let Some(shorter) = cert.shorter_ttl_seconds {
            ttl = ttl.min(shorter.max(60));
        }
        // Back-date a minute for clock skew between the database and relying parties.
        let not_before = cert.now - 60_000;
        let not_after = cert.now + i64::from(ttl) * 1000;
        let issued = self
            .pki
            .issue_node_cert(&IssueRequest {
                node_id: cert.node_id,
                role: cert.role.as_str(),
                spki_der: &csr.spki_der,
                statements: cert.statements,
                not_before_ms: not_before,
                not_after_ms: not_after,
            })
            .map_err(|e| unavailable("issue", e))?;
        tx.insert_node_cert(&NewNodeCert {
            serial: issued.serial_hex.clone(),
            node_id: cert.node_id.to_owned(),
            der: issued.der.clone(),
            generation: cert.generation,
            role: cert.role,
            not_before: issued.not_before_ms,
            not_after: issued.not_after_ms,
            statements: cert.statements.to_vec(),
            created_at: cert.now,
        })
        .await
        .map_err(|e| unavailable("insert cert", e))?;
        let body = JoinResponseBody {
            v: 1,
            csr_sha256: hex::encode(csr.sha256),
            node_id: cert.node_id.to_owned(),
            chain: vec![issued.der, self.pki.node_ca_der().to_vec()],
            deferral: None,
        };
        self.pki
            .sign_response(&body)
            .map_err(|e| unavailable("sign", e))
    }

    /// Records a refusal in a transaction of its own (the round's was rolled back), offers a
    /// copy to the sink (which never waits), and returns the one error every refusal becomes.
    /// A failure to record is logged, never turned into an admission.
    async fn refuse(&self, round: &mut Round, decision: Decision) -> JoinError {
        record::log(round, &decision);
        let mut at = None;
        match self.db.begin().await {
            Ok(mut tx) => {
                let written = record::write(&mut tx, round, &decision).await;
                if let Err(e) = match written {
                    Ok(written_at) => {
                        at = Some(written_at);
                        tx.commit().await
                    }
                    Err(e) => Err(e),
                } {
                    tracing::error!(attestor = %round.attestor, error = %e, "could not record a refused join");
                }
            }
            Err(e) => {
                tracing::error!(attestor = %round.attestor, error = %e, "could not record a refused join")
            }
        }
        if let Some(sink) = &self.sink {
            sink.offer(record::refusal(round, &decision, at));
        }
        JoinError::Denied
    }
}

/// For a join that spent a `provisioned` token: the node of the running workflow whose
/// `userdata.render` step minted it, read here rather than taken from the attestor, so the
/// policy lets that token re-key exactly that node ([`policy::Facts::minted_for`]).
async fn provisioned_target(
    tx: &mut Tx,
    effects: &crate::imports::Effects,
    result: &wit::AttestationResult,
) -> Result<Option<String>, StoreError> {
    let provisioned = effects
        .locked_tokens
        .iter()
        .find(|t| Some(&t.id) == result.token_id.as_ref() && t.role == wit::TokenRole::Provisioned);
    let Some(token) = provisioned else {
        return Ok(None);
    };
    Ok(tx
        .token_workflow(&token.id)
        .await?
        .filter(|w| w.state == crate::store::WORKFLOW_RUNNING)
        .map(|w| w.node_id))
}

fn unavailable(what: &str, e: impl std::fmt::Display) -> JoinError {
    tracing::error!(step = what, error = %e, "join failed");
    JoinError::Unavailable(format!("{what}: {e}"))
}

fn node_role(role: Role) -> NodeRole {
    match role {
        Role::Node => NodeRole::Node,
        Role::Site => NodeRole::Site,
        Role::Ramdisk => NodeRole::Ramdisk,
    }
}

fn wit_role(role: Role) -> JoinRole {
    match role {
        Role::Node => JoinRole::Node,
        Role::Site => JoinRole::Site,
        Role::Ramdisk => JoinRole::Ramdisk,
    }
}

/// Claims are unverified but bounded: at most 64 MACs and short strings.
fn valid_claims(c: &gatehouse_proto::Claims) -> bool {
    c.macs.len() <= 64
        && c.macs.iter().all(|m| m.len() <= 64 && m.is_ascii())
        && c.product_uuid
            .as_ref()
            .is_none_or(|u| u.len() <= 64 && u.is_ascii())
}

/// A fresh id: `prefix` and 26 characters of lowercase base32 (130 random bits).
pub(crate) fn new_id(prefix: &str) -> String {
    const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    let bytes: [u8; 26] = rand::random();
    let mut id = String::with_capacity(prefix.len() + 26);
    id.push_str(prefix);
    id.extend(bytes.iter().map(|b| ALPHABET[usize::from(b & 31)] as char));
    id
}

/// A certificate to issue.
struct Issue<'a> {
    node_id: &'a str,
    role: NodeRole,
    generation: u32,
    /// `urn:bc:` statements after the SPIFFE ID.
    statements: &'a [String],
    /// A lifetime shorter than the role's default, if the attestor asked for one.
    shorter_ttl_seconds: Option<u32>,
    /// Database time.
    now: i64,
}

/// The role a join's certificate carries: the requested one, except that a lessee's
/// node-tenant node re-joining as `node` keeps its restriction.
fn issued_role(requested: Role, existing: Option<NodeRole>) -> NodeRole {
    match (requested, existing) {
        (Role::Node, Some(NodeRole::NodeTenant)) => NodeRole::NodeTenant,
        (role, _) => node_role(role),
    }
}

/// Re-exported for the audit of TPM-held keys.
pub(crate) fn node_key_label(k: NodeKeyAttestation) -> &'static str {
    match k {
        NodeKeyAttestation::Tpm => "tpm",
        NodeKeyAttestation::Unattested => "unattested",
    }
}
