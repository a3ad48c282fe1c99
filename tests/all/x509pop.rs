//! x509pop end to end: a node whose certificate expired while it was offline re-joins as
//! itself (one identity generation up, every older certificate superseded), each refusal
//! reaches the agent as ACCESS_DENIED with its own reason in `security.join.refused`, a
//! refusal writes nothing, and a proof admits once, across replicas sharing one PostgreSQL.

use std::path::Path;

use gatehouse::store::{NodeCertRow, NodeRole, NodeRow, Revocation};
use gatehouse_agent::{
    EvidenceProducer, JoinClient, JoinError, JoinOptions, Joined, NodeKey, ProducerError,
    TokenProducer, build_csr, join,
};
use gatehouse_proto::x509pop::{X509popEvidence, signing_input};
use gatehouse_proto::{Challenge, Claims, JoinRequest, JoinResponse, Role};
use rcgen::{KeyPair, PKCS_ECDSA_P256_SHA256, PublicKeyData as _, SigningKey as _};
use sha2::{Digest, Sha256};

use crate::common::{
    Backend, HostOptions, TestHost, backends, drop_postgres, fresh_postgres, lock_waiters,
};

const HOUR: i64 = 3_600_000;
const DAY: i64 = 24 * HOUR;

/// Joins a new node with a token; its id.
async fn token_join(host: &TestHost, role: Role) -> String {
    let token = host.create_token(role.as_str(), 1).await;
    let client = JoinClient::new(&host.url(), &host.trust).unwrap();
    let key = NodeKey::generate().unwrap();
    join(
        &client,
        &host.trust,
        &mut TokenProducer::new(role),
        Some(&token),
        &key,
        &JoinOptions::default(),
    )
    .await
    .unwrap()
    .node_id
}

/// A certificate the host issued and recorded, and the key it certifies: what a machine that
/// was offline comes back with.
pub(crate) struct Held {
    pub(crate) node_id: String,
    key: KeyPair,
    leaf: Vec<u8>,
}

impl Held {
    /// A certificate of `node_id` at `generation` that expired `ago` ms ago (by database
    /// time), for a fresh key.
    async fn expired(
        host: &TestHost,
        node_id: &str,
        role: NodeRole,
        generation: u32,
        ago: i64,
    ) -> Self {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let now = host.now().await;
        let leaf = host
            .issue_cert(
                node_id,
                &key.subject_public_key_info(),
                role,
                generation,
                now - ago - DAY,
                now - ago,
            )
            .await;
        Held {
            node_id: node_id.to_owned(),
            key,
            leaf,
        }
    }

    /// A node joined with a token, holding a certificate of its current generation that
    /// expired an hour ago.
    pub(crate) async fn offline(host: &TestHost) -> Self {
        let node_id = token_join(host, Role::Node).await;
        let generation = node(host, &node_id).await.identity_generation;
        Held::expired(host, &node_id, NodeRole::Node, generation, HOUR).await
    }

    /// A proof by this certificate's key, made now by database time.
    pub(crate) async fn proof(&self, host: &TestHost, role: Role) -> Pop<'_> {
        Pop {
            held: self,
            ca: host.running.pki.get().node_ca_der().to_vec(),
            role,
            node_id: self.node_id.clone(),
            client_time: host.now().await,
            signed_csr_sha256: None,
        }
    }

    /// The `node_certs` row of this certificate.
    async fn row(&self, host: &TestHost) -> NodeCertRow {
        certs(host, &self.node_id)
            .await
            .into_iter()
            .find(|c| c.der == self.leaf)
            .unwrap()
    }
}

/// The x509pop evidence producer of the test: the proof a [`Held`] certificate's key makes,
/// with knobs to make it wrong.
pub(crate) struct Pop<'a> {
    held: &'a Held,
    ca: Vec<u8>,
    role: Role,
    /// The node the evidence names.
    node_id: String,
    client_time: i64,
    /// Sign over this CSR hash instead of the request's.
    signed_csr_sha256: Option<[u8; 32]>,
}

