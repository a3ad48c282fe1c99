//! The database going away under joins: every round the host cannot decide is answered 503
//! `{code: "UNAVAILABLE", retryable: true}`, never 403; once the database is back machines are
//! admitted; every round leaves its audit row (written late if it must be); and nothing is
//! lost: no token use over its limit, none without its node and certificate, no connection
//! left idle in a transaction.
//!
//! PostgreSQL goes away through a TCP proxy on loopback between the host and the shared
//! server, which the test cuts (every connection dropped, new ones refused) and restores; the
//! server itself is never stopped. A failed `BEGIN` is also shown on both backends by holding
//! every connection of the host's write pool.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use gatehouse::store::AuditResult;
use gatehouse_agent::{NodeKey, build_csr};
use gatehouse_proto::{JoinRequest, Role, TokenString, seal_token};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::common::{Backend, HostOptions, TestHost, backends, drop_postgres, fresh_postgres};

/// A TCP proxy from a loopback port to the PostgreSQL server, which the test cuts and
/// restores.
pub(crate) struct Proxy {
    pub(crate) port: u16,
    upstream: String,
    running: Option<(watch::Sender<()>, tokio::task::JoinHandle<()>)>,
}

impl Proxy {
    pub(crate) async fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut proxy = Self {
            port,
            upstream,
            running: None,
        };
        proxy.serve(listener);
        proxy
    }

    fn serve(&mut self, listener: TcpListener) {
        let (stop, stopped) = watch::channel(());
        let task = tokio::spawn(accept_loop(listener, self.upstream.clone(), stopped));
        self.running = Some((stop, task));
    }

    /// Drops every connection and closes the port: a new connection is refused.
    pub(crate) async fn cut(&mut self) {
        let (stop, task) = self.running.take().expect("the proxy runs");
        drop(stop);
        task.await.unwrap();
    }

    /// Opens the port again.
    pub(crate) async fn restore(&mut self) {
        let addr: SocketAddr = format!("127.0.0.1:{}", self.port).parse().unwrap();
        let socket = TcpSocket::new_v4().unwrap();
        socket.set_reuseaddr(true).unwrap();
        socket.bind(addr).unwrap();
        let listener = socket.listen(1024).unwrap();
        self.serve(listener);
    }
}

/// A host on a fresh PostgreSQL database of `server` (DATABASE_URL), reached through a
/// [`Proxy`] the test can cut: the proxy, the host, and the database's name.
pub(crate) async fn proxied_postgres_host(server: &str) -> (Proxy, TestHost, String) {
    let (direct, database) = fresh_postgres().await;
    let server = reqwest::Url::parse(server).unwrap();
    let upstream = format!(
        "{}:{}",
        server.host_str().unwrap(),
        server.port().unwrap_or(5432)
    );
    let proxy = Proxy::start(upstream).await;
    let mut proxied = reqwest::Url::parse(&direct).unwrap();
    proxied.set_host(Some("127.0.0.1")).unwrap();
    proxied.set_port(Some(proxy.port)).unwrap();
    let host = TestHost::start_with(HostOptions {
        database_url: Some(proxied.to_string()),
        ..HostOptions::new(Backend::Postgres)
    })
    .await;
    (proxy, host, database)
}

/// Accepts and relays until `stopped` fires; then closes the listener and every relayed
/// connection before returning.
async fn accept_loop(listener: TcpListener, upstream: String, mut stopped: watch::Receiver<()>) {
    let mut relays = JoinSet::new();
    loop {
        tokio::select! {
            _ = stopped.changed() => break,
            accepted = listener.accept() => {
                let Ok((mut client, _)) = accepted else { continue };
                let upstream = upstream.clone();
                relays.spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(&upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
            }
            Some(_) = relays.join_next(), if !relays.is_empty() => {}
        }
    }
    drop(listener);
    relays.shutdown().await;
}

/// One machine's first round, built once and sent as often as the host says "try again".
struct Machine {
    request: JoinRequest,
}

impl Machine {
    fn new(host: &TestHost, token: &TokenString) -> Self {
        let key = NodeKey::generate().unwrap();
        let csr = build_csr(&key).unwrap();
        let csr_sha256: [u8; 32] = Sha256::digest(&csr).into();
        Self {
            request: JoinRequest {
                attestor: String::new(),
                role: Role::Node,
                sealed_token: Some(
                    seal_token(&host.trust.join_encryption_key, token, &csr_sha256).unwrap(),
                ),
                attestation: vec![],
                csr,
                claims: Default::default(),
                round: 1,
            },
        }
    }
}

/// How one round ended, as a machine sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    Admitted,
    /// 503 `UNAVAILABLE` with `retryable: true`.
    TryAgain,
    Other(u16, String),
}

