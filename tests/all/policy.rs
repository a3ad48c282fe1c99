//! JoinService holds the line (issue 11): one adversarial fixture per rule the host enforces
//! after an attestor answers, each refused with its own reason and leaving nothing behind (no
//! token use, ledger row, binding, node or certificate, an approval unused); and the request's
//! own fields (attestor id, claims) refused before they reach the log, the audit or an event.
//! SQLite and PostgreSQL.

use std::path::PathBuf;
use std::time::Duration;

use gatehouse::store::{AuditResult, NodeRole, PoolRow};
use gatehouse_agent::{
    EvidenceProducer, JoinClient, JoinError, JoinOptions, Joined, NodeKey, ProducerError,
    TokenProducer, build_csr, join,
};
use gatehouse_proto::{Challenge, Claims, JoinRequest, JoinResponseBody, Role, TokenString};
use serde_json::{Value, json};

use crate::common::{Backend, HostOptions, TestHost, backends};

/// Evidence for a named attestor: fixed bytes.
struct Evidence(&'static str, Vec<u8>);

impl EvidenceProducer for Evidence {
    fn attestor(&self) -> &str {
        self.0
    }
    fn role(&self) -> Role {
        Role::Node
    }
    fn evidence(&mut self, _: &[u8]) -> Result<Vec<u8>, ProducerError> {
        Ok(self.1.clone())
    }
    fn answer(&mut self, _: &Challenge, _: &[u8]) -> Result<Vec<u8>, ProducerError> {
        Err(ProducerError::NoChallenges {
            attestor: self.0.into(),
        })
    }
}

async fn host_with(
    backend: Backend,
    fixture: &str,
    adjust: impl FnOnce(&mut HostOptions),
) -> TestHost {
    let mut opts = HostOptions {
        attestors: vec![PathBuf::from(fixture)],
        ..HostOptions::new(backend)
    };
    adjust(&mut opts);
    TestHost::start_with(opts).await
}

/// One agent join (its whole loop), with a fresh key.
async fn agent_join(
    host: &TestHost,
    producer: &mut dyn EvidenceProducer,
    token: Option<&TokenString>,
) -> Result<Joined, JoinError> {
    let client = JoinClient::new(&host.url(), &host.trust)?;
    let options = JoinOptions {
        max_retry_after: Duration::from_millis(100),
        ..JoinOptions::default()
    };
    join(
        &client,
        &host.trust,
        producer,
        token,
        &NodeKey::generate()?,
        &options,
    )
    .await
}

/// A node admitted by the built-in join-token.
async fn token_node(host: &TestHost) -> Joined {
    let token = host.create_token("node", 1).await;
    agent_join(host, &mut TokenProducer::new(Role::Node), Some(&token))
        .await
        .unwrap()
}

/// One raw round (no token) with this CSR: the signed body, or the error.
async fn round(
    host: &TestHost,
    attestor: &str,
    csr: &[u8],
    evidence: &[u8],
    claims: Claims,
) -> Result<JoinResponseBody, JoinError> {
    let client = JoinClient::new(&host.url(), &host.trust)?;
    let response = client
        .send(&JoinRequest {
            attestor: attestor.into(),
            role: Role::Node,
            sealed_token: None,
            attestation: evidence.to_vec(),
            csr: csr.to_vec(),
            claims,
            round: 1,
        })
        .await?;
    Ok(serde_json::from_slice(&response.body).unwrap())
}

async fn uses_left(host: &TestHost, token: &TokenString) -> u32 {
    let mut tx = host.running.db.begin().await.unwrap();
    let left = tx.lock_token(&token.id).await.unwrap().unwrap().uses_left;
    tx.commit().await.unwrap();
    left
}

/// Every node with its generation and its certificates (serial, revoked?).
async fn nodes(host: &TestHost) -> Vec<(String, u32, Vec<(String, bool)>)> {
    let mut tx = host.running.db.begin().await.unwrap();
    let mut out = vec![];
    for n in tx.list_nodes().await.unwrap() {
        let certs = tx
            .node_certs(&n.id)
            .await
            .unwrap()
            .into_iter()
            .map(|c| (c.serial, c.revoked.is_some()))
            .collect();
        out.push((n.id, n.identity_generation, certs));
    }
    tx.commit().await.unwrap();
    out
}

/// The refusal's audit row and event agree on the reason (and the attestor).
async fn refused_with(host: &TestHost, attestor: &str, reason: &str) {
    let audits: Vec<_> = host
        .audits()
        .await
        .into_iter()
        .filter(|a| a.result == AuditResult::Refused)
        .collect();
    let last = audits.last().expect("a refusal's audit row");
    assert_eq!(
        (last.attestor.as_str(), last.reason.as_deref()),
        (attestor, Some(reason))
    );
    assert_eq!(
        host.refusal_reasons().await.last().map(String::as_str),
        Some(reason)
    );
}

async fn admin(host: &TestHost, method: reqwest::Method, path: &str, body: Value) -> Value {
    let mut request = host
        .http()
        .request(method, format!("{}{path}", host.url()))
        .bearer_auth(&host.admin_key);
    if !body.is_null() {
        request = request.json(&body);
    }
    let resp = request.send().await.unwrap();
    assert!(resp.status().is_success(), "{path}: {}", resp.status());
    resp.json().await.unwrap_or(Value::Null)
}

async fn join_requests(host: &TestHost) -> Vec<Value> {
    let listed = admin(
        host,
        reqwest::Method::GET,
        "/v1/admin/join-requests?state=all",
        Value::Null,
    )
    .await;
    listed.as_array().cloned().unwrap_or_default()
}

/// The request the fixture opened, once it is pending.
async fn pending_request(host: &TestHost) -> String {
    for _ in 0..100 {
        if let Some(r) = join_requests(host).await.first() {
            return r["id"].as_str().unwrap().to_owned();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no join request was opened");
}

async fn approve(host: &TestHost, id: &str, body: Value) {
    admin(
        host,
        reqwest::Method::POST,
        &format!("/v1/admin/join-requests/{id}/approve"),
        body,
    )
    .await;
}

/// Rule 1: a round that spends a token use, records single-use evidence or consumes a join
/// request and then defers is rolled back and refused `attestor-fault`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn spend_then_defer() {
    const ID: &str = "spend-then-defer";
    for backend in backends() {
        // A token use.
        let host = host_with(backend, gatehouse_test_artifacts::SPEND_THEN_DEFER, |_| {}).await;
        let token = host.create_token("node", 1).await;
        let r = agent_join(&host, &mut Evidence(ID, vec![]), Some(&token)).await;
        assert!(matches!(r, Err(JoinError::Denied)), "{backend:?}");
        refused_with(&host, ID, "attestor-fault").await;
        assert_eq!(
            uses_left(&host, &token).await,
            1,
            "{backend:?}: a use was spent"
        );
        assert!(nodes(&host).await.is_empty());
        host.stop().await;

        // Single-use evidence: the second round would be `evidence-reused` had the first one's
        // ledger row committed.
        let host = host_with(backend, gatehouse_test_artifacts::SPEND_THEN_DEFER, |o| {
            o.attestor_config = vec![(ID.into(), json!({ "spend": "use" }))];
        })
        .await;
        for _ in 0..2 {
            let r = agent_join(&host, &mut Evidence(ID, vec![]), None).await;
            assert!(matches!(r, Err(JoinError::Denied)), "{backend:?}");
        }
        assert_eq!(
            host.refusal_reasons().await,
            ["attestor-fault", "attestor-fault"],
            "{backend:?}"
        );
        host.stop().await;

        // A join request: approved, then consumed by a round that defers again.
        let host = host_with(backend, gatehouse_test_artifacts::SPEND_THEN_DEFER, |o| {
            o.attestor_config = vec![(ID.into(), json!({ "spend": "request" }))];
        })
        .await;
        let key = NodeKey::generate().unwrap();
        let csr = build_csr(&key).unwrap();
        let first = round(&host, ID, &csr, b"", Claims::default())
            .await
            .unwrap();
        assert!(first.deferral.is_some());
        let id = pending_request(&host).await;
        approve(&host, &id, json!({})).await;
        let spent = round(&host, ID, &csr, b"", Claims::default()).await;
        assert!(matches!(spent, Err(JoinError::Denied)), "{backend:?}");
        refused_with(&host, ID, "attestor-fault").await;
        let requests = join_requests(&host).await;
        assert_eq!(
            requests[0]["state"], "approved",
            "{backend:?}: {requests:?}"
        );
        assert!(nodes(&host).await.is_empty());
        host.stop().await;
    }
}

/// Rule 2: an attestor that admits on a token id alone is refused by the host's own check of
/// the secret; the use it spent is rolled back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn admit_by_token_id() {
    const ID: &str = "admit-by-token-id";
    for backend in backends() {
        let host = host_with(backend, gatehouse_test_artifacts::ADMIT_BY_TOKEN_ID, |_| {}).await;
        let token = host.create_token("node", 1).await;
        // The id is public (events, audits, `token list`); the secret is guessed.
        let forged = TokenString {
            id: token.id.clone(),
            secret: rand::random::<[u8; 32]>().to_vec(),
        };
        let r = agent_join(&host, &mut Evidence(ID, vec![]), Some(&forged)).await;
        assert!(matches!(r, Err(JoinError::Denied)), "{backend:?}");
        refused_with(&host, ID, "token-secret").await;
        // No token at all: the id in the evidence.
        let r = agent_join(&host, &mut Evidence(ID, token.id.as_bytes().to_vec()), None).await;
        assert!(matches!(r, Err(JoinError::Denied)), "{backend:?}");
        refused_with(&host, ID, "token-accounting").await;
        assert_eq!(uses_left(&host, &token).await, 1, "{backend:?}");
        assert!(nodes(&host).await.is_empty(), "{backend:?}");
        // The real secret still works (through the fixture, which the host now judges).
        agent_join(&host, &mut Evidence(ID, vec![]), Some(&token))
            .await
            .unwrap();
        assert_eq!(uses_left(&host, &token).await, 0);
        host.stop().await;
    }
}

/// Rule 2 beside a token's queue of spends (`join::spend_gate`, PostgreSQL): a join takes a
/// pass of a token only for a spend the policy could admit, so an attestor that spends a token
/// on a guessed secret cannot hold that token's passes. With the token's row locked by another
/// transaction and both its passes held by honest joins waiting on the row, a forged round
/// through `admit-by-token-id` is still answered at once, refused `token-secret`; once the lock
/// goes, the two honest joins are admitted and the forged one spent nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admit_by_token_id_takes_no_pass_of_the_token() {
    const ID: &str = "admit-by-token-id";
    if !backends().contains(&Backend::Postgres) {
        eprintln!("skipped: DATABASE_URL is not set");
        return;
    }
    let host = host_with(
        Backend::Postgres,
        gatehouse_test_artifacts::ADMIT_BY_TOKEN_ID,
        |_| {},
    )
    .await;
    let token = host.create_token("node", 3).await;
    let forged = TokenString {
        id: token.id.clone(),
        secret: rand::random::<[u8; 32]>().to_vec(),
    };
    let mut holding = host.running.db.begin().await.unwrap();
    assert!(holding.lock_token(&token.id).await.unwrap().is_some());
    use sqlx::Connection as _;
    let mut watch = sqlx::PgConnection::connect(&host.database_url)
        .await
        .unwrap();
    let (mut one, mut two) = (
        TokenProducer::new(Role::Node),
        TokenProducer::new(Role::Node),
    );
    let honest = async {
        tokio::join!(
            agent_join(&host, &mut one, Some(&token)),
            agent_join(&host, &mut two, Some(&token)),
        )
    };
    let forger = async {
        crate::common::lock_waiters(&mut watch, 2).await;
        // Under the honest joins' 5 s `lock_timeout`, past which they would give their
        // passes back (and run again) and let a round that waited for one through.
        let mut evidence = Evidence(ID, vec![]);
        let forged = tokio::time::timeout(
            Duration::from_secs(4),
            agent_join(&host, &mut evidence, Some(&forged)),
        )
        .await
        .expect("the forged round waited for a pass of the token");
        assert!(matches!(forged, Err(JoinError::Denied)));
        assert_eq!(crate::common::lock_waiting(&mut watch).await, 2);
        holding.rollback().await.unwrap();
    };
    let ((first, second), ()) = tokio::join!(honest, forger);
    first.unwrap();
    second.unwrap();
    refused_with(&host, ID, "token-secret").await;
    assert_eq!(uses_left(&host, &token).await, 1);
    assert_eq!(nodes(&host).await.len(), 2);
    host.stop().await;
}