impl Pop<'_> {
    /// The signing input for a request with `csr`.
    fn input(&self, csr: &[u8]) -> Vec<u8> {
        let csr_sha256 = self
            .signed_csr_sha256
            .unwrap_or_else(|| Sha256::digest(csr).into());
        signing_input(&csr_sha256, &self.node_id, self.client_time).unwrap()
    }

    /// A whole join request for a fresh key, so the same bytes can be sent more than once.
    fn request(&mut self) -> JoinRequest {
        let csr = build_csr(&NodeKey::generate().unwrap()).unwrap();
        JoinRequest {
            attestor: "x509pop".into(),
            role: self.role,
            sealed_token: None,
            attestation: self.evidence(&csr).unwrap(),
            csr,
            claims: Claims::default(),
            round: 1,
        }
    }
}

impl EvidenceProducer for Pop<'_> {
    fn attestor(&self) -> &str {
        "x509pop"
    }

    fn role(&self) -> Role {
        self.role
    }

    fn evidence(&mut self, csr_der: &[u8]) -> Result<Vec<u8>, ProducerError> {
        let der = self
            .held
            .key
            .sign(&self.input(csr_der))
            .map_err(|e| ProducerError::Failed(e.to_string()))?;
        let evidence = X509popEvidence {
            v: 1,
            node_id: self.node_id.clone(),
            chain: vec![self.held.leaf.clone(), self.ca.clone()],
            client_time: self.client_time,
            sig: fixed_signature(&der),
        };
        Ok(serde_json::to_vec(&evidence).unwrap())
    }

    fn answer(&mut self, _: &Challenge, _: &[u8]) -> Result<Vec<u8>, ProducerError> {
        Err(ProducerError::Failed("x509pop answers no challenge".into()))
    }
}

/// An ECDSA signature as ASN.1 DER (`SEQUENCE { INTEGER r, INTEGER s }`, what rcgen makes)
/// turned into the fixed-width `r || s` ES256 proofs carry.
fn fixed_signature(der: &[u8]) -> Vec<u8> {
    assert_eq!(der[0], 0x30, "a SEQUENCE");
    assert_eq!(usize::from(der[1]), der.len() - 2, "short form length");
    let mut out = Vec::with_capacity(64);
    let mut at = 2;
    for _ in 0..2 {
        assert_eq!(der[at], 0x02, "an INTEGER");
        let len = usize::from(der[at + 1]);
        let int = &der[at + 2..at + 2 + len];
        let int = &int[int.len().saturating_sub(32)..];
        out.extend(std::iter::repeat_n(0, 32 - int.len()));
        out.extend_from_slice(int);
        at += 2 + len;
    }
    assert_eq!(at, der.len());
    out
}

pub(crate) async fn pop_join(host: &TestHost, pop: &mut Pop<'_>) -> Result<Joined, JoinError> {
    pop_join_with(host, pop, None).await
}

/// An x509pop join through the agent's join loop, with `token` sealed into the request too
/// if given.
async fn pop_join_with(
    host: &TestHost,
    pop: &mut Pop<'_>,
    token: Option<&gatehouse_proto::TokenString>,
) -> Result<Joined, JoinError> {
    let client = JoinClient::new(&host.url(), &host.trust)?;
    let key = NodeKey::generate()?;
    join(
        &client,
        &host.trust,
        pop,
        token,
        &key,
        &JoinOptions::default(),
    )
    .await
}

/// Sends one prepared round to `host`.
async fn send(host: &TestHost, request: &JoinRequest) -> Result<JoinResponse, JoinError> {
    JoinClient::new(&host.url(), &host.trust)?
        .send(request)
        .await
}

async fn node(host: &TestHost, id: &str) -> NodeRow {
    let mut tx = host.running.db.begin().await.unwrap();
    let row = tx.node(id).await.unwrap().unwrap();
    tx.commit().await.unwrap();
    row
}

async fn certs(host: &TestHost, node_id: &str) -> Vec<NodeCertRow> {
    let mut tx = host.running.db.begin().await.unwrap();
    let rows = tx.node_certs(node_id).await.unwrap();
    tx.commit().await.unwrap();
    rows
}

/// What a refusal must leave untouched: the node row and its certificates.
async fn snapshot(host: &TestHost, node_id: &str) -> (NodeRow, Vec<NodeCertRow>) {
    (node(host, node_id).await, certs(host, node_id).await)
}

/// Asserts the agent saw only ACCESS_DENIED (it never learns why).
#[track_caller]
fn assert_denied<T: std::fmt::Debug>(result: Result<T, JoinError>, what: &str) {
    match result {
        Err(JoinError::Denied) => {}
        other => panic!("{what}: expected ACCESS_DENIED, got {other:?}"),
    }
}

