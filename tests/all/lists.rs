//! Every admin list comes a page at a time (`?after=&limit=`, `x-next-cursor` while a page is
//! full), through the API and the CLI; and pruning by age removes what can go and keeps what
//! must stay. SQLite and PostgreSQL.

use std::collections::BTreeSet;

use gatehouse::store::{
    AuditResult, Cursor, DiscoveryWorkflowRow, InventoryRow, NewAudit, NewEvent, NewNode, NewToken,
    NodeRole, PoolCursor, PoolRow, TokenExpect, TokenRole, WorkflowRow,
};
use serde_json::{Value, json};

use crate::common::{TestHost, backends};

/// Rows of each list the test makes: with pages of 2, three pages, the last one short.
const ROWS: usize = 5;

/// How a test reads a row's key out of the API's JSON.
type Key = fn(&Value) -> String;

/// Walks `path` (which may carry a query already) with pages of `limit`: every row's
/// `key`, in the order served, and how many requests it took.
async fn walk(host: &TestHost, path: &str, limit: u32, key: Key) -> (Vec<String>, usize) {
    let http = host.http();
    let sep = if path.contains('?') { '&' } else { '?' };
    let mut after: Option<String> = None;
    let mut seen = Vec::new();
    for requests in 1.. {
        let mut url = format!("{}{path}{sep}limit={limit}", host.url());
        if let Some(after) = &after {
            url.push_str("&after=");
            url.push_str(after);
        }
        let resp = http
            .get(&url)
            .bearer_auth(&host.admin_key)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200, "{url}");
        let next = resp
            .headers()
            .get("x-next-cursor")
            .map(|v| v.to_str().unwrap().to_owned());
        let rows: Vec<Value> = resp.json().await.unwrap();
        assert!(rows.len() <= limit as usize, "{url}: a page over its limit");
        // The cursor comes exactly when the page is full.
        assert_eq!(next.is_some(), rows.len() == limit as usize, "{url}");
        seen.extend(rows.iter().map(key));
        match next {
            Some(next) => after = Some(next),
            None => return (seen, requests),
        }
    }
    unreachable!()
}

fn id(v: &Value) -> String {
    v["id"].as_str().unwrap().to_owned()
}

fn numeric_id(v: &Value) -> String {
    v["id"].as_i64().unwrap().to_string()
}

fn pool_key(v: &Value) -> String {
    format!(
        "{}/{}",
        v["tenantId"].as_str().unwrap(),
        v["id"].as_str().unwrap()
    )
}

/// Rows of every list, written straight to the database with distinct times (and two pairs
/// sharing one, so the id breaks the tie).
async fn fill(host: &TestHost) {
    let mut tx = host.running.db.begin().await.unwrap();
    let now = tx.now().await.unwrap();
    tx.insert_node(&NewNode {
        id: "node_lists".into(),
        tenant_id: "root".into(),
        pool_id: None,
        site_id: None,
        role: NodeRole::Node,
        identity_generation: 1,
        hardware_key: None,
        created_at: now,
    })
    .await
    .unwrap();
    for i in 0..ROWS {
        let at = now - 1000 + (i as i64 / 2) * 10;
        tx.create_pool(&PoolRow {
            tenant_id: "root".into(),
            id: format!("pool-{i}"),
            join_attestors: None,
            owner: None,
        })
        .await
        .unwrap();
        tx.open_join_request(
            "tpm",
            &format!("ek:{i}"),
            &[i as u8; 32],
            "{}",
            at,
            now + 600_000,
        )
        .await
        .unwrap();
        tx.insert_inventory(&InventoryRow {
            id: format!("inv_{i}"),
            node_id: "node_lists".into(),
            product_uuid: None,
            macs: vec![],
            recorded_at: at,
        })
        .await
        .unwrap();
        // Workflows of both kinds, interleaved in time.
        if i % 2 == 0 {
            tx.insert_workflow(&WorkflowRow {
                id: format!("wf_{i}"),
                node_id: "node_lists".into(),
                state: "running".into(),
                step: "userdata.render".into(),
                token_id: None,
                created_at: at,
            })
            .await
            .unwrap();
        } else {
            tx.insert_discovery_workflow(&DiscoveryWorkflowRow {
                id: format!("dwf_{i}"),
                tenant_id: "root".into(),
                site_id: "site-1".into(),
                mac: format!("02:00:00:00:00:0{i}"),
                product_uuid: None,
                state: "running".into(),
                token_ttl_seconds: 600,
                token_id: None,
                created_at: at,
            })
            .await
            .unwrap();
        }
        tx.insert_event(&NewEvent {
            at,
            kind: "test.listed".into(),
            tenant_id: None,
            node_id: None,
            attestor: None,
            reason: None,
            token_id: None,
            payload: json!({ "i": i }),
        })
        .await
        .unwrap();
        tx.insert_audit(&audit(at)).await.unwrap();
    }
    tx.commit().await.unwrap();
}

