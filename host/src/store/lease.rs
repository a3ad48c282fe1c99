//! Connections kept between transactions, without sqlx's test on release.
//!
//! sqlx's pool tests every connection handed back to it: a task is spawned that pings the
//! connection (on SQLite a round trip to the connection's worker thread, on Postgres one to the
//! server) before the next caller may have it. A join hands back two connections (its
//! attestor's read and its locked phase), so that was two round trips and two task spawns of a
//! join's dozen, for a test whose findings a join needs no sooner than its next statement.
//! So the pool only opens (and, when one is lost, reopens) connections here; between
//! transactions a connection stays checked out of it, kept in [`Connections`], and goes to the
//! next caller as it is.
//!
//! What the pool's test on release gave is kept another way:
//! - a connection whose statement failed because the connection did (I/O, TLS, protocol, a
//!   crashed worker: [`lost`]) is closed when its lease ends, never kept;
//! - a connection kept idle longer than [`PING_IF_IDLE`] is pinged before it is handed out
//!   (a connection sits idle in sqlx's pool only before its first lease, where sqlx's own
//!   test on acquire, its default, covers it);
//! - an abandoned statement's answer is still drained before the next statement: sqlx's
//!   Postgres connection waits until it is ready for a query before each one, and SQLite's
//!   worker runs queued commands in order;
//! - a Postgres connection is retired as sqlx's pool would retire it ([`Retire`]): kept idle
//!   too long, or open too long.
//!
//! Waiting is first come, first served (tokio's semaphore is fair), as in sqlx's pool: SQLite's
//! commit batches rely on it ([`super::group`]).

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyConnection, AnyPool, Connection as _};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::db::WAIT;

/// A connection idle longer than this is pinged before it is handed out: one that sat idle
/// across a database restart fails its ping and is replaced, not handed to a join. One in
/// steady use is not pinged; if it died meanwhile, its first statement fails instead (a
/// storage error, which a join answers as retryable) and it is closed.
const PING_IF_IDLE: Duration = Duration::from_secs(1);

/// When kept connections are closed, as sqlx's pool closes its own (its `idle_timeout` and
/// `max_lifetime`, whose defaults these are): a connection stays checked out of that pool
/// between leases, so the pool never sees it idle or old.
#[derive(Debug, Clone, Copy)]
pub(super) struct Retire {
    /// A connection kept idle this long is closed: after a burst the server gets its sessions
    /// back (a replica holds up to its pools' size in server connections only while busy).
    pub idle: Duration,
    /// A connection open this long is closed when its lease ends: a session's server-side
    /// caches do not grow without end, and a server moved behind a proxy, a DNS name or a
    /// failover is reached anew within this bound.
    pub age: Duration,
}

impl Retire {
    /// sqlx's pool defaults: idle 10 minutes, age 30 minutes.
    pub(super) const POSTGRES: Retire = Retire {
        idle: Duration::from_secs(10 * 60),
        age: Duration::from_secs(30 * 60),
    };
}

/// The connections of one pool: at most as many leases at once as the pool has connections.
#[derive(Debug)]
pub(super) struct Connections {
    pool: AnyPool,
    /// One per connection the pool may open.
    permits: Arc<Semaphore>,
    kept: Mutex<Kept>,
    /// None: kept until lost or closed (SQLite's write connection may carry an open commit
    /// batch between transactions, so nothing may close it on its own).
    retire: Option<Retire>,
}

#[derive(Debug, Default)]
struct Kept {
    /// Connections between leases, the most recently used last (reused first: warm caches).
    idle: Vec<Idle>,
    /// [`Connections::close`] ran: a connection whose lease ends goes back to the pool, which
    /// closes it.
    closed: bool,
}

#[derive(Debug)]
struct Idle {
    conn: PoolConnection<Any>,
    since: Instant,
    opened: Instant,
}

impl Idle {
    /// Whether `retire` closes this connection now rather than leasing it again.
    fn retired(&self, retire: Option<Retire>) -> bool {
        retire.is_some_and(|r| self.since.elapsed() >= r.idle || self.opened.elapsed() >= r.age)
    }

    fn close(mut self) {
        self.conn.close_on_drop();
    }
}

