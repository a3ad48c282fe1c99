//! The third-party path end to end, as an author and an operator take it: the example attestor
//! (`examples/attestor`, built from its own workspace against the SDK) dropped into a dev
//! host's `attestors_dir` (the one `serve --dev` writes into its config) and loaded at start;
//! a machine with a real SSH host key (made by `ssh-keygen`) joining through it with the stock
//! agent's `ExternalProducer` (what `gatehouse-agent join --evidence-file --producer` runs),
//! whose producer command is the example's machine side (`examples/agent`), which signs the
//! challenge with `ssh-keygen -Y sign`. Then: a key the operator did not allow, an answer
//! signed by another key, and a re-join that re-keys the same node by its binding. And the
//! generic `--evidence-file` path on a one-round attestor (cloud-iid).
//! SQLite and PostgreSQL.

use std::path::{Path, PathBuf};
use std::process::Command;

use gatehouse_agent::{
    ExternalProducer, JoinClient, JoinError, JoinOptions, Joined, NodeKey, join,
};
use gatehouse_attestor_cloud_iid::mint::{self, Providers};
use gatehouse_proto::Role;
use gatehouse_proto::cloud_iid::{CLOUD_IID, Provider};
use serde_json::json;

use crate::common::{Backend, HostOptions, TestHost, backends};

/// The example's id.
const ATTESTOR: &str = "ssh-host-key";

/// A machine: an SSH host key pair in a directory, made by `ssh-keygen` as a distribution's
/// first boot makes it.
struct Machine {
    _dir: tempfile::TempDir,
    private: PathBuf,
}

impl Machine {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let private = dir.path().join("ssh_host_ed25519_key");
        let status = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", "host", "-f"])
            .arg(&private)
            .status()
            .expect("ssh-keygen (openssh-client, scripts/setup.sh installs it)");
        assert!(status.success());
        Machine { _dir: dir, private }
    }

    fn public(&self) -> PathBuf {
        self.private.with_extension("pub")
    }

    /// The `.pub` line the operator allows.
    fn line(&self) -> String {
        std::fs::read_to_string(self.public())
            .unwrap()
            .trim()
            .to_owned()
    }

    /// Round one's evidence, as `ssh-host-key-agent evidence` prints it.
    fn evidence(&self) -> Vec<u8> {
        let out = Command::new(gatehouse_test_artifacts::EXAMPLE_AGENT)
            .arg("evidence")
            .arg("--host-key")
            .arg(self.public())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// The producer command, answering with `key`'s private half.
    fn producer(key: &Path) -> String {
        format!(
            "{} answer --host-key {}",
            gatehouse_test_artifacts::EXAMPLE_AGENT,
            key.display()
        )
    }
}

/// A dev host whose data directory holds the example in `attestors/` before it starts (the
/// dev config names that directory), configured to allow `allowed`.
async fn host(backend: Backend, data: &Path, allowed: &[&Machine]) -> TestHost {
    let dir = data.join("attestors");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(
        gatehouse_test_artifacts::EXAMPLE_ATTESTOR,
        dir.join("ssh-host-key.wasm"),
    )
    .unwrap();
    let keys: Vec<String> = allowed.iter().map(|m| m.line()).collect();
    TestHost::start_with(HostOptions {
        data_dir: Some(data.to_owned()),
        attestor_config: vec![(
            ATTESTOR.into(),
            json!({ "tenant": "root", "host_keys": keys }),
        )],
        ..HostOptions::new(backend)
    })
    .await
}

/// One join through the example with `evidence` and the producer answering with `key`.
async fn ssh_join(host: &TestHost, evidence: Vec<u8>, key: &Path) -> Result<Joined, JoinError> {
    let mut producer =
        ExternalProducer::new(ATTESTOR, Role::Node, evidence, Some(Machine::producer(key)));
    join(
        &JoinClient::new(&host.url(), &host.trust)?,
        &host.trust,
        &mut producer,
        None,
        &NodeKey::generate()?,
        &JoinOptions::default(),
    )
    .await
}

async fn newest_refusal(host: &TestHost) -> Option<String> {
    host.events()
        .await
        .into_iter()
        .rev()
        .find(|e| e.kind == "security.join.refused")
        .and_then(|e| e.reason)
}

async fn example_joins(backend: Backend) {
    let tmp = tempfile::tempdir().unwrap();
    let machine = Machine::new();
    let stranger = Machine::new();
    let host = host(backend, &tmp.path().join("host"), &[&machine]).await;

    // The machine joins: challenge, ssh-keygen's signature, admission, bound to its key.
    let joined = ssh_join(&host, machine.evidence(), &machine.private)
        .await
        .unwrap_or_else(|e| panic!("{backend:?}: {e}"));
    assert_eq!(joined.attestor, ATTESTOR);
    let audit = host.audits().await.pop().unwrap();
    assert_eq!(audit.attestor, ATTESTOR);
    assert_eq!(audit.node_id.as_deref(), Some(joined.node_id.as_str()));
    assert!(audit.subject.as_deref().unwrap_or("").starts_with("ssh:"));

    // A key the operator did not allow: refused in round one.
    let refused = ssh_join(&host, stranger.evidence(), &stranger.private).await;
    assert!(matches!(refused, Err(JoinError::Denied)), "{refused:?}");
    assert_eq!(
        newest_refusal(&host).await.as_deref(),
        Some("unknown-host-key")
    );

    // The allowed key's evidence, answered by another key: refused in round two.
    let forged = ssh_join(&host, machine.evidence(), &stranger.private).await;
    assert!(matches!(forged, Err(JoinError::Denied)), "{forged:?}");
    assert_eq!(
        newest_refusal(&host).await.as_deref(),
        Some("bad-signature")
    );

    // The machine again, with a new node key: the binding names its node, which it re-keys.
    // No reclaim grant is needed: proving a binding the node holds (of the attestor's own
    // kind) is the host's proof that this is that node.
    let again = ssh_join(&host, machine.evidence(), &machine.private)
        .await
        .unwrap_or_else(|e| panic!("{backend:?} re-join: {e}"));
    assert_eq!(
        again.node_id, joined.node_id,
        "the same machine, the same node"
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn third_party_example_joins_through_a_dropped_in_component() {
    for backend in backends() {
        example_joins(backend).await;
    }
}

/// `--evidence-file` on a one-round attestor: the file's bytes are the evidence, and the join
/// needs no producer (cloud-iid stands in for any one-round attestor).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evidence_file_joins_a_one_round_attestor() {
    let keys = Providers::new();
    let mut config = keys.config(10 * 60_000);
    config["resolve"] = json!([{ "provider": "gcp", "account": "acct-gcp", "tenantId": "root" }]);
    let host = TestHost::start_with(HostOptions {
        attestor_config: vec![(CLOUD_IID.into(), config)],
        ..HostOptions::new(Backend::Sqlite)
    })
    .await;
    let evidence = keys.evidence(Provider::Gcp, "acct-gcp", "inst-9", host.now().await);
    let mut producer = ExternalProducer::new(CLOUD_IID, Role::Node, mint::bytes(&evidence), None);
    let joined = join(
        &JoinClient::new(&host.url(), &host.trust).unwrap(),
        &host.trust,
        &mut producer,
        None,
        &NodeKey::generate().unwrap(),
        &JoinOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(joined.attestor, CLOUD_IID);
    host.stop().await;
}
