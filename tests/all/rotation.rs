//! Key rotation (`gatehouse pki rotate all`) against a real host with agents renewing across
//! it: before, during and after the overlap window.
//!
//! The bundle is rotated while the host serves, and a SIGHUP puts it in place: no restart.
//! What must hold is that no agent is ever refused, none has to re-join, each moves to the new
//! node CA and pins the new keys, and after the window the old keys are refused: a token
//! sealed to the old encryption key (`retired-encryption-key`, nothing spent), a certificate
//! of the old CA at renewal (`retired-ca`) and through x509pop. SQLite and PostgreSQL.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use gatehouse::store::NodeRole;
use gatehouse_agent::{
    JoinClient, JoinError, JoinOptions, Lifecycle, LifecycleEvent, NodeKey, RenewClient,
    RenewError, RenewPolicy, TRUST_FILE, TokenProducer, join, load_identity, write_identity,
};
use gatehouse_proto::{JoinTrust, Role, TokenString};
use tokio::sync::{mpsc, oneshot};

use crate::common::{Backend, HostOptions, TestHost, backends, token_join};
use crate::x509pop::{Held, pop_join};

/// Certificate lifetime on the test host.
const TTL_SECONDS: u32 = 6;
/// The overlap window: at least the certificate lifetime, as `pki rotate --config` demands.
const OVERLAP: &str = "12s";

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        .try_into()
        .unwrap()
}

/// A machine that joined with `token` as `gatehouse-agent join` does, into `dir`.
async fn join_into(host: &TestHost, trust: &JoinTrust, token: &TokenString, dir: &Path) -> String {
    let (key, joined) = token_join(&host.url(), trust, token).await.unwrap();
    write_identity(dir, &key, &joined).unwrap();
    joined.node_id
}

/// A running renewal loop and what it reported.
struct Agent {
    dir: PathBuf,
    rx: mpsc::UnboundedReceiver<LifecycleEvent>,
    seen: Vec<LifecycleEvent>,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), gatehouse_agent::LifecycleError>>,
}

impl Agent {
    fn start(url: &str, trust: &JoinTrust, dir: PathBuf) -> Self {
        let policy = RenewPolicy {
            // Every ~2 s with a 6 s lifetime.
            renew_when_left: 0.7,
            backoff_min: Duration::from_millis(200),
            backoff_max: Duration::from_secs(1),
            ..RenewPolicy::default()
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let (stop, stopped) = oneshot::channel::<()>();
        let lifecycle = Lifecycle::new(url, trust.clone(), dir.clone(), policy).with_events(tx);
        let task = tokio::spawn(async move {
            lifecycle
                .run(async {
                    let _ = stopped.await;
                })
                .await
        });
        Self {
            dir,
            rx,
            seen: vec![],
            stop,
            task,
        }
    }

    /// Waits for a renewal after which `done` holds (its files are written before it is
    /// reported); panics on a re-join, which a rotation must never need, and on a failed
    /// attempt: the host never stops serving.
    async fn renewed_until(&mut self, what: &str, done: impl Fn(&Self) -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Ok(Some(event)) => {
                    assert!(
                        !matches!(
                            event,
                            LifecycleEvent::Rejoined { .. } | LifecycleEvent::Failed { .. }
                        ),
                        "{event:?} after {:?}",
                        self.seen
                    );
                    self.seen.push(event.clone());
                    if matches!(event, LifecycleEvent::Renewed { .. }) && done(self) {
                        return;
                    }
                }
                Ok(None) => panic!("the loop ended: {:?}", self.seen),
                Err(_) => panic!("no renewal {what} within 30 s: {:?}", self.seen),
            }
        }
    }

    fn has_stored_trust(&self) -> bool {
        self.dir.join(TRUST_FILE).exists()
    }

    /// The trust the agent stored from the host's signed responses.
    fn stored_trust(&self) -> JoinTrust {
        serde_json::from_str(&std::fs::read_to_string(self.dir.join(TRUST_FILE)).unwrap()).unwrap()
    }

    /// Whether its certificate was issued by the node CA `ca_der`.
    fn issued_by(&self, ca_der: &[u8]) -> bool {
        let leaf = load_identity(&self.dir).unwrap().chain[0].clone();
        gatehouse::pki::verify::verify_chain(&[leaf], &[ca_der.to_vec()], now_ms()).is_ok()
    }

    async fn stop(self) {
        self.stop.send(()).unwrap();
        self.task.await.unwrap().unwrap();
    }
}

