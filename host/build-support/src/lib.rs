//! Builds the components' workspace (and other workspaces of guest code) from a build script.
//!
//! The host embeds the built-in attestors and the integration tests load fixture components,
//! so their build scripts need `.wasm` files built from this repository's sources. Components
//! live in workspaces of their own, outside the root one (`attestors/Cargo.toml`: the
//! attestors, the test fixtures and the benchmark component; `examples/attestor`: the
//! third-party example), so a component crate never shares a feature set with the host's build.
//! [`build_components`] runs a nested
//! `cargo build --target wasm32-wasip2 --profile component -p <package>` in such a workspace for
//! each package (wasip2 output is already a component: no adapter; one build a package, so
//! each component gets its own dependencies' features), then copies each component into the calling
//! build script's `OUT_DIR` and prints the `cargo:rerun-if-changed` lines that make the build
//! script run again when a source changes. [`build_binaries`] does the same for native
//! executables (the example's agent-side producer). [`embed_components`] writes the table of
//! built components a crate includes to embed them (the host's built-ins, the benchmark's).
//!
//! The nested cargo uses a target directory of its own for each workspace,
//! `<outer target dir>/components/<workspace>`: sharing the outer one would deadlock on its
//! lock, one directory per workspace (not per caller) means the host and the tests share one
//! wasm build of each workspace, and not one for all keeps the workspaces' lockfiles apart. It runs without the outer build's
//! `RUSTFLAGS` and `rustc` wrappers (they are for the host target, and a wrapper such as
//! clippy-driver must not see the wasm build), and with the outer cargo's jobserver, so it uses
//! no more cores than the outer build was given.
//!
//! Building a package must not recurse into the caller: only guest code (which depends on the
//! SDK, never on the host or the tests) may be built this way.
//!
//! ```no_run
//! // build.rs
//! let workspace = std::path::Path::new("../attestors/Cargo.toml");
//! let built = gatehouse_build_support::build_components(workspace, &["gatehouse-attestor-join-token"]);
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

/// A component (or binary) built from a workspace package.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Built {
    /// The package it was built from (for example `gatehouse-attestor-join-token`).
    pub package: String,
    /// The artifact: an absolute path to a copy in the calling build script's `OUT_DIR`,
    /// which later nested builds do not overwrite.
    pub path: PathBuf,
}

/// Builds `packages` (packages of the workspace whose root manifest is `workspace`, relative
/// to the calling package's directory, each with a `cdylib` target) into components, a nested
/// cargo build each in `<outer target dir>/components`, in the order given. Meant for build
/// scripts: it panics with the reason when the build fails, including when the
/// `wasm32-wasip2` target is not installed.
pub fn build_components(workspace: &Path, packages: &[&str]) -> Vec<Built> {
    match try_build(workspace, Kind::Component, packages) {
        Ok(built) => built,
        Err(error) => panic!("building components {packages:?}: {error}"),
    }
}

/// Builds the binary target named after each of `packages` natively (the dev profile), as
/// [`build_components`] builds components. Keep such packages small: they are a second native
/// build of whatever they depend on.
pub fn build_binaries(workspace: &Path, packages: &[&str]) -> Vec<Built> {
    match try_build(workspace, Kind::Binary, packages) {
        Ok(built) => built,
        Err(error) => panic!("building binaries {packages:?}: {error}"),
    }
}

/// Writes `$OUT_DIR/<file>` for the calling crate to `include!`: the item `declaration` (for
/// example `pub static BUILTIN_ATTESTORS`) of type `&[(&str, &[u8])]`, documented by `doc`,
/// holding each of `built` as `(package, include_bytes!(its path))`. Meant for build scripts:
/// it panics with the reason when the file cannot be written.
pub fn embed_components(file: &str, declaration: &str, doc: &str, built: &[Built]) {
    use std::fmt::Write as _;
    let mut source = format!("/// {doc}\n{declaration}: &[(&str, &[u8])] = &[\n");
    for component in built {
        // `{:?}` writes a Rust string literal, escapes included.
        let _ = writeln!(
            source,
            "    ({:?}, include_bytes!({:?})),",
            component.package,
            component.path.to_string_lossy()
        );
    }
    source.push_str("];\n");
    let path = Path::new(&std::env::var_os("OUT_DIR").unwrap_or_default()).join(file);
    if let Err(error) = std::fs::write(&path, source) {
        panic!("writing {}: {error}", path.display());
    }
}

