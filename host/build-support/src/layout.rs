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

#[cfg(test)]
mod tests {
    use super::outer_target_dir;
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