async fn served_trust(host: &TestHost) -> JoinTrust {
    host.http()
        .get(format!("{}/v1/trust", host.url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Renews `chain` (with `key`) once, as an agent pinning `trust` would.
async fn renew_once(
    host: &TestHost,
    trust: &JoinTrust,
    node_id: &str,
    key: &NodeKey,
    chain: &[Vec<u8>],
) -> Result<(), RenewError> {
    RenewClient::new(&host.url(), trust, key, chain)
        .unwrap()
        .renew(trust, node_id, &NodeKey::generate().unwrap())
        .await
        .map(|_| ())
}

async fn renew_refusals(host: &TestHost) -> Vec<String> {
    host.events()
        .await
        .into_iter()
        .filter(|e| e.kind == "security.renew.refused")
        .filter_map(|e| e.reason)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_renew_across_a_rotation_of_every_key_and_the_old_keys_are_refused_after_it() {
    for backend in backends() {
        rotation(backend).await;
    }
}

async fn rotation(backend: Backend) {
    let tmp = tempfile::tempdir().unwrap();
    let mut host = TestHost::start_with(HostOptions {
        cert_ttl_seconds: Some(TTL_SECONDS),
        ..HostOptions::new(backend)
    })
    .await;
    let data = host.data.clone();
    // What machines were given before the rotation (baked into their images, say).
    let old_trust = host.trust.clone();
    let old_ca = host.running.pki.get().node_ca_der().to_vec();
    assert_eq!(old_trust.sequence, 0);
    // `/v1/trust` publishes the TLS CA the dev host wrote into machines' trust files (not the
    // server's leaf, which a renewed server certificate would change).
    assert_eq!(served_trust(&host).await, old_trust);

    // Two agents keep their certificates renewed.
    let mut agents = Vec::new();
    for i in 0..2 {
        let dir = tmp.path().join(format!("agent{i}"));
        let token = host.create_token("node", 1).await;
        join_into(&host, &old_trust, &token, &dir).await;
        agents.push(Agent::start(&host.url(), &old_trust, dir));
    }
    // A node whose certificate outlives the window: it stays offline through it.
    let stale_dir = tmp.path().join("stale");
    let stale_token = host.create_token("node", 1).await;
    let stale_node = join_into(&host, &old_trust, &stale_token, &stale_dir).await;
    let stale_key = load_identity(&stale_dir).unwrap().key;
    let now = host.now().await;
    let stale_leaf = host
        .issue_cert(
            &stale_node,
            &stale_key.spki_der(),
            NodeRole::Node,
            1,
            now - 60_000,
            now + 3_600_000,
        )
        .await;
    let stale_chain = vec![stale_leaf, old_ca.clone()];
    // Two nodes offline with certificates of the old CA that expired an hour ago: one comes
    // back through x509pop inside the window, the other only after it.
    let back_during = Held::offline(&host).await;
    let back_after = Held::offline(&host).await;
    for agent in &mut agents {
        agent.renewed_until("before the rotation", |_| true).await;
    }

    // The rotation: the bundle is rewritten while the host serves, and a SIGHUP puts it in
    // place; the agents go on renewing throughout.
    let cli = gatehouse::cli::Cli::try_parse_args([
        "gatehouse",
        "pki",
        "rotate",
        "all",
        "--bundle",
        data.join("pki.json").to_str().unwrap(),
        "--secret-file",
        data.join("secret").to_str().unwrap(),
        "--overlap",
        OVERLAP,
    ])
    .unwrap();
    let mut out = Vec::new();
    gatehouse::cli::execute(cli, &mut out).await.unwrap();
    let printed = String::from_utf8(out).unwrap();
    assert!(printed.contains("node-ca: rotated"), "{printed}");
    let reloaded = host.sighup().await;
    assert_eq!(reloaded.pki_rotated, Some(1), "{:?}", reloaded.errors);
    assert!(reloaded.errors.is_empty(), "{:?}", reloaded.errors);
    assert_eq!(
        host.sighup().await.pki_rotated,
        None,
        "the same bundle again"
    );
    let pki = host.running.pki.get();
    let new_ca = pki.node_ca_der().to_vec();
    assert_ne!(new_ca, old_ca);
    let retire_at = pki.retiring()[0].1;
    assert!(pki.retiring().iter().all(|(_, at)| *at == retire_at));

    // In the window: both CAs and both signing keys are published, the new encryption key
    // is advertised.
    let during = served_trust(&host).await;
    assert_eq!(during.sequence, 1);
    assert_eq!(
        during.other_join_signing_keys,
        std::slice::from_ref(&old_trust.join_signing_key)
    );
    assert_ne!(during.join_signing_key, old_trust.join_signing_key);
    assert_ne!(during.join_encryption_key, old_trust.join_encryption_key);
    assert!(during.node_ca_pem.contains(&old_trust.node_ca_pem));
    let bundle: serde_json::Value = host
        .http()
        .get(format!("{}/v1/trust/spiffe-bundle", host.url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(bundle["keys"].as_array().unwrap().len(), 2, "{bundle}");
    let crls = host
        .http()
        .get(format!("{}/v1/crl.pem", host.url()))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        crls.matches("-----BEGIN X509 CRL-----").count(),
        2,
        "{crls}"
    );

    // Every agent renews onto the new CA and pins the new keys, vouched for by the old key.
    for agent in &mut agents {
        agent
            .renewed_until("by the new CA", |a| a.issued_by(&new_ca))
            .await;
        assert!(agent.has_stored_trust());
        let stored = agent.stored_trust();
        assert_eq!(stored.sequence, 1);
        assert_eq!(stored.join_signing_key, during.join_signing_key);
        assert_eq!(stored.tls_ca_pem, old_trust.tls_ca_pem);
    }
    // A machine with the old trust file still joins: its token sealed to the old key opens,
    // and it takes the new keys from the answer.
    let token = host.create_token("node", 1).await;
    let key = NodeKey::generate().unwrap();
    let joined = join(
        &JoinClient::new(&host.url(), &old_trust).unwrap(),
        &old_trust,
        &mut TokenProducer::new(Role::Node),
        Some(&token),
        &key,
        &JoinOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(joined.trust.as_ref().map(|t| t.sequence), Some(1));
    // An expired certificate of the old CA re-joins through x509pop while the window lasts.
    let rejoined = pop_join(&host, &mut back_during.proof(&host, Role::Node).await)
        .await
        .unwrap();
    assert_eq!(rejoined.node_id, back_during.node_id);

    // After the window.
    let wait = u64::try_from(retire_at + 500 - now_ms()).unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(wait)).await;
    let after = served_trust(&host).await;
    assert!(after.other_join_signing_keys.is_empty());
    assert!(!after.node_ca_pem.contains(&old_trust.node_ca_pem));
    // The agents go on renewing, now under the new signing key, and drop the old keys.
    for agent in &mut agents {
        agent
            .renewed_until("under the new signing key", |a| {
                a.stored_trust().other_join_signing_keys.is_empty()
            })
            .await;
        let stored = agent.stored_trust();
        assert_eq!(stored.node_ca_pem, after.node_ca_pem);
        assert!(agent.issued_by(&new_ca));
    }

    // An agent restarted with its old trust file (as `gatehouse-agent run --ca` is) pins the
    // keys it stored and goes on renewing.
    let restarted = agents.remove(0);
    let dir = restarted.dir.clone();
    restarted.stop().await;
    let pinned = gatehouse_agent::pinned_trust(&dir, old_trust.clone()).unwrap();
    assert_eq!(pinned.join_signing_key, after.join_signing_key);
    let mut restarted = Agent::start(&host.url(), &pinned, dir);
    restarted
        .renewed_until("after a restart", |a| a.issued_by(&new_ca))
        .await;
    agents.push(restarted);

    // A token sealed to the retired encryption key is refused by name, and nothing is spent:
    // the same token joins with the current trust.
    let token = host.create_token("node", 1).await;
    let refused = join(
        &JoinClient::new(&host.url(), &old_trust).unwrap(),
        &old_trust,
        &mut TokenProducer::new(Role::Node),
        Some(&token),
        &NodeKey::generate().unwrap(),
        &JoinOptions::default(),
    )
    .await
    .unwrap_err();
    assert!(matches!(refused, JoinError::Denied), "{refused}");
    assert_eq!(
        host.refusal_reasons().await.last().map(String::as_str),
        Some("retired-encryption-key")
    );
    let nodes_before = host
        .events()
        .await
        .iter()
        .filter(|e| e.kind == "node.joined")
        .count();
    let current = after.clone();
    join_into(&host, &current, &token, &tmp.path().join("late")).await;
    let nodes_after = host
        .events()
        .await
        .iter()
        .filter(|e| e.kind == "node.joined")
        .count();
    assert_eq!(nodes_after, nodes_before + 1);

    // A live certificate of the retired CA is refused at renewal, with nothing issued.
    let denied = renew_once(&host, &current, &stale_node, &stale_key, &stale_chain)
        .await
        .unwrap_err();
    assert!(matches!(denied, RenewError::Denied), "{denied}");
    assert_eq!(renew_refusals(&host).await, ["retired-ca"]);
    let mut tx = host.running.db.begin().await.unwrap();
    let certs = tx.node_certs(&stale_node).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(
        certs.len(),
        2,
        "its join's and the long one; none issued since"
    );

    // After the window a certificate of the retired CA is no longer one of this host's, for
    // an attestor either: x509pop finds no such certificate, and nothing is issued.
    let denied = pop_join(&host, &mut back_after.proof(&host, Role::Node).await)
        .await
        .unwrap_err();
    assert!(matches!(denied, JoinError::Denied), "{denied}");
    assert_eq!(
        host.refusal_reasons().await.last().map(String::as_str),
        Some("unknown-certificate")
    );
    let mut tx = host.running.db.begin().await.unwrap();
    let certs = tx.node_certs(&back_after.node_id).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(certs.len(), 2, "its join's and the expired one");

    // No agent was ever refused, and none re-joined.
    for agent in agents {
        agent.stop().await;
    }
    host.stop().await;
}