fn audit(at: i64) -> NewAudit {
    NewAudit {
        at,
        attestor: "join-token".into(),
        round: 1,
        result: AuditResult::Refused,
        reason: Some("no-uses-left".into()),
        node_id: None,
        token_id: None,
        subject: None,
        node_key: None,
        csr_sha256: None,
        client_addr: None,
    }
}

/// What a whole list holds, read straight from the database in the API's order, as the
/// keys [`walk`] collects.
async fn expected(host: &TestHost) -> Vec<(&'static str, Vec<String>, Key)> {
    let mut tx = host.running.db.begin().await.unwrap();
    let pools = tx.list_pools(&PoolCursor::default(), 1000).await.unwrap();
    let requests = tx
        .list_join_requests(None, &Cursor::end(), 1000)
        .await
        .unwrap();
    let inventories = tx
        .inventories("node_lists", &Cursor::end(), 1000)
        .await
        .unwrap();
    let mut workflows: Vec<(i64, String)> = tx
        .list_workflows(&Cursor::start(), 1000)
        .await
        .unwrap()
        .into_iter()
        .map(|w| (w.created_at, w.id))
        .collect();
    workflows.extend(
        tx.list_discovery_workflows(&Cursor::start(), 1000)
            .await
            .unwrap()
            .into_iter()
            .map(|w| (w.created_at, w.id)),
    );
    workflows.sort();
    let events = tx.event_feed(0, 1000).await.unwrap();
    let audits = tx.list_audits(0, 1000).await.unwrap();
    let tokens = tx.list_tokens().await.unwrap();
    tx.commit().await.unwrap();
    vec![
        (
            "/v1/admin/pools",
            pools
                .iter()
                .map(|p| format!("{}/{}", p.tenant_id, p.id))
                .collect(),
            pool_key as Key,
        ),
        (
            "/v1/admin/join-requests?state=all",
            requests.into_iter().map(|r| r.id).collect(),
            id as Key,
        ),
        (
            "/v1/admin/nodes/node_lists/inventories",
            inventories.into_iter().map(|i| i.id).collect(),
            id as Key,
        ),
        (
            "/v1/admin/workflows",
            workflows.into_iter().map(|(_, id)| id).collect(),
            id as Key,
        ),
        (
            "/v1/admin/events",
            events.iter().map(|e| e.id.to_string()).collect(),
            numeric_id as Key,
        ),
        (
            "/v1/admin/audits",
            audits.iter().map(|a| a.id.to_string()).collect(),
            numeric_id as Key,
        ),
        (
            "/v1/admin/tokens",
            tokens.into_iter().map(|t| t.id).collect(),
            id as Key,
        ),
    ]
}

