//! What [`no_std_runtime!`](crate::no_std_runtime) expands to: the pieces of a component that
//! the standard library would otherwise supply.

/// The global allocator of a component without `std`: wasi-libc's `malloc`, as the standard
/// library's on this target.
///
/// Not the `dlmalloc` crate (what Rust's `wasm32-unknown-unknown` uses): on `wasm32-wasip2` it
/// does not know the free memory the linker leaves above the heap base, so its first allocation
/// grows the linear memory, and every call pays for that growth, its fresh pages and the
/// slot's reset (a join-token call took 20 µs with it, 14 µs without). wasi-libc's `malloc`
/// starts in that free memory, which holds what a call allocates. Nor the `libc_alloc` crate,
/// which allocates everything with `memalign`.
#[cfg(target_arch = "wasm32")]
#[derive(Debug)]
pub struct LibcMalloc;

#[cfg(target_arch = "wasm32")]
#[allow(unsafe_code)]
mod libc {
    unsafe extern "C" {
        pub fn malloc(size: usize) -> *mut u8;
        pub fn aligned_alloc(align: usize, size: usize) -> *mut u8;
        pub fn realloc(ptr: *mut u8, size: usize) -> *mut u8;
        pub fn free(ptr: *mut u8);
    }
}

/// The alignment wasi-libc's `malloc` guarantees (its `MALLOC_ALIGNMENT` is 16; the standard
/// library relies on 8 for wasm32, and so does this).
#[cfg(target_arch = "wasm32")]
const MIN_ALIGN: usize = 8;