impl Connections {
    /// Leases connections of `pool`: as many at once as it may open, each closed as `retire`
    /// says (never, if none).
    pub(super) fn new(pool: AnyPool, retire: Option<Retire>) -> Arc<Self> {
        let size = pool.options().get_max_connections() as usize;
        Arc::new(Self {
            pool,
            permits: Arc::new(Semaphore::new(size)),
            kept: Mutex::default(),
            retire,
        })
    }

    fn kept(&self) -> MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A connection: a kept one (pinged first if it sat idle for a while), else a new one
    /// from the pool. Waits up to [`WAIT`] for a lease to end; `PoolTimedOut` after that,
    /// `PoolClosed` once [`Self::close`] ran.
    pub(super) async fn acquire(self: &Arc<Self>) -> Result<Lease, sqlx::Error> {
        let permit = match tokio::time::timeout(WAIT, self.permits.clone().acquire_owned()).await {
            Ok(Ok(permit)) => permit,
            Ok(Err(_closed)) => return Err(sqlx::Error::PoolClosed),
            Err(_elapsed) => return Err(sqlx::Error::PoolTimedOut),
        };
        loop {
            let idle = self.kept().idle.pop();
            let Some(mut idle) = idle else {
                let conn = self.pool.acquire().await?;
                return Ok(self.lease(conn, Instant::now(), permit));
            };
            if idle.retired(self.retire) {
                idle.close();
                continue;
            }
            if idle.since.elapsed() <= PING_IF_IDLE || idle.conn.ping().await.is_ok() {
                return Ok(self.lease(idle.conn, idle.opened, permit));
            }
            // Lost while idle: closed, and the next kept one (or a new one) is tried.
            idle.close();
        }
    }

    fn lease(
        self: &Arc<Self>,
        conn: PoolConnection<Any>,
        opened: Instant,
        permit: OwnedSemaphorePermit,
    ) -> Lease {
        Lease {
            conn: Some(conn),
            opened,
            home: self.clone(),
            discard: false,
            _permit: permit,
        }
    }

    /// Keeps `conn` for the next lease, unless it is retired or the pool closed; closes the
    /// kept connection idle longest if it has been idle too long (the most recently used are
    /// leased first, so under light load the others would otherwise wait forever).
    fn keep(&self, conn: PoolConnection<Any>, opened: Instant) {
        let idle = Idle {
            conn,
            since: Instant::now(),
            opened,
        };
        let mut retired = Vec::new();
        {
            let mut kept = self.kept();
            if kept.closed {
                return; // `idle` drops: back to the pool, which closes it.
            }
            if idle.retired(self.retire) {
                retired.push(idle);
            } else {
                kept.idle.push(idle);
            }
            if kept.idle.first().is_some_and(|i| i.retired(self.retire)) {
                retired.push(kept.idle.remove(0));
            }
        }
        retired.into_iter().for_each(Idle::close);
    }

    /// Refuses new leases and closes every connection, waiting for leased ones to end.
    pub(super) async fn close(&self) {
        self.permits.close();
        let idle = {
            let mut kept = self.kept();
            kept.closed = true;
            std::mem::take(&mut kept.idle)
        };
        drop(idle); // Back to the pool, which closes them below.
        self.pool.close().await;
    }

    /// Connections kept between leases, for this module's tests.
    #[cfg(test)]
    pub(super) fn idle(&self) -> usize {
        self.kept().idle.len()
    }

    /// The pool that opens the connections, for this module's tests.
    #[cfg(test)]
    pub(super) fn pool(&self) -> &AnyPool {
        &self.pool
    }
}

/// One connection, leased until dropped: then kept for the next caller, or closed if
/// [`Lease::discard`] was called.
#[derive(Debug)]
pub(super) struct Lease {
    /// Some until dropped.
    conn: Option<PoolConnection<Any>>,
    /// When the connection was opened ([`Retire::age`]).
    opened: Instant,
    home: Arc<Connections>,
    discard: bool,
    /// Released after the connection is kept (field order), so whoever it admits finds it.
    _permit: OwnedSemaphorePermit,
}

impl Lease {
    /// Closes the connection when the lease ends instead of keeping it: its state is unknown
    /// (a rollback that failed or never ran) or it was lost.
    pub(super) fn discard(&mut self) {
        self.discard = true;
    }
}

