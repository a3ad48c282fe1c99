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
mod loader;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Semaphore;
use wasmtime::Engine;
use wasmtime::component::{HasSelf, Linker};

pub use cache::CacheError;
pub(crate) use call::is_code;
pub use call::{CallOutcome, Fault};
pub use loader::{AttestorSummary, LoadError, Source};

use crate::imports::{CallState, TxBackend};
use bindings::AttestorPre;

/// The WIT package version this host implements. A component built against another
/// incompatible version is refused at load.
pub const WIT_VERSION: &str = "0.2.0";
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
#[derive(Debug, Clone, Default)]
pub struct AttestorSettings {
    /// Load only a component with this SHA-256 (lowercase hex).
    pub sha256: Option<String>,
    /// Its configuration, handed to `configure` and `verify` as JSON text.
    pub config: serde_json::Value,
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
    pre: AttestorPre<CallState<B>>,
    config: String,
    /// Its share of the calls: at most `max_calls_per_attestor` at once.
    calls: Arc<Semaphore>,
    /// Joins waiting for a share.
    waiting: AtomicUsize,
    /// The thread its guest code runs on.
    guests: GuestThread,
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
pub struct Runtime<B: TxBackend> {
    attestors: BTreeMap<String, Loaded<B>>,
    slots: Arc<Semaphore>,
    call_timeout: Duration,
    memory_limit: usize,
    // Last: the ticker stops when the runtime is dropped.
    _ticker: engine::EpochTicker,
}

impl<B: TxBackend> Runtime<B> {
    /// Builds the engine and loads the built-in components (`(name, wasm bytes)`) and then the
    /// attestors directory, applying pins and configuration.
    pub async fn load(
        config: &RuntimeConfig,
        builtins: &[(&str, &[u8])],
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
        let attestors = loader::load_all(
            &engine,
            &linker,
            cache.as_ref(),
            config,
            builtins,
            config.memory_limit,
        )
        .await?;
        let attestors = attestors
            .into_iter()
            .map(|l| {
                Ok((
                    l.summary.id.clone(),
                    Loaded {
                        guests: GuestThread::start(&l.summary.id)?,
                        summary: l.summary,
                        pre: l.pre,
                        config: l.config,
                        calls: Arc::new(Semaphore::new(config.max_calls_per_attestor as usize)),
                        waiting: AtomicUsize::new(0),
                    },
                ))
            })
            .collect::<Result<_, RuntimeError>>()?;
        Ok(Self {
            attestors,
            slots: Arc::new(Semaphore::new(config.max_concurrent_calls as usize)),
            call_timeout: config.call_timeout,
            memory_limit: config.memory_limit,
            _ticker: ticker,
        })
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
        Ok(linker)
    }

    /// What is loaded, by id.
    pub fn attestors(&self) -> impl Iterator<Item = &AttestorSummary> {
        self.attestors.values().map(|l| &l.summary)
    }

    /// Whether an attestor with this id is loaded.
    pub fn contains(&self, id: &str) -> bool {
        self.attestors.contains_key(id)
    }

    /// Calls `verify` of attestor `id` in a fresh instance with `session`. The session comes
    /// back unless the call had to be abandoned (then its transaction is dropped: rolled back).
    pub async fn verify(
        &self,
        id: &str,
        session: crate::imports::Session<B>,
        request: &bindings::types::JoinRequest,
    ) -> CallOutcome<B> {
        let Some(loaded) = self.attestors.get(id) else {
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
        let Ok(slot) = self.slots.clone().acquire_owned().await else {
            return CallOutcome::fault(Fault::Trap("no instance slot".into()), Some(session));
        };
        let (pre, id, config, request) = (
            loaded.pre.clone(),
            id.to_owned(),
            loaded.config.clone(),
            request.clone(),
        );
        let (timeout, memory_limit) = (self.call_timeout, self.memory_limit);
        // The call, and the permits it holds, run to their end on the guest threads even if
        // the join that started it is abandoned: the deadline bounds it.
        let call = loaded.guests.spawn(async move {
            let outcome =
                call::verify(&pre, &id, &config, session, &request, timeout, memory_limit).await;
            drop((share, slot));
            outcome
        });
        match call.await {
            Ok(outcome) => outcome,
            Err(e) => CallOutcome::fault(Fault::Trap(format!("the call's task ended: {e}")), None),
        }
    }
}

/// The thread one attestor's guest code runs on: a runtime of its own with one worker, so the
/// operating system's scheduler shares the cores between attestors (and with the host's own
/// threads: TLS, the database, policy, signing) rather than between calls. A looping or
/// memory-hungry attestor, however many of its calls are in flight, then takes at most one
/// thread's share of the CPU, and the calls of every other attestor never queue behind its
/// turns (each call yields every epoch tick, to the other calls of its own attestor).
/// One attestor's guest code is so bounded to one core; an honest call is tens to hundreds of
/// microseconds, thousands of joins a second.
struct GuestThread(Option<tokio::runtime::Runtime>);

impl GuestThread {
    fn start(attestor: &str) -> Result<Self, RuntimeError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            // Linux keeps 15 bytes of a thread's name.
            .thread_name(format!("gh-{attestor}"))
            .enable_all()
            .build()
            .map_err(RuntimeError::Threads)?;
        Ok(Self(Some(runtime)))
    }

    fn spawn<F>(&self, call: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        match &self.0 {
            Some(runtime) => runtime.spawn(call),
            // Only between `drop` taking the runtime and the end of `drop`.
            None => tokio::spawn(call),
        }
    }
}

impl Drop for GuestThread {
    fn drop(&mut self) {
        // Dropped from async code when the host shuts down: never block there.
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

/// Shared with the loader and the call path.
pub(crate) type Pre<B> = AttestorPre<CallState<B>>;
