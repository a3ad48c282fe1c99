//! Operator approval (the `approval` fixture, tests/fixtures/approval): a machine with a join
//! token stays pending until an operator approves its join request through the CLI, is then
//! admitted once into the pool chosen, and spends its token only on that final round; a used
//! approval admits no second machine; a denied request is refused. Every round leaves one
//! audit row and its event. SQLite and PostgreSQL.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gatehouse::store::{AuditResult, PoolRow};
use gatehouse_agent::{
    EvidenceProducer, JoinClient, JoinError, JoinOptions, Joined, NodeKey, ProducerError, join,
};
use gatehouse_proto::{Challenge, Claims, Role, TokenString};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::common::{Backend, HostOptions, TestHost, backends};

/// The fixture's id.
const ATTESTOR: &str = "approval";
/// The pool approvals place machines into.
const POOL: &str = "gpu";

/// The fixture's evidence: the sealed token and the claims, nothing else.
struct ApprovalEvidence;

impl EvidenceProducer for ApprovalEvidence {
    fn attestor(&self) -> &str {
        ATTESTOR
    }
    fn role(&self) -> Role {
        Role::Node
    }
    fn evidence(&mut self, _: &[u8]) -> Result<Vec<u8>, ProducerError> {
        Ok(vec![])
    }
    fn answer(&mut self, _: &Challenge, _: &[u8]) -> Result<Vec<u8>, ProducerError> {
        Err(ProducerError::NoChallenges {
            attestor: ATTESTOR.into(),
        })
    }
}

/// A host running the fixture, with pool `gpu` in the root tenant.
async fn host(backend: Backend) -> TestHost {
    let host = TestHost::start_with(HostOptions {
        attestors: vec![PathBuf::from(gatehouse_test_artifacts::APPROVAL)],
        ..HostOptions::new(backend)
    })
    .await;
    let mut tx = host.running.db.begin().await.unwrap();
    tx.insert_pool(&PoolRow {
        tenant_id: "root".into(),
        id: POOL.into(),
        join_attestors: None,
        owner: None,
    })
    .await
    .unwrap();
    tx.commit().await.unwrap();
    host
}

/// A machine with product UUID `uuid` and a fresh key running the agent's join loop, retrying
/// a pending round after at most 100 ms.
fn machine(
    host: &TestHost,
    token: &TokenString,
    uuid: &str,
) -> JoinHandle<Result<Joined, JoinError>> {
    let url = host.url();
    let trust = host.trust.clone();
    let token = token.clone();
    let options = JoinOptions {
        claims: Claims {
            macs: vec!["02:00:00:00:00:01".into()],
            product_uuid: Some(uuid.to_owned()),
        },
        max_retry_after: Duration::from_millis(100),
    };
    tokio::spawn(async move {
        let client = JoinClient::new(&url, &trust)?;
        let key = NodeKey::generate()?;
        join(
            &client,
            &trust,
            &mut ApprovalEvidence,
            Some(&token),
            &key,
            &options,
        )
        .await
    })
}

/// Runs `gatehouse join-requests <args>` against `host`: its output, or the error it ended with.
async fn cli(host: &TestHost, dir: &Path, args: &[&str]) -> Result<String, String> {
    let (exit, out) = host.cli(dir, &[&["join-requests"], args].concat()).await;
    exit.output(out)
}

