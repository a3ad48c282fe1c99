//! The join's transaction mechanics: an attestor runs outside the write lock with its writes
//! buffered, its writes are capped per call (deferral rounds included), and a slow or hostile
//! attestor delays only the joins through itself (rule 13): past its share of concurrent
//! calls a join through it is answered 503 retryable, recorded as refused `attestor-busy`.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use gatehouse_agent::{
    JoinClient, JoinError, JoinOptions, NodeKey, TokenProducer, build_csr, join,
};
use gatehouse_proto::{Claims, JoinRequest, JoinTrust, Role, TokenString};

use crate::common::{Backend, HostOptions, TestHost, backends};

/// One round of a join through `kv-flood` for `csr`.
fn flood_round(csr: &[u8], round: u8) -> JoinRequest {
    JoinRequest {
        attestor: "kv-flood".into(),
        role: Role::Node,
        sealed_token: None,
        attestation: vec![],
        csr: csr.to_vec(),
        claims: Claims::default(),
        round,
    }
}

/// The values of `kv-flood`'s space under the keys the fixture writes in rounds 1 and 2.
async fn flood_rows(host: &TestHost, puts: u32) -> usize {
    let mut tx = host.running.db.begin().await.unwrap();
    let mut found = 0;
    for round in 1..=2 {
        for i in 0..puts {
            if tx
                .kv_get("kv-flood", &format!("r{round}-{i}"))
                .await
                .unwrap()
                .is_some()
            {
                found += 1;
            }
        }
    }
    tx.commit().await.unwrap();
    found
}

async fn flood_host(backend: Backend, config: serde_json::Value) -> TestHost {
    TestHost::start_with(HostOptions {
        attestors: vec![PathBuf::from(gatehouse_test_artifacts::KV_FLOOD)],
        attestor_config: vec![("kv-flood".into(), config)],
        // A generous deadline: the refusal must be the write limit's, not a deadline's on a
        // busy machine.
        call_timeout_ms: 5000,
        ..HostOptions::new(backend)
    })
    .await
}

