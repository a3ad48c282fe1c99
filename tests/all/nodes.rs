//! Node administration through the admin API and the `gatehouse nodes` commands: show,
//! cordon, retire, delete, revoke-identity and revoke-cert on a node that really joined, with
//! the event each writes, on SQLite and PostgreSQL.

use gatehouse::store::EventRow;
use gatehouse_agent::{JoinError, Joined};
use gatehouse_proto::TokenString;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::common::{Exit, TestHost, backends};

/// Joins a new machine with `token`.
async fn join_with(host: &TestHost, token: &TokenString) -> Result<Joined, JoinError> {
    host.join_node_with(token).await.map(|(_, joined)| joined)
}

/// Joins a new node with a fresh one-use token; its id.
async fn joined_node(host: &TestHost) -> String {
    let token = host.create_token("node", 1).await;
    join_with(host, &token).await.unwrap().node_id
}

/// Calls the admin API with the admin key; the status and the JSON body (`null` if none).
async fn admin(host: &TestHost, method: Method, path: &str) -> (StatusCode, Value) {
    let resp = host
        .http()
        .request(method, format!("{}{path}", host.url()))
        .bearer_auth(&host.admin_key)
        .send()
        .await
        .unwrap();
    let status = resp.status();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// `admin`, asserting success.
async fn admin_ok(host: &TestHost, method: Method, path: &str) -> Value {
    let (status, body) = admin(host, method.clone(), path).await;
    assert_eq!(status, StatusCode::OK, "{method} {path}: {body}");
    body
}

async fn show(host: &TestHost, id: &str) -> Value {
    admin_ok(host, Method::GET, &format!("/v1/admin/nodes/{id}")).await
}

async fn listed(host: &TestHost) -> Vec<String> {
    let list = admin_ok(host, Method::GET, "/v1/admin/nodes").await;
    list.as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap().to_owned())
        .collect()
}

/// The events of `kind`, oldest first.
async fn events(host: &TestHost, kind: &str) -> Vec<EventRow> {
    host.events()
        .await
        .into_iter()
        .filter(|e| e.kind == kind)
        .collect()
}

/// Asserts exactly one `kind` event exists, about `node`; its payload.
async fn one_event(host: &TestHost, kind: &str, node: &str) -> Value {
    let found = events(host, kind).await;
    assert_eq!(found.len(), 1, "{kind}: {found:?}");
    let e = &found[0];
    assert_eq!(
        (e.node_id.as_deref(), e.tenant_id.as_deref()),
        (Some(node), Some("root")),
        "{e:?}"
    );
    e.payload.clone()
}

