//! What the `transaction` import runs on.
//!
//! [`TxBackend`] is the WIT `tx` resource as an async Rust trait over the WIT record types. The
//! join path implements it on the store's open transaction; the benchmark implements it in
//! memory, so it measures the attestor call itself and not the database.

use std::future::Future;

use crate::runtime::bindings::transaction::{
    Inventory, JoinRequestRow, Lease, Node, NodeCert, Token, Workflow,
};

/// A storage operation failed. The detail is logged where it happens; the guest sees
/// `tx-error.storage` and the call cannot admit.
#[derive(Debug, thiserror::Error)]
#[error("storage failed: {0}")]
pub struct BackendError(pub String);

/// The result of spending a token use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumeOutcome {
    /// One use spent; this many are left.
    Consumed(u32),
    /// The token had no use left (or does not exist).
    NoneLeft,
}

/// The result of recording single-use evidence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UseOutcome {
    /// First use: recorded.
    Recorded,
    /// Recorded before and not expired.
    Reused,
}

/// The operations of the WIT `tx` resource. Methods that touch per-attestor data take the
/// calling attestor's id, which the host supplies: a guest cannot name another attestor.
pub trait TxBackend: Send + 'static {
    /// Database time in ms.
    fn now(&mut self) -> impl Future<Output = Result<i64, BackendError>> + Send;
    /// Locks and reads a token row.
    fn lock_token(
        &mut self,
        id: &str,
    ) -> impl Future<Output = Result<Option<Token>, BackendError>> + Send;
    /// Spends one use of a token.
    fn consume_token(
        &mut self,
        id: &str,
    ) -> impl Future<Output = Result<ConsumeOutcome, BackendError>> + Send;
    /// Reads a node.
    fn node(&mut self, id: &str)
    -> impl Future<Output = Result<Option<Node>, BackendError>> + Send;
    /// Reads a certificate this host issued, by its DER bytes.
    fn node_cert(
        &mut self,
        der: &[u8],
    ) -> impl Future<Output = Result<Option<NodeCert>, BackendError>> + Send;
    /// The newest live certificate of a node for the key with this SPKI hash.
    fn node_cert_for_key(
        &mut self,
        node_id: &str,
        spki_sha256: &[u8],
    ) -> impl Future<Output = Result<Option<NodeCert>, BackendError>> + Send;
    /// The newest inventory of any node that reports a MAC.
    fn inventory_by_mac(
        &mut self,
        mac: &str,
    ) -> impl Future<Output = Result<Option<Inventory>, BackendError>> + Send;
    /// The node a hardware identity is bound to.
    fn bound_node(
        &mut self,
        kind: &str,
        value: &str,
    ) -> impl Future<Output = Result<Option<String>, BackendError>> + Send;
    /// Reads a lease.
    fn lease(
        &mut self,
        name: &str,
    ) -> impl Future<Output = Result<Option<Lease>, BackendError>> + Send;
    /// The newest inventory of a node.
    fn newest_inventory(
        &mut self,
        node_id: &str,
    ) -> impl Future<Output = Result<Option<Inventory>, BackendError>> + Send;
    /// The workflow whose `userdata.render` step minted a token.
    fn token_workflow(
        &mut self,
        token_id: &str,
    ) -> impl Future<Output = Result<Option<Workflow>, BackendError>> + Send;
    /// Records single-use evidence.
    fn record_use(
        &mut self,
        attestor: &str,
        subject: &str,
        expires_at: i64,
    ) -> impl Future<Output = Result<UseOutcome, BackendError>> + Send;
    /// Opens or finds a join request.
    fn open_join_request(
        &mut self,
        attestor: &str,
        subject: &str,
        csr_sha256: &[u8],
        details: &str,
    ) -> impl Future<Output = Result<JoinRequestRow, BackendError>> + Send;
    /// Reads a join request of this attestor.
    fn join_request(
        &mut self,
        attestor: &str,
        id: &str,
    ) -> impl Future<Output = Result<Option<JoinRequestRow>, BackendError>> + Send;
    /// Marks an approved join request used; false when it was not approved and unused.
    fn consume_join_request(
        &mut self,
        attestor: &str,
        id: &str,
    ) -> impl Future<Output = Result<bool, BackendError>> + Send;
    /// Reads from the attestor's key/value space.
    fn kv_get(
        &mut self,
        attestor: &str,
        key: &str,
    ) -> impl Future<Output = Result<Option<Vec<u8>>, BackendError>> + Send;
    /// Writes to the attestor's key/value space.
    fn kv_put(
        &mut self,
        attestor: &str,
        key: &str,
        value: &[u8],
    ) -> impl Future<Output = Result<(), BackendError>> + Send;
    /// Deletes from the attestor's key/value space.
    fn kv_delete(
        &mut self,
        attestor: &str,
        key: &str,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;
}
