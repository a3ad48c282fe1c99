//! The join path's backend: the guest runs on committed reads, and its writes wait for the
//! short locked phase after the call.
//!
//! While an attestor runs, [`Staged`] holds no transaction and no connection: every read import
//! takes a connection of the read pool for one autocommit statement ([`Db::read`]) and records
//! what it asked and what the guest saw ([`Read`]); every write import is checked, answered as
//! the database would answer it (uses left from the row read, a new join request's id chosen
//! here, `reused` for a subject the ledger holds) and buffered ([`Write`]). A guest that loops,
//! allocates or sleeps therefore delays only the joins through itself: it never holds SQLite's
//! write lock or a Postgres row lock.
//!
//! After the call, JoinService opens the write transaction and [`Staged::settle`]s: it locks
//! the rows read (Postgres), reads each again and compares it with what the guest saw, then
//! applies the buffered writes. A difference is a [`Settle::Conflict`]: something the decision
//! depended on changed mid-join, and JoinService runs the round again.

use std::collections::{BTreeMap, BTreeSet};

use super::store_tx::JOIN_REQUEST_TTL_MS;
use super::{BackendError, ConsumeOutcome, Effects, TxBackend, UseOutcome};
use crate::runtime::bindings::transaction::{
    Inventory, JoinRequestRow, JoinRequestState, Lease, Node, NodeCert, Token, Workflow,
};
use crate::store::{
    Admission, Db, JudgedToken, NewAudit, NewEvent, NewNode, NewNodeCert, RowLock, StoreError,
    TokenRow, Tx,
};

/// A read the guest made, with what it saw.
#[derive(Debug, Clone)]
enum Read {
    Token(String, Option<Token>),
    Node(String, Option<Node>),
    NodeCert(Vec<u8>, Option<NodeCert>),
    NodeCertForKey(String, Vec<u8>, Option<NodeCert>),
    InventoryByMac(String, Option<Inventory>),
    BoundNode(String, String, Option<String>),
    Lease(String, Option<Lease>),
    NewestInventory(String, Option<Inventory>),
    TokenWorkflow(String, Option<Workflow>),
    JoinRequest(String, Option<JoinRequestRow>),
    Kv(String, Option<Vec<u8>>),
}

/// A write the guest made, applied in the locked phase.
#[derive(Debug, Clone)]
enum Write {
    /// Spend a use (a spend).
    ConsumeToken(String),
    /// Record single-use evidence (a spend).
    RecordUse { subject: String, expires_at: i64 },
    /// Mark an approved join request used (a spend).
    ConsumeJoinRequest(String),
    /// Open (or find) a join request; `seen` is what the guest was answered.
    OpenJoinRequest {
        subject: String,
        details: String,
        seen: JoinRequestRow,
    },
    /// Write a key of the attestor's space.
    KvPut(String, Vec<u8>),
    /// Delete a key of the attestor's space.
    KvDelete(String),
}

impl Write {
    /// Whether applying it spends something only an admission may spend (rule: a deferral
    /// spends nothing).
    fn spends(&self) -> bool {
        matches!(
            self,
            Write::ConsumeToken(_) | Write::RecordUse { .. } | Write::ConsumeJoinRequest(_)
        )
    }
}

/// Which of the buffered writes a round applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Apply {
    /// An admission: every write.
    Everything,
    /// A deferral: only the attestor's own rows (join requests it opens, its key/value
    /// space). Token uses, ledger records and consumed join requests are never applied.
    OwnRows,
}

