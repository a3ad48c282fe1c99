//! Pool attestor policy (`policy.joinAttestors`, the seed's "Requiring an attestor"): the
//! admin API and the `gatehouse pools` commands that write it, the INVALID_INPUT they answer
//! for anything but 1 to 16 distinct ids of attestors this host runs, and JoinService's check
//! in the join transaction: an attestor the pool does not list is refused with
//! `pool-attestor`, attributed to the pool's tenant and owner, spending nothing.

use gatehouse::store::{EventRow, NodeRole, NodeRow, PoolRow, TokenRow};
use gatehouse_agent::{
    EvidenceProducer, JoinClient, JoinError, JoinOptions, Joined, NodeKey, ProducerError, join,
};
use gatehouse_proto::x509pop::{X509popEvidence, signing_input};
use gatehouse_proto::{Challenge, Role, TokenString};
use rcgen::{KeyPair, PKCS_ECDSA_P256_SHA256, PublicKeyData as _, SigningKey as _};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::common::{Backend, TestHost, backends};

const HOUR: i64 = 3_600_000;

/// Calls the admin API with the admin key; the status and the JSON body (`null` if none).
async fn admin(
    host: &TestHost,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut req = host
        .http()
        .request(method, format!("{}{path}", host.url()))
        .bearer_auth(&host.admin_key);
    if let Some(body) = body {
        req = req.json(&body);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// Creates a pool through the API, asserting success.
async fn create_pool(host: &TestHost, body: Value) -> Value {
    let (status, answer) = admin(host, Method::POST, "/v1/admin/pools", Some(body.clone())).await;
    assert_eq!(status, StatusCode::OK, "{body}: {answer}");
    answer
}

/// Creates a pool row directly through the store, bypassing the API's validation.
async fn insert_pool(host: &TestHost, pool: PoolRow) {
    let mut tx = host.running.db.begin().await.unwrap();
    if pool.tenant_id != "root" {
        tx.insert_tenant(&pool.tenant_id).await.unwrap();
    }
    tx.insert_pool(&pool).await.unwrap();
    tx.commit().await.unwrap();
}

/// A token join of a new machine.
async fn token_join(host: &TestHost, token: &TokenString) -> Result<Joined, JoinError> {
    host.join_node_with(token).await.map(|(_, joined)| joined)
}

/// A one-use node token for `tenant`/`pool`.
async fn pool_token(host: &TestHost, tenant: &str, pool: &str) -> TokenString {
    host.create_token_with(json!({
        "role": "node", "uses": 1, "ttlSeconds": 3600, "tenantId": tenant, "poolId": pool,
    }))
    .await
}

async fn token_row(host: &TestHost, id: &str) -> TokenRow {
    let mut tx = host.running.db.begin().await.unwrap();
    let row = tx
        .list_tokens()
        .await
        .unwrap()
        .into_iter()
        .find(|t| t.id == id)
        .unwrap();
    tx.commit().await.unwrap();
    row
}

async fn nodes(host: &TestHost) -> Vec<NodeRow> {
    let mut tx = host.running.db.begin().await.unwrap();
    let rows = tx.list_nodes().await.unwrap();
    tx.commit().await.unwrap();
    rows
}

async fn node(host: &TestHost, id: &str) -> NodeRow {
    let mut tx = host.running.db.begin().await.unwrap();
    let row = tx.node(id).await.unwrap().unwrap();
    tx.commit().await.unwrap();
    row
}

async fn events_of(host: &TestHost, kind: &str) -> Vec<EventRow> {
    host.events()
        .await
        .into_iter()
        .filter(|e| e.kind == kind)
        .collect()
}

#[track_caller]
fn assert_denied<T: std::fmt::Debug>(result: Result<T, JoinError>, what: &str) {
    match result {
        Err(JoinError::Denied) => {}
        other => panic!("{what}: expected ACCESS_DENIED, got {other:?}"),
    }
}

/// A pool that lists only `tpm` refuses a token join (a token join is `join-token`), with one
/// audit row and one event in the pool's tenant naming the pool and its owner, and spends
/// nothing.
async fn tpm_only_pool_refuses_tokens(backend: Backend) {
    let host = TestHost::start(backend).await;
    // The row is written through the store, as the API would write it (`tpm` is built in).
    insert_pool(
        &host,
        PoolRow {
            tenant_id: "acme".into(),
            id: "gpu".into(),
            join_attestors: Some(vec!["tpm".into()]),
            owner: Some("lessee-1".into()),
        },
    )
    .await;
    let token = pool_token(&host, "acme", "gpu").await;
    let audits_before = host.audits().await.len();

    assert_denied(
        token_join(&host, &token).await,
        "join-token into a tpm-only pool",
    );

    assert_eq!(
        host.refusal_reasons().await,
        ["pool-attestor"],
        "{backend:?}"
    );
    let refused = events_of(&host, "security.join.refused").await;
    let e = &refused[0];
    assert_eq!(
        e.tenant_id.as_deref(),
        Some("acme"),
        "the pool's tenant: {e:?}"
    );
    assert_eq!(e.attestor.as_deref(), Some("join-token"));
    assert_eq!(e.reason.as_deref(), Some("pool-attestor"));
    assert_eq!(e.token_id.as_deref(), Some(token.id.as_str()));
    assert_eq!(e.node_id, None, "a new machine: no node id yet");
    assert_eq!(
        e.payload["qualifiedReason"], "join:pool-attestor",
        "{}",
        e.payload
    );
    assert_eq!(e.payload["reason"], "pool-attestor");
    assert_eq!(e.payload["poolId"], "gpu");
    assert_eq!(e.payload["owner"], "lessee-1");
    assert_eq!(e.payload["tenantId"], "acme");

    let audits = host.audits().await;
    assert_eq!(
        audits.len(),
        audits_before + 1,
        "one audit row for the round"
    );
    let audit = audits.last().unwrap();
    assert_eq!(
        (
            audit.result.as_str(),
            audit.reason.as_deref(),
            audit.token_id.as_deref()
        ),
        ("refused", Some("pool-attestor"), Some(token.id.as_str()))
    );
    assert_eq!(audit.attestor, "join-token");

    // Nothing spent: the token keeps its use, no node, no node.joined.
    assert_eq!(
        token_row(&host, &token.id).await.uses_left,
        1,
        "{backend:?}"
    );
    assert!(nodes(&host).await.is_empty());
    assert!(events_of(&host, "node.joined").await.is_empty());

    // The same token, once the policy lets tokens in again (through the API), admits.
    let (status, body) = admin(
        &host,
        Method::PUT,
        "/v1/admin/pools/acme/gpu",
        Some(json!({ "policy": { "joinAttestors": ["join-token"] } })),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["changed"], true);
    let joined = token_join(&host, &token).await.unwrap();
    let n = node(&host, &joined.node_id).await;
    assert_eq!(
        (n.tenant_id.as_str(), n.pool_id.as_deref()),
        ("acme", Some("gpu"))
    );
    assert_eq!(token_row(&host, &token.id).await.uses_left, 0);
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pools_a_pool_that_lists_only_tpm_refuses_a_token_join() {
    for backend in backends() {
        tpm_only_pool_refuses_tokens(backend).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pools_a_pool_listing_join_token_admits_and_one_without_a_policy_admits_any() {
    for backend in backends() {
        let host = TestHost::start(backend).await;
        let created = create_pool(
            &host,
            json!({ "id": "tokens", "policy": { "joinAttestors": ["join-token"] }, "owner": "lessee-1" }),
        )
        .await;
        assert_eq!(
            created,
            json!({ "tenantId": "root", "id": "tokens", "policy": { "joinAttestors": ["join-token"] }, "owner": "lessee-1" })
        );
        create_pool(&host, json!({ "id": "open" })).await;
        for pool in ["tokens", "open"] {
            let token = pool_token(&host, "root", pool).await;
            let joined = token_join(&host, &token).await.unwrap();
            assert_eq!(
                node(&host, &joined.node_id).await.pool_id.as_deref(),
                Some(pool)
            );
        }
        assert!(host.refusal_reasons().await.is_empty(), "{backend:?}");

        let (status, list) = admin(&host, Method::GET, "/v1/admin/pools", None).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            list,
            json!([
                { "tenantId": "root", "id": "open", "policy": {}, "owner": null },
                { "tenantId": "root", "id": "tokens", "policy": { "joinAttestors": ["join-token"] }, "owner": "lessee-1" },
            ])
        );
        let created = events_of(&host, "pool.created").await;
        assert_eq!(created.len(), 2, "{created:?}");
        assert_eq!(created[0].tenant_id.as_deref(), Some("root"));
        assert_eq!(
            created[0].payload,
            json!({ "poolId": "tokens", "policy": { "joinAttestors": ["join-token"] }, "owner": "lessee-1" })
        );
        host.stop().await;
    }
}

/// Every value but 1 to 16 distinct ids of attestors this host runs is INVALID_INPUT, on
/// create and on update, and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pools_invalid_policies_are_refused_with_invalid_input() {
    let seventeen: Vec<String> = (0..17).map(|i| format!("a{i}")).collect();
    let sixteen_known = vec!["join-token"; 16];
    let bad = [
        json!([]),
        json!(seventeen),
        json!(["vtpm"]), // not loaded on this host
        json!(["join-token", "no-such-attestor"]),
        json!(["join-token", 7]),
        json!([["join-token"]]),
        json!(["join-token", "join-token"]),
        json!(sixteen_known), // 16, but not distinct
        json!("join-token"),
        json!({ "join-token": true }),
    ];
    for backend in backends() {
        let host = TestHost::start(backend).await;
        create_pool(
            &host,
            json!({ "id": "gpu", "policy": { "joinAttestors": ["x509pop"] } }),
        )
        .await;
        for value in &bad {
            let (status, body) = admin(
                &host,
                Method::POST,
                "/v1/admin/pools",
                Some(json!({ "id": "other", "policy": { "joinAttestors": value } })),
            )
            .await;
            assert_eq!(
                (status, body["code"].as_str()),
                (StatusCode::BAD_REQUEST, Some("INVALID_INPUT")),
                "{backend:?} create {value}: {body}"
            );
            for method in [Method::PUT, Method::POST] {
                let (status, body) = admin(
                    &host,
                    method.clone(),
                    "/v1/admin/pools/root/gpu",
                    Some(json!({ "policy": { "joinAttestors": value } })),
                )
                .await;
                assert_eq!(
                    (status, body["code"].as_str()),
                    (StatusCode::BAD_REQUEST, Some("INVALID_INPUT")),
                    "{backend:?} {method} {value}: {body}"
                );
            }
        }
        // Other malformed bodies, an unknown tenant and a second create of an id.
        for body in [
            json!({ "id": "x", "policy": { "joinAttestors": ["x509pop"], "other": 1 } }),
            json!({ "id": "../x" }),
            json!({ "id": "x", "tenantId": "nobody" }),
            json!({ "id": "gpu" }),
        ] {
            let (status, answer) =
                admin(&host, Method::POST, "/v1/admin/pools", Some(body.clone())).await;
            assert_eq!(
                (status, answer["code"].as_str()),
                (StatusCode::BAD_REQUEST, Some("INVALID_INPUT")),
                "{body}: {answer}"
            );
        }
        let (status, _) = admin(
            &host,
            Method::PUT,
            "/v1/admin/pools/root/nope",
            Some(json!({ "policy": {} })),
        )
        .await;
        assert_eq!(status, StatusCode::NOT_FOUND);

        // Nothing changed: the one pool as created, one pool.created, no pool.updated.
        let (_, list) = admin(&host, Method::GET, "/v1/admin/pools", None).await;
        assert_eq!(
            list,
            json!([{ "tenantId": "root", "id": "gpu", "policy": { "joinAttestors": ["x509pop"] }, "owner": null }])
        );
        assert_eq!(events_of(&host, "pool.created").await.len(), 1);
        assert!(events_of(&host, "pool.updated").await.is_empty());
        // 16 distinct ids is the most; all must run here, so this host (two attestors) can
        // list at most two.
        let (status, body) = admin(
            &host,
            Method::PUT,
            "/v1/admin/pools/root/gpu",
            Some(json!({ "policy": { "joinAttestors": ["x509pop", "join-token"] } })),
        )
        .await;
        assert_eq!(
            (status, body["changed"].clone()),
            (StatusCode::OK, json!(true)),
            "{body}"
        );
        host.stop().await;
    }
}

/// The x509pop evidence of a certificate the host issued (see tests/all/x509pop.rs, whose
/// producer this is, without its knobs for wrong proofs).
struct Pop {
    node_id: String,
    key: KeyPair,
    leaf: Vec<u8>,
    ca: Vec<u8>,
    client_time: i64,
}

impl Pop {
    /// A certificate of `node_id` at `generation` that expired an hour ago, for a fresh key:
    /// what a machine that was offline comes back with.
    async fn offline(host: &TestHost, node_id: &str, generation: u32) -> Self {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let now = host.now().await;
        let leaf = host
            .issue_cert(
                node_id,
                &key.subject_public_key_info(),
                NodeRole::Node,
                generation,
                now - 25 * HOUR,
                now - HOUR,
            )
            .await;
        Pop {
            node_id: node_id.to_owned(),
            key,
            leaf,
            ca: host.running.pki.get().node_ca_der().to_vec(),
            client_time: host.now().await,
        }
    }
}

impl EvidenceProducer for Pop {
    fn attestor(&self) -> &str {
        "x509pop"
    }

    fn role(&self) -> Role {
        Role::Node
    }

    fn evidence(&mut self, csr_der: &[u8]) -> Result<Vec<u8>, ProducerError> {
        let csr_sha256: [u8; 32] = Sha256::digest(csr_der).into();
        let input = signing_input(&csr_sha256, &self.node_id, self.client_time)
            .ok_or_else(|| ProducerError::Failed("no signing input for this node id".into()))?;
        let der = self
            .key
            .sign(&input)
            .map_err(|e| ProducerError::Failed(e.to_string()))?;
        let evidence = X509popEvidence {
            v: 1,
            node_id: self.node_id.clone(),
            chain: vec![self.leaf.clone(), self.ca.clone()],
            client_time: self.client_time,
            sig: fixed_signature(&der),
        };
        Ok(serde_json::to_vec(&evidence).unwrap())
    }

    fn answer(&mut self, _: &Challenge, _: &[u8]) -> Result<Vec<u8>, ProducerError> {
        Err(ProducerError::Failed("x509pop answers no challenge".into()))
    }
}

/// An ASN.1 DER ECDSA signature as the fixed-width `r || s` x509pop proofs carry.
fn fixed_signature(der: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    let mut at = 2;
    for _ in 0..2 {
        let len = usize::from(der[at + 1]);
        let int = &der[at + 2..at + 2 + len];
        let int = &int[int.len().saturating_sub(32)..];
        out.extend(std::iter::repeat_n(0, 32 - int.len()));
        out.extend_from_slice(int);
        at += 2 + len;
    }
    out
}

/// A pool that lists only `x509pop` refuses a token join but admits the x509pop re-join of a
/// node in it; the policy was set by `pools update` after the node joined with a token.
async fn x509pop_only_pool(backend: Backend) {
    let host = TestHost::start(backend).await;
    create_pool(&host, json!({ "id": "edge", "owner": "lessee-2" })).await;
    let first = pool_token(&host, "root", "edge").await;
    let node_id = token_join(&host, &first).await.unwrap().node_id;

    let (status, body) = admin(
        &host,
        Method::POST,
        "/v1/admin/pools/root/edge",
        Some(json!({ "policy": { "joinAttestors": ["x509pop"] } })),
    )
    .await;
    assert_eq!(
        (status, body["changed"].clone()),
        (StatusCode::OK, json!(true)),
        "{body}"
    );
    let updated = events_of(&host, "pool.updated").await;
    assert_eq!(updated.len(), 1);
    assert_eq!(
        updated[0].payload,
        json!({ "poolId": "edge", "previousPolicy": {}, "policy": { "joinAttestors": ["x509pop"] } })
    );

    // A token join into the pool is refused now.
    let second = pool_token(&host, "root", "edge").await;
    assert_denied(
        token_join(&host, &second).await,
        "join-token into an x509pop pool",
    );
    assert_eq!(
        host.refusal_reasons().await,
        ["pool-attestor"],
        "{backend:?}"
    );
    assert_eq!(token_row(&host, &second.id).await.uses_left, 1);
    let refused = events_of(&host, "security.join.refused").await;
    assert_eq!(refused[0].payload["owner"], "lessee-2");

    // The node in it re-joins through x509pop: admitted as itself, one generation up.
    let mut pop = Pop::offline(&host, &node_id, 1).await;
    let client = JoinClient::new(&host.url(), &host.trust).unwrap();
    let joined = join(
        &client,
        &host.trust,
        &mut pop,
        None,
        &NodeKey::generate().unwrap(),
        &JoinOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(joined.node_id, node_id, "{backend:?}");
    let n = node(&host, &node_id).await;
    assert_eq!(
        (n.pool_id.as_deref(), n.identity_generation),
        (Some("edge"), 2)
    );
    assert_eq!(host.refusal_reasons().await.len(), 1, "no further refusal");
    assert_eq!(
        nodes(&host).await.len(),
        1,
        "the refused token made no node"
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pools_an_x509pop_pool_refuses_tokens_and_admits_an_x509pop_rejoin() {
    for backend in backends() {
        x509pop_only_pool(backend).await;
    }
}

/// Runs `gatehouse pools <args>` against `host`: its output, or the error it ended with.
async fn cli(host: &TestHost, dir: &std::path::Path, args: &[&str]) -> Result<String, String> {
    let (exit, out) = host.cli(dir, &[&["pools"], args].concat()).await;
    exit.output(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pools_the_cli_creates_lists_shows_and_updates_pools() {
    let host = TestHost::start(Backend::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    assert_eq!(
        cli(
            &host,
            d,
            &[
                "create",
                "gpu",
                "--join-attestors",
                "join-token,x509pop",
                "--owner",
                "lessee-1"
            ]
        )
        .await
        .unwrap(),
        "pool root/gpu created: join attestors join-token,x509pop\n"
    );
    let err = cli(
        &host,
        d,
        &["create", "vtpm-pool", "--join-attestors", "vtpm"],
    )
    .await
    .unwrap_err();
    assert!(err.contains("INVALID_INPUT"), "{err}");
    let listed = cli(&host, d, &["list"]).await.unwrap();
    assert_eq!(listed.lines().count(), 2, "{listed}");
    assert!(
        listed
            .lines()
            .nth(1)
            .unwrap()
            .ends_with(" join-token,x509pop"),
        "{listed}"
    );
    let shown = cli(&host, d, &["show", "root/gpu"]).await.unwrap();
    assert!(shown.contains("owner           lessee-1\n"), "{shown}");
    assert!(
        shown.contains("join attestors  join-token,x509pop\n"),
        "{shown}"
    );
    assert_eq!(
        cli(&host, d, &["update", "gpu", "--join-attestors", "x509pop"])
            .await
            .unwrap(),
        "pool root/gpu updated: join attestors x509pop\n"
    );
    assert_eq!(
        cli(&host, d, &["update", "gpu", "--join-attestors", "x509pop"])
            .await
            .unwrap(),
        "pool root/gpu unchanged: join attestors x509pop\n"
    );
    assert_eq!(
        cli(&host, d, &["update", "gpu", "--any-attestor"])
            .await
            .unwrap(),
        "pool root/gpu updated: join attestors any attestor\n"
    );
    let json: Value = serde_json::from_str(
        &cli(&host, d, &["show", "root/gpu", "--json"])
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(json["policy"], json!({}));
    assert_eq!(
        events_of(&host, "pool.updated").await.len(),
        2,
        "the unchanged update wrote none"
    );
    assert!(
        cli(&host, d, &["show", "gpu"])
            .await
            .unwrap_err()
            .contains("TENANT/ID")
    );
    host.stop().await;
}

/// Rule 10, deterministically: an operator narrows a pool's policy to `tpm` while a token join
/// into the pool is in flight. The join's locked phase shares the pool row's lock before it
/// reads the policy, so it waits for the update; the update commits, the join reads the new
/// policy and is refused `pool-attestor`, spending nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pools_a_policy_updated_mid_join_is_the_one_enforced() {
    if !backends().contains(&Backend::Postgres) {
        return;
    }
    let host = TestHost::start(Backend::Postgres).await;
    create_pool(&host, json!({ "id": "gpu" })).await;
    let token = pool_token(&host, "root", "gpu").await;

    let mut updating = host.running.db.begin().await.unwrap();
    assert!(
        updating
            .update_pool_policy("root", "gpu", Some(&["tpm".to_owned()]))
            .await
            .unwrap()
    );
    use sqlx::Connection as _;
    let mut watch = sqlx::PgConnection::connect(&host.database_url)
        .await
        .unwrap();
    let (joined, ()) = tokio::join!(token_join(&host, &token), async {
        crate::common::lock_waiters(&mut watch, 1).await;
        updating.commit().await.unwrap();
    });
    assert_denied(joined, "a join into a pool whose policy changed mid-join");
    assert_eq!(
        host.refusal_reasons().await.last().map(String::as_str),
        Some("pool-attestor")
    );
    assert_eq!(token_row(&host, &token.id).await.uses_left, 1);
    assert!(nodes(&host).await.is_empty(), "a node was admitted");
    host.stop().await;
}
