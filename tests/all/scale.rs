//! Scale (issue 14): the statements of a join and of a renewal are served by indexes, so their
//! cost stays flat as the tables grow. PostgreSQL, with thousands of nodes, certificates,
//! bindings and tokens already present and analysed: a run of token joins and renewals makes
//! no sequential scan of any of those tables. The count is PostgreSQL's own
//! (`pg_stat_user_tables`), of whatever the host's connections ran, so there is no copy of the
//! host's SQL here to drift from it.

use std::collections::BTreeMap;
use std::time::Duration;

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
    // What `gatehouse bench --nodes` fills: each node with a certificate, a binding and a
    // spent token, through the host's own store.
    gatehouse_bench::fill::fill(&host.running.db, ROWS)
        .await
        .unwrap();
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