/// Why the locked phase could not take the guest's view as it was.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Settle {
    /// A row the guest read changed, or a write it was promised no longer holds (the ledger
    /// holds its subject now, its join request moved): run the round again.
    #[error("{0} changed while the attestor ran")]
    Conflict(&'static str),
    /// The host's conditional spend found the token without a use left.
    #[error("token {0} has no use left")]
    NoUsesLeft(String),
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A replayed read failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// Reads committed state, buffers writes (see the module documentation).
pub struct Staged {
    db: Db,
    attestor: String,
    reads: Vec<Read>,
    writes: Vec<Write>,
    /// The key/value space as the guest sees it: buffered writes over what was read.
    kv: BTreeMap<String, Option<Vec<u8>>>,
    /// Uses left of each token read, less the uses the guest spent.
    uses_left: BTreeMap<String, u32>,
    /// Subjects recorded in this call.
    recorded: BTreeSet<String>,
    /// Join requests consumed in this call.
    consumed: BTreeSet<String>,
}

impl Staged {
    /// A backend for one call of `attestor` reading through `db`'s read pool.
    pub fn new(db: Db, attestor: impl Into<String>) -> Self {
        Self {
            db,
            attestor: attestor.into(),
            reads: Vec::new(),
            writes: Vec::new(),
            kv: BTreeMap::new(),
            uses_left: BTreeMap::new(),
            recorded: BTreeSet::new(),
            consumed: BTreeSet::new(),
        }
    }

    async fn reader(&self) -> Result<Tx, BackendError> {
        self.db.read().await.map_err(fail)
    }

    /// The rows the decision read, to lock before they are read again. Not its tokens: a
    /// token is locked by its spend, last ([`Spends::commit`]).
    fn locks(&self) -> Vec<RowLock> {
        let attestor = &self.attestor;
        let mut locks: Vec<RowLock> = self
            .reads
            .iter()
            .filter_map(|r| {
                Some(match r {
                    Read::Token(..) => return None,
                    Read::Node(id, _) => RowLock::Node(id.clone()),
                    Read::NodeCert(der, _) => RowLock::NodeCert(der.clone()),
                    Read::NodeCertForKey(node, _, _) => RowLock::NodeCerts(node.clone()),
                    // Inventories are appended, never changed: nothing to lock.
                    Read::InventoryByMac(..) | Read::NewestInventory(..) => return None,
                    Read::BoundNode(kind, value, _) => RowLock::Binding {
                        kind: kind.clone(),
                        value: value.clone(),
                    },
                    Read::Lease(name, _) => RowLock::Lease(name.clone()),
                    Read::TokenWorkflow(token, _) => RowLock::Workflow(token.clone()),
                    Read::JoinRequest(id, _) => RowLock::JoinRequest {
                        attestor: attestor.clone(),
                        id: id.clone(),
                    },
                    Read::Kv(key, _) => RowLock::Kv {
                        attestor: attestor.clone(),
                        key: key.clone(),
                    },
                })
            })
            .collect();
        // Also what the writes touch, so a consumed join request or a key written is locked
        // before anything is applied (and in the one order).
        for w in &self.writes {
            match w {
                Write::ConsumeJoinRequest(id) => locks.push(RowLock::JoinRequest {
                    attestor: attestor.clone(),
                    id: id.clone(),
                }),
                Write::KvPut(key, _) | Write::KvDelete(key) => locks.push(RowLock::Kv {
                    attestor: attestor.clone(),
                    key: key.clone(),
                }),
                Write::ConsumeToken(_)
                | Write::RecordUse { .. }
                | Write::OpenJoinRequest { .. } => {}
            }
        }
        locks
    }

    /// The locked phase, inside JoinService's write transaction `tx`: locks the rows read
    /// (Postgres), reads each again and compares it with what the guest saw, then applies the
    /// buffered writes that `apply` allows, but for token spends: those are returned, for
    /// JoinService to apply last ([`Spends::commit`]). `effects.locked_tokens` is refreshed with
    /// the token rows the host's own token checks judge: a token this round spends is judged
    /// as the guest saw it, and its spend, under the row's lock, proves the row unchanged but
    /// for its uses left (a conflict otherwise) before anything commits, so it is not read
    /// again here (a round trip fewer in every token join); any other token is read again now.
    ///
    /// Tokens are read here, not locked: a token's spend locks its row, last in the locked
    /// phase, so the joins on one many-use token hold it only from their spend to their
    /// commit, not for a whole locked phase each. The other rows are locked first, in the one
    /// global order, so tokens come last in every join's order.
    ///
    /// A token's uses left moving is not a conflict: tokens are the host's to judge, and its
    /// spend is a conditional update ([`Settle::NoUsesLeft`]).
    pub async fn settle(
        &self,
        tx: &mut Tx,
        effects: &mut Effects,
        apply: Apply,
    ) -> Result<Spends, Settle> {
        effects.locked_tokens.clear();
        tx.lock_rows(&self.locks()).await?;
        for read in &self.reads {
            if let Read::Token(id, Some(seen)) = read
                && apply == Apply::Everything
                && self
                    .writes
                    .iter()
                    .any(|w| matches!(w, Write::ConsumeToken(spent) if spent == id))
            {
                if !effects.locked_tokens.iter().any(|t| t.id == seen.id) {
                    effects.locked_tokens.push(seen.clone());
                }
                continue;
            }
            if !self.replay(tx, read, effects).await? {
                return Err(Settle::Conflict(read.what()));
            }
        }
        let mut spends = Spends(Vec::new());
        for write in &self.writes {
            if apply == Apply::OwnRows && write.spends() {
                continue;
            }
            self.apply(tx, write, effects, &mut spends).await?;
        }
        Ok(spends)
    }

    /// Reads `read` again in `tx`; whether the guest saw the same.
    async fn replay(
        &self,
        tx: &mut Tx,
        read: &Read,
        effects: &mut Effects,
    ) -> Result<bool, Settle> {
        let a = self.attestor.as_str();
        Ok(match read {
            Read::Token(id, seen) => {
                let now = tx.read_token(id).await?.map(super::store_tx::token);
                let same = match (&now, seen) {
                    (Some(now), Some(seen)) => {
                        Token {
                            uses_left: seen.uses_left,
                            ..now.clone()
                        } == *seen
                    }
                    (None, None) => true,
                    _ => false,
                };
                if let Some(row) = now
                    && !effects.locked_tokens.iter().any(|t| t.id == row.id)
                {
                    effects.locked_tokens.push(row);
                }
                same
            }
            Read::Node(id, seen) => TxBackend::node(tx, id).await? == *seen,
            Read::NodeCert(der, seen) => TxBackend::node_cert(tx, der).await? == *seen,
            Read::NodeCertForKey(node, spki, seen) => {
                TxBackend::node_cert_for_key(tx, node, spki).await? == *seen
            }
            Read::InventoryByMac(mac, seen) => TxBackend::inventory_by_mac(tx, mac).await? == *seen,
            Read::BoundNode(kind, value, seen) => {
                TxBackend::bound_node(tx, kind, value).await? == *seen
            }
            Read::Lease(name, seen) => TxBackend::lease(tx, name).await? == *seen,
            Read::NewestInventory(node, seen) => {
                TxBackend::newest_inventory(tx, node).await? == *seen
            }
            Read::TokenWorkflow(token, seen) => {
                TxBackend::token_workflow(tx, token).await? == *seen
            }
            Read::JoinRequest(id, seen) => TxBackend::join_request(tx, a, id).await? == *seen,
            Read::Kv(key, seen) => TxBackend::kv_get(tx, a, key).await? == *seen,
        })
    }

    /// Applies `write` in `tx`, but for a token spend, which joins `spends` with the row
    /// judged (see [`Spends::commit`]).
    async fn apply(
        &self,
        tx: &mut Tx,
        write: &Write,
        effects: &Effects,
        spends: &mut Spends,
    ) -> Result<(), Settle> {
        let a = self.attestor.as_str();
        match write {
            Write::ConsumeToken(id) => {
                // Judged against the row read again above; a token never read is never spent
                // (the guest's spend needs its read first).
                let judged = effects.locked_tokens.iter().find(|t| t.id == *id);
                spends
                    .0
                    .push(judged.ok_or(Settle::Conflict("a token"))?.clone());
                Ok(())
            }
            Write::RecordUse {
                subject,
                expires_at,
            } => {
                let now = tx.now().await?;
                match tx.record_use(a, subject, *expires_at, now).await? {
                    crate::store::UseOutcome::Recorded => Ok(()),
                    crate::store::UseOutcome::Reused => Err(Settle::Conflict("the ledger")),
                }
            }
            Write::ConsumeJoinRequest(id) => {
                if tx.consume_join_request(a, id).await? {
                    Ok(())
                } else {
                    Err(Settle::Conflict("a join request"))
                }
            }
            Write::OpenJoinRequest {
                subject,
                details,
                seen,
            } => {
                let csr = csr_hash(&seen.csr_sha256)?;
                let now = tx.now().await?;
                let row = tx
                    .open_join_request_as(
                        &seen.id,
                        a,
                        subject,
                        &csr,
                        details,
                        now,
                        now + JOIN_REQUEST_TTL_MS,
                    )
                    .await?;
                if super::store_tx::join_request(row) == *seen {
                    Ok(())
                } else {
                    Err(Settle::Conflict("a join request"))
                }
            }
            Write::KvPut(key, value) => Ok(tx.kv_put(a, key, value).await?),
            Write::KvDelete(key) => Ok(tx.kv_delete(a, key).await?),
        }
    }
}

/// The token spends of a settled round, each with the row its policy judged: applied last in
/// the locked phase, with the round's record, just before its commit ([`Spends::commit`]).
#[derive(Debug)]
pub struct Spends(Vec<Token>);

impl Spends {
    /// Spends a use of each token, records the round and commits: the last spend carries the
    /// audit row and event in its own statement ([`Tx::spend_token_recording`]), so on
    /// Postgres the joins on one many-use token hold its row lock for that statement and the
    /// commit alone; with no token to spend the record goes with the commit
    /// ([`Tx::commit_with_audit_and_event`]: on SQLite, one query).
    ///
    /// Each conditional update takes the token's row lock (on Postgres, waiting for another
    /// join's spend to commit) and returns the row as spent, which must be the row judged but
    /// for its uses left: a token revoked or replaced since is a conflict, and the round runs
    /// again on what is committed. On any error `tx` is dropped uncommitted (rolled back):
    /// nothing of the round is spent or recorded.
    ///
    /// `new_node`, a node new in this round and its first certificate not yet written, goes
    /// in first. A round that spends one token, with nothing of its transaction sent yet,
    /// writes all of it in one query ([`Tx::admit_in_one_statement`]: on Postgres one
    /// statement committed on its own, on SQLite a batch member's savepoint to its release):
    /// the spend itself checks the row as judged.
    pub async fn commit(
        self,
        mut tx: Tx,
        new_node: Option<(&NewNode, &NewNodeCert)>,
        audit: &NewAudit,
        event: &NewEvent,
    ) -> Result<(), Settle> {
        if let ([only], Some((node, cert))) = (&self.0[..], new_node)
            && tx.admits_in_one_statement()
        {
            return match tx
                .admit_in_one_statement(&judged_token(only), node, cert, audit, event)
                .await?
            {
                Admission::Committed => Ok(()),
                Admission::NoUsesLeft => Err(Settle::NoUsesLeft(only.id.clone())),
                Admission::Changed => Err(Settle::Conflict("a token")),
            };
        }
        if let Some((node, cert)) = new_node {
            tx.insert_node_with_cert(node, cert).await?;
        }
        let Some((last, rest)) = self.0.split_last() else {
            return Ok(tx.commit_with_audit_and_event(audit, event).await?);
        };
        for judged in rest {
            judge(judged, tx.spend_token(&judged.id).await)?;
        }
        judge(last, tx.spend_token_recording(&last.id, audit, event).await)?;
        Ok(tx.commit().await?)
    }
}

/// A token as judged, as the store compares it in SQL ([`Tx::admit_in_one_statement`]): the
/// columns [`judge`] compares.
fn judged_token(t: &Token) -> JudgedToken<'_> {
    JudgedToken {
        id: &t.id,
        role: super::store_tx::store_token_role(t.role),
        secret_sha256: &t.secret_sha256,
        tenant_id: &t.tenant_id,
        pool_id: t.pool_id.as_deref(),
        site_id: t.site_id.as_deref(),
        expires_at: t.expires_at,
        revoked: t.revoked,
        expect_product_uuid: t.expect.product_uuid.as_deref(),
        expect_mac: t.expect.mac.as_deref(),
        expect_node_id: t.expect.node_id.as_deref(),
        reclaim: t.reclaim,
    }
}

