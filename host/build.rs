//! Builds the built-in attestors into components and embeds them: writes
//! `$OUT_DIR/builtin_attestors.rs` with `BUILTIN_ATTESTORS`, `(package, component bytes)` for
//! each, which `src/app.rs` includes.
//!
//! The nested cargo builds only packages of the components' workspace (`attestors/Cargo.toml`),
//! which depend on the SDK and never on this crate, so building the host does not recurse; one
//! build makes every built-in attestor (the benchmark's component is `bench/`'s to build).

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

fn main() {
    let built = gatehouse_build_support::build_components(
        std::path::Path::new("../attestors/Cargo.toml"),
        BUILTIN,
    );
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
    let out_dir = std::env::var_os("OUT_DIR").unwrap_or_default();
    let file = std::path::Path::new(&out_dir).join("builtin_attestors.rs");
    if let Err(error) = std::fs::write(&file, source) {
        panic!("writing {}: {error}", file.display());
    }
}
