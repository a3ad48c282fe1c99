//! Builds workspace packages into WebAssembly components from a build script.
//!
//! The host embeds the built-in attestors and the integration tests load fixture components,
//! so their build scripts need `.wasm` files built from this workspace's sources.
//! [`build_components`] runs one nested `cargo build --target wasm32-wasip2 --profile component`
//! over the root workspace (wasip2 output is already a component: no adapter), then copies
//! each component into the calling build script's `OUT_DIR` and prints the
//! `cargo:rerun-if-changed` lines that make the build script run again when a source changes.
//!
//! The nested cargo uses its own target directory, `<outer target dir>/components`: sharing
//! the outer one would deadlock on its lock, and one directory for every caller means the host
//! and the tests share one wasm build. It runs without the outer build's `RUSTFLAGS` and
//! `rustc` wrappers (they are for the host target, and a wrapper such as clippy-driver must not
//! see the wasm build), and with the outer cargo's jobserver, so it uses no more cores than
//! the outer build was given.
//!
//! Building a package must not recurse into the caller: only components (which depend on the
//! SDK, never on the host or the tests) may be built this way.
//!
//! ```no_run
//! // build.rs
//! let built = gatehouse_build_support::build_components(&["gatehouse-attestor-join-token"]);
//! for component in &built {
//!     println!("{} at {}", component.package, component.path.display());
//! }
//! ```

mod cargo;
mod depfile;
mod error;
mod layout;

use std::path::{Path, PathBuf};

pub use error::BuildError;

/// The target components are built for.
pub const TARGET: &str = "wasm32-wasip2";

/// The cargo profile components are built with (`[profile.component]` in the root
/// `Cargo.toml`).
pub const PROFILE: &str = "component";

/// A component built from a workspace package.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Built {
    /// The package it was built from (for example `gatehouse-attestor-join-token`).
    pub package: String,
    /// The component: an absolute path to a copy in the calling build script's `OUT_DIR`,
    /// which later nested builds do not overwrite.
    pub path: PathBuf,
}

/// Builds `packages` (workspace packages with a `cdylib` target) into components with one
/// nested cargo in `<outer target dir>/components`, in the order given. Meant for build
/// scripts: it panics with the reason when the build fails, including when the
/// `wasm32-wasip2` target is not installed.
pub fn build_components(packages: &[&str]) -> Vec<Built> {
    build_components_in("components", packages)
}

/// [`build_components`] in `<outer target dir>/<dir>`, a target directory of its own.
///
/// Use it for a component that depends on another component's crate with different features:
/// a `cdylib` dependency is built (and its `.wasm` written) under a name without a hash, so
/// two feature sets of one crate in one target directory overwrite each other's component.
pub fn build_components_in(dir: &str, packages: &[&str]) -> Vec<Built> {
    match try_build_components_in(dir, packages) {
        Ok(built) => built,
        Err(error) => panic!("building components {packages:?}: {error}"),
    }
}

/// [`build_components_in`], returning the error instead of panicking.
pub fn try_build_components_in(dir: &str, packages: &[&str]) -> Result<Vec<Built>, BuildError> {
    let out_dir = PathBuf::from(layout::env("OUT_DIR")?);
    let manifest_dir = PathBuf::from(layout::env("CARGO_MANIFEST_DIR")?);
    let cargo = layout::env("CARGO")?;
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());

    cargo::check_target_installed(&rustc)?;
    let workspace = cargo::workspace_manifest(&cargo, &manifest_dir)?;
    let target_dir = layout::outer_target_dir(&out_dir)?.join(dir);

    let artifacts = cargo::build(&cargo, &workspace, &target_dir, packages)?;

    println!("cargo:rerun-if-changed={}", workspace.display());
    if let Some(root) = workspace.parent() {
        println!(
            "cargo:rerun-if-changed={}",
            root.join("Cargo.lock").display()
        );
        println!("cargo:rerun-if-changed={}", root.join("wit").display());
    }
    let root = workspace.parent().unwrap_or(Path::new("/"));
    let copies = out_dir.join("components");
    std::fs::create_dir_all(&copies).map_err(|source| BuildError::io(&copies, source))?;
    artifacts
        .into_iter()
        .map(|artifact| {
            println!("cargo:rerun-if-changed={}", artifact.manifest.display());
            let deps = read_depfile(&artifact.wasm)?;
            for dep in &deps {
                println!("cargo:rerun-if-changed={}", dep.display());
            }
            // The `.d` file lists sources only; a path dependency's manifest (its features and
            // dependencies) matters too.
            for manifest in depfile::manifests(&deps, root) {
                println!("cargo:rerun-if-changed={}", manifest.display());
            }
            let path = copies.join(format!("{}.wasm", artifact.package));
            std::fs::copy(&artifact.wasm, &path).map_err(|source| BuildError::io(&path, source))?;
            Ok(Built {
                package: artifact.package,
                path,
            })
        })
        .collect()
}

/// The sources a component was built from, from the `.d` file cargo writes beside it.
fn read_depfile(wasm: &Path) -> Result<Vec<PathBuf>, BuildError> {
    let path = wasm.with_extension("d");
    let text = std::fs::read_to_string(&path).map_err(|source| BuildError::io(&path, source))?;
    Ok(depfile::dependencies(&text))
}
