//! Why a component build failed.

use std::path::{Path, PathBuf};

/// Why a nested build ([`build_components`](crate::build_components),
/// [`build_binaries`](crate::build_binaries)) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// An environment variable cargo sets for build scripts is missing: not called from one.
    #[error("{0} is not set; build components from a build script")]
    NotBuildScript(&'static str),
    /// `OUT_DIR` is not inside a cargo target directory (`<target>/<profile>/build/<pkg>/out`).
    #[error("OUT_DIR {} is not inside a cargo target directory", .0.display())]
    UnexpectedOutDir(PathBuf),
    /// The `wasm32-wasip2` standard library is not installed for this toolchain.
    #[error(
        "the wasm32-wasip2 target is not installed (no {}); run `rustup target add wasm32-wasip2`",
        .0.display()
    )]
    TargetMissing(PathBuf),
    /// A command could not be started.
    #[error("cannot run {command}: {source}")]
    Spawn {
        /// The program.
        command: String,
        /// Why it did not start.
        source: std::io::Error,
    },
    /// A command ran and failed; its diagnostics went to the build script's stderr.
    #[error("{command} failed ({status}){detail}")]
    Failed {
        /// What ran.
        command: String,
        /// How it exited.
        status: std::process::ExitStatus,
        /// Its error output, when it was captured.
        detail: String,
    },
    /// Cargo's output did not parse.
    #[error("unexpected output from {command}: {detail}")]
    Output {
        /// What ran.
        command: String,
        /// What was wrong.
        detail: String,
    },
    /// The build succeeded but produced no component for a requested package.
    #[error(
        "cargo built nothing for package {0} (a component needs a cdylib lib target, a binary a bin target named after the package)"
    )]
    NoComponent(String),
    /// Reading or copying a file failed.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
}

impl BuildError {
    /// An I/O failure on `path`.
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        BuildError::Io {
            path: path.to_owned(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::BuildError;
    use std::path::PathBuf;

    #[test]
    fn messages_say_what_to_do() {
        assert_eq!(
            BuildError::NotBuildScript("OUT_DIR").to_string(),
            "OUT_DIR is not set; build components from a build script"
        );
        assert_eq!(
            BuildError::UnexpectedOutDir(PathBuf::from("/tmp/out")).to_string(),
            "OUT_DIR /tmp/out is not inside a cargo target directory"
        );
        assert_eq!(
            BuildError::TargetMissing(PathBuf::from("/sysroot/lib")).to_string(),
            "the wasm32-wasip2 target is not installed (no /sysroot/lib); \
             run `rustup target add wasm32-wasip2`"
        );
        assert_eq!(
            BuildError::NoComponent("gatehouse-x".into()).to_string(),
            "cargo built nothing for package gatehouse-x (a component needs a cdylib lib \
             target, a binary a bin target named after the package)"
        );
        assert_eq!(
            BuildError::Output {
                command: "cargo build".into(),
                detail: "bad json".into()
            }
            .to_string(),
            "unexpected output from cargo build: bad json"
        );
        let io = BuildError::io(
            &PathBuf::from("/x.wasm"),
            std::io::Error::new(std::io::ErrorKind::NotFound, "gone"),
        );
        assert_eq!(io.to_string(), "/x.wasm: gone");
        let spawn = BuildError::Spawn {
            command: "cargo".into(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
        };
        assert_eq!(spawn.to_string(), "cannot run cargo: no such file");
    }

    #[cfg(unix)]
    #[test]
    fn failure_names_the_command_and_status() {
        use std::os::unix::process::ExitStatusExt as _;
        let failed = BuildError::Failed {
            command: "cargo build".into(),
            status: std::process::ExitStatus::from_raw(101 << 8),
            detail: String::new(),
        };
        assert_eq!(failed.to_string(), "cargo build failed (exit status: 101)");
    }
}
