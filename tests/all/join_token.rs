//! join-token end to end: exactly-once under concurrency, and every refusal reason.

use gatehouse::store::{TokenExpect, TokenRole};
use gatehouse_agent::{JoinClient, JoinError, JoinOptions, NodeKey, TokenProducer, join};
use gatehouse_proto::{Claims, Role, TokenString};

use crate::common::{Backend, TestHost, backends};

async fn join_once(
    host: &TestHost,
    token: &TokenString,
    role: Role,
    claims: Claims,
) -> Result<gatehouse_agent::Joined, JoinError> {
    let client = JoinClient::new(&host.url(), &host.trust)?;
    let key = NodeKey::generate()?;
    let options = JoinOptions {
        claims,
        ..JoinOptions::default()
    };
    join(
        &client,
        &host.trust,
        &mut TokenProducer::new(role),
        Some(token),
        &key,
        &options,
    )
    .await
}

/// `n` agents joining with `token` at once, each with a key of its own, on tasks of their own.
fn agents_joining(
    host: &TestHost,
    token: &TokenString,
    n: usize,
) -> tokio::task::JoinSet<Result<gatehouse_agent::Joined, JoinError>> {
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..n {
        let (url, trust, token) = (host.url(), host.trust.clone(), token.clone());
        tasks.spawn(async move {
            let client = JoinClient::new(&url, &trust)?;
            let key = NodeKey::generate()?;
            join(
                &client,
                &trust,
                &mut TokenProducer::new(Role::Node),
                Some(&token),
                &key,
                &JoinOptions::default(),
            )
            .await
        });
    }
    tasks
}

