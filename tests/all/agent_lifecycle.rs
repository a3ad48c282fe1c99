//! The agent's certificate lifecycle against a real host: a token join, renewals over mTLS
//! with the current certificate, and, after the certificate expired while the host was down,
//! an x509pop re-join by the renewal loop itself (same node, next identity generation), after
//! which it renews again.

use std::path::Path;
use std::time::{Duration, SystemTime};

use gatehouse_agent::{
    Action, JoinClient, JoinOptions, Lifecycle, LifecycleError, LifecycleEvent, NodeKey,
    RenewPolicy, TokenProducer, join, load_identity, write_identity,
};
use gatehouse_proto::Role;
use tokio::sync::{mpsc, oneshot};

use crate::common::{Backend, HostOptions, TestHost};

/// Certificate lifetime on the test host.
const TTL_SECONDS: u32 = 6;

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        .try_into()
        .unwrap()
}

async fn generation(host: &TestHost, node_id: &str) -> u32 {
    let mut tx = host.running.db.begin().await.unwrap();
    let node = tx.node(node_id).await.unwrap().expect("the node exists");
    tx.commit().await.unwrap();
    node.identity_generation
}

/// What the loop reported, and waiting for the next event of a kind.
struct Events {
    rx: mpsc::UnboundedReceiver<LifecycleEvent>,
    seen: Vec<LifecycleEvent>,
}

impl Events {
    async fn until(
        &mut self,
        what: &str,
        host: Option<&TestHost>,
        want: impl Fn(&LifecycleEvent) -> bool,
    ) -> LifecycleEvent {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Ok(Some(e)) => {
                    self.seen.push(e.clone());
                    if want(&e) {
                        return e;
                    }
                }
                Ok(None) => panic!("the loop ended while waiting for {what}: {:?}", self.seen),
                Err(_) => {
                    let reasons = match host {
                        Some(h) => h.refusal_reasons().await,
                        None => vec![],
                    };
                    panic!(
                        "no {what} within 30 s; the loop reported {:?}; the host refused with {reasons:?}",
                        self.seen
                    );
                }
            }
        }
    }
}

fn is_renewed(e: &LifecycleEvent) -> bool {
    matches!(e, LifecycleEvent::Renewed { .. })
}

fn serial_of(dir: &Path) -> String {
    load_identity(dir).unwrap().cert.serial
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renews_and_rejoins_with_x509pop_after_expiring_while_the_host_was_down() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = HostOptions {
        cert_ttl_seconds: Some(TTL_SECONDS),
        data_dir: Some(tmp.path().join("host")),
        listen: Some(format!("127.0.0.1:{}", free_port())),
        ..HostOptions::new(Backend::Sqlite)
    };
    let host = TestHost::start_with(opts.clone()).await;
    let (url, trust) = (host.url(), host.trust.clone());

    // A token join, as `gatehouse-agent join` does it.
    let dir = tmp.path().join("agent");
    let key = NodeKey::generate().unwrap();
    let token = host.create_token("node", 1).await;
    let joined = join(
        &JoinClient::new(&url, &trust).unwrap(),
        &trust,
        &mut TokenProducer::new(Role::Node),
        Some(&token),
        &key,
        &JoinOptions::default(),
    )
    .await
    .unwrap();
    write_identity(&dir, &key, &joined).unwrap();
    let node_id = joined.node_id.clone();
    let first = load_identity(&dir).unwrap();
    let generation0 = generation(&host, &node_id).await;

    // The loop: renew with half the TTL left (counted from the issuance, not the back-dated
    // notBefore), back off 200 ms to 1 s.
    let policy = RenewPolicy {
        renew_when_left: 0.5,
        backoff_min: Duration::from_millis(200),
        backoff_max: Duration::from_secs(1),
        ..RenewPolicy::default()
    };
    let (tx, rx) = mpsc::unbounded_channel();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let lifecycle = Lifecycle::new(&url, trust.clone(), dir.clone(), policy).with_events(tx);
    let task = tokio::spawn(async move {
        lifecycle
            .run(async {
                let _ = stop_rx.await;
            })
            .await
    });
    let mut events = Events { rx, seen: vec![] };

    // 1. It renews: a new certificate and key for the same node, same identity generation.
    events.until("renewal", Some(&host), is_renewed).await;
    let renewed = load_identity(&dir).unwrap();
    assert_eq!(renewed.identity.node_id, node_id);
    assert_eq!(renewed.cert.node_id, node_id);
    assert_ne!(renewed.cert.serial, first.cert.serial);
    assert_ne!(renewed.cert.spki_der, first.cert.spki_der, "a new key");
    assert_eq!(renewed.key.spki_der(), renewed.cert.spki_der);
    assert_eq!(renewed.identity.attestor, "join-token");
    assert_eq!(generation(&host, &node_id).await, generation0);

    // 2. The host goes down until the certificate has expired; the loop keeps trying.
    host.stop().await;
    let last = load_identity(&dir).unwrap();
    let expired_at = last.cert.not_after_ms + 1500;
    let wait = u64::try_from(expired_at - now_ms()).unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(wait)).await;
    assert_eq!(
        serial_of(&dir),
        last.cert.serial,
        "nothing renewed while down"
    );

    // 3. Back up on the same database and port: the loop re-joins by itself with x509pop.
    let host = TestHost::start_with(opts).await;
    events
        .until("x509pop re-join", Some(&host), |e| {
            matches!(e, LifecycleEvent::Rejoined { .. })
        })
        .await;
    assert!(
        events.seen.iter().any(|e| matches!(
            e,
            LifecycleEvent::Failed {
                action: Action::Rejoin,
                ..
            }
        )),
        "it tried to re-join while the host was down: {:?}",
        events.seen
    );
    let rejoined = load_identity(&dir).unwrap();
    assert_eq!(rejoined.identity.node_id, node_id, "the same node");
    assert_eq!(rejoined.identity.attestor, "x509pop");
    assert_ne!(rejoined.cert.spki_der, last.cert.spki_der, "a new key");
    assert!(rejoined.cert.not_after_ms > now_ms());
    assert_eq!(generation(&host, &node_id).await, generation0 + 1);
    let joins: Vec<_> = host
        .events()
        .await
        .into_iter()
        .filter(|e| e.kind == "node.joined" && e.node_id.as_deref() == Some(node_id.as_str()))
        .collect();
    assert_eq!(
        joins.last().and_then(|e| e.attestor.as_deref()),
        Some("x509pop"),
        "{joins:?}"
    );

    // 4. And it goes on renewing the new certificate.
    events
        .until("renewal after the re-join", Some(&host), is_renewed)
        .await;
    let again = load_identity(&dir).unwrap();
    assert_eq!(again.identity.node_id, node_id);
    assert_ne!(again.cert.serial, rejoined.cert.serial);
    assert_eq!(generation(&host, &node_id).await, generation0 + 1);

    stop_tx.send(()).unwrap();
    task.await.unwrap().unwrap();
    host.stop().await;
}

