//! A bounded soak: one host on loopback (SQLite), in a process of its own, under mixed joins,
//! renewals, admin reads and hostile connections for `GATEHOUSE_SOAK_SECS` seconds (45 by
//! default; the README's figures come from a 600-second run). Afterwards the "nothing lost"
//! invariants hold and the host's resident memory is back within 10 % of what it was after
//! the warm-up.
//!
//! The host runs in a child process so that its memory is its own ([`HostProcess`]: the test
//! binary re-runs itself to run `gatehouse serve --dev` as the binary does). Its resident set
//! (`VmRSS` of `/proc/<pid>/status`) is sampled every second. The baseline is taken after a
//! warm-up of the same load (a fifth of the run, at least 10 s): pools, the compiled
//! attestors, TLS session caches and the allocator's arenas reach their working size during
//! it, and none of that is a leak.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use gatehouse::store::{AuditResult, Db, sqlite_url};
use gatehouse_agent::{
    JoinClient, JoinError, JoinOptions, NodeKey, RenewClient, TokenProducer, join,
};
use gatehouse_proto::Role;
use reqwest::Method;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpSocket;

use crate::process::HostProcess;

/// What the clients saw.
#[derive(Default)]
struct Counts {
    joins: AtomicU64,
    join_retries_exhausted: AtomicU64,
    renewals: AtomicU64,
    admin_reads: AtomicU64,
    hostile: AtomicU64,
    failures: std::sync::Mutex<Vec<String>>,
}

impl Counts {
    fn fail(&self, what: String) {
        self.failures.lock().unwrap().push(what);
    }
}

