//! The connection pool: connecting to SQLite or Postgres through one code path, migrating,
//! and opening transactions.

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use sqlx::Executor;
use sqlx::any::AnyPoolOptions;

use super::checkpoint::{Checkpointer, writer_backstop_pages};
use super::clock::Clock;
use super::group::GroupCommit;
use super::lease::{Connections, Retire};
use super::{StoreError, Tx, migrate};

/// How long a transaction waits for a pooled connection, and on SQLite for the write lock
/// (`busy_timeout`); on Postgres also each statement's and each lock wait's limit.
pub(super) const WAIT: Duration = Duration::from_secs(5);

/// Connections of a Postgres write pool (per replica) unless the configuration sets
/// `database_connections`. Ten suits a database server of its own a network hop away, where a
/// join's write waits on the round trip and the server's commit; on a small server shared with
/// the host fewer do better (README, Deploying: a transaction waiting inside the server, on a
/// many-use token's row or for the CPU, costs it more than a join waiting here for a
/// connection).
pub const DEFAULT_POSTGRES_CONNECTIONS: u32 = 10;

/// The largest write pool a configuration may ask for (PostgreSQL's own default
/// `max_connections` is 100, for every replica and tool together).
pub const MAX_POSTGRES_CONNECTIONS: u32 = 100;

/// Connections of the read pool (per replica), which the reads of running attestors use one
/// statement at a time. Separate from the write pool, so guests that read in a loop never make
/// a join's short locked phase wait for a connection.
const READ_CONNECTIONS: u32 = 8;

/// Connections per SQLite pool. Every transaction is a write transaction (`BEGIN IMMEDIATE`)
/// and SQLite admits one writer at a time, so more connections would only wait in SQLite's
/// busy handler, which polls with sleeps of up to 100 ms, instead of in the pool's fair queue.
const SQLITE_CONNECTIONS: u32 = 1;

/// Set on every new SQLite connection. WAL lets readers of other processes (the CLI) run
/// beside the writer; `synchronous` stays FULL so a committed token use or certificate row
/// survives a power loss.
///
/// `temp_store = MEMORY` keeps each batch's statement journal (the pages its members'
/// savepoints may roll back, see [`super::group`]) in memory. By default SQLite spills it past
/// 64 KiB to a file it creates, writes and unlinks in `/var/tmp` for every batch: system calls
/// under the write lock, for a file that is never read unless a member rolls back, and that
/// nothing needs after a crash (the batch's own rollback is the WAL's). It holds, per member,
/// the original of each page that member changes: the same order of memory as the dirty pages
/// SQLite already keeps for the batch, which grows with the write transactions in flight.
///
/// `wal_autocheckpoint` is only a backstop: a [`Checkpointer`] on a connection of its own copies
/// the WAL into the database file, so a checkpoint's `fsync` does not hold up every join.
const SQLITE_PRAGMAS: &str = concat!(
    "PRAGMA journal_mode = WAL; PRAGMA foreign_keys = ON; PRAGMA busy_timeout = 5000; ",
    "PRAGMA synchronous = FULL; PRAGMA temp_store = MEMORY; PRAGMA wal_autocheckpoint = ",
    writer_backstop_pages!(),
    ";"
);

/// Set on every connection of SQLite's read pool: WAL readers run beside the one writer, and
/// this pool never writes.
const SQLITE_READ_PRAGMAS: &str = "PRAGMA busy_timeout = 5000; PRAGMA query_only = ON;";

/// Set on every connection of Postgres' read pool: a read of a running attestor is bounded
/// like any statement of a join.
const POSTGRES_READ_SETTINGS: &str = "SET statement_timeout = '5s'";

