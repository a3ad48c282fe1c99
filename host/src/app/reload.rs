//! Changing a running host without a restart.
//!
//! The attestors directory is watched ([`AttestorWatch`]): a cheap poll of its `.wasm` files'
//! names, sizes, modification times and inodes (and shadows' files) every
//! `[runtime] attestors_poll_ms`; a change that has settled for one poll (a file still being
//! copied is not loaded half-written) reloads the attestors. SIGHUP ([`super::Running::reload`])
//! reads the configuration file again and reloads what can be: the attestors and their
//! settings, the refusal sink, the TLS certificate and the log level; it logs every other
//! changed setting as needing a restart.
//!
//! Polling rather than inotify: the `notify` crate and its platform back-ends would be a new
//! dependency tree to build on every builder, for a directory of a handful of files; one poll
//! is a `read_dir` and a `stat` per file (microseconds), and an operator's change is picked up
//! within two polls (2 s by default: one poll a second).

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::fetch::Fetched;
use crate::join::JoinService;
use crate::runtime::{ChangeKind, Reload, RuntimeConfig};
use crate::store::{Db, NewEvent};

/// Reloads the attestors from the current runtime settings and records what changed.
pub struct AttestorWatch {
    join: Arc<JoinService>,
    db: Db,
    /// The settings the next reload uses (SIGHUP replaces them).
    config: tokio::sync::Mutex<RuntimeConfig>,
    /// The fetched configuration values, laid over `config` at every reload.
    fetched: Arc<Fetched>,
}

impl AttestorWatch {
    pub(super) fn new(
        join: Arc<JoinService>,
        db: Db,
        config: RuntimeConfig,
        fetched: Arc<Fetched>,
    ) -> Arc<Self> {
        Arc::new(Self {
            join,
            db,
            config: tokio::sync::Mutex::new(config),
            fetched,
        })
    }

    /// Replaces the runtime settings (SIGHUP) and reloads with them.
    pub async fn reload_with(&self, config: RuntimeConfig) -> Reload {
        let mut current = self.config.lock().await;
        *current = config;
        self.reload_locked(&current).await
    }

    /// Reloads the attestors with the current settings: the runtime swaps in what loaded,
    /// keeps what served in place of what did not, and every change is logged and written as
    /// an event (`attestor.loaded`, `attestor.replaced`, `attestor.removed`,
    /// `attestor.load-failed`), each with the component's sha256.
    pub async fn reload(&self) -> Reload {
        let current = self.config.lock().await;
        self.reload_locked(&current).await
    }

    async fn reload_locked(&self, config: &RuntimeConfig) -> Reload {
        let mut config = config.clone();
        self.fetched.apply(&mut config);
        let reload = self.join.runtime().reload(&config).await;
        for change in &reload.changes {
            let payload = change.payload();
            let id = change.id.as_deref().unwrap_or("");
            let sha256 = payload["sha256"].as_str().unwrap_or("");
            match change.kind {
                ChangeKind::LoadFailed if change.repeated => tracing::debug!(
                    attestor = id,
                    sha256,
                    reason = change.reason.as_deref().unwrap_or(""),
                    "attestor still not loaded"
                ),
                ChangeKind::LoadFailed => tracing::error!(
                    attestor = id,
                    sha256,
                    reason = change.reason.as_deref().unwrap_or(""),
                    "attestor not loaded; what served before keeps serving"
                ),
                kind => {
                    tracing::info!(attestor = id, sha256, source = %payload["now"]["source"], "{}", kind.event_kind())
                }
            }
        }
        for what in &reload.needs_restart {
            tracing::warn!(setting = %what, "changed, but takes effect only after a restart");
        }
        if let Err(e) = self.record(&reload).await {
            tracing::error!(error = %e, "could not record the attestors' changes as events");
        }
        reload
    }

    async fn record(&self, reload: &Reload) -> Result<(), crate::store::StoreError> {
        if reload.changes.iter().all(|c| c.repeated) {
            return Ok(());
        }
        let mut tx = self.db.begin().await?;
        let at = tx.now().await?;
        for change in reload.changes.iter().filter(|c| !c.repeated) {
            tx.insert_event(&NewEvent {
                at,
                kind: change.kind.event_kind().to_owned(),
                tenant_id: None,
                node_id: None,
                attestor: change.id.clone(),
                reason: change.code.map(str::to_owned),
                token_id: None,
                payload: change.payload(),
            })
            .await?;
        }
        tx.commit().await
    }

    /// Polls the attestors directory every `every` and reloads on a change that has settled
    /// (the same for two polls in a row). Runs until the task is aborted.
    pub(super) async fn watch(self: Arc<Self>, every: Duration) {
        let mut loaded = self.fingerprint().await;
        let mut seen = loaded.clone();
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        loop {
            ticks.tick().await;
            let now = self.fingerprint().await;
            if now != loaded && now == seen {
                self.reload().await;
                loaded = now.clone();
            }
            seen = now;
        }
    }

    /// What the poll compares: each watched file's path, size, modification time and inode.
    async fn fingerprint(&self) -> Vec<(PathBuf, u64, i64, i64, u64)> {
        let config = self.config.lock().await;
        let mut files: Vec<PathBuf> = config
            .attestors
            .values()
            .filter_map(|s| s.file.clone())
            .collect();
        if let Some(dir) = &config.attestors_dir {
            files.extend(wasm_entries(dir));
        }
        drop(config);
        let mut print: Vec<_> = files
            .into_iter()
            .map(|path| {
                let meta = std::fs::metadata(&path).ok();
                let (len, secs, nanos, ino) = meta.map_or((0, 0, 0, 0), |m| {
                    (m.len(), m.mtime(), m.mtime_nsec(), m.ino())
                });
                (path, len, secs, nanos, ino)
            })
            .collect();
        print.sort();
        print
    }
}

/// The `.wasm` entries of a directory (an unreadable directory has none: its reload reports
/// why).
fn wasm_entries(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "wasm"))
                .collect()
        })
        .unwrap_or_default()
}
