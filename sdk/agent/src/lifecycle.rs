//! Keeping a node certificate alive: renew before it runs out, back off on failure, and
//! re-join as the same node with x509pop when it ran out anyway.
//!
//! The decisions are a small state machine, [`Schedule`]: given the time and the current
//! certificate's validity it says how long to sleep or what to do ([`Step`]), and it is told
//! how each attempt ended. [`Lifecycle::run`] wraps it with the files and the network:
//!
//! 1. load the identity from its directory ([`load_identity`]);
//! 2. while more than [`RenewPolicy::renew_when_left`] of the lifetime is left, sleep (the
//!    lifetime counts from the issuance, not from the back-dated notBefore, and no renewal
//!    comes sooner than [`RenewPolicy::min_interval`] after it);
//! 3. renew: a new key staged as node.key.next, `POST /v1/renew` authenticated by the current
//!    certificate, the answer verified, then the new certificate and key installed
//!    ([`commit_next`]);
//! 4. once the certificate has expired (the node was offline, or the host down past the
//!    expiry), the host refuses renewals: re-join with x509pop, proving the old key over the
//!    new CSR, which keeps the node id and raises its identity generation;
//! 5. a failed attempt is logged as `renewal failed` (fields `attempt`, `expiresIn`) and
//!    retried after an exponential backoff, from [`RenewPolicy::backoff_min`] doubling up to
//!    [`RenewPolicy::backoff_max`], never past the certificate's expiry, each wait shortened
//!    by a random part of up to [`RenewPolicy::jitter`] so that a fleet cut off together does
//!    not come back in step;
//! 6. a certificate that can no longer renew or re-join stops the loop with
//!    [`LifecycleError::CannotRejoin`], which carries the recovery command
//!    (`gatehouse-agent join --reset --yes …`): the host refused an x509pop re-join (revoked,
//!    superseded, retired, past the grace), the certificate expired longer than
//!    [`RenewPolicy::rejoin_grace`] ago, or it expired naming a TPM attestation key (which an
//!    x509pop proof cannot prove) or as a role that never re-joins (a ramdisk). A refused
//!    renewal is not final by itself (the host's clock may be ahead): it is followed by an
//!    x509pop re-join at once, whose refusal is.
//!
//! The loop stops when its stop future completes, at any await point: a renewal cut off
//! before [`commit_next`] leaves the old identity (and a stale node.key.next) in place.

use std::path::PathBuf;
use std::pin::pin;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use gatehouse_proto::JoinTrust;
use tokio::sync::mpsc::UnboundedSender;

use crate::cert::NodeCert;
use crate::client::{JoinClient, JoinError, JoinOptions, join};
use crate::identity::{
    Identity, IdentityError, LoadedIdentity, commit_next, load_identity_with, stage_next_key,
};
use crate::key::{KeyError, NodeKey};
use crate::pinned::save_trust;
use crate::renew::{RenewClient, RenewError};
use crate::x509pop::{X509POP, X509popProducer, now_ms};

/// Longest single sleep: the loop looks at the wall clock again at least this often, so a
/// suspended machine or a clock step is noticed.
const MAX_NAP: Duration = Duration::from_secs(60);

/// When to renew and how to retry.
#[derive(Debug, Clone, PartialEq)]
pub struct RenewPolicy {
    /// Renew once less than this fraction of the certificate's lifetime is left (0 < f <= 1).
    pub renew_when_left: f64,
    /// The wait after the first failure; each further failure doubles it.
    pub backoff_min: Duration,
    /// The longest wait between two attempts.
    pub backoff_max: Duration,
    /// The largest fraction of a backoff taken off at random (0 = none, 0.5 = "equal
    /// jitter": each wait lies between half and all of its backoff).
    pub jitter: f64,
    /// How long after its expiry a certificate may still re-join with x509pop (the host's
    /// grace, 7 days by default); past it the loop stops.
    pub rejoin_grace: Duration,
    /// The least time from a certificate's issuance to its renewal, whatever the fraction
    /// says (unless the certificate would expire first): a host issuing very short
    /// certificates, or a clock gone wrong, cannot make the agent renew in a loop.
    pub min_interval: Duration,
}

