//! Live changes: components added, replaced and removed in `attestors_dir` while joins run
//! (picked up by the directory poll, and by SIGHUP in a host process of its own), a component
//! that does not load leaving the old one serving, and every change an event.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use gatehouse::store::{Db, EventRow, sqlite_url};
use gatehouse_agent::{JoinClient, JoinOptions, NodeKey, TokenProducer, join};
use gatehouse_proto::{JoinTrust, Role, TokenString};
use sha2::{Digest, Sha256};

use crate::common::{Backend, HostOptions, TestHost, backends};
use crate::process::HostProcess;

/// SHA-256 of the join-token built into the host.
fn builtin_join_token() -> String {
    let (_, wasm) = gatehouse::app::builtin_attestors()
        .iter()
        .find(|(name, _)| name.contains("join-token") || name.contains("join_token"))
        .expect("join-token is built in");
    hex(&Sha256::digest(wasm))
}

fn sha256_of(path: &str) -> String {
    hex(&Sha256::digest(std::fs::read(path).unwrap()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes `bytes` to `dir/name` as an operator's deploy would: a temporary file renamed over
/// the old one, so the poll never sees half a file.
fn deploy(dir: &Path, name: &str, bytes: &[u8]) {
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, dir.join(name)).unwrap();
}

/// The pause between two joins of a [`join_loop`].
const JOIN_PACE: Duration = Duration::from_millis(20);

/// Joins through join-token in a loop until `stop`, each with a fresh key and a one-use token;
/// returns how many joins succeeded and every failure.
async fn join_loop(
    url: String,
    trust: JoinTrust,
    tokens: Vec<TokenString>,
    stop: Arc<AtomicBool>,
) -> (usize, Vec<String>) {
    let client = JoinClient::new(&url, &trust).unwrap();
    let (mut ok, mut failures) = (0, Vec::new());
    for token in tokens {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        match join(
            &client,
            &trust,
            &mut TokenProducer::new(Role::Node),
            Some(&token),
            &NodeKey::generate().unwrap(),
            &JoinOptions::default(),
        )
        .await
        {
            Ok(_) => ok += 1,
            Err(e) => failures.push(format!("{}: {e}", token.id)),
        }
        // Paced, so that the tokens last through every phase of the test however fast joins
        // are (unpaced, a release-speed host spent them all before the last phase).
        tokio::time::sleep(JOIN_PACE).await;
    }
    (ok, failures)
}

/// Waits until join-token is served with `sha256` from a source of `kind` (`file` or
/// `built-in`), as the admin API lists it.
async fn until_served(
    http: &reqwest::Client,
    url: &str,
    admin_key: &str,
    sha256: &str,
    kind: &str,
) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let list: serde_json::Value = http
            .get(format!("{url}/v1/admin/attestors"))
            .bearer_auth(admin_key)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let served = list.as_array().unwrap().iter().any(|a| {
            a["id"] == "join-token" && a["sha256"] == sha256 && a["source"]["kind"] == kind
        });
        if served {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "join-token never served {sha256} from {kind}: {list}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every admission names the version that decided it, and that version's own subject: the
/// replacement writes `replacement:<token>`, join-token (the built-in, or the same source built
/// as a test artifact, `file`) `token:<token>`.
fn assert_each_join_decided_by_one_version(
    events: &[EventRow],
    builtin: &str,
    file: &str,
    replacement: &str,
) {
    let joined: Vec<_> = events.iter().filter(|e| e.kind == "node.joined").collect();
    for e in &joined {
        let sha = e.payload["attestorSha256"].as_str().unwrap_or_default();
        let subject = e.payload["subject"].as_str().unwrap_or_default();
        if sha == replacement {
            assert!(subject.starts_with("replacement:"), "{sha}: {subject}");
        } else {
            assert!(
                sha == builtin || sha == file,
                "a join decided by an unknown version: {e:?}"
            );
            assert!(subject.starts_with("token:"), "{sha}: {subject}");
        }
    }
    for (version, prefix) in [(replacement, "replacement:"), (builtin, "token:")] {
        assert!(
            joined.iter().any(|e| e.payload["attestorSha256"] == version
                && e.payload["subject"]
                    .as_str()
                    .unwrap_or_default()
                    .starts_with(prefix)),
            "no join was decided by {version}"
        );
    }
}

/// The `attestor.*` events, as (kind, attestor, sha256, source now).
fn attestor_events(events: &[EventRow]) -> Vec<(String, Option<String>, String, String)> {
    events
        .iter()
        .filter(|e| e.kind.starts_with("attestor."))
        .map(|e| {
            (
                e.kind.clone(),
                e.attestor.clone(),
                e.payload["sha256"].as_str().unwrap_or_default().to_owned(),
                e.payload["now"]["source"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn components_added_replaced_and_removed_while_joins_run() {
    // The artifact is join-token's source built for the tests: other bytes than the built-in.
    let file = sha256_of(gatehouse_test_artifacts::JOIN_TOKEN);
    let builtin = builtin_join_token();
    let replacement = sha256_of(gatehouse_test_artifacts::JOIN_TOKEN_REPLACEMENT);
    for backend in backends() {
        let host = TestHost::start_with(HostOptions {
            attestors_poll_ms: Some(100),
            ..HostOptions::new(backend)
        })
        .await;
        let dir = host.data.join("attestors");
        let mut tokens = Vec::new();
        for _ in 0..600 {
            tokens.push(host.create_token("node", 1).await);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let loops: Vec<_> = tokens
            .chunks(300)
            .map(|chunk| {
                tokio::spawn(join_loop(
                    host.url(),
                    host.trust.clone(),
                    chunk.to_vec(),
                    stop.clone(),
                ))
            })
            .collect();
        let (http, url) = (host.http(), host.url());
        let settle = || tokio::time::sleep(Duration::from_millis(400));

        settle().await;
        // Added: a file with a built-in's id replaces it.
        deploy(
            &dir,
            "jt.wasm",
            &std::fs::read(gatehouse_test_artifacts::JOIN_TOKEN_REPLACEMENT).unwrap(),
        );
        until_served(&http, &url, &host.admin_key, &replacement, "file").await;
        settle().await;
        // A broken component: refused with its reason; the replacement keeps serving.
        deploy(&dir, "broken.wasm", b"\0asm not really");
        deploy(
            &dir,
            "wit-major.wasm",
            &std::fs::read(gatehouse_test_artifacts::WIT_MAJOR).unwrap(),
        );
        settle().await;
        // Replaced: other bytes in the same file (the built-in's).
        deploy(
            &dir,
            "jt.wasm",
            &std::fs::read(gatehouse_test_artifacts::JOIN_TOKEN).unwrap(),
        );
        until_served(&http, &url, &host.admin_key, &file, "file").await;
        settle().await;
        // Back to the replacement, then removed: the built-in serves again.
        deploy(
            &dir,
            "jt.wasm",
            &std::fs::read(gatehouse_test_artifacts::JOIN_TOKEN_REPLACEMENT).unwrap(),
        );
        until_served(&http, &url, &host.admin_key, &replacement, "file").await;
        settle().await;
        for name in ["jt.wasm", "broken.wasm", "wit-major.wasm"] {
            std::fs::remove_file(dir.join(name)).unwrap();
        }
        until_served(&http, &url, &host.admin_key, &builtin, "built-in").await;
        settle().await;
        stop.store(true, Ordering::Relaxed);

        let mut joined = 0;
        for l in loops {
            let (ok, failures) = l.await.unwrap();
            assert!(
                failures.is_empty(),
                "{backend:?}: joins failed: {failures:?}"
            );
            joined += ok;
        }
        let events = host.events().await;
        let admitted = events.iter().filter(|e| e.kind == "node.joined").count();
        assert_eq!(admitted, joined, "{backend:?}: one admission per join");
        // No round was refused, not even `storage-error`: a reload shuts the retired
        // version's guest runtime down, and a PostgreSQL connection opened on it used to break
        // with it (see `Db::read`).
        let refused: Vec<_> = events
            .iter()
            .filter(|e| e.kind == "security.join.refused")
            .collect();
        assert!(
            refused.is_empty(),
            "{backend:?}: joins were refused: {refused:?}"
        );
        assert_each_join_decided_by_one_version(&events, &builtin, &file, &replacement);

        let changes = attestor_events(&events);
        let replaced: Vec<_> = changes
            .iter()
            .filter(|c| c.0 == "attestor.replaced")
            .map(|c| (c.2.as_str(), c.3.as_str()))
            .collect();
        let expected = vec![
            (replacement.as_str(), "file"),
            (file.as_str(), "file"),
            (replacement.as_str(), "file"),
            (builtin.as_str(), "built-in"),
        ];
        let with_source: Vec<_> = replaced
            .iter()
            .map(|(sha, source)| (*sha, source.split(' ').next().unwrap_or_default()))
            .collect();
        assert_eq!(with_source, expected, "{backend:?}: {changes:?}");
        let failed: Vec<_> = events
            .iter()
            .filter(|e| e.kind == "attestor.load-failed")
            .collect();
        let broken_sha = hex(&Sha256::digest(b"\0asm not really"));
        assert!(
            failed
                .iter()
                .any(|e| e.payload["sha256"] == broken_sha.as_str()
                    && e.reason.as_deref() == Some("not-a-component")),
            "{backend:?}: {failed:?}"
        );
        assert!(
            failed
                .iter()
                .any(|e| e.reason.as_deref() == Some("wit-version")
                    && e.payload["reason"]
                        .as_str()
                        .unwrap_or_default()
                        .contains("wit-major.wasm")),
            "{backend:?}: {failed:?}"
        );
        host.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_attestor_is_loaded_and_removed_and_a_failed_pin_keeps_the_old_one() {
    let host = TestHost::start_with(HostOptions {
        attestors_poll_ms: Some(0),
        ..HostOptions::new(Backend::Sqlite)
    })
    .await;
    let dir = host.data.join("attestors");
    let watch = host.running.attestors.clone();
    let challenge = sha256_of(gatehouse_test_artifacts::CHALLENGE);

    std::fs::copy(
        gatehouse_test_artifacts::CHALLENGE,
        dir.join("challenge.wasm"),
    )
    .unwrap();
    let reload = watch.reload().await;
    assert_eq!(reload.changes.len(), 1, "{:?}", reload.changes);
    assert_eq!(reload.changes[0].kind.event_kind(), "attestor.loaded");
    assert!(host.running.join.runtime().contains("challenge"));
    // Nothing changed: nothing reported, nothing reloaded.
    assert!(watch.reload().await.changes.is_empty());

    // A pin the file does not match: refused, the loaded one keeps serving.
    let mut config = gatehouse::config::Config::load(&host.data.join("gatehouse.toml")).unwrap();
    config.runtime.attestors_dir = Some(dir.clone());
    config
        .attestors
        .entry("challenge".into())
        .or_default()
        .sha256 = Some("0".repeat(64));
    let reload = watch.reload_with(config.runtime()).await;
    assert_eq!(reload.changes.len(), 1, "{:?}", reload.changes);
    assert_eq!(reload.changes[0].kind.event_kind(), "attestor.load-failed");
    assert_eq!(reload.changes[0].code, Some("sha256-pin"));
    assert_eq!(
        reload.changes[0].sha256.as_deref(),
        Some(challenge.as_str())
    );
    assert!(host.running.join.runtime().contains("challenge"));

    // Removed (pin lifted): gone, and a request naming it is refused unknown-attestor.
    config.attestors.remove("challenge");
    std::fs::remove_file(dir.join("challenge.wasm")).unwrap();
    let reload = watch.reload_with(config.runtime()).await;
    assert_eq!(reload.changes.len(), 1, "{:?}", reload.changes);
    assert_eq!(reload.changes[0].kind.event_kind(), "attestor.removed");
    assert!(!host.running.join.runtime().contains("challenge"));

    let kinds: Vec<_> = attestor_events(&host.events().await)
        .into_iter()
        .map(|c| (c.0, c.1, c.2))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (
                "attestor.loaded".into(),
                Some("challenge".into()),
                challenge.clone()
            ),
            (
                "attestor.load-failed".into(),
                Some("challenge".into()),
                challenge.clone()
            ),
            (
                "attestor.removed".into(),
                Some("challenge".into()),
                challenge.clone()
            ),
        ]
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sighup_reloads_attestors_without_dropping_a_join() {
    let file = sha256_of(gatehouse_test_artifacts::JOIN_TOKEN);
    let builtin = builtin_join_token();
    let replacement = sha256_of(gatehouse_test_artifacts::JOIN_TOKEN_REPLACEMENT);
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let files = gatehouse::app::dev::prepare(&data, "127.0.0.1:0").unwrap();
    // Only SIGHUP reloads: the poll is off.
    let mut table: toml::Table =
        toml::from_str(&std::fs::read_to_string(&files.config).unwrap()).unwrap();
    let runtime = table
        .entry("runtime")
        .or_insert(toml::Value::Table(toml::Table::new()))
        .as_table_mut()
        .unwrap();
    runtime.insert("attestors_poll_ms".into(), 0.into());
    std::fs::write(&files.config, toml::to_string(&table).unwrap()).unwrap();

    let host = {
        let (data, config) = (data.clone(), files.config.clone());
        tokio::task::spawn_blocking(move || HostProcess::start_with_config(data, &config))
            .await
            .unwrap()
    };
    let (url, trust, admin_key) = (host.url.clone(), host.trust.clone(), host.admin_key.clone());
    let http = host.http("127.0.0.1".parse().unwrap());
    let mut tokens = Vec::new();
    for _ in 0..300 {
        tokens.push(host.create_token(&http).await);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let joins = tokio::spawn(join_loop(url.clone(), trust.clone(), tokens, stop.clone()));
    let settle = || tokio::time::sleep(Duration::from_millis(500));
    let dir = data.join("attestors");

    settle().await;
    deploy(
        &dir,
        "jt.wasm",
        &std::fs::read(gatehouse_test_artifacts::JOIN_TOKEN_REPLACEMENT).unwrap(),
    );
    settle().await;
    // Not yet: only SIGHUP loads it.
    until_served(&http, &url, &admin_key, &builtin, "built-in").await;
    host.signal("HUP");
    until_served(&http, &url, &admin_key, &replacement, "file").await;
    settle().await;
    deploy(
        &dir,
        "jt.wasm",
        &std::fs::read(gatehouse_test_artifacts::JOIN_TOKEN).unwrap(),
    );
    host.signal("HUP");
    until_served(&http, &url, &admin_key, &file, "file").await;
    settle().await;
    deploy(
        &dir,
        "jt.wasm",
        &std::fs::read(gatehouse_test_artifacts::JOIN_TOKEN_REPLACEMENT).unwrap(),
    );
    host.signal("HUP");
    until_served(&http, &url, &admin_key, &replacement, "file").await;
    settle().await;
    std::fs::remove_file(dir.join("jt.wasm")).unwrap();
    host.signal("HUP");
    until_served(&http, &url, &admin_key, &builtin, "built-in").await;
    settle().await;
    stop.store(true, Ordering::Relaxed);
    let (joined, failures) = joins.await.unwrap();
    assert!(failures.is_empty(), "joins failed: {failures:?}");
    assert!(joined > 0);

    // SIGHUP did not stop it; SIGTERM does, cleanly.
    let status = tokio::task::spawn_blocking(move || host.stop())
        .await
        .unwrap();
    assert!(status.success(), "{status:?}");

    let db = Db::connect(&sqlite_url(&data.join("gatehouse.db")).unwrap())
        .await
        .unwrap();
    let mut tx = db.begin().await.unwrap();
    let events = tx.list_events(0, 10_000).await.unwrap();
    tx.commit().await.unwrap();
    db.close().await;
    assert_eq!(
        events.iter().filter(|e| e.kind == "node.joined").count(),
        joined
    );
    assert_each_join_decided_by_one_version(&events, &builtin, &file, &replacement);
    let replaced: Vec<_> = attestor_events(&events)
        .into_iter()
        .filter(|c| c.0 == "attestor.replaced")
        .map(|c| c.2)
        .collect();
    assert_eq!(
        replaced,
        vec![
            replacement.clone(),
            file.clone(),
            replacement.clone(),
            builtin.clone()
        ]
    );
}

/// SIGHUP names each setting it cannot apply, and only that one, when it alone changed; and
/// none when nothing did. A setting missing from the host's list would change in the file,
/// be reported as reloaded, and silently keep its old value until a restart. Not here:
/// `data_dir`, `attestors.<id>.reclaim` and `.fetch`, whose change also moves what SIGHUP does
/// apply (the paths it reads again, the attestors' configuration).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_names_each_changed_setting_that_needs_a_restart() {
    type Change = fn(&mut gatehouse::config::Config);
    let changes: [(&str, Change); 9] = [
        ("listen", |c| c.listen = "127.0.0.1:1".into()),
        ("database_url", |c| {
            c.database_url = Some("sqlite:///elsewhere.db".into());
        }),
        ("database_connections", |c| c.database_connections = Some(4)),
        ("pki_bundle", |c| c.pki_bundle = "elsewhere.json".into()),
        ("secret_file", |c| {
            c.secret_file = Some("elsewhere.key".into())
        }),
        ("admin_key_file", |c| {
            c.admin_key_file = "elsewhere.keys".into()
        }),
        ("join.cert_ttl_seconds", |c| c.join.cert_ttl_seconds += 60),
        ("[limits]", |c| c.limits.max_connections += 1),
        ("runtime.attestors_poll_ms", |c| {
            c.runtime.attestors_poll_ms += 1;
        }),
    ];
    let mut host = TestHost::start(Backend::Sqlite).await;
    let unchanged = host.sighup().await;
    assert!(unchanged.needs_restart.is_empty(), "{unchanged:?}");
    let started = host.config.clone();
    for (name, change) in changes {
        let mut config = started.clone();
        change(&mut config);
        let reloaded = host.running.reload(config).await;
        assert_eq!(reloaded.needs_restart, [name], "changing {name}");
    }
    // It kept what it started with: it still admits a machine where it listened.
    host.join_node().await;
    host.stop().await;
}