/// Rule 15: an attestor that writes 40 values of 8 KiB in each of two deferred rounds (no
/// token needed; past both the count and the byte limit) is refused `write-limit` in both, and its key/value space stays empty. The
/// same attestor within the limits defers and its rows are applied: the limit, not a host
/// that drops a deferral's writes, is what refused.
async fn kv_writes_are_capped(backend: Backend) {
    let host = flood_host(backend, serde_json::json!({"puts": 40, "bytes": 8192})).await;
    let client = JoinClient::new(&host.url(), &host.trust).unwrap();
    let csr = build_csr(&NodeKey::generate().unwrap()).unwrap();
    for round in 1..=2 {
        let answer = client.send(&flood_round(&csr, round)).await;
        assert!(
            matches!(answer, Err(JoinError::Denied)),
            "{backend:?} round {round}: {:?}",
            answer.map(|_| ())
        );
    }
    assert_eq!(
        host.refusal_reasons().await,
        ["write-limit", "write-limit"],
        "{backend:?}"
    );
    assert_eq!(
        flood_rows(&host, 40).await,
        0,
        "{backend:?}: a refused round wrote"
    );
    host.stop().await;

    let host = flood_host(backend, serde_json::json!({"puts": 2, "bytes": 16})).await;
    let client = JoinClient::new(&host.url(), &host.trust).unwrap();
    let csr = build_csr(&NodeKey::generate().unwrap()).unwrap();
    for round in 1..=2 {
        client.send(&flood_round(&csr, round)).await.unwrap();
    }
    assert_eq!(
        flood_rows(&host, 2).await,
        4,
        "{backend:?}: a deferral's rows"
    );
    assert!(host.refusal_reasons().await.is_empty(), "{backend:?}");
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn transactions_kv_writes_past_the_limits_are_refused_in_every_round_and_leave_nothing()
 {
    for backend in backends() {
        kv_writes_are_capped(backend).await;
    }
}

/// The 99th percentile of `samples` (the largest of 20).
fn p99(samples: &mut [Duration]) -> Duration {
    samples.sort();
    let at = (samples.len() * 99).div_ceil(100).saturating_sub(1);
    samples[at]
}

/// `n` token joins at once, each with its own one-use token; their latencies. Every one must
/// succeed.
async fn token_joins(host: &TestHost, n: usize) -> Vec<Duration> {
    let mut tokens: Vec<TokenString> = Vec::with_capacity(n);
    for _ in 0..n {
        tokens.push(host.create_token("node", 1).await);
    }
    let mut joins = tokio::task::JoinSet::new();
    for token in tokens {
        let (url, trust) = (host.url(), host.trust.clone());
        joins.spawn(async move {
            let key = NodeKey::generate().unwrap();
            let started = Instant::now();
            let client = JoinClient::new(&url, &trust).unwrap();
            let joined = join(
                &client,
                &trust,
                &mut TokenProducer::new(Role::Node),
                Some(&token),
                &key,
                &JoinOptions::default(),
            )
            .await;
            (joined.map(|j| j.node_id), started.elapsed())
        });
    }
    let mut took = Vec::with_capacity(n);
    let mut failed = Vec::new();
    while let Some(done) = joins.join_next().await {
        let (joined, elapsed) = done.unwrap();
        match joined {
            Ok(_) => took.push(elapsed),
            Err(e) => failed.push(e),
        }
    }
    if !failed.is_empty() {
        panic!(
            "{} token joins failed ({failed:?}); refusals: {:?}",
            failed.len(),
            host.refusal_reasons().await
        );
    }
    took
}

/// `n` clients sending join rounds through `attestor` in a loop until `stop`; each counts its
/// answers: a refusal (the call ran past its deadline) or 503 retryable (no call slot came
/// free, `attestor-busy`), never an admission. One round per answer, so each is one audit row.
fn hostile(
    url: String,
    trust: JoinTrust,
    attestor: &'static str,
    n: usize,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU32>,
) -> tokio::task::JoinSet<()> {
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..n {
        let (url, trust, stop, sent) = (url.clone(), trust.clone(), stop.clone(), sent.clone());
        set.spawn(async move {
            let client = JoinClient::new(&url, &trust).unwrap();
            let key = NodeKey::generate().unwrap();
            let request = JoinRequest {
                attestor: attestor.into(),
                role: Role::Node,
                sealed_token: None,
                attestation: vec![],
                csr: build_csr(&key).unwrap(),
                claims: Claims::default(),
                round: 1,
            };
            while !stop.load(Ordering::Relaxed) {
                let answer = client.send(&request).await;
                assert!(
                    matches!(
                        answer,
                        Err(JoinError::Denied) | Err(JoinError::Host { status: 503, .. })
                    ),
                    "{attestor}: {answer:?}"
                );
                sent.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    set
}

const TOKEN_JOINS: usize = 20;
const HOSTILE_JOINS: usize = 32;

/// Rule 13 under load: 20 concurrent token joins, alone and then beside 32 joins in flight
/// through a looping attestor, and through a memory-hungry one. Every token join succeeds and
/// the hostile rounds are refused `attestor-fault` (the calls that ran) or answered 503
/// retryable and recorded `attestor-busy` (the rest), each with its audit row. The p99 figures are printed (run with
/// `--nocapture`) and recorded in the README, not asserted: timing targets belong in the
/// benchmark, not in a test a busy 2-core CI box runs.
async fn hostile_joins_refuse_only_themselves(backend: Backend) {
    let host = TestHost::start_with(HostOptions {
        attestors: vec![
            PathBuf::from(gatehouse_test_artifacts::LOOP_FOREVER),
            PathBuf::from(gatehouse_test_artifacts::ALLOC_FOREVER),
        ],
        ..HostOptions::new(backend)
    })
    .await;
    // Warm up (connections, compiled code), then the unloaded figure: the best of three, so a
    // hiccup does not make the bound generous.
    token_joins(&host, TOKEN_JOINS).await;
    let mut unloaded = Duration::MAX;
    for _ in 0..3 {
        unloaded = unloaded.min(p99(&mut token_joins(&host, TOKEN_JOINS).await));
    }
    let mut hostile_answers = 0;
    for attestor in ["loop-forever", "alloc-forever"] {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU32::new(0));
        let mut clients = hostile(
            host.url(),
            host.trust.clone(),
            attestor,
            HOSTILE_JOINS,
            stop.clone(),
            sent.clone(),
        );
        // Let every hostile client have a join in flight.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut took = token_joins(&host, TOKEN_JOINS).await;
        stop.store(true, Ordering::Relaxed);
        while let Some(done) = clients.join_next().await {
            done.unwrap();
        }
        hostile_answers += sent.load(Ordering::Relaxed) as usize;
        let loaded = p99(&mut took);
        println!(
            "rule 13 {backend:?}: {TOKEN_JOINS} token joins p99 {unloaded:?} alone, {loaded:?} \
             beside {HOSTILE_JOINS} {attestor} joins ({} hostile answers)",
            sent.load(Ordering::Relaxed)
        );
    }
    // Every hostile round left its trace: a refusal with its reason (a call that ran past its
    // deadline, or one that found the attestor's calls all taken), one audit row each; and
    // nothing else was refused.
    // At least one row per answer. On a quiet machine rows and answers match exactly (printed
    // above); on PostgreSQL under heavy load (token joins' p99 2-3 s on the 2-core box) 1 to 4
    // rows more than answers were once seen, not explained yet (README, "Rule 13 measured");
    // every row is one of the two hostile reasons.
    // The looping attestor's calls ran on its own thread. join-token's, on the same two cores
    // beside them, all but a rare one did not: a call moves only once its thread's CPU clock
    // says it kept the CPU for an epoch tick, which an honest call that the operating system
    // preempted across a tick has not; but that clock also counts kernel work the thread ran
    // for others (interrupts, the loopback's softirqs), and twice in a few dozen runs it moved
    // an honest call here. One such move no longer demotes join-token (`runtime::guest`): when
    // it did, one took every join-token call of the next second with it (73 of them).
    let on_own_thread = "gatehouse_attestor_calls_on_own_thread_total";
    assert!(host.attestor_metric(on_own_thread, "loop-forever").await > 0);
    let moved = host.attestor_metric(on_own_thread, "join-token").await;
    let calls = host
        .attestor_metric("gatehouse_attestor_call_seconds_count", "join-token")
        .await;
    println!("rule 13 {backend:?}: {moved} of {calls} join-token calls on its own thread");
    assert!(calls > 0 && moved * 10 <= calls, "{moved} of {calls}");
    let reasons = host.refusal_reasons().await;
    println!(
        "rule 13 {backend:?}: {} refusal rows for {hostile_answers} hostile answers",
        reasons.len()
    );
    assert!(
        reasons.len() >= hostile_answers,
        "{} rows for {hostile_answers} answers: {reasons:?}",
        reasons.len()
    );
    assert!(
        reasons
            .iter()
            .all(|r| r == "attestor-busy" || r == "attestor-fault"),
        "{reasons:?}"
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_hostile_joins_in_flight_refuse_only_themselves() {
    for backend in backends() {
        hostile_joins_refuse_only_themselves(backend).await;
    }
}

/// Rule 11 for the host's own storage: a join that cannot get the rows it needs is answered 503
/// `{retryable: true}`, never refused, spends nothing, and leaves one `storage-error` audit row;
/// once the rows are free the same request is admitted. Two places: the attestor's read of its
/// token (which waits while another transaction holds the row, up to `statement_timeout`), and
/// the locked phase (the pool's row, share-locked there, held past `lock_timeout` in each of
/// the round's attempts). PostgreSQL only: SQLite has no row locks, and its busy writer takes
/// the same path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_storage_contention_is_retryable_and_audited() {
    if !backends().contains(&Backend::Postgres) {
        eprintln!("skipped: DATABASE_URL is not set, and this test needs PostgreSQL");
        return;
    }
    use sqlx::Connection as _;
    let host = TestHost::start(Backend::Postgres).await;
    let created = host
        .http()
        .post(format!("{}/v1/admin/pools", host.url()))
        .bearer_auth(&host.admin_key)
        .json(&serde_json::json!({ "id": "held" }))
        .send()
        .await
        .unwrap();
    assert!(created.status().is_success(), "{created:?}");
    let mut watch = sqlx::PgConnection::connect(&host.database_url)
        .await
        .unwrap();
    let mut audited = Vec::new();

    for held in ["join_tokens", "pools"] {
        let token = host
            .create_token_with(serde_json::json!({
                "role": "node", "uses": 1, "ttlSeconds": 3600, "poolId": "held",
            }))
            .await;
        let key = NodeKey::generate().unwrap();
        let csr = build_csr(&key).unwrap();
        let csr_sha256: [u8; 32] =
            sha2::Digest::finalize(<sha2::Sha256 as sha2::Digest>::new_with_prefix(&csr)).into();
        let request = JoinRequest {
            attestor: String::new(),
            role: Role::Node,
            sealed_token: Some(
                gatehouse_proto::seal_token(&host.trust.join_encryption_key, &token, &csr_sha256)
                    .unwrap(),
            ),
            attestation: vec![],
            csr,
            claims: Claims::default(),
            round: 1,
        };
        let client = JoinClient::new(&host.url(), &host.trust).unwrap();

        let mut holder = sqlx::PgConnection::connect(&host.database_url)
            .await
            .unwrap();
        sqlx::query("BEGIN").execute(&mut holder).await.unwrap();
        let lock = match held {
            "join_tokens" => "SELECT id FROM join_tokens WHERE id = $1 FOR UPDATE",
            _ => "SELECT id FROM pools WHERE id = $1 FOR UPDATE",
        };
        let id = if held == "join_tokens" {
            token.id.as_str()
        } else {
            "held"
        };
        sqlx::query(lock)
            .bind(id)
            .execute(&mut holder)
            .await
            .unwrap();
        match client.send(&request).await {
            Err(JoinError::Host { status, code, .. }) => {
                assert_eq!((status, code.as_str()), (503, "UNAVAILABLE"), "{held}");
            }
            other => panic!(
                "{held}: expected a retryable 503, got {:?}; refusals {:?}",
                other.map(|_| ()),
                host.refusal_reasons().await
            ),
        }
        audited.push("storage-error".to_owned());
        assert_eq!(host.refusal_reasons().await, audited, "{held}");
        assert_eq!(
            uses_left(&mut watch, &token.id).await,
            1,
            "{held}: nothing spent"
        );
        sqlx::query("ROLLBACK").execute(&mut holder).await.unwrap();

        let response = client
            .send(&request)
            .await
            .unwrap_or_else(|e| panic!("{held}: admitted once the row is free: {e}"));
        gatehouse_agent::verify_response(&host.trust, &response, &csr_sha256, &key.spki_der())
            .unwrap();
        assert_eq!(uses_left(&mut watch, &token.id).await, 0, "{held}");
        assert_eq!(host.refusal_reasons().await, audited, "{held}");
    }
    host.stop().await;
}

/// A token's uses left, read directly.
async fn uses_left(conn: &mut sqlx::PgConnection, id: &str) -> i64 {
    let (left,): (i64,) = sqlx::query_as("SELECT uses_left FROM join_tokens WHERE id = $1")
        .bind(id)
        .fetch_one(conn)
        .await
        .unwrap();
    left
}
