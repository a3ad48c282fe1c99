//! An in-memory store for the attestor-call benchmark: tokens, the single-use ledger and the
//! key/value space, behind both the host's [`TxBackend`] (the component path) and the SDK's
//! [`gatehouse_sdk::Tx`] (the native path), so the two measurements differ only by the wasm
//! boundary and not by the database.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

use crate::imports::{BackendError, ConsumeOutcome, TxBackend, UseOutcome};
use crate::runtime::bindings::transaction as host;
use crate::runtime::bindings::types as host_types;

/// Token rows, used subjects and key/value pairs; nothing else exists in it.
#[derive(Debug, Clone, Default)]
pub(super) struct MemoryStore {
    now: i64,
    tokens: BTreeMap<String, host::Token>,
    uses: BTreeSet<(String, String)>,
    kv: BTreeMap<(String, String), Vec<u8>>,
}

impl MemoryStore {
    pub(super) fn new(now: i64, tokens: impl IntoIterator<Item = host::Token>) -> Self {
        Self {
            now,
            tokens: tokens.into_iter().map(|t| (t.id.clone(), t)).collect(),
            ..Self::default()
        }
    }

    fn consume(&mut self, id: &str) -> ConsumeOutcome {
        match self.tokens.get_mut(id) {
            Some(t) if t.uses_left > 0 => {
                t.uses_left -= 1;
                ConsumeOutcome::Consumed(t.uses_left)
            }
            _ => ConsumeOutcome::NoneLeft,
        }
    }

    fn record(&mut self, attestor: &str, subject: &str) -> UseOutcome {
        if self.uses.insert((attestor.to_owned(), subject.to_owned())) {
            UseOutcome::Recorded
        } else {
            UseOutcome::Reused
        }
    }
}

const NO_JOIN_REQUESTS: &str = "the benchmark store holds no join requests";

impl TxBackend for MemoryStore {
    async fn now(&mut self) -> Result<i64, BackendError> {
        Ok(self.now)
    }
    async fn lock_token(&mut self, id: &str) -> Result<Option<host::Token>, BackendError> {
        Ok(self.tokens.get(id).cloned())
    }
    async fn consume_token(&mut self, id: &str) -> Result<ConsumeOutcome, BackendError> {
        Ok(self.consume(id))
    }
    async fn node(&mut self, _: &str) -> Result<Option<host::Node>, BackendError> {
        Ok(None)
    }
    async fn node_cert(&mut self, _: &[u8]) -> Result<Option<host::NodeCert>, BackendError> {
        Ok(None)
    }
    async fn node_cert_for_key(
        &mut self,
        _: &str,
        _: &[u8],
    ) -> Result<Option<host::NodeCert>, BackendError> {
        Ok(None)
    }
    async fn inventory_by_mac(&mut self, _: &str) -> Result<Option<host::Inventory>, BackendError> {
        Ok(None)
    }
    async fn bound_node(&mut self, _: &str, _: &str) -> Result<Option<String>, BackendError> {
        Ok(None)
    }
    async fn lease(&mut self, _: &str) -> Result<Option<host::Lease>, BackendError> {
        Ok(None)
    }
    async fn newest_inventory(&mut self, _: &str) -> Result<Option<host::Inventory>, BackendError> {
        Ok(None)
    }
    async fn token_workflow(&mut self, _: &str) -> Result<Option<host::Workflow>, BackendError> {
        Ok(None)
    }
    async fn record_use(
        &mut self,
        attestor: &str,
        subject: &str,
        _: i64,
    ) -> Result<UseOutcome, BackendError> {
        Ok(self.record(attestor, subject))
    }
    async fn open_join_request(
        &mut self,
        _: &str,
        _: &str,
        _: &[u8],
        _: &str,
    ) -> Result<host::JoinRequestRow, BackendError> {
        Err(BackendError(NO_JOIN_REQUESTS.into()))
    }
    async fn join_request(
        &mut self,
        _: &str,
        _: &str,
    ) -> Result<Option<host::JoinRequestRow>, BackendError> {
        Ok(None)
    }
    async fn consume_join_request(&mut self, _: &str, _: &str) -> Result<bool, BackendError> {
        Ok(false)
    }
    async fn kv_get(&mut self, attestor: &str, key: &str) -> Result<Option<Vec<u8>>, BackendError> {
        Ok(self.kv.get(&(attestor.to_owned(), key.to_owned())).cloned())
    }
    async fn kv_put(
        &mut self,
        attestor: &str,
        key: &str,
        value: &[u8],
    ) -> Result<(), BackendError> {
        self.kv
            .insert((attestor.to_owned(), key.to_owned()), value.to_vec());
        Ok(())
    }
    async fn kv_delete(&mut self, attestor: &str, key: &str) -> Result<(), BackendError> {
        self.kv.remove(&(attestor.to_owned(), key.to_owned()));
        Ok(())
    }
}