async fn admin(
    http: &reqwest::Client,
    host: &HostProcess,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> Option<Value> {
    let mut req = http
        .request(method, format!("{}{path}", host.url))
        .bearer_auth(&host.admin_key);
    if let Some(body) = body {
        req = req.json(&body);
    }
    let resp = req.send().await.ok()?;
    if !resp.status().is_success() {
        return None;
    }
    resp.json().await.ok()
}

/// Mints a one-use token and joins with it through the agent's loop (which rides out 429s and
/// 503s); the joined node id and chain, kept for renewals.
async fn joiner(
    host: Arc<HostProcess>,
    counts: Arc<Counts>,
    stop: Arc<AtomicBool>,
    joined: Arc<std::sync::Mutex<Vec<String>>>,
    renewable: tokio::sync::mpsc::Sender<(NodeKey, String, Vec<Vec<u8>>)>,
) {
    let http = host.http("127.0.0.1".parse().unwrap());
    let client = JoinClient::new(&host.url, &host.trust).unwrap();
    while !stop.load(Ordering::Relaxed) {
        let Some(created) = admin(
            &http,
            &host,
            Method::POST,
            "/v1/admin/tokens",
            Some(json!({ "role": "node", "uses": 1, "ttlSeconds": 3600 })),
        )
        .await
        else {
            counts.fail("token create".into());
            continue;
        };
        let token =
            gatehouse_proto::TokenString::parse(created["token"].as_str().unwrap()).unwrap();
        let key = NodeKey::generate().unwrap();
        match join(
            &client,
            &host.trust,
            &mut TokenProducer::new(Role::Node),
            Some(&token),
            &key,
            &JoinOptions::default(),
        )
        .await
        {
            Ok(j) => {
                counts.joins.fetch_add(1, Ordering::Relaxed);
                joined.lock().unwrap().push(j.node_id.clone());
                let _ = renewable.try_send((key, j.node_id, j.chain));
            }
            Err(JoinError::Host {
                status: 429 | 503, ..
            }) => {
                counts
                    .join_retries_exhausted
                    .fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => counts.fail(format!("join: {e}")),
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

/// Renews joined nodes over mTLS, each with a fresh key, again and again.
async fn renewer(
    host: Arc<HostProcess>,
    counts: Arc<Counts>,
    stop: Arc<AtomicBool>,
    mut renewable: tokio::sync::mpsc::Receiver<(NodeKey, String, Vec<Vec<u8>>)>,
) {
    let mut current: Option<(NodeKey, String, Vec<Vec<u8>>)> = None;
    while !stop.load(Ordering::Relaxed) {
        if let Ok(next) = renewable.try_recv() {
            current = Some(next);
        }
        let Some((key, node_id, chain)) = current.take() else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let next = NodeKey::generate().unwrap();
        let client = RenewClient::new(&host.url, &host.trust, &key, &chain).unwrap();
        match client.renew(&host.trust, &node_id, &next).await {
            Ok(renewed) => {
                counts.renewals.fetch_add(1, Ordering::Relaxed);
                current = Some((next, node_id, renewed.chain));
            }
            Err(e) => counts.fail(format!("renew {node_id}: {e}")),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Reads every admin list a page at a time, and nodes one by one.
async fn reader(host: Arc<HostProcess>, counts: Arc<Counts>, stop: Arc<AtomicBool>) {
    let http = host.http("127.0.0.3".parse().unwrap());
    while !stop.load(Ordering::Relaxed) {
        for path in [
            "/v1/admin/tokens?limit=200",
            "/v1/admin/nodes?limit=200",
            "/v1/admin/events?limit=200",
            "/v1/admin/audits?limit=200",
            "/v1/admin/pools",
            "/v1/admin/workflows",
            "/v1/admin/join-requests?state=all",
            "/v1/admin/attestors",
        ] {
            match admin(&http, &host, Method::GET, path, None).await {
                Some(_) => {
                    counts.admin_reads.fetch_add(1, Ordering::Relaxed);
                }
                None => counts.fail(format!("GET {path}")),
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Hostile clients from 127.0.0.9: connections that never speak, TLS handshakes that stop
/// half-way, slowloris headers, bodies that never finish, oversized bodies, garbage bytes and
/// forged joins. Each is a fresh connection the host must bound and close.
async fn hostile(host: Arc<HostProcess>, counts: Arc<Counts>, stop: Arc<AtomicBool>) {
    let addr = host.addr;
    let http = host.http("127.0.0.9".parse().unwrap());
    let mut held = Vec::new();
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let connect = async {
            let socket = TcpSocket::new_v4().ok()?;
            socket.bind("127.0.0.9:0".parse().unwrap()).ok()?;
            socket.connect(addr).await.ok()
        };
        match i % 6 {
            // Silent connections, held until the host's timeouts close them (at most 40).
            0 => {
                if let Some(tcp) = connect.await {
                    held.push(tcp);
                    if held.len() > 40 {
                        held.remove(0);
                    }
                }
            }
            // Garbage instead of a TLS ClientHello.
            1 => {
                if let Some(mut tcp) = connect.await {
                    let _ = tcp
                        .write_all(b"\x16\x03\x01\xff\xffGET / HTTP/1.1\r\n\r\n")
                        .await;
                }
            }
            // An oversized body (413).
            2 => {
                let _ = http
                    .post(format!("{}/v1/join", host.url))
                    .body(vec![b'{'; 2 << 20])
                    .header("content-type", "application/json")
                    .send()
                    .await;
            }
            // A forged join: a token that does not open (403, audited, nothing spent).
            3 => {
                let _ = http
                    .post(format!("{}/v1/join", host.url))
                    .json(&json!({"role": "node", "csr": "AAAA", "attestation": "", "round": 1}))
                    .send()
                    .await;
            }
            // A TLS record header that never gets its record, held like the silent ones.
            4 => {
                if let Some(mut tcp) = connect.await {
                    let _ = tcp.write_all(b"\x16\x03\x01").await;
                    held.push(tcp);
                    if held.len() > 40 {
                        held.remove(0);
                    }
                }
            }
            // Admin calls without the key.
            _ => {
                let _ = http
                    .get(format!("{}/v1/admin/tokens", host.url))
                    .send()
                    .await;
            }
        }
        counts.hostile.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The run's length: `GATEHOUSE_SOAK_SECS`, 45 by default.
fn duration() -> Duration {
    Duration::from_secs(
        std::env::var("GATEHOUSE_SOAK_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(45),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mixed_load_loses_nothing_and_leaks_no_memory() {
    let run = duration();
    let warm_up = (run / 5).max(Duration::from_secs(10));
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let host = Arc::new(
        tokio::task::spawn_blocking(move || HostProcess::start(data))
            .await
            .unwrap(),
    );
    let idle_rss = host.rss_kib();

    let counts = Arc::new(Counts::default());
    let stop = Arc::new(AtomicBool::new(false));
    let joined = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (renewable_tx, renewable_rx) = tokio::sync::mpsc::channel(64);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..2 {
        tasks.spawn(joiner(
            host.clone(),
            counts.clone(),
            stop.clone(),
            joined.clone(),
            renewable_tx.clone(),
        ));
    }
    drop(renewable_tx);
    tasks.spawn(renewer(
        host.clone(),
        counts.clone(),
        stop.clone(),
        renewable_rx,
    ));
    tasks.spawn(reader(host.clone(), counts.clone(), stop.clone()));
    tasks.spawn(hostile(host.clone(), counts.clone(), stop.clone()));

    let started = Instant::now();
    let mut baseline = None;
    let mut peak = 0;
    while started.elapsed() < run {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let rss = host.rss_kib();
        peak = peak.max(rss);
        if baseline.is_none() && started.elapsed() >= warm_up {
            baseline = Some(rss);
        }
    }
    stop.store(true, Ordering::Relaxed);
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    // The host's timeouts close what the hostile clients left; then memory settles.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let end_rss = host.rss_kib();
    let baseline = baseline.expect("the run outlasts its warm-up");

    let host = Arc::into_inner(host).expect("every client is done");
    let data = host.data.clone();
    let status = host.stop();
    let joins = counts.joins.load(Ordering::Relaxed);
    eprintln!(
        "soak: {}s, {joins} joins ({} gave up on 429/503), {} renewals, {} admin reads, {} hostile \
         connections; host RSS idle {idle_rss} KiB, after warm-up {baseline} KiB, peak {peak} KiB, \
         end {end_rss} KiB ({:+.1} %)",
        run.as_secs(),
        counts.join_retries_exhausted.load(Ordering::Relaxed),
        counts.renewals.load(Ordering::Relaxed),
        counts.admin_reads.load(Ordering::Relaxed),
        counts.hostile.load(Ordering::Relaxed),
        (end_rss as f64 / baseline as f64 - 1.0) * 100.0
    );
    assert!(status.success(), "the host stopped cleanly: {status}");
    let failures = counts.failures.lock().unwrap().clone();
    assert!(
        failures.is_empty(),
        "{} failures: {:?}",
        failures.len(),
        &failures[..failures.len().min(20)]
    );
    assert!(joins > 0 && counts.renewals.load(Ordering::Relaxed) > 0);
    assert!(
        end_rss * 10 <= baseline * 11,
        "resident memory {end_rss} KiB is more than 10 % above {baseline} KiB"
    );

    // Nothing lost, read from the database the host left.
    let db = Db::connect(&sqlite_url(&data.join("gatehouse.db")).unwrap())
        .await
        .unwrap();
    let mut tx = db.begin().await.unwrap();
    let tokens = tx.list_tokens().await.unwrap();
    let audits = tx.list_audits(0, u32::MAX).await.unwrap();
    let admitted: Vec<_> = audits
        .iter()
        .filter(|a| a.result == AuditResult::Admitted && a.attestor == "join-token")
        .collect();
    for t in &tokens {
        let spent = t.uses_total - t.uses_left;
        let admissions = admitted
            .iter()
            .filter(|a| a.token_id.as_deref() == Some(t.id.as_str()))
            .count();
        assert_eq!(
            spent as usize, admissions,
            "token {}: every use has its admission",
            t.id
        );
    }
    for a in &admitted {
        let node = a.node_id.as_deref().unwrap();
        assert!(
            tx.node(node).await.unwrap().is_some(),
            "node {node} of an admission"
        );
        assert!(
            !tx.node_certs(node).await.unwrap().is_empty(),
            "node {node} has its certificate"
        );
    }
    let joined = joined.lock().unwrap().clone();
    for node in &joined {
        assert!(
            admitted
                .iter()
                .any(|a| a.node_id.as_deref() == Some(node.as_str())),
            "joined node {node} has its admission"
        );
    }
    tx.commit().await.unwrap();
    db.close().await;
}
