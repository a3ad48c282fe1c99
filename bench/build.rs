//! Builds the benchmark's component (`attestors/bench-tpm-verify`, the tpm checks compiled into
//! wasm) and embeds it: writes `$OUT_DIR/bench_components.rs` with `BENCH_COMPONENTS`,
//! `(package, component bytes)`, which `src/lib.rs` includes. The built-in attestors come from
//! the `gatehouse` library, which embeds them.

use std::fmt::Write as _;

/// Components the benchmark loads beside the built-in attestors.
const BENCH: &[&str] = &["gatehouse-bench-tpm-verify"];

fn main() {
    let built = gatehouse_build_support::build_components(
        std::path::Path::new("../attestors/Cargo.toml"),
        BENCH,
    );
    let mut source = String::from(
        "/// Benchmark-only components: `(package, component)`.\n\
         static BENCH_COMPONENTS: &[(&str, &[u8])] = &[\n",
    );
    for component in &built {
        let path = component.path.to_string_lossy();
        // `{:?}` writes a Rust string literal, escapes included.
        let _ = writeln!(
            source,
            "    ({:?}, include_bytes!({:?})),",
            component.package, path
        );
    }
    source.push_str("];\n");
    let out_dir = std::env::var_os("OUT_DIR").unwrap_or_default();
    let file = std::path::Path::new(&out_dir).join("bench_components.rs");
    if let Err(error) = std::fs::write(&file, source) {
        panic!("writing {}: {error}", file.display());
    }
}
