//! Scale (issue 14): the statements of a join, a renewal and the CRL are served by indexes, so
//! their cost stays flat as the tables grow. With thousands of nodes, certificates, bindings
//! and tokens already present, a run of token joins and renewals and a CRL reads none of those
//! tables whole, on either backend. What is checked is whatever the host ran, so there is no
//! copy of the host's SQL here to drift from it:
//!
//! - PostgreSQL counts its own scans (`pg_stat_user_tables`) of whatever the host's
//!   connections ran, with the planner's statistics of the filled tables.
//! - SQLite keeps no such count, so the host runs in a process of its own with sqlx's log of
//!   every statement it runs (`sqlx::query` at `debug`), and each statement of that log is
//!   planned again (`EXPLAIN QUERY PLAN`) on the database the run left: no plan may read a
//!   filled table whole (`SCAN`), only look rows up in it (`SEARCH`), and no lookup may pick
//!   more than a hundredth of a filled table's rows (SQLite's own statistics of the filled
//!   tables say how many each index's lookup picks): a lookup by `revoked = 0` is a lookup,
//!   but picks every live certificate.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use gatehouse::store::{Db, sqlite_url};
use gatehouse_agent::{NodeKey, RenewClient};
use gatehouse_proto::{JoinTrust, TokenString};
use sqlx::Connection as _;

use crate::common::{
    Backend, HostOptions, TestHost, backends, drop_postgres, fresh_postgres, token_join,
};
use crate::process::HostProcess;

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

/// A machine joins the host at `url` with a single-use `token`, then renews its certificate
/// once.
async fn join_and_renew(url: &str, trust: &JoinTrust, token: &TokenString) {
    let (key, joined) = token_join(url, trust, token).await.unwrap();
    RenewClient::new(url, trust, &key, &joined.chain)
        .unwrap()
        .renew(trust, &joined.node_id, &NodeKey::generate().unwrap())
        .await
        .unwrap();
}

/// Fetches the CRL from the host at `url`: it reads the unexpired revoked and superseded
/// certificates (the renewals above superseded some).
async fn fetch_crl(http: &reqwest::Client, url: &str) {
    let crl = http.get(format!("{url}/v1/crl")).send().await.unwrap();
    assert!(crl.status().is_success(), "the CRL: {}", crl.status());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_joins_and_renewals_scan_no_large_table_whole() {
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
        let token = host.create_token("node", 1).await;
        join_and_renew(&host.url(), &host.trust, &token).await;
    }
    fetch_crl(&host.http(), &host.url()).await;
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

/// Every statement the host's log (JSON lines) says it ran: sqlx logs each text it runs at
/// `debug` under `sqlx::query`, its first words as `summary` and, when there are more, the
/// whole text as `db.statement`. A text may hold several statements (a SQLite token join sends
/// its transaction as one); each is returned on its own.
fn statements_logged(log: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(log).unwrap();
    let mut statements = BTreeSet::new();
    for line in text.lines() {
        // Anything else on stderr (a panic's message) is left to the run's other checks.
        let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if event["target"] != "sqlx::query" {
            continue;
        }
        let fields = &event["fields"];
        let sql = fields["db.statement"]
            .as_str()
            .filter(|s| !s.trim().is_empty())
            .or_else(|| fields["summary"].as_str())
            .expect("a statement's event names its statement");
        statements.extend(split_statements(sql));
    }
    statements
}

/// The statements of `sql`, split at each `;` outside quotes and `--` comments, with comments
/// dropped and blanks skipped.
fn split_statements(sql: &str) -> Vec<String> {
    let (mut statements, mut current) = (Vec::new(), String::new());
    let mut chars = sql.chars().peekable();
    let mut quote = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), _) => {
                current.push(c);
                if c == q {
                    quote = None;
                }
            }
            (None, '\'' | '"') => {
                quote = Some(c);
                current.push(c);
            }
            (None, '-') if chars.peek() == Some(&'-') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        current.push('\n');
                        break;
                    }
                }
            }
            (None, ';') => statements.push(std::mem::take(&mut current)),
            (None, _) => current.push(c),
        }
    }
    statements.push(current);
    statements
        .into_iter()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

#[test]
fn a_logged_text_splits_into_its_statements() {
    assert_eq!(
        split_statements(
            "-- why; it matters\nBEGIN IMMEDIATE; SELECT ';' FROM t WHERE a = $1 -- x; y\n;\n"
        ),
        ["BEGIN IMMEDIATE", "SELECT ';' FROM t WHERE a = $1"]
    );
}

/// Whether `sql` names `table` as `name`: the table itself, or an alias given it (`table
/// alias` or `table AS alias`), which is what SQLite's plans call it by.
fn names_table(sql: &str, table: &str, name: &str) -> bool {
    if name.eq_ignore_ascii_case(table) {
        return true;
    }
    let words: Vec<String> = sql
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_lowercase)
        .collect();
    let (table, name) = (table.to_ascii_lowercase(), name.to_ascii_lowercase());
    words.windows(2).any(|w| w[0] == table && w[1] == name)
        || words
            .windows(3)
            .any(|w| w[0] == table && w[1] == "as" && w[2] == name)
}

