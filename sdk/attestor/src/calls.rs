//! Which host functions an attestor calls ([`Attestor::CALLS`]), and the [`Tx`] and
//! [`Crypto`] that hold it to them.
//!
//! A component imports every host function its code can reach, and the host links each import
//! every time it instantiates the component, so once per join. [`Context`](crate::Context)
//! holds its capabilities as trait objects, whose tables reach every function; so the export
//! glue puts [`Declared`] between the attestor and the host: a function the attestor does not
//! name in [`Attestor::CALLS`] is a constant branch to a panic, the host import behind it is
//! never referenced, and the component does not import it (join-token: 25 imports to 5).

use core::marker::PhantomData;

use alloc::vec::Vec;

use crate::{
    Attestor, Crypto, CryptoError, Inventory, JoinRequestRow, Lease, Node, NodeCert,
    SignatureScheme, TimestampMs, Token, Tx, TxError, UseError, VerifiedChain, Workflow,
};

bitflags::bitflags! {
    /// A set of the host's transaction and crypto functions, one flag each (the WIT names,
    /// in `SCREAMING_SNAKE_CASE`), for [`Attestor::CALLS`]. Combine with `union`, which is a
    /// `const fn`:
    ///
    /// ```
    /// use gatehouse_sdk::Calls;
    ///
    /// const CALLS: Calls = Calls::TOKEN.union(Calls::RECORD_USE);
    /// assert!(CALLS.contains(Calls::LOCK_TOKEN));
    /// assert!(!CALLS.contains(Calls::KV_PUT));
    /// ```
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Calls: u32 {
        /// `tx.now`.
        const NOW = 1 << 0;
        /// `tx.lock-token`.
        const LOCK_TOKEN = 1 << 1;
        /// `tx.consume-token`.
        const CONSUME_TOKEN = 1 << 2;
        /// `tx.node`.
        const NODE = 1 << 3;
        /// `tx.node-cert`.
        const NODE_CERT = 1 << 4;
        /// `tx.bound-node`.
        const BOUND_NODE = 1 << 5;
        /// `tx.lease`.
        const LEASE = 1 << 6;
        /// `tx.newest-inventory`.
        const NEWEST_INVENTORY = 1 << 7;
        /// `tx.token-workflow`.
        const TOKEN_WORKFLOW = 1 << 8;
        /// `tx.record-use`.
        const RECORD_USE = 1 << 9;
        /// `tx.open-join-request`.
        const OPEN_JOIN_REQUEST = 1 << 10;
        /// `tx.join-request`.
        const JOIN_REQUEST = 1 << 11;
        /// `tx.consume-join-request`.
        const CONSUME_JOIN_REQUEST = 1 << 12;
        /// `tx.kv-get`.
        const KV_GET = 1 << 13;
        /// `tx.kv-put`.
        const KV_PUT = 1 << 14;
        /// `tx.kv-delete`.
        const KV_DELETE = 1 << 15;
        /// `tx.node-cert-for-key`.
        const NODE_CERT_FOR_KEY = 1 << 16;
        /// `tx.inventory-by-mac`.
        const INVENTORY_BY_MAC = 1 << 17;
        /// `crypto.sha256`.
        const SHA256 = 1 << 18;
        /// `crypto.verify-signature`.
        const VERIFY_SIGNATURE = 1 << 19;
        /// `crypto.verify-chain`.
        const VERIFY_CHAIN = 1 << 20;
        /// `crypto.seal-state`.
        const SEAL_STATE = 1 << 21;
        /// `crypto.seal-state-until`.
        const SEAL_STATE_UNTIL = 1 << 22;
        /// `crypto.open-state`.
        const OPEN_STATE = 1 << 23;

        /// What [`token::checked`](crate::token::checked),
        /// [`token::checked_single_use`](crate::token::checked_single_use) and
        /// [`token::spend`](crate::token::spend) call.
        const TOKEN = Self::NOW.bits()
            | Self::LOCK_TOKEN.bits()
            | Self::CONSUME_TOKEN.bits()
            | Self::SHA256.bits();
        /// What [`approval::request`](crate::approval::request) and
        /// [`Approved::spend`](crate::approval::Approved::spend) call.
        const APPROVAL = Self::KV_GET.bits()
            | Self::KV_PUT.bits()
            | Self::OPEN_JOIN_REQUEST.bits()
            | Self::JOIN_REQUEST.bits()
            | Self::CONSUME_JOIN_REQUEST.bits();
    }
}