/// The least time left before the expiry at which [`RenewPolicy::min_interval`] still
/// postpones a renewal: a certificate shorter than the interval renews this long before it
/// expires, not after.
const MIN_INTERVAL_LEAD_MS: i64 = 5_000;

impl Default for RenewPolicy {
    /// Renew with a third of the lifetime left, but not within a minute of the issuance;
    /// back off from 30 s to 10 min with equal jitter; re-join up to 7 days after the expiry.
    fn default() -> Self {
        Self {
            renew_when_left: 1.0 / 3.0,
            backoff_min: Duration::from_secs(30),
            backoff_max: Duration::from_secs(600),
            jitter: 0.5,
            rejoin_grace: Duration::from_secs(7 * 86_400),
            min_interval: Duration::from_secs(60),
        }
    }
}

impl RenewPolicy {
    /// Refuses a fraction outside (0, 1], a zero backoff, or a minimum above the maximum.
    pub fn validate(&self) -> Result<(), LifecycleError> {
        let f = self.renew_when_left;
        if !(f > 0.0 && f <= 1.0) {
            return Err(LifecycleError::Policy(format!(
                "renew-when-left must be in (0, 1], not {f}"
            )));
        }
        if !(0.0..1.0).contains(&self.jitter) {
            return Err(LifecycleError::Policy(format!(
                "the jitter must be in [0, 1), not {}",
                self.jitter
            )));
        }
        if self.backoff_min.is_zero() || self.backoff_min > self.backoff_max {
            return Err(LifecycleError::Policy(format!(
                "the backoff must be 0 < min <= max, not {:?}..{:?}",
                self.backoff_min, self.backoff_max
            )));
        }
        Ok(())
    }

    /// The wait after the `attempt`th consecutive failure (1-based): `backoff_min * 2^(n-1)`,
    /// at most `backoff_max`.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(31);
        self.backoff_min
            .saturating_mul(1u32 << doublings)
            .min(self.backoff_max)
    }

    /// `wait` less a part of up to [`RenewPolicy::jitter`] of it, chosen by `random` in
    /// [0, 1).
    pub fn jittered(&self, wait: Duration, random: f64) -> Duration {
        let cut = (self.jitter * random.clamp(0.0, 1.0)).clamp(0.0, 1.0);
        wait.mul_f64(1.0 - cut)
    }
}

/// A uniform random number in [0, 1) from the system's generator (0 if it fails: no jitter).
fn unit_random() -> f64 {
    let mut b = [0u8; 4];
    match aws_lc_rs::rand::fill(&mut b) {
        Ok(()) => f64::from(u32::from_be_bytes(b)) / (f64::from(u32::MAX) + 1.0),
        Err(_) => 0.0,
    }
}

/// A certificate's validity, ms since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    /// notBefore.
    pub not_before_ms: i64,
    /// notAfter.
    pub not_after_ms: i64,
}

impl Validity {
    /// When the certificate was issued: its notBefore plus the host's back-dating
    /// ([`gatehouse_proto::ISSUANCE_BACKDATE_MS`]), never after its notAfter.
    pub fn issued_at_ms(&self) -> i64 {
        self.not_before_ms
            .saturating_add(gatehouse_proto::ISSUANCE_BACKDATE_MS)
            .min(self.not_after_ms)
    }

    /// When less than `left` of the lifetime remains, the lifetime counted from the issuance:
    /// the back-dated minute is not lifetime, or a short certificate would look a third spent
    /// the moment it arrives and renew again at once.
    pub fn renew_at_ms(&self, left: f64) -> i64 {
        let lifetime = self.not_after_ms.saturating_sub(self.issued_at_ms()).max(0);
        // The product is at most the lifetime, so it fits an i64.
        let margin = (lifetime as f64 * left) as i64;
        self.not_after_ms.saturating_sub(margin)
    }

