//! One version of the set of loaded attestors, what changed from the version before it, and
//! the calls a join round makes through it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::loader::{LoadFailure, LoadedAttestor};
use super::{
    AttestorSummary, BUSY_WAIT, CallLimits, CallOutcome, Fault, Loaded, MAX_WAITING, RuntimeError,
    Source, Waiting, bindings, call, guest,
};
use crate::imports::{Session, TxBackend};

/// One version of the attestors: the live ones a join request may name, and the shadows that
/// run beside them. A join round holds one (an `Arc` from [`super::Runtime::snapshot`]) from
/// its start to its end.
pub struct Attestors<B: TxBackend> {
    live: BTreeMap<String, Arc<Loaded<B>>>,
    shadows: BTreeMap<String, Arc<Loaded<B>>>,
    limits: Arc<CallLimits>,
}

/// What a reload did to one attestor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChangeKind {
    /// An id that was not served is served now.
    Loaded,
    /// An id is served by other bytes, another source, another configuration, or moved
    /// between live and shadow (a removed file that replaced a built-in gives the built-in
    /// back: replaced, with source `built-in`).
    Replaced,
    /// An id is no longer served.
    Removed,
    /// A component did not load; what served before it keeps serving.
    LoadFailed,
}

impl ChangeKind {
    /// The kind of the event that records it.
    pub fn event_kind(self) -> &'static str {
        match self {
            ChangeKind::Loaded => "attestor.loaded",
            ChangeKind::Replaced => "attestor.replaced",
            ChangeKind::Removed => "attestor.removed",
            ChangeKind::LoadFailed => "attestor.load-failed",
        }
    }
}

/// One change a reload made (or could not make).
#[derive(Debug, Clone)]
pub struct Change {
    /// What happened.
    pub kind: ChangeKind,
    /// The attestor's id, when known (a file that does not compile has none).
    pub id: Option<String>,
    /// What serves now (loaded, replaced).
    pub now: Option<AttestorSummary>,
    /// What served before (replaced, removed).
    pub before: Option<AttestorSummary>,
    /// For a failure: the file, the hash of its bytes, and why.
    pub path: Option<PathBuf>,
    /// SHA-256 of the bytes that failed to load.
    pub sha256: Option<String>,
    /// Why it failed.
    pub reason: Option<String>,
    /// A short code for why it failed ([`super::LoadError::code`]).
    pub code: Option<&'static str>,
    /// The same failure as the reload before reported (a broken file left in place): logged,
    /// not recorded again.
    pub repeated: bool,
}

impl Change {
    /// What makes two failures the same: the file, its bytes, the id and why.
    pub(super) fn failure_key(&self) -> Option<String> {
        (self.kind == ChangeKind::LoadFailed).then(|| {
            format!(
                "{:?}|{:?}|{:?}|{:?}",
                self.path, self.sha256, self.id, self.code
            )
        })
    }
}

impl Change {
    /// A reload that could not run at all.
    pub(super) fn failed_whole(reason: String) -> Self {
        Self {
            kind: ChangeKind::LoadFailed,
            id: None,
            now: None,
            before: None,
            path: None,
            sha256: None,
            reason: Some(reason),
            code: Some("reload"),
            repeated: false,
        }
    }

    fn failed(failure: LoadFailure) -> Self {
        Self {
            kind: ChangeKind::LoadFailed,
            id: failure.id,
            now: None,
            before: None,
            path: failure.path,
            sha256: failure.sha256,
            code: Some(failure.error.code()),
            reason: Some(failure.error.to_string()),
            repeated: false,
        }
    }

    /// The event's payload: id, the sha256 and source of what serves now and of what served
    /// before, and for a failure the file, its sha256 and the reason.
    pub fn payload(&self) -> serde_json::Value {
        let side = |s: &Option<AttestorSummary>| {
            s.as_ref().map(|s| {
                serde_json::json!({
                    "version": s.version,
                    "sha256": s.sha256,
                    "source": s.source.to_string(),
                    "shadowOf": s.shadow_of,
                })
            })
        };
        serde_json::json!({
            "attestor": self.id,
            "sha256": self
                .now
                .as_ref()
                .map(|s| s.sha256.clone())
                .or_else(|| self.sha256.clone())
                .or_else(|| self.before.as_ref().map(|s| s.sha256.clone())),
            "now": side(&self.now),
            "before": side(&self.before),
            "file": self.path.as_ref().map(|p| p.display().to_string()),
            "reason": self.reason,
        })
    }
}

/// What a reload did, attestor by attestor, and which changed settings need a restart.
#[derive(Debug, Clone, Default)]
pub struct Reload {
    /// Every change, failures included; empty when nothing changed.
    pub changes: Vec<Change>,
    /// Settings that changed but take effect only at the next start.
    pub needs_restart: Vec<String>,
}

impl<B: TxBackend> Attestors<B> {
    pub(super) fn empty(limits: Arc<CallLimits>) -> Self {
        Self {
            live: BTreeMap::new(),
            shadows: BTreeMap::new(),
            limits,
        }
    }