/// Rule 3: a token-less attestor cannot re-key a node it proves nothing about, unless the
/// operator grants it reclaim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn reclaim_any_node() {
    const ID: &str = "reclaim-any-node";
    for backend in backends() {
        let host = host_with(backend, gatehouse_test_artifacts::RECLAIM_ANY_NODE, |_| {}).await;
        let victim = token_node(&host).await;
        let before = nodes(&host).await;
        let r = agent_join(
            &host,
            &mut Evidence(ID, victim.node_id.clone().into_bytes()),
            None,
        )
        .await;
        assert!(matches!(r, Err(JoinError::Denied)), "{backend:?}");
        refused_with(&host, ID, "reclaim-not-allowed").await;
        assert_eq!(nodes(&host).await, before, "{backend:?}: the node changed");
        host.stop().await;

        // The operator's grant.
        let host = host_with(backend, gatehouse_test_artifacts::RECLAIM_ANY_NODE, |o| {
            o.reclaim_grants = vec![(ID.into(), true)];
        })
        .await;
        let node = token_node(&host).await;
        let joined = agent_join(
            &host,
            &mut Evidence(ID, node.node_id.clone().into_bytes()),
            None,
        )
        .await
        .unwrap();
        assert_eq!(joined.node_id, node.node_id);
        assert_eq!(nodes(&host).await[0].1, 2, "{backend:?}: re-keyed");
        host.stop().await;
    }
}