async fn assert_last_reason(host: &TestHost, reason: &str) {
    let reasons = host.refusal_reasons().await;
    assert_eq!(
        reasons.last().map(String::as_str),
        Some(reason),
        "{reasons:?}"
    );
}

/// Joins with `pop` and asserts it is refused for `reason` and wrote nothing for `node_id`.
async fn refused(host: &TestHost, pop: &mut Pop<'_>, node_id: &str, reason: &str) {
    let before = snapshot(host, node_id).await;
    assert_denied(pop_join(host, pop).await, reason);
    assert_last_reason(host, reason).await;
    assert_eq!(
        snapshot(host, node_id).await,
        before,
        "{reason}: a refusal wrote to the node or its certificates"
    );
}

async fn rejoins_as_itself(backend: Backend) {
    let host = TestHost::start_with(HostOptions {
        cert_ttl_seconds: Some(3600),
        ..HostOptions::new(backend)
    })
    .await;
    let held = Held::offline(&host).await;
    let before = node(&host, &held.node_id).await;
    assert_eq!(before.identity_generation, 1);
    let old_serial = held.row(&host).await.serial;

    let mut pop = held.proof(&host, Role::Node).await;
    let joined = pop_join(&host, &mut pop).await.unwrap();
    assert_eq!(
        joined.node_id, held.node_id,
        "{backend:?}: the same node id"
    );
    assert_eq!(joined.attestor, "x509pop");

    let after = node(&host, &held.node_id).await;
    assert_eq!(after.identity_generation, 2, "{backend:?}");
    assert_eq!(
        (&after.tenant_id, &after.pool_id, &after.site_id, after.role),
        (
            &before.tenant_id,
            &before.pool_id,
            &before.site_id,
            before.role
        ),
        "the node keeps its place"
    );
    let rows = certs(&host, &held.node_id).await;
    assert_eq!(
        rows.len(),
        3,
        "the token join's, the expired one, the new one"
    );
    let (new, old): (Vec<_>, Vec<_>) = rows.iter().partition(|c| c.der == joined.chain[0]);
    assert_eq!(new.len(), 1);
    assert_eq!(new[0].generation, 2);
    assert_eq!(new[0].revoked, None);
    assert_eq!(new[0].role, NodeRole::Node);
    assert_eq!(new[0].not_after - new[0].not_before, 3_600_000 + 60_000);
    for c in old {
        assert_eq!(c.generation, 1);
        assert_eq!(
            c.revoked,
            Some(Revocation::Superseded),
            "{backend:?}: {}",
            c.serial
        );
    }

    let audit = host.audits().await.pop().unwrap();
    assert_eq!(audit.attestor, "x509pop");
    assert_eq!(audit.result.as_str(), "admitted");
    assert_eq!(audit.node_id.as_deref(), Some(held.node_id.as_str()));
    assert_eq!(audit.subject, Some(format!("x509pop:{old_serial}")));
    let joined_events = host
        .events()
        .await
        .into_iter()
        .filter(|e| e.kind == "node.joined" && e.node_id.as_deref() == Some(&held.node_id))
        .count();
    assert_eq!(joined_events, 2, "the token join and the re-join");

    // x509pop is built in: the host lists it without an attestors_dir.
    let list: serde_json::Value = host
        .http()
        .get(format!("{}/v1/admin/attestors", host.url()))
        .bearer_auth(&host.admin_key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let x509pop = list
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == "x509pop")
        .unwrap_or_else(|| panic!("x509pop is not listed: {list}"));
    assert_eq!(x509pop["source"]["kind"], "built-in", "{x509pop}");
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x509pop_an_expired_certificate_rejoins_as_the_same_node_one_generation_up() {
    for backend in backends() {
        rejoins_as_itself(backend).await;
    }
}

async fn refusals(backend: Backend) {
    let host = TestHost::start(backend).await;

    // Expired eight days ago: past the default week of grace.
    let node_id = token_join(&host, Role::Node).await;
    let stale = Held::expired(&host, &node_id, NodeRole::Node, 1, 8 * DAY).await;
    let mut pop = stale.proof(&host, Role::Node).await;
    refused(&host, &mut pop, &node_id, "expired-past-grace").await;

    // An operator revoked the current certificate.
    let held = Held::offline(&host).await;
    let serial = held.row(&host).await.serial;
    let mut tx = host.running.db.begin().await.unwrap();
    assert!(tx.revoke_node_cert(&held.node_id, &serial).await.unwrap());
    tx.commit().await.unwrap();
    let mut pop = held.proof(&host, Role::Node).await;
    refused(&host, &mut pop, &held.node_id, "revoked").await;

    // A certificate from before a reclaim: two of generation 1; one re-joins, the other is
    // then of an older generation.
    let node_id = token_join(&host, Role::Node).await;
    let first = Held::expired(&host, &node_id, NodeRole::Node, 1, HOUR).await;
    let second = Held::expired(&host, &node_id, NodeRole::Node, 1, 2 * HOUR).await;
    pop_join(&host, &mut first.proof(&host, Role::Node).await)
        .await
        .unwrap();
    let mut pop = second.proof(&host, Role::Node).await;
    refused(&host, &mut pop, &node_id, "old-generation").await;

    // After revoke-identity.
    let held = Held::offline(&host).await;
    let mut tx = host.running.db.begin().await.unwrap();
    let now = tx.now().await.unwrap();
    assert_eq!(
        tx.revoke_identity(&held.node_id, now).await.unwrap(),
        Some(2)
    );
    tx.commit().await.unwrap();
    let mut pop = held.proof(&host, Role::Node).await;
    refused(&host, &mut pop, &held.node_id, "identity-revoked").await;

    // A retired node, and a deleted one.
    for delete in [false, true] {
        let held = Held::offline(&host).await;
        let mut tx = host.running.db.begin().await.unwrap();
        let now = tx.now().await.unwrap();
        if delete {
            assert!(tx.delete_node(&held.node_id, now).await.unwrap());
        } else {
            assert!(tx.retire_node(&held.node_id, now).await.unwrap());
        }
        tx.commit().await.unwrap();
        let mut pop = held.proof(&host, Role::Node).await;
        refused(&host, &mut pop, &held.node_id, "retired").await;
    }

    // A node certificate asking for site. The role is not signed, so the very same evidence
    // and CSR then re-join as node: the refusal spent nothing, the proof included.
    let held = Held::offline(&host).await;
    let mut pop = held.proof(&host, Role::Site).await;
    let mut request = pop.request();
    let before = snapshot(&host, &held.node_id).await;
    assert_denied(send(&host, &request).await, "wrong-role");
    assert_last_reason(&host, "wrong-role").await;
    assert_eq!(snapshot(&host, &held.node_id).await, before);
    request.role = Role::Node;
    send(&host, &request).await.unwrap();
    assert_eq!(node(&host, &held.node_id).await.identity_generation, 2);

    // clientTime outside the window, behind and ahead of database time.
    let held = Held::offline(&host).await;
    for skew in [-61_000, 61_000] {
        let mut pop = held.proof(&host, Role::Node).await;
        pop.client_time += skew;
        refused(&host, &mut pop, &held.node_id, "clock-skew").await;
    }

    // Another node's certificate, signed by that certificate's key, claiming this node.
    let victim = token_join(&host, Role::Node).await;
    let thief = Held::offline(&host).await;
    let mut pop = thief.proof(&host, Role::Node).await;
    pop.node_id = victim.clone();
    refused(&host, &mut pop, &victim, "wrong-node").await;
    assert_eq!(
        snapshot(&host, &thief.node_id).await.0.identity_generation,
        1
    );

    // A signature over another CSR: a proof seen on the wire admits no other key.
    let held = Held::offline(&host).await;
    let mut pop = held.proof(&host, Role::Node).await;
    pop.signed_csr_sha256 = Some([7; 32]);
    refused(&host, &mut pop, &held.node_id, "bad-signature").await;

    // A certificate this host signed but never recorded.
    let node_id = token_join(&host, Role::Node).await;
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
    let now = host.now().await;
    let unrecorded = host
        .running
        .pki
        .get()
        .issue_node_cert(&gatehouse::pki::IssueRequest {
            node_id: &node_id,
            role: "node",
            spki_der: &key.subject_public_key_info(),
            statements: &[],
            not_before_ms: now - DAY,
            not_after_ms: now - HOUR,
        })
        .unwrap();
    let held = Held {
        node_id: node_id.clone(),
        key,
        leaf: unrecorded.der,
    };
    let mut pop = held.proof(&host, Role::Node).await;
    refused(&host, &mut pop, &node_id, "unknown-certificate").await;

    // x509pop takes no token: a request that carries one is refused, and spends none.
    let held = Held::offline(&host).await;
    let token = host.create_token("node", 1).await;
    let mut pop = held.proof(&host, Role::Node).await;
    let before = snapshot(&host, &held.node_id).await;
    assert_denied(
        pop_join_with(&host, &mut pop, Some(&token)).await,
        "bad-evidence",
    );
    assert_last_reason(&host, "bad-evidence").await;
    assert_eq!(snapshot(&host, &held.node_id).await, before);
    let mut tx = host.running.db.begin().await.unwrap();
    assert_eq!(
        tx.lock_token(&token.id).await.unwrap().unwrap().uses_left,
        1
    );
    tx.commit().await.unwrap();

    // Every refusal was refused by x509pop itself, and every event names the attestor.
    for event in host
        .events()
        .await
        .iter()
        .filter(|e| e.kind == "security.join.refused")
    {
        assert_eq!(event.attestor.as_deref(), Some("x509pop"), "{event:?}");
    }
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x509pop_each_refusal_reaches_the_agent_as_access_denied_with_its_reason() {
    for backend in backends() {
        refusals(backend).await;
    }
}

/// The same proof twice, one host: the first re-joins; the replay is refused as reused (the
/// proof is judged before the certificate its first use superseded). A proof the ledger
/// already holds is refused as reused. Two copies racing on one host: exactly one admits.
async fn proof_admits_once_on_one_host(backend: Backend) {
    let host = TestHost::start(backend).await;

    let held = Held::offline(&host).await;
    let request = held.proof(&host, Role::Node).await.request();
    send(&host, &request).await.unwrap();
    let before = snapshot(&host, &held.node_id).await;
    assert_denied(send(&host, &request).await, "replay");
    assert_last_reason(&host, "proof-reused").await;
    assert_eq!(snapshot(&host, &held.node_id).await, before);

    // The ledger's subject is the SHA-256 of the signing input.
    let held = Held::offline(&host).await;
    let mut pop = held.proof(&host, Role::Node).await;
    let request = pop.request();
    let input = pop.input(&request.csr);
    let subject = format!("x509pop:{}", hex(&Sha256::digest(&input)));
    let mut tx = host.running.db.begin().await.unwrap();
    let now = tx.now().await.unwrap();
    tx.record_use("x509pop", &subject, pop.client_time + 60_001, now)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let before = snapshot(&host, &held.node_id).await;
    assert_denied(send(&host, &request).await, "recorded proof");
    assert_last_reason(&host, "proof-reused").await;
    assert_eq!(snapshot(&host, &held.node_id).await, before);

    let held = Held::offline(&host).await;
    let request = held.proof(&host, Role::Node).await.request();
    let (a, b) = tokio::join!(send(&host, &request), send(&host, &request));
    let admitted = [a.is_ok(), b.is_ok()];
    assert_eq!(
        admitted.iter().filter(|ok| **ok).count(),
        1,
        "{backend:?}: {a:?} {b:?}"
    );
    assert_denied(if a.is_ok() { b } else { a }, "racing replay");
    let reason = host.refusal_reasons().await.pop().unwrap();
    assert_eq!(reason, "proof-reused", "{backend:?}");
    let rows = certs(&host, &held.node_id).await;
    assert_eq!(rows.iter().filter(|c| c.generation == 2).count(), 1);
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x509pop_a_proof_admits_once() {
    for backend in backends() {
        proof_admits_once_on_one_host(backend).await;
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Two replicas sharing one PostgreSQL database and the PKI.
async fn replicas(data: &Path, url: &str) -> (TestHost, TestHost) {
    let first = TestHost::start_with(HostOptions {
        database_url: Some(url.to_owned()),
        data_dir: Some(data.to_owned()),
        ..HostOptions::new(Backend::Postgres)
    })
    .await;
    let second = TestHost::start_with(HostOptions {
        database_url: Some(url.to_owned()),
        share_pki_with: Some(data.to_owned()),
        ..HostOptions::new(Backend::Postgres)
    })
    .await;
    (first, second)
}

/// The same proof sent to a second replica: after the first admission it is refused as
/// reused, and when both are in flight at once the database's single-use ledger refuses the
/// second as reused while the first is still uncommitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x509pop_a_proof_admits_once_across_replicas() {
    if !backends().contains(&Backend::Postgres) {
        return;
    }
    let (url, name) = fresh_postgres().await;
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = replicas(&dir.path().join("data"), &url).await;

    // One after the other.
    let held = Held::offline(&first).await;
    let request = held.proof(&first, Role::Node).await.request();
    send(&first, &request).await.unwrap();
    let before = snapshot(&first, &held.node_id).await;
    assert_denied(
        send(&second, &request).await,
        "replay on the second replica",
    );
    assert_last_reason(&second, "proof-reused").await;
    assert_eq!(snapshot(&second, &held.node_id).await, before);

    // In flight together. The test holds the node's row, so the first replica's join stops at
    // the re-key with its use recorded but not committed; the second replica's join then
    // reads a live certificate and waits on the ledger's key until the first commits.
    let held = Held::offline(&first).await;
    let request = held.proof(&first, Role::Node).await.request();
    use sqlx::Connection as _;
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut conn).await.unwrap();
    sqlx::query("SELECT id FROM nodes WHERE id = $1 FOR UPDATE")
        .bind(&held.node_id)
        .execute(&mut conn)
        .await
        .unwrap();
    let (a, b) = {
        let on_first = send(&first, &request);
        let on_second = async {
            lock_waiters(&mut conn, 1).await;
            let second_join = send(&second, &request);
            let release = async {
                lock_waiters(&mut conn, 2).await;
                sqlx::query("ROLLBACK").execute(&mut conn).await.unwrap();
            };
            tokio::join!(second_join, release).0
        };
        tokio::join!(on_first, on_second)
    };
    a.unwrap();
    assert_denied(b, "a racing replay on the second replica");
    assert_last_reason(&first, "proof-reused").await;
    let rows = certs(&first, &held.node_id).await;
    assert_eq!(rows.len(), 3, "one new certificate: {rows:?}");
    assert_eq!(node(&first, &held.node_id).await.identity_generation, 2);

    first.stop().await;
    second.stop().await;
    drop_postgres(&name).await;
}

/// Rule 10, deterministically: an operator revokes the proving certificate while the join is
/// in flight. The attestor reads the certificate live (the revocation is not committed yet),
/// then the join's locked phase waits on the certificate's row lock; the revocation commits,
/// the re-read sees it, the round runs again and the attestor refuses `revoked`. Nothing is
/// issued, re-keyed or recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x509pop_a_certificate_revoked_mid_join_admits_nothing() {
    if !backends().contains(&Backend::Postgres) {
        return;
    }
    let host = TestHost::start(Backend::Postgres).await;
    let held = Held::offline(&host).await;
    let serial = held.row(&host).await.serial;
    let mut pop = held.proof(&host, Role::Node).await;
    let request = pop.request();
    let subject = format!("x509pop:{}", hex(&Sha256::digest(pop.input(&request.csr))));
    let before = snapshot(&host, &held.node_id).await;

    let mut revoking = host.running.db.begin().await.unwrap();
    assert!(
        revoking
            .revoke_node_cert(&held.node_id, &serial)
            .await
            .unwrap()
    );
    use sqlx::Connection as _;
    let mut watch = sqlx::PgConnection::connect(&host.database_url)
        .await
        .unwrap();
    let (joined, ()) = tokio::join!(send(&host, &request), async {
        lock_waiters(&mut watch, 1).await;
        revoking.commit().await.unwrap();
    });
    assert_denied(joined, "a join whose certificate was revoked mid-join");
    assert_last_reason(&host, "revoked").await;
    let (node_after, certs_after) = snapshot(&host, &held.node_id).await;
    assert_eq!(node_after, before.0, "the node was re-keyed");
    assert_eq!(
        certs_after.len(),
        before.1.len(),
        "a certificate was issued"
    );
    let mut tx = host.running.db.begin().await.unwrap();
    let now = tx.now().await.unwrap();
    let recorded = tx.use_live("x509pop", &subject, now).await.unwrap();
    tx.commit().await.unwrap();
    assert!(!recorded, "the proof was recorded");
    host.stop().await;
}
