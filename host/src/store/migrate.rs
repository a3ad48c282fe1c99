//! The schema migrations, embedded in the binary: `host/migrations/sqlite/` and
//! `host/migrations/postgres/`, one numbered file each (`0001_init.sql`), applied in order by
//! sqlx's migrator (which records checksums in `_sqlx_migrations` and refuses a database whose
//! applied migrations were edited).
//!
//! Landed migrations are never edited: a schema change is a new numbered file in both
//! directories, listed in [`SQLITE`] and [`POSTGRES`] (a test checks the lists match the
//! directories).

use std::borrow::Cow;

use futures::future::BoxFuture;
use sqlx::AnyConnection;
use sqlx::error::BoxDynError;
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};

use super::{Backend, StoreError};

/// One embedded migration file.
#[derive(Debug)]
struct Embedded {
    version: i64,
    description: &'static str,
    sql: &'static str,
}

/// The SQLite migrations, in order.
static SQLITE: &[Embedded] = &[
    Embedded {
        version: 1,
        description: "init",
        sql: include_str!("../../migrations/sqlite/0001_init.sql"),
    },
    Embedded {
        version: 2,
        description: "node_lifecycle",
        sql: include_str!("../../migrations/sqlite/0002_node_lifecycle.sql"),
    },
    Embedded {
        version: 3,
        description: "event_order",
        sql: include_str!("../../migrations/sqlite/0003_event_order.sql"),
    },
    Embedded {
        version: 4,
        description: "join_policy",
        sql: include_str!("../../migrations/sqlite/0004_join_policy.sql"),
    },
    Embedded {
        version: 5,
        description: "discovery_workflows",
        sql: include_str!("../../migrations/sqlite/0005_discovery_workflows.sql"),
    },
    Embedded {
        version: 6,
        description: "certificate_lifecycle",
        sql: include_str!("../../migrations/sqlite/0006_certificate_lifecycle.sql"),
    },
    Embedded {
        version: 7,
        description: "admin_identities",
        sql: include_str!("../../migrations/sqlite/0007_admin_identities.sql"),
    },
    Embedded {
        version: 8,
        description: "revoked_index",
        sql: include_str!("../../migrations/sqlite/0008_revoked_index.sql"),
    },
    Embedded {
        version: 9,
        description: "cert_hash_unindexed",
        sql: include_str!("../../migrations/sqlite/0009_cert_hash_unindexed.sql"),
    },
];

/// The Postgres migrations, in order.
static POSTGRES: &[Embedded] = &[
    Embedded {
        version: 1,
        description: "init",
        sql: include_str!("../../migrations/postgres/0001_init.sql"),
    },
    Embedded {
        version: 2,
        description: "node_lifecycle",
        sql: include_str!("../../migrations/postgres/0002_node_lifecycle.sql"),
    },
    Embedded {
        version: 3,
        description: "event_order",
        sql: include_str!("../../migrations/postgres/0003_event_order.sql"),
    },
    Embedded {
        version: 4,
        description: "join_policy",
        sql: include_str!("../../migrations/postgres/0004_join_policy.sql"),
    },
    Embedded {
        version: 5,
        description: "discovery_workflows",
        sql: include_str!("../../migrations/postgres/0005_discovery_workflows.sql"),
    },
    Embedded {
        version: 6,
        description: "certificate_lifecycle",
        sql: include_str!("../../migrations/postgres/0006_certificate_lifecycle.sql"),
    },
    Embedded {
        version: 7,
        description: "admin_identities",
        sql: include_str!("../../migrations/postgres/0007_admin_identities.sql"),
    },
    Embedded {
        version: 8,
        description: "revoked_index",
        sql: include_str!("../../migrations/postgres/0008_revoked_index.sql"),
    },
    Embedded {
        version: 9,
        description: "cert_hash_unindexed",
        sql: include_str!("../../migrations/postgres/0009_cert_hash_unindexed.sql"),
    },
];

/// The migrations of one backend, as a source sqlx's [`Migrator`] resolves.
#[derive(Debug)]
struct Source(&'static [Embedded]);

impl<'s> MigrationSource<'s> for Source {
    fn resolve(self) -> BoxFuture<'s, Result<Vec<Migration>, BoxDynError>> {
        Box::pin(async move {
            Ok(self
                .0
                .iter()
                .map(|m| {
                    Migration::new(
                        m.version,
                        Cow::Borrowed(m.description),
                        MigrationType::Simple,
                        Cow::Borrowed(m.sql),
                        false,
                    )
                })
                .collect())
        })
    }
}

