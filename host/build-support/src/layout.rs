//! Where things are: the build script's environment and the outer target directory.

use std::path::{Path, PathBuf};

use crate::BuildError;

/// An environment variable cargo sets for build scripts.
pub(crate) fn env(name: &'static str) -> Result<String, BuildError> {
    std::env::var(name).map_err(|_| BuildError::NotBuildScript(name))
}

/// The outer target directory (or `<target dir>/<triple>` under `--target`), from `OUT_DIR`
/// (`<dir>/<profile>/build/<package>-<hash>/out`). A custom `build-dir` has the same shape.
pub(crate) fn outer_target_dir(out_dir: &Path) -> Result<PathBuf, BuildError> {
    out_dir
        .ancestors()
        .find(|dir| dir.file_name().is_some_and(|name| name == "build"))
        .and_then(Path::parent)
        .and_then(Path::parent)
        .map(Path::to_owned)
        .ok_or_else(|| BuildError::UnexpectedOutDir(out_dir.to_owned()))
}

/// The nested target directory of the workspace whose manifest is `manifest` (below `root`,
/// the repository): `<outer>/components/<its directory, '/' as '-'>`, e.g.
/// `components/examples-attestor`. Each guest workspace has its own `Cargo.lock`; two of them
/// building one crate (the SDK) into one directory can leave two artifacts of that crate
/// side by side, and rustc may then link the one the other lockfile built.
pub(crate) fn workspace_target_dir(outer: &Path, root: &Path, manifest: &Path) -> PathBuf {
    let dir = manifest.parent().unwrap_or(manifest);
    let relative = dir.strip_prefix(root).unwrap_or(dir);
    let name: Vec<String> = relative
        .components()
        .filter_map(|part| match part {
            std::path::Component::Normal(name) => Some(name.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    outer.join("components").join(name.join("-"))
}

#[cfg(test)]
mod tests {
    use super::{outer_target_dir, workspace_target_dir};

    #[test]
    fn each_workspace_has_its_own_nested_target_dir() {
        let outer = Path::new("/w/target");
        let root = Path::new("/w");
        assert_eq!(
            workspace_target_dir(outer, root, Path::new("/w/attestors/Cargo.toml")),
            Path::new("/w/target/components/attestors")
        );
        assert_eq!(
            workspace_target_dir(outer, root, Path::new("/w/examples/attestor/Cargo.toml")),
            Path::new("/w/target/components/examples-attestor")
        );
    }
    use std::path::Path;

    #[test]
    fn finds_the_target_dir_above_the_profile() {
        let out = Path::new("/w/target/debug/build/gatehouse-0123/out");
        assert_eq!(outer_target_dir(out).unwrap(), Path::new("/w/target"));
        let cross = Path::new("/w/target/x86_64-unknown-linux-gnu/release/build/g-1/out");
        assert_eq!(
            outer_target_dir(cross).unwrap(),
            Path::new("/w/target/x86_64-unknown-linux-gnu")
        );
    }

    #[test]
    fn refuses_an_out_dir_outside_a_target_dir() {
        assert!(outer_target_dir(Path::new("/tmp/out")).is_err());
        assert!(outer_target_dir(Path::new("/build/out")).is_err());
    }
}