/// Rule 4: `tpm-ek` is the tpm attestor's; any other attestor's kinds are `<id>:<kind>`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn foreign_binding_kind() {
    const ID: &str = "foreign-binding-kind";
    for backend in backends() {
        let host = host_with(
            backend,
            gatehouse_test_artifacts::FOREIGN_BINDING_KIND,
            |_| {},
        )
        .await;
        let r = agent_join(&host, &mut Evidence(ID, vec![]), None).await;
        assert!(matches!(r, Err(JoinError::Denied)), "{backend:?}");
        refused_with(&host, ID, "binding-kind").await;
        assert!(nodes(&host).await.is_empty());
        let ek = "00".repeat(32);
        let mut tx = host.running.db.begin().await.unwrap();
        assert_eq!(tx.bound_node("tpm-ek", &ek).await.unwrap(), None);
        tx.commit().await.unwrap();
        // Its own kind binds.
        let joined = agent_join(&host, &mut Evidence(ID, b"own".to_vec()), None)
            .await
            .unwrap();
        let mut tx = host.running.db.begin().await.unwrap();
        assert_eq!(
            tx.bound_node("foreign-binding-kind:serial", &ek)
                .await
                .unwrap(),
            Some(joined.node_id)
        );
        tx.commit().await.unwrap();
        host.stop().await;
    }
}

