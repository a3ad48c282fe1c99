//! Fetched configuration (`[attestors.<id>.fetch]`) end to end: cloud-iid's Google JWKS comes
//! from a key server the host polls, never from a join. A key the provider adds is admitted
//! once fetched and a key it drops is refused; a failed fetch (an error status, a body not
//! JSON or over the cap), and a JWKS the attestor refuses, each leave the last good keys serving and are recorded as events; joins go on with
//! the key server gone; a restart with the key server down starts from the kept copy, and a
//! first start with neither fails and says why.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gatehouse::config::{FetchFormat, FetchSource};
use gatehouse_attestor_cloud_iid::mint::{self, Sign};
use gatehouse_proto::cloud_iid::{CLOUD_IID, CloudIidEvidence};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::cloud_iid::{cloud_join, keys};
use crate::common::{Backend, HostOptions, TestHost, backends};

const KEY: &str = "providers.gcp.jwks";

/// A key server on loopback: answers every request with the status and body it is set to,
/// and counts the requests.
struct KeyServer {
    port: u16,
    answer: Arc<Mutex<(u16, String)>>,
    hits: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl KeyServer {
    async fn start(body: &Value) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let answer = Arc::new(Mutex::new((200, body.to_string())));
        let hits = Arc::new(AtomicUsize::new(0));
        let (a, h) = (answer.clone(), hits.clone());
        let task = tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let (a, h) = (a.clone(), h.clone());
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match conn.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    h.fetch_add(1, Ordering::SeqCst);
                    let (status, body) = a.lock().unwrap().clone();
                    let response = format!(
                        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = conn.write_all(response.as_bytes()).await;
                    let _ = conn.shutdown().await;
                });
            }
        });
        Self {
            port,
            answer,
            hits,
            task,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/oauth2/v3/certs", self.port)
    }

    fn answer(&self, status: u16, body: &str) {
        *self.answer.lock().unwrap() = (status, body.to_owned());
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

impl Drop for KeyServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// cloud-iid trusting Google's keys from `url` (no inline JWKS), admitting project `acct-gcp`.
fn options(backend: Backend, url: &str, every_seconds: u64) -> HostOptions {
    let mut config = keys().config(10 * 60_000);
    let gcp = config["providers"]["gcp"].as_object_mut().unwrap();
    gcp.remove("jwks");
    config["resolve"] = json!([{ "provider": "gcp", "account": "acct-gcp", "tenantId": "root" }]);
    HostOptions {
        attestor_config: vec![(CLOUD_IID.into(), config)],
        fetch: vec![(
            CLOUD_IID.into(),
            KEY.into(),
            FetchSource {
                url: url.to_owned(),
                every_seconds,
                ca_file: None,
                format: FetchFormat::Json,
            },
        )],
        ..HostOptions::new(backend)
    }
}

/// A GCE identity token for instance `instance`, signed by `key` under `kid`.
async fn token(host: &TestHost, instance: &str, kid: &str, key: &mint::RsaKey) -> CloudIidEvidence {
    keys().gcp_with(
        "acct-gcp",
        instance,
        host.now().await,
        Some(kid),
        Sign::Rs256(key),
    )
}

async fn admitted(host: &TestHost, evidence: CloudIidEvidence, what: &str) {
    if let Err(e) = cloud_join(host, evidence).await {
        panic!("{what}: {e}");
    }
}

async fn refused(host: &TestHost, evidence: CloudIidEvidence, what: &str) {
    assert!(
        cloud_join(host, evidence).await.is_err(),
        "{what}: admitted"
    );
}

/// Waits (10 s at most) until an event of `kind` is recorded after the first `seen` events.
async fn event_after(host: &TestHost, seen: usize, kind: &str) -> gatehouse::store::EventRow {
    for _ in 0..100 {
        if let Some(e) = host
            .events()
            .await
            .into_iter()
            .skip(seen)
            .find(|e| e.kind == kind)
        {
            return e;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no {kind} event");
}

async fn refreshes(backend: Backend) {
    let old = &keys().gcp_key;
    let new = mint::rsa_key();
    let server = KeyServer::start(&mint::jwks(&[mint::rsa_jwk(old, "gcp-1")])).await;
    let host = TestHost::start_with(options(backend, &server.url(), 1)).await;
    admitted(
        &host,
        token(&host, "i-1", "gcp-1", old).await,
        "the fetched key",
    )
    .await;
    refused(
        &host,
        token(&host, "i-2", "gcp-2", &new).await,
        "a key not published yet",
    )
    .await;

    // Google rotates: gcp-2 published alone. Within a refresh it is admitted and gcp-1 is not.
    let seen = host.events().await.len();
    server.answer(
        200,
        &mint::jwks(&[mint::rsa_jwk(&new, "gcp-2")]).to_string(),
    );
    let replaced = event_after(&host, seen, "attestor.replaced").await;
    assert_eq!(replaced.attestor.as_deref(), Some(CLOUD_IID));
    admitted(
        &host,
        token(&host, "i-3", "gcp-2", &new).await,
        "the rotated-in key",
    )
    .await;
    refused(
        &host,
        token(&host, "i-4", "gcp-1", old).await,
        "the rotated-out key",
    )
    .await;

    // The key server fails: recorded once, the last good keys keep serving.
    let seen = host.events().await.len();
    server.answer(500, "oops");
    let failed = event_after(&host, seen, "attestor.fetch-failed").await;
    assert_eq!(failed.attestor.as_deref(), Some(CLOUD_IID));
    assert_eq!(failed.payload["key"], KEY);
    assert!(
        failed.payload["why"].as_str().unwrap().contains("500"),
        "{failed:?}"
    );
    admitted(
        &host,
        token(&host, "i-5", "gcp-2", &new).await,
        "after a failed fetch",
    )
    .await;

    // A JWKS the attestor's configure refuses (no keys): recorded, not applied.
    let seen = host.events().await.len();
    server.answer(200, r#"{"keys": []}"#);
    let refusal = event_after(&host, seen, "attestor.fetch-refused").await;
    assert!(
        refusal.payload["why"].as_str().unwrap().contains("jwks"),
        "{refusal:?}"
    );
    admitted(
        &host,
        token(&host, "i-6", "gcp-2", &new).await,
        "after a refused JWKS",
    )
    .await;
    assert!(
        host.events()
            .await
            .iter()
            .skip(seen)
            .all(|e| e.kind != "attestor.replaced"),
        "a refused value replaced the attestor"
    );

    // A body that is not JSON, and one over the 1 MiB cap: each recorded, neither applied.
    for (i, (body, why)) in [
        ("<html>moved</html>".to_owned(), "not JSON"),
        (format!("\"{}\"", "k".repeat(1 << 20)), "over"),
    ]
    .into_iter()
    .enumerate()
    {
        let seen = host.events().await.len();
        server.answer(200, &body);
        let failed = event_after(&host, seen, "attestor.fetch-failed").await;
        assert!(
            failed.payload["why"].as_str().unwrap().contains(why),
            "{failed:?}"
        );
        admitted(
            &host,
            token(&host, &format!("i-bad-{i}"), "gcp-2", &new).await,
            why,
        )
        .await;
    }

    // Joins never fetch: with the key server gone they go on.
    drop(server);
    for i in 0..3 {
        let instance = format!("i-gone-{i}");
        admitted(
            &host,
            token(&host, &instance, "gcp-2", &new).await,
            "key server gone",
        )
        .await;
    }
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetched_keys_are_refreshed_outside_the_join_and_the_last_good_set_kept() {
    for backend in backends() {
        refreshes(backend).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_never_waits_on_the_key_server_and_a_restart_uses_the_kept_copy() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let old = &keys().gcp_key;
    let server = KeyServer::start(&mint::jwks(&[mint::rsa_jwk(old, "gcp-1")])).await;
    // A first start with no copy and no key server fails and names both.
    let nowhere = "http://127.0.0.1:9/certs";
    let e = match TestHost::try_start_with(options(Backend::Sqlite, nowhere, 3600)).await {
        Ok(_) => panic!("started without its keys"),
        Err(e) => e,
    };
    assert!(e.contains("no copy in") && e.contains("127.0.0.1:9"), "{e}");

    let host = TestHost::start_with(HostOptions {
        data_dir: Some(data.clone()),
        ..options(Backend::Sqlite, &server.url(), 3600)
    })
    .await;
    assert_eq!(server.hits(), 1, "the start fetches once");
    for i in 0..5 {
        let instance = format!("i-{i}");
        admitted(&host, token(&host, &instance, "gcp-1", old).await, "a join").await;
    }
    assert_eq!(server.hits(), 1, "a join fetched");
    host.stop().await;

    // Restarted with the key server down: the kept copy serves.
    drop(server);
    let host = TestHost::start_with(HostOptions {
        data_dir: Some(data),
        ..options(Backend::Sqlite, nowhere, 3600)
    })
    .await;
    admitted(
        &host,
        token(&host, "i-after", "gcp-1", old).await,
        "after the restart",
    )
    .await;
    host.stop().await;
}
