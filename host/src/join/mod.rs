//! JoinService: one join round, natively.
//!
//! The work that needs no row runs before the transaction (parse and verify the CSR, open the
//! sealed token). Then the attestor's call, with no transaction held: it reads committed
//! state and its writes are buffered ([`crate::imports::Staged`]). Then one short write
//! transaction, the locked phase: the rows the attestor read are locked and read again (a
//! change reruns the round, at most [`MAX_ATTEMPTS`] times, then `join-conflict`), the
//! buffered writes applied, JoinService's own policy ([`policy`]), the node and certificate
//! rows, the audit row and the event, then commit, and only then the signed answer. A refusal
//! applies none of the attestor's writes (no token use, no evidence recorded) and records the
//! refusal in a transaction of its own; a deferral applies only the attestor's own rows (join
//! requests, key/value) and issues and spends nothing.

mod backlog;
mod key_attestation;
pub mod policy;
mod record;
pub mod refusal;
pub(crate) mod renew;
pub mod request;
pub mod sink;
mod spend_gate;
pub mod types;

use std::sync::Arc;

use gatehouse_proto::{
    Challenge, Deferral as WireDeferral, JoinRequest, JoinResponse, JoinResponseBody, Pending, Role,
};

use crate::imports::{Apply, Effects, Session, Settle, Spends, Staged};
use crate::pki::{IssueRequest, LivePki, OpenError, Pki, VerifiedCsr, verify_csr};
use crate::runtime::Runtime;
use crate::runtime::bindings::types::{
    self as wit, Deferral, HardwareClaims, JoinRole, OpenedToken, Outcome,
};
use crate::store::{Db, NewNode, NewNodeCert, NodeRole, NodeRow, RowLock, StoreError, Tx, new_id};
pub use record::ClientInfo;
use record::{Decision, Round};
pub use refusal::Refusal;
use types::{Admission, LockedToken};

/// The attestor a request that names none goes to.
pub const DEFAULT_ATTESTOR: &str = "join-token";
/// Certificates of ramdisks last at most this long (seed: discovery).
const RAMDISK_MAX_TTL_SECONDS: u32 = 2 * 3600;
/// Retry-after when an approval deferral says 0.
const DEFAULT_RETRY_AFTER_SECONDS: u32 = 30;
/// Most rounds one join may take.
const MAX_ROUND: u8 = 16;
/// How often one round runs its attestor when what it read changes before the locked phase;
/// then the round is refused `join-conflict`.
const MAX_ATTEMPTS: u32 = 3;

/// What the attestor decided, for the locked phase.
enum Decided {
    Deferred(Deferral),
    Admitted(wit::AttestationResult),
}
/// The built-in attestors that re-key nodes without a token (x509pop by the node's own
/// certificate, provisioned by its workflow, tpm by its EK), and so have the operator's reclaim
/// grant unless `[attestors.<id>] reclaim = false`. A component loaded from `attestors_dir`,
/// even one replacing a built-in, has it only when the operator says so.
const RECLAIMING_BUILT_INS: &[&str] = &["x509pop", "provisioned", "tpm"];

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
    /// Every call slot of the attestor was taken and none came free in time (rule 13: it is
    /// slow, hostile, or waiting on a database that does not answer). Nothing was decided or
    /// spent, and the round is recorded as refused `attestor-busy`; the machine may try again.
    #[error("attestor busy")]
    Busy,
    /// The node was issued a certificate less than the per-node interval ago; recorded as
    /// refused `rate-limited`, nothing spent. It may try again after this long.
    #[error("rate limited")]
    RateLimited(std::time::Duration),
}

/// JoinService's settings.
#[derive(Debug, Clone)]
pub struct JoinSettings {
    /// Lifetime of node and site certificates, in seconds.
    pub cert_ttl_seconds: u32,
    /// The operator's `[attestors.<id>] reclaim` grants, by attestor id.
    pub reclaim_grants: std::collections::BTreeMap<String, bool>,
    /// How long after a renewal the certificates it replaced stay live (ms): a connection
    /// authenticated with one is not cut at once.
    pub renewal_grace_ms: i64,
    /// The least time between two certificates issued to one existing node (ms; 0: no
    /// limit): a renewal, or a re-join of the node, sooner is refused `rate-limited` (429).
    pub node_issue_interval_ms: i64,
}

/// The default of [`JoinSettings::renewal_grace_ms`]: 15 minutes, the longest a discovery
/// assertion lives (`maxAgeMs`), so a boot a site rendered just before it renewed its key
/// still verifies under the key that signed it.
pub const DEFAULT_RENEWAL_GRACE_MS: i64 = 15 * 60 * 1000;
/// The default of [`JoinSettings::node_issue_interval_ms`]: 30 seconds.
pub const DEFAULT_NODE_ISSUE_INTERVAL_MS: i64 = 30 * 1000;

impl Default for JoinSettings {
    fn default() -> Self {
        Self {
            cert_ttl_seconds: 24 * 3600,
            reclaim_grants: std::collections::BTreeMap::new(),
            renewal_grace_ms: DEFAULT_RENEWAL_GRACE_MS,
            node_issue_interval_ms: DEFAULT_NODE_ISSUE_INTERVAL_MS,
        }
    }
}