    /// When to renew under `policy`: at [`Validity::renew_at_ms`], but not before
    /// [`RenewPolicy::min_interval`] after the issuance unless that would leave less than a
    /// few seconds before the expiry.
    pub fn renew_due_ms(&self, policy: &RenewPolicy) -> i64 {
        let by_fraction = self.renew_at_ms(policy.renew_when_left);
        let min = i64::try_from(policy.min_interval.as_millis()).unwrap_or(i64::MAX);
        let earliest = self
            .issued_at_ms()
            .saturating_add(min)
            .min(self.not_after_ms.saturating_sub(MIN_INTERVAL_LEAD_MS));
        by_fraction.max(earliest)
    }
}

impl From<&NodeCert> for Validity {
    fn from(c: &NodeCert) -> Self {
        Self {
            not_before_ms: c.not_before_ms,
            not_after_ms: c.not_after_ms,
        }
    }
}

/// What an attempt does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// `POST /v1/renew` with the current certificate.
    Renew,
    /// An x509pop join with the expired certificate.
    Rejoin,
}

impl Action {
    /// How the log names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Renew => "renew",
            Action::Rejoin => "x509pop",
        }
    }
}

/// What to do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Nothing yet: look again after this long.
    Sleep(Duration),
    /// Attempt this now.
    Act(Action),
}

/// The renewal state machine: when the next attempt is due and what it is.
#[derive(Debug, Clone)]
pub struct Schedule {
    policy: RenewPolicy,
    /// Consecutive failures of `retry`'s action.
    failures: u32,
    /// After a failure: the action that failed and when to try it again (ms).
    retry: Option<(Action, i64)>,
    /// The host refused a renewal: the next attempt is an x509pop re-join, at once.
    rejoin_next: bool,
}

impl Schedule {
    /// A schedule with no failures behind it.
    pub fn new(policy: RenewPolicy) -> Self {
        Self {
            policy,
            failures: 0,
            retry: None,
            rejoin_next: false,
        }
    }

    /// What to do at `now_ms` for a certificate valid as `validity`. Before the expiry the
    /// action is a renewal, due when [`RenewPolicy::renew_when_left`] is reached, or after a
    /// failure at its backoff (but no later than the expiry, when renewing stops making
    /// sense); from the expiry on it is a re-join, due at once, or after a failed one at its
    /// backoff.
    pub fn step(&self, now_ms: i64, validity: Validity) -> Step {
        let action = if self.rejoin_next || now_ms >= validity.not_after_ms {
            Action::Rejoin
        } else {
            Action::Renew
        };
        let due = match (self.retry, action) {
            (Some((failed, at)), Action::Renew) if failed == action => {
                at.min(validity.not_after_ms)
            }
            (Some((failed, at)), Action::Rejoin) if failed == action => at,
            // The certificate expired while a renewal was backing off: re-join now.
            (Some(_), _) => now_ms,
            (None, Action::Renew) => validity.renew_due_ms(&self.policy),
            (None, Action::Rejoin) => now_ms,
        };
        if now_ms >= due {
            Step::Act(action)
        } else {
            let ms = u64::try_from(due - now_ms).unwrap_or(0);
            Step::Sleep(Duration::from_millis(ms))
        }
    }

    /// Records that `action` failed at `now_ms`; returns its attempt number (1 for the first
    /// failure of this action in a row) and the wait before the next.
    pub fn failed(&mut self, action: Action, now_ms: i64) -> (u32, Duration) {
        self.failed_with(action, now_ms, unit_random())
    }

    /// [`Schedule::failed`] with the jitter's random number given (in [0, 1)).
    pub fn failed_with(&mut self, action: Action, now_ms: i64, random: f64) -> (u32, Duration) {
        if self.retry.is_some_and(|(a, _)| a != action) {
            self.failures = 0;
        }
        self.failures = self.failures.saturating_add(1);
        let wait = self
            .policy
            .jittered(self.policy.backoff(self.failures), random);
        let wait_ms = i64::try_from(wait.as_millis()).unwrap_or(i64::MAX);
        self.retry = Some((action, now_ms.saturating_add(wait_ms)));
        (self.failures, wait)
    }