/// Whether a spend's row, `spent`, is the row `judged` but for its uses left.
fn judge(judged: &Token, spent: Result<TokenRow, StoreError>) -> Result<(), Settle> {
    let spent = match spent {
        Ok(row) => super::store_tx::token(row),
        Err(StoreError::NoUsesLeft) => return Err(Settle::NoUsesLeft(judged.id.clone())),
        Err(e) => return Err(e.into()),
    };
    let unchanged = Token {
        uses_left: judged.uses_left,
        ..spent
    } == *judged;
    if unchanged {
        Ok(())
    } else {
        Err(Settle::Conflict("a token"))
    }
}

impl Read {
    /// What changed, for the log and the refusal's detail.
    fn what(&self) -> &'static str {
        match self {
            Read::Token(..) => "a token",
            Read::Node(..) => "a node",
            Read::NodeCert(..) | Read::NodeCertForKey(..) => "a certificate",
            Read::InventoryByMac(..) | Read::NewestInventory(..) => "an inventory",
            Read::BoundNode(..) => "a binding",
            Read::Lease(..) => "a lease",
            Read::TokenWorkflow(..) => "a workflow",
            Read::JoinRequest(..) => "a join request",
            Read::Kv(..) => "a key/value entry",
        }
    }
}

fn fail(e: StoreError) -> BackendError {
    BackendError(e.to_string())
}