/// Runs join rounds.
pub struct JoinService {
    db: Db,
    runtime: Arc<Runtime<Staged>>,
    pki: LivePki,
    settings: JoinSettings,
    /// Where refusals are copied to, if configured ([`sink`]).
    /// Replaced by a reload (SIGHUP) when `[audit.sink]` changes.
    sink: std::sync::RwLock<Option<sink::RefusalSink>>,
    /// Records of rounds the database could not take, until it can.
    backlog: Arc<backlog::Backlog>,
    /// What `/metrics` shows about rounds.
    metrics: Arc<crate::metrics::Metrics>,
    /// On PostgreSQL, each token's spends past [`spend_gate::PASSES_PER_TOKEN`] wait here
    /// rather than on the token's row; none on SQLite.
    spend_gate: Option<spend_gate::SpendGate>,
}

impl JoinService {
    /// A JoinService over a database, the loaded attestors and the PKI.
    pub fn new(
        db: Db,
        runtime: Arc<Runtime<Staged>>,
        pki: LivePki,
        settings: JoinSettings,
    ) -> Self {
        Self {
            spend_gate: (db.backend() == crate::store::Backend::Postgres)
                .then(|| spend_gate::SpendGate::new(spend_gate::PASSES_PER_TOKEN)),
            db,
            runtime,
            pki,
            settings,
            sink: std::sync::RwLock::new(None),
            backlog: Arc::default(),
            metrics: Arc::default(),
        }
    }

    /// The PKI now (see [`LivePki`] for why a round may take it more than once).
    fn pki(&self) -> Arc<Pki> {
        self.pki.get()
    }

    /// This service's metrics (`GET /metrics`).
    pub fn metrics(&self) -> &Arc<crate::metrics::Metrics> {
        &self.metrics
    }

    /// Refusals the current audit sink dropped so far (0 without a sink; a sink replaced by a
    /// reload starts again at 0).
    pub fn sink_dropped(&self) -> u64 {
        self.sink
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .map_or(0, sink::RefusalSink::dropped)
    }

    /// The log line of a decided round, and its count in the metrics.
    fn log(&self, round: &Round, decision: &Decision) {
        record::log(round, decision);
        let (op, attestor) = self.metric_labels(round);
        self.metrics
            .round(op, attestor, decision.result().as_str(), decision.reason());
    }