#[tokio::test]
async fn every_admin_list_pages() {
    for backend in backends() {
        let host = TestHost::start(backend).await;
        for _ in 0..ROWS {
            host.create_token("node", 1).await;
        }
        fill(&host).await;
        host.event_feed_settled().await;
        for (path, whole, key) in expected(&host).await {
            assert!(whole.len() >= ROWS, "{path}: {whole:?}");
            let (paged, requests) = walk(&host, path, 2, key).await;
            // Every row once, in the list's order, over as many pages as it takes.
            assert_eq!(paged, whole, "{backend:?} {path}");
            assert_eq!(requests, whole.len() / 2 + 1, "{backend:?} {path}");
            // One page of the default size holds them all.
            let (all, requests) = walk(&host, path, 500, key).await;
            assert_eq!((all, requests), (whole, 1), "{backend:?} {path}");

            // Limits out of range and cursors of nothing are 400 with a JSON body.
            let sep = if path.contains('?') { '&' } else { '?' };
            for bad in [
                "limit=0",
                "limit=1001",
                "limit=-1",
                "after=%00",
                "after=nope%2F",
            ] {
                let resp = host
                    .http()
                    .get(format!("{}{path}{sep}{bad}", host.url()))
                    .bearer_auth(&host.admin_key)
                    .send()
                    .await
                    .unwrap();
                let status = resp.status().as_u16();
                let body: Value = resp.json().await.unwrap();
                assert_eq!(
                    (status, body["code"].as_str()),
                    (400, Some("INVALID_INPUT")),
                    "{backend:?} {path} {bad}"
                );
            }
        }

        // The CLI follows the cursor to the end, whatever its page size.
        let dir = tempfile::tempdir().unwrap();
        for (args, path) in [
            (&["pools", "list", "--json"][..], "/v1/admin/pools"),
            (
                &["join-requests", "list", "--state", "all", "--json"][..],
                "/v1/admin/join-requests?state=all",
            ),
            (&["workflows", "list", "--json"][..], "/v1/admin/workflows"),
            (
                &["nodes", "inventories", "node_lists", "--json"][..],
                "/v1/admin/nodes/node_lists/inventories",
            ),
        ] {
            let whole = expected(&host)
                .await
                .into_iter()
                .find(|(p, _, _)| *p == path)
                .unwrap();
            let args = [args, &["--page-size", "2"][..]].concat();
            let (exit, out) = host.cli(dir.path(), &args).await;
            let out = exit.output(out).unwrap();
            let listed: Vec<Value> = serde_json::from_str(&out).unwrap();
            let keys: Vec<String> = listed.iter().map(whole.2).collect();
            assert_eq!(keys, whole.1, "{backend:?} {args:?}");
        }
        let (exit, out) = host
            .cli(dir.path(), &["audits", "-o", "json", "--page-size", "2"])
            .await;
        let out = exit.output(out).unwrap();
        let audits: Vec<i64> = out
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["id"]
                    .as_i64()
                    .unwrap()
            })
            .collect();
        let stored: Vec<i64> = host.audits().await.iter().map(|a| a.id).collect();
        assert_eq!(audits, stored, "{backend:?}");
        host.stop().await;
    }
}

/// A token row as the database would hold it, created `age_ms` ago.
fn old_token(id: &str, now: i64, age_ms: i64, expires_in_ms: i64, uses: u32) -> NewToken {
    NewToken {
        id: id.into(),
        role: TokenRole::Node,
        secret_sha256: [9; 32],
        tenant_id: "root".into(),
        pool_id: None,
        site_id: None,
        expires_at: now + expires_in_ms,
        uses,
        expect: TokenExpect::default(),
        reclaim: false,
        created_at: now - age_ms,
    }
}

const DAY_MS: i64 = 24 * 3600 * 1000;

