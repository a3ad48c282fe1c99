//! The database: typed queries over SQLite or PostgreSQL through one code path.
//!
//! [`Db`] is a connection pool; [`Db::begin`] opens a [`Tx`], a write transaction that owns
//! its connection, on which every query runs. There is no raw SQL outside this module: the
//! attestor-facing `transaction` capability, JoinService and the admin API call the typed
//! methods of [`Tx`]. Rows are the plain structs in this module; times are milliseconds since
//! the Unix epoch on the database's clock ([`Tx::now`]).
//!
//! Exactly-once rests on the database, not on this process: a token row is locked
//! (`FOR UPDATE` on Postgres; SQLite serialises writers with `BEGIN IMMEDIATE`) and spent by a
//! conditional update, single-use evidence is an upsert that reports reuse instead of failing,
//! so several replicas sharing one Postgres stay correct. Schemas live in
//! `host/migrations/{sqlite,postgres}` and are embedded and applied at start.

/// SQLite's clock in ms since the Unix epoch, as a SQL expression.
macro_rules! sqlite_now {
    () => {
        "CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)"
    };
}

/// Postgres' clock (the real time, not the transaction start) in ms, as a SQL expression.
macro_rules! postgres_now {
    () => {
        "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)"
    };
}

/// The columns of `join_tokens` that `tokens::token` reads.
macro_rules! token_columns {
    () => {
        "id, role, secret_sha256, tenant_id, pool_id, site_id, expires_at, revoked, uses_total, \
         uses_left, expect_product_uuid, expect_mac, expect_node_id, reclaim, created_at"
    };
}

/// A node's insert, up to its values (`nodes::bind_node` binds eight).
macro_rules! insert_node_into {
    () => {
        "INSERT INTO nodes (id, tenant_id, pool_id, site_id, role, retired, cordoned, \
         identity_generation, hardware_key, created_at, updated_at) "
    };
}

/// A certificate's insert, up to its values (`nodes::bind_cert` binds ten).
macro_rules! insert_cert_into {
    () => {
        "INSERT INTO node_certs (serial, node_id, der, der_sha256, generation, role, \
         not_before, not_after, revoked, statements, created_at) "
    };
}

/// Postgres' audit row and event of a round, as parts of a data-modifying `WITH` whose `spent`
/// holds the spent token's row: each inserted once per row spent, so never without a spend.
/// `$1` to `$20` as `journal::bind_audit_and_event` binds them.
macro_rules! record_from_spent {
    () => {
        "audit AS (INSERT INTO audits (at, attestor, round, result, reason, node_id, token_id, \
         subject, node_key, csr_sha256, client_addr) \
         SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11 FROM spent), \
         event AS (INSERT INTO events (at, kind, tenant_id, node_id, attestor, reason, token_id, \
         actor, payload) SELECT $12, $13, $14, $15, $16, $17, $18, $19, $20 FROM spent)"
    };
}

/// SQLite's audit row and event of a round, as statements that follow the one that spent a
/// token's use (SQLite has no data-modifying `WITH`): each inserts only if the statement before
/// it changed a row (`changes()`), so neither without the spend. `$1` to `$20` as
/// `journal::bind_audit_and_event` binds them.
macro_rules! sqlite_record_after_change {
    () => {
        "INSERT INTO audits (at, attestor, round, result, reason, node_id, token_id, subject, \
         node_key, csr_sha256, client_addr) \
         SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11 WHERE changes() = 1; \
         INSERT INTO events (at, kind, tenant_id, node_id, attestor, reason, token_id, actor, \
         payload) SELECT $12, $13, $14, $15, $16, $17, $18, $19, $20 WHERE changes() = 1"
    };
}

mod admins;
mod admission;
mod checkpoint;
mod clock;
mod db;
mod decode;
mod error;
mod group;
mod join_requests;
mod journal;
mod keys;
mod kv;
mod lease;
mod locks;
mod migrate;
mod nodes;
mod provisioning;
mod prune;
mod reads;
mod rows;
mod site;
mod tokens;
mod tx;
mod uses;

#[cfg(test)]
mod testing;
#[cfg(test)]
mod tests;

pub use admins::AdminRow;
pub use admission::{Admission, JudgedToken};
pub use db::{
    Backend, Cursor, DEFAULT_POSTGRES_CONNECTIONS, Db, MAX_POSTGRES_CONNECTIONS, PoolCursor,
    sqlite_url,
};
pub use error::StoreError;
pub(crate) use join_requests::new_id as new_join_request_id;
pub use journal::AuditFilter;
pub use keys::new_id;
pub use kv::KV_VALUE_MAX;
pub use locks::RowLock;
pub use provisioning::{
    DiscoveryWorkflowRow, USERDATA_RENDER, WORKFLOW_CANCELLED, WORKFLOW_FAILED, WORKFLOW_RUNNING,
    WORKFLOW_SUCCEEDED,
};
pub use rows::{
    AuditResult, AuditRow, EventRow, InventoryRow, JoinDecision, JoinRequestRow, JoinRequestState,
    LeaseRow, NewAudit, NewEvent, NewNode, NewNodeCert, NewToken, NodeCertRow, NodeRole, NodeRow,
    PoolRow, Revocation, TokenExpect, TokenRole, TokenRow, UnknownName, UseOutcome, WorkflowRow,
};
pub use site::LeaseOutcome;
pub use tx::Tx;
