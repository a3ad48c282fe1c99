//! An in-memory store for the attestor-call benchmark's component path: tokens, the
//! single-use ledger and the key/value space behind the host's [`TxBackend`]. The native path
//! runs over the SDK test kit's `MemoryTx`, also in memory, so the two measurements differ by
//! the wasm boundary and not by a database.

use std::collections::{BTreeMap, BTreeSet};

use gatehouse::imports::{BackendError, ConsumeOutcome, TxBackend, UseOutcome};
use gatehouse::runtime::bindings::transaction as host;

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
