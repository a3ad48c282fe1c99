//! [`MemoryTx`]: the WIT `transaction.tx` resource over in-memory tables.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use gatehouse_sdk::{
    Inventory, JoinRequestRow, JoinRequestState, Lease, Node, NodeCert, TimestampMs, Token, Tx,
    TxError, UseError, Workflow,
};
use sha2::Digest as _;

/// The most bytes one key/value entry may hold (the host's limit).
const MAX_VALUE: usize = 64 * 1024;

/// Database time, shared by a [`MemoryTx`] and the [`SoftCrypto`](crate::SoftCrypto) that
/// seals state by it.
#[derive(Debug, Clone, Default)]
pub struct Clock(Rc<Cell<TimestampMs>>);

impl Clock {
    /// A clock reading `now`.
    pub fn new(now: TimestampMs) -> Self {
        Clock(Rc::new(Cell::new(now)))
    }
    /// The time.
    pub fn now(&self) -> TimestampMs {
        self.0.get()
    }
    /// Sets the time.
    pub fn set(&self, now: TimestampMs) {
        self.0.set(now);
    }
}

/// A transaction operation, to make it fail with [`MemoryTx::fail`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Op {
    /// `lock-token`.
    LockToken,
    /// `consume-token`.
    ConsumeToken,
    /// `node`.
    Node,
    /// `node-cert`.
    NodeCert,
    /// `node-cert-for-key`.
    NodeCertForKey,
    /// `bound-node`.
    BoundNode,
    /// `lease`.
    Lease,
    /// `newest-inventory`.
    NewestInventory,
    /// `inventory-by-mac`.
    InventoryByMac,
    /// `token-workflow`.
    TokenWorkflow,
    /// `record-use` (fails with `use-error.storage`).
    RecordUse,
    /// `open-join-request`.
    OpenJoinRequest,
    /// `join-request`.
    JoinRequest,
    /// `consume-join-request`.
    ConsumeJoinRequest,
    /// `kv-get`.
    KvGet,
    /// `kv-put`.
    KvPut,
    /// `kv-delete`.
    KvDelete,
}

/// The tables one attestor sees.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tables {
    tokens: BTreeMap<String, Token>,
    locked: BTreeSet<String>,
    nodes: BTreeMap<String, Node>,
    certs: Vec<(Vec<u8>, NodeCert)>,
    bindings: BTreeMap<(String, String), String>,
    leases: BTreeMap<String, Lease>,
    inventories: Vec<Inventory>,
    workflows: BTreeMap<String, Workflow>,
    uses: BTreeMap<String, TimestampMs>,
    spent: BTreeMap<String, u32>,
    join_requests: BTreeMap<String, (JoinRequestRow, String)>,
    next_join_request: u32,
    kv: BTreeMap<String, Vec<u8>>,
}

/// An in-memory [`Tx`]: the rows an attestor reads (tokens, nodes, certificates, bindings,
/// leases, inventories, workflows) set up by the test, and what it writes (token uses, the
/// single-use ledger, join requests, its key/value space) kept for the test to inspect.
///
/// Each operation behaves as the host documents it in the WIT (`transaction.wit`): a token is
/// spent only after `lock-token` read it and while it has a use left, `record-use` refuses a
/// subject recorded before that has not expired, `open-join-request` finds the pending or
/// approved request for the same subject and CSR, `consume-join-request` spends only an
/// approved request, and database time is what [`MemoryTx::set_now`] set. Operations made to
/// fail with [`MemoryTx::fail`] answer `storage`.
#[derive(Debug, Default)]
pub struct MemoryTx {
    tables: RefCell<Tables>,
    clock: Clock,
    csr_sha256: RefCell<Vec<u8>>,
    failing: RefCell<BTreeSet<Op>>,
}

impl MemoryTx {
    /// Empty tables at database time `now`.
    pub fn new(now: TimestampMs) -> Self {
        MemoryTx {
            clock: Clock::new(now),
            ..MemoryTx::default()
        }
    }