fn csr_hash(csr_sha256: &[u8]) -> Result<[u8; 32], BackendError> {
    csr_sha256
        .try_into()
        .map_err(|_| BackendError("CSR hash is not 32 bytes".into()))
}

impl TxBackend for Staged {
    async fn now(&mut self) -> Result<i64, BackendError> {
        // Without a read connection where the database's clock is at hand: always on SQLite,
        // on Postgres within a second of a reading.
        if let Some(now) = self.db.clock_here() {
            return Ok(now);
        }
        let mut r = self.reader().await?;
        TxBackend::now(&mut r).await
    }

    async fn lock_token(&mut self, id: &str) -> Result<Option<Token>, BackendError> {
        let mut r = self.reader().await?;
        // Read as committed, never waiting for another join's locked phase to release the row
        // (on Postgres that wait put every join on one many-use token in single file twice:
        // here and in its own locked phase). Uses only go down, so a read taken while another
        // join spends shows at most a use too many; the locked phase decides: its re-read
        // under lock catches any other change (a revocation reruns the round) and its spend is
        // conditional (`no-uses-left`).
        let seen = r
            .read_token(id)
            .await
            .map_err(fail)?
            .map(super::store_tx::token);
        drop(r);
        self.reads.push(Read::Token(id.to_owned(), seen.clone()));
        Ok(seen.map(|mut t| {
            let spent = self
                .writes
                .iter()
                .filter(|w| matches!(w, Write::ConsumeToken(c) if *c == t.id))
                .count();
            t.uses_left = t
                .uses_left
                .saturating_sub(u32::try_from(spent).unwrap_or(u32::MAX));
            self.uses_left.insert(t.id.clone(), t.uses_left);
            t
        }))
    }