/// A node whose identity the operator revoked: the renewal is refused, the x509pop re-join
/// the loop then tries is refused too, and the loop stops with the recovery command instead
/// of retrying forever; nothing was issued, and a fresh certificate was never installed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_node_stops_with_the_recovery_hint() {
    for backend in crate::common::backends() {
        let host = TestHost::start(backend).await;
        let (url, trust) = (host.url(), host.trust.clone());
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("agent");
        let key = NodeKey::generate().unwrap();
        let token = host.create_token("node", 1).await;
        let joined = join(
            &JoinClient::new(&url, &trust).unwrap(),
            &trust,
            &mut TokenProducer::new(Role::Node),
            Some(&token),
            &key,
            &JoinOptions::default(),
        )
        .await
        .unwrap();
        write_identity(&dir, &key, &joined).unwrap();
        let node_id = joined.node_id.clone();
        let before = load_identity(&dir).unwrap();
        let resp = host
            .http()
            .post(format!("{url}/v1/admin/nodes/{node_id}/revoke-identity"))
            .bearer_auth(&host.admin_key)
            .send()
            .await
            .unwrap();
        assert!(resp.status().is_success(), "revoke: {}", resp.status());
        let certs_before = host
            .events()
            .await
            .iter()
            .filter(|e| matches!(e.kind.as_str(), "node.renewed" | "node.joined"))
            .count();

        // Renew at once; a backoff that would retry many times within the test's patience.
        let policy = RenewPolicy {
            renew_when_left: 1.0,
            backoff_min: Duration::from_millis(50),
            backoff_max: Duration::from_millis(100),
            min_interval: Duration::ZERO,
            ..RenewPolicy::default()
        };
        let (tx, mut rx) = mpsc::unbounded_channel();
        let lifecycle = Lifecycle::new(&url, trust.clone(), dir.clone(), policy)
            .with_trust_file(tmp.path().join("trust.json"))
            .with_events(tx);
        let ended = tokio::time::timeout(
            Duration::from_secs(30),
            lifecycle.run(std::future::pending()),
        )
        .await
        .expect("the loop stopped by itself");
        let Err(LifecycleError::CannotRejoin {
            node_id: stopped,
            reason,
            recovery,
        }) = ended
        else {
            panic!("{ended:?}")
        };
        assert_eq!(stopped, node_id);
        assert!(reason.contains("x509pop re-join"), "{reason}");
        assert_eq!(
            recovery,
            format!(
                "gatehouse-agent join --reset --yes --server {url} --ca {} --out {} \
                 --token-file NEW-TOKEN",
                tmp.path().join("trust.json").display(),
                dir.display()
            )
        );
        let full = LifecycleError::CannotRejoin {
            node_id: stopped,
            reason,
            recovery,
        }
        .to_string();
        assert!(
            full.contains("recover with: gatehouse-agent join --reset --yes"),
            "{full}"
        );
        // One refused renewal, one refused re-join: no retries in between.
        let mut failed = vec![];
        while let Ok(e) = rx.try_recv() {
            failed.push(e);
        }
        assert!(failed.is_empty(), "a refusal is not retried: {failed:?}");
        let renew_refusals = host
            .events()
            .await
            .iter()
            .filter(|e| e.kind == "security.renew.refused")
            .count();
        assert_eq!(renew_refusals, 1);
        assert_eq!(host.refusal_reasons().await.len(), 1, "the x509pop re-join");
        // Nothing issued, nothing installed.
        let certs_after = host
            .events()
            .await
            .iter()
            .filter(|e| matches!(e.kind.as_str(), "node.renewed" | "node.joined"))
            .count();
        assert_eq!(certs_after, certs_before);
        assert_eq!(serial_of(&dir), before.cert.serial);
        host.stop().await;
    }
}