/// The same store, called natively through the SDK's trait as one attestor.
pub(super) struct NativeTx {
    pub store: RefCell<MemoryStore>,
    pub attestor: String,
}

fn sdk_token(t: &host::Token) -> gatehouse_sdk::Token {
    gatehouse_sdk::Token {
        id: t.id.clone(),
        role: match t.role {
            host_types::TokenRole::Node => gatehouse_sdk::TokenRole::Node,
            host_types::TokenRole::Site => gatehouse_sdk::TokenRole::Site,
            host_types::TokenRole::Provisioned => gatehouse_sdk::TokenRole::Provisioned,
            host_types::TokenRole::Discovery => gatehouse_sdk::TokenRole::Discovery,
        },
        secret_sha256: t.secret_sha256.clone(),
        tenant_id: t.tenant_id.clone(),
        pool_id: t.pool_id.clone(),
        site_id: t.site_id.clone(),
        expires_at: t.expires_at,
        revoked: t.revoked,
        uses_left: t.uses_left,
        expect: gatehouse_sdk::TokenExpect {
            product_uuid: t.expect.product_uuid.clone(),
            mac: t.expect.mac.clone(),
            node_id: t.expect.node_id.clone(),
        },
        reclaim: t.reclaim,
    }
}

impl gatehouse_sdk::Tx for NativeTx {
    fn now(&self) -> i64 {
        self.store.borrow().now
    }
    fn lock_token(&self, id: &str) -> Result<Option<gatehouse_sdk::Token>, gatehouse_sdk::TxError> {
        Ok(self.store.borrow().tokens.get(id).map(sdk_token))
    }
    fn consume_token(&self, id: &str) -> Result<u32, gatehouse_sdk::TxError> {
        match self.store.borrow_mut().consume(id) {
            ConsumeOutcome::Consumed(left) => Ok(left),
            ConsumeOutcome::NoneLeft => Err(gatehouse_sdk::TxError::Invalid(
                "the token has no use left".into(),
            )),
        }
    }
    fn node(&self, _: &str) -> Result<Option<gatehouse_sdk::Node>, gatehouse_sdk::TxError> {
        Ok(None)
    }
    fn node_cert(
        &self,
        _: &[u8],
    ) -> Result<Option<gatehouse_sdk::NodeCert>, gatehouse_sdk::TxError> {
        Ok(None)
    }
    fn bound_node(&self, _: &str, _: &str) -> Result<Option<String>, gatehouse_sdk::TxError> {
        Ok(None)
    }
    fn lease(&self, _: &str) -> Result<Option<gatehouse_sdk::Lease>, gatehouse_sdk::TxError> {
        Ok(None)
    }
    fn newest_inventory(
        &self,
        _: &str,
    ) -> Result<Option<gatehouse_sdk::Inventory>, gatehouse_sdk::TxError> {
        Ok(None)
    }
    fn token_workflow(
        &self,
        _: &str,
    ) -> Result<Option<gatehouse_sdk::Workflow>, gatehouse_sdk::TxError> {
        Ok(None)
    }
    fn record_use(&self, subject: &str, _: i64) -> Result<(), gatehouse_sdk::UseError> {
        match self.store.borrow_mut().record(&self.attestor, subject) {
            UseOutcome::Recorded => Ok(()),
            UseOutcome::Reused => Err(gatehouse_sdk::UseError::Reused),
        }
    }
    fn open_join_request(
        &self,
        _: &str,
        _: &str,
    ) -> Result<gatehouse_sdk::JoinRequestRow, gatehouse_sdk::TxError> {
        Err(gatehouse_sdk::TxError::Invalid(NO_JOIN_REQUESTS.into()))
    }
    fn join_request(
        &self,
        _: &str,
    ) -> Result<Option<gatehouse_sdk::JoinRequestRow>, gatehouse_sdk::TxError> {
        Ok(None)
    }
    fn consume_join_request(&self, _: &str) -> Result<(), gatehouse_sdk::TxError> {
        Err(gatehouse_sdk::TxError::Invalid(NO_JOIN_REQUESTS.into()))
    }
    fn kv_get(&self, key: &str) -> Result<Option<Vec<u8>>, gatehouse_sdk::TxError> {
        Ok(self
            .store
            .borrow()
            .kv
            .get(&(self.attestor.clone(), key.to_owned()))
            .cloned())
    }
    fn kv_put(&self, key: &str, value: &[u8]) -> Result<(), gatehouse_sdk::TxError> {
        self.store
            .borrow_mut()
            .kv
            .insert((self.attestor.clone(), key.to_owned()), value.to_vec());
        Ok(())
    }
    fn kv_delete(&self, key: &str) -> Result<(), gatehouse_sdk::TxError> {
        self.store
            .borrow_mut()
            .kv
            .remove(&(self.attestor.clone(), key.to_owned()));
        Ok(())
    }
}