/// Set on every connection of Postgres' write pool, for the session. `statement_timeout` and
/// `lock_timeout` bound every statement and lock wait of a write transaction (the row lock on
/// a token is held from its spend to the commit); `idle_in_transaction_session_timeout` ends
/// a session a stuck caller left open inside a transaction.
///
/// Why for the session and not `SET LOCAL` after each `BEGIN`: the bounds are the same for
/// every transaction, and three statements parsed, run and reset at every commit cost the
/// server CPU a join shares with the host on one machine. The one user of the pool that must
/// not be bounded, the migrations, lifts them on its connection ([`Db::migrate`]).
const POSTGRES_WRITE_SETTINGS: &str = "SET statement_timeout = '5s'; \
                                       SET lock_timeout = '5s'; \
                                       SET idle_in_transaction_session_timeout = '60s'";

/// What [`Db::migrate`] sets on its Postgres connection before migrating: a migration may
/// rewrite a large table, and the migrator waits on an advisory lock while another replica
/// migrates; neither has a bound that fits every deployment.
const POSTGRES_MIGRATE_SETTINGS: &str = "SET statement_timeout = 0; SET lock_timeout = 0";

/// Which database a [`Db`] talks to; the few statements that differ are chosen by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// An embedded SQLite file (the default: one host, no server).
    Sqlite,
    /// A PostgreSQL server, which several replicas may share.
    Postgres,
}

impl Backend {
    /// The backend a database URL names.
    pub fn from_url(url: &str) -> Result<Backend, StoreError> {
        if url.starts_with("sqlite:") {
            Ok(Backend::Sqlite)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Backend::Postgres)
        } else {
            // Never echo credentials: keep only the scheme.
            let scheme = url.split_once(':').map_or("", |(scheme, _)| scheme);
            Err(StoreError::UnsupportedUrl(format!("{scheme}:")))
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        })
    }
}

/// The database: a connection pool (cheap to clone) and the backend it talks to.
#[derive(Debug, Clone)]
pub struct Db {
    /// Write transactions' connections ([`Db::begin`]).
    pool: Arc<Connections>,
    /// Autocommit reads of committed state ([`Db::read`]).
    reads: Arc<Connections>,
    backend: Backend,
    /// SQLite's commit batches over its one write connection ([`super::group`]).
    group: Option<Arc<GroupCommit>>,
    /// The runtime the pools were made on (the host's), where [`Db::read`] acquires.
    home: Option<tokio::runtime::Handle>,
    /// The database's clock, as last read ([`super::clock`]).
    clock: Arc<Clock>,
}

impl Db {
    /// Connects to `url`: `sqlite:<path>?mode=rwc` (see [`sqlite_url`]) or `postgres://...`.
    /// A SQLite file is created if `mode=rwc` asks for it; it is switched to WAL with foreign
    /// keys on and a 5 s busy timeout.
    pub async fn connect(url: &str) -> Result<Db, StoreError> {
        Self::connect_with(url, DEFAULT_POSTGRES_CONNECTIONS).await
    }

    /// [`Db::connect`], with a Postgres write pool of `postgres_connections` (1 to
    /// [`MAX_POSTGRES_CONNECTIONS`]); SQLite's pool is always its one writer.
    pub async fn connect_with(url: &str, postgres_connections: u32) -> Result<Db, StoreError> {
        if !(1..=MAX_POSTGRES_CONNECTIONS).contains(&postgres_connections) {
            return Err(StoreError::PoolSize(postgres_connections));
        }
        sqlx::any::install_default_drivers();
        let backend = Backend::from_url(url)?;
        let options = AnyPoolOptions::new().acquire_timeout(WAIT);
        let options = match backend {
            Backend::Sqlite => {
                options
                    .max_connections(SQLITE_CONNECTIONS)
                    // The connection may carry an open commit batch between transactions: the
                    // pool must never retire it on its own.
                    .max_lifetime(None)
                    .idle_timeout(None)
                    .after_connect(|conn, _meta| {
                        Box::pin(async move {
                            conn.execute(SQLITE_PRAGMAS).await?;
                            Ok(())
                        })
                    })
            }
            Backend::Postgres => {
                options
                    .max_connections(postgres_connections)
                    .after_connect(|conn, _meta| {
                        Box::pin(async move {
                            conn.execute(POSTGRES_WRITE_SETTINGS).await?;
                            Ok(())
                        })
                    })
            }
        };
        let pool = options.connect(url).await.map_err(StoreError::Connect)?;
        let retire = match backend {
            Backend::Sqlite => None,
            Backend::Postgres => Some(Retire::POSTGRES),
        };
        let pool = Connections::new(pool, retire);
        let settings = match backend {
            Backend::Sqlite => SQLITE_READ_PRAGMAS,
            Backend::Postgres => POSTGRES_READ_SETTINGS,
        };
        let reads = AnyPoolOptions::new()
            .acquire_timeout(WAIT)
            .max_connections(READ_CONNECTIONS)
            .after_connect(move |conn, _meta| {
                Box::pin(async move {
                    conn.execute(settings).await?;
                    Ok(())
                })
            })
            .connect_lazy(url)
            .map_err(StoreError::Connect)?;
        let reads = Connections::new(reads, retire);
        let group = match backend {
            Backend::Sqlite => {
                let checkpointer = Checkpointer::start(url)
                    .await
                    .map_err(StoreError::Connect)?;
                Some(GroupCommit::new(pool.clone(), Arc::new(checkpointer)))
            }
            Backend::Postgres => None,
        };
        Ok(Db {
            pool,
            reads,
            backend,
            group,
            home: tokio::runtime::Handle::try_current().ok(),
            clock: Arc::new(Clock::of(backend)),
        })
    }

