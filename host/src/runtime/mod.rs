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
pub const WIT_VERSION: &str = "0.1.0";
/// The WIT package name.
pub const WIT_PACKAGE: &str = "better-compute:attestor";

/// How the runtime loads and bounds attestors.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// The guest-execution deadline of one call (time awaiting the database excluded).
    pub call_timeout: Duration,
    /// The linear-memory cap of one instance, in bytes.
    pub memory_limit: usize,
    /// Calls running at once; more wait for a slot (the pooling allocator's size).
    pub max_concurrent_calls: u32,
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
}

/// The attestors this host runs and the engine that runs them.
pub struct Runtime<B: TxBackend> {
    attestors: BTreeMap<String, Loaded<B>>,
    slots: Semaphore,
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
        Ok(Self {
            attestors: attestors
                .into_iter()
                .map(|l| {
                    (
                        l.summary.id.clone(),
                        Loaded {
                            summary: l.summary,
                            pre: l.pre,
                            config: l.config,
                        },
                    )
                })
                .collect(),
            slots: Semaphore::new(config.max_concurrent_calls as usize),
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
        // The semaphore is never closed, so acquire fails only if it were; treat that as a
        // fault rather than run past the pool's size.
        let Ok(_slot) = self.slots.acquire().await else {
            return CallOutcome::fault(Fault::Trap("no instance slot".into()), Some(session));
        };
        call::verify(
            &loaded.pre,
            id,
            &loaded.config,
            session,
            request,
            self.call_timeout,
            self.memory_limit,
        )
        .await
    }
}

/// Shared with the loader and the call path.
pub(crate) type Pre<B> = AttestorPre<CallState<B>>;
