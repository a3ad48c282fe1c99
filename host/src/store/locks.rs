//! Row locks for the locked phase of a join (DESIGN: "Decisions read locked rows").
//!
//! An attestor runs on committed reads; afterwards JoinService opens the write transaction,
//! locks the rows the decision read, and reads them again. On Postgres the lock makes a
//! concurrent revocation, lease move or pool policy update either wait for the join's commit
//! or commit first and be seen by the re-read (under READ COMMITTED each statement sees what
//! committed before it). SQLite's `BEGIN IMMEDIATE` already excludes every other writer, so
//! there locking is a no-op.

use super::{Backend, StoreError, Tx};

/// A row (or the rows of one key) a join's decision depends on.
///
/// The variants are in lock order: [`Tx::lock_rows`] sorts by it, so two joins lock in the
/// same order and cannot deadlock on these rows. Tokens are not among them: a join locks its
/// token last, by spending it (`imports::Spends`), after all of these.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RowLock {
    /// A `nodes` row (exclusive: a reclaim re-keys it).
    Node(String),
    /// A `node_certs` row by its DER (exclusive: a reclaim revokes it).
    NodeCert(Vec<u8>),
    /// The certificates of a node (exclusive, as above).
    NodeCerts(String),
    /// A `join_requests` row of an attestor (exclusive: consuming one marks it used).
    JoinRequest {
        /// The attestor that opened it.
        attestor: String,
        /// Its id.
        id: String,
    },
    /// An `attestor_kv` row (exclusive: the attestor may write it).
    Kv {
        /// The attestor whose space it is in.
        attestor: String,
        /// Its key.
        key: String,
    },
    /// A `node_bindings` row (shared).
    Binding {
        /// The hardware identity's kind.
        kind: String,
        /// Its value.
        value: String,
    },
    /// A `leases` row (shared).
    Lease(String),
    /// The `workflows` rows that minted a token (shared).
    Workflow(String),
    /// A `pools` row (shared: its `join_attestors` decides the join).
    Pool {
        /// The pool's tenant.
        tenant_id: String,
        /// The pool.
        id: String,
    },
}

impl RowLock {
    /// The Postgres statement that takes this lock.
    fn statement(&self) -> &'static str {
        match self {
            RowLock::Node(_) => "SELECT 1 FROM nodes WHERE id = $1 FOR UPDATE",
            RowLock::NodeCert(_) => "SELECT 1 FROM node_certs WHERE serial = $1 FOR UPDATE",
            RowLock::NodeCerts(_) => "SELECT 1 FROM node_certs WHERE node_id = $1 FOR UPDATE",
            RowLock::JoinRequest { .. } => {
                "SELECT 1 FROM join_requests WHERE attestor = $1 AND id = $2 FOR UPDATE"
            }
            RowLock::Kv { .. } => {
                "SELECT 1 FROM attestor_kv WHERE attestor = $1 AND key = $2 FOR UPDATE"
            }
            RowLock::Binding { .. } => {
                "SELECT 1 FROM node_bindings WHERE kind = $1 AND value = $2 FOR SHARE"
            }
            RowLock::Lease(_) => "SELECT 1 FROM leases WHERE name = $1 FOR SHARE",
            RowLock::Workflow(_) => "SELECT 1 FROM workflows WHERE token_id = $1 FOR SHARE",
            RowLock::Pool { .. } => {
                "SELECT 1 FROM pools WHERE tenant_id = $1 AND id = $2 FOR SHARE"
            }
        }
    }
}

impl Tx {
    /// Locks `locks` until this transaction ends, in [`RowLock`] order (duplicates once).
    /// Rows that do not exist lock nothing. A no-op on SQLite.
    pub async fn lock_rows(&mut self, locks: &[RowLock]) -> Result<(), StoreError> {
        if self.backend() != Backend::Postgres {
            return Ok(());
        }
        let mut locks: Vec<&RowLock> = locks.iter().collect();
        locks.sort();
        locks.dedup();
        for lock in locks {
            let q = sqlx::query(lock.statement());
            let q = match lock {
                RowLock::Node(a)
                | RowLock::NodeCerts(a)
                | RowLock::Lease(a)
                | RowLock::Workflow(a) => q.bind(a.clone()),
                // Bytes that are no certificate name no row, and lock none.
                RowLock::NodeCert(der) => {
                    q.bind(super::nodes::issued_serial(der).unwrap_or_default())
                }
                RowLock::JoinRequest { attestor, id } => q.bind(attestor.clone()).bind(id.clone()),
                RowLock::Kv { attestor, key } => q.bind(attestor.clone()).bind(key.clone()),
                RowLock::Binding { kind, value } => q.bind(kind.clone()).bind(value.clone()),
                RowLock::Pool { tenant_id, id } => q.bind(tenant_id.clone()).bind(id.clone()),
            };
            self.fetch_all(q).await?;
        }
        Ok(())
    }
}