    /// Applies the embedded migrations of this backend that are not applied yet. Safe to run
    /// at every start and, on Postgres, from several replicas at once (an advisory lock
    /// serialises them).
    ///
    /// On Postgres the write pool's timeouts are lifted for the migrations and set again after;
    /// a connection that cannot be set again (or whose migration failed half-way) is closed
    /// rather than returned to the pool unbounded.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        let mut conn = self.pool.acquire().await?;
        if self.backend == Backend::Sqlite {
            return migrate::run(&mut conn, self.backend).await;
        }
        if let Err(e) = conn.execute(POSTGRES_MIGRATE_SETTINGS).await {
            conn.discard();
            return Err(StoreError::Query(e));
        }
        let migrated = migrate::run(&mut conn, self.backend).await;
        if migrated.is_err() || conn.execute(POSTGRES_WRITE_SETTINGS).await.is_err() {
            conn.discard();
        }
        migrated
    }

    /// The backend this pool talks to.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The database's clock ([`Tx::now`]) where reading it takes no connection: on SQLite,
    /// whose clock is this process's, always; on Postgres, whose clock is the server's, within
    /// a second of a reading ([`super::clock`]).
    pub fn clock_here(&self) -> Option<i64> {
        self.clock.here()
    }

    /// Opens a write transaction: `BEGIN IMMEDIATE` on SQLite (so a later write never fails
    /// to upgrade a read lock, and waiting honours the busy timeout; in a commit batch, a
    /// savepoint); on Postgres `BEGIN`, sent with the first statement, on a connection whose
    /// every statement and lock wait is bounded by 5 s ([`POSTGRES_WRITE_SETTINGS`]). See
    /// [`Tx`] for what happens when it is dropped instead of committed.
    pub async fn begin(&self) -> Result<Tx, StoreError> {
        Tx::begin(&self.pool, self.backend, self.group.as_ref(), &self.clock).await
    }

    /// A connection of the read pool for statements that read committed state, each in its
    /// own autocommit transaction: no lock is held between them, and none at all on SQLite
    /// (WAL readers do not block the writer). What a running attestor reads goes through
    /// here, so guest time never holds the write lock; see [`crate::imports`].
    ///
    /// The connection is acquired on the host's runtime, whichever runtime asks: an attestor
    /// call that has run a whole epoch tick asks from its guest thread's own runtime
    /// (`runtime::guest`), and a connection the pool opened there would register its socket
    /// with that runtime's I/O driver and break when a reload retires that attestor's version
    /// and shuts its runtime down ("a Tokio context … is being shutdown", a storage error for
    /// whichever join used it next). Statements on it may then run from any runtime. A caller
    /// already on the host's runtime (a join whose call runs on its own thread, the usual case)
    /// acquires directly, without a task spawned there and awaited.
    pub async fn read(&self) -> Result<Tx, StoreError> {
        let elsewhere = |home: &tokio::runtime::Handle| {
            tokio::runtime::Handle::try_current().map_or(true, |here| here.id() != home.id())
        };
        match &self.home {
            Some(home) if elsewhere(home) => {
                let (reads, backend, clock) =
                    (self.reads.clone(), self.backend, self.clock.clone());
                home.spawn(async move { Tx::autocommit(&reads, backend, &clock).await })
                    .await
                    .map_err(|_| StoreError::Query(sqlx::Error::PoolClosed))?
            }
            _ => Tx::autocommit(&self.reads, self.backend, &self.clock).await,
        }
    }

    /// Closes every connection, waiting for checked-out ones to come back. The write
    /// connection closes last: on SQLite, its close checkpoints what is left of the WAL and
    /// removes it.
    pub async fn close(&self) {
        if let Some(group) = &self.group {
            group.stop_checkpoints().await;
        }
        self.reads.close().await;
        self.pool.close().await;
    }

    /// SQLite's commit batches, for this module's tests.
    #[cfg(test)]
    pub(super) fn group(&self) -> Option<&GroupCommit> {
        self.group.as_deref()
    }

    /// The write transactions' connections, for this module's tests.
    #[cfg(test)]
    pub(super) fn connections(&self) -> &Arc<Connections> {
        &self.pool
    }
}