    /// The clock, to share with a [`SoftCrypto`](crate::SoftCrypto).
    pub fn clock(&self) -> Clock {
        self.clock.clone()
    }

    /// Database time (as [`Tx::now`] answers it).
    pub fn now(&self) -> TimestampMs {
        self.clock.now()
    }

    /// Sets database time.
    pub fn set_now(&self, now: TimestampMs) {
        self.clock.set(now);
    }

    /// Moves database time on by `ms`.
    pub fn advance(&self, ms: i64) {
        self.clock.set(self.clock.now().saturating_add(ms));
    }

    /// Sets the CSR hash of the round (`open-join-request` opens requests for it);
    /// [`Kit::round`](crate::Kit) sets it from the request.
    pub fn set_csr_sha256(&self, csr_sha256: &[u8]) {
        *self.csr_sha256.borrow_mut() = csr_sha256.to_vec();
    }

    /// Makes `op` fail with `storage` until [`MemoryTx::heal`].
    pub fn fail(&self, op: Op) {
        self.failing.borrow_mut().insert(op);
    }

    /// Makes `op` work again.
    pub fn heal(&self, op: Op) {
        self.failing.borrow_mut().remove(&op);
    }

    // Rows the attestor reads.

    /// Adds (or replaces) a token row.
    pub fn insert_token(&self, token: Token) {
        self.tables
            .borrow_mut()
            .tokens
            .insert(token.id.clone(), token);
    }
    /// Changes a token row in place (no-op when there is none).
    pub fn update_token(&self, id: &str, change: impl FnOnce(&mut Token)) {
        if let Some(token) = self.tables.borrow_mut().tokens.get_mut(id) {
            change(token);
        }
    }
    /// Adds (or replaces) a node.
    pub fn insert_node(&self, node: Node) {
        self.tables.borrow_mut().nodes.insert(node.id.clone(), node);
    }
    /// Changes a node in place (no-op when there is none).
    pub fn update_node(&self, id: &str, change: impl FnOnce(&mut Node)) {
        if let Some(node) = self.tables.borrow_mut().nodes.get_mut(id) {
            change(node);
        }
    }
    /// Removes a node.
    pub fn remove_node(&self, id: &str) {
        self.tables.borrow_mut().nodes.remove(id);
    }
    /// Adds a certificate the host issued, with its DER.
    pub fn insert_cert(&self, der: &[u8], cert: NodeCert) {
        self.tables.borrow_mut().certs.push((der.to_vec(), cert));
    }
    /// Removes the certificate with this DER.
    pub fn remove_cert(&self, der: &[u8]) {
        self.tables.borrow_mut().certs.retain(|(d, _)| d != der);
    }
    /// Changes the certificate with this DER in place (no-op when there is none).
    pub fn update_cert(&self, der: &[u8], change: impl FnOnce(&mut NodeCert)) {
        let mut tables = self.tables.borrow_mut();
        if let Some((_, cert)) = tables.certs.iter_mut().find(|(d, _)| d == der) {
            change(cert);
        }
    }
    /// Binds a hardware identity to a node.
    pub fn bind(&self, kind: &str, value: &str, node_id: &str) {
        self.tables
            .borrow_mut()
            .bindings
            .insert((kind.into(), value.into()), node_id.into());
    }
    /// Adds (or replaces) a lease.
    pub fn insert_lease(&self, lease: Lease) {
        self.tables
            .borrow_mut()
            .leases
            .insert(lease.name.clone(), lease);
    }
    /// Changes a lease in place (no-op when there is none).
    pub fn update_lease(&self, name: &str, change: impl FnOnce(&mut Lease)) {
        if let Some(lease) = self.tables.borrow_mut().leases.get_mut(name) {
            change(lease);
        }
    }
    /// Removes a lease.
    pub fn remove_lease(&self, name: &str) {
        self.tables.borrow_mut().leases.remove(name);
    }
    /// Adds an inventory report.
    pub fn insert_inventory(&self, inventory: Inventory) {
        self.tables.borrow_mut().inventories.push(inventory);
    }
    /// Records that `workflow`'s `userdata.render` step minted `token_id`.
    pub fn insert_workflow(&self, token_id: &str, workflow: Workflow) {
        self.tables
            .borrow_mut()
            .workflows
            .insert(token_id.into(), workflow);
    }
    /// Adds a ledger row, as an earlier join would have.
    pub fn insert_use(&self, subject: &str, expires_at: TimestampMs) {
        self.tables
            .borrow_mut()
            .uses
            .insert(subject.into(), expires_at);
    }
    /// Sets a key/value entry, as an earlier round would have.
    pub fn insert_kv(&self, key: &str, value: &[u8]) {
        self.tables
            .borrow_mut()
            .kv
            .insert(key.into(), value.to_vec());
    }

