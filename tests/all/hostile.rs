//! Hostile clients on the network, in front of JoinService: connections held beyond the limits,
//! slowloris headers, silent TLS connections, half-sent requests at shutdown, oversized bodies
//! (HTTP/1 and HTTP/2), malformed URIs and numbers, join floods from one address; and the data
//! directory a host keeps (private files, one host per SQLite directory, awkward paths).

use std::os::unix::fs::PermissionsExt as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gatehouse::config::LimitsSection;
use reqwest::Method;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::common::{Backend, HostOptions, TestHost, backends};

/// The defaults without the join rate limit, for tests that change one limit.
fn limits() -> LimitsSection {
    LimitsSection {
        join_rate_per_second: 0.0,
        ..Default::default()
    }
}

async fn host_with(backend: Backend, limits: LimitsSection) -> TestHost {
    TestHost::start_with(HostOptions {
        limits: Some(limits),
        ..HostOptions::new(backend)
    })
    .await
}

/// A TLS connection to the host from source address `src` (any 127/8 address is local on
/// Linux, so each stands for another client), offering `alpn`.
async fn tls_from(
    host: &TestHost,
    src: &str,
    alpn: &[u8],
) -> std::io::Result<TlsStream<TcpStream>> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(host.trust.tls_ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    let socket = TcpSocket::new_v4()?;
    socket.bind(format!("{src}:0").parse().unwrap())?;
    let tcp = socket.connect(host.running.server.addr).await?;
    let connector = TlsConnector::from(Arc::new(config));
    let name = ServerName::try_from("localhost").unwrap();
    let mut tls = tokio::time::timeout(Duration::from_secs(5), connector.connect(name, tcp))
        .await
        .map_err(|_| std::io::Error::other("handshake timed out"))??;
    // A refused connection may still finish the client's side of a TLS 1.3 handshake before
    // the close arrives: a session ticket or the close decides.
    let mut probe = [0u8; 1];
    match tokio::time::timeout(Duration::from_millis(150), tls.read(&mut probe)).await {
        Ok(Ok(0)) | Ok(Err(_)) => Err(std::io::Error::other("closed by the host")),
        _ => Ok(tls),
    }
}

const H1: &[u8] = b"http/1.1";
const H2: &[u8] = b"h2";

/// Waits until the connection is closed by the host (EOF or an error); how long it took.
async fn closed_within(tls: &mut TlsStream<TcpStream>, limit: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout(limit.saturating_sub(started.elapsed()), tls.read(&mut buf))
            .await
        {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(started.elapsed()),
            Ok(Ok(_)) => continue,
        }
    }
}

async fn join_once(host: &TestHost) -> String {
    host.join_node().await.1.node_id
}