/// The URL [`Db::connect`] takes for a SQLite file at `path`, created if missing. Characters
/// that would end the path early (`?`, `#`) or be decoded (`%`) are percent-encoded.
pub fn sqlite_url(path: &Path) -> Result<String, StoreError> {
    let path = path
        .to_str()
        .ok_or_else(|| StoreError::PathNotUtf8(path.to_owned()))?;
    let mut url = String::from("sqlite:");
    for c in path.chars() {
        if c.is_control() || matches!(c, '%' | '?' | '#' | ' ' | '"' | '<' | '>' | '`' | '{' | '}')
        {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                url.push_str(&format!("%{b:02X}"));
            }
        } else {
            url.push(c);
        }
    }
    url.push_str("?mode=rwc");
    Ok(url)
}

/// Where a page of a list ordered by `(created_at, id)` starts: after this row. On the wire it
/// is `<created_at>.<id>` (see [`Cursor::parse`]), opaque to clients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    /// The last row's creation time.
    pub created_at: i64,
    /// The last row's id.
    pub id: String,
}

impl Cursor {
    /// The start of a list in ascending order.
    pub fn start() -> Self {
        Self {
            created_at: i64::MIN,
            id: String::new(),
        }
    }

    /// The start of a list in descending order (newest first): after every row, none being
    /// stamped `i64::MAX` ms (some 292 million years from now).
    pub fn end() -> Self {
        Self {
            created_at: i64::MAX,
            id: String::new(),
        }
    }

    /// A cursor as [`fmt::Display`] wrote it; `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        let (at, id) = s.split_once('.')?;
        let created_at = at.parse().ok()?;
        if id.is_empty() || id.len() > 256 || id.chars().any(char::is_control) {
            return None;
        }
        Some(Self {
            created_at,
            id: id.to_owned(),
        })
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.created_at, self.id)
    }
}

/// Where a page of the pools, ordered by `(tenant_id, id)`, starts: after this pool. On the
/// wire it is `<tenant>/<id>` (neither may hold a `/`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PoolCursor {
    /// The last pool's tenant.
    pub tenant_id: String,
    /// The last pool's id.
    pub id: String,
}

impl PoolCursor {
    /// A cursor as [`fmt::Display`] wrote it; `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        let (tenant_id, id) = s.split_once('/')?;
        let part = |p: &str| !p.is_empty() && p.len() <= 128 && !p.contains('/');
        if !part(tenant_id) || !part(id) || s.chars().any(char::is_control) {
            return None;
        }
        Some(Self {
            tenant_id: tenant_id.to_owned(),
            id: id.to_owned(),
        })
    }
}

impl fmt::Display for PoolCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.tenant_id, self.id)
    }
}