    /// The metrics' `op` and (bounded) `attestor` of a round: a client can name any valid id,
    /// and only loaded attestors are counted by name.
    fn metric_labels<'r>(&self, round: &'r Round) -> (crate::metrics::Op, &'r str) {
        match round.op {
            record::Op::Renew => (crate::metrics::Op::Renew, record::RENEW),
            record::Op::Join if self.runtime.contains(&round.attestor) => {
                (crate::metrics::Op::Join, round.attestor.as_str())
            }
            record::Op::Join => (crate::metrics::Op::Join, "unknown"),
        }
    }

    /// Opens a write transaction, timing the wait for it.
    async fn begin(&self) -> Result<Tx, StoreError> {
        self.begin_spending(None).await.1
    }

    /// Opens a write transaction once a pass to spend `token` is held (on PostgreSQL, see
    /// [`spend_gate`]), timing the wait for both. Hold the pass until the transaction ends.
    async fn begin_spending(
        &self,
        token: Option<&str>,
    ) -> (Option<spend_gate::Pass>, Result<Tx, StoreError>) {
        let started = std::time::Instant::now();
        let pass = match (&self.spend_gate, token) {
            (Some(gate), Some(token)) => Some(gate.enter(token).await),
            _ => None,
        };
        let tx = self.db.begin().await;
        self.metrics.db_begin_wait(started.elapsed());
        (pass, tx)
    }

    /// Copies every refusal to `sink` too (after its audit row and event are written).
    pub fn with_sink(self, sink: sink::RefusalSink) -> Self {
        self.set_sink(Some(sink));
        self
    }

    /// Copies refusals from now on to `sink` (or to none); returns the one it replaces.
    pub fn set_sink(&self, sink: Option<sink::RefusalSink>) -> Option<sink::RefusalSink> {
        let mut current = self
            .sink
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        std::mem::replace(&mut *current, sink)
    }

    /// The attestors this service runs.
    pub fn runtime(&self) -> &Runtime<Staged> {
        &self.runtime
    }

    /// Decides one join round.
    pub async fn join(
        &self,
        request: JoinRequest,
        client: &ClientInfo,
    ) -> Result<JoinResponse, JoinError> {
        let requested = if request.attestor.is_empty() {
            DEFAULT_ATTESTOR
        } else {
            request.attestor.as_str()
        };
        // The id reaches the log, the audit row and the event only once it is a valid id.
        let valid_id = request::valid_attestor_id(requested);
        let attestor = if valid_id {
            requested.to_owned()
        } else {
            request::INVALID_ATTESTOR.to_owned()
        };
        let mut round = Round::new(attestor, request.round.clamp(1, MAX_ROUND), client.clone());
        if !valid_id {
            let decision = Decision::host(Refusal::BadAttestorId)
                .detail(format!("an id of {} bytes", requested.len()));
            return Err(self.refuse(&mut round, decision).await);
        }

        let started = std::time::Instant::now();
        let outcome = self.decide(&mut round, request).await;
        let answer = self.recorded(&mut round, outcome).await;
        let (op, attestor) = self.metric_labels(&round);
        self.metrics.round_duration(op, attestor, started.elapsed());
        answer
    }

    /// Every round leaves its record: one that ended [`JoinError::Unavailable`] (the database
    /// failed, from `BEGIN` on) is recorded here as refused `storage-error` and still answered
    /// "try again"; if the database cannot take that record either, the refusal sink gets its
    /// copy and the [`backlog`] keeps it until a later round finds the database back. After a
    /// round that reached the database, waiting records are written in the background.
    async fn recorded(
        &self,
        round: &mut Round,
        outcome: Result<JoinResponse, JoinError>,
    ) -> Result<JoinResponse, JoinError> {
        match outcome {
            Err(JoinError::Unavailable(detail)) => {
                let decision = Decision::host(Refusal::StorageError).detail(detail.clone());
                self.refuse(round, decision).await;
                Err(JoinError::Unavailable(detail))
            }
            other => {
                if !self.backlog.is_empty() {
                    let (backlog, db) = (self.backlog.clone(), self.db.clone());
                    tokio::spawn(async move { backlog.flush(&db).await });
                }
                other
            }
        }
    }

    /// The round after its attestor id is known valid: the CSR, the token, the attestor's call
    /// and the locked phase.
    async fn decide(
        &self,
        round: &mut Round,
        request: JoinRequest,
    ) -> Result<JoinResponse, JoinError> {
        // Before the transaction: everything that needs no row.
        let csr = match verify_csr(&request.csr) {
            Ok(csr) => csr,
            Err(e) => {
                let decision = Decision::host(Refusal::BadCsr).detail(e.to_string());
                return Err(self.refuse(round, decision).await);
            }
        };
        round.csr_sha256 = Some(csr.sha256);
        let token = match &request.sealed_token {
            None => None,
            // The host's clock: no transaction (and its database time) is open yet.
            Some(sealed) => {
                match self
                    .pki()
                    .open_token(sealed, &csr.sha256, crate::wall_clock::now_ms())
                {
                    Ok(token) => Some(token),
                    Err(e) => {
                        let refusal = match e {
                            OpenError::RetiredKey { .. } => Refusal::RetiredEncryptionKey,
                            _ => Refusal::TokenUnsealable,
                        };
                        let decision = Decision::host(refusal).detail(e.to_string());
                        return Err(self.refuse(round, decision).await);
                    }
                }
            }
        };
        round.token_id = token.as_ref().map(|t| t.id.clone());
        // One version of the attestors decides the round, reruns included: a reload swaps in
        // the next version for the rounds that start after it ([`Runtime::snapshot`]).
        let attestors = self.runtime.snapshot();
        let Some(summary) = attestors.summary(&round.attestor) else {
            return Err(self
                .refuse(round, Decision::host(Refusal::UnknownAttestor))
                .await);
        };
        round.attestor_sha256 = Some(summary.sha256.clone());
        round.attestor_built_in = summary.source == crate::runtime::Source::BuiltIn;
        let claims = match request::normalise_claims(&request.claims) {
            Ok(claims) => claims,
            Err(e) => {
                let decision = Decision::host(Refusal::BadClaims).detail(e.to_string());
                return Err(self.refuse(round, decision).await);
            }
        };

        let wit_request = Arc::new(wit::JoinRequest {
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
                macs: claims.macs.clone(),
                product_uuid: claims.product_uuid.clone(),
            },
            round: round.round,
        });

        self.shadows(&attestors, round, &wit_request);
        let mut attempt = 1;
        loop {
            // The guest runs on committed reads with its writes buffered: no transaction, no
            // lock and no connection is held while it runs (rule: one attestor cannot stall
            // the others).
            let session = Session::new(
                round.attestor.clone(),
                Staged::new(self.db.clone(), round.attestor.clone()),
                self.pki(),
                csr.sha256.to_vec(),
            );
            let call = attestors
                .verify(&round.attestor, session, &wit_request)
                .await;
            round.elapsed += call.elapsed;
            self.metrics
                .attestor_call(&round.attestor, call.elapsed, call.phases.on_own_thread);
            let outcome = match call.result {
                Ok(outcome) => outcome,
                // The host's storage failed, not the machine: answered 503 retryable, never
                // 403, and recorded as `storage-error` ([`JoinService::recorded`]).
                Err(crate::runtime::Fault::Storage) => {
                    return Err(JoinError::Unavailable(
                        crate::runtime::Fault::Storage.to_string(),
                    ));
                }
                // No slot of the attestor came free: not a verdict on the machine (during a
                // database outage the slots are taken by calls waiting on it), so "try again".
                Err(crate::runtime::Fault::Busy) => {
                    let decision = Decision::host(Refusal::AttestorBusy);
                    self.refuse(round, decision).await;
                    return Err(JoinError::Busy);
                }
                Err(fault) => {
                    let decision =
                        Decision::host(Refusal::of_fault(&fault)).detail(fault.to_string());
                    return Err(self.refuse(round, decision).await);
                }
            };
            let Some(session) = call.session else {
                return Err(self
                    .refuse(round, Decision::host(Refusal::AttestorFault))
                    .await);
            };
            let (decided, apply) = match outcome {
                Outcome::Refused(r) => {
                    round.token_id = r.token_id.clone().or(round.token_id.take());
                    round.node_id = r.node_id.clone();
                    round.tenant_id = r.tenant_id.clone();
                    return Err(self.refuse(round, Decision::refused(&r.reason)).await);
                }
                Outcome::Deferred(d) => {
                    // A deferral spends nothing: a round that spent anything applies none of
                    // its writes and is refused.
                    if let Some(spent) = spent_in(&session.effects) {
                        let decision = Decision::host(Refusal::AttestorFault)
                            .detail(format!("deferred after {spent}"));
                        return Err(self.refuse(round, decision).await);
                    }
                    (Decided::Deferred(d), Apply::OwnRows)
                }
                Outcome::Admitted(r) => (Decided::Admitted(r), Apply::Everything),
            };

            // The locked phase: short and host-side. Lock and re-read what the decision read,
            // apply the buffered writes, then JoinService's policy, issuance, audit and commit.
            let Session {
                backend: staged,
                effects,
                ..
            } = session;
            let locked = Locked {
                staged,
                effects,
                apply,
                decided,
                request: Admitting {
                    role: request.role,
                    claims: &claims,
                    token: token.as_ref().map(|t| policy::RequestToken {
                        id: &t.id,
                        secret: &t.secret,
                    }),
                    csr: &csr,
                },
            };
            match self.locked_phase(round, locked).await {
                Ok(response) => return Ok(response),
                // What the attestor read changed, or another transaction held a row this one
                // needed: the round runs again on what is committed now.
                Err(Stop::Conflict(why)) if attempt < MAX_ATTEMPTS => {
                    tracing::info!(attestor = %round.attestor, attempt, %why, "join round run again");
                }
                Err(Stop::Storage(failure)) if failure.contention && attempt < MAX_ATTEMPTS => {
                    tracing::info!(attestor = %round.attestor, attempt, %failure, "join round run again");
                }
                Err(stop) => return Err(self.stopped(round, stop).await),
            }
            attempt += 1;
        }
    }

    /// Starts the shadows of the round's attestor on the same request, each in a task of its
    /// own: the round never waits for them (a shadow runs only on a free call share and slot,
    /// bounded as a live call is, within its own deadline), their writes are buffered and
    /// dropped, never applied, and each verdict becomes an audit row of its own
    /// ([`record::write_shadow`]). A shadow reads what is committed when it reads: usually
    /// what the live attestor read, but a round the live attestor commits first (a token it
    /// spent) can show in the shadow's verdict.
    fn shadows(
        &self,
        attestors: &Arc<crate::runtime::Attestors<Staged>>,
        round: &Round,
        request: &Arc<wit::JoinRequest>,
    ) {
        for shadow in attestors.shadows_of(&round.attestor) {
            // It runs as the attestor it shadows: the request names that one, and its key/value
            // space is that one's (read only: nothing it writes is applied).
            let session = Session::new(
                round.attestor.clone(),
                Staged::new(self.db.clone(), round.attestor.clone()),
                self.pki(),
                request.csr_sha256.clone(),
            );
            let (attestors, db, request, round) = (
                attestors.clone(),
                self.db.clone(),
                request.clone(),
                round.clone(),
            );
            tokio::spawn(async move {
                let verdict = match attestors.verify_shadow(&shadow, session, &request).await {
                    Some(call) => record::ShadowVerdict::of(shadow, call.result, call.elapsed),
                    None => record::ShadowVerdict::of(
                        shadow,
                        Err(crate::runtime::Fault::Busy),
                        std::time::Duration::ZERO,
                    ),
                };
                if let Err(e) = record::write_shadow(&db, &round, &verdict).await {
                    tracing::warn!(attestor = %verdict.attestor, error = %e, "could not record a shadow's verdict");
                }
            });
        }
    }

    /// The locked phase of one attempt: one short write transaction that locks and re-reads
    /// what the attestor read, applies its buffered writes, and defers or admits.
    async fn locked_phase(
        &self,
        round: &mut Round,
        locked: Locked<'_>,
    ) -> Result<JoinResponse, Stop> {
        let Locked {
            staged,
            mut effects,
            apply,
            decided,
            request,
        } = locked;
        let spending = policy::token_to_spend(
            &effects.consumed_tokens,
            request.token,
            effects.locked_tokens.iter().map(LockedToken::from),
        );
        // Held until the locked phase ends: committed, deferred, refused or dropped.
        let (_pass, tx) = self.begin_spending(spending).await;
        let mut tx = tx.map_err(storage("begin"))?;
        let spends = match staged.settle(&mut tx, &mut effects, apply).await {
            Ok(spends) => spends,
            Err(e) => {
                drop(tx);
                return Err(self.unsettled(round, "settle", e).await);
            }
        };
        match decided {
            Decided::Deferred(deferral) => self.defer(round, tx, deferral, request.csr).await,
            Decided::Admitted(result) => {
                self.admit(round, tx, effects, spends, result.into(), &request)
                    .await
            }
        }
    }

    /// What a settle or spend that failed at `step` stops the round with: a conflict reruns
    /// it; a token without a use left is refused; the rest are storage failures.
    /// The caller drops its transaction first (so, on SQLite, the refusal's own can begin).
    async fn unsettled(&self, round: &mut Round, step: &'static str, e: Settle) -> Stop {
        match e {
            Settle::Conflict(what) => {
                Stop::Conflict(format!("{what} changed while the attestor ran"))
            }
            Settle::NoUsesLeft(id) => {
                round.token_id = Some(id);
                self.refused(round, Decision::host(Refusal::NoUsesLeft))
                    .await
            }
            Settle::Store(e) => storage(step)(e),
            Settle::Backend(e) => failed(step)(e),
        }
    }

    /// The error a locked phase that stopped for good becomes: a conflict that outlived its
    /// attempts is refused `join-conflict`; a storage failure is the retryable
    /// [`JoinError::Unavailable`], which [`Self::recorded`] records as `storage-error`.
    async fn stopped(&self, round: &mut Round, stop: Stop) -> JoinError {
        match stop {
            Stop::Refused(refused) => refused,
            Stop::Conflict(why) => {
                let decision = Decision::host(Refusal::JoinConflict).detail(why);
                self.refuse(round, decision).await
            }
            Stop::Storage(failure) => {
                tracing::error!(attestor = %round.attestor, %failure, "join failed");
                JoinError::Unavailable(failure.to_string())
            }
            Stop::RateLimited(wait) => {
                let decision = Decision::host(Refusal::RateLimited)
                    .detail(format!("next certificate in {} ms", wait.as_millis()));
                self.refuse(round, decision).await;
                JoinError::RateLimited(wait)
            }
        }
    }

    /// [`Self::refuse`], as the locked phase's [`Stop`].
    async fn refused(&self, round: &mut Round, decision: Decision) -> Stop {
        Stop::Refused(self.refuse(round, decision).await)
    }

    /// Whether the operator lets `attestor` re-key nodes without a token: its
    /// `[attestors.<id>] reclaim`, else the default of the built-ins that need it.
    /// Whether it is the built-in is read from the version that decided the round.
    fn reclaim_granted(&self, round: &Round) -> bool {
        let attestor = round.attestor.as_str();
        if let Some(granted) = self.settings.reclaim_grants.get(attestor) {
            return *granted;
        }
        RECLAIMING_BUILT_INS.contains(&attestor) && round.attestor_built_in
    }

    async fn defer(
        &self,
        round: &mut Round,
        mut tx: Tx,
        deferral: Deferral,
        csr: &VerifiedCsr,
    ) -> Result<JoinResponse, Stop> {
        // Database time, read once: the challenge's deadline and the round's record.
        let now = tx.now().await.map_err(storage("now"))?;
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
            trust: None,
        };
        let response = self
            .pki()
            .sign_response(body, now)
            .map_err(failed("sign"))?;
        record::write_and_commit(tx, round, &Decision::deferred(), now)
            .await
            .map_err(storage("record and commit"))?;
        self.log(round, &Decision::deferred());
        Ok(response)
    }

    async fn admit(
        &self,
        round: &mut Round,
        mut tx: Tx,
        effects: Effects,
        spends: Spends,
        mut result: Admission,
        request: &Admitting<'_>,
    ) -> Result<JoinResponse, Stop> {
        round.subject = result.subject.clone();
        round.node_key = result.node_key;
        round.token_id = result.token_id.clone().or(round.token_id.take());
        let now = tx.now().await.map_err(storage("now"))?;
        let locked: Vec<LockedToken> = effects
            .locked_tokens
            .iter()
            .map(LockedToken::from)
            .collect();
        let minted_for = provisioned_target(&mut tx, &locked, &result)
            .await
            .map_err(storage("token workflow"))?;
        let mut approvals = Vec::with_capacity(effects.consumed_join_requests.len());
        for id in &effects.consumed_join_requests {
            match tx
                .find_join_request(id)
                .await
                .map_err(storage("join request"))?
            {
                Some(row) => approvals.push(row),
                None => {
                    drop(tx);
                    return Err(self
                        .refused(round, Decision::host(Refusal::ApprovalMismatch))
                        .await);
                }
            }
        }
        let reclaim_granted = self.reclaim_granted(round);

        // The policy, then one machine, one node: a join whose trusted hardware key another
        // node holds re-keys that node (when the token allows it) and is checked again as such.
        let mut redirected = false;
        let (placement, hardware_key) = loop {
            let node = match &result.node_id {
                Some(id) => node_state(&mut tx, id, now).await?,
                None => None,
            };
            let facts = policy::Facts {
                attestor: &round.attestor,
                result: &result,
                locked_tokens: &locked,
                consumed_tokens: &effects.consumed_tokens,
                tpm_certified: &effects.tpm_certified,
                request_token: request.token,
                role: request.role,
                claims: request.claims,
                csr_sha256: &request.csr.sha256,
                csr_spki_sha256: &request.csr.spki_sha256,
                now,
                node: node.as_ref().map(|(n, s)| (n, s)),
                minted_for: minted_for.as_deref(),
                reclaim_granted,
                approvals: &approvals,
            };
            let checked = policy::check(&facts).map(|placement| {
                let token = locked
                    .iter()
                    .find(|t| Some(&t.id) == placement.token_id.as_ref());
                (placement, token)
            });
            let (placement, token) = match checked {
                Ok(p) => p,
                Err(refusal) => {
                    drop(tx);
                    round.node_id = result.node_id.clone();
                    round.tenant_id = result.tenant_id.clone();
                    return Err(self.refused(round, Decision::host(refusal)).await);
                }
            };
            let key = policy::trusted_hardware_key(token, request.role);
            let held_by = match &key {
                Some(key) => tx
                    .hardware_key_holder(key)
                    .await
                    .map_err(storage("hardware key"))?,
                None => None,
            };
            match policy::hardware_key_admits(
                held_by.as_deref(),
                &placement,
                token,
                minted_for.as_deref(),
            ) {
                Ok(policy::HardwareKey::Free) => break (placement, key),
                Ok(policy::HardwareKey::ReclaimHolder(holder)) if !redirected => {
                    redirected = true;
                    result.node_id = Some(holder);
                }
                Ok(policy::HardwareKey::ReclaimHolder(_)) | Err(_) => {
                    drop(tx);
                    round.node_id = held_by.or(placement.node_id);
                    round.tenant_id = Some(placement.tenant_id);
                    return Err(self.refused(round, Decision::host(Refusal::Reclaim)).await);
                }
            }
        };
        round.tenant_id = Some(placement.tenant_id.clone());

        // The pool's joinAttestors, before any reclaim, binding or insert. The attestor has
        // verified the machine already, so the refusal is the pool owner's: the event is the
        // pool's tenant's and names the pool and its owner.
        if let Some(pool_id) = &placement.pool_id {
            // Shared-locked until commit: a policy update waits for this join, or committed
            // before and is read here.
            tx.lock_rows(&[RowLock::Pool {
                tenant_id: placement.tenant_id.clone(),
                id: pool_id.clone(),
            }])
            .await
            .map_err(storage("lock pool"))?;
            let pool = tx
                .pool(&placement.tenant_id, pool_id)
                .await
                .map_err(storage("pool"))?;
            if let Err(refusal) = policy::pool_admits(pool.as_ref(), &round.attestor) {
                drop(tx);
                round.node_id = placement.node_id.clone();
                let owner = pool.and_then(|p| p.owner);
                let decision = Decision::host(refusal)
                    .with("poolId", pool_id.as_str())
                    .with("owner", owner);
                return Err(self.refused(round, decision).await);
            }
        }

        // Bindings: a hardware identity bound to another node never admits this one.
        for b in &result.bindings {
            match tx
                .bound_node(&b.kind, &b.value)
                .await
                .map_err(storage("bound_node"))?
            {
                Some(other) if Some(&other) != placement.node_id.as_ref() => {
                    drop(tx);
                    round.node_id = Some(other);
                    return Err(self
                        .refused(round, Decision::host(Refusal::BoundElsewhere))
                        .await);
                }
                _ => {}
            }
        }

        let existing = match &placement.node_id {
            Some(id) => tx.node(id).await.map_err(storage("node"))?,
            None => None,
        };
        let (node_id, generation, new_node) = match (&placement.node_id, &existing) {
            (Some(id), Some(existing)) => {
                // Re-key in place: a new identity generation; every older certificate revoked.
                let generation = existing.identity_generation + 1;
                let moved = tx
                    .rekey_node(id, generation, now)
                    .await
                    .map_err(storage("rekey"))?;
                if !moved {
                    // Another reclaim committed first, or the node was retired or deleted
                    // meanwhile: refused with its reason; the agent may try again.
                    drop(tx);
                    round.node_id = Some(id.clone());
                    return Err(self
                        .refused(round, Decision::host(Refusal::ReclaimRace))
                        .await);
                }
                tx.revoke_node_certs_below(id, generation)
                    .await
                    .map_err(storage("revoke"))?;
                if let Some(key) = &hardware_key {
                    tx.fill_hardware_key(id, key)
                        .await
                        .map_err(storage("hardware key"))?;
                }
                (id.clone(), generation, None)
            }
            _ => {
                // Inserted with its certificate, in one statement ([`Self::issue`]).
                let node = NewNode {
                    id: new_id("node_"),
                    tenant_id: placement.tenant_id.clone(),
                    pool_id: placement.pool_id.clone(),
                    site_id: placement.site_id.clone(),
                    role: node_role(request.role),
                    identity_generation: 1,
                    hardware_key: hardware_key.clone(),
                    created_at: now,
                };
                (node.id.clone(), 1, Some(node))
            }
        };
        round.node_id = Some(node_id.clone());

        let role = issued_role(
            request.role,
            existing
                .as_ref()
                .map(|n| n.role)
                .filter(|_| placement.node_id.is_some()),
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
        let (response, cert) = self
            .issue(
                &mut tx,
                &Issue {
                    node_id: &node_id,
                    role,
                    generation,
                    statements: &statements,
                    shorter_ttl_seconds: result.cert_ttl_seconds,
                    now,
                    new_node: new_node.is_some(),
                },
                request.csr,
            )
            .await?;
        // A new node goes in with its certificate: now if it has bindings (which name it),
        // else last, with the spend ([`Spends::commit`]: on Postgres, often all in one
        // statement). A binding another join took since the check above (a race) refuses the
        // round, and its certificate is never committed or answered.
        let mut unwritten = new_node.as_ref().map(|node| (node, &cert));
        if !result.bindings.is_empty()
            && let Some((node, cert)) = unwritten.take()
        {
            tx.insert_node_with_cert(node, cert)
                .await
                .map_err(storage("insert cert"))?;
        }
        for b in &result.bindings {
            match tx.bind(&b.kind, &b.value, &node_id).await {
                Ok(()) => {}
                Err(StoreError::BoundElsewhere(other)) => {
                    drop(tx);
                    round.node_id = Some(other);
                    return Err(self
                        .refused(round, Decision::host(Refusal::BoundElsewhere))
                        .await);
                }
                Err(e) => return Err(storage("bind")(e)),
            }
        }
        // Last: the spends, the record and the commit. From the first spend to the commit,
        // the spent token's row is locked. The record is stamped with the round's database
        // time, read once above.
        let decision = Decision::admitted();
        let (audit, event) = record::rows(round, &decision, now);
        if let Err(e) = spends.commit(tx, unwritten, &audit, &event).await {
            return Err(self.unsettled(round, "spend, record and commit", e).await);
        }
        self.log(round, &decision);
        Ok(response)
    }

    /// Issues a certificate for the CSR's key, records its `node_certs` row in `tx` (unless
    /// the node is new: the caller writes the row with the node's), and signs the answer
    /// (which the caller returns only after committing `tx`); the answer and the certificate's
    /// row. A node (its row locked by the caller) that was issued one less than
    /// [`JoinSettings::node_issue_interval_ms`] ago gets none: [`Stop::RateLimited`], before
    /// anything is written.
    async fn issue(
        &self,
        tx: &mut Tx,
        cert: &Issue<'_>,
        csr: &VerifiedCsr,
    ) -> Result<(JoinResponse, NewNodeCert), Stop> {
        if self.settings.node_issue_interval_ms > 0
            && !cert.new_node
            && let Some(last) = tx
                .newest_node_cert_at(cert.node_id)
                .await
                .map_err(storage("newest certificate"))?
        {
            let next = last.saturating_add(self.settings.node_issue_interval_ms);
            if cert.now < next {
                let wait = u64::try_from(next - cert.now).unwrap_or(0);
                return Err(Stop::RateLimited(std::time::Duration::from_millis(wait)));
            }
        }
        let mut ttl = self.settings.cert_ttl_seconds;
        if cert.role == NodeRole::Ramdisk {
            ttl = ttl.min(RAMDISK_MAX_TTL_SECONDS);
        }
        if let Some(shorter) = cert.shorter_ttl_seconds {
            ttl = ttl.min(shorter.max(60));
        }
        // Back-dated for clock skew between the database and relying parties; the lifetime
        // still counts from `now` (agents know the back-dating and take it off).
        let not_before = cert.now - gatehouse_proto::ISSUANCE_BACKDATE_MS;
        let not_after = cert.now + i64::from(ttl) * 1000;
        // One bundle for the certificate, its chain and the answer's signature.
        let pki = self.pki();
        let issued = pki
            .issue_node_cert(&IssueRequest {
                node_id: cert.node_id,
                role: cert.role.as_str(),
                spki_der: &csr.spki_der,
                statements: cert.statements,
                not_before_ms: not_before,
                not_after_ms: not_after,
            })
            .map_err(failed("issue"))?;
        let row = NewNodeCert {
            serial: issued.serial_hex,
            node_id: cert.node_id.to_owned(),
            der: issued.der.clone(),
            generation: cert.generation,
            role: cert.role,
            not_before: issued.not_before_ms,
            not_after: issued.not_after_ms,
            statements: cert.statements.to_vec(),
            created_at: cert.now,
        };
        if !cert.new_node {
            tx.insert_node_cert(&row)
                .await
                .map_err(storage("insert cert"))?;
        }
        let body = JoinResponseBody {
            v: 1,
            csr_sha256: hex::encode(csr.sha256),
            node_id: cert.node_id.to_owned(),
            chain: vec![issued.der, pki.node_ca_der().to_vec()],
            deferral: None,
            trust: None,
        };
        let response = pki.sign_response(body, cert.now).map_err(failed("sign"))?;
        Ok((response, row))
    }

    /// Records a refusal in a transaction of its own (the round's was rolled back), offers a
    /// copy to the sink (which never waits), and returns the one error every refusal becomes.
    /// A failure to record is logged, never turned into an admission.
    async fn refuse(&self, round: &mut Round, decision: Decision) -> JoinError {
        self.log(round, &decision);
        let mut at = None;
        match self.begin().await {
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
        let sink = self
            .sink
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        if let Some(sink) = &sink {
            sink.offer(record::refusal(round, &decision, at));
        }
        if at.is_none() {
            self.backlog.push(round.clone(), decision);
        }
        JoinError::Denied
    }
}

/// For a join that spent a `provisioned` token: the node of the running workflow whose
/// `userdata.render` step minted it, read here rather than taken from the attestor, so the
/// policy lets that token re-key exactly that node ([`policy::Facts::minted_for`]).
async fn provisioned_target(
    tx: &mut Tx,
    locked: &[LockedToken],
    result: &Admission,
) -> Result<Option<String>, StoreError> {
    let provisioned = locked.iter().find(|t| {
        Some(&t.id) == result.token_id.as_ref() && t.role == crate::store::TokenRole::Provisioned
    });
    let Some(token) = provisioned else {
        return Ok(None);
    };
    Ok(tx
        .token_workflow(&token.id)
        .await?
        .filter(|w| w.state == crate::store::WORKFLOW_RUNNING)
        .map(|w| w.node_id))
}

/// What the attestor spent in a round it deferred, if anything (a deferral spends nothing).
fn spent_in(effects: &crate::imports::Effects) -> Option<String> {
    let mut spent = Vec::new();
    if !effects.consumed_tokens.is_empty() {
        spent.push(format!(
            "a use of token {}",
            effects.consumed_tokens.join(", ")
        ));
    }
    if !effects.recorded_uses.is_empty() {
        spent.push(format!(
            "{} single-use evidence record(s)",
            effects.recorded_uses.len()
        ));
    }
    if !effects.consumed_join_requests.is_empty() {
        spent.push(format!(
            "join request {}",
            effects.consumed_join_requests.join(", ")
        ));
    }
    (!spent.is_empty()).then(|| format!("spending {}", spent.join(" and ")))
}

/// The node a result names, and what the policy needs to know about it: the kinds of its
/// bindings and whether a live certificate of its current generation names a TPM AK.
async fn node_state(
    tx: &mut Tx,
    id: &str,
    now: i64,
) -> Result<Option<(NodeRow, policy::NodeState)>, Stop> {
    // Locked for the rest of the round (rule: decisions read locked rows).
    tx.lock_rows(&[RowLock::Node(id.to_owned())])
        .await
        .map_err(storage("lock node"))?;
    let Some(node) = tx.node(id).await.map_err(storage("node"))? else {
        return Ok(None);
    };
    let binding_kinds = tx
        .node_bindings(id)
        .await
        .map_err(storage("node bindings"))?
        .into_iter()
        .map(|(kind, _)| kind)
        .collect();
    let tpm_bound = tx
        .live_node_certs(id, now)
        .await
        .map_err(storage("node certificates"))?
        .iter()
        .any(|c| c.generation == node.identity_generation && policy::names_tpm_ak(&c.statements));
    Ok(Some((
        node,
        policy::NodeState {
            binding_kinds,
            tpm_bound,
        },
    )))
}

/// The parts of the request an admission is checked against (claims already normalised).
struct Admitting<'a> {
    role: Role,
    claims: &'a gatehouse_proto::Claims,
    token: Option<policy::RequestToken<'a>>,
    csr: &'a VerifiedCsr,
}

