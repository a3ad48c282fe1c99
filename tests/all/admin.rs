//! The admin API's own line: the host refuses to start with a weak admin key, and what the
//! admin API stores is validated (MACs and UUIDs normalised, control characters refused,
//! tenants and pools checked) with a 4xx JSON answer that leaves nothing behind, on SQLite
//! and PostgreSQL.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{HostOptions, TestHost, backends};

/// Starts a host in a data dir whose `admin.key` is `key`; why it did not start, if it did not.
async fn start_with_key(key: &[u8]) -> (tempfile::TempDir, Result<TestHost, String>) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("admin.key"), key).unwrap();
    let mut opts = HostOptions::new(crate::common::Backend::Sqlite);
    opts.data_dir = Some(dir.path().to_owned());
    let host = TestHost::try_start_with(opts).await;
    (dir, host)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_does_not_start_with_a_short_admin_key() {
    let keys: [&[u8]; 6] = [
        b"",
        b"\n",
        b"   \n",
        b"short-key",
        &[b'k'; 31],
        b"  0123456789abcdef0123456789abcde \n",
    ];
    for key in keys {
        let (_dir, started) = start_with_key(key).await;
        match started {
            Ok(host) => {
                host.stop().await;
                panic!("started with a {}-byte admin key", key.len());
            }
            Err(e) => assert!(e.contains("admin key") && e.contains("at least 32"), "{e}"),
        }
    }
    // Exactly 32 bytes (surrounding whitespace trimmed) is enough; nothing shorter, and no
    // empty bearer, gets in.
    let key = "0123456789abcdef0123456789abcdef";
    let (_dir, started) = start_with_key(format!(" {key}\n").as_bytes()).await;
    let host = started.unwrap();
    assert_eq!(host.admin_key, key);
    let url = format!("{}/v1/admin/nodes", host.url());
    for header in [
        "Bearer ".to_owned(),
        "Bearer".to_owned(),
        "Bearer  ".to_owned(),
        format!("Bearer {}", &key[..31]),
        format!("Bearer {key}x"),
        format!("Basic {key}"),
    ] {
        let resp = host
            .http()
            .get(&url)
            .header("Authorization", &header)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "{header:?}");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["code"], "UNAUTHENTICATED", "{header:?}");
    }
    let resp = host.http().get(&url).bearer_auth(key).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    host.stop().await;
}

/// `POST /v1/admin/tokens` with `body`: the status and the JSON answer.
async fn create_token(host: &TestHost, body: Value) -> (StatusCode, Value) {
    let resp = host
        .http()
        .post(format!("{}/v1/admin/tokens", host.url()))
        .bearer_auth(&host.admin_key)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// Every token row, for checking that a refused request wrote none.
async fn token_count(host: &TestHost) -> usize {
    let mut tx = host.running.db.begin().await.unwrap();
    let n = tx.list_tokens().await.unwrap().len();
    tx.commit().await.unwrap();
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_token_create_stores_is_validated() {
    for backend in backends() {
        let host = TestHost::start(backend).await;
        let base = |extra: Value| {
            let mut body = json!({ "role": "node", "uses": 1, "ttlSeconds": 3600 });
            for (k, v) in extra.as_object().unwrap() {
                body[k] = v.clone();
            }
            body
        };

        // expect.mac and expect.productUuid are stored normalised.
        let (status, created) = create_token(
            &host,
            base(json!({ "expect": {
                "mac": "52-54-00-AB-CD-EF",
                "productUuid": "4C4C4544-0042-3510-8052-B4C04F384D32",
            } })),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{created}");
        let mut tx = host.running.db.begin().await.unwrap();
        let row = tx
            .lock_token(created["id"].as_str().unwrap())
            .await
            .unwrap()
            .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(row.expect.mac.as_deref(), Some("52:54:00:ab:cd:ef"));
        assert_eq!(
            row.expect.product_uuid.as_deref(),
            Some("4c4c4544-0042-3510-8052-b4c04f384d32")
        );

        let before = token_count(&host).await;
        let bad = [
            json!({ "expect": { "mac": "52:54:00:ab:cd" } }),
            json!({ "expect": { "mac": "52:54:00:ab:cd:ef\n" } }),
            json!({ "expect": { "mac": "52:54:00:ab:cd:e\u{0}" } }),
            json!({ "expect": { "mac": "not a mac" } }),
            json!({ "expect": { "productUuid": "4c4c4544-0042-3510-8052-b4c04f384d3\u{0}" } }),
            json!({ "expect": { "productUuid": "4c4c4544\n0042-3510-8052-b4c04f384d32" } }),
            json!({ "expect": { "nodeId": "node_a\u{0}" } }),
            json!({ "expect": { "nodeId": "node_a\nforged" } }),
            json!({ "tenantId": "root\u{0}" }),
            json!({ "poolId": "p\u{1b}[31m" }),
            json!({ "siteId": "s\r\n" }),
            json!({ "tenantId": "nosuchtenant" }),
            json!({ "poolId": "nosuchpool" }),
        ];
        for extra in bad {
            let (status, body) = create_token(&host, base(extra.clone())).await;
            assert_eq!(
                status,
                StatusCode::BAD_REQUEST,
                "{backend:?} {extra}: {body}"
            );
            assert_eq!(body["code"], "INVALID_INPUT", "{extra}: {body}");
            assert!(body["message"].is_string(), "{extra}: {body}");
        }
        assert_eq!(
            token_count(&host).await,
            before,
            "a refused request stored a token"
        );

        // A pool that exists is accepted, in its own tenant only.
        let resp = host
            .http()
            .post(format!("{}/v1/admin/pools", host.url()))
            .bearer_auth(&host.admin_key)
            .json(&json!({ "id": "racks" }))
            .send()
            .await
            .unwrap();
        assert!(resp.status().is_success(), "{}", resp.status());
        let (status, body) = create_token(&host, base(json!({ "poolId": "racks" }))).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        host.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_server_url_with_control_characters_is_refused() {
    let host = TestHost::start(crate::common::Backend::Sqlite).await;
    for url in [
        "https://gatehouse.example\nrunAsRoot: true",
        "https://gatehouse.example/\u{0}",
        "https://gate house.example",
        "http://gatehouse.example",
    ] {
        let resp = host
            .http()
            .post(format!("{}/v1/admin/workflows", host.url()))
            .bearer_auth(&host.admin_key)
            .json(&json!({ "nodeId": "node_x", "serverUrl": url }))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{url:?}");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["code"], "INVALID_INPUT", "{url:?}");
    }
    let mut tx = host.running.db.begin().await.unwrap();
    assert!(
        tx.list_workflows(&gatehouse::store::Cursor::start(), 10)
            .await
            .unwrap()
            .is_empty()
    );
    tx.commit().await.unwrap();
    host.stop().await;
}