async fn three_uses_twenty_agents(backend: Backend) {
    let host = TestHost::start(backend).await;
    let token = host.create_token("node", 3).await;
    let mut tasks = agents_joining(&host, &token, 20);
    let (mut admitted, mut denied) = (0, 0);
    while let Some(r) = tasks.join_next().await {
        match r.unwrap() {
            Ok(j) => {
                assert!(
                    j.spiffe_id.starts_with("spiffe://gatehouse.dev/node/node_"),
                    "{}",
                    j.spiffe_id
                );
                admitted += 1;
            }
            Err(JoinError::Denied) => denied += 1,
            Err(e) => panic!("{backend:?}: unexpected join error: {e}"),
        }
    }
    assert_eq!((admitted, denied), (3, 17), "{backend:?}");
    let reasons = host.refusal_reasons().await;
    assert_eq!(reasons.len(), 17, "{backend:?}: {reasons:?}");
    assert!(
        reasons.iter().all(|r| r == "no-uses-left"),
        "{backend:?}: {reasons:?}"
    );
    let joined = host
        .events()
        .await
        .into_iter()
        .filter(|e| e.kind == "node.joined")
        .count();
    assert_eq!(joined, 3);
    let audits = host.audits().await;
    assert_eq!(audits.len(), 20, "one audit row per round");
    let mut tx = host.running.db.begin().await.unwrap();
    assert_eq!(tx.list_nodes().await.unwrap().len(), 3);
    assert_eq!(
        tx.lock_token(&token.id).await.unwrap().unwrap().uses_left,
        0
    );
    tx.commit().await.unwrap();
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_three_use_token_admits_exactly_three_of_twenty() {
    for backend in backends() {
        three_uses_twenty_agents(backend).await;
    }
}

/// On PostgreSQL a many-use token's spends past two wait in the host, not on the token's row
/// (`join::spend_gate`). With the row locked by another transaction, six joins on a six-use
/// token run their attestor calls, and then only two of them wait on the lock in the server: the
/// other four hold no connection, and a host without the gate would have all six there. Once the
/// lock goes (rolled back, the token unchanged) every join is admitted, each use spent once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_many_use_tokens_spends_past_two_wait_in_the_host_not_on_its_row() {
    if !backends().contains(&Backend::Postgres) {
        eprintln!("skipped: DATABASE_URL is not set");
        return;
    }
    let host = TestHost::start(Backend::Postgres).await;
    let token = host.create_token("node", 6).await;

    let mut holding = host.running.db.begin().await.unwrap();
    assert!(holding.lock_token(&token.id).await.unwrap().is_some());
    use sqlx::Connection as _;
    let mut watch = sqlx::PgConnection::connect(&host.database_url)
        .await
        .unwrap();
    let mut joins = agents_joining(&host, &token, 6);
    crate::common::lock_waiters(&mut watch, 2).await;
    // Every call has ended (within 30 s: a loaded CI machine runs many tests at once); give the
    // joins past the gate's two every chance to reach the row before counting who waits there.
    for _ in 0..3000 {
        if join_token_calls(&host).await >= 6 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(join_token_calls(&host).await, 6, "six attestor calls ran");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(
        crate::common::lock_waiting(&mut watch).await,
        2,
        "spends of one token waiting on its row"
    );
    holding.rollback().await.unwrap();
    while let Some(joined) = joins.join_next().await {
        let joined = joined.unwrap();
        assert!(joined.is_ok(), "{:?}", joined.map(|j| j.node_id));
    }
    let mut read = host.running.db.read().await.unwrap();
    let row = read.read_token(&token.id).await.unwrap().unwrap();
    assert_eq!(row.uses_left, 0);
    assert_eq!(read.list_nodes().await.unwrap().len(), 6);
    drop(read);
    host.stop().await;
}

/// Joins with `token` and asserts the agent sees only ACCESS_DENIED and the event names `reason`.
async fn refused(host: &TestHost, token: &TokenString, role: Role, claims: Claims, reason: &str) {
    match join_once(host, token, role, claims).await {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_refusal_reaches_the_agent_as_access_denied_with_its_reason_in_the_event() {
    for backend in backends() {
        let host = TestHost::start(backend).await;

        let good = host.create_token("node", 5).await;
        let wrong_secret = TokenString {
            id: good.id.clone(),
            secret: vec![1; 32],
        };
        refused(
            &host,
            &wrong_secret,
            Role::Node,
            Claims::default(),
            "bad-secret",
        )
        .await;

        let unknown = TokenString {
            id: "tok_doesnotexist".into(),
            secret: vec![1; 32],
        };
        refused(
            &host,
            &unknown,
            Role::Node,
            Claims::default(),
            "unknown-token",
        )
        .await;

        let revoked = host.create_token("node", 1).await;
        host.revoke_token(&revoked.id).await;
        refused(&host, &revoked, Role::Node, Claims::default(), "revoked").await;

        // Expired by database time: the row's expiry is already behind the database clock.
        let expired = host
            .insert_token(TokenRole::Node, 1, -1_000, TokenExpect::default())
            .await;
        refused(&host, &expired, Role::Node, Claims::default(), "expired").await;

        let site = host.create_token("site", 1).await;
        refused(&host, &site, Role::Node, Claims::default(), "wrong-role").await;

        let bound = host
            .insert_token(
                TokenRole::Node,
                1,
                60_000,
                TokenExpect {
                    product_uuid: Some("1111-2222".into()),
                    ..TokenExpect::default()
                },
            )
            .await;
        let elsewhere = Claims {
            product_uuid: Some("3333-4444".into()),
            ..Claims::default()
        };
        refused(&host, &bound, Role::Node, elsewhere, "expect-product-uuid").await;

        // Nothing refused spent a use: the good token still admits, and the bound one admits
        // the machine it is bound to.
        join_once(&host, &good, Role::Node, Claims::default())
            .await
            .unwrap();
        let here = Claims {
            product_uuid: Some("1111-2222".into()),
            ..Claims::default()
        };
        join_once(&host, &bound, Role::Node, here).await.unwrap();
        // A site token admits a site.
        join_once(&host, &site, Role::Site, Claims::default())
            .await
            .unwrap();
        host.stop().await;
    }
}

/// A token revoked while its join is in flight admits nothing, deterministically. The attestor
/// reads the token as committed (the revocation is not committed yet); the locked phase judges
/// the token as read, and its spend waits on the row lock the revocation holds; the revocation
/// commits, the spend returns the revoked row, the round runs again and the attestor refuses
/// `revoked`. The spend is the one check between the attestor's read and the commit, so this is
/// the rule it holds: no use spent, no node or certificate, no admission recorded. On
/// PostgreSQL; SQLite's counterpart follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_revoked_mid_join_admits_nothing() {
    if !backends().contains(&Backend::Postgres) {
        eprintln!("skipped: DATABASE_URL is not set");
        return;
    }
    let host = TestHost::start(Backend::Postgres).await;
    let token = host.create_token("node", 1).await;

    let mut revoking = host.running.db.begin().await.unwrap();
    assert!(revoking.revoke_token(&token.id).await.unwrap());
    use sqlx::Connection as _;
    let mut watch = sqlx::PgConnection::connect(&host.database_url)
        .await
        .unwrap();
    let (joined, ()) = tokio::join!(
        join_once(&host, &token, Role::Node, Claims::default()),
        async {
            crate::common::lock_waiters(&mut watch, 1).await;
            revoking.commit().await.unwrap();
        }
    );
    assert!(
        matches!(joined, Err(JoinError::Denied)),
        "{:?}",
        joined.map(|j| j.node_id)
    );
    let reasons = host.refusal_reasons().await;
    assert_eq!(reasons, ["revoked"]);
    assert_nothing_admitted(&host, &token).await;
    host.stop().await;
}

/// `token`, revoked, still has its one use, and no node, admission or `node.joined` event
/// exists.
async fn assert_nothing_admitted(host: &TestHost, token: &TokenString) {
    let mut read = host.running.db.read().await.unwrap();
    let row = read.read_token(&token.id).await.unwrap().unwrap();
    assert_eq!((row.revoked, row.uses_left), (true, 1), "a use was spent");
    assert!(
        read.list_nodes().await.unwrap().is_empty(),
        "a node was made"
    );
    let audits = read.list_audits(0, 100).await.unwrap();
    assert!(
        audits
            .iter()
            .all(|a| a.result != gatehouse::store::AuditResult::Admitted),
        "{audits:?}"
    );
    drop(read);
    assert!(
        host.events().await.iter().all(|e| e.kind != "node.joined"),
        "an admission was recorded"
    );
}

/// How many times join-token's `verify` has run on `host`, from its metrics.
async fn join_token_calls(host: &TestHost) -> u64 {
    host.attestor_metric("gatehouse_attestor_call_seconds_count", "join-token")
        .await
}

/// [`a_token_revoked_mid_join_admits_nothing`] on SQLite, where a join waits behind the one
/// write connection rather than a row lock, and its locked phase is one query from its
/// savepoint to its release: the revoke holds the connection while the join's attestor reads
/// the token as it was; the join's write then finds the token changed and writes nothing, its
/// round runs again (a second call), and it is refused as revoked. Nothing spent, made or
/// recorded as admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_revoked_mid_join_admits_nothing_on_sqlite() {
    let host = TestHost::start(Backend::Sqlite).await;
    let token = host.create_token("node", 1).await;
    let calls_before = join_token_calls(&host).await;

    let mut revoking = host.running.db.begin().await.unwrap();
    assert!(revoking.revoke_token(&token.id).await.unwrap());
    let (joined, ()) = tokio::join!(
        join_once(&host, &token, Role::Node, Claims::default()),
        async {
            // The attestor read the token, as it was, before the revoke commits.
            while join_token_calls(&host).await == calls_before {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            revoking.commit().await.unwrap();
        }
    );
    assert!(
        matches!(joined, Err(JoinError::Denied)),
        "{:?}",
        joined.map(|j| j.node_id)
    );
    assert_eq!(host.refusal_reasons().await, ["revoked"]);
    assert_eq!(
        join_token_calls(&host).await,
        calls_before + 2,
        "the round ran again"
    );
    assert_nothing_admitted(&host, &token).await;
    host.stop().await;
}
