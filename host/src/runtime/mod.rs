//! The attestor runtime.
//!
//! One wasmtime [`Engine`] (pooling allocator, epoch interruption, async), every component
//! compiled once (the compiled form cached on disk, see [`cache`]), one `InstancePre` per
//! attestor, and a fresh `Store` and instance for every call, so no state crosses joins. Every
//! call is bounded: guest execution by a deadline, linear memory by a cap, transaction calls by
//! a count; a trap, timeout, out-of-memory or malformed result becomes a [`Fault`], never a
//! host crash and never an admission.

pub mod bindings;
mod cache;
mod call;
mod engine;
mod guest;
mod loader;
mod pre;
mod registry;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use tokio::sync::Semaphore;
use wasmtime::Engine;
use wasmtime::component::{HasSelf, Linker};

pub use cache::CacheError;
pub(crate) use call::is_code;
pub use call::{CallOutcome, CallPhases, Fault};
pub use engine::resets_in_place;
pub use loader::{AttestorSummary, LoadError, LoadFailure, Source};
pub use registry::{Attestors, Change, ChangeKind, Reload};

use crate::imports::{CallState, TxBackend};
use loader::Configured;
use pre::Pre;

/// The WIT package version this host implements. A component built against another
/// incompatible version is refused at load.
pub const WIT_VERSION: &str = "0.2.1";
/// The WIT package name.
pub const WIT_PACKAGE: &str = "better-compute:attestor";

/// Calls of one attestor at once unless configured. A slow or hostile attestor then takes at
/// most this many of the host's instance slots and cores' time; a join through it past this
/// waits (at most 2 s, behind at most 64 others) for a call to end, then is refused
/// `attestor-busy`, and joins through other attestors are not delayed.
pub const DEFAULT_CALLS_PER_ATTESTOR: u32 = 4;

/// How the runtime loads and bounds attestors.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// The guest-execution deadline of one call (time awaiting the database excluded).
    pub call_timeout: Duration,
    /// The linear-memory cap of one instance, in bytes.
    pub memory_limit: usize,
    /// Calls running at once; more wait for a slot (the pooling allocator's size).
    pub max_concurrent_calls: u32,
    /// Calls of one attestor running at once; a join past it waits at most 2 s (behind at
    /// most 64 others) for one to end, then is refused ([`Fault::Busy`]).
    pub max_calls_per_attestor: u32,
    /// Where compiled components are cached; none to compile at every start.
    pub cache_dir: Option<PathBuf>,
    /// A directory of `.wasm` attestors that add to (or, by id, replace) the built-ins.
    pub attestors_dir: Option<PathBuf>,
    /// Per-attestor settings by id.
    pub attestors: BTreeMap<String, AttestorSettings>,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            call_timeout: Duration::from_millis(250),
            memory_limit: 64 << 20,
            max_concurrent_calls: 64,
            max_calls_per_attestor: DEFAULT_CALLS_PER_ATTESTOR,
            cache_dir: None,
            attestors_dir: None,
            attestors: BTreeMap::new(),
        }
    }
}

/// Settings of one attestor.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AttestorSettings {
    /// Load only a component with this SHA-256 (lowercase hex).
    pub sha256: Option<String>,
    /// Its configuration, handed to `configure` and `verify` as JSON text.
    pub config: serde_json::Value,
    /// Run it as a shadow beside this live attestor: on the same requests, its writes never
    /// applied, its verdict only recorded ([`Attestors::shadows_of`]).
    pub shadow_of: Option<String>,
    /// A shadow's component file, loaded under this attestor's id whatever id it describes
    /// itself by (so a new version of a live attestor can run beside it). Not loaded as a live
    /// attestor even when it lies in `attestors_dir`.
    pub file: Option<PathBuf>,
}