    // An operator's decisions.

    /// An operator approves join request `id` into this placement.
    pub fn approve(&self, id: &str, tenant: &str, pool: Option<&str>, site: Option<&str>) {
        self.decide(id, JoinRequestState::Approved, |row| {
            row.tenant_id = Some(tenant.into());
            row.pool_id = pool.map(Into::into);
            row.site_id = site.map(Into::into);
        });
    }
    /// An operator denies join request `id`.
    pub fn deny(&self, id: &str) {
        self.decide(id, JoinRequestState::Denied, |_| {});
    }
    /// Join request `id` lapses.
    pub fn expire(&self, id: &str) {
        self.decide(id, JoinRequestState::Expired, |_| {});
    }
    fn decide(&self, id: &str, state: JoinRequestState, place: impl FnOnce(&mut JoinRequestRow)) {
        if let Some((row, _)) = self.tables.borrow_mut().join_requests.get_mut(id) {
            row.state = state;
            place(row);
        }
    }

    // What the attestor wrote.

    /// A token row as it stands.
    pub fn token(&self, id: &str) -> Option<Token> {
        self.tables.borrow().tokens.get(id).cloned()
    }
    /// How many uses of token `id` were spent (kept only by rounds that admitted, under
    /// [`Kit::round`](crate::Kit)).
    pub fn spent(&self, id: &str) -> u32 {
        self.tables.borrow().spent.get(id).copied().unwrap_or(0)
    }
    /// Whether `subject` is in the single-use ledger.
    pub fn used(&self, subject: &str) -> bool {
        self.tables.borrow().uses.contains_key(subject)
    }
    /// The single-use ledger: subject and expiry.
    pub fn uses(&self) -> Vec<(String, TimestampMs)> {
        let tables = self.tables.borrow();
        tables.uses.iter().map(|(s, e)| (s.clone(), *e)).collect()
    }
    /// Every join request opened, in id order.
    pub fn join_requests(&self) -> Vec<JoinRequestRow> {
        let tables = self.tables.borrow();
        tables
            .join_requests
            .values()
            .map(|(row, _)| row.clone())
            .collect()
    }
    /// The details join request `id` was opened with.
    pub fn join_request_details(&self, id: &str) -> Option<String> {
        let tables = self.tables.borrow();
        tables.join_requests.get(id).map(|(_, d)| d.clone())
    }
    /// A key/value entry.
    pub fn kv(&self, key: &str) -> Option<Vec<u8>> {
        self.tables.borrow().kv.get(key).cloned()
    }