/// Rule 5: a node whose live certificate names a TPM AK is not re-keyed by a result that
/// proves no TPM-held key, and a TPM claim the host did not see proved is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn downgrade_reclaim() {
    const ID: &str = "downgrade-reclaim";
    let ak = format!("urn:bc:tpm-ak:sha256:{}", "ab".repeat(32));
    for backend in backends() {
        let host = host_with(backend, gatehouse_test_artifacts::DOWNGRADE_RECLAIM, |o| {
            o.reclaim_grants = vec![(ID.into(), true)];
        })
        .await;
        let node = token_node(&host).await;
        let now = host.now().await;
        host.issue_cert_with_statements(
            &node.node_id,
            &NodeKey::generate().unwrap().spki_der(),
            NodeRole::Node,
            1,
            now - 60_000,
            now + 3_600_000,
            std::slice::from_ref(&ak),
        )
        .await;
        let before = nodes(&host).await;
        let downgrade = json!({ "node": node.node_id }).to_string().into_bytes();
        let r = agent_join(&host, &mut Evidence(ID, downgrade), None).await;
        assert!(matches!(r, Err(JoinError::Denied)), "{backend:?}");
        refused_with(&host, ID, "node-key-downgrade").await;
        let claimed = json!({ "node": node.node_id, "ak": ak })
            .to_string()
            .into_bytes();
        let r = agent_join(&host, &mut Evidence(ID, claimed), None).await;
        assert!(matches!(r, Err(JoinError::Denied)), "{backend:?}");
        refused_with(&host, ID, "node-key-statement").await;
        assert_eq!(nodes(&host).await, before, "{backend:?}: the node changed");
        host.stop().await;
    }
}