/// `join-requests list --json [--state S]`.
async fn listed(host: &TestHost, dir: &Path, state: &str) -> Vec<Value> {
    let out = cli(host, dir, &["list", "--state", state, "--json"])
        .await
        .unwrap();
    serde_json::from_str::<Value>(&out)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

/// Waits until a pending request other than those in `seen` is listed; it.
async fn new_pending(host: &TestHost, dir: &Path, seen: &[&str]) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(r) = listed(host, dir, "pending")
            .await
            .into_iter()
            .find(|r| !seen.contains(&r["id"].as_str().unwrap()))
        {
            return r;
        }
        assert!(Instant::now() < deadline, "no join request was opened");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The join's result, within 15 s.
async fn finished(task: JoinHandle<Result<Joined, JoinError>>) -> Result<Joined, JoinError> {
    tokio::time::timeout(Duration::from_secs(15), task)
        .await
        .expect("the join did not finish")
        .unwrap()
}

async fn uses_left(host: &TestHost, token: &TokenString) -> u32 {
    let mut tx = host.running.db.begin().await.unwrap();
    let left = tx.lock_token(&token.id).await.unwrap().unwrap().uses_left;
    tx.commit().await.unwrap();
    left
}

/// Every join round left exactly one audit row and the one event of its result; the counts
/// of (deferred, admitted, refused) rounds.
async fn rounds(host: &TestHost) -> (usize, usize, usize) {
    // A round may commit while this reads (the agent may be retrying): a round's audit row
    // and event commit together, so the events read between two equal audit reads are those
    // of exactly these rounds.
    let (audits, events) = loop {
        let before = host.audits().await;
        let events = host.events().await;
        if host.audits().await.len() == before.len() {
            break (before, events);
        }
    };
    let count = |kind: &str| events.iter().filter(|e| e.kind == kind).count();
    let of = |result: AuditResult| audits.iter().filter(|a| a.result == result).count();
    let counts = (
        of(AuditResult::Deferred),
        of(AuditResult::Admitted),
        of(AuditResult::Refused),
    );
    assert_eq!(
        counts,
        (
            count("join.deferred"),
            count("node.joined"),
            count("security.join.refused")
        ),
        "audits {audits:?}\nevents {events:?}"
    );
    assert!(audits.iter().all(|a| a.attestor == ATTESTOR), "{audits:?}");
    counts
}

/// The `approval` fixture's test (`foreach_fixture!` requires one; sandbox.rs names it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn pending_until_approved_through_the_cli_then_admitted_once() {
    for backend in backends() {
        let host = host(backend).await;
        let dir = tempfile::tempdir().unwrap();
        let token = host.create_token("node", 2).await;
        let uuid = "4c4c4544-0042-3510-8050-b4c04f4e3232";
        let first = machine(&host, &token, uuid);

        let request = new_pending(&host, dir.path(), &[]).await;
        let id = request["id"].as_str().unwrap().to_owned();
        assert!(id.starts_with("jr_"), "{request}");
        assert_eq!(request["attestor"], ATTESTOR);
        assert_eq!(request["subject"], format!("uuid:{uuid}"));
        assert_eq!(request["state"], "pending");
        assert_eq!(request["details"]["productUuid"], uuid, "{request}");
        assert_eq!(request["details"]["tokenId"], token.id.as_str());
        assert_eq!(request["details"]["macs"], json!(["02:00:00:00:00:01"]));
        assert_eq!(request["csrSha256"].as_str().unwrap().len(), 64);
        assert!(request["tenantId"].is_null() && request["decidedAt"].is_null());

        // The agent keeps retrying; it stays pending, nothing is spent, no node exists.
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert!(
            !first.is_finished(),
            "{backend:?}: admitted before approval"
        );
        assert_eq!(uses_left(&host, &token).await, 2, "{backend:?}");
        let (deferred, admitted, refused) = rounds(&host).await;
        assert!(deferred >= 2, "{backend:?}: {deferred} rounds");
        assert_eq!((admitted, refused), (0, 0));
        assert_eq!(
            listed(&host, dir.path(), "pending").await.len(),
            1,
            "one request"
        );
        let shown = cli(&host, dir.path(), &["show", &id]).await.unwrap();
        assert!(
            shown.contains(&format!("subject     uuid:{uuid}\n")),
            "{shown}"
        );
        assert!(shown.contains("state       pending\n"), "{shown}");

        let approved = cli(&host, dir.path(), &["approve", &id, "--pool", POOL])
            .await
            .unwrap();
        assert!(
            approved.contains(&format!("approved {id}")) && approved.contains("pool gpu"),
            "{approved}"
        );
        let joined = finished(first).await.unwrap();
        let node = {
            let mut tx = host.running.db.begin().await.unwrap();
            let node = tx.node(&joined.node_id).await.unwrap().unwrap();
            tx.commit().await.unwrap();
            node
        };
        assert_eq!(
            (
                node.tenant_id.as_str(),
                node.pool_id.as_deref(),
                node.site_id.as_deref()
            ),
            ("root", Some(POOL), None),
            "{backend:?}"
        );
        assert_eq!(
            uses_left(&host, &token).await,
            1,
            "spent on the final round only"
        );
        let (_, admitted, refused) = rounds(&host).await;
        assert_eq!((admitted, refused), (1, 0), "{backend:?}");
        let audits = host.audits().await;
        let last = audits.last().unwrap();
        assert_eq!(
            (
                last.result,
                last.node_id.as_deref(),
                last.token_id.as_deref()
            ),
            (
                AuditResult::Admitted,
                Some(joined.node_id.as_str()),
                Some(token.id.as_str())
            )
        );
        assert_eq!(
            last.subject.as_deref(),
            Some(format!("uuid:{uuid}").as_str())
        );

        let approvals: Vec<_> = host
            .events()
            .await
            .into_iter()
            .filter(|e| e.kind == "join-request.approved")
            .collect();
        assert_eq!(approvals.len(), 1, "{approvals:?}");
        assert_eq!(approvals[0].tenant_id.as_deref(), Some("root"));
        assert_eq!(approvals[0].payload["requestId"], id.as_str());
        assert_eq!(approvals[0].payload["tenantId"], "root");
        assert_eq!(approvals[0].payload["poolId"], POOL);

        // Used: it reads as used (not expired), and no second decision is taken.
        let used = listed(&host, dir.path(), "all").await;
        assert_eq!(used.len(), 1);
        assert_eq!(
            (used[0]["state"].clone(), used[0]["poolId"].clone()),
            (json!("used"), json!(POOL))
        );
        let again = cli(&host, dir.path(), &["deny", &id]).await.unwrap_err();
        assert!(
            again.contains("409") && again.contains("CONFLICT"),
            "{again}"
        );

        // A second machine with the same subject is not admitted by the used approval: it
        // gets a request of its own, and the operator denies it.
        let second = machine(&host, &token, uuid);
        let other = new_pending(&host, dir.path(), &[&id]).await;
        let other_id = other["id"].as_str().unwrap().to_owned();
        assert_eq!(other["subject"], format!("uuid:{uuid}"));
        assert_ne!(other["csrSha256"], request["csrSha256"]);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !second.is_finished(),
            "{backend:?}: the used approval admitted a second machine"
        );
        let denied = cli(&host, dir.path(), &["deny", &other_id]).await.unwrap();
        assert!(denied.contains(&format!("denied {other_id}")), "{denied}");
        assert!(
            matches!(finished(second).await, Err(JoinError::Denied)),
            "{backend:?}"
        );
        assert_eq!(
            host.refusal_reasons().await,
            ["join-request-denied"],
            "{backend:?}: refused once, not re-opened"
        );
        assert_eq!(
            uses_left(&host, &token).await,
            1,
            "a refusal spends nothing"
        );
        assert_eq!(
            listed(&host, dir.path(), "pending").await,
            Vec::<Value>::new()
        );
        let (_, admitted, refused) = rounds(&host).await;
        assert_eq!((admitted, refused), (1, 1), "{backend:?}");
        let denial: Vec<_> = host
            .events()
            .await
            .into_iter()
            .filter(|e| e.kind == "join-request.denied")
            .collect();
        assert_eq!(denial.len(), 1, "{denial:?}");
        assert_eq!(denial[0].payload["requestId"], other_id.as_str());
        let mut tx = host.running.db.begin().await.unwrap();
        assert_eq!(tx.list_nodes().await.unwrap().len(), 1, "{backend:?}");
        tx.commit().await.unwrap();
        host.stop().await;
    }
}

