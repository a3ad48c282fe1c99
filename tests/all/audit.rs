//! The audit trail: the refusal sink (a JSON-lines file, a webhook that is up, one that is
//! down) receives exactly the refusals and never slows a join; the event feed never skips an
//! event whose transaction committed late (Postgres).

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::time::{Duration, Instant};

use gatehouse::config::SinkSection;
use gatehouse::store::{AuditResult, EventRow, NewEvent};
use gatehouse_agent::JoinError;
use gatehouse_proto::TokenString;
use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::common::{Backend, HostOptions, TestHost, backends};

/// The event kinds a join round writes.
const ROUND_EVENTS: &[&str] = &["node.joined", "join.deferred", "security.join.refused"];

async fn join_with(
    host: &TestHost,
    token: &TokenString,
) -> Result<gatehouse_agent::Joined, JoinError> {
    host.join_node_with(token).await.map(|(_, joined)| joined)
}

#[track_caller]
fn denied(r: Result<gatehouse_agent::Joined, JoinError>) {
    match r {
        Err(JoinError::Denied) => {}
        other => panic!("expected ACCESS_DENIED, got {:?}", other.map(|j| j.node_id)),
    }
}

async fn host_with_sink(backend: Backend, sink: SinkSection) -> TestHost {
    let mut opts = HostOptions::new(backend);
    opts.audit_sink = Some(sink);
    TestHost::start_with(opts).await
}

/// A wrong secret, an unknown token and a revoked one: three refused rounds; returns the
/// token ids, in order.
async fn three_refusals(host: &TestHost) -> [String; 3] {
    let good = host.create_token("node", 5).await;
    let wrong_secret = TokenString {
        id: good.id.clone(),
        secret: vec![1; 32],
    };
    denied(join_with(host, &wrong_secret).await);
    let unknown = TokenString {
        id: "tok_doesnotexist".into(),
        secret: vec![1; 32],
    };
    denied(join_with(host, &unknown).await);
    let revoked = host.create_token("node", 1).await;
    host.revoke_token(&revoked.id).await;
    denied(join_with(host, &revoked).await);
    [good.id, unknown.id, revoked.id]
}

/// The lines of a JSON-lines file once it has `n` (waiting up to 10 s), then a moment more to
/// catch any extra one.
async fn lines_of(path: &Path, n: usize) -> Vec<Value> {
    let read = || {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .collect::<Vec<_>>()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while read().len() < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    read()
}

/// One audit row and one round event per round, the refusals' reasons in order.
async fn assert_one_row_and_event_per_round(host: &TestHost, rounds: usize, refused: &[&str]) {
    let audits = host.audits().await;
    assert_eq!(audits.len(), rounds, "one audit row per round: {audits:?}");
    let events: Vec<EventRow> = host
        .events()
        .await
        .into_iter()
        .filter(|e| ROUND_EVENTS.contains(&e.kind.as_str()))
        .collect();
    assert_eq!(events.len(), rounds, "one event per round: {events:?}");
    let audit_reasons: Vec<_> = audits
        .iter()
        .filter(|a| a.result == AuditResult::Refused)
        .filter_map(|a| a.reason.clone())
        .collect();
    assert_eq!(audit_reasons, refused);
    assert_eq!(host.refusal_reasons().await, refused);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jsonl_sink_receives_exactly_the_refusals() {
    for backend in backends() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("refusals.jsonl");
        let host = host_with_sink(backend, SinkSection::Jsonl { path: path.clone() }).await;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600,
            "created 0600 at start"
        );

        // Admissions before and after: nothing for them in the sink.
        let admit = host.create_token("node", 2).await;
        join_with(&host, &admit).await.unwrap();
        let tokens = three_refusals(&host).await;
        join_with(&host, &admit).await.unwrap();

        let lines = lines_of(&path, 3).await;
        let got: Vec<_> = lines
            .iter()
            .map(|l| {
                (
                    l["kind"].as_str().unwrap().to_owned(),
                    l["attestor"].as_str().unwrap().to_owned(),
                    l["reason"].as_str().unwrap().to_owned(),
                    l["tokenId"].as_str().unwrap().to_owned(),
                    l["round"].as_u64().unwrap(),
                )
            })
            .collect();
        let want: Vec<_> = ["bad-secret", "unknown-token", "revoked"]
            .iter()
            .zip(&tokens)
            .map(|(reason, token)| {
                (
                    "security.join.refused".to_owned(),
                    "join-token".to_owned(),
                    (*reason).to_owned(),
                    token.clone(),
                    1,
                )
            })
            .collect();
        assert_eq!(got, want, "{backend:?}: {lines:?}");
        // The copy carries the audit row's time; nothing it does not know.
        let refused_at: Vec<i64> = host
            .audits()
            .await
            .iter()
            .filter(|a| a.result == AuditResult::Refused)
            .map(|a| a.at)
            .collect();
        let sink_at: Vec<i64> = lines.iter().map(|l| l["at"].as_i64().unwrap()).collect();
        assert_eq!(sink_at, refused_at, "{backend:?}");
        assert!(lines.iter().all(|l| l.get("nodeId").is_none()), "{lines:?}");

        assert_one_row_and_event_per_round(&host, 5, &["bad-secret", "unknown-token", "revoked"])
            .await;
        // The feed (the API `events --follow` reads) has them all, each once, in commit order,
        // which on both backends is id order once everything committed.
        let all: Vec<i64> = host.events().await.iter().map(|e| e.id).collect();
        let (mut cursor, mut seen) = (0, Vec::new());
        follow(&host, &mut cursor, &mut seen, all.len()).await;
        let fed: Vec<i64> = seen.iter().map(|(id, _)| *id).collect();
        assert_eq!(fed, all, "{backend:?}");
        let rest: Vec<i64> = feed_page(&host, all[1])
            .await
            .iter()
            .map(|(id, _)| *id)
            .collect();
        assert_eq!(rest, all[2..], "{backend:?}");
        host.stop().await;
    }
}