/// Rule 7: an approval admits the CSR it was opened for, into the operator's placement, once;
/// it then reads `used`. Rule 11: an admission into a pool that does not exist is a refusal
/// with its reason, audited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn replay_approval() {
    const ID: &str = "replay-approval";
    for backend in backends() {
        let host = host_with(backend, gatehouse_test_artifacts::REPLAY_APPROVAL, |_| {}).await;
        let mut tx = host.running.db.begin().await.unwrap();
        tx.insert_pool(&PoolRow {
            tenant_id: "root".into(),
            id: "gpu".into(),
            join_attestors: None,
            owner: None,
        })
        .await
        .unwrap();
        tx.commit().await.unwrap();
        let machine = build_csr(&NodeKey::generate().unwrap()).unwrap();
        let first = round(&host, ID, &machine, b"", Claims::default())
            .await
            .unwrap();
        assert!(first.deferral.is_some());
        let id = pending_request(&host).await;
        approve(&host, &id, json!({ "poolId": "gpu" })).await;

        // Another machine (another CSR) takes the approval.
        let other = build_csr(&NodeKey::generate().unwrap()).unwrap();
        let r = round(&host, ID, &other, b"", Claims::default()).await;
        assert!(matches!(r, Err(JoinError::Denied)), "{backend:?}");
        refused_with(&host, ID, "approval-mismatch").await;
        // The approved machine, into another pool than the operator chose.
        let elsewhere = json!({ "pool": "cpu" }).to_string().into_bytes();
        let r = round(&host, ID, &machine, &elsewhere, Claims::default()).await;
        assert!(matches!(r, Err(JoinError::Denied)), "{backend:?}");
        refused_with(&host, ID, "approval-mismatch").await;
        assert_eq!(join_requests(&host).await[0]["state"], "approved");
        assert!(nodes(&host).await.is_empty(), "{backend:?}");

        // The approved machine, as approved: admitted once, and the request reads `used`.
        let admitted = round(&host, ID, &machine, b"", Claims::default())
            .await
            .unwrap();
        assert!(!admitted.node_id.is_empty());
        assert_eq!(join_requests(&host).await[0]["state"], "used");
        let again = round(&host, ID, &machine, b"", Claims::default()).await;
        assert!(matches!(again, Err(JoinError::Denied)));
        refused_with(&host, ID, "join-request-used").await;
        assert_eq!(nodes(&host).await.len(), 1);
        host.stop().await;

        // Rule 11: approved without a pool, admitted into one that does not exist.
        let host = host_with(backend, gatehouse_test_artifacts::REPLAY_APPROVAL, |_| {}).await;
        let machine = build_csr(&NodeKey::generate().unwrap()).unwrap();
        round(&host, ID, &machine, b"", Claims::default())
            .await
            .unwrap();
        let id = pending_request(&host).await;
        approve(&host, &id, json!({})).await;
        let nowhere = json!({ "pool": "nowhere" }).to_string().into_bytes();
        let r = round(&host, ID, &machine, &nowhere, Claims::default()).await;
        assert!(matches!(r, Err(JoinError::Denied)), "{backend:?}");
        refused_with(&host, ID, "unknown-pool").await;
        assert_eq!(join_requests(&host).await[0]["state"], "approved");
        assert!(nodes(&host).await.is_empty());
        host.stop().await;
    }
}