#[cfg(target_arch = "wasm32")]
#[allow(unsafe_code)]
// SAFETY: each method passes the caller's block and layout on to the C allocator, which
// returns blocks of at least the size asked and `MIN_ALIGN` (or the asked alignment through
// `aligned_alloc`), or null.
unsafe impl core::alloc::GlobalAlloc for LibcMalloc {
    unsafe fn alloc(&self, layout: core::alloc::Layout) -> *mut u8 {
        if layout.align() <= MIN_ALIGN && layout.align() <= layout.size() {
            // SAFETY: any size may be asked for.
            unsafe { libc::malloc(layout.size()) }
        } else {
            // SAFETY: the alignment is a power of two (a `Layout`'s is).
            unsafe { libc::aligned_alloc(layout.align(), layout.size()) }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, _layout: core::alloc::Layout) {
        // SAFETY: `ptr` came from this allocator (the trait's contract).
        unsafe { libc::free(ptr) }
    }

    unsafe fn realloc(
        &self,
        ptr: *mut u8,
        layout: core::alloc::Layout,
        new_size: usize,
    ) -> *mut u8 {
        if layout.align() <= MIN_ALIGN && layout.align() <= new_size {
            // SAFETY: `ptr` came from this allocator, and `realloc` keeps `MIN_ALIGN`.
            unsafe { libc::realloc(ptr, new_size) }
        } else {
            // `realloc` does not keep a larger alignment: allocate, copy and free.
            // SAFETY: the trait's contract: `layout` is `ptr`'s and `new_size` fits a layout of
            // its alignment.
            unsafe {
                let new_layout =
                    core::alloc::Layout::from_size_align_unchecked(new_size, layout.align());
                let new = self.alloc(new_layout);
                if !new.is_null() {
                    core::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                    self.dealloc(ptr, layout);
                }
                new
            }
        }
    }
}

/// The canonical ABI's `cabi_realloc` over the global allocator: how the host allocates guest
/// memory for the strings and lists it passes in. On `wasm32-wasip2` the standard library
/// exports it and `wit-bindgen` leaves it out (its own copy is for the other wasm targets), so a
/// component without `std` needs this one. Written after `wit-bindgen`'s `rt::cabi_realloc`.
///
/// # Safety
///
/// The canonical ABI's contract: `old_ptr` and `old_len` are a block this function returned
/// with the same `align` (or `0` and `0`), `align` is a power of two, and `new_len` is not zero
/// when `old_len` is not.
#[cfg(target_arch = "wasm32")]
#[allow(unsafe_code)]
pub unsafe fn cabi_realloc(
    old_ptr: *mut u8,
    old_len: usize,
    align: usize,
    new_len: usize,
) -> *mut u8 {
    use alloc::alloc::Layout;

    let ptr = if old_len == 0 {
        if new_len == 0 {
            // A non-null, aligned, dangling pointer: nothing is allocated for no bytes.
            return align as *mut u8;
        }
        match Layout::from_size_align(new_len, align) {
            // SAFETY: the layout's size is not zero.
            Ok(layout) => unsafe { alloc::alloc::alloc(layout) },
            Err(_) => core::ptr::null_mut(),
        }
    } else {
        match Layout::from_size_align(old_len, align) {
            // SAFETY: the caller's contract: the block was allocated with this layout.
            Ok(layout) => unsafe { alloc::alloc::realloc(old_ptr, layout, new_len) },
            Err(_) => core::ptr::null_mut(),
        }
    };
    if ptr.is_null() {
        // Out of memory (the host's cap), or a request no layout can hold: trap, which the
        // host reports as the attestor's fault.
        core::arch::wasm32::unreachable()
    }
    ptr
}

/// What a `no_std` component needs from its final crate: a panic handler, an allocator and the
/// canonical ABI's `cabi_realloc`.
///
/// An attestor that needs only `core`, `alloc` and this SDK can leave Rust's standard library
/// out of its component. The component then imports nothing from WASI (the standard library's
/// start-up, stdio and exit imports are 19 of join-token's 44), so the host instantiates it
/// faster for every join. Write, in the crate that builds the component:
///
/// ```ignore
/// #![cfg_attr(target_arch = "wasm32", no_std)]
/// extern crate alloc;
///
/// gatehouse_sdk::export_attestor!(Mine);
/// gatehouse_sdk::no_std_runtime!();
/// ```
///
/// and build it on its own (`cargo build -p <it>`), not beside a component that enables a
/// dependency's `std` feature (cargo unifies features within one build): with the standard
/// library linked, this macro's panic handler is a duplicate (`error[E0152]: found duplicate
/// lang item panic_impl`). Natively the crate keeps `std` (the `cfg_attr` above), so its unit
/// tests and the host's benchmark link it as usual.
///
/// A panic traps at once (`unreachable`), which the host reports as an `attestor-fault`; with
/// no stderr, the panic's message is not logged. The allocator is wasi-libc's `malloc`, as the
/// standard library's is, growing the linear memory the host caps.
#[macro_export]
macro_rules! no_std_runtime {
    () => {
        #[cfg(target_arch = "wasm32")]
        #[panic_handler]
        fn __gatehouse_panic(_: &::core::panic::PanicInfo<'_>) -> ! {
            ::core::arch::wasm32::unreachable()
        }

        #[cfg(target_arch = "wasm32")]
        #[global_allocator]
        static __GATEHOUSE_ALLOCATOR: $crate::__private::LibcMalloc = $crate::__private::LibcMalloc;

        // The canonical ABI's allocation function, which the standard library exports in a
        // component that links it.
        #[cfg(target_arch = "wasm32")]
        #[unsafe(no_mangle)]
        #[allow(unsafe_code)]
        unsafe extern "C" fn cabi_realloc(
            old_ptr: *mut u8,
            old_len: usize,
            align: usize,
            new_len: usize,
        ) -> *mut u8 {
            // SAFETY: the canonical ABI's contract, which the host's lowering keeps.
            unsafe { $crate::__private::cabi_realloc(old_ptr, old_len, align, new_len) }
        }

        // The allocator above is wasi-libc's, and comparing slices compiles to calls of
        // `memcmp`, which `core` leaves to the C library on this target: link wasi-libc (in the
        // toolchain; its allocator and string functions import nothing from WASI).
        #[cfg(target_arch = "wasm32")]
        #[link(name = "c")]
        #[allow(unsafe_code)]
        unsafe extern "C" {}
    };
}