/// Why the runtime could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// wasmtime refused the engine configuration.
    #[error("cannot create the wasm engine: {0}")]
    Engine(#[source] wasmtime::Error),
    /// The epoch ticker thread could not start.
    #[error("cannot start the epoch ticker: {0}")]
    Ticker(#[source] std::io::Error),
    /// The thread an attestor's guest code runs on could not start.
    #[error("cannot start an attestor thread: {0}")]
    Threads(#[source] std::io::Error),
    /// The host's imports could not be linked.
    #[error("cannot link the host imports: {0}")]
    Linker(#[source] wasmtime::Error),
    /// The compiled-component cache is unusable.
    #[error(transparent)]
    Cache(#[from] CacheError),
    /// An attestor could not be loaded.
    #[error(transparent)]
    Load(#[from] LoadError),
}

/// A loaded attestor.
struct Loaded<B: TxBackend> {
    summary: AttestorSummary,
    pre: Pre<B>,
    config: Configured,
    /// Its share of the calls: at most `max_calls_per_attestor` at once.
    calls: Arc<Semaphore>,
    /// Joins waiting for a share.
    waiting: AtomicUsize,
    /// The thread its calls move to once they have run a whole epoch tick.
    guests: guest::GuestThread,
}

/// How long a join waits for a call of a busy attestor to end before it is refused.
const BUSY_WAIT: Duration = Duration::from_secs(2);
/// How many joins may wait for one attestor's calls; more are refused at once.
const MAX_WAITING: usize = 64;

/// One join counted among those waiting for an attestor, until dropped.
struct Waiting<'a> {
    of: &'a AtomicUsize,
    /// Joins waiting, this one included.
    count: usize,
}

impl<'a> Waiting<'a> {
    fn enter(of: &'a AtomicUsize) -> Self {
        let count = of.fetch_add(1, Ordering::Relaxed) + 1;
        Self { of, count }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.of.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The attestors this host runs and the engine that runs them.
///
/// The set of attestors is versioned: [`Runtime::snapshot`] hands out the current version, an
/// `Arc` a join round keeps from its start to its end (so a round is decided by exactly one
/// version of its attestor, reruns included), and [`Runtime::reload`] builds the next version
/// beside it and swaps it in. An attestor a reload leaves unchanged is the same object in both
/// versions (its call share, waiting joins and guest thread carry over); one it replaces or
/// removes lives on, with its thread, until the last round holding the old version ends.
pub struct Runtime<B: TxBackend> {
    current: RwLock<Arc<Attestors<B>>>,
    /// One (re)load at a time: loading takes the pool's one spare instance slot.
    loader: tokio::sync::Mutex<Loader<B>>,
    limits: Arc<CallLimits>,
    // Last: the ticker stops when the runtime is dropped.
    _ticker: engine::EpochTicker,
}

/// What every call of every version shares: the pool's slots and the per-call bounds.
struct CallLimits {
    slots: Arc<Semaphore>,
    max_concurrent_calls: u32,
    call_timeout: Duration,
    memory_limit: usize,
    max_calls_per_attestor: u32,
}

impl CallLimits {
    /// The slots of the pool calls may take.
    fn slots_total(&self) -> usize {
        self.max_concurrent_calls as usize
    }
}

/// What a reload needs: the engine, the linker, the compiled cache and the built-ins.
struct Loader<B: TxBackend> {
    engine: Engine,
    linker: Linker<CallState<B>>,
    cache: Option<cache::ComponentCache>,
    builtins: &'static [(&'static str, &'static [u8])],
    /// The settings the last (re)load ran with: what cannot change without a restart is
    /// compared against them.
    config: RuntimeConfig,
    /// The failures the last reload reported ([`Change::failure_key`]).
    failures: std::collections::BTreeSet<String>,
}

impl<B: TxBackend> Runtime<B> {
    /// Builds the engine and loads the built-in components (`(name, wasm bytes)`) and then the
    /// attestors directory, applying pins and configuration. Any component that does not load
    /// refuses the start (a reload is more forgiving: [`Runtime::reload`]).
    pub async fn load(
        config: &RuntimeConfig,
        builtins: &'static [(&'static str, &'static [u8])],
    ) -> Result<Self, RuntimeError> {
        let engine = engine::build(engine::PoolSize {
            // One extra slot for loading while calls run.
            instances: config.max_concurrent_calls + 1,
            memory_bytes: config.memory_limit,
        })?;
        let ticker = engine::EpochTicker::start(&engine)?;
        let linker = Self::linker(&engine)?;
        let cache = match &config.cache_dir {
            Some(dir) => Some(cache::ComponentCache::open(dir, &engine)?),
            None => None,
        };
        let limits = Arc::new(CallLimits {
            slots: Arc::new(Semaphore::new(config.max_concurrent_calls as usize)),
            max_concurrent_calls: config.max_concurrent_calls,
            call_timeout: config.call_timeout,
            memory_limit: config.memory_limit,
            max_calls_per_attestor: config.max_calls_per_attestor,
        });
        let loader = Loader {
            engine,
            linker,
            cache,
            builtins,
            config: config.clone(),
            failures: std::collections::BTreeSet::new(),
        };
        let found = loader::load_all(&loader.context(), config, builtins, &[]).await;
        if let Some(failure) = found.failures.into_iter().next() {
            return Err(RuntimeError::Load(*failure.error));
        }
        let empty = Attestors::empty(limits.clone());
        let (attestors, _) = empty.next(found.attestors, Vec::new(), &limits)?;
        Ok(Self {
            current: RwLock::new(Arc::new(attestors)),
            loader: tokio::sync::Mutex::new(loader),
            limits,
            _ticker: ticker,
        })
    }

    /// Loads again what `config` names (built-ins, `attestors_dir`, settings) and swaps the
    /// result in. Never fails as a whole: a component that does not load is reported in the
    /// [`Reload`] and what served before it keeps serving; rounds already running finish on
    /// the version they started with. The runtime's own limits (deadline, memory, slots) are
    /// those it started with; a change to them is reported as needing a restart.
    pub async fn reload(&self, config: &RuntimeConfig) -> Reload {
        let mut loader = self.loader.lock().await;
        let before = self.snapshot();
        let previous = before.loaded();
        let found = loader::load_all(&loader.context(), config, loader.builtins, &previous).await;
        let mut needs_restart = Vec::new();
        let old = loader.config.clone();
        if old.call_timeout != config.call_timeout
            || old.memory_limit != config.memory_limit
            || old.max_concurrent_calls != config.max_concurrent_calls
            || old.max_calls_per_attestor != config.max_calls_per_attestor
        {
            needs_restart.push("[runtime] limits (call_timeout_ms, memory_limit_mib, max_concurrent_calls, max_calls_per_attestor)".to_owned());
        }
        if old.cache_dir != config.cache_dir {
            needs_restart.push("[runtime] cache_dir".to_owned());
        }
        let reload = match before.next(found.attestors, found.failures, &self.limits) {
            Ok((next, mut changes)) => {
                let keys: std::collections::BTreeSet<String> =
                    changes.iter().filter_map(Change::failure_key).collect();
                for change in &mut changes {
                    change.repeated = change
                        .failure_key()
                        .is_some_and(|k| loader.failures.contains(&k));
                }
                loader.failures = keys;
                if changes.iter().any(|c| c.kind != ChangeKind::LoadFailed) {
                    *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(next);
                }
                Reload {
                    changes,
                    needs_restart,
                }
            }
            // No thread for a new attestor: nothing changes.
            Err(e) => Reload {
                changes: vec![Change::failed_whole(e.to_string())],
                needs_restart,
            },
        };
        let mut kept = config.clone();
        kept.call_timeout = old.call_timeout;
        kept.memory_limit = old.memory_limit;
        kept.max_concurrent_calls = old.max_concurrent_calls;
        kept.max_calls_per_attestor = old.max_calls_per_attestor;
        kept.cache_dir = old.cache_dir;
        loader.config = kept;
        reload
    }

    fn linker(engine: &Engine) -> Result<Linker<CallState<B>>, RuntimeError> {
        let mut linker = Linker::new(engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(RuntimeError::Linker)?;
        bindings::types::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s)
            .map_err(RuntimeError::Linker)?;
        bindings::transaction::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s)
            .map_err(RuntimeError::Linker)?;
        bindings::crypto::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s)
            .map_err(RuntimeError::Linker)?;
        bindings::tpm::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s)
            .map_err(RuntimeError::Linker)?;
        bindings::prepared::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s)
            .map_err(RuntimeError::Linker)?;
        Ok(linker)
    }

    /// Compiles, links and describes a component as a load would (the WIT version check
    /// included), without calling `configure` or serving it: `gatehouse attestors check`.
    pub async fn inspect(&self, source: Source, wasm: &[u8]) -> Result<AttestorSummary, LoadError> {
        let loader = self.loader.lock().await;
        let cx = loader.context();
        let origin = source.to_string();
        loader::load_one(
            cx.engine,
            cx.linker,
            cx.cache,
            &origin,
            source,
            wasm,
            cx.memory_limit,
        )
        .await
        .map(|(summary, _)| summary)
    }

    /// The current version of the attestors: what a join round holds from start to end.
    pub fn snapshot(&self) -> Arc<Attestors<B>> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// What is loaded now, live attestors and shadows, by id.
    pub fn attestors(&self) -> Vec<AttestorSummary> {
        self.snapshot().summaries()
    }

    /// Whether a live attestor with this id is loaded now (a shadow is not).
    pub fn contains(&self, id: &str) -> bool {
        self.snapshot().contains(id)
    }

    /// Calls `verify` of live attestor `id` of the current version ([`Attestors::verify`]).
    pub async fn verify(
        &self,
        id: &str,
        session: crate::imports::Session<B>,
        request: &Arc<bindings::types::JoinRequest>,
    ) -> CallOutcome<B> {
        self.snapshot().verify(id, session, request).await
    }
}

impl<B: TxBackend> Loader<B> {
    fn context(&self) -> loader::LoadContext<'_, B> {
        loader::LoadContext {
            engine: &self.engine,
            linker: &self.linker,
            cache: self.cache.as_ref(),
            // The engine's pool was sized for the first load's cap.
            memory_limit: self.config.memory_limit,
        }
    }
}