async fn send(http: &reqwest::Client, url: &str, machine: &Machine) -> Answer {
    let resp = match http.post(url).json(&machine.request).send().await {
        Ok(resp) => resp,
        Err(e) => return Answer::Other(0, e.to_string()),
    };
    let status = resp.status().as_u16();
    let body: Value = resp.json().await.unwrap_or(Value::Null);
    match status {
        200 => Answer::Admitted,
        503 if body["code"] == "UNAVAILABLE" && body["retryable"] == true => Answer::TryAgain,
        _ => Answer::Other(status, body.to_string()),
    }
}

/// Sends the machine's round until it is admitted or `deadline`: every answer, in order.
async fn until_admitted(
    http: reqwest::Client,
    url: String,
    machine: Machine,
    deadline: Instant,
) -> Vec<Answer> {
    let mut answers = Vec::new();
    while Instant::now() < deadline {
        let answer = send(&http, &url, &machine).await;
        answers.push(answer.clone());
        match answer {
            Answer::Admitted => break,
            Answer::TryAgain => tokio::time::sleep(Duration::from_millis(200)).await,
            Answer::Other(..) => break,
        }
    }
    answers
}

/// What the database holds about one token's joins.
struct Ledger {
    uses_spent: u32,
    uses_total: u32,
    nodes: usize,
    nodes_with_a_cert: usize,
    admitted: usize,
    /// Rounds the host could not decide: `storage-error`, or `attestor-busy` (its call slots
    /// were held by calls waiting on the database); each was answered 503.
    storage_errors: usize,
}

async fn ledger(host: &TestHost, token_id: &str) -> Ledger {
    let mut tx = host.running.db.begin().await.unwrap();
    let token = tx.lock_token(token_id).await.unwrap().unwrap();
    let nodes = tx.list_nodes().await.unwrap();
    let mut nodes_with_a_cert = 0;
    for n in &nodes {
        if !tx.node_certs(&n.id).await.unwrap().is_empty() {
            nodes_with_a_cert += 1;
        }
    }
    let audits = tx.list_audits(0, 100_000).await.unwrap();
    tx.commit().await.unwrap();
    Ledger {
        uses_spent: token.uses_total - token.uses_left,
        uses_total: token.uses_total,
        nodes: nodes.len(),
        nodes_with_a_cert,
        admitted: audits
            .iter()
            .filter(|a| a.result == AuditResult::Admitted)
            .count(),
        storage_errors: audits
            .iter()
            .filter(|a| matches!(a.reason.as_deref(), Some("storage-error" | "attestor-busy")))
            .count(),
    }
}

