//! `gatehouse bench` runs the `gatehouse-bench` binary beside it (or on PATH) with the same
//! arguments and fails with its status; without one, it says how to build it.

use std::path::Path;
use std::process::Command;

/// A directory holding this build's `gatehouse` binary (hard-linked, or copied across
/// filesystems): `current_exe` then names this directory, as in an installation.
fn install_gatehouse(dir: &Path) -> std::path::PathBuf {
    let to = dir.join("gatehouse");
    let from = env!("CARGO_BIN_EXE_gatehouse");
    if std::fs::hard_link(from, &to).is_err() {
        std::fs::copy(from, &to).unwrap_or_else(|e| panic!("copying {from}: {e}"));
    }
    to
}

#[test]
fn bench_runs_the_binary_beside_it_with_the_same_arguments() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let gatehouse = install_gatehouse(dir.path());
    let bench = dir.path().join("gatehouse-bench");
    std::fs::write(&bench, "#!/bin/sh\necho \"args: $*\"\nexit 3\n").unwrap();
    std::fs::set_permissions(&bench, std::fs::Permissions::from_mode(0o755)).unwrap();

    let out = Command::new(&gatehouse)
        .args(["bench", "--json", "--nodes", "5", "--help"])
        .env("PATH", "")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stdout, "args: --json --nodes 5 --help\n", "{stderr}");
    assert!(!out.status.success());
    assert!(stderr.contains("gatehouse-bench failed"), "{stderr}");
}

#[test]
fn bench_without_the_binary_says_how_to_build_it() {
    let dir = tempfile::tempdir().unwrap();
    let gatehouse = install_gatehouse(dir.path());
    let out = Command::new(&gatehouse)
        .args(["bench", "--json"])
        .env("PATH", "")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("cargo build --release -p gatehouse-bench"),
        "{stderr}"
    );
}
