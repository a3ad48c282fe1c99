//! The provisioned attestor end to end, with the admin commands it depends on: inventories and
//! workflows through the `gatehouse` CLI, the installed system joining with the token read
//! back from its rendered user data, and every refusal; `prune-uses`. SQLite and PostgreSQL.

use gatehouse::store::UseOutcome;
use gatehouse_agent::{JoinClient, JoinError, JoinOptions, Joined, NodeKey, TokenProducer, join};
use gatehouse_proto::userdata::token_from_userdata;
use gatehouse_proto::{Claims, Role, TokenString};
use reqwest::Method;
use serde_json::{Value, json};

use crate::common::{Backend, TestHost, backends};

const UUID: &str = "4c4c4544-0042-3510-8052-b4c04f384d32";
const OTHER_UUID: &str = "4c4c4544-0000-1000-8000-000000000001";
const MAC: &str = "52:54:00:12:34:56";

/// Joins as the installed system: attestor provisioned, role node, claiming `uuid`.
async fn join_provisioned(
    host: &TestHost,
    token: &TokenString,
    uuid: Option<&str>,
) -> Result<Joined, JoinError> {
    let client = JoinClient::new(&host.url(), &host.trust)?;
    let key = NodeKey::generate()?;
    let options = JoinOptions {
        claims: Claims {
            macs: vec![MAC.into()],
            product_uuid: uuid.map(str::to_owned),
        },
        ..JoinOptions::default()
    };
    join(
        &client,
        &host.trust,
        &mut TokenProducer::for_attestor("provisioned", Role::Node),
        Some(token),
        &key,
        &options,
    )
    .await
}

/// Asserts the join is refused (the agent sees ACCESS_DENIED only) with `reason` in the event.
async fn refused(host: &TestHost, token: &TokenString, uuid: Option<&str>, reason: &str) {
    match join_provisioned(host, token, uuid).await {
        Err(JoinError::Denied) => {}
        other => panic!(
            "expected ACCESS_DENIED for {reason}, got {:?}",
            other.map(|j| j.node_id)
        ),
    }
    let reasons = host.refusal_reasons().await;
    assert_eq!(
        reasons.last().map(String::as_str),
        Some(reason),
        "{reasons:?}"
    );
}

/// Runs `gatehouse <args>`, asserting it succeeds; what it printed.
async fn cli(host: &TestHost, dir: &std::path::Path, args: &[&str]) -> String {
    let (exit, out) = host.cli(dir, args).await;
    exit.output(out)
        .unwrap_or_else(|e| panic!("gatehouse {args:?}: {e}"))
}

async fn admin_get(host: &TestHost, path: &str) -> Value {
    let resp = host
        .http()
        .request(Method::GET, format!("{}{path}", host.url()))
        .bearer_auth(&host.admin_key)
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "GET {path}: {}", resp.status());
    resp.json().await.unwrap()
}

async fn uses_left(host: &TestHost, token_id: &str) -> u32 {
    let mut tx = host.running.db.begin().await.unwrap();
    let left = tx.lock_token(token_id).await.unwrap().unwrap().uses_left;
    tx.commit().await.unwrap();
    left
}

/// A node that joined with a node token into pool `racks`; its id.
async fn joined_node(host: &TestHost) -> String {
    let token = host
        .create_token_with(json!({
            "role": "node", "uses": 1, "ttlSeconds": 3600, "poolId": "racks",
        }))
        .await;
    host.join_node_with(&token).await.unwrap().1.node_id
}

/// Starts a workflow for `node` through the CLI: the JSON answer.
async fn start_workflow(host: &TestHost, dir: &std::path::Path, node: &str) -> Value {
    let url = host.url();
    let out = cli(
        host,
        dir,
        &["workflows", "start", node, "--server-url", &url, "--json"],
    )
    .await;
    serde_json::from_str(&out).unwrap()
}

/// The token the workflow rendered, read back from its user data as the installed system
/// reads it (`gatehouse-agent join --userdata`).
fn rendered_token(started: &Value) -> TokenString {
    let user_data = started["userData"].as_str().unwrap();
    let token = token_from_userdata(user_data).unwrap();
    assert_eq!(token.to_text(), started["token"].as_str().unwrap());
    token
}