/// Rule 6: one machine, one node. A token bound to a product UUID (`expect.productUuid`)
/// makes it the node's trusted hardware key; another join of that machine whose token does
/// not allow reclaiming the node is refused `reclaim`; one whose token does re-keys that node.
/// A bare product-UUID claim is never a key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn one_machine_one_node() {
    const UUID: &str = "4c4c4544-0042-3510-8050-b4c04f4e3232";
    for backend in backends() {
        let host = TestHost::start(backend).await;
        let bound = |reclaim: bool| {
            json!({
                "role": "node", "uses": 1, "ttlSeconds": 3600,
                "expect": { "productUuid": UUID }, "reclaim": reclaim,
            })
        };
        let claims = Claims {
            macs: vec![],
            product_uuid: Some(UUID.into()),
        };
        let join_as = |token: TokenString| {
            let host = &host;
            let claims = claims.clone();
            async move {
                let client = JoinClient::new(&host.url(), &host.trust)?;
                join(
                    &client,
                    &host.trust,
                    &mut TokenProducer::new(Role::Node),
                    Some(&token),
                    &NodeKey::generate()?,
                    &JoinOptions {
                        claims,
                        ..JoinOptions::default()
                    },
                )
                .await
            }
        };
        let first = join_as(host.create_token_with(bound(false)).await)
            .await
            .unwrap();
        let mut tx = host.running.db.begin().await.unwrap();
        let key = tx.node(&first.node_id).await.unwrap().unwrap().hardware_key;
        tx.commit().await.unwrap();
        assert_eq!(key, Some(format!("uuid:{UUID}")), "{backend:?}");

        // The same machine with another token that does not allow reclaim.
        let second = host.create_token_with(bound(false)).await;
        let r = join_as(second.clone()).await;
        assert!(matches!(r, Err(JoinError::Denied)), "{backend:?}");
        refused_with(&host, "join-token", "reclaim").await;
        assert_eq!(uses_left(&host, &second).await, 1);
        assert_eq!(nodes(&host).await.len(), 1);

        // A token that allows reclaim re-keys the node that holds the key.
        let third = join_as(host.create_token_with(bound(true)).await)
            .await
            .unwrap();
        assert_eq!(third.node_id, first.node_id, "{backend:?}");
        assert_eq!(nodes(&host).await[0].1, 2);

        // A bare claim of the same UUID, with a plain token, makes a node without a key.
        let plain = host.create_token("node", 1).await;
        let claimed = join_as(plain).await.unwrap();
        let mut tx = host.running.db.begin().await.unwrap();
        let key = tx
            .node(&claimed.node_id)
            .await
            .unwrap()
            .unwrap()
            .hardware_key;
        tx.commit().await.unwrap();
        assert_eq!(key, None);
        host.stop().await;
    }
}

/// Rule 14: an attestor id that is oversized, carries a newline or a NUL is refused
/// `bad-attestor-id` and recorded under `<invalid>` (never the id itself); malformed claims
/// are refused `bad-claims`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn untrusted_request_fields() {
    for backend in backends() {
        let host = TestHost::start(backend).await;
        let csr = build_csr(&NodeKey::generate().unwrap()).unwrap();
        let ids = [
            "a".repeat(200_000),
            "join-token\nINFO forged line".to_owned(),
            "join\0token".to_owned(),
        ];
        for id in &ids {
            let r = round(&host, id, &csr, b"", Claims::default()).await;
            assert!(matches!(r, Err(JoinError::Denied)), "{backend:?}");
            refused_with(&host, "<invalid>", "bad-attestor-id").await;
        }
        let audits = host.audits().await;
        assert_eq!(audits.len(), ids.len(), "{backend:?}: one audit row each");
        let events = host.events().await;
        assert!(
            events
                .iter()
                .all(|e| e.attestor.as_deref() == Some("<invalid>")),
            "{events:?}"
        );

        for claims in [
            Claims {
                macs: vec!["02:00:00:00:00:01\n".into()],
                product_uuid: None,
            },
            Claims {
                macs: vec![],
                product_uuid: Some("4c4c\u{0}4544".into()),
            },
            Claims {
                macs: vec!["not a mac".into()],
                product_uuid: None,
            },
        ] {
            let r = round(&host, "join-token", &csr, b"", claims).await;
            assert!(matches!(r, Err(JoinError::Denied)), "{backend:?}");
            refused_with(&host, "join-token", "bad-claims").await;
        }
        host.stop().await;
    }
}
