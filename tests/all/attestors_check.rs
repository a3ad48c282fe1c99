//! `gatehouse attestors check` and `gatehouse attestors try`: an author's checks of a component
//! before it is deployed, with no host running.

use crate::common::Exit;

/// Runs `gatehouse <args>` in-process: how it ended and what it wrote.
async fn gatehouse(args: &[&str]) -> (Exit, String) {
    use gatehouse::cli::{Cli, NotConfirmed, execute};
    let mut argv = vec!["gatehouse"];
    argv.extend_from_slice(args);
    let parsed = Cli::try_parse_args(argv.iter().copied()).unwrap();
    let mut out = Vec::new();
    let exit = match execute(parsed, &mut out).await {
        Ok(()) => Exit::Ok,
        Err(e) if e.downcast_ref::<NotConfirmed>().is_some() => Exit::NotConfirmed,
        Err(e) => Exit::Failed(format!("{e:#}")),
    };
    (exit, String::from_utf8(out).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_passes_join_token() {
    let (exit, out) = gatehouse(&[
        "attestors",
        "check",
        gatehouse_test_artifacts::JOIN_TOKEN,
        "--cases",
        "60",
    ])
    .await;
    let out = exit.output(out).unwrap_or_else(|e| panic!("{e}"));
    assert!(out.contains("ok   load"), "{out}");
    assert!(out.contains("ok   configure"), "{out}");
    assert!(out.contains("0 admitted, 0 faulted"), "{out}");
    assert!(out.trim_end().ends_with("PASS"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_flags_a_component_that_traps_on_fuzzed_evidence() {
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("failures");
    let saved_arg = saved.display().to_string();
    let (exit, out) = gatehouse(&[
        "attestors",
        "check",
        gatehouse_test_artifacts::PANIC,
        "--json",
        "--save-failures",
        &saved_arg,
    ])
    .await;
    let Exit::Failed(error) = exit else {
        panic!("the panic fixture passed: {out}");
    };
    assert!(error.contains("faulted"), "{error}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["passed"], false);
    assert_eq!(report["stopped_early"], true);
    let failures = report["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 10, "{report}");
    assert!(
        failures
            .iter()
            .all(|f| f["fault"].as_str().unwrap_or_default().contains("trapped")),
        "{report}"
    );
    // Each failure's evidence is saved, to run again with `try`.
    let first = failures[0]["saved_as"].as_str().unwrap();
    assert!(std::path::Path::new(first).exists());
    let (exit, out) = gatehouse(&[
        "attestors",
        "try",
        gatehouse_test_artifacts::PANIC,
        "--evidence",
        first,
    ])
    .await;
    assert!(matches!(exit, Exit::Ok), "{out}");
    assert!(out.contains("\"fault\""), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_refuses_a_component_built_for_another_wit_major() {
    let (exit, out) = gatehouse(&["attestors", "check", gatehouse_test_artifacts::WIT_MAJOR]).await;
    assert!(matches!(exit, Exit::Failed(_)), "{out}");
    assert!(out.contains("FAIL load"), "{out}");
    assert!(out.contains("@1.0.0"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_prints_the_outcome_and_every_transaction_call() {
    let dir = tempfile::tempdir().unwrap();
    let evidence = dir.path().join("evidence");
    std::fs::write(&evidence, "tok_nosuchtoken").unwrap();
    let evidence = evidence.display().to_string();
    let (exit, out) = gatehouse(&[
        "attestors",
        "try",
        gatehouse_test_artifacts::ADMIT_BY_TOKEN_ID,
        "--evidence",
        &evidence,
    ])
    .await;
    let out = exit.output(out).unwrap_or_else(|e| panic!("{e}"));
    assert!(out.contains("transaction calls (1):"), "{out}");
    assert!(
        out.contains("lock-token(\"tok_nosuchtoken\") -> Ok(None)"),
        "{out}"
    );
    assert!(out.contains("unknown-token"), "{out}");
}