    /// Records a success: the new certificate is renewed on its own schedule.
    pub fn succeeded(&mut self) {
        self.failures = 0;
        self.retry = None;
        self.rejoin_next = false;
    }

    /// Records that the host refused a renewal: re-join with x509pop at once, and keep to
    /// re-joins (with their backoff) until one succeeds (a certificate the host still knows
    /// re-joins; one it revoked is refused again, and that is final).
    pub fn renewal_refused(&mut self) {
        self.rejoin_next = true;
        self.retry = None;
        self.failures = 0;
    }
}

/// Why the loop stopped other than by its stop signal.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LifecycleError {
    /// The policy is unusable.
    #[error("renew policy: {0}")]
    Policy(String),
    /// The identity could not be loaded (none yet, moved aside, or corrupt).
    #[error(transparent)]
    Identity(#[from] IdentityError),
    /// The certificate can no longer renew or re-join: retrying cannot help, the machine
    /// must join again.
    #[error("node {node_id} can no longer renew or re-join: {reason}; recover with: {recovery}")]
    CannotRejoin {
        /// The node.
        node_id: String,
        /// Why.
        reason: String,
        /// The command that joins the machine again.
        recovery: String,
    },
}

/// Why one attempt failed; the loop logs it and retries.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AttemptError {
    /// The renewal failed.
    #[error(transparent)]
    Renew(#[from] RenewError),
    /// The x509pop re-join failed.
    #[error("x509pop re-join: {0}")]
    Rejoin(#[from] JoinError),
    /// The re-join admitted another node than this one.
    #[error("the x509pop re-join admitted node {got}, not {expected}")]
    OtherNode {
        /// This node.
        expected: String,
        /// The node the host named.
        got: String,
    },
    /// The next key could not be made or staged, or the new identity not installed.
    #[error(transparent)]
    Identity(#[from] IdentityError),
}

impl From<KeyError> for AttemptError {
    fn from(e: KeyError) -> Self {
        Self::Identity(e.into())
    }
}

/// What the loop did, for tests and supervisors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LifecycleEvent {
    /// A renewal installed a new certificate.
    Renewed {
        /// The node id (unchanged).
        node_id: String,
        /// The new certificate's serial, hex.
        serial: String,
        /// Its notAfter, ms.
        not_after_ms: i64,
    },
    /// An x509pop re-join installed a new certificate of the same node.
    Rejoined {
        /// The node id (unchanged).
        node_id: String,
        /// The new certificate's serial, hex.
        serial: String,
        /// Its notAfter, ms.
        not_after_ms: i64,
    },
    /// An attempt failed and will be retried.
    Failed {
        /// What was attempted.
        action: Action,
        /// Its number among consecutive failures of that action.
        attempt: u32,
        /// The wait before the next attempt.
        retry_in: Duration,
        /// Why it failed.
        error: String,
    },
}

/// A clock in ms since the Unix epoch.
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// The renewal loop of one identity directory.
#[derive(Clone)]
pub struct Lifecycle {
    server: String,
    /// The pinned trust: replaced (and stored in `dir`) when a renewal or re-join brings the
    /// host's rotated keys.
    trust: Arc<RwLock<JoinTrust>>,
    dir: PathBuf,
    policy: RenewPolicy,
    options: JoinOptions,
    events: Option<UnboundedSender<LifecycleEvent>>,
    clock: Clock,
    trust_file: Option<PathBuf>,
    #[cfg(feature = "tpm")]
    tpm: Option<crate::tpm::Tpm>,
}

impl std::fmt::Debug for Lifecycle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lifecycle")
            .field("server", &self.server)
            .field("dir", &self.dir)
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl Lifecycle {
    /// The loop for the identity in `dir`, renewed at `server` (trusting `trust`) under
    /// `policy`.
    pub fn new(server: &str, trust: JoinTrust, dir: PathBuf, policy: RenewPolicy) -> Self {
        Self {
            server: server.to_owned(),
            trust: Arc::new(RwLock::new(trust)),
            dir,
            policy,
            options: JoinOptions::default(),
            events: None,
            clock: Arc::new(now_ms),
            trust_file: None,
            #[cfg(feature = "tpm")]
            tpm: None,
        }
    }

    /// Uses `tpm`: node keys kept in it load, every next node key is made in it, and a
    /// certificate naming an AK (`urn:bc:tpm-ak:`) renews with that AK's certification of the
    /// next key. Without a TPM such a certificate fails its renewals (no fallback).
    #[cfg(feature = "tpm")]
    pub fn with_tpm(mut self, tpm: crate::tpm::Tpm) -> Self {
        self.tpm = Some(tpm);
        self
    }

    fn load(&self) -> Result<LoadedIdentity, IdentityError> {
        #[cfg(feature = "tpm")]
        return load_identity_with(&self.dir, self.tpm.as_ref());
        #[cfg(not(feature = "tpm"))]
        return load_identity_with(&self.dir, None);
    }

    /// The next node key: in the TPM when there is one (a file key with a warning where the
    /// TPM cannot hold it), except that a certificate naming an AK gets a TPM key or none.
    fn next_key(&self, names_ak: bool) -> Result<NodeKey, KeyError> {
        #[cfg(feature = "tpm")]
        {
            match (&self.tpm, names_ak) {
                (Some(tpm), true) => NodeKey::generate_in(tpm),
                (tpm, _) => NodeKey::generate_for_host(tpm.as_ref()),
            }
        }
        #[cfg(not(feature = "tpm"))]
        {
            let _ = names_ak;
            NodeKey::generate()
        }
    }

    /// The trust pinned now.
    pub fn trust(&self) -> JoinTrust {
        self.trust
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Pins `next`, stored first, so that a restart pins it too.
    fn pin(&self, next: &JoinTrust) -> Result<(), IdentityError> {
        save_trust(&self.dir, next)?;
        *self
            .trust
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = next.clone();
        tracing::info!(
            sequence = next.sequence,
            dir = %self.dir.display(),
            "pinned the host's rotated keys"
        );
        Ok(())
    }

    /// Names the join trust file in the recovery command the loop prints when it stops.
    pub fn with_trust_file(mut self, path: PathBuf) -> Self {
        self.trust_file = Some(path);
        self
    }

    /// The command that joins this machine again after its certificate became unusable:
    /// with its TPM when the certificate names an AK, else with a new join token.
    pub fn recovery_command(&self, names_ak: bool) -> String {
        let ca = self
            .trust_file
            .as_ref()
            .map_or_else(|| "TRUST.json".to_owned(), |p| p.display().to_string());
        let credential = if names_ak {
            "--attestor tpm"
        } else {
            "--token-file NEW-TOKEN"
        };
        format!(
            "gatehouse-agent join --reset --yes --server {} --ca {ca} --out {} {credential}",
            self.server,
            self.dir.display()
        )
    }

    /// Why `loaded` can no longer re-join at `now_ms`, checked before an x509pop attempt: it
    /// names a TPM key, its role never re-joins, or it is past the grace.
    fn cannot_rejoin(&self, loaded: &LoadedIdentity, now_ms: i64) -> Option<String> {
        let leaf = loaded.chain.first().map_or(&[][..], |c| c);
        if crate::cert::ak_name(leaf).is_some() {
            return Some(
                "the certificate names a TPM attestation key, which an x509pop re-join cannot \
                 prove"
                    .into(),
            );
        }
        if loaded.cert.rejoin_role().is_none() {
            return Some(format!(
                "a {} certificate never re-joins with x509pop",
                loaded.cert.role
            ));
        }
        let grace = i64::try_from(self.policy.rejoin_grace.as_millis()).unwrap_or(i64::MAX);
        if now_ms > loaded.cert.not_after_ms.saturating_add(grace) {
            return Some(format!(
                "the certificate expired more than {} ago, past x509pop's grace",
                humantime::format_duration(self.policy.rejoin_grace)
            ));
        }
        None
    }

    /// The loop's end for a certificate that can no longer renew or re-join, logged.
    fn stop_for(&self, node_id: String, names_ak: bool, reason: String) -> LifecycleError {
        let recovery = self.recovery_command(names_ak);
        tracing::error!(
            node_id = %node_id,
            reason = %reason,
            recovery = %recovery,
            "the certificate can no longer renew or re-join; stopping"
        );
        LifecycleError::CannotRejoin {
            node_id,
            reason,
            recovery,
        }
    }

    /// What an x509pop re-join sends besides its evidence (claims), and its loop's knobs.
    pub fn with_join_options(mut self, options: JoinOptions) -> Self {
        self.options = options;
        self
    }

    /// Reports each renewal, re-join and failure to `events`.
    pub fn with_events(mut self, events: UnboundedSender<LifecycleEvent>) -> Self {
        self.events = Some(events);
        self
    }

    /// Uses `clock` instead of the system clock to decide when to act (tests on paused time).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Runs until `stop` completes (then `Ok`), until the identity cannot be loaded, or until
    /// the certificate can no longer renew or re-join ([`LifecycleError::CannotRejoin`]).
    /// Other failed attempts (the host unreachable, a TPM error) are logged and retried.
    pub async fn run(&self, stop: impl Future<Output = ()>) -> Result<(), LifecycleError> {
        self.policy.validate()?;
        let mut schedule = Schedule::new(self.policy.clone());
        let mut stop = pin!(stop);
        loop {
            let loaded = self.load()?;
            let validity = Validity::from(&loaded.cert);
            match schedule.step((self.clock)(), validity) {
                Step::Sleep(wait) => {
                    tokio::select! {
                        () = &mut stop => return Ok(()),
                        () = tokio::time::sleep(wait.min(MAX_NAP)) => {}
                    }
                }
                Step::Act(action) => {
                    let node_id = loaded.identity.node_id.clone();
                    let names_ak =
                        crate::cert::ak_name(loaded.chain.first().map_or(&[][..], |c| c)).is_some();
                    if action == Action::Rejoin
                        && let Some(reason) = self.cannot_rejoin(&loaded, (self.clock)())
                    {
                        return Err(self.stop_for(node_id, names_ak, reason));
                    }
                    let result = tokio::select! {
                        () = &mut stop => return Ok(()),
                        r = self.attempt(action, loaded) => r,
                    };
                    let refused = matches!(
                        &result,
                        Err(AttemptError::Renew(RenewError::Denied))
                            | Err(AttemptError::Rejoin(JoinError::Denied))
                    );
                    if refused && (action == Action::Rejoin || names_ak) {
                        let reason = match action {
                            Action::Rejoin => {
                                "the host refused the x509pop re-join (revoked, \
                                               superseded, retired or past the grace)"
                            }
                            Action::Renew => {
                                "the host refused the renewal, and the \
                                              certificate names a TPM attestation key, which \
                                              an x509pop re-join cannot prove"
                            }
                        };
                        return Err(self.stop_for(node_id, names_ak, reason.to_owned()));
                    }
                    match result {
                        Ok(identity) => {
                            schedule.succeeded();
                            self.report_success(action, &identity);
                        }
                        Err(e) if refused => {
                            tracing::warn!(
                                node_id = %node_id,
                                error = %e,
                                "the host refused the renewal; re-joining with x509pop"
                            );
                            schedule.renewal_refused();
                        }
                        Err(e) => {
                            let now = (self.clock)();
                            let (attempt, retry_in) = schedule.failed(action, now);
                            let expires_in = expires_in(validity.not_after_ms - now);
                            tracing::warn!(
                                node_id = %node_id,
                                action = action.as_str(),
                                attempt,
                                expiresIn = %expires_in,
                                retryIn = ?retry_in,
                                error = %e,
                                "renewal failed"
                            );
                            self.emit(LifecycleEvent::Failed {
                                action,
                                attempt,
                                retry_in,
                                error: e.to_string(),
                            });
                        }
                    }
                }
            }
        }
    }

    /// One renewal or re-join of `current`, installing the new identity on success.
    pub async fn attempt(
        &self,
        action: Action,
        current: LoadedIdentity,
    ) -> Result<Identity, AttemptError> {
        let node_id = current.identity.node_id.clone();
        let ak_name = crate::cert::ak_name(current.chain.first().map_or(&[][..], |c| c));
        let next = self.next_key(ak_name.is_some())?;
        #[cfg(feature = "tpm")]
        let attester = match (&ak_name, &self.tpm, &next) {
            (None, _, _) => None,
            (Some(name), Some(tpm), NodeKey::Tpm(key)) => {
                Some((name.clone(), tpm.clone(), key.unique()))
            }
            (Some(_), _, _) => {
                return Err(RenewError::Attestation(
                    "the certificate names a TPM attestation key and no TPM is configured (--tpm)"
                        .into(),
                )
                .into());
            }
        };
        #[cfg(not(feature = "tpm"))]
        if ak_name.is_some() {
            return Err(RenewError::Attestation(
                "the certificate names a TPM attestation key; this agent is built without TPM support".into(),
            )
            .into());
        }
        stage_next_key(&self.dir, &next)?;
        let trust = self.trust();
        let (joined, attestor) = match action {
            Action::Renew => {
                let client = RenewClient::new(&self.server, &trust, &current.key, &current.chain)
                    .map_err(RenewError::from)?;
                #[cfg(feature = "tpm")]
                let joined = match attester {
                    Some((name, tpm, unique)) => {
                        let attest = move |csr: &[u8]| {
                            tpm.key_attestation(name.clone(), unique, crate::verify::sha256(csr))
                                .map_err(|e| RenewError::Attestation(e.to_string()))
                        };
                        client
                            .renew_attested(&trust, &node_id, &next, Some(&attest))
                            .await?
                    }
                    None => client.renew(&trust, &node_id, &next).await?,
                };
                #[cfg(not(feature = "tpm"))]
                let joined = client.renew(&trust, &node_id, &next).await?;
                (joined, current.identity.attestor)
            }
            Action::Rejoin => {
                let client = JoinClient::new(&self.server, &trust)?;
                let mut producer =
                    X509popProducer::new(current.key, current.chain).map_err(JoinError::from)?;
                let joined =
                    join(&client, &trust, &mut producer, None, &next, &self.options).await?;
                if joined.node_id != node_id {
                    return Err(AttemptError::OtherNode {
                        expected: node_id,
                        got: joined.node_id,
                    });
                }
                (joined, X509POP.to_owned())
            }
        };
        // The new keys before the certificate they vouch for: a crash between the two leaves
        // an agent that pins more than it needs, never one that cannot check its certificate.
        if let Some(updated) = &joined.trust {
            self.pin(updated)?;
        }
        Ok(commit_next(&self.dir, &next, &joined, &attestor)?)
    }

    fn report_success(&self, action: Action, identity: &Identity) {
        let serial = self.load().map(|l| l.cert.serial).unwrap_or_default();
        let (node_id, not_after_ms) = (identity.node_id.clone(), identity.not_after);
        let until = expires_in(not_after_ms - (self.clock)());
        match action {
            Action::Renew => {
                tracing::info!(node_id = %node_id, serial = %serial, expiresIn = %until, "renewed");
                self.emit(LifecycleEvent::Renewed {
                    node_id,
                    serial,
                    not_after_ms,
                });
            }
            Action::Rejoin => {
                tracing::info!(
                    node_id = %node_id,
                    serial = %serial,
                    expiresIn = %until,
                    "re-joined with x509pop after the certificate expired"
                );
                self.emit(LifecycleEvent::Rejoined {
                    node_id,
                    serial,
                    not_after_ms,
                });
            }
        }
    }

    fn emit(&self, event: LifecycleEvent) {
        if let Some(tx) = &self.events {
            // A receiver that went away only stops listening; the loop goes on.
            let _ = tx.send(event);
        }
    }
}

/// `ms` as the log shows it: whole seconds, negative once expired (`-1h 2m 5s`).
fn expires_in(ms: i64) -> String {
    let secs = Duration::from_secs(ms.unsigned_abs() / 1000);
    let text = humantime::format_duration(secs).to_string();
    if ms < 0 && !secs.is_zero() {
        format!("-{text}")
    } else {
        text
    }
}

#[cfg(test)]
mod tests;