/// What a nested build makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `cdylib`s for wasm32-wasip2, profile `component`.
    Component,
    /// Binaries for the host, profile `dev`.
    Binary,
}

/// [`build_components`] or [`build_binaries`], returning the error instead of panicking.
fn try_build(workspace: &Path, kind: Kind, packages: &[&str]) -> Result<Vec<Built>, BuildError> {
    let out_dir = PathBuf::from(layout::env("OUT_DIR")?);
    let manifest_dir = PathBuf::from(layout::env("CARGO_MANIFEST_DIR")?);
    let cargo = layout::env("CARGO")?;
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());

    if kind == Kind::Component {
        cargo::check_target_installed(&rustc)?;
    }
    let workspace = normalize(&manifest_dir.join(workspace));
    // The sources of path dependencies outside the workspace (the SDK, its WIT) are in the
    // `.d` files; their manifests are found below the repository root.
    let root = manifest_dir
        .ancestors()
        .find(|dir| dir.join(".git").exists())
        .unwrap_or(Path::new("/"))
        .to_owned();
    let target_dir =
        layout::workspace_target_dir(&layout::outer_target_dir(&out_dir)?, &root, &workspace);

    let artifacts = cargo::build(&cargo, &workspace, &target_dir, kind, packages)?;

    println!("cargo:rerun-if-changed={}", workspace.display());
    if let Some(root) = workspace.parent() {
        println!(
            "cargo:rerun-if-changed={}",
            root.join("Cargo.lock").display()
        );
    }
    let copies = out_dir.join(match kind {
        Kind::Component => "components",
        Kind::Binary => "binaries",
    });
    std::fs::create_dir_all(&copies).map_err(|source| BuildError::io(&copies, source))?;
    artifacts
        .into_iter()
        .map(|artifact| {
            println!("cargo:rerun-if-changed={}", artifact.manifest.display());
            // The package's directory, which cargo scans whole: a file the `.d` file does not
            // list yet changes the build too (a new `build.rs`, which sets link arguments).
            // Not when the package is its workspace's root (`examples/attestor`): that
            // directory holds the `target/` a build in place writes, whose every build would
            // then rerun this one.
            if let Some(package_dir) = artifact.manifest.parent()
                && Some(package_dir) != workspace.parent()
            {
                println!("cargo:rerun-if-changed={}", package_dir.display());
            }
            let deps = read_depfile(&artifact.file)?;
            for dep in &deps {
                println!("cargo:rerun-if-changed={}", dep.display());
            }
            // The `.d` file lists sources only; a path dependency's manifest (its features and
            // dependencies) matters too.
            for manifest in depfile::manifests(&deps, &root) {
                println!("cargo:rerun-if-changed={}", manifest.display());
            }
            let name = match kind {
                Kind::Component => format!("{}.wasm", artifact.package),
                Kind::Binary => artifact.package.clone(),
            };
            let path = copies.join(name);
            std::fs::copy(&artifact.file, &path).map_err(|source| BuildError::io(&path, source))?;
            Ok(Built {
                package: artifact.package,
                path,
            })
        })
        .collect()
}

/// `path` with its `.` and `..` components resolved lexically (`host/../attestors` is
/// `attestors`), so that one workspace has one name whichever package's build script asks.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// The sources an artifact was built from, from the `.d` file cargo writes beside it.
fn read_depfile(file: &Path) -> Result<Vec<PathBuf>, BuildError> {
    let path = file.with_extension("d");
    let text = std::fs::read_to_string(&path).map_err(|source| BuildError::io(&path, source))?;
    Ok(depfile::dependencies(&text))
}