/// A [`Tx`] and [`Crypto`] over `X` that lets attestor `A` call only what
/// [`Attestor::CALLS`] names; any other call panics, naming the function. The export glue
/// wraps the host's imports in it (so the others are not imported), and the test kit wraps its
/// in-memory ones (so a unit test finds a call `CALLS` leaves out before a host does).
pub struct Declared<'a, A, X: ?Sized> {
    inner: &'a X,
    attestor: PhantomData<fn() -> A>,
}

impl<'a, A: Attestor, X: ?Sized> Declared<'a, A, X> {
    /// `inner`, held to `A`'s calls.
    pub fn new(inner: &'a X) -> Self {
        Self {
            inner,
            attestor: PhantomData,
        }
    }
}

/// Panics for a call outside [`Attestor::CALLS`]: a trap in a component (its message on
/// stderr where the component has the standard library), a failed unit test natively.
#[cold]
#[inline(never)]
fn undeclared(function: &str) -> ! {
    panic!("the attestor called {function}, which its Attestor::CALLS does not name")
}

/// Forwards `$call` if `$flag` is in `A::CALLS`; evaluated at compile time, so when it is not,
/// the forwarded call is dead code and its import is not linked.
macro_rules! declared {
    ($flag:ident, $name:literal, $call:expr) => {{
        if !const { A::CALLS.contains(Calls::$flag) } {
            undeclared($name)
        }
        $call
    }};
}