async fn re_key_in_place(backend: Backend) {
    let host = TestHost::start(backend).await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    cli(&host, d, &["pools", "create", "racks"]).await;
    let node = joined_node(&host).await;
    cli(&host, d, &["nodes", "cordon", &node]).await;
    let before = admin_get(&host, &format!("/v1/admin/nodes/{node}")).await;
    let old_serial = before["certificates"][0]["serial"].clone();

    // The inventory the deploy found (an older one first: the newest counts).
    cli(
        &host,
        d,
        &["nodes", "inventory", &node, "--product-uuid", OTHER_UUID],
    )
    .await;
    let out = cli(
        &host,
        d,
        &[
            "nodes",
            "inventory",
            &node,
            "--product-uuid",
            &UUID.to_ascii_uppercase(),
            "--mac",
            "52-54-00-12-34-56",
        ],
    )
    .await;
    assert!(
        out.contains(&format!(
            "recorded for {node}: product uuid {UUID}, macs {MAC}"
        )),
        "{out}"
    );

    let started = start_workflow(&host, d, &node).await;
    let workflow = started["workflow"]["id"].as_str().unwrap().to_owned();
    assert_eq!(started["workflow"]["state"], "running");
    assert_eq!(started["workflow"]["step"], "userdata.render");
    assert_eq!(started["workflow"]["nodeId"], node.as_str());
    let user_data = started["userData"].as_str().unwrap();
    assert!(user_data.starts_with("#cloud-config\n"), "{user_data}");
    assert!(user_data.contains(&host.url()), "{user_data}");
    let token = rendered_token(&started);
    assert_eq!(started["tokenId"], token.id.as_str());
    // A second workflow for the same node while this one runs is refused.
    let (exit, _) = host
        .cli(
            d,
            &["workflows", "start", &node, "--server-url", "https://h"],
        )
        .await;
    assert!(
        exit.output(String::new()).unwrap_err().contains("409"),
        "a second running workflow"
    );

    // The token the workflow minted is single-use, provisioned, in the node's placement, and
    // expects nothing (the resolver binds it).
    let mut tx = host.running.db.begin().await.unwrap();
    let minted = tx.lock_token(&token.id).await.unwrap().unwrap();
    tx.commit().await.unwrap();
    assert_eq!(
        (
            minted.role.as_str(),
            minted.uses_total,
            minted.pool_id.as_deref()
        ),
        ("provisioned", 1, Some("racks"))
    );
    assert_eq!(minted.expect, Default::default());

    // The installed system joins: it is the node, re-keyed in place.
    let joined = join_provisioned(&host, &token, Some(UUID)).await.unwrap();
    assert_eq!(joined.node_id, node, "{backend:?}");
    assert_eq!(joined.attestor, "provisioned");
    let after = admin_get(&host, &format!("/v1/admin/nodes/{node}")).await;
    assert_eq!(
        (
            &after["tenantId"],
            &after["poolId"],
            &after["cordoned"],
            &after["identityGeneration"]
        ),
        (&json!("root"), &json!("racks"), &json!(true), &json!(2)),
        "{after}"
    );
    let certs = after["certificates"].as_array().unwrap();
    assert_eq!(certs.len(), 2);
    assert!(certs[0]["revoked"].is_null(), "the new certificate is live");
    assert_eq!(certs[0]["generation"], 2);
    assert_eq!(certs[1]["serial"], old_serial);
    assert_eq!(certs[1]["revoked"], "superseded");
    assert_eq!(uses_left(&host, &token.id).await, 0);
    let audit = host.audits().await.pop().unwrap();
    assert_eq!(
        (audit.attestor.as_str(), audit.subject.as_deref()),
        ("provisioned", Some(format!("product-uuid:{UUID}").as_str()))
    );

    // The same token never admits again.
    refused(&host, &token, Some(UUID), "no-uses-left").await;

    // The workflow through the CLI: listed, shown, completed once.
    let list = cli(&host, d, &["workflows", "list"]).await;
    assert!(
        list.contains(&workflow) && list.contains("running"),
        "{list}"
    );
    let shown = cli(&host, d, &["workflows", "show", &workflow]).await;
    assert!(
        shown.contains(&format!("token     {} (0 use left", token.id)),
        "{shown}"
    );
    let done = cli(&host, d, &["workflows", "complete", &workflow]).await;
    assert_eq!(done, format!("workflow {workflow} succeeded\n"));
    let (exit, _) = host.cli(d, &["workflows", "complete", &workflow]).await;
    assert!(exit.output(String::new()).is_err(), "completes once");
    let shown: Value =
        serde_json::from_str(&cli(&host, d, &["workflows", "show", &workflow, "--json"]).await)
            .unwrap();
    assert_eq!(shown["state"], "succeeded");

    let kinds: Vec<String> = host.events().await.into_iter().map(|e| e.kind).collect();
    for kind in [
        "node.inventory-recorded",
        "workflow.started",
        "node.joined",
        "workflow.completed",
    ] {
        assert!(kinds.iter().any(|k| k == kind), "{kind}: {kinds:?}");
    }
    let started_event = host
        .events()
        .await
        .into_iter()
        .find(|e| e.kind == "workflow.started")
        .unwrap();
    assert_eq!(started_event.node_id.as_deref(), Some(node.as_str()));
    assert_eq!(started_event.token_id.as_deref(), Some(token.id.as_str()));
    assert_eq!(started_event.payload["workflowId"], workflow.as_str());
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_installed_system_re_keys_its_node_in_place_keeping_its_state() {
    for backend in backends() {
        re_key_in_place(backend).await;
    }
}

async fn refusals(backend: Backend) {
    let host = TestHost::start(backend).await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    cli(&host, d, &["pools", "create", "racks"]).await;

    // Another machine than the node's inventory names: nothing spent.
    let node = joined_node(&host).await;
    cli(
        &host,
        d,
        &["nodes", "inventory", &node, "--product-uuid", UUID],
    )
    .await;
    let started = start_workflow(&host, d, &node).await;
    let token = rendered_token(&started);
    refused(&host, &token, Some(OTHER_UUID), "product-uuid-mismatch").await;
    // A machine claiming no product UUID.
    refused(&host, &token, None, "no-product-uuid").await;
    assert_eq!(
        uses_left(&host, &token.id).await,
        1,
        "refusals spend nothing"
    );
    // Cancelled, the workflow revokes its unspent token: the right machine is refused too.
    let workflow = started["workflow"]["id"].as_str().unwrap();
    let out = cli(&host, d, &["workflows", "cancel", workflow]).await;
    assert_eq!(
        out,
        format!("workflow {workflow} cancelled, its unspent token revoked\n")
    );
    refused(&host, &token, Some(UUID), "revoked").await;

    // A node without a product UUID in its inventory: the token binds no machine.
    let bare = joined_node(&host).await;
    let started = start_workflow(&host, d, &bare).await;
    refused(&host, &rendered_token(&started), Some(UUID), "unbound").await;
    // A provisioned token no workflow minted and that expects nothing.
    let loose = host
        .create_token_with(json!({ "role": "provisioned", "uses": 1, "ttlSeconds": 3600 }))
        .await;
    refused(&host, &loose, Some(UUID), "unbound").await;

    // A provisioned token for two machines is never a machine credential.
    let two = host
        .create_token_with(json!({
            "role": "provisioned", "uses": 2, "ttlSeconds": 3600,
            "expect": { "productUuid": UUID },
        }))
        .await;
    refused(&host, &two, Some(UUID), "not-single-use").await;
    assert_eq!(uses_left(&host, &two.id).await, 2);
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mismatched_unbound_multi_use_and_uuid_less_joins_are_refused() {
    for backend in backends() {
        refusals(backend).await;
    }
}

async fn new_node(backend: Backend) {
    let host = TestHost::start(backend).await;
    // A provider bootstrap: no workflow here, the token names the machine.
    let token = host
        .create_token_with(json!({
            "role": "provisioned", "uses": 1, "ttlSeconds": 3600,
            "expect": { "productUuid": UUID },
        }))
        .await;
    refused(&host, &token, Some(OTHER_UUID), "product-uuid-mismatch").await;
    let joined = join_provisioned(&host, &token, Some(UUID)).await.unwrap();
    let mut tx = host.running.db.begin().await.unwrap();
    let nodes = tx.list_nodes().await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(nodes.len(), 1);
    assert_eq!(nodes[0].id, joined.node_id);
    assert_eq!(nodes[0].identity_generation, 1, "a new node");
    // The token's expect.productUuid makes the UUID the node's trusted hardware key.
    assert_eq!(
        nodes[0].hardware_key.as_deref(),
        Some(format!("uuid:{UUID}").as_str())
    );
    // Once only: a second machine with the same token, even the same UUID, is refused.
    refused(&host, &token, Some(UUID), "no-uses-left").await;
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_target_the_token_joins_a_new_node_once() {
    for backend in backends() {
        new_node(backend).await;
    }
}

async fn prune(backend: Backend) {
    let host = TestHost::start(backend).await;
    let dir = tempfile::tempdir().unwrap();
    let now = host.now().await;
    let mut tx = host.running.db.begin().await.unwrap();
    for i in 0..5 {
        tx.record_use("x509pop", &format!("old:{i}"), now - 1_000, now - 10_000)
            .await
            .unwrap();
    }
    for i in 0..2 {
        tx.record_use("x509pop", &format!("live:{i}"), now + 3_600_000, now)
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();

    let out = cli(&host, dir.path(), &["prune-uses", "--batch", "2"]).await;
    assert_eq!(out, "pruned 5 expired single-use records\n");
    let out = cli(&host, dir.path(), &["prune-uses"]).await;
    assert_eq!(out, "pruned 0 expired single-use records\n");

    let now = host.now().await;
    let mut tx = host.running.db.begin().await.unwrap();
    for i in 0..2 {
        assert_eq!(
            tx.record_use("x509pop", &format!("live:{i}"), now + 1, now)
                .await
                .unwrap(),
            UseOutcome::Reused,
            "live records stay"
        );
    }
    // `record_use` on an expired subject would succeed anyway; that the old rows are gone
    // shows in a count of zero from a prune at a time after every record.
    assert_eq!(tx.prune_uses(now + 7_200_000, 100).await.unwrap(), 2);
    tx.rollback().await.unwrap();
    let (exit, _) = host.cli(dir.path(), &["prune-uses", "--batch", "0"]).await;
    assert!(exit.output(String::new()).is_err());
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_uses_deletes_expired_records_only() {
    for backend in backends() {
        prune(backend).await;
    }
}
