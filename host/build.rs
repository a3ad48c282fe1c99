//! Builds the built-in attestors into components and embeds them: writes
//! `$OUT_DIR/builtin_attestors.rs` with `BUILTIN_ATTESTORS`, `(package, component bytes)` for
//! each, which `src/app.rs` includes.
//!
//! The nested cargo builds only packages of the components' workspace (`attestors/Cargo.toml`),
//! which depend on the SDK and never on this crate, so building the host does not recurse; one
//! build makes every built-in attestor and the benchmark's component.

use std::fmt::Write as _;

/// The attestors built into the host.
const BUILTIN: &[&str] = &[
    "gatehouse-attestor-join-token",
    "gatehouse-attestor-x509pop",
    "gatehouse-attestor-cloud-iid",
    "gatehouse-attestor-tpm",
    "gatehouse-attestor-discovery",
    "gatehouse-attestor-provisioned",
];

/// Components `gatehouse bench` loads beside the built-in attestors, never built in.
const BENCH: &[&str] = &["gatehouse-bench-tpm-verify"];

fn main() {
    let packages: Vec<&str> = BUILTIN.iter().chain(BENCH).copied().collect();
    let all = gatehouse_build_support::build_components(
        std::path::Path::new("../attestors/Cargo.toml"),
        &packages,
    );
    let (bench, built): (Vec<_>, Vec<_>) = all
        .into_iter()
        .partition(|c| BENCH.contains(&c.package.as_str()));
    let mut source = String::from(
        "/// The built-in attestors: `(package, component)`, built from this workspace.\n\
         pub static BUILTIN_ATTESTORS: &[(&str, &[u8])] = &[\n",
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
    source.push_str(
        "/// Benchmark-only components: `(package, component)`.\n\
         pub static BENCH_COMPONENTS: &[(&str, &[u8])] = &[\n",
    );
    for component in &bench {
        let path = component.path.to_string_lossy();
        let _ = writeln!(
            source,
            "    ({:?}, include_bytes!({:?})),",
            component.package, path
        );
    }
    source.push_str("];\n");
    let out_dir = std::env::var_os("OUT_DIR").unwrap_or_default();
    let file = std::path::Path::new(&out_dir).join("builtin_attestors.rs");
    if let Err(error) = std::fs::write(&file, source) {
        panic!("writing {}: {error}", file.display());
    }
}
