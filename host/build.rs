//! Builds the built-in attestors into components and embeds them: writes
//! `$OUT_DIR/builtin_attestors.rs` with `BUILTIN_ATTESTORS`, `(package, component bytes)` for
//! each, which `src/app.rs` includes.
//!
//! The nested cargo builds only packages of the components' workspace (`attestors/Cargo.toml`),
//! which depend on the SDK and never on this crate, so building the host does not recurse (the
//! benchmark's component is `bench/`'s to build).

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
    gatehouse_build_support::embed_components(
        "builtin_attestors.rs",
        "pub static BUILTIN_ATTESTORS",
        "The built-in attestors: `(package, component)`, built from this workspace.",
        &built,
    );
}