/// SQLite's plan of `sql`, one line (`detail`) a step, planned as the host plans it: with
/// whatever statistics the database holds (none, until the test's `ANALYZE`). Unbound
/// parameters plan as NULL, which is all a plan needs.
async fn plan(conn: &mut sqlx::SqliteConnection, sql: &str) -> Vec<String> {
    let plan: Vec<(i64, i64, i64, String)> = sqlx::query_as(&format!("EXPLAIN QUERY PLAN {sql}"))
        .fetch_all(&mut *conn)
        .await
        .unwrap_or_else(|e| panic!("planning {sql}: {e}"));
    plan.into_iter().map(|(_, _, _, detail)| detail).collect()
}

/// How one line of SQLite's plan reads a table.
#[derive(Debug, PartialEq)]
enum Read<'a> {
    /// Every row: `SCAN t`, with or without an index (a covering index read end to end is still
    /// every row), or a lookup in an index SQLite builds for the statement by reading the
    /// table (`AUTOMATIC`).
    Whole,
    /// The rows an index's first `equal` columns pick (`SEARCH t USING INDEX i (a=? AND b>?)`:
    /// one).
    Index { index: &'a str, equal: usize },
    /// One row, by its rowid.
    Row,
    /// One end of an index, for a `MIN` or `MAX` (`SEARCH t USING INDEX i`, no terms): one row.
    End,
}

/// The table (or alias) a line of a plan reads, and how; none for a line that reads no table
/// (`SCAN CONSTANT ROW`, `USE TEMP B-TREE FOR ORDER BY`, a subquery's heading). Panics on a
/// lookup it cannot judge, so that a form SQLite adds one day fails here rather than passes.
fn read_of(detail: &str) -> Option<(&str, Read<'_>)> {
    if let Some(rest) = detail.strip_prefix("SCAN ") {
        let name = rest.split_whitespace().next()?;
        return (name != "CONSTANT").then_some((name, Read::Whole));
    }
    let rest = detail.strip_prefix("SEARCH ")?;
    let unjudged = || panic!("a plan line this test cannot judge: {detail}");
    let (name, how) = rest.split_once(" USING ").unwrap_or_else(unjudged);
    if how.contains("AUTOMATIC") {
        return Some((name, Read::Whole));
    }
    if how.starts_with("INTEGER PRIMARY KEY ") {
        return Some((name, Read::Row));
    }
    let how = how.strip_prefix("COVERING ").unwrap_or(how);
    if how.strip_prefix("INDEX ").is_some_and(|i| !i.contains(' ')) {
        return Some((name, Read::End));
    }
    let (index, terms) = how
        .strip_prefix("INDEX ")
        .and_then(|how| how.split_once(" ("))
        .unwrap_or_else(unjudged);
    let equal = terms
        .trim_end_matches(')')
        .split(" AND ")
        .take_while(|term| term.ends_with("=?") && !term.contains(['<', '>']))
        .count();
    Some((name, Read::Index { index, equal }))
}

/// The most rows a lookup into a filled table may pick on average: a hundredth of the filled
/// rows. A lookup of a node, a token or a certificate picks one or a few; the CRL's picks the
/// unexpired revoked and superseded certificates (the run's renewals superseded [`JOINS`]);
/// a lookup by a column most rows share (`revoked = 0`) picks nearly all of them.
const MAX_ROWS_PER_LOOKUP: f64 = ROWS as f64 / 100.0;

#[test]
fn a_plan_line_says_how_it_reads() {
    assert_eq!(read_of("SCAN n"), Some(("n", Read::Whole)));
    assert_eq!(
        read_of("SCAN node_certs USING COVERING INDEX node_certs_node"),
        Some(("node_certs", Read::Whole))
    );
    assert_eq!(read_of("SCAN CONSTANT ROW"), None);
    assert_eq!(read_of("USE TEMP B-TREE FOR ORDER BY"), None);
    assert_eq!(
        read_of("SEARCH t USING AUTOMATIC COVERING INDEX (a=?)"),
        Some(("t", Read::Whole))
    );
    assert_eq!(
        read_of("SEARCH t USING INTEGER PRIMARY KEY (rowid=?)"),
        Some(("t", Read::Row))
    );
    assert_eq!(
        read_of("SEARCH _sqlx_migrations USING COVERING INDEX sqlite_autoindex__sqlx_migrations_1"),
        Some(("_sqlx_migrations", Read::End))
    );
    assert_eq!(
        read_of("SEARCH node_certs USING INDEX node_certs_revoked (revoked=?)"),
        Some((
            "node_certs",
            Read::Index {
                index: "node_certs_revoked",
                equal: 1
            }
        ))
    );
    assert_eq!(
        read_of("SEARCH c USING COVERING INDEX i (a=? AND b=? AND c>? AND c<?)"),
        Some((
            "c",
            Read::Index {
                index: "i",
                equal: 2
            }
        ))
    );
    assert_eq!(
        read_of("SEARCH c USING INDEX i (a>?)"),
        Some((
            "c",
            Read::Index {
                index: "i",
                equal: 0
            }
        ))
    );
}