    /// Everything loaded, as a reload's `previous`.
    pub(super) fn loaded(&self) -> Vec<LoadedAttestor<B>> {
        self.live
            .values()
            .chain(self.shadows.values())
            .map(|l| LoadedAttestor {
                summary: l.summary.clone(),
                pre: l.pre.clone(),
                config: l.config.clone(),
            })
            .collect()
    }

    /// The version after this one: `found` indexed, an attestor that did not change kept as
    /// the same object, and every difference reported.
    pub(super) fn next(
        &self,
        found: Vec<LoadedAttestor<B>>,
        failures: Vec<LoadFailure>,
        limits: &Arc<CallLimits>,
    ) -> Result<(Self, Vec<Change>), RuntimeError> {
        let mut next = Self::empty(limits.clone());
        let mut changes = Vec::new();
        for l in found {
            let id = l.summary.id.clone();
            let old = self.get(&id);
            let same = old.filter(|o| {
                o.summary.sha256 == l.summary.sha256
                    && o.summary.source == l.summary.source
                    && o.summary.shadow_of == l.summary.shadow_of
                    && o.config.same(&l.config)
            });
            let loaded = match same {
                Some(old) => old.clone(),
                None => {
                    changes.push(Change {
                        kind: if old.is_some() {
                            ChangeKind::Replaced
                        } else {
                            ChangeKind::Loaded
                        },
                        id: Some(id.clone()),
                        now: Some(l.summary.clone()),
                        before: old.map(|o| o.summary.clone()),
                        path: None,
                        sha256: None,
                        reason: None,
                        code: None,
                        repeated: false,
                    });
                    Arc::new(Loaded {
                        guests: guest::GuestThread::start(&id)?,
                        summary: l.summary,
                        pre: l.pre,
                        config: l.config,
                        calls: Arc::new(Semaphore::new(limits.max_calls_per_attestor as usize)),
                        waiting: AtomicUsize::new(0),
                    })
                }
            };
            match loaded.summary.shadow_of {
                Some(_) => next.shadows.insert(id, loaded),
                None => next.live.insert(id, loaded),
            };
        }
        for (id, old) in self.live.iter().chain(self.shadows.iter()) {
            if next.get(id).is_none() {
                changes.push(Change {
                    kind: ChangeKind::Removed,
                    id: Some(id.clone()),
                    now: None,
                    before: Some(old.summary.clone()),
                    path: match &old.summary.source {
                        Source::File(path) => Some(path.clone()),
                        Source::BuiltIn => None,
                    },
                    sha256: None,
                    reason: None,
                    code: None,
                    repeated: false,
                });
            }
        }
        changes.extend(failures.into_iter().map(Change::failed));
        Ok((next, changes))
    }

    fn get(&self, id: &str) -> Option<&Arc<Loaded<B>>> {
        self.live.get(id).or_else(|| self.shadows.get(id))
    }

    /// What is loaded, live attestors then shadows, each by id.
    pub fn summaries(&self) -> Vec<AttestorSummary> {
        self.live
            .values()
            .chain(self.shadows.values())
            .map(|l| l.summary.clone())
            .collect()
    }

    /// Whether a join request may name `id`: a live attestor (never a shadow).
    pub fn contains(&self, id: &str) -> bool {
        self.live.contains_key(id)
    }

    /// The live attestor `id`, if loaded.
    pub fn summary(&self, id: &str) -> Option<&AttestorSummary> {
        self.live.get(id).map(|l| &l.summary)
    }

    /// The shadows that run beside live attestor `id`.
    pub fn shadows_of(&self, id: &str) -> Vec<String> {
        self.shadows
            .iter()
            .filter(|(_, l)| l.summary.shadow_of.as_deref() == Some(id))
            .map(|(shadow, _)| shadow.clone())
            .collect()
    }

    /// Calls `verify` of live attestor `id` in a fresh instance with `session`. The session
    /// comes back unless the call had to be abandoned (then its transaction is dropped: rolled
    /// back).
    pub async fn verify(
        &self,
        id: &str,
        session: Session<B>,
        request: &Arc<bindings::types::JoinRequest>,
    ) -> CallOutcome<B> {
        let Some(loaded) = self.live.get(id) else {
            return CallOutcome::fault(Fault::UnknownAttestor, Some(session));
        };
        // Past its share, a join through this attestor waits for one of its calls to end (a
        // burst of quick calls passes), at most [`BUSY_WAIT`] and behind at most
        // [`MAX_WAITING`] others, then is refused: joins queued behind a slow attestor must
        // not pile up.
        let share = match loaded.calls.clone().try_acquire_owned() {
            Ok(share) => share,
            Err(_) => {
                let waiting = Waiting::enter(&loaded.waiting);
                if waiting.count > MAX_WAITING {
                    return CallOutcome::fault(Fault::Busy, Some(session));
                }
                let share =
                    tokio::time::timeout(BUSY_WAIT, loaded.calls.clone().acquire_owned()).await;
                drop(waiting);
                let Ok(Ok(share)) = share else {
                    return CallOutcome::fault(Fault::Busy, Some(session));
                };
                share
            }
        };
        // The semaphore is never closed, so acquire fails only if it were; treat that as a
        // fault rather than run past the pool's size.
        let Ok(slot) = self.limits.slots.clone().acquire_owned().await else {
            return CallOutcome::fault(Fault::Trap("no instance slot".into()), Some(session));
        };
        self.call(loaded, session, request, (share, slot)).await
    }

