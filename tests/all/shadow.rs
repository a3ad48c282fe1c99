//! Shadow attestors (`[attestors.<id>] shadow_of`): run beside a live attestor on the same
//! requests, their verdicts recorded in the audit, never acted on, never delaying the join, and
//! never reachable by name.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use gatehouse::store::AuditRow;
use gatehouse_agent::{JoinError, TokenProducer};
use gatehouse_proto::Role;

use crate::common::{HostOptions, TestHost, backends};
use crate::sandbox::{Named, join_with, uses_left};

/// The audit rows of shadow `id`, waiting up to `within` for `n` of them.
async fn shadow_rows(host: &TestHost, id: &str, n: usize, within: Duration) -> Vec<AuditRow> {
    let deadline = Instant::now() + within;
    loop {
        let rows: Vec<_> = host
            .audits()
            .await
            .into_iter()
            .filter(|a| a.attestor == id && a.result.as_str().starts_with("shadow-"))
            .collect();
        if rows.len() >= n || Instant::now() > deadline {
            return rows;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_that_admits_never_turns_a_refusal_into_an_admission() {
    for backend in backends() {
        let host = TestHost::start_with(HostOptions {
            attestors: vec![PathBuf::from(gatehouse_test_artifacts::ADMIT_BY_TOKEN_ID)],
            shadows: vec![("admit-by-token-id".into(), "join-token".into(), None)],
            ..HostOptions::new(backend)
        })
        .await;
        // join-token refuses a revoked token; the shadow locks it and spends a use whatever
        // its state, and admits.
        let token = host.create_token("node", 1).await;
        host.revoke_token(&token.id).await;
        let refused = join_with(&host, &mut TokenProducer::new(Role::Node), &token).await;
        assert!(matches!(refused, Err(JoinError::Denied)), "{backend:?}");
        let rows = shadow_rows(&host, "admit-by-token-id", 1, Duration::from_secs(10)).await;
        assert_eq!(rows.len(), 1, "{backend:?}: {rows:?}");
        let shadow = &rows[0];
        assert_eq!(shadow.result.as_str(), "shadow-admitted", "{backend:?}");
        assert_eq!(shadow.token_id.as_deref(), Some(token.id.as_str()));
        let live: Vec<_> = host
            .audits()
            .await
            .into_iter()
            .filter(|a| a.attestor == "join-token")
            .collect();
        assert_eq!(live.len(), 1, "{backend:?}");
        assert_eq!(live[0].result.as_str(), "refused");
        assert_eq!(
            live[0].csr_sha256, shadow.csr_sha256,
            "the rows read side by side"
        );
        // Nothing the shadow did was applied: the use is still there, no node exists, and
        // its verdict raised no event.
        assert_eq!(uses_left(&host, &token).await, 1, "{backend:?}");
        let events = host.events().await;
        assert!(
            !events.iter().any(|e| e.kind == "node.joined"),
            "{backend:?}"
        );
        assert!(
            !events
                .iter()
                .any(|e| e.attestor.as_deref() == Some("admit-by-token-id")),
            "{backend:?}"
        );

        // A request cannot name a shadow.
        let fresh = host.create_token("node", 1).await;
        let named = join_with(&host, &mut Named("admit-by-token-id"), &fresh).await;
        assert!(matches!(named, Err(JoinError::Denied)), "{backend:?}");
        assert_eq!(
            host.refusal_reasons().await.last().map(String::as_str),
            Some("unknown-attestor")
        );
        assert_eq!(uses_left(&host, &fresh).await, 1);
        // And a valid join through the live one is admitted, its shadow agreeing.
        join_with(&host, &mut TokenProducer::new(Role::Node), &fresh)
            .await
            .unwrap();
        let rows = shadow_rows(&host, "admit-by-token-id", 2, Duration::from_secs(10)).await;
        assert_eq!(rows.len(), 2, "{backend:?}: {rows:?}");
        assert_eq!(
            uses_left(&host, &fresh).await,
            0,
            "spent once, by the live round"
        );
        host.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_that_loops_forever_never_delays_the_live_join() {
    let host = TestHost::start_with(HostOptions {
        attestors: vec![PathBuf::from(gatehouse_test_artifacts::LOOP_FOREVER)],
        shadows: vec![("loop-forever".into(), "join-token".into(), None)],
        // A long deadline: the shadow spins for 3 s on each request.
        call_timeout_ms: 3000,
        ..HostOptions::new(crate::common::Backend::Sqlite)
    })
    .await;
    for _ in 0..3 {
        let token = host.create_token("node", 1).await;
        let started = Instant::now();
        join_with(&host, &mut TokenProducer::new(Role::Node), &token)
            .await
            .unwrap();
        let took = started.elapsed();
        assert!(
            took < Duration::from_millis(1500),
            "the live join waited for its shadow: {took:?}"
        );
        assert_eq!(uses_left(&host, &token).await, 0);
    }
    let rows = shadow_rows(&host, "loop-forever", 3, Duration::from_secs(30)).await;
    assert_eq!(rows.len(), 3, "{rows:?}");
    for row in &rows {
        assert_eq!(row.result.as_str(), "shadow-refused");
        assert_eq!(row.reason.as_deref(), Some("attestor-timeout"), "{row:?}");
    }
    let admitted = host
        .audits()
        .await
        .into_iter()
        .filter(|a| a.result.as_str() == "admitted")
        .count();
    assert_eq!(admitted, 3);
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_version_of_a_live_attestor_runs_beside_it_from_its_own_file() {
    // The replacement describes itself `join-token`; as a shadow from its own file it runs
    // under the configured id, and the built-in keeps deciding.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("join-token-next.wasm");
    std::fs::copy(gatehouse_test_artifacts::JOIN_TOKEN_REPLACEMENT, &file).unwrap();
    let host = TestHost::start_with(HostOptions {
        shadows: vec![("join-token-next".into(), "join-token".into(), Some(file))],
        ..HostOptions::new(crate::common::Backend::Sqlite)
    })
    .await;
    // Two uses: a shadow reads what is committed when it reads, so with one use it would see
    // the token spent whenever the live round commits first (`JoinService::shadows`).
    let token = host.create_token("node", 2).await;
    join_with(&host, &mut TokenProducer::new(Role::Node), &token)
        .await
        .unwrap();
    let rows = shadow_rows(&host, "join-token-next", 1, Duration::from_secs(10)).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].result.as_str(), "shadow-admitted", "{:?}", rows[0]);
    assert_eq!(
        uses_left(&host, &token).await,
        1,
        "only the live use was spent"
    );
    assert_eq!(
        rows[0].subject.as_deref(),
        Some(format!("replacement:{}", token.id).as_str())
    );
    let live: Vec<_> = host
        .audits()
        .await
        .into_iter()
        .filter(|a| a.attestor == "join-token")
        .collect();
    assert_eq!(
        live[0].subject.as_deref(),
        Some(format!("token:{}", token.id).as_str()),
        "the built-in decided"
    );
    host.stop().await;
}