async fn open_connections_reach(host: &TestHost, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while host.running.server.open_connections() != n {
        assert!(
            Instant::now() < deadline,
            "open connections: {} rather than {n}",
            host.running.server.open_connections()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn held_connections_beyond_the_limits_are_refused_while_joins_succeed() {
    let host = host_with(
        Backend::Sqlite,
        LimitsSection {
            max_connections: 8,
            max_connections_per_source: 4,
            ..limits()
        },
    )
    .await;
    // One client holds idle TLS connections: four are admitted, the rest closed at accept.
    let mut held = Vec::new();
    let mut refused = 0;
    for _ in 0..20 {
        match tls_from(&host, "127.0.0.2", H1).await {
            Ok(tls) => held.push(tls),
            Err(_) => refused += 1,
        }
    }
    assert_eq!((held.len(), refused), (4, 16));
    // Meanwhile machines from other addresses join.
    for _ in 0..3 {
        join_once(&host).await;
    }
    open_connections_reach(&host, 4).await;
    // A second client fills the total: a third is refused though it holds nothing.
    for _ in 0..4 {
        held.push(tls_from(&host, "127.0.0.3", H2).await.unwrap());
    }
    assert!(tls_from(&host, "127.0.0.4", H1).await.is_err());
    // Closing them frees the places.
    drop(held);
    open_connections_reach(&host, 0).await;
    assert!(tls_from(&host, "127.0.0.4", H1).await.is_ok());
    host.stop().await;
}

#[tokio::test]
async fn slowloris_headers_and_silent_connections_are_closed() {
    let host = host_with(
        Backend::Sqlite,
        LimitsSection {
            header_timeout_ms: 1000,
            idle_timeout_ms: 3000,
            ..limits()
        },
    )
    .await;
    // Headers one line every 200 ms: closed by the header deadline, not the idle one.
    let tls = tls_from(&host, "127.0.0.1", H1).await.unwrap();
    let (mut read, mut write) = tokio::io::split(tls);
    let trickle = tokio::spawn(async move {
        let _ = write
            .write_all(b"POST /v1/join HTTP/1.1\r\nhost: localhost\r\n")
            .await;
        for i in 0..100 {
            if write
                .write_all(format!("x-h{i}: y\r\n").as_bytes())
                .await
                .is_err()
                || write.flush().await.is_err()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    let started = Instant::now();
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout(Duration::from_secs(10), read.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(_)) => continue,
            Err(_) => panic!("a slowloris request head was not closed in 10 s"),
        }
    }
    let took = started.elapsed();
    assert!(took < Duration::from_millis(2500), "closed after {took:?}");
    trickle.abort();

    // A TLS connection that never sends a request, over HTTP/1 or HTTP/2: the idle deadline.
    for alpn in [H1, H2] {
        let mut silent = tls_from(&host, "127.0.0.1", alpn).await.unwrap();
        let took = closed_within(&mut silent, Duration::from_secs(10))
            .await
            .expect("a silent connection was not closed in 10 s");
        assert!(took < Duration::from_millis(4500), "closed after {took:?}");
    }
    host.stop().await;
}

#[tokio::test]
async fn shutdown_is_bounded_whatever_clients_hold() {
    let host = host_with(
        Backend::Sqlite,
        LimitsSection {
            shutdown_grace_ms: 1000,
            ..limits()
        },
    )
    .await;
    let addr = host.running.server.addr;
    // A request whose body never comes, an HTTP/2 stream likewise, and an idle connection.
    let mut half = tls_from(&host, "127.0.0.1", H1).await.unwrap();
    half.write_all(
        b"POST /v1/join HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{\"v\":",
    )
    .await
    .unwrap();
    half.flush().await.unwrap();
    let h2_tls = tls_from(&host, "127.0.0.1", H2).await.unwrap();
    let (h2, h2_conn) = h2::client::handshake(h2_tls).await.unwrap();
    tokio::spawn(h2_conn);
    let mut h2 = h2.ready().await.unwrap();
    let request = http::Request::post(format!("https://localhost:{}/v1/join", addr.port()))
        .header("content-type", "application/json")
        .body(())
        .unwrap();
    let (_pending, mut body) = h2.send_request(request, false).unwrap();
    body.send_data(bytes::Bytes::from_static(b"{\"v\":"), false)
        .unwrap();
    let _idle = tls_from(&host, "127.0.0.1", H1).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;

    let started = Instant::now();
    let stopping = tokio::spawn(host.stop());
    // Accepting stops at once: the port refuses connections while the drain runs.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(TcpStream::connect(addr).await.is_err(), "still accepting");
    stopping.await.unwrap();
    let took = started.elapsed();
    assert!(took < Duration::from_millis(2500), "shutdown took {took:?}");
    assert!(
        closed_within(&mut half, Duration::from_secs(1))
            .await
            .is_some(),
        "the half-sent request's connection is still open"
    );
}

async fn send(
    host: &TestHost,
    client: &reqwest::Client,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = client
        .request(method, format!("{}{path}", host.url()))
        .bearer_auth(&host.admin_key);
    if let Some(body) = body {
        req = req.json(&body);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    let value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text:?}"));
    (status, value)
}

#[tokio::test]
async fn client_errors_are_4xx_with_a_json_body() {
    for backend in backends() {
        let host = host_with(backend, limits()).await;
        let http = host.http();
        let events_before = host.events().await.len();
        let cases: Vec<(Method, &str, Option<Value>, u16, &str)> = vec![
            (Method::GET, "/v1/nowhere", None, 404, "NOT_FOUND"),
            (Method::GET, "/v1/join", None, 405, "METHOD_NOT_ALLOWED"),
            (
                Method::DELETE,
                "/v1/admin/tokens",
                None,
                405,
                "METHOD_NOT_ALLOWED",
            ),
            (
                Method::GET,
                "/v1/admin/events?limit=many",
                None,
                400,
                "INVALID_INPUT",
            ),
            (
                Method::GET,
                "/v1/admin/audits?after=-",
                None,
                400,
                "INVALID_INPUT",
            ),
            (
                Method::GET,
                "/v1/admin/join-requests?state=%00",
                None,
                400,
                "INVALID_INPUT",
            ),
            (
                Method::GET,
                "/v1/admin/nodes/node%00x",
                None,
                400,
                "INVALID_INPUT",
            ),
            (
                Method::POST,
                "/v1/admin/tokens/tok%00/revoke",
                None,
                400,
                "INVALID_INPUT",
            ),
            (
                Method::GET,
                "/v1/admin/pools/root/p%1b%5b2J",
                None,
                400,
                "INVALID_INPUT",
            ),
            (
                Method::POST,
                "/v1/leases/site:s:boot/renew",
                Some(json!({ "epoch": 9_223_372_036_854_775_808u64, "ttlSeconds": 60 })),
                400,
                "INVALID_INPUT",
            ),
            (
                Method::POST,
                "/v1/leases/site:s:boot/release",
                Some(json!({ "epoch": u64::MAX })),
                400,
                "INVALID_INPUT",
            ),
            (
                Method::POST,
                "/v1/join",
                Some(json!({ "v": "x" })),
                400,
                "INVALID_INPUT",
            ),
        ];
        for (method, path, body, status, code) in cases {
            let (got, value) = send(&host, &http, method.clone(), path, body).await;
            assert_eq!(
                (got, value["code"].as_str()),
                (status, Some(code)),
                "{backend:?} {method} {path}: {value}"
            );
            assert!(value["message"].is_string(), "{value}");
        }
        // An epoch of 2^64 is no u64 at all: refused by the parser, still a JSON 400.
        let resp = http
            .post(format!("{}/v1/leases/site:s:boot/renew", host.url()))
            .header("content-type", "application/json")
            .body(r#"{"epoch":18446744073709551616,"ttlSeconds":60}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 400);
        let value: Value = resp.json().await.unwrap();
        assert_eq!(value["code"], "INVALID_INPUT");
        // Nothing reached the store: no event was written by any of these.
        assert_eq!(host.events().await.len(), events_before, "{backend:?}");
        host.stop().await;
    }
}

#[tokio::test]
async fn oversized_bodies_are_answered_413_over_http1_and_http2() {
    let host = host_with(
        Backend::Sqlite,
        LimitsSection {
            max_body_bytes: 64 * 1024,
            ..limits()
        },
    )
    .await;
    let big = vec![b' '; 1 << 20];
    // HTTP/1 with a length: answered before the body is read.
    let resp = host
        .http()
        .post(format!("{}/v1/join", host.url()))
        .header("content-type", "application/json")
        .body(big.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 413);
    let value: Value = resp.json().await.unwrap();
    assert_eq!(value["code"], "PAYLOAD_TOO_LARGE");

    // HTTP/2, with and without a length: an answer, not a reset.
    let port = host.running.server.addr.port();
    for declared in [true, false] {
        let tls = tls_from(&host, "127.0.0.1", H2).await.unwrap();
        let (h2, conn) = h2::client::handshake(tls).await.unwrap();
        tokio::spawn(conn);
        let mut h2 = h2.ready().await.unwrap();
        let mut request = http::Request::post(format!("https://localhost:{port}/v1/join"))
            .header("content-type", "application/json");
        if declared {
            request = request.header("content-length", big.len().to_string());
        }
        let (response, mut body) = h2.send_request(request.body(()).unwrap(), false).unwrap();
        let sender = {
            let big = big.clone();
            tokio::spawn(async move {
                for chunk in big.chunks(16 * 1024) {
                    body.reserve_capacity(chunk.len());
                    match std::future::poll_fn(|cx| body.poll_capacity(cx)).await {
                        Some(Ok(_)) => {}
                        _ => return,
                    }
                    if body
                        .send_data(bytes::Bytes::copy_from_slice(chunk), false)
                        .is_err()
                    {
                        return;
                    }
                }
                let _ = body.send_data(bytes::Bytes::new(), true);
            })
        };
        let response = tokio::time::timeout(Duration::from_secs(10), response)
            .await
            .expect("no answer in 10 s")
            .unwrap_or_else(|e| panic!("declared {declared}: no answer: {e}"));
        assert_eq!(response.status().as_u16(), 413, "declared {declared}");
        let mut body = response.into_body();
        let mut bytes = Vec::new();
        while let Some(chunk) = body.data().await {
            match chunk {
                Ok(chunk) => bytes.extend_from_slice(&chunk),
                Err(e) => panic!("declared {declared}: the answer was cut: {e}"),
            }
        }
        let value: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(value["code"], "PAYLOAD_TOO_LARGE");
        sender.abort();
    }
    host.stop().await;
}

#[tokio::test]
async fn join_rounds_are_rate_limited_per_source_address() {
    let host = host_with(
        Backend::Sqlite,
        LimitsSection {
            join_rate_per_second: 0.5,
            join_burst: 3,
            ..limits()
        },
    )
    .await;
    let client_from = |ip: &str| {
        let ca = reqwest::Certificate::from_pem(host.trust.tls_ca_pem.as_bytes()).unwrap();
        reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(ca)
            .local_address(ip.parse::<std::net::IpAddr>().unwrap())
            .build()
            .unwrap()
    };
    let flood = client_from("127.0.0.2");
    let mut statuses = Vec::new();
    let mut retry_after = None;
    for _ in 0..6 {
        let resp = flood
            .post(format!("{}/v1/join", host.url()))
            .json(&json!({ "v": 1 }))
            .send()
            .await
            .unwrap();
        statuses.push(resp.status().as_u16());
        if resp.status().as_u16() == 429 {
            retry_after = resp
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok());
            let value: Value = resp.json().await.unwrap();
            assert_eq!(
                (value["code"].as_str(), value["retryable"].as_bool()),
                (Some("RATE_LIMITED"), Some(true))
            );
        }
    }
    assert_eq!(statuses, [400, 400, 400, 429, 429, 429]);
    assert!(
        retry_after.is_some_and(|s| (1..=2).contains(&s)),
        "{retry_after:?}"
    );
    // Another address is not held back, and the admin API is not rate limited.
    join_once(&host).await;
    for _ in 0..5 {
        let (status, _) = send(&host, &flood, Method::GET, "/v1/admin/events", None).await;
        assert_eq!(status, 200);
    }
    host.stop().await;
}

#[tokio::test]
async fn nodes_show_escapes_what_a_machine_supplied() {
    let host = host_with(Backend::Sqlite, limits()).await;
    let node = join_once(&host).await;
    let evil = "\u{1b}]0;pwned\u{7}\u{1b}[2J\u{1b}[31mAAAA-\u{202e}\\x";
    let mut tx = host.running.db.begin().await.unwrap();
    tx.bind("product-uuid", evil, &node).await.unwrap();
    tx.commit().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (exit, out) = host.cli(dir.path(), &["nodes", "show", &node]).await;
    let out = exit.output(out).unwrap();
    assert!(
        !out.chars().any(|c| c.is_control() && c != '\n'),
        "control characters printed: {out:?}"
    );
    assert!(!out.contains('\u{202e}'), "{out:?}");
    assert!(
        out.contains("product-uuid \\u{1b}]0;pwned\\u{7}\\u{1b}[2J\\u{1b}[31mAAAA-\\u{202e}\\\\x"),
        "{out}"
    );
    host.stop().await;
}

#[tokio::test]
async fn the_data_directory_is_private_and_held_by_one_host() {
    let dir = tempfile::tempdir().unwrap();
    // A path SQLite's URL would misread unless escaped.
    let data = dir.path().join("data?mode=ro%20#x");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    let host = TestHost::start_with(HostOptions {
        data_dir: Some(data.clone()),
        limits: Some(limits()),
        ..HostOptions::new(Backend::Sqlite)
    })
    .await;
    join_once(&host).await;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&data), 0o700);
    for name in [
        "gatehouse.db",
        "gatehouse.db-wal",
        "gatehouse.db-shm",
        "secret",
        "pki.json",
        "admin.key",
    ] {
        let path = data.join(name);
        assert!(path.exists(), "{name}");
        assert_eq!(mode(&path), 0o600, "{name}");
    }
    assert_eq!(mode(&data.join("tls/server.key")), 0o600);
    // A second host on the same directory does not start while the first runs.
    let second = TestHost::try_start_with(HostOptions {
        data_dir: Some(data.clone()),
        limits: Some(limits()),
        ..HostOptions::new(Backend::Sqlite)
    })
    .await;
    match second {
        Err(e) => assert!(e.contains("in use by another gatehouse host"), "{e}"),
        Ok(_) => panic!("two hosts opened one SQLite directory"),
    }
    host.stop().await;
    // Once it stopped, the directory is free again, its files tightened at start.
    std::fs::set_permissions(
        data.join("gatehouse.db"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let again = TestHost::start_with(HostOptions {
        data_dir: Some(data.clone()),
        limits: Some(limits()),
        ..HostOptions::new(Backend::Sqlite)
    })
    .await;
    assert_eq!(mode(&data.join("gatehouse.db")), 0o600);
    again.stop().await;
}

#[tokio::test]
async fn admin_lists_come_a_page_at_a_time() {
    for backend in backends() {
        let host = host_with(backend, limits()).await;
        let mut created = Vec::new();
        for _ in 0..5 {
            created.push(host.create_token("node", 1).await.id);
        }
        let http = host.http();
        let mut seen = Vec::new();
        let mut after: Option<String> = None;
        let mut pages = 0;
        loop {
            let mut url = format!("{}/v1/admin/tokens?limit=2", host.url());
            if let Some(after) = &after {
                url.push_str(&format!("&after={after}"));
            }
            let resp = http
                .get(url)
                .bearer_auth(&host.admin_key)
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status().as_u16(), 200);
            let next = resp
                .headers()
                .get("x-next-cursor")
                .map(|v| v.to_str().unwrap().to_owned());
            let rows: Vec<Value> = resp.json().await.unwrap();
            assert!(rows.len() <= 2);
            seen.extend(rows.iter().map(|r| r["id"].as_str().unwrap().to_owned()));
            pages += 1;
            match next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        assert_eq!(pages, 3, "{backend:?}");
        let mut sorted = seen.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 5, "no row twice: {seen:?}");
        created.sort();
        assert_eq!(sorted, created);
        for bad in ["limit=0", "limit=1001", "after=nope", "after=1.%00"] {
            let (status, value) = send(
                &host,
                &http,
                Method::GET,
                &format!("/v1/admin/nodes?{bad}"),
                None,
            )
            .await;
            assert_eq!(
                (status, value["code"].as_str()),
                (400, Some("INVALID_INPUT")),
                "{bad}"
            );
        }
        host.stop().await;
    }
}