    /// Calls `verify` of shadow `id`, only if one of its call shares and an instance slot are
    /// free now: a shadow never waits, and never makes a live join wait for a slot it took
    /// (it takes one only while at least a quarter of the pool is free). `None` when it did
    /// not run.
    pub async fn verify_shadow(
        &self,
        id: &str,
        session: Session<B>,
        request: &Arc<bindings::types::JoinRequest>,
    ) -> Option<CallOutcome<B>> {
        let loaded = self.shadows.get(id)?;
        let share = loaded.calls.clone().try_acquire_owned().ok()?;
        let slots = &self.limits.slots;
        if slots.available_permits() * 4 < self.limits.slots_total() {
            return None;
        }
        let slot = slots.clone().try_acquire_owned().ok()?;
        Some(self.call(loaded, session, request, (share, slot)).await)
    }

    async fn call(
        &self,
        loaded: &Loaded<B>,
        session: Session<B>,
        request: &Arc<bindings::types::JoinRequest>,
        permits: (OwnedSemaphorePermit, OwnedSemaphorePermit),
    ) -> CallOutcome<B> {
        let (pre, id, config, request) = (
            loaded.pre.clone(),
            loaded.summary.id.clone(),
            loaded.config.clone(),
            request.clone(),
        );
        let bounds = call::Bounds {
            deadline: self.limits.call_timeout,
            memory: self.limits.memory_limit,
        };
        // The call, and the permits it holds, run to their end even if the join that started
        // it is abandoned: the deadline bounds it.
        let yielded = guest::TickYield::default();
        let ticks = yielded.clone();
        let call = async move {
            let outcome = call::verify(&pre, &id, &config, session, &request, bounds, ticks).await;
            drop(permits);
            outcome
        };
        match loaded.guests.run(call, yielded).await {
            Ok(ran) => {
                let mut outcome = ran.output;
                outcome.phases.queued = ran.queued;
                outcome.phases.on_own_thread = ran.on_own_thread;
                // A guest that failed starts its next calls on its own thread (a storage
                // failure is the database's, not the guest's).
                if matches!(&outcome.result, Err(fault) if *fault != Fault::Storage) {
                    loaded.guests.demote();
                }
                outcome
            }
            Err(e) => CallOutcome::fault(Fault::Trap(format!("the call's task ended: {e}")), None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(sha256: &str, source: Source) -> AttestorSummary {
        AttestorSummary {
            id: "join-token".into(),
            version: "1".into(),
            rounds: 1,
            source,
            sha256: sha256.into(),
            shadow_of: None,
        }
    }

    #[test]
    fn events_name_what_serves_now_what_served_before_and_the_hash() {
        let kinds: Vec<_> = [
            ChangeKind::Loaded,
            ChangeKind::Replaced,
            ChangeKind::Removed,
            ChangeKind::LoadFailed,
        ]
        .iter()
        .map(|k| k.event_kind())
        .collect();
        assert_eq!(
            kinds,
            [
                "attestor.loaded",
                "attestor.replaced",
                "attestor.removed",
                "attestor.load-failed"
            ]
        );
        let replaced = Change {
            kind: ChangeKind::Replaced,
            id: Some("join-token".into()),
            now: Some(summary("bb", Source::BuiltIn)),
            before: Some(summary("aa", Source::File("/a/jt.wasm".into()))),
            path: None,
            sha256: None,
            reason: None,
            code: None,
            repeated: false,
        };
        let p = replaced.payload();
        assert_eq!(p["sha256"], "bb");
        assert_eq!(p["now"]["source"], "built-in");
        assert_eq!(p["before"]["sha256"], "aa");
        assert_eq!(p["before"]["source"], "file /a/jt.wasm");
        // A removal's hash is what was removed; a failure's, the bytes that failed.
        let removed = Change {
            kind: ChangeKind::Removed,
            now: None,
            ..replaced.clone()
        };
        assert_eq!(removed.payload()["sha256"], "aa");
        let failed = Change {
            kind: ChangeKind::LoadFailed,
            now: None,
            before: None,
            sha256: Some("cc".into()),
            path: Some("/a/x.wasm".into()),
            reason: Some("no".into()),
            code: Some("wit-version"),
            ..replaced
        };
        assert_eq!(failed.payload()["sha256"], "cc");
        assert_eq!(failed.payload()["file"], "/a/x.wasm");
        assert!(failed.failure_key().is_some());
        assert!(removed.failure_key().is_none());
    }
}