    async fn consume_token(&mut self, id: &str) -> Result<ConsumeOutcome, BackendError> {
        match self.uses_left.get_mut(id) {
            Some(left) if *left > 0 => {
                *left -= 1;
                let left = *left;
                self.writes.push(Write::ConsumeToken(id.to_owned()));
                Ok(ConsumeOutcome::Consumed(left))
            }
            _ => Ok(ConsumeOutcome::NoneLeft),
        }
    }

    async fn node(&mut self, id: &str) -> Result<Option<Node>, BackendError> {
        let mut r = self.reader().await?;
        let seen = TxBackend::node(&mut r, id).await?;
        self.reads.push(Read::Node(id.to_owned(), seen.clone()));
        Ok(seen)
    }

    async fn node_cert(&mut self, der: &[u8]) -> Result<Option<NodeCert>, BackendError> {
        let mut r = self.reader().await?;
        let seen = TxBackend::node_cert(&mut r, der).await?;
        self.reads.push(Read::NodeCert(der.to_vec(), seen.clone()));
        Ok(seen)
    }

    async fn node_cert_for_key(
        &mut self,
        node_id: &str,
        spki_sha256: &[u8],
    ) -> Result<Option<NodeCert>, BackendError> {
        let mut r = self.reader().await?;
        let seen = TxBackend::node_cert_for_key(&mut r, node_id, spki_sha256).await?;
        self.reads.push(Read::NodeCertForKey(
            node_id.to_owned(),
            spki_sha256.to_vec(),
            seen.clone(),
        ));
        Ok(seen)
    }