/// Calls the admin API; the status and the JSON body.
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_are_checked_and_a_denied_request_refused() {
    for backend in backends() {
        let host = host(backend).await;
        let dir = tempfile::tempdir().unwrap();
        let token = host.create_token("node", 1).await;
        let task = machine(&host, &token, "00000000-0000-0000-0000-00000000abcd");
        let request = new_pending(&host, dir.path(), &[]).await;
        let id = request["id"].as_str().unwrap().to_owned();
        let approve = format!("/v1/admin/join-requests/{id}/approve");

        for (body, what) in [
            (json!({ "tenantId": "nobody" }), "tenantId"),
            (json!({ "poolId": "cpu" }), "poolId"),
            (json!({ "poolId": "a/b" }), "poolId"),
            (json!({ "tenant": "root" }), "tenant"),
        ] {
            let (status, answer) = admin(&host, Method::POST, &approve, Some(body.clone())).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
            assert_eq!(answer["code"], "INVALID_INPUT");
            assert!(
                answer["message"].as_str().unwrap().contains(what),
                "{answer}"
            );
        }
        let (status, _) = admin(&host, Method::GET, "/v1/admin/join-requests/jr_nope", None).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        let (status, _) = admin(
            &host,
            Method::POST,
            "/v1/admin/join-requests/jr_nope/deny",
            None,
        )
        .await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        let (status, _) = admin(
            &host,
            Method::GET,
            "/v1/admin/join-requests?state=open",
            None,
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        let unauthenticated = host
            .http()
            .post(format!("{}/v1/admin/join-requests/{id}/deny", host.url()))
            .send()
            .await
            .unwrap();
        assert_eq!(unauthenticated.status(), StatusCode::UNAUTHORIZED);
        // None of it decided anything.
        let (status, shown) = admin(
            &host,
            Method::GET,
            &format!("/v1/admin/join-requests/{id}"),
            None,
        )
        .await;
        assert_eq!(
            (status, shown["state"].clone()),
            (StatusCode::OK, json!("pending"))
        );

        let (status, denied) = admin(
            &host,
            Method::POST,
            &format!("/v1/admin/join-requests/{id}/deny"),
            None,
        )
        .await;
        assert_eq!(
            (status, denied["state"].clone()),
            (StatusCode::OK, json!("denied"))
        );
        assert!(denied["decidedAt"].is_i64(), "{denied}");
        let (status, answer) = admin(&host, Method::POST, &approve, None).await;
        assert_eq!(
            (status, answer["code"].clone()),
            (StatusCode::CONFLICT, json!("CONFLICT")),
            "{answer}"
        );
        assert!(
            matches!(finished(task).await, Err(JoinError::Denied)),
            "{backend:?}"
        );
        assert_eq!(host.refusal_reasons().await, ["join-request-denied"]);
        assert_eq!(uses_left(&host, &token).await, 1);
        let listed_denied = listed(&host, dir.path(), "denied").await;
        assert_eq!(listed_denied.len(), 1);
        assert_eq!(listed_denied[0]["id"], id.as_str());
        let events: Vec<_> = host
            .events()
            .await
            .into_iter()
            .filter(|e| e.kind.starts_with("join-request."))
            .collect();
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(
            (
                events[0].kind.as_str(),
                events[0].tenant_id.as_deref(),
                events[0].attestor.as_deref()
            ),
            ("join-request.denied", None, Some(ATTESTOR))
        );
        rounds(&host).await;
        host.stop().await;
    }
}