impl<A: Attestor, X: Tx + ?Sized> Tx for Declared<'_, A, X> {
    fn now(&self) -> TimestampMs {
        declared!(NOW, "tx.now", self.inner.now())
    }
    fn lock_token(&self, id: &str) -> Result<Option<Token>, TxError> {
        declared!(LOCK_TOKEN, "tx.lock-token", self.inner.lock_token(id))
    }
    fn consume_token(&self, id: &str) -> Result<u32, TxError> {
        declared!(
            CONSUME_TOKEN,
            "tx.consume-token",
            self.inner.consume_token(id)
        )
    }
    fn node(&self, id: &str) -> Result<Option<Node>, TxError> {
        declared!(NODE, "tx.node", self.inner.node(id))
    }
    fn node_cert(&self, der: &[u8]) -> Result<Option<NodeCert>, TxError> {
        declared!(NODE_CERT, "tx.node-cert", self.inner.node_cert(der))
    }
    fn bound_node(
        &self,
        kind: &str,
        value: &str,
    ) -> Result<Option<alloc::string::String>, TxError> {
        declared!(
            BOUND_NODE,
            "tx.bound-node",
            self.inner.bound_node(kind, value)
        )
    }
    fn lease(&self, name: &str) -> Result<Option<Lease>, TxError> {
        declared!(LEASE, "tx.lease", self.inner.lease(name))
    }
    fn newest_inventory(&self, node_id: &str) -> Result<Option<Inventory>, TxError> {
        declared!(
            NEWEST_INVENTORY,
            "tx.newest-inventory",
            self.inner.newest_inventory(node_id)
        )
    }
    fn token_workflow(&self, token_id: &str) -> Result<Option<Workflow>, TxError> {
        declared!(
            TOKEN_WORKFLOW,
            "tx.token-workflow",
            self.inner.token_workflow(token_id)
        )
    }
    fn record_use(&self, subject: &str, expires_at: TimestampMs) -> Result<(), UseError> {
        declared!(
            RECORD_USE,
            "tx.record-use",
            self.inner.record_use(subject, expires_at)
        )
    }
    fn open_join_request(&self, subject: &str, details: &str) -> Result<JoinRequestRow, TxError> {
        declared!(
            OPEN_JOIN_REQUEST,
            "tx.open-join-request",
            self.inner.open_join_request(subject, details)
        )
    }
    fn join_request(&self, id: &str) -> Result<Option<JoinRequestRow>, TxError> {
        declared!(JOIN_REQUEST, "tx.join-request", self.inner.join_request(id))
    }
    fn consume_join_request(&self, id: &str) -> Result<(), TxError> {
        declared!(
            CONSUME_JOIN_REQUEST,
            "tx.consume-join-request",
            self.inner.consume_join_request(id)
        )
    }
    fn kv_get(&self, key: &str) -> Result<Option<Vec<u8>>, TxError> {
        declared!(KV_GET, "tx.kv-get", self.inner.kv_get(key))
    }
    fn kv_put(&self, key: &str, value: &[u8]) -> Result<(), TxError> {
        declared!(KV_PUT, "tx.kv-put", self.inner.kv_put(key, value))
    }
    fn kv_delete(&self, key: &str) -> Result<(), TxError> {
        declared!(KV_DELETE, "tx.kv-delete", self.inner.kv_delete(key))
    }
    fn node_cert_for_key(
        &self,
        node_id: &str,
        spki_sha256: &[u8],
    ) -> Result<Option<NodeCert>, TxError> {
        declared!(
            NODE_CERT_FOR_KEY,
            "tx.node-cert-for-key",
            self.inner.node_cert_for_key(node_id, spki_sha256)
        )
    }
    fn inventory_by_mac(&self, mac: &str) -> Result<Option<Inventory>, TxError> {
        declared!(
            INVENTORY_BY_MAC,
            "tx.inventory-by-mac",
            self.inner.inventory_by_mac(mac)
        )
    }
}

impl<A: Attestor, X: Crypto + ?Sized> Crypto for Declared<'_, A, X> {
    fn sha256(&self, data: &[u8]) -> Vec<u8> {
        declared!(SHA256, "crypto.sha256", self.inner.sha256(data))
    }
    fn verify_signature(
        &self,
        scheme: SignatureScheme,
        spki: &[u8],
        message: &[u8],
        signature: &[u8],
    ) -> Result<(), CryptoError> {
        declared!(
            VERIFY_SIGNATURE,
            "crypto.verify-signature",
            self.inner
                .verify_signature(scheme, spki, message, signature)
        )
    }
    fn verify_chain(
        &self,
        chain: &[Vec<u8>],
        roots: &[Vec<u8>],
        at: TimestampMs,
    ) -> Result<VerifiedChain, CryptoError> {
        declared!(
            VERIFY_CHAIN,
            "crypto.verify-chain",
            self.inner.verify_chain(chain, roots, at)
        )
    }
    fn seal_state(&self, plaintext: &[u8], binding: &[u8]) -> Vec<u8> {
        declared!(
            SEAL_STATE,
            "crypto.seal-state",
            self.inner.seal_state(plaintext, binding)
        )
    }
    fn seal_state_until(
        &self,
        plaintext: &[u8],
        binding: &[u8],
        not_after: TimestampMs,
    ) -> Vec<u8> {
        declared!(
            SEAL_STATE_UNTIL,
            "crypto.seal-state-until",
            self.inner.seal_state_until(plaintext, binding, not_after)
        )
    }
    fn open_state(&self, sealed: &[u8], binding: &[u8]) -> Result<Vec<u8>, CryptoError> {
        declared!(
            OPEN_STATE,
            "crypto.open-state",
            self.inner.open_state(sealed, binding)
        )
    }
}