    async fn inventory_by_mac(&mut self, mac: &str) -> Result<Option<Inventory>, BackendError> {
        let mut r = self.reader().await?;
        let seen = TxBackend::inventory_by_mac(&mut r, mac).await?;
        self.reads
            .push(Read::InventoryByMac(mac.to_owned(), seen.clone()));
        Ok(seen)
    }

    async fn bound_node(
        &mut self,
        kind: &str,
        value: &str,
    ) -> Result<Option<String>, BackendError> {
        let mut r = self.reader().await?;
        let seen = TxBackend::bound_node(&mut r, kind, value).await?;
        self.reads.push(Read::BoundNode(
            kind.to_owned(),
            value.to_owned(),
            seen.clone(),
        ));
        Ok(seen)
    }

    async fn lease(&mut self, name: &str) -> Result<Option<Lease>, BackendError> {
        let mut r = self.reader().await?;
        let seen = TxBackend::lease(&mut r, name).await?;
        self.reads.push(Read::Lease(name.to_owned(), seen.clone()));
        Ok(seen)
    }

    async fn newest_inventory(&mut self, node_id: &str) -> Result<Option<Inventory>, BackendError> {
        let mut r = self.reader().await?;
        let seen = TxBackend::newest_inventory(&mut r, node_id).await?;
        self.reads
            .push(Read::NewestInventory(node_id.to_owned(), seen.clone()));
        Ok(seen)
    }

    async fn token_workflow(&mut self, token_id: &str) -> Result<Option<Workflow>, BackendError> {
        let mut r = self.reader().await?;
        let seen = TxBackend::token_workflow(&mut r, token_id).await?;
        self.reads
            .push(Read::TokenWorkflow(token_id.to_owned(), seen.clone()));
        Ok(seen)
    }

    async fn record_use(
        &mut self,
        attestor: &str,
        subject: &str,
        expires_at: i64,
    ) -> Result<UseOutcome, BackendError> {
        if self.recorded.contains(subject) {
            return Ok(UseOutcome::Reused);
        }
        let mut r = self.reader().await?;
        let now = TxBackend::now(&mut r).await?;
        // The lookup is not replayed: the insert in the locked phase is the judge, and a
        // subject recorded meanwhile is a conflict there.
        if r.use_live(attestor, subject, now).await.map_err(fail)? {
            return Ok(UseOutcome::Reused);
        }
        self.recorded.insert(subject.to_owned());
        self.writes.push(Write::RecordUse {
            subject: subject.to_owned(),
            expires_at,
        });
        Ok(UseOutcome::Recorded)
    }