    /// The key/value space, in key order.
    pub fn kv_entries(&self) -> Vec<(String, Vec<u8>)> {
        let tables = self.tables.borrow();
        tables
            .kv
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    // Rounds.

    /// The tables, to restore after a round.
    #[cfg(feature = "tpm")]
    pub(crate) fn snapshot(&self) -> Tables {
        let mut tables = self.tables.borrow_mut();
        tables.locked.clear();
        tables.clone()
    }
    /// Puts the tables back as they were (a refused round).
    #[cfg(feature = "tpm")]
    pub(crate) fn restore(&self, before: Tables) {
        *self.tables.borrow_mut() = before;
    }
    /// Keeps only the attestor's own rows written since `before`: join requests it opened
    /// and its key/value space (a deferred round).
    #[cfg(feature = "tpm")]
    pub(crate) fn restore_spends(&self, mut before: Tables) {
        let mut tables = self.tables.borrow_mut();
        for (id, row) in &tables.join_requests {
            if !before.join_requests.contains_key(id) {
                before.join_requests.insert(id.clone(), row.clone());
            }
        }
        before.next_join_request = tables.next_join_request;
        before.kv = std::mem::take(&mut tables.kv);
        *tables = before;
    }

    fn check(&self, op: Op) -> Result<(), TxError> {
        if self.failing.borrow().contains(&op) {
            Err(TxError::Storage)
        } else {
            Ok(())
        }
    }
}

fn invalid(message: &str) -> TxError {
    TxError::Invalid(message.into())
}

impl Tx for MemoryTx {
    fn now(&self) -> TimestampMs {
        self.clock.now()
    }
    fn lock_token(&self, id: &str) -> Result<Option<Token>, TxError> {
        self.check(Op::LockToken)?;
        let mut tables = self.tables.borrow_mut();
        let token = tables.tokens.get(id).cloned();
        if token.is_some() {
            tables.locked.insert(id.into());
        }
        Ok(token)
    }
    fn consume_token(&self, id: &str) -> Result<u32, TxError> {
        self.check(Op::ConsumeToken)?;
        let mut tables = self.tables.borrow_mut();
        if !tables.locked.contains(id) {
            return Err(invalid(
                "the token was not read with lock-token in this round",
            ));
        }
        let token = tables
            .tokens
            .get_mut(id)
            .ok_or_else(|| invalid("no such token"))?;
        token.uses_left = token
            .uses_left
            .checked_sub(1)
            .ok_or_else(|| invalid("the token has no use left"))?;
        let left = token.uses_left;
        *tables.spent.entry(id.into()).or_default() += 1;
        Ok(left)
    }
    fn node(&self, id: &str) -> Result<Option<Node>, TxError> {
        self.check(Op::Node)?;
        Ok(self.tables.borrow().nodes.get(id).cloned())
    }
    fn node_cert(&self, der: &[u8]) -> Result<Option<NodeCert>, TxError> {
        self.check(Op::NodeCert)?;
        let tables = self.tables.borrow();
        Ok(tables
            .certs
            .iter()
            .find(|(d, _)| d == der)
            .map(|(_, c)| c.clone()))
    }
    fn node_cert_for_key(
        &self,
        node_id: &str,
        spki_sha256: &[u8],
    ) -> Result<Option<NodeCert>, TxError> {
        self.check(Op::NodeCertForKey)?;
        let now = self.now();
        let tables = self.tables.borrow();
        Ok(tables
            .certs
            .iter()
            .map(|(_, c)| c)
            .filter(|c| {
                c.node_id == node_id
                    && c.revoked.is_none()
                    && now < c.not_after
                    && sha2::Sha256::digest(&c.spki).as_slice() == spki_sha256
            })
            .max_by_key(|c| c.not_before)
            .cloned())
    }
    fn bound_node(&self, kind: &str, value: &str) -> Result<Option<String>, TxError> {
        self.check(Op::BoundNode)?;
        let tables = self.tables.borrow();
        Ok(tables
            .bindings
            .get(&(kind.to_owned(), value.to_owned()))
            .cloned())
    }
    fn lease(&self, name: &str) -> Result<Option<Lease>, TxError> {
        self.check(Op::Lease)?;
        Ok(self.tables.borrow().leases.get(name).cloned())
    }
    fn newest_inventory(&self, node_id: &str) -> Result<Option<Inventory>, TxError> {
        self.check(Op::NewestInventory)?;
        let tables = self.tables.borrow();
        Ok(tables
            .inventories
            .iter()
            .filter(|i| i.node_id == node_id)
            .max_by_key(|i| i.recorded_at)
            .cloned())
    }
    fn inventory_by_mac(&self, mac: &str) -> Result<Option<Inventory>, TxError> {
        self.check(Op::InventoryByMac)?;
        let tables = self.tables.borrow();
        Ok(tables
            .inventories
            .iter()
            .filter(|i| i.macs.iter().any(|m| m == mac))
            .max_by_key(|i| i.recorded_at)
            .cloned())
    }
    fn token_workflow(&self, token_id: &str) -> Result<Option<Workflow>, TxError> {
        self.check(Op::TokenWorkflow)?;
        Ok(self.tables.borrow().workflows.get(token_id).cloned())
    }
    fn record_use(&self, subject: &str, expires_at: TimestampMs) -> Result<(), UseError> {
        if self.check(Op::RecordUse).is_err() {
            return Err(UseError::Storage);
        }
        let now = self.now();
        let mut tables = self.tables.borrow_mut();
        match tables.uses.get(subject) {
            Some(expiry) if *expiry > now => Err(UseError::Reused),
            _ => {
                tables.uses.insert(subject.into(), expires_at);
                Ok(())
            }
        }
    }
    fn open_join_request(&self, subject: &str, details: &str) -> Result<JoinRequestRow, TxError> {
        self.check(Op::OpenJoinRequest)?;
        if details.len() > MAX_VALUE {
            return Err(invalid("details are over 64 KiB"));
        }
        let csr_sha256 = self.csr_sha256.borrow().clone();
        let mut tables = self.tables.borrow_mut();
        let open = tables.join_requests.values().find(|(row, _)| {
            row.subject == subject
                && row.csr_sha256 == csr_sha256
                && matches!(
                    row.state,
                    JoinRequestState::Pending | JoinRequestState::Approved
                )
        });
        if let Some((row, _)) = open {
            return Ok(row.clone());
        }
        tables.next_join_request += 1;
        let row = JoinRequestRow {
            id: format!("jr_{}", tables.next_join_request),
            state: JoinRequestState::Pending,
            subject: subject.into(),
            csr_sha256,
            tenant_id: None,
            pool_id: None,
            site_id: None,
        };
        tables
            .join_requests
            .insert(row.id.clone(), (row.clone(), details.into()));
        Ok(row)
    }
    fn join_request(&self, id: &str) -> Result<Option<JoinRequestRow>, TxError> {
        self.check(Op::JoinRequest)?;
        let tables = self.tables.borrow();
        Ok(tables.join_requests.get(id).map(|(row, _)| row.clone()))
    }
    fn consume_join_request(&self, id: &str) -> Result<(), TxError> {
        self.check(Op::ConsumeJoinRequest)?;
        let mut tables = self.tables.borrow_mut();
        match tables.join_requests.get_mut(id) {
            Some((row, _)) if row.state == JoinRequestState::Approved => {
                row.state = JoinRequestState::Used;
                Ok(())
            }
            Some(_) => Err(invalid("the join request is not approved")),
            None => Err(invalid("no such join request")),
        }
    }
    fn kv_get(&self, key: &str) -> Result<Option<Vec<u8>>, TxError> {
        self.check(Op::KvGet)?;
        Ok(self.tables.borrow().kv.get(key).cloned())
    }
    fn kv_put(&self, key: &str, value: &[u8]) -> Result<(), TxError> {
        self.check(Op::KvPut)?;
        if value.len() > MAX_VALUE {
            return Err(invalid("the value is over 64 KiB"));
        }
        self.tables
            .borrow_mut()
            .kv
            .insert(key.into(), value.to_vec());
        Ok(())
    }
    fn kv_delete(&self, key: &str) -> Result<(), TxError> {
        self.check(Op::KvDelete)?;
        self.tables.borrow_mut().kv.remove(key);
        Ok(())
    }
}