fn embedded(backend: Backend) -> &'static [Embedded] {
    match backend {
        Backend::Sqlite => SQLITE,
        Backend::Postgres => POSTGRES,
    }
}

/// Applies the migrations of `backend` that `conn`'s database has not applied yet.
pub(super) async fn run(conn: &mut AnyConnection, backend: Backend) -> Result<(), StoreError> {
    apply(conn, embedded(backend)).await
}

/// Applies the migrations of `list` that `conn`'s database has not applied yet.
///
/// A database may also hold migrations newer than `list`: a replica of the release before,
/// restarted during a rolling upgrade (or a host rolled back), finds the ones its successor
/// applied. sqlx refuses that by default; here the host starts on the newer schema, which
/// migrations keep backward compatible within a release line (they are only added, never
/// edited: README, "Upgrades"), and says so in its log. Every migration `list` knows must
/// still be applied with the same text (sqlx compares checksums).
async fn apply(conn: &mut AnyConnection, list: &'static [Embedded]) -> Result<(), StoreError> {
    let mut migrator = Migrator::new(Source(list))
        .await
        .map_err(StoreError::Migrate)?;
    migrator.set_ignore_missing(true);
    migrator
        .run(&mut *conn)
        .await
        .map_err(StoreError::Migrate)?;
    let newest: Option<i64> = sqlx::query_scalar("SELECT MAX(version) FROM _sqlx_migrations")
        .fetch_one(&mut *conn)
        .await
        .map_err(StoreError::Query)?;
    let known = list.last().map_or(0, |m| m.version);
    if let Some(newest) = newest.filter(|&newest| newest > known) {
        tracing::warn!(
            database = newest,
            this_binary = known,
            "the database has migrations this binary does not know (a newer release applied \
             them): running on its newer schema"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection to a new, unmigrated SQLite file, and the directory that holds it.
    async fn scratch_sqlite() -> (tempfile::TempDir, AnyConnection) {
        use sqlx::Connection as _;
        sqlx::any::install_default_drivers();
        let dir = tempfile::tempdir().unwrap();
        let url = super::super::sqlite_url(&dir.path().join("m.db")).unwrap();
        (dir, AnyConnection::connect(&url).await.unwrap())
    }

    /// Migration 9 makes SQLite's `node_certs` again without the hash's unique index: every
    /// certificate comes through whole, in every column a migration before it added, and the
    /// table keeps its other indexes and constraints.
    #[tokio::test]
    async fn sqlite_migration_9_copies_every_certificate_whole() {
        use sqlx::{Connection as _, Executor as _, Row as _};
        let (_dir, mut conn) = scratch_sqlite().await;
        conn.execute("PRAGMA foreign_keys = ON").await.unwrap();
        let before = Migrator::new(Source(&SQLITE[..8])).await.unwrap();
        before.run(&mut conn).await.unwrap();
        conn.execute(
            "INSERT INTO nodes (id, tenant_id, role, identity_generation, created_at, updated_at) \
             VALUES ('node_1', 'root', 'node', 2, 1, 1);
             INSERT INTO node_certs (serial, node_id, der, der_sha256, generation, role, \
             not_before, not_after, revoked, statements, created_at, revoked_reason, revoked_at, \
             superseded_at) VALUES \
             ('01', 'node_1', x'0102', zeroblob(32), 1, 'node', 10, 20, 1, '[]', 5, 'superseded', 7, 6), \
             ('02', 'node_1', x'0304', randomblob(32), 2, 'node', 11, 21, 0, '[\"urn:a\"]', 8, NULL, NULL, NULL)",
        )
        .await
        .unwrap();
        let all = "SELECT serial, node_id, der, der_sha256, generation, role, not_before, \
                   not_after, revoked, statements, created_at, revoked_reason, revoked_at, \
                   superseded_at FROM node_certs ORDER BY serial";
        let dump = async |conn: &mut AnyConnection| -> Vec<String> {
            let rows = sqlx::query(all).fetch_all(conn).await.unwrap();
            rows.iter()
                .map(|r| {
                    (0..14)
                        .map(|i| {
                            let v: Option<Vec<u8>> = r.try_get(i).ok().flatten();
                            let t: Option<String> = r.try_get(i).ok().flatten();
                            let n: Option<i64> = r.try_get(i).ok().flatten();
                            format!("{t:?}/{n:?}/{v:?}")
                        })
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .collect()
        };
        let rows = dump(&mut conn).await;
        run(&mut conn, Backend::Sqlite).await.unwrap();
        assert_eq!(dump(&mut conn).await, rows);

        // The same hash twice is no longer refused; a serial twice, or a certificate of a node
        // that does not exist, still is.
        let insert = "INSERT INTO node_certs (serial, node_id, der, der_sha256, generation, role, \
                      not_before, not_after, statements, created_at) \
                      VALUES ($1, $2, x'05', zeroblob(32), 1, 'node', 1, 2, '[]', 1)";
        for (serial, node, ok) in [
            ("03", "node_1", true),
            ("03", "node_1", false),
            ("04", "node_9", false),
        ] {
            let r = sqlx::query(insert)
                .bind(serial)
                .bind(node)
                .execute(&mut conn)
                .await;
            assert_eq!(r.is_ok(), ok, "{serial} {node}: {r:?}");
        }
        let mut indexes: Vec<String> = sqlx::query(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'node_certs'",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
        indexes.sort();
        assert_eq!(
            indexes,
            [
                "node_certs_node",
                "node_certs_revoked",
                "node_certs_superseded",
                "sqlite_autoindex_node_certs_1"
            ]
        );
        conn.close().await.unwrap();
    }

    /// A host of the release before, restarted on a database a newer one migrated (a rolling
    /// upgrade, a rollback), starts on the newer schema and warns that it does (and a host of
    /// this release on its own schema does not); one whose migration text differs from what
    /// the database applied is still refused.
    #[tokio::test]
    async fn an_older_release_starts_on_a_newer_schema_but_not_on_an_edited_one() {
        use sqlx::Connection as _;
        let (_dir, mut conn) = scratch_sqlite().await;
        // This test's thread's events (a current-thread runtime: `apply` runs here).
        let log = Log::default();
        let _guard = tracing::subscriber::set_default(
            tracing_subscriber::fmt()
                .with_writer(log.clone())
                .with_ansi(false)
                .finish(),
        );
        let newest = SQLITE.len();
        run(&mut conn, Backend::Sqlite).await.unwrap();
        run(&mut conn, Backend::Sqlite).await.unwrap();
        assert_eq!(log.take(), "", "the binary's own schema: no warning");
        apply(&mut conn, &SQLITE[..newest - 1]).await.unwrap();
        let said = log.take();
        assert!(
            said.contains("WARN")
                && said.contains("a newer release applied them")
                && said.contains(&format!("database={newest} this_binary={}", newest - 1)),
            "{said}"
        );
        apply(&mut conn, &[]).await.unwrap();
        assert!(
            log.take()
                .contains(&format!("database={newest} this_binary=0")),
        );
        static EDITED: &[Embedded] = &[Embedded {
            version: 1,
            description: "init",
            sql: "SELECT 1",
        }];
        let refused = apply(&mut conn, EDITED).await.unwrap_err();
        assert!(
            matches!(
                refused,
                StoreError::Migrate(sqlx::migrate::MigrateError::VersionMismatch(1))
            ),
            "{refused:?}"
        );
        conn.close().await.unwrap();
    }

    /// What a `tracing` subscriber wrote, kept to be read back.
    #[derive(Clone, Default)]
    struct Log(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl Log {
        /// What was written since the last take.
        fn take(&self) -> String {
            String::from_utf8(std::mem::take(&mut *self.0.lock().unwrap())).unwrap()
        }
    }

    impl std::io::Write for Log {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl tracing_subscriber::fmt::MakeWriter<'_> for Log {
        type Writer = Log;

        fn make_writer(&self) -> Log {
            self.clone()
        }
    }

    /// Every file in a migrations directory is embedded, in order, with its own text.
    #[test]
    fn embedded_lists_match_the_directories() {
        for (dir, list) in [("sqlite", SQLITE), ("postgres", POSTGRES)] {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("migrations")
                .join(dir);
            let mut files: Vec<_> = std::fs::read_dir(&path)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            files.sort();
            assert_eq!(files.len(), list.len(), "{dir}: {files:?}");
            for (file, m) in files.iter().zip(list) {
                assert_eq!(
                    file,
                    &format!("{:04}_{}.sql", m.version, m.description),
                    "{dir}"
                );
                let text = std::fs::read_to_string(path.join(file)).unwrap();
                assert_eq!(text, m.sql, "{dir}/{file}");
            }
        }
        assert_eq!(
            SQLITE.len(),
            POSTGRES.len(),
            "both backends get every migration"
        );
    }
}
