//! `gatehouse bench`: runs the `gatehouse-bench` binary (the `bench/` crate) with the same
//! arguments. The benchmark is a binary of its own so this one, the production host, links
//! neither the guest crates it calls natively nor its component; the command operators and
//! scripts type stays `gatehouse bench`.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::Args;

/// The benchmark's binary.
const BINARY: &str = "gatehouse-bench";

/// `gatehouse bench [ARGS…]`.
#[derive(Debug, Args)]
pub(super) struct BenchArgs {
    /// What `gatehouse-bench` takes (`--json`, `--joins`, `--agents`, `--calls`, `--nodes`;
    /// `gatehouse bench --help` is gatehouse-bench's help).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<OsString>,
}

/// Why `gatehouse bench` did not measure.
#[derive(Debug, thiserror::Error)]
pub(super) enum BenchError {
    /// Neither beside this binary nor on `PATH`.
    #[error(
        "{BINARY} is not installed beside {beside} nor on PATH: build it with `cargo build --release -p gatehouse-bench`"
    )]
    NotFound {
        /// The directory searched first.
        beside: String,
    },
    /// It could not be started.
    #[error("starting {path}: {source}")]
    Start {
        /// What was run.
        path: String,
        /// Why not.
        source: std::io::Error,
    },
    /// It ran and failed (its own message is on stderr).
    #[error("{BINARY} failed ({status})")]
    Failed {
        /// Its exit status.
        status: std::process::ExitStatus,
    },
}

pub(super) async fn run(args: BenchArgs) -> Result<(), BenchError> {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join(BINARY)));
    let program = match &beside {
        Some(path) if path.is_file() => path.clone(),
        // `Command` looks a bare name up on PATH.
        _ => PathBuf::from(BINARY),
    };
    let status = tokio::process::Command::new(&program)
        .args(&args.args)
        .status()
        .await
        .map_err(|source| match source.kind() {
            std::io::ErrorKind::NotFound => BenchError::NotFound {
                beside: beside
                    .as_ref()
                    .and_then(|p| p.parent())
                    .map_or_else(|| "this binary".into(), |d| d.display().to_string()),
            },
            _ => BenchError::Start {
                path: program.display().to_string(),
                source,
            },
        })?;
    if status.success() {
        Ok(())
    } else {
        Err(BenchError::Failed { status })
    }
}