#[tokio::test]
async fn prune_removes_only_what_is_old_and_dead() {
    for backend in backends() {
        let host = TestHost::start(backend).await;
        let mut tx = host.running.db.begin().await.unwrap();
        let now = tx.now().await.unwrap();
        // Tokens 40 days old: spent, revoked, expired, live, partly spent; and young dead ones.
        let year = 365 * DAY_MS;
        for (i, (name, age, expires_in, uses, spent, revoked)) in [
            ("old-spent", 40, year, 1, 1, false),
            ("old-revoked", 40, year, 5, 0, true),
            ("old-expired", 40, -DAY_MS, 5, 0, false),
            ("old-live", 40, year, 5, 0, false),
            ("old-half-spent", 40, year, 5, 2, false),
            ("young-spent", 1, year, 1, 1, false),
            ("young-expired", 1, -1, 3, 0, false),
        ]
        .into_iter()
        .enumerate()
        {
            let id = format!("tok_prune{i}_{name}");
            tx.insert_token(&old_token(&id, now, age * DAY_MS, expires_in, uses))
                .await
                .unwrap();
            for _ in 0..spent {
                tx.consume_token(&id).await.unwrap();
            }
            if revoked {
                tx.revoke_token(&id).await.unwrap();
            }
        }
        // Events and audit records: 100 days old, 10 days old, and now.
        for age in [100, 100, 100, 10, 10, 0] {
            tx.insert_event(&NewEvent {
                at: now - age * DAY_MS,
                kind: "test.aged".into(),
                tenant_id: None,
                node_id: None,
                attestor: None,
                reason: None,
                token_id: None,
                payload: json!({ "ageDays": age }),
            })
            .await
            .unwrap();
            tx.insert_audit(&audit(now - age * DAY_MS)).await.unwrap();
        }
        tx.commit().await.unwrap();
        let live_token = host.create_token("node", 3).await;

        let dir = tempfile::tempdir().unwrap();
        let run = |args: &'static [&'static str]| {
            let host = &host;
            let dir = dir.path().to_owned();
            async move {
                let (exit, out) = host.cli(&dir, args).await;
                exit.output(out).unwrap()
            }
        };
        let out = run(&["prune", "tokens", "--older-than", "30d", "--batch", "2"]).await;
        assert!(out.contains("pruned 3 dead tokens"), "{out}");
        let names: BTreeSet<String> = {
            let mut tx = host.running.db.begin().await.unwrap();
            let names = tx
                .list_tokens()
                .await
                .unwrap()
                .into_iter()
                .map(|t| t.id)
                .collect();
            tx.commit().await.unwrap();
            names
        };
        let kept: BTreeSet<String> = names
            .iter()
            .filter_map(|n| n.split_once('_').map(|(_, rest)| rest.to_owned()))
            .filter(|n| n.starts_with("prune"))
            .collect();
        assert_eq!(
            kept,
            BTreeSet::from([
                "prune3_old-live".to_owned(),
                "prune4_old-half-spent".to_owned(),
                "prune5_young-spent".to_owned(),
                "prune6_young-expired".to_owned(),
            ]),
            "{backend:?}"
        );
        assert!(names.contains(&live_token.id), "{backend:?}");

        let events_before = host.events().await.len();
        let out = run(&["prune", "events", "--older-than", "30d", "--batch", "2"]).await;
        assert!(out.contains("pruned 3 events"), "{out}");
        let out = run(&["prune", "audits", "--older-than", "5d"]).await;
        assert!(out.contains("pruned 5 audit records"), "{out}");
        let cutoff_events = now - 30 * DAY_MS;
        let events = host.events().await;
        assert_eq!(events.len(), events_before - 3, "{backend:?}");
        assert!(events.iter().all(|e| e.at >= cutoff_events), "{backend:?}");
        let audits = host.audits().await;
        assert_eq!(audits.len(), 1, "{backend:?}: only today's audit stays");
        assert!(audits[0].at >= now - 5 * DAY_MS);

        // Nothing left to prune: a second run deletes nothing.
        let out = run(&["prune", "tokens", "--older-than", "30d"]).await;
        assert!(out.contains("pruned 0 dead tokens"), "{out}");

        // Ages and batches out of range are 400, and nothing goes.
        let http = host.http();
        for (path, body) in [
            ("/v1/admin/tokens/prune", json!({})),
            ("/v1/admin/tokens/prune", json!({ "olderThanSeconds": -1 })),
            (
                "/v1/admin/events/prune",
                json!({ "olderThanSeconds": u64::MAX }),
            ),
            (
                "/v1/admin/audits/prune",
                json!({ "olderThanSeconds": 0, "batch": 0 }),
            ),
            (
                "/v1/admin/audits/prune",
                json!({ "olderThanSeconds": 0, "batch": 100_001 }),
            ),
        ] {
            let resp = http
                .post(format!("{}{path}", host.url()))
                .bearer_auth(&host.admin_key)
                .json(&body)
                .send()
                .await
                .unwrap();
            let status = resp.status().as_u16();
            let answer: Value = resp.json().await.unwrap();
            assert_eq!(
                (status, answer["code"].as_str()),
                (400, Some("INVALID_INPUT")),
                "{backend:?} {path} {body}"
            );
        }
        assert_eq!(host.audits().await.len(), 1, "{backend:?}");
        // Without the admin key, nothing at all.
        let resp = http
            .post(format!("{}/v1/admin/audits/prune", host.url()))
            .json(&json!({ "olderThanSeconds": 0 }))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 401);
        assert_eq!(host.audits().await.len(), 1, "{backend:?}");
        host.stop().await;
    }
}