impl Deref for Lease {
    type Target = AnyConnection;

    fn deref(&self) -> &AnyConnection {
        // Only `drop` takes the connection out.
        self.conn.as_deref().unwrap_or_else(|| unreachable!())
    }
}

impl DerefMut for Lease {
    fn deref_mut(&mut self) -> &mut AnyConnection {
        self.conn.as_deref_mut().unwrap_or_else(|| unreachable!())
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        if self.discard {
            conn.close_on_drop();
            return;
        }
        self.home.keep(conn, self.opened);
    }
}

/// Whether a statement failed because its connection did, so that it must not be kept: the
/// connection broke (I/O, TLS, protocol, SQLite's worker), or Postgres ended the session
/// (SQLSTATE class 08, connection exception, or 57P, the server shutting down or the session
/// terminated: its first answer after `pg_terminate_backend`, before the socket closes). Any
/// other answer of the database (a constraint, a lock or statement timeout, a serialization
/// failure) leaves the connection usable.
pub(super) fn lost(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(e) => e
            .code()
            .is_some_and(|code| code.starts_with("08") || code.starts_with("57P")),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use sqlx::{Connection as _, Executor as _, Row as _};

    use super::*;
    use crate::store::Backend;
    use crate::store::testing;

    /// Whether `conn` is the session that created the temporary table `mark`.
    async fn marked(conn: &mut AnyConnection) -> bool {
        conn.fetch_one("SELECT COUNT(*) FROM mark").await.is_ok()
    }

    #[tokio::test]
    async fn a_connection_is_kept_between_leases_unless_discarded() {
        for t in testing::all().await {
            let connections = t.db.connections();
            let mut first = connections.acquire().await.unwrap();
            first
                .execute("CREATE TEMP TABLE mark (x INTEGER)")
                .await
                .unwrap();
            drop(first);
            let mut again = connections.acquire().await.unwrap();
            assert!(marked(&mut again).await, "{:?}: not kept", t.db.backend());
            again.discard();
            drop(again);
            let mut other = connections.acquire().await.unwrap();
            assert!(
                !marked(&mut other).await,
                "{:?}: a discarded connection came back",
                t.db.backend()
            );
        }
    }

    /// A connection lost while kept idle is replaced when it is next leased, not handed out.
    #[tokio::test]
    async fn a_connection_lost_while_idle_is_replaced() {
        let Some(t) = testing::postgres().await else {
            eprintln!("skipped: DATABASE_URL is not set");
            return;
        };
        let connections = t.db.connections();
        let pid = backend_pid(&mut connections.acquire().await.unwrap()).await;
        terminate(&t.url, pid).await;
        tokio::time::sleep(PING_IF_IDLE + Duration::from_millis(100)).await;
        let mut next = connections.acquire().await.unwrap();
        assert_ne!(backend_pid(&mut next).await, pid);
    }

    /// A transaction whose statement failed because its connection was lost does not hand
    /// that connection to the next transaction, however soon it comes.
    #[tokio::test]
    async fn a_connection_lost_mid_transaction_is_not_kept() {
        let Some(t) = testing::postgres().await else {
            eprintln!("skipped: DATABASE_URL is not set");
            return;
        };
        assert_eq!(t.db.backend(), Backend::Postgres);
        let mut tx = t.db.begin().await.unwrap();
        let row = tx
            .fetch_one(sqlx::query("SELECT pg_backend_pid() AS pid"))
            .await
            .unwrap();
        terminate(&t.url, row.get::<i32, _>("pid")).await;
        let failed = tx.ping().await.unwrap_err();
        assert!(
            matches!(&failed, crate::store::StoreError::Query(e) if lost(e)),
            "{failed:?}"
        );
        drop(tx);
        let mut tx = t.db.begin().await.unwrap();
        tx.now().await.unwrap();
        tx.commit().await.unwrap();
    }

    /// Postgres connections are closed, not kept, once idle or open too long: the next lease
    /// gets a new session and the old one is gone from the server.
    #[tokio::test]
    async fn postgres_connections_retire_when_idle_or_old() {
        let Some(t) = testing::postgres().await else {
            eprintln!("skipped: DATABASE_URL is not set");
            return;
        };
        let retire = Retire {
            idle: Duration::from_millis(300),
            age: Duration::from_millis(1_500),
        };
        let connections = retiring(&t.url, retire).await;
        let first = backend_pid(&mut connections.acquire().await.unwrap()).await;
        // Kept while in use...
        let again = backend_pid(&mut connections.acquire().await.unwrap()).await;
        assert_eq!(again, first);
        // ...closed once idle too long.
        tokio::time::sleep(retire.idle + Duration::from_millis(100)).await;
        let second = backend_pid(&mut connections.acquire().await.unwrap()).await;
        assert_ne!(second, first);
        assert_session_ends(&t.url, first).await;
        // Leased again and again, never idle long: closed once old.
        let started = Instant::now();
        let mut pid = second;
        while pid == second {
            assert!(started.elapsed() < retire.age * 2, "never retired");
            tokio::time::sleep(Duration::from_millis(100)).await;
            pid = backend_pid(&mut connections.acquire().await.unwrap()).await;
        }
        assert!(started.elapsed() + Duration::from_millis(400) >= retire.age);
        assert_session_ends(&t.url, second).await;
        connections.close().await;
    }

    /// A connection idle at the bottom of the kept stack is closed at the next release, though
    /// no lease pops it: two held at once, then one used alone.
    #[tokio::test]
    async fn a_postgres_connection_idle_under_light_load_is_closed() {
        let Some(t) = testing::postgres().await else {
            eprintln!("skipped: DATABASE_URL is not set");
            return;
        };
        let retire = Retire {
            idle: Duration::from_millis(300),
            age: Duration::from_secs(60),
        };
        let connections = retiring(&t.url, retire).await;
        let mut a = connections.acquire().await.unwrap();
        let mut b = connections.acquire().await.unwrap();
        let bottom = backend_pid(&mut a).await;
        backend_pid(&mut b).await;
        drop(a);
        drop(b);
        assert_eq!(connections.idle(), 2);
        for _ in 0..6 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            drop(connections.acquire().await.unwrap());
        }
        assert_eq!(connections.idle(), 1);
        assert_session_ends(&t.url, bottom).await;
        connections.close().await;
    }

    /// Two connections to `url`, retired as `retire` says.
    async fn retiring(url: &str, retire: Retire) -> Arc<Connections> {
        let pool = sqlx::any::AnyPoolOptions::new()
            .max_connections(2)
            .connect(url)
            .await
            .unwrap();
        Connections::new(pool, Some(retire))
    }

    /// Waits until the server session `pid` has ended, failing after a few seconds.
    async fn assert_session_ends(url: &str, pid: i32) {
        let session = "SELECT COUNT(*) AS n FROM pg_stat_activity WHERE pid = $1";
        assert!(
            testing::postgres_counts_none(url, session, Some(pid)).await,
            "session {pid} still open"
        );
    }

    #[tokio::test]
    async fn closed_connections_lease_nothing() {
        let t = testing::sqlite().await;
        let connections = t.db.connections();
        drop(connections.acquire().await.unwrap());
        assert_eq!(connections.idle(), 1);
        connections.close().await;
        assert_eq!(connections.idle(), 0);
        assert!(matches!(
            connections.acquire().await,
            Err(sqlx::Error::PoolClosed)
        ));
    }

    #[test]
    fn only_a_failed_connection_counts_as_lost() {
        assert!(lost(&sqlx::Error::Io(
            std::io::ErrorKind::BrokenPipe.into()
        )));
        assert!(lost(&sqlx::Error::WorkerCrashed));
        assert!(!lost(&sqlx::Error::RowNotFound));
        assert!(!lost(&sqlx::Error::PoolTimedOut));
    }

    async fn backend_pid(conn: &mut AnyConnection) -> i32 {
        conn.fetch_one("SELECT pg_backend_pid() AS pid")
            .await
            .unwrap()
            .get::<i32, _>("pid")
    }

    /// Ends the server session `pid` from a connection of its own.
    async fn terminate(url: &str, pid: i32) {
        let mut admin = AnyConnection::connect(url).await.unwrap();
        sqlx::query("SELECT pg_terminate_backend($1)")
            .bind(pid)
            .execute(&mut admin)
            .await
            .unwrap();
        admin.close().await.unwrap();
    }
}