/// The revocation reason of each certificate `show` lists, newest first (`null`: live).
fn revocations(shown: &Value) -> Vec<Value> {
    shown["certificates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["revoked"].clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joined_node_is_shown_cordoned_and_uncordoned() {
    for backend in backends() {
        let host = TestHost::start(backend).await;
        let id = joined_node(&host).await;
        assert_eq!(listed(&host).await, [id.as_str()], "{backend:?}");

        let shown = show(&host, &id).await;
        assert_eq!(shown["id"], id.as_str());
        assert_eq!(shown["tenantId"], "root");
        assert_eq!(shown["identityGeneration"], 1);
        assert_eq!(shown["cordoned"], false);
        assert!(shown["deletedAt"].is_null());
        assert_eq!(shown["bindings"], json!([]));
        let certs = shown["certificates"].as_array().unwrap();
        assert_eq!(certs.len(), 1, "{shown}");
        let cert = &certs[0];
        assert_eq!(
            (cert["generation"].clone(), cert["role"].clone()),
            (json!(1), json!("node"))
        );
        assert!(cert["revoked"].is_null());
        assert!(cert["notAfter"].as_i64().unwrap() > cert["notBefore"].as_i64().unwrap());
        assert!(cert["serial"].as_str().is_some_and(|s| !s.is_empty()));
        assert!(cert.get("der").is_none(), "show carries no DER");

        let done = admin_ok(&host, Method::POST, &format!("/v1/admin/nodes/{id}/cordon")).await;
        assert_eq!(done, json!({ "id": id, "cordoned": true, "changed": true }));
        assert_eq!(show(&host, &id).await["cordoned"], true);
        // Again: nothing changes and no second event is written.
        let again = admin_ok(&host, Method::POST, &format!("/v1/admin/nodes/{id}/cordon")).await;
        assert_eq!(again["changed"], false);
        assert_eq!(
            one_event(&host, "node.cordoned", &id).await,
            json!({ "cordoned": true })
        );

        let done = admin_ok(
            &host,
            Method::POST,
            &format!("/v1/admin/nodes/{id}/uncordon"),
        )
        .await;
        assert_eq!(done["changed"], true);
        assert_eq!(show(&host, &id).await["cordoned"], false);
        assert_eq!(
            one_event(&host, "node.uncordoned", &id).await,
            json!({ "cordoned": false })
        );
        // A cordoned node is still listed and keeps its certificate.
        assert_eq!(revocations(&show(&host, &id).await), [Value::Null]);
        host.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoke_identity_raises_the_generation_and_only_a_rekeying_token_joins_it_again() {
    for backend in backends() {
        let host = TestHost::start(backend).await;
        let id = joined_node(&host).await;

        let done = admin_ok(
            &host,
            Method::POST,
            &format!("/v1/admin/nodes/{id}/revoke-identity"),
        )
        .await;
        assert_eq!(
            done,
            json!({ "id": id, "previousGeneration": 1, "generation": 2, "certificatesRevoked": 1 }),
            "{backend:?}"
        );
        let shown = show(&host, &id).await;
        assert_eq!(shown["identityGeneration"], 2);
        assert_eq!(revocations(&shown), [json!("identity-revoked")]);
        assert_eq!(
            one_event(&host, "node.identity-revoked", &id).await,
            json!({ "previousGeneration": 1, "generation": 2, "certificatesRevoked": 1 })
        );

        // A token that names no node admits the machine as a new node, reclaim or not.
        let plain = host
            .create_token_with(
                json!({ "role": "node", "uses": 1, "ttlSeconds": 3600, "reclaim": true }),
            )
            .await;
        let other = join_with(&host, &plain).await.unwrap();
        assert_ne!(other.node_id, id);
        assert_eq!(show(&host, &id).await["identityGeneration"], 2);

        // A reclaim token bound to the node re-keys it in place: the same node id, a new
        // generation, a live certificate of that generation.
        let reclaim = host
            .create_token_with(json!({
                "role": "node", "uses": 1, "ttlSeconds": 3600, "reclaim": true,
                "expect": { "nodeId": id },
            }))
            .await;
        let again = join_with(&host, &reclaim).await.unwrap();
        assert_eq!(again.node_id, id);
        let shown = show(&host, &id).await;
        assert_eq!(shown["identityGeneration"], 3);
        assert_eq!(
            revocations(&shown),
            [Value::Null, json!("identity-revoked")]
        );
        assert_eq!(shown["certificates"][0]["generation"], 3);
        host.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_revokes_certificates_frees_bindings_and_hides_the_node() {
    for backend in backends() {
        let host = TestHost::start(backend).await;
        let id = joined_node(&host).await;
        let kept = joined_node(&host).await;
        let mut tx = host.running.db.begin().await.unwrap();
        tx.bind("tpm-ek-sha256", "ab12", &id).await.unwrap();
        tx.bind("mac", "02:00:00:00:00:01", &kept).await.unwrap();
        tx.commit().await.unwrap();
        assert_eq!(
            show(&host, &id).await["bindings"],
            json!([{ "kind": "tpm-ek-sha256", "value": "ab12" }])
        );

        let done = admin_ok(&host, Method::DELETE, &format!("/v1/admin/nodes/{id}")).await;
        assert_eq!(done["certificatesRevoked"], 1, "{backend:?}: {done}");
        assert_eq!(
            done["bindingsFreed"],
            json!([{ "kind": "tpm-ek-sha256", "value": "ab12" }])
        );
        assert!(done["deletedAt"].is_i64());

        // Hidden from the list, still shown, with what happened to it.
        assert_eq!(listed(&host).await, [kept.as_str()]);
        let shown = show(&host, &id).await;
        assert_eq!(shown["deletedAt"], done["deletedAt"]);
        assert_eq!(shown["retired"], true);
        assert!(shown["hardwareKey"].is_null());
        assert_eq!(shown["bindings"], json!([]));
        assert_eq!(revocations(&shown), [json!("node-removed")]);
        let payload = one_event(&host, "node.deleted", &id).await;
        assert_eq!(payload["certificatesRevoked"], 1);
        assert_eq!(payload["bindingsFreed"], done["bindingsFreed"]);

        // The binding is free for another node; the other node keeps its own.
        let mut tx = host.running.db.begin().await.unwrap();
        assert_eq!(tx.bound_node("tpm-ek-sha256", "ab12").await.unwrap(), None);
        tx.bind("tpm-ek-sha256", "ab12", &kept).await.unwrap();
        assert_eq!(tx.node_bindings(&kept).await.unwrap().len(), 2);
        tx.commit().await.unwrap();

        // Every action on a deleted node is not found, and writes nothing.
        let before = host.events().await.len();
        for (method, path) in [
            (Method::DELETE, format!("/v1/admin/nodes/{id}")),
            (Method::POST, format!("/v1/admin/nodes/{id}/cordon")),
            (Method::POST, format!("/v1/admin/nodes/{id}/uncordon")),
            (Method::POST, format!("/v1/admin/nodes/{id}/retire")),
            (
                Method::POST,
                format!("/v1/admin/nodes/{id}/revoke-identity"),
            ),
            (
                Method::POST,
                format!(
                    "/v1/admin/nodes/{id}/certs/{}/revoke",
                    shown["certificates"][0]["serial"].as_str().unwrap()
                ),
            ),
        ] {
            let (status, body) = admin(&host, method.clone(), &path).await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path}: {body}");
            assert_eq!(body["code"], "NOT_FOUND");
        }
        assert_eq!(host.events().await.len(), before);

        // A token bound to the deleted node admits nothing.
        let reclaim = host
            .create_token_with(json!({
                "role": "node", "uses": 1, "ttlSeconds": 3600, "reclaim": true,
                "expect": { "nodeId": id },
            }))
            .await;
        assert!(matches!(
            join_with(&host, &reclaim).await,
            Err(JoinError::Denied)
        ));
        assert_eq!(
            host.refusal_reasons().await.last().map(String::as_str),
            Some("retired")
        );
        host.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retire_and_revoke_one_certificate() {
    for backend in backends() {
        let host = TestHost::start(backend).await;
        let retiring = joined_node(&host).await;
        let id = joined_node(&host).await;

        let done = admin_ok(
            &host,
            Method::POST,
            &format!("/v1/admin/nodes/{retiring}/retire"),
        )
        .await;
        assert_eq!(
            done,
            json!({ "id": retiring, "retired": true, "changed": true, "certificatesRevoked": 1 }),
            "{backend:?}"
        );
        let shown = show(&host, &retiring).await;
        assert_eq!(shown["retired"], true);
        assert_eq!(revocations(&shown), [json!("node-removed")]);
        assert!(
            listed(&host).await.contains(&retiring),
            "a retired node stays listed"
        );
        let again = admin_ok(
            &host,
            Method::POST,
            &format!("/v1/admin/nodes/{retiring}/retire"),
        )
        .await;
        assert_eq!(
            (
                again["changed"].clone(),
                again["certificatesRevoked"].clone()
            ),
            (json!(false), json!(0))
        );
        assert_eq!(
            one_event(&host, "node.retired", &retiring).await,
            json!({ "certificatesRevoked": 1 })
        );
        let (status, body) = admin(
            &host,
            Method::POST,
            &format!("/v1/admin/nodes/{retiring}/revoke-identity"),
        )
        .await;
        assert_eq!(
            (status, body["code"].clone()),
            (StatusCode::BAD_REQUEST, json!("INVALID_INPUT"))
        );

        // One certificate, by serial.
        let serial = show(&host, &id).await["certificates"][0]["serial"]
            .as_str()
            .unwrap()
            .to_owned();
        let path = format!("/v1/admin/nodes/{id}/certs/{serial}/revoke");
        let done = admin_ok(&host, Method::POST, &path).await;
        assert_eq!(
            done,
            json!({ "id": id, "serial": serial, "revoked": "operator", "changed": true })
        );
        let shown = show(&host, &id).await;
        assert_eq!(revocations(&shown), [json!("operator")]);
        assert_eq!(
            (
                shown["retired"].clone(),
                shown["identityGeneration"].clone()
            ),
            (json!(false), json!(1))
        );
        let again = admin_ok(&host, Method::POST, &path).await;
        assert_eq!(again["changed"], false);
        let payload = one_event(&host, "node.cert-revoked", &id).await;
        assert_eq!(payload, json!({ "serial": serial, "generation": 1 }));

        // Another node's serial, an unknown one and a malformed one.
        let retired_serial = show(&host, &retiring).await["certificates"][0]["serial"]
            .as_str()
            .unwrap()
            .to_owned();
        for (serial, status) in [
            (retired_serial.as_str(), StatusCode::NOT_FOUND),
            ("00ff", StatusCode::NOT_FOUND),
            ("not-hex", StatusCode::BAD_REQUEST),
        ] {
            let (got, body) = admin(
                &host,
                Method::POST,
                &format!("/v1/admin/nodes/{id}/certs/{serial}/revoke"),
            )
            .await;
            assert_eq!(got, status, "{serial}: {body}");
        }
        host.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_nodes_are_not_found_and_every_route_needs_the_admin_key() {
    for backend in backends() {
        let host = TestHost::start(backend).await;
        let id = joined_node(&host).await;
        let routes = |node: &str| {
            vec![
                (Method::GET, format!("/v1/admin/nodes/{node}")),
                (Method::DELETE, format!("/v1/admin/nodes/{node}")),
                (Method::POST, format!("/v1/admin/nodes/{node}/cordon")),
                (Method::POST, format!("/v1/admin/nodes/{node}/uncordon")),
                (Method::POST, format!("/v1/admin/nodes/{node}/retire")),
                (
                    Method::POST,
                    format!("/v1/admin/nodes/{node}/revoke-identity"),
                ),
                (
                    Method::POST,
                    format!("/v1/admin/nodes/{node}/certs/0a/revoke"),
                ),
            ]
        };
        for (method, path) in routes("node_doesnotexist") {
            let (status, body) = admin(&host, method.clone(), &path).await;
            assert_eq!(
                status,
                StatusCode::NOT_FOUND,
                "{backend:?} {method} {path}: {body}"
            );
        }
        for (method, path) in routes("bad%20id") {
            let (status, _) = admin(&host, method.clone(), &path).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{method} {path}");
        }
        let mut all = routes(&id);
        all.push((Method::GET, "/v1/admin/nodes".into()));
        for (method, path) in all {
            let url = format!("{}{path}", host.url());
            let none = host
                .http()
                .request(method.clone(), &url)
                .send()
                .await
                .unwrap();
            assert_eq!(none.status(), StatusCode::UNAUTHORIZED, "{method} {path}");
            let wrong = host
                .http()
                .request(method.clone(), &url)
                .bearer_auth("not-the-key")
                .send()
                .await
                .unwrap();
            assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED, "{method} {path}");
        }
        // Nothing was changed by any of it.
        let shown = show(&host, &id).await;
        assert_eq!(
            (shown["cordoned"].clone(), shown["retired"].clone()),
            (json!(false), json!(false))
        );
        assert_eq!(revocations(&shown), [Value::Null]);
        // Only the joins and the minting of their tokens.
        assert!(
            host.events()
                .await
                .iter()
                .all(|e| ["node.joined", "token.created"].contains(&e.kind.as_str()))
        );
        host.stop().await;
    }
}

/// Runs `gatehouse nodes <args>` against `host`.
async fn cli(host: &TestHost, dir: &std::path::Path, args: &[&str]) -> (Exit, String) {
    host.cli(dir, &[&["nodes"], args].concat()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_changes_nothing_without_yes() {
    for backend in backends() {
        let host = TestHost::start(backend).await;
        let dir = tempfile::tempdir().unwrap();
        let id = joined_node(&host).await;
        let mut tx = host.running.db.begin().await.unwrap();
        tx.bind("tpm-ek-sha256", "cd34", &id).await.unwrap();
        tx.commit().await.unwrap();

        let (exit, out) = cli(&host, dir.path(), &["list"]).await;
        assert!(matches!(exit, Exit::Ok), "{exit:?}");
        assert!(out.lines().nth(1).unwrap().starts_with(&id), "{out}");

        for verb in ["delete", "retire", "revoke-identity"] {
            let (exit, out) = cli(&host, dir.path(), &[verb, &id]).await;
            assert!(matches!(exit, Exit::NotConfirmed), "{verb}: {exit:?}");
            assert!(out.contains("revoke 1 live certificate: "), "{verb}: {out}");
            assert!(
                out.ends_with(&format!("pass --yes to {verb} {id}\n")),
                "{out}"
            );
        }
        let (_, out) = cli(&host, dir.path(), &["delete", &id]).await;
        assert!(
            out.starts_with(&format!("would delete node {id} ")),
            "{out}"
        );
        assert!(out.contains("free 1 binding: tpm-ek-sha256=cd34"), "{out}");
        let (exit, out) = cli(&host, dir.path(), &["delete", &id, "--json"]).await;
        assert!(matches!(exit, Exit::NotConfirmed), "{exit:?}");
        let plan: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            (plan["dryRun"].clone(), plan["action"].clone()),
            (json!(true), json!("delete"))
        );
        // Nothing changed.
        let shown = show(&host, &id).await;
        assert_eq!(
            (
                shown["retired"].clone(),
                shown["identityGeneration"].clone(),
                shown["bindings"].as_array().unwrap().len()
            ),
            (json!(false), json!(1), 1),
            "{backend:?}"
        );
        assert_eq!(revocations(&shown), [Value::Null]);
        // Only the joins and the minting of their tokens.
        assert!(
            host.events()
                .await
                .iter()
                .all(|e| ["node.joined", "token.created"].contains(&e.kind.as_str()))
        );

        let (exit, out) = cli(&host, dir.path(), &["cordon", &id]).await;
        assert!(matches!(exit, Exit::Ok), "{exit:?}");
        assert_eq!(out, format!("{id} cordoned\n"));
        let (exit, out) = cli(&host, dir.path(), &["show", &id]).await;
        assert!(matches!(exit, Exit::Ok), "{exit:?}");
        assert!(out.contains("state         cordoned\n"), "{out}");

        let (exit, out) = cli(&host, dir.path(), &["revoke-identity", &id, "--yes"]).await;
        assert!(matches!(exit, Exit::Ok), "{exit:?}");
        assert_eq!(
            out,
            format!("{id} identity revoked: generation 1 -> 2, 1 certificate revoked\n")
        );
        let (exit, out) = cli(&host, dir.path(), &["delete", &id, "--yes"]).await;
        assert!(matches!(exit, Exit::Ok), "{exit:?}");
        assert_eq!(
            out,
            format!("{id} deleted: 0 certificates revoked, 1 binding freed\n")
        );
        assert!(listed(&host).await.is_empty());
        let (exit, out) = cli(&host, dir.path(), &["show", &id, "--json"]).await;
        assert!(matches!(exit, Exit::Ok), "{exit:?}");
        let shown: Value = serde_json::from_str(&out).unwrap();
        assert!(shown["deletedAt"].is_i64());
        // Deleted: the dry run says so instead of planning, and acting is not found.
        let (exit, _) = cli(&host, dir.path(), &["retire", &id]).await;
        assert!(
            matches!(&exit, Exit::Failed(e) if e.contains("is deleted")),
            "{exit:?}"
        );
        let (exit, _) = cli(&host, dir.path(), &["retire", &id, "--yes"]).await;
        assert!(
            matches!(&exit, Exit::Failed(e) if e.contains("404")),
            "{exit:?}"
        );
        host.stop().await;
    }
}