/// What one attempt's locked phase needs: the call's buffered writes and what it decided.
struct Locked<'a> {
    staged: Staged,
    effects: Effects,
    apply: Apply,
    decided: Decided,
    request: Admitting<'a>,
}

/// Why a locked phase ended without an answer.
enum Stop {
    /// Refused, and recorded: the machine reads ACCESS_DENIED.
    Refused(JoinError),
    /// The node was issued a certificate too recently: refused `rate-limited` once the
    /// transaction is gone, answered 429 after this long.
    RateLimited(std::time::Duration),
    /// What the attestor read changed before it could be locked: run the round again.
    Conflict(String),
    /// The host's storage (or signing) failed: nothing was spent or issued.
    Storage(StorageFailure),
}

/// A failure of the host's own, at one step of the locked phase.
#[derive(Debug, thiserror::Error)]
#[error("{step}: {error}")]
struct StorageFailure {
    step: &'static str,
    error: String,
    /// Another transaction held what this one needed (a busy SQLite, a Postgres deadlock or
    /// serialization failure): running the round again may succeed.
    contention: bool,
}

/// Maps a store error at `step` to a [`Stop`], noting whether it was contention.
fn storage(step: &'static str) -> impl FnOnce(StoreError) -> Stop {
    move |e| {
        Stop::Storage(StorageFailure {
            step,
            contention: e.is_contention(),
            error: e.to_string(),
        })
    }
}

/// Maps a failure that is not the database's (signing, issuing) at `step` to a [`Stop`].
fn failed<E: std::fmt::Display>(step: &'static str) -> impl FnOnce(E) -> Stop {
    move |e| {
        Stop::Storage(StorageFailure {
            step,
            contention: false,
            error: e.to_string(),
        })
    }
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
    /// The node is new in this round, not written yet: [`JoinService::issue`] leaves the
    /// certificate's row to the caller, who writes it with the node's. It has no certificate
    /// yet, so none was issued to it recently ([`JoinSettings::node_issue_interval_ms`]).
    new_node: bool,
}

/// The role a join's certificate carries: the requested one, except that a lessee's
/// node-tenant node re-joining as `node` keeps its restriction.
fn issued_role(requested: Role, existing: Option<NodeRole>) -> NodeRole {
    match (requested, existing) {
        (Role::Node, Some(NodeRole::NodeTenant)) => NodeRole::NodeTenant,
        (role, _) => node_role(role),
    }
}
