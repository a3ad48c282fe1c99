//! A bounded soak: one host on loopback (SQLite), in a process of its own, under mixed joins,
//! renewals, admin reads and hostile connections for `GATEHOUSE_SOAK_SECS` seconds (45 by
//! default; the README's figures come from a 600-second run). Afterwards the "nothing lost"
//! invariants hold and the host's resident memory is back within 10 % of what it was after
//! the warm-up.
//!
//! The host runs in a child process so that its memory is its own: the test binary re-runs
//! itself with `soak::host_process` (an ignored test that serves only when
//! `GATEHOUSE_SOAK_HOST_DIR` names its data directory), which runs `gatehouse serve --dev` as
//! the binary does. Its resident set (`VmRSS` of `/proc/<pid>/status`) is sampled every
//! second. The baseline is taken after a warm-up of the same load (a fifth of the run, at
//! least 10 s): pools, the compiled attestors, TLS session caches and the allocator's arenas
//! reach their working size during it, and none of that is a leak.

use std::io::{BufRead as _, BufReader};
use std::net::IpAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use gatehouse::store::{AuditResult, Db, sqlite_url};
use gatehouse_agent::{
    JoinClient, JoinError, JoinOptions, NodeKey, RenewClient, TokenProducer, join,
};
use gatehouse_proto::{JoinTrust, Role};
use reqwest::Method;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpSocket;

/// The variable naming the child's data directory.
const HOST_DIR: &str = "GATEHOUSE_SOAK_HOST_DIR";

/// Not a test: the soak's host process. Serves until SIGTERM when [`HOST_DIR`] is set (the
/// soak sets it), and returns at once otherwise.
#[test]
#[ignore = "the soak's host process, started by `soak::mixed_load_loses_nothing_and_leaks_no_memory`"]
fn host_process() {
    let Some(dir) = std::env::var_os(HOST_DIR) else {
        return;
    };
    let dir = dir.to_string_lossy().into_owned();
    // As the `gatehouse` binary's `main` does.
    gatehouse::allocator::return_freed_memory_at_once();
    // `serve --dev` defaults, except the per-node issuance interval: the renewer renews one
    // node five times a second, which the default (one certificate per node per 30 s) would
    // answer 429 (tests/all/ops.rs shows that throttle).
    let files = gatehouse::app::dev::prepare(std::path::Path::new(&dir), "127.0.0.1:0").unwrap();
    let config = std::fs::read_to_string(&files.config).unwrap();
    if !config.contains("[limits]") {
        std::fs::write(
            &files.config,
            format!("{config}\n[limits]\nnode_issue_interval_seconds = 0\n"),
        )
        .unwrap();
    }
    let cli = gatehouse::cli::Cli::try_parse_args([
        "gatehouse",
        "serve",
        "--dev",
        "--data-dir",
        &dir,
        "--listen",
        "127.0.0.1:0",
    ])
    .unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime
        .block_on(gatehouse::cli::run(cli))
        .expect("the soak's host serves");
}

/// The child host, killed if the test ends early.
struct HostProcess {
    child: Child,
    /// Where it listens, and its URL (by the name its TLS certificate carries).
    addr: std::net::SocketAddr,
    url: String,
    trust: JoinTrust,
    admin_key: String,
    data: std::path::PathBuf,
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl HostProcess {
    fn start(data: std::path::PathBuf) -> Self {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "soak::host_process",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(HOST_DIR, &data)
            .env("RUST_LOG", "off")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let addr = loop {
            let line = lines
                .next()
                .expect("the host process printed its address")
                .unwrap();
            if let Some(addr) = line.strip_prefix("gatehouse listening on https://") {
                break addr.trim().to_owned();
            }
        };
        // Keep draining what it prints, so it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        let addr: std::net::SocketAddr = addr.parse().unwrap();
        let trust: JoinTrust =
            serde_json::from_str(&std::fs::read_to_string(data.join("join-trust.json")).unwrap())
                .unwrap();
        let admin_key = std::fs::read_to_string(data.join("admin.key"))
            .unwrap()
            .trim()
            .to_owned();
        Self {
            child,
            addr,
            url: format!("https://localhost:{}", addr.port()),
            trust,
            admin_key,
            data,
        }
    }

    /// Resident memory of the host process, in KiB.
    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }

    /// An HTTPS client trusting the host's CA, from `source` (any 127/8 address).
    fn http(&self, source: IpAddr) -> reqwest::Client {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(
                reqwest::Certificate::from_pem(self.trust.tls_ca_pem.as_bytes()).unwrap(),
            )
            .local_address(source)
            .resolve("localhost", self.addr)
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap()
    }

    /// Stops it as an operator would (SIGTERM) and waits for it to exit.
    fn stop(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the host did not stop on SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

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