#[test]
fn a_scan_is_told_by_table_or_alias() {
    let sql = "SELECT n.id FROM nodes n JOIN node_certs AS c ON c.node_id = n.id";
    assert!(names_table(sql, "nodes", "nodes"));
    assert!(names_table(sql, "nodes", "n"));
    assert!(names_table(sql, "node_certs", "c"));
    assert!(!names_table(sql, "node_certs", "n"));
    assert!(!names_table(sql, "join_tokens", "c"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_joins_and_renewals_plan_no_whole_read_of_a_large_table() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let url = sqlite_url(&data.join("gatehouse.db")).unwrap();
    // What `gatehouse bench --nodes` fills, through the host's own store, in the file the host
    // then serves. Today's plans do not need it (below), but a host that one day gathers
    // statistics (`PRAGMA optimize`) must be planned against full tables, as on PostgreSQL.
    let db = Db::connect(&url).await.unwrap();
    db.migrate().await.unwrap();
    gatehouse_bench::fill::fill(&db, ROWS).await.unwrap();
    db.close().await;

    let log = dir.path().join("host.log");
    let host = {
        let (data, log) = (data.clone(), log.clone());
        tokio::task::spawn_blocking(move || {
            HostProcess::start_logging(data, "warn,sqlx::query=debug", &log)
        })
        .await
        .unwrap()
    };
    let http = host.http("127.0.0.1".parse().unwrap());
    for _ in 0..JOINS {
        let token = host.create_token(&http).await;
        join_and_renew(&host.url, &host.trust, &token).await;
    }
    fetch_crl(&http, &host.url).await;
    let status = tokio::task::spawn_blocking(move || host.stop())
        .await
        .unwrap();
    assert!(status.success(), "the host stopped cleanly: {status}");

    let statements = statements_logged(&log);
    // SQLite plans without statistics (the host never runs `ANALYZE`), so a plan does not
    // depend on how full a table is: the tables every join adds to are checked for whole reads
    // too.
    let tables: Vec<&str> = FILLED
        .iter()
        .map(|(t, _)| *t)
        .chain(["audits", "events"])
        .collect();
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    let (mut whole, mut lookups, mut planned, mut read) =
        (Vec::new(), Vec::new(), 0, BTreeSet::new());
    for sql in &statements {
        let first = sql.split_whitespace().next().unwrap_or_default();
        if !["SELECT", "INSERT", "UPDATE", "DELETE", "WITH"]
            .iter()
            .any(|k| first.eq_ignore_ascii_case(k))
        {
            continue; // BEGIN, SAVEPOINT, PRAGMA and the like have no plan
        }
        planned += 1;
        for detail in plan(&mut conn, sql).await {
            let Some((name, how)) = read_of(&detail) else {
                continue;
            };
            let Some(table) = tables.iter().find(|t| names_table(sql, t, name)) else {
                continue;
            };
            match how {
                Read::Whole => whole.push(format!("{detail}: {sql}")),
                Read::Index { index, equal } if FILLED.iter().any(|(t, _)| t == table) => {
                    lookups.push((index.to_owned(), equal, format!("{detail}: {sql}")));
                }
                Read::Index { .. } | Read::Row | Read::End => {}
            }
        }
        for (table, _) in FILLED {
            if sql
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .any(|w| w.eq_ignore_ascii_case(table))
            {
                read.insert(table);
            }
        }
    }
    // What each lookup picks in this database: its index's average rows a value of the columns
    // it fixes, from SQLite's own statistics (`sqlite_stat1`: the index's rows, then the
    // average for its first column, its first two, ...; no row for an empty index).
    sqlx::query("ANALYZE").execute(&mut conn).await.unwrap();
    let mut wide = Vec::new();
    for (index, equal, what) in &lookups {
        let stat: Option<String> =
            sqlx::query_scalar("SELECT stat FROM sqlite_stat1 WHERE idx = $1")
                .bind(index)
                .fetch_optional(&mut conn)
                .await
                .unwrap();
        let rows: f64 = stat.as_deref().map_or(0.0, |stat| {
            stat.split_whitespace()
                .nth(*equal)
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("{index}: statistics {stat:?}"))
        });
        if rows > MAX_ROWS_PER_LOOKUP {
            wide.push(format!("{rows} rows a lookup: {what}"));
        }
    }
    conn.close().await.unwrap();
    eprintln!(
        "scale (SQLite): {} statements logged, {planned} planned, {} lookups into filled tables",
        statements.len(),
        lookups.len()
    );
    assert!(
        whole.is_empty(),
        "{} plans read a large table whole:\n{}",
        whole.len(),
        whole.join("\n")
    );
    assert!(
        wide.is_empty(),
        "{} lookups pick more than {MAX_ROWS_PER_LOOKUP} rows of {ROWS}:\n{}",
        wide.len(),
        wide.join("\n")
    );
    for (table, must_read) in FILLED {
        assert!(
            !must_read || read.contains(table),
            "{table}: no logged statement names it (is the log complete?)"
        );
    }
}
