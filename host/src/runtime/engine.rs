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

#[cfg(test)]
mod tests {
    use std::os::unix::fs::FileExt as _;

    use wasmtime::{Instance, Module, Store};

    use super::*;

    /// A core module with one exported memory of two pages and nothing else: the test writes
    /// into it from the host, as a guest's stores would.
    const ONE_MEMORY: &[u8] = &[
        0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version 1
        0x05, 0x03, 0x01, 0x00, 0x02, // memory section: one memory, min 2 pages, no max
        0x07, 0x0a, 0x01, 0x06, b'm', b'e', b'm', b'o', b'r', b'y', 0x02, 0x00, // export it
    ];

    const PAGE: usize = 4096;
    /// Where the secret goes: past any image, in the region a reused slot must reset.
    const AT: usize = 64 << 10;

    /// Whether this machine can swap a page out at all.
    fn swap_on() -> bool {
        std::fs::read_to_string("/proc/swaps").is_ok_and(|s| s.lines().count() > 1)
    }

    /// Whether the page holding `addr` is in swap (bit 62 of its `/proc/self/pagemap` entry),
    /// not in memory.
    fn swapped_out(addr: usize) -> bool {
        let pagemap = std::fs::File::open("/proc/self/pagemap").unwrap();
        let mut entry = [0; 8];
        pagemap
            .read_exact_at(&mut entry, (addr / PAGE * 8) as u64)
            .unwrap();
        u64::from_le_bytes(entry) & (1 << 62) != 0
    }

    fn memory_of(store: &mut Store<()>, module: &Module) -> wasmtime::Memory {
        store.set_epoch_deadline(u64::MAX / 2);
        let instance = Instance::new(&mut *store, module, &[]).unwrap();
        instance.get_memory(&mut *store, "memory").unwrap()
    }

    /// What one call wrote must never reach the next instance on its slot, even when the
    /// kernel swapped the page out in between: a slot reset that looks only at pages present in
    /// memory would leave a swapped one holding the last call's data (a token's secret, another
    /// attestor's evidence). wasmtime 48.0.10's `PAGEMAP_SCAN` reset did (fixed in 48.0.11).
    /// Needs swap, so it says it skipped where there is none (CI).
    #[test]
    fn a_reused_slot_never_shows_a_swapped_out_page_of_the_last_instance() {
        if !resets_in_place() || !swap_on() {
            eprintln!("skipped: no swap on this machine, or no PAGEMAP_SCAN");
            return;
        }
        // One instance slot, so the second instance reuses the first one's memory.
        let engine = build(PoolSize {
            instances: 1,
            memory_bytes: 1 << 20,
        })
        .unwrap();
        let module = Module::new(&engine, ONE_MEMORY).unwrap();

        let mut store = Store::new(&engine, ());
        let memory = memory_of(&mut store, &module);
        memory.data_mut(&mut store)[AT..AT + PAGE].fill(0x5e);
        let addr = memory.data_ptr(&store) as usize + AT;
        let mut out = false;
        for _ in 0..20 {
            // SAFETY: the page is this store's linear memory, mapped and private; paging it
            // out keeps its contents.
            #[allow(unsafe_code)]
            unsafe {
                rustix::mm::madvise(addr as *mut _, PAGE, rustix::mm::Advice::LinuxPageOut)
                    .unwrap();
            }
            out = swapped_out(addr);
            if out {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if !out {
            eprintln!("skipped: the kernel kept the page in memory");
            return;
        }
        drop(store);

        let mut store = Store::new(&engine, ());
        let memory = memory_of(&mut store, &module);
        assert_eq!(
            memory.data_ptr(&store) as usize + AT,
            addr,
            "the second instance did not reuse the slot"
        );
        assert!(
            memory.data(&store)[AT..AT + PAGE].iter().all(|&b| b == 0),
            "the last instance's page came back from swap"
        );
    }
}