/// A listener that accepts connections and never answers; they stay open until it is dropped.
async fn black_hole() -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((conn, _)) = listener.accept().await {
            held.push(conn);
        }
    });
    (url, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_that_is_down_slows_no_join_and_loses_no_audit_row() {
    for backend in backends() {
        // One that accepts and never answers, one whose port is closed.
        let (hanging, hole) = black_hole().await;
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            format!("http://{}/hook", l.local_addr().unwrap())
        };
        for url in [hanging, closed] {
            let mut host = host_with_sink(
                backend,
                SinkSection::Webhook {
                    url: url.clone(),
                    timeout_ms: 5_000,
                    ca_file: None,
                },
            )
            .await;
            // Warm up (TLS, the attestor's first instance) with an admission.
            let good = host.create_token("node", 1).await;
            join_with(&host, &good).await.unwrap();
            let unknown = TokenString {
                id: "tok_doesnotexist".into(),
                secret: vec![1; 32],
            };
            for _ in 0..3 {
                let started = Instant::now();
                denied(join_with(&host, &unknown).await);
                let took = started.elapsed();
                assert!(
                    took < Duration::from_secs(1),
                    "{backend:?} {url}: a refused join took {took:?} with the sink down"
                );
            }
            assert_one_row_and_event_per_round(
                &host,
                4,
                &["unknown-token", "unknown-token", "unknown-token"],
            )
            .await;
            // Stopping gives the sink a deadline, not the queue's worth of timeouts.
            let worker = host.running.sink.take().unwrap();
            let started = Instant::now();
            worker.shutdown(Duration::from_millis(300)).await;
            let took = started.elapsed();
            assert!(
                took < Duration::from_secs(2),
                "{backend:?} {url}: shutdown took {took:?}"
            );
            host.stop().await;
        }
        hole.abort();
    }
}

