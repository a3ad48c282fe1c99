//! The one wasmtime [`Engine`] and the epoch ticker that bounds every call.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::RuntimeError;

/// How often the engine's epoch advances. A runaway guest is noticed within one tick, and the
/// deadline callback runs once per tick of guest execution (cheaper than fuel: DESIGN.md).
pub(super) const EPOCH_TICK: Duration = Duration::from_millis(2);

/// How much of a reused slot's linear memory, and of its tables, is reset in place (where the
/// kernel can say which pages were written, see [`resets_in_place`]). An honest attestor call
/// writes a few hundred KiB of stack, heap and statics; resetting those pages in place instead
/// of unmapping them saves the next call on the slot from faulting each of them back in, about
/// half of a join-token call (issue 14: 39 µs to 17 µs). Written pages past these sizes are
/// unmapped as before, so a slot keeps at most this much resident between calls.
const KEEP_RESIDENT_MEMORY: usize = 1 << 20;
const KEEP_RESIDENT_TABLE: usize = 64 << 10;

/// Whether a reused slot's written pages are reset in place: only where the kernel has the
/// `PAGEMAP_SCAN` ioctl (Linux 6.7 and later), which finds the pages a call wrote. Without it,
/// keeping pages resident would mean resetting the lowest [`KEEP_RESIDENT_MEMORY`] bytes of
/// every memory after every call whether written or not, which costs more than it saves; so
/// there the allocator unmaps what was written, wasmtime's default.
pub fn resets_in_place() -> bool {
    PoolingAllocationConfig::is_pagemap_scan_available()
}

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
    if resets_in_place() {
        pooling
            .pagemap_scan(Enabled::Yes)
            .linear_memory_keep_resident(KEEP_RESIDENT_MEMORY)
            .table_keep_resident(KEEP_RESIDENT_TABLE);
    }

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
