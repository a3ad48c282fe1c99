//! Named admin identities (issue 15 item 6) and the typed admin surface (item 5), through the
//! API and the CLI, with the types the server and the CLI share:
//!
//! - a named key acts as its identity and every event its actions write names it; the
//!   configured `admin_key_file` keeps working as `admin`;
//! - a revoked key is refused 401 and changes nothing, whatever it asks for;
//! - an unknown key (a guessed one, a real key id with a wrong secret, a malformed one) is
//!   refused 401 and changes nothing;
//! - `GET /v1/openapi.json` describes the admin API without credentials;
//! - `gatehouse audits` filters by node, attestor and outcome.

use base64::Engine as _;
use gatehouse::ops::types::{
    Admin, Audit, CreateAdmin, CreateTenant, CreatedAdmin, Event, RevokedAdmin, Tenant,
};
use gatehouse::ops::{Actor, Id};
use gatehouse::store::AuditResult;
use gatehouse_agent::TokenProducer;
use gatehouse_proto::Role;
use reqwest::{Method, StatusCode};

use crate::common::{TestHost, backends};

fn id(s: &str) -> Id {
    Id::new(s).unwrap()
}

/// Makes admin `name` with the bootstrap key; its key.
async fn add_admin(host: &TestHost, name: &str) -> CreatedAdmin {
    let (status, created) = host
        .admin_call::<_, CreatedAdmin>(
            &host.admin_key,
            Method::POST,
            "/v1/admin/admins",
            Some(&CreateAdmin { name: id(name) }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "admins add {name}");
    created.unwrap()
}

/// Creates tenant `tenant` as the holder of `key`; the status.
async fn create_tenant(host: &TestHost, key: &str, tenant: &str) -> StatusCode {
    host.admin_call::<_, Tenant>(
        key,
        Method::POST,
        "/v1/admin/tenants",
        Some(&CreateTenant { id: id(tenant) }),
    )
    .await
    .0
}

/// Every event, through the API, as the shared type.
async fn events(host: &TestHost) -> Vec<Event> {
    host.event_feed_settled().await;
    let (status, events) = host
        .admin_call::<(), Vec<Event>>(
            &host.admin_key,
            Method::GET,
            "/v1/admin/events?limit=1000",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    events.unwrap()
}

async fn tenant_exists(host: &TestHost, tenant: &str) -> bool {
    let mut tx = host.running.db.begin().await.unwrap();
    let exists = tx.tenant_exists(tenant).await.unwrap();
    tx.commit().await.unwrap();
    exists
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_name_the_admin_who_acted() {
    for backend in backends() {
        let host = TestHost::start(backend).await;
        let alice = add_admin(&host, "alice").await;
        assert!(alice.key.starts_with("gha1."), "{}", alice.key);

        assert_eq!(
            create_tenant(&host, &alice.key, "by-alice").await,
            StatusCode::OK
        );
        assert_eq!(
            create_tenant(&host, &host.admin_key, "by-admin").await,
            StatusCode::OK
        );
        // A node the host admitted on its own, then cordoned by alice.
        let token = host.create_token("node", 1).await;
        let joined = crate::sandbox::join_with(&host, &mut TokenProducer::new(Role::Node), &token)
            .await
            .unwrap();
        let (status, _) = host
            .admin_call::<(), serde_json::Value>(
                &alice.key,
                Method::POST,
                &format!("/v1/admin/nodes/{}/cordon", joined.node_id),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::OK);

        let events = events(&host).await;
        let actor_of = |kind: &str, tenant: Option<&str>| {
            events
                .iter()
                .find(|e| e.kind == kind && (tenant.is_none() || e.tenant_id.as_deref() == tenant))
                .unwrap_or_else(|| panic!("no {kind} event: {events:?}"))
                .actor
                .clone()
        };
        assert_eq!(
            actor_of("admin.created", None).as_deref(),
            Some(Actor::BOOTSTRAP)
        );
        assert_eq!(
            actor_of("tenant.created", Some("by-alice")).as_deref(),
            Some("alice")
        );
        assert_eq!(
            actor_of("tenant.created", Some("by-admin")).as_deref(),
            Some("admin")
        );
        assert_eq!(actor_of("token.created", None).as_deref(), Some("admin"));
        assert_eq!(actor_of("node.cordoned", None).as_deref(), Some("alice"));
        // What the host did itself names no one.
        assert_eq!(actor_of("node.joined", None), None, "{backend:?}");

        // The bootstrap identity is not a name anyone can take, and names are never reused.
        for (name, status) in [
            ("admin", StatusCode::BAD_REQUEST),
            ("alice", StatusCode::CONFLICT),
        ] {
            let (got, _) = host
                .admin_call::<_, CreatedAdmin>(
                    &host.admin_key,
                    Method::POST,
                    "/v1/admin/admins",
                    Some(&CreateAdmin { name: id(name) }),
                )
                .await;
            assert_eq!(got, status, "{name}");
        }
        host.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_admin_key_is_refused_and_changes_nothing() {
    for backend in backends() {
        let host = TestHost::start(backend).await;
        let alice = add_admin(&host, "alice").await;
        let bob = add_admin(&host, "bob").await;
        assert_eq!(create_tenant(&host, &alice.key, "t1").await, StatusCode::OK);

        // Bob revokes alice; the event names bob.
        let (status, revoked) = host
            .admin_call::<(), RevokedAdmin>(
                &bob.key,
                Method::POST,
                "/v1/admin/admins/alice/revoke",
                None,
            )
            .await;
        assert_eq!(status, StatusCode::OK);
        assert!(revoked.unwrap().changed);
        let before = events(&host).await;
        let revocation = before.iter().find(|e| e.kind == "admin.revoked").unwrap();
        assert_eq!(revocation.actor.as_deref(), Some("bob"));
        assert_eq!(revocation.payload["name"], "alice");

        // Whatever alice's key asks for now is 401, and nothing changes.
        assert_eq!(
            create_tenant(&host, &alice.key, "t2").await,
            StatusCode::UNAUTHORIZED
        );
        assert!(!tenant_exists(&host, "t2").await);
        for (method, path) in [
            (Method::GET, "/v1/admin/nodes"),
            (Method::GET, "/v1/admin/admins"),
            (Method::POST, "/v1/admin/admins/bob/revoke"),
            (Method::POST, "/v1/admin/tokens"),
        ] {
            let (status, _) = host
                .admin_call::<_, serde_json::Value>(
                    &alice.key,
                    method.clone(),
                    path,
                    Some(&serde_json::json!({"role": "node", "ttlSeconds": 3600})),
                )
                .await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {path}");
        }
        assert_eq!(
            events(&host).await,
            before,
            "{backend:?}: a refused key wrote nothing"
        );

        // Bob's key still works (revoking one identity touches no other), and the list shows
        // who revoked whom.
        let (status, admins) = host
            .admin_call::<(), Vec<Admin>>(&bob.key, Method::GET, "/v1/admin/admins", None)
            .await;
        assert_eq!(status, StatusCode::OK);
        let admins = admins.unwrap();
        let alice_row = admins.iter().find(|a| a.name == "alice").unwrap();
        assert_eq!(alice_row.revoked_by.as_deref(), Some("bob"));
        assert_eq!(alice_row.created_by, "admin");
        assert!(
            admins
                .iter()
                .any(|a| a.name == "bob" && a.revoked_at.is_none())
        );
        host.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_admin_keys_are_refused_and_change_nothing() {
    let host = TestHost::start(crate::common::Backend::Sqlite).await;
    let alice = add_admin(&host, "alice").await;
    let key_id = alice.key.split('.').nth(1).unwrap().to_owned();
    let b64 = |bytes: [u8; 32]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let before = events(&host).await;
    for key in [
        // A guess at the bootstrap key, of its length.
        base64::engine::general_purpose::STANDARD.encode(rand::random::<[u8; 32]>()),
        // A real key id with another secret.
        format!("gha1.{key_id}.{}", b64(rand::random())),
        // A key id no one holds.
        format!("gha1.adm_nobody.{}", b64(rand::random())),
        // Malformed named keys.
        format!("gha1.{key_id}"),
        format!("gha1.{key_id}.short"),
        format!("gha1.../.{}", b64([0; 32])),
        String::new(),
    ] {
        assert_eq!(
            create_tenant(&host, &key, "intruder").await,
            StatusCode::UNAUTHORIZED,
            "{key:?}"
        );
    }
    assert!(!tenant_exists(&host, "intruder").await);
    assert_eq!(events(&host).await, before);
    // No Authorization header at all.
    let resp = host
        .http()
        .get(format!("{}/v1/admin/admins", host.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_adds_lists_and_revokes_admins() {
    let mut carol = TestHost::start(crate::common::Backend::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let (exit, out) = carol.cli(dir.path(), &["admins", "add", "carol"]).await;
    let key = exit.output(out).unwrap().trim().to_owned();
    assert!(key.starts_with("gha1."), "{key}");

    // Carol's key, as her --admin-key-file, acts as carol.
    let carol_dir = tempfile::tempdir().unwrap();
    let bootstrap = std::mem::replace(&mut carol.admin_key, key);
    let (exit, out) = carol
        .cli(carol_dir.path(), &["tenants", "create", "by-carol"])
        .await;
    assert_eq!(exit.output(out).unwrap(), "tenant by-carol created\n");
    let (_, listed) = carol
        .admin_call::<(), Vec<Event>>(&bootstrap, Method::GET, "/v1/admin/events", None)
        .await;
    let created = listed
        .unwrap()
        .into_iter()
        .find(|e| e.kind == "tenant.created")
        .unwrap();
    assert_eq!(created.actor.as_deref(), Some("carol"));

    let (exit, out) = carol.cli(dir.path(), &["admins", "list"]).await;
    let listed = exit.output(out).unwrap();
    assert!(listed.starts_with("NAME "), "{listed}");
    assert!(
        listed.lines().nth(1).unwrap().starts_with("carol "),
        "{listed}"
    );

    let (exit, out) = carol
        .cli(carol_dir.path(), &["admins", "revoke", "carol"])
        .await;
    assert_eq!(exit.output(out).unwrap(), "admin carol revoked\n");
    let (exit, out) = carol
        .cli(carol_dir.path(), &["tenants", "create", "too-late"])
        .await;
    let err = exit.output(out).unwrap_err();
    assert!(
        err.contains("401") && err.contains("UNAUTHENTICATED"),
        "{err}"
    );
    carol.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_is_served_without_credentials() {
    let host = TestHost::start(crate::common::Backend::Sqlite).await;
    let resp = host
        .http()
        .get(format!("{}/v1/openapi.json", host.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let doc: serde_json::Value = resp.json().await.unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."), "{doc}");
    assert!(
        doc["paths"]["/v1/admin/admins"]["post"].is_object(),
        "{doc}"
    );
    assert!(doc["components"]["schemas"]["Event"]["properties"]["actor"].is_object());
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audits_filter_by_node_attestor_and_outcome() {
    let host = TestHost::start(crate::common::Backend::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let token = host.create_token("node", 1).await;
    let joined = crate::sandbox::join_with(&host, &mut TokenProducer::new(Role::Node), &token)
        .await
        .unwrap();
    // The spent token is refused: a refused round.
    assert!(
        crate::sandbox::join_with(&host, &mut TokenProducer::new(Role::Node), &token)
            .await
            .is_err()
    );
    let audits = |args: &'static [&'static str]| {
        let (host, dir) = (&host, dir.path());
        async move {
            let (exit, out) = host
                .cli(dir, &[&["audits", "-o", "json"], args].concat())
                .await;
            exit.output(out)
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str::<Audit>(l).unwrap())
                .collect::<Vec<_>>()
        }
    };
    let all = audits(&[]).await;
    assert_eq!(all.len(), 2, "{all:?}");
    let refused = audits(&["--outcome", "refused"]).await;
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0].result, AuditResult::Refused);
    assert_eq!(refused[0].reason.as_deref(), Some("no-uses-left"));
    let admitted = audits(&["--outcome", "admitted"]).await;
    assert_eq!(
        admitted[0].node_id.as_deref(),
        Some(joined.node_id.as_str())
    );
    assert_eq!(audits(&["--attestor", "join-token"]).await.len(), 2);
    assert!(audits(&["--attestor", "tpm"]).await.is_empty());
    assert_eq!(audits(&["--limit", "1"]).await, all[..1]);
    assert_eq!(audits(&["--since", "1h"]).await.len(), 2);
    let (exit, out) = host
        .cli(dir.path(), &["audits", "--outcome", "refused"])
        .await;
    let table = exit.output(out).unwrap();
    assert!(table.starts_with("ID "), "{table}");
    assert!(table.contains(" no-uses-left "), "{table}");
    host.stop().await;
}