/// Waits until the records of `expected` rounds answered 503 are in the database (a record
/// the database could not take when its round ended is written after a later round).
async fn storage_errors_reach(host: &TestHost, token_id: &str, expected: usize) -> Ledger {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let l = ledger(host, token_id).await;
        if l.storage_errors >= expected || Instant::now() > deadline {
            return l;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Connections of `database` idle inside a transaction.
async fn idle_in_transaction(database: &str) -> i64 {
    use sqlx::Connection as _;
    let admin = std::env::var("DATABASE_URL").unwrap();
    let mut conn = sqlx::PgConnection::connect(&admin).await.unwrap();
    let (n,): (i64,) = sqlx::query_as(
        "SELECT count(*) FROM pg_stat_activity \
         WHERE datname = $1 AND state LIKE 'idle in transaction%'",
    )
    .bind(database)
    .fetch_one(&mut conn)
    .await
    .unwrap();
    n
}

/// Machines joining in waves while PostgreSQL becomes unreachable for the host and comes
/// back: 503 retryable during the outage, never 403; every machine admitted afterwards; an
/// audit row for every round; nothing lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_postgres_outage_during_joins_is_retryable_and_recorded() {
    let Ok(server) = std::env::var("DATABASE_URL") else {
        eprintln!("DATABASE_URL is not set: the PostgreSQL outage test does not run");
        return;
    };
    let (mut proxy, host, database) = proxied_postgres_host(&server).await;

    const MACHINES: usize = 24;
    let token = host.create_token("node", MACHINES as u32 + 8).await;
    let url = format!("{}/v1/join", host.url());
    let http = host.http();
    let deadline = Instant::now() + Duration::from_secs(120);

    // Waves of machines: before, during and after the cut, each sending until admitted.
    let mut load = JoinSet::new();
    let wave = |load: &mut JoinSet<Vec<Answer>>, n: usize| {
        for _ in 0..n {
            load.spawn(until_admitted(
                http.clone(),
                url.clone(),
                Machine::new(&host, &token),
                deadline,
            ));
        }
    };
    wave(&mut load, MACHINES / 3);
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.cut().await;
    wave(&mut load, MACHINES / 3);
    // Long enough for rounds to fail on the pool's acquire timeout (5 s), in the attestor's
    // reads and at BEGIN.
    tokio::time::sleep(Duration::from_secs(7)).await;
    proxy.restore().await;
    wave(&mut load, MACHINES - 2 * (MACHINES / 3));

    let mut answers = Vec::new();
    while let Some(done) = load.join_next().await {
        answers.push(done.unwrap());
    }
    let try_again: usize = answers
        .iter()
        .flatten()
        .filter(|a| **a == Answer::TryAgain)
        .count();
    let refused = host.refusal_reasons().await;
    for a in &answers {
        assert_eq!(
            a.last(),
            Some(&Answer::Admitted),
            "every machine is admitted once the database is back, never refused: {a:?}; \
             refusals recorded: {refused:?}"
        );
        assert!(
            a.iter()
                .all(|x| matches!(x, Answer::Admitted | Answer::TryAgain)),
            "only 200 and 503 retryable: {a:?}"
        );
    }
    assert!(try_again > 0, "the outage was seen: {answers:?}");

    let l = storage_errors_reach(&host, &token.id, try_again).await;
    eprintln!(
        "outage: {MACHINES} machines, {try_again} answers 503, {} admitted, {} storage-error or attestor-busy audit rows",
        l.admitted, l.storage_errors
    );
    // One audit row for every 503 (no more: a round is recorded once), one for every admission.
    // A 503 is `storage-error`, or `attestor-busy` when the attestor's call slots were all held
    // by calls waiting on the database.
    assert_eq!(l.storage_errors, try_again);
    assert!(l.admitted >= MACHINES);
    // Nothing lost: every use has its node and certificate, and no use over the limit.
    assert_eq!(l.uses_spent as usize, l.nodes);
    assert_eq!(l.nodes, l.admitted);
    assert_eq!(l.nodes_with_a_cert, l.nodes);
    assert!(l.uses_spent <= l.uses_total);
    assert_eq!(idle_in_transaction(&database).await, 0);

    host.stop().await;
    proxy.cut().await;
    drop_postgres(&database).await;
}

/// A round whose `BEGIN` cannot get a connection (every connection of the write pool is held)
/// is answered 503 retryable, spends nothing, and leaves its audit row once the database
/// takes writes again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_whose_begin_fails_is_answered_503_and_recorded() {
    for backend in backends() {
        let host = TestHost::start(backend).await;
        let token = host.create_token("node", 2).await;
        let url = format!("{}/v1/join", host.url());
        let http = host.http();
        // The write pool's size: one connection on SQLite, the default on Postgres.
        let held = match backend {
            Backend::Sqlite => 1,
            Backend::Postgres => gatehouse::store::DEFAULT_POSTGRES_CONNECTIONS,
        };
        let mut txs = Vec::new();
        for _ in 0..held {
            txs.push(host.running.db.begin().await.unwrap());
        }
        let answer = send(&http, &url, &Machine::new(&host, &token)).await;
        assert_eq!(answer, Answer::TryAgain, "{backend:?}");
        // Read beside the held pool: the record waits, as the round found the pool.
        let mut reads = host.running.db.read().await.unwrap();
        let written = reads.list_audits(0, 1000).await.unwrap();
        drop(reads);
        assert!(
            written
                .iter()
                .all(|a| a.reason.as_deref() != Some("storage-error")),
            "{backend:?}: not written while the pool is held"
        );
        for tx in txs {
            tx.rollback().await.unwrap();
        }
        // The next round reaches the database; the kept record follows it.
        let answer = send(&http, &url, &Machine::new(&host, &token)).await;
        assert_eq!(answer, Answer::Admitted, "{backend:?}");
        let l = storage_errors_reach(&host, &token.id, 1).await;
        assert_eq!(l.storage_errors, 1, "{backend:?}");
        assert_eq!(
            (l.uses_spent, l.nodes, l.admitted),
            (1, 1, 1),
            "{backend:?}"
        );
        host.stop().await;
    }
}
