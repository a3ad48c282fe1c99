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
    let migrator = Migrator::new(Source(embedded(backend)))
        .await
        .map_err(StoreError::Migrate)?;
    migrator.run(conn).await.map_err(StoreError::Migrate)
}

#[cfg(test)]
mod tests {
    use super::*;

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
