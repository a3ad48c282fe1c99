//! Scale (issue 14): the statements of a join and of a renewal are served by indexes, so their
//! cost stays flat as the tables grow. PostgreSQL, with thousands of nodes, certificates,
//! bindings and tokens already present and analysed: a run of token joins and renewals makes
//! no sequential scan of any of those tables. The count is PostgreSQL's own
//! (`pg_stat_user_tables`), of whatever the host's connections ran, so there is no copy of the
//! host's SQL here to drift from it.

use std::collections::BTreeMap;
use std::time::Duration;

use gatehouse::store::{NewNode, NewNodeCert, NewToken, NodeRole, TokenExpect, TokenRole};
use gatehouse_agent::{NodeKey, RenewClient};
use sqlx::Connection as _;

use crate::common::{Backend, HostOptions, TestHost, backends, drop_postgres, fresh_postgres};

/// Rows of each filled table: far past where PostgreSQL's planner still prefers reading a
/// whole small table to an index.
const ROWS: usize = 10_000;

/// The tables filled, which no statement of a join or a renewal may scan whole, and whether
/// those statements must read them (bindings are read only by attestors that bind).
const FILLED: [(&str, bool); 4] = [
    ("nodes", true),
    ("node_certs", true),
    ("node_bindings", false),
    ("join_tokens", true),
];

/// Joins (each then renewed once) the measured run makes.
const JOINS: usize = 12;

/// Writes [`ROWS`] nodes, each with a certificate and a binding, and as many spent tokens, in
/// one transaction through the host's own store.
async fn fill(host: &TestHost) {
    let mut tx = host.running.db.begin().await.unwrap();
    let now = tx.now().await.unwrap();
    for i in 0..ROWS {
        let node_id = format!("node_fill_{i:05}");
        tx.insert_node(&NewNode {
            id: node_id.clone(),
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
        tx.insert_node_cert(&NewNodeCert {
            serial: format!("{i:032x}"),
            node_id: node_id.clone(),
            der: format!("not a certificate {i}").into_bytes(),
            generation: 1,
            role: NodeRole::Node,
            not_before: now - 60_000,
            not_after: now + 3_600_000,
            statements: vec![],
            created_at: now,
        })
        .await
        .unwrap();
        tx.bind("fill", &format!("value-{i}"), &node_id)
            .await
            .unwrap();
        tx.insert_token(&NewToken {
            id: format!("tok_fill_{i:05}"),
            role: TokenRole::Node,
            secret_sha256: [i as u8; 32],
            tenant_id: "root".into(),
            pool_id: None,
            site_id: None,
            expires_at: now + 3_600_000,
            uses: 0,
            expect: TokenExpect::default(),
            reclaim: false,
            created_at: now,
        })
        .await
        .unwrap();
    }
    tx.commit().await.unwrap();
}

/// Sequential and index scans so far of each user table of the database at `url`, once no
/// other connection is open to it (a backend's counts reach the statistics when it ends).
async fn scans(url: &str, database: &str) -> BTreeMap<String, (i64, i64)> {
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let others: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
        )
        .bind(database)
        .fetch_one(&mut conn)
        .await
        .unwrap();
        if others == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{others} connections still open after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let rows: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT relname::text, seq_scan, COALESCE(idx_scan, 0) FROM pg_stat_user_tables",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
    rows.into_iter().map(|(t, s, i)| (t, (s, i))).collect()
}

/// A machine joins with a single-use token, then renews its certificate once.
async fn join_and_renew(host: &TestHost) {
    let (key, joined) = host.join_node().await;
    RenewClient::new(&host.url(), &host.trust, &key, &joined.chain)
        .unwrap()
        .renew(&host.trust, &joined.node_id, &NodeKey::generate().unwrap())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joins_and_renewals_scan_no_large_table_whole() {
    if !backends().contains(&Backend::Postgres) {
        eprintln!("skipped: DATABASE_URL is not set, and this test needs PostgreSQL");
        return;
    }
    let (url, database) = fresh_postgres().await;
    let opts = HostOptions {
        database_url: Some(url.clone()),
        ..HostOptions::new(Backend::Postgres)
    };
    // A first host migrates the database; the rows go in, then the planner's statistics.
    let host = TestHost::start_with(opts.clone()).await;
    fill(&host).await;
    host.stop().await;
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query("ANALYZE").execute(&mut conn).await.unwrap();
    conn.close().await.unwrap();

    let before = scans(&url, &database).await;
    let host = TestHost::start_with(opts).await;
    for _ in 0..JOINS {
        join_and_renew(&host).await;
    }
    host.stop().await;
    let after = scans(&url, &database).await;
    drop_postgres(&database).await;

    let delta = |table: &str| {
        let (s0, i0) = before.get(table).copied().unwrap_or_default();
        let (s1, i1) = after.get(table).copied().unwrap_or_default();
        (s1 - s0, i1 - i0)
    };
    for (table, read) in FILLED {
        let (seq, idx) = delta(table);
        assert_eq!(
            seq, 0,
            "{table}: {seq} whole-table scans in {JOINS} joins and renewals ({idx} index scans)"
        );
        assert!(!read || idx > 0, "{table}: never read");
    }
}
