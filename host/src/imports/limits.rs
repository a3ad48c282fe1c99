//! The memory cap of one attestor call.

use wasmtime::ResourceLimiter;

/// Caps linear memory growth at a byte limit and table growth at a fixed element count, and
/// remembers that it refused, so the host can report the fault as out-of-memory.
pub(crate) struct MemoryLimiter {
    memory_bytes: usize,
    denied: bool,
}

/// Table elements one instance may hold (function references; plenty for Rust components).
const MAX_TABLE_ELEMENTS: usize = 100_000;

impl MemoryLimiter {
    pub(crate) fn new(memory_bytes: usize) -> Self {
        Self {
            memory_bytes,
            denied: false,
        }
    }

    /// Whether a growth was refused during the call.
    pub(crate) fn denied(&self) -> bool {
        self.denied
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory_bytes {
            self.denied = true;
            // An error (not Ok(false)) traps at once: a guest allocator's failure path would
            // otherwise abort with less to say.
            wasmtime::bail!(
                "attestor memory limit of {} bytes reached",
                self.memory_bytes
            );
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > MAX_TABLE_ELEMENTS {
            self.denied = true;
            wasmtime::bail!("attestor table limit of {MAX_TABLE_ELEMENTS} elements reached");
        }
        Ok(true)
    }
}