/// A one-request-a-connection HTTP server on loopback that answers 200 and hands over each
/// request's line, content type and body.
async fn webhook_server() -> (
    String,
    tokio::sync::mpsc::UnboundedReceiver<(String, String, Value)>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let head_end = loop {
                    let n = conn.read(&mut chunk).await.unwrap();
                    assert!(n > 0, "connection closed before the headers ended");
                    buf.extend_from_slice(&chunk[..n]);
                    if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        break i + 4;
                    }
                };
                let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
                let header = |name: &str| {
                    head.lines()
                        .find_map(|l| {
                            let (k, v) = l.split_once(':')?;
                            k.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
                        })
                        .unwrap_or_default()
                };
                let length: usize = header("content-length").parse().unwrap();
                while buf.len() < head_end + length {
                    let n = conn.read(&mut chunk).await.unwrap();
                    assert!(n > 0, "connection closed before the body ended");
                    buf.extend_from_slice(&chunk[..n]);
                }
                let body: Value =
                    serde_json::from_slice(&buf[head_end..head_end + length]).unwrap();
                conn.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                )
                .await
                .unwrap();
                let line = head.lines().next().unwrap_or_default().to_owned();
                let _ = tx.send((line, header("content-type"), body));
            });
        }
    });
    (url, rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_that_is_up_receives_each_refusal_once() {
    for backend in backends() {
        let (url, mut requests) = webhook_server().await;
        let host = host_with_sink(
            backend,
            SinkSection::Webhook {
                url,
                timeout_ms: 2_000,
                ca_file: None,
            },
        )
        .await;
        let good = host.create_token("node", 1).await;
        join_with(&host, &good).await.unwrap();
        let wrong_secret = TokenString {
            id: good.id.clone(),
            secret: vec![1; 32],
        };
        denied(join_with(&host, &wrong_secret).await);

        let (line, content_type, body) =
            tokio::time::timeout(Duration::from_secs(10), requests.recv())
                .await
                .expect("the webhook received nothing")
                .unwrap();
        assert_eq!(line, "POST /hook HTTP/1.1");
        assert_eq!(content_type, "application/json");
        let audit = host
            .audits()
            .await
            .into_iter()
            .find(|a| a.result == AuditResult::Refused)
            .unwrap();
        assert_eq!(
            body,
            serde_json::json!({
                "kind": "security.join.refused",
                "attestor": "join-token",
                // The token is used up: a spent token refuses a wrong secret the same way.
                "reason": audit.reason.clone().unwrap(),
                "tokenId": good.id,
                "tenantId": "root",
                "round": 1,
                "at": audit.at,
            }),
            "{backend:?}"
        );
        // Nothing else: the admission sent nothing, the refusal was sent once.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(requests.try_recv().is_err(), "{backend:?}");
        assert_one_row_and_event_per_round(&host, 2, &[audit.reason.as_deref().unwrap()]).await;
        host.stop().await;
    }
}

/// `GET /v1/admin/events?after=…`: (id, kind) of one page.
async fn feed_page(host: &TestHost, after: i64) -> Vec<(i64, String)> {
    let resp = host
        .http()
        .get(format!(
            "{}/v1/admin/events?after={after}&limit=100",
            host.url()
        ))
        .bearer_auth(&host.admin_key)
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{}", resp.status());
    let page: Vec<Value> = resp.json().await.unwrap();
    page.iter()
        .map(|e| {
            (
                e["id"].as_i64().unwrap(),
                e["kind"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Reads pages after `cursor` into `seen` as `gatehouse events --follow` does (moving `cursor`
/// to the last event of each), until `seen` holds `n` events or 10 s have passed. (Any
/// writing transaction open in the cluster, another test's too, holds the feed back a while.)
async fn follow(host: &TestHost, cursor: &mut i64, seen: &mut Vec<(i64, String)>, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let page = feed_page(host, *cursor).await;
        if let Some((id, _)) = page.last() {
            *cursor = *id;
        }
        seen.extend(page);
        if seen.len() >= n || Instant::now() > deadline {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn test_event(kind: &str) -> NewEvent {
    NewEvent {
        at: 0,
        kind: kind.to_owned(),
        tenant_id: None,
        node_id: None,
        attestor: None,
        reason: None,
        token_id: None,
        payload: serde_json::json!({}),
    }
}

/// Two transactions whose events commit out of id order, both ways round: a follower that
/// passes the last id it got never skips one, and sees each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_feed_never_skips_an_event_that_commits_late() {
    if !backends().contains(&Backend::Postgres) {
        eprintln!("skipped: DATABASE_URL is not set");
        return;
    }
    let host = TestHost::start(Backend::Postgres).await;
    let db = &host.running.db;
    let mut seen: Vec<(i64, String)> = Vec::new();
    let mut cursor = 0;

    // 1. The smaller id commits last: `early` takes id n, `late` n+1 and commits first.
    let mut early = db.begin().await.unwrap();
    let early_id = early.insert_event(&test_event("early")).await.unwrap();
    let mut late = db.begin().await.unwrap();
    let late_id = late.insert_event(&test_event("late")).await.unwrap();
    assert!(late_id > early_id);
    late.commit().await.unwrap();
    // `id > last` would hand out `late` now and skip `early` for ever; the feed holds `late`
    // back while the older writer is open.
    follow(&host, &mut cursor, &mut seen, 0).await;
    assert!(seen.is_empty(), "{seen:?}");
    early.commit().await.unwrap();
    follow(&host, &mut cursor, &mut seen, 2).await;
    assert_eq!(
        seen,
        [(early_id, "early".to_owned()), (late_id, "late".to_owned())]
    );

    // 2. The writer that started first takes the larger id and commits first: its event is
    // final at once, and the other one, with a smaller id, still comes after it.
    let mut first = db.begin().await.unwrap();
    let first_a = first.insert_event(&test_event("first-a")).await.unwrap();
    let mut second = db.begin().await.unwrap();
    let second_id = second.insert_event(&test_event("second")).await.unwrap();
    let first_b = first.insert_event(&test_event("first-b")).await.unwrap();
    assert!(first_a < second_id && second_id < first_b);
    first.commit().await.unwrap();
    follow(&host, &mut cursor, &mut seen, 4).await;
    assert_eq!(
        seen[2..],
        [
            (first_a, "first-a".to_owned()),
            (first_b, "first-b".to_owned())
        ]
    );
    assert_eq!(cursor, first_b);
    second.commit().await.unwrap();
    follow(&host, &mut cursor, &mut seen, 5).await;
    assert_eq!(seen[4..], [(second_id, "second".to_owned())]);

    // Nothing twice, nothing more.
    follow(&host, &mut cursor, &mut seen, 0).await;
    assert_eq!(seen.len(), 5, "{seen:?}");
    host.stop().await;
}
