//! The one wasmtime [`Engine`] and the epoch ticker that bounds every call.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::RuntimeError;

/// How often the engine's epoch advances. A runaway guest is noticed within one tick, and the
/// deadline callback runs once per tick of guest execution (cheaper than fuel: DESIGN.md).
pub(super) const EPOCH_TICK: Duration = Duration::from_millis(2);

/// Sizes the pooling allocator. Every slot is reserved up front (virtual memory only), so the
/// host never allocates on the join path and never runs more instances than it can hold.
#[derive(Debug, Clone, Copy)]
pub(super) struct PoolSize {
    /// Component instances alive at once (concurrent attestor calls, plus one for loading).
    pub instances: u32,
    /// Linear memory cap per instance, in bytes.
    pub memory_bytes: usize,
}

/// Builds the engine: component model (async host imports await the database), epoch
/// interruption, pooling allocation.
pub(super) fn build(pool: PoolSize) -> Result<Engine, RuntimeError> {
    let mut pooling = PoolingAllocationConfig::default();
    // A Rust wasip2 component has a handful of core instances (the module, shims, fixups) and
    // one or two memories and tables; these caps leave room and refuse bloated components.
    let per_component_core_instances = 32;
    pooling
        .total_component_instances(pool.instances)
        .total_core_instances(pool.instances * per_component_core_instances)
        .max_core_instances_per_component(per_component_core_instances)
        .max_memories_per_component(4)
        .max_tables_per_component(8)
        .total_memories(pool.instances * 2)
        .total_tables(pool.instances * 4)
        .total_stacks(pool.instances)
        .max_memory_size(pool.memory_bytes);

    let mut config = Config::new();
    config
        .wasm_component_model(true)
        .epoch_interruption(true)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pooling));
    Engine::new(&config).map_err(RuntimeError::Engine)
}

/// Advances the engine's epoch every [`EPOCH_TICK`] on a thread of its own until dropped.
pub(super) struct EpochTicker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl EpochTicker {
    pub(super) fn start(engine: &Engine) -> Result<Self, RuntimeError> {
        let stop = Arc::new(AtomicBool::new(false));
        let engine = engine.weak();
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("gatehouse-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    match engine.upgrade() {
                        Some(engine) => engine.increment_epoch(),
                        None => return,
                    }
                }
            })
            .map_err(RuntimeError::Ticker)?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