    async fn open_join_request(
        &mut self,
        attestor: &str,
        subject: &str,
        csr_sha256: &[u8],
        details: &str,
    ) -> Result<JoinRequestRow, BackendError> {
        // Opened in this call already: the same request.
        let opened = self.writes.iter().find_map(|w| match w {
            Write::OpenJoinRequest {
                subject: s, seen, ..
            } if s == subject => Some(seen.clone()),
            _ => None,
        });
        if let Some(seen) = opened {
            return Ok(seen);
        }
        let csr = csr_hash(csr_sha256)?;
        let mut r = self.reader().await?;
        let now = TxBackend::now(&mut r).await?;
        let open = r
            .open_join_request_for(attestor, subject, &csr, now)
            .await
            .map_err(fail)?;
        drop(r);
        let seen = match open {
            Some(row) => super::store_tx::join_request(row),
            None => JoinRequestRow {
                id: crate::store::new_join_request_id(),
                state: JoinRequestState::Pending,
                subject: subject.to_owned(),
                csr_sha256: csr.to_vec(),
                tenant_id: None,
                pool_id: None,
                site_id: None,
            },
        };
        self.writes.push(Write::OpenJoinRequest {
            subject: subject.to_owned(),
            details: details.to_owned(),
            seen: seen.clone(),
        });
        Ok(seen)
    }

    async fn join_request(
        &mut self,
        attestor: &str,
        id: &str,
    ) -> Result<Option<JoinRequestRow>, BackendError> {
        let opened = self.writes.iter().find_map(|w| match w {
            Write::OpenJoinRequest { seen, .. } if seen.id == id => Some(seen.clone()),
            _ => None,
        });
        if opened.is_some() {
            return Ok(opened);
        }
        let mut r = self.reader().await?;
        let seen = TxBackend::join_request(&mut r, attestor, id).await?;
        self.reads
            .push(Read::JoinRequest(id.to_owned(), seen.clone()));
        Ok(seen)
    }

    async fn consume_join_request(
        &mut self,
        attestor: &str,
        id: &str,
    ) -> Result<bool, BackendError> {
        if self.consumed.contains(id) {
            return Ok(false);
        }
        let row = TxBackend::join_request(self, attestor, id).await?;
        if !row.is_some_and(|r| r.state == JoinRequestState::Approved) {
            return Ok(false);
        }
        self.consumed.insert(id.to_owned());
        self.writes.push(Write::ConsumeJoinRequest(id.to_owned()));
        Ok(true)
    }

    async fn kv_get(&mut self, attestor: &str, key: &str) -> Result<Option<Vec<u8>>, BackendError> {
        if let Some(value) = self.kv.get(key) {
            return Ok(value.clone());
        }
        let mut r = self.reader().await?;
        let seen = TxBackend::kv_get(&mut r, attestor, key).await?;
        self.reads.push(Read::Kv(key.to_owned(), seen.clone()));
        Ok(seen)
    }

    async fn kv_put(
        &mut self,
        _attestor: &str,
        key: &str,
        value: &[u8],
    ) -> Result<(), BackendError> {
        self.kv.insert(key.to_owned(), Some(value.to_vec()));
        self.writes
            .push(Write::KvPut(key.to_owned(), value.to_vec()));
        Ok(())
    }

    async fn kv_delete(&mut self, _attestor: &str, key: &str) -> Result<(), BackendError> {
        self.kv.insert(key.to_owned(), None);
        self.writes.push(Write::KvDelete(key.to_owned()));
        Ok(())
    }
}
