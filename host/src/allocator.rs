//! The process's allocator: mimalloc (v2), returning what it frees to the kernel at once.
//!
//! A join allocates and frees many small blocks on whichever tokio worker polls it
//! (the request's JSON, the CSR's parse, the certificate's DER, the audit row, the
//! component's copies in and out), many of them freed on another thread than the one that
//! allocated them. glibc's allocator took about a tenth of the host's CPU samples there
//! (`malloc`, `_int_free`, `unlink_chunk`, `realloc`); with mimalloc's per-thread free lists the
//! benchmark's token joins rose about 9 % on both backends, and the CPU a join costs fell 2–4 %
//! (`docs/benchmarks.md`, "mimalloc for the host", interleaved runs).
//!
//! By default mimalloc keeps freed pages for 10 ms before it hands them back, which made the
//! benchmark's peak resident memory 60 % larger than glibc's; handing them back at once keeps
//! it within 5 %. (The soak's host, lightly loaded with more threads idle, sat a quarter above
//! glibc's; mimalloc's `MIMALLOC_EAGER_COMMIT=0 MIMALLOC_ARENA_EAGER_COMMIT=0` brings it below
//! glibc's, and the benchmark's rate back to glibc's: README, "Memory".) The setting is made
//! first thing in each binary's `main`
//! ([`return_freed_memory_at_once`]), so that it covers everything the process allocates. v2,
//! not the crate's default v3: the option is set by number, and the binding crate's numbers are
//! v2's.
//!
//! Declared in the host's library, so that every process that runs a host uses it: the
//! `gatehouse` binary, the benchmark, and the tests (the soak's host process among them, whose
//! resident-memory check then covers this allocator).

use libmimalloc_sys::{mi_option_eager_commit_delay, mi_option_t};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` of mimalloc v2's `mimalloc.h`: how many milliseconds freed memory
/// is kept before it is returned (10 by default; 0 at once). The binding crate names the options
/// either side of it (`eager_commit_delay` 14, `use_numa_nodes` 16) but not this one.
const PURGE_DELAY: mi_option_t = mi_option_eager_commit_delay + 1;
const _: () = assert!(PURGE_DELAY < libmimalloc_sys::_mi_option_last);

/// Has freed memory returned to the kernel at once, for the rest of the process: first thing
/// in `main`, before the process allocates much. Calling it again sets the same value. In a
/// process linked with another major version of mimalloc than 2, whose option numbers differ,
/// it does nothing (leaving mimalloc's defaults rather than setting some other option).
pub fn return_freed_memory_at_once() {
    if linked_major_version() != 2 {
        return;
    }
    // SAFETY: `mi_option_set` stores a value in mimalloc's option table; any option number
    // below `_mi_option_last` is valid (checked above), and this one is an integer option.
    #[allow(unsafe_code)]
    unsafe {
        libmimalloc_sys::mi_option_set(PURGE_DELAY, 0);
    }
}

/// The major version of the mimalloc linked in (`MI_MALLOC_VERSION`, e.g. 20302 for 2.3.2).
fn linked_major_version() -> i32 {
    // SAFETY: `mi_version` only returns a constant.
    #[allow(unsafe_code)]
    let version = unsafe { libmimalloc_sys::mi_version() };
    version / 10_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_purge_delay_is_v2s_option_between_its_neighbours() {
        // The library is v2 (the crate's `v2` feature), and in v2's order eager_commit_delay,
        // purge_delay, use_numa_nodes: a binding crate whose numbers moved fails here rather
        // than set another option.
        assert_eq!(linked_major_version(), 2);
        assert_eq!(PURGE_DELAY + 1, libmimalloc_sys::mi_option_use_numa_nodes);
        return_freed_memory_at_once();
        // SAFETY: reads an option, as above.
        #[allow(unsafe_code)]
        let delay = unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY) };
        assert_eq!(delay, 0);
    }
}
