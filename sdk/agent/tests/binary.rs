//! The `gatehouse-agent` executable as a machine runs it, in the build this test is compiled
//! with (`cargo test -p gatehouse-agent` for the TPM build, `--no-default-features` for the
//! build without TPM support): `--version` and the libraries it links name the build, and a
//! build without TPM support refuses every TPM option with exit code 2 and the reason, before
//! it reads or writes anything.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

const AGENT: &str = env!("CARGO_BIN_EXE_gatehouse-agent");

/// Runs the agent with `args`, logging only errors.
fn agent(args: &[&str]) -> Output {
    Command::new(AGENT)
        .args(args)
        .env("GATEHOUSE_AGENT_LOG", "error")
        .output()
        .unwrap()
}

#[test]
fn the_version_names_the_build() {
    let out = agent(&["--version"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let expected = if cfg!(feature = "tpm") {
        "(with TPM support)"
    } else {
        "(without TPM support)"
    };
    assert!(text.starts_with("gatehouse-agent "), "{text}");
    assert!(text.trim_end().ends_with(expected), "{text}");
}

/// The point of the build without TPM support: a token, cloud or provisioned join on a machine
/// without the TSS libraries, or OpenSSL (which they bring; the agent's TLS and crypto are
/// rustls and aws-lc, linked in).
#[test]
fn only_the_tpm_build_links_libtss2() {
    let out = Command::new("ldd").arg(AGENT).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "ldd: {text}");
    assert!(text.contains("libc.so"), "{text}");
    assert_eq!(text.contains("libtss2"), cfg!(feature = "tpm"), "{text}");
    if !cfg!(feature = "tpm") {
        assert!(
            !text.contains("libcrypto") && !text.contains("libssl"),
            "{text}"
        );
    }
}

#[cfg(not(feature = "tpm"))]
#[test]
fn a_build_without_tpm_support_refuses_every_tpm_option() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let socket = dir.path().join("helper.sock");
    let socket = socket.to_str().unwrap();
    let server = "https://127.0.0.1:1";
    let join = |extra: &[&str]| -> Vec<String> {
        [
            "join",
            "--server",
            server,
            "--ca",
            "absent.json",
            "--out",
            d,
        ]
        .iter()
        .chain(extra)
        .map(|s| (*s).to_owned())
        .collect()
    };
    let run = |extra: &[&str]| -> Vec<String> {
        ["run", "--server", server, "--ca", "absent.json", "--dir", d]
            .iter()
            .chain(extra)
            .map(|s| (*s).to_owned())
            .collect()
    };
    let other = |args: &[&str]| -> Vec<String> { args.iter().map(|s| (*s).to_owned()).collect() };
    let cases = [
        join(&["--attestor", "tpm"]),
        join(&["--attestor", "tpm", "--reset", "--yes"]),
        join(&["--token-file", "absent", "--tpm", "swtpm:port=2321"]),
        run(&["--helper", "/run/gatehouse-agent/helper.sock"]),
        run(&["--tpm", "device:/dev/tpmrm0"]),
        other(&["doctor", "--dir", d, "--tpm", "device:/dev/tpmrm0"]),
        other(&["doctor", "--dir", d, "--helper", socket]),
        other(&["helper", "--socket", socket]),
    ];
    for args in &cases {
        let out = Command::new(AGENT)
            .args(args)
            .env("GATEHOUSE_AGENT_LOG", "error")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("gatehouse-agent: this agent was built without TPM support"),
            "{args:?}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    // Nothing was read, moved or bound: the directory is as it was.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);

    // `--tpm none` asks for no TPM: the run goes on (to the missing trust file).
    let args = run(&["--tpm", "none"]);
    let out = agent(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("absent.json"), "{stderr}");
    assert!(!stderr.contains("TPM support"), "{stderr}");
}
