//! Scratch databases for the store's tests: a fresh SQLite file in a temporary directory
//! always, and a fresh Postgres database (`gh_test_<random>`, dropped afterwards, even when
//! the test fails) when `DATABASE_URL` names a server, so tests run concurrently and
//! repeatedly.

use sqlx::Connection;

use super::{Db, sqlite_url};

/// A migrated scratch database.
pub(super) struct TestDb {
    /// Connected and migrated.
    pub(super) db: Db,
    /// The URL it was opened with, to open a second pool on the same database.
    pub(super) url: String,
    /// Holds the SQLite file's directory until the test ends.
    _dir: Option<tempfile::TempDir>,
    /// The Postgres server URL and scratch database name, dropped with this value.
    postgres: Option<(String, String)>,
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let Some((admin_url, name)) = self.postgres.take() else {
            return;
        };
        // Drop may run during a panic or inside a runtime that is shutting down: run the
        // DROP DATABASE on a thread with its own runtime, and ignore its failure.
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                if let Ok(mut conn) = sqlx::AnyConnection::connect(&admin_url).await {
                    let sql = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
                    let _ = sqlx::raw_sql(&sql).execute(&mut conn).await;
                    let _ = conn.close().await;
                }
            });
        })
        .join();
    }
}

impl TestDb {
    /// The SQLite database's file; `None` on Postgres.
    pub(super) fn sqlite_file(&self) -> Option<std::path::PathBuf> {
        self._dir.as_ref().map(|dir| dir.path().join(SQLITE_FILE))
    }
}

/// The name of a scratch SQLite database's file in its directory.
const SQLITE_FILE: &str = "gatehouse.db";

/// A migrated SQLite file in a fresh temporary directory.
pub(super) async fn sqlite() -> TestDb {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(&dir.path().join(SQLITE_FILE)).unwrap();
    let db = Db::connect(&url).await.unwrap();
    db.migrate().await.unwrap();
    TestDb {
        db,
        url,
        _dir: Some(dir),
        postgres: None,
    }
}

/// A migrated, freshly created Postgres database, if `DATABASE_URL` is set.
pub(super) async fn postgres() -> Option<TestDb> {
    let admin_url = std::env::var("DATABASE_URL")
        .ok()
        .filter(|u| !u.is_empty())?;
    sqlx::any::install_default_drivers();
    let name = format!("gh_test_{}", hex::encode(rand::random::<[u8; 8]>()));
    let mut admin = sqlx::AnyConnection::connect(&admin_url).await.unwrap();
    sqlx::raw_sql(&format!("CREATE DATABASE {name}"))
        .execute(&mut admin)
        .await
        .unwrap();
    admin.close().await.unwrap();
    let url = with_database(&admin_url, &name);
    let scratch = TestDb {
        db: Db::connect(&url).await.unwrap(),
        url,
        _dir: None,
        postgres: Some((admin_url, name)),
    };
    scratch.db.migrate().await.unwrap();
    Some(scratch)
}

/// Every backend this run can test: SQLite, then Postgres when configured.
pub(super) async fn all() -> Vec<TestDb> {
    let mut dbs = vec![sqlite().await];
    dbs.extend(postgres().await);
    dbs
}

/// `url` with its database name replaced by `name`.
fn with_database(url: &str, name: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let (rest, query) = match rest.split_once('?') {
        Some((rest, query)) => (rest, format!("?{query}")),
        None => (rest, String::new()),
    };
    let authority = rest
        .split_once('/')
        .map_or(rest, |(authority, _)| authority);
    format!("{scheme}://{authority}/{name}{query}")
}

#[test]
fn database_name_is_replaced() {
    assert_eq!(
        with_database("postgres://postgres@127.0.0.1:5432/test", "x"),
        "postgres://postgres@127.0.0.1:5432/x"
    );
    assert_eq!(with_database("postgres://h", "x"), "postgres://h/x");
    assert_eq!(
        with_database("postgresql://u:p@h/db?sslmode=disable", "x"),
        "postgresql://u:p@h/x?sslmode=disable"
    );
}

/// Whether `count` (a `SELECT COUNT(*) AS n …` of Postgres' sessions, `$1` bound to `pid` when
/// given) comes to none within five seconds, asked every 100 ms from a connection of its own:
/// one from a pool under test could be the very connection the question is about.
pub(super) async fn postgres_counts_none(url: &str, count: &str, pid: Option<i32>) -> bool {
    use sqlx::Row as _;
    let mut watcher = <sqlx::AnyConnection as sqlx::Connection>::connect(url)
        .await
        .unwrap();
    for _ in 0..50 {
        let query = sqlx::query(count);
        let query = match pid {
            Some(pid) => query.bind(pid),
            None => query,
        };
        let row = query.fetch_one(&mut watcher).await.unwrap();
        if row.get::<i64, _>("n") == 0 {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    false
}
