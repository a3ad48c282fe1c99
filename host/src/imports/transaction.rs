//! The host side of the WIT `transaction` interface: checks arguments, scopes per-attestor
//! data to the calling attestor, bounds what one call may copy and write, records
//! [`super::Effects`], and times every operation so the guest's deadline does not count the
//! database.

use std::time::Instant;

use wasmtime::component::Resource;

use super::{BackendError, CallState, ConsumeOutcome, TxBackend, UseOutcome};
use crate::runtime::bindings::transaction::{
    Host, HostTx, Inventory, JoinRequestRow, Lease, Node, NodeCert, Token, Tx, TxError, UseError,
    Workflow,
};

/// The representation of the one `tx` resource a call gets. Every method checks the guest
/// hands back this borrow, not a forged handle.
pub(crate) const TX_REP: u32 = 1;

/// Longest id, name, key or subject accepted from a guest.
const MAX_NAME: usize = 512;
/// Largest DER certificate looked up.
const MAX_DER: usize = 16 * 1024;
/// Largest key/value value and join request details.
const MAX_VALUE: usize = 64 * 1024;

/// Runs one backend operation: counts it (bounded), adds its duration to the call's host time,
/// and turns a storage failure into `tx-error.storage` while remembering it.
macro_rules! timed {
    ($state:ident, $tx:ident, |$session:ident| $op:expr, $on_err:expr) => {{
        check_rep(&$tx)?;
        let $session = $state.enter()?;
        let started = Instant::now();
        let result = $op.await;
        if let Err(e) = &result {
            tracing::warn!(attestor = %$session.attestor, error = %e, "attestor transaction call failed");
            $session.effects.storage_failures += 1;
        }
        $state.host_time += started.elapsed();
        result.map_err(|_: BackendError| $on_err)
    }};
}

fn check_rep(tx: &Resource<Tx>) -> wasmtime::Result<()> {
    if tx.rep() != TX_REP {
        wasmtime::bail!("attestor used a transaction handle it was not given");
    }
    Ok(())
}

/// The answer to a write past a per-call limit.
fn over_limit(limit: &str) -> TxError {
    TxError::Invalid(format!("write limit reached: {limit}"))
}

fn check_len(what: &str, len: usize, max: usize) -> Result<(), TxError> {
    if len > max {
        return Err(TxError::Invalid(format!("{what} longer than {max} bytes")));
    }
    Ok(())
}

impl<B: TxBackend> Host for CallState<B> {}

impl<B: TxBackend> HostTx for CallState<B> {
    async fn now(&mut self, tx: Resource<Tx>) -> wasmtime::Result<i64> {
        // `now` cannot report an error to the guest: a failure traps, and the host reports the
        // call as a storage failure (see `Effects::storage_failures`).
        let r: Result<i64, ()> = timed!(self, tx, |s| s.backend.now(), ());
        r.map_err(|()| wasmtime::format_err!("database clock unavailable"))
    }

    async fn lock_token(
        &mut self,
        tx: Resource<Tx>,
        id: String,
    ) -> wasmtime::Result<Result<Option<Token>, TxError>> {
        self.copied(id.len())?;
        if let Err(e) = check_len("token id", id.len(), MAX_NAME) {
            return Ok(Err(e));
        }
        let row = timed!(self, tx, |s| s.backend.lock_token(&id), TxError::Storage);
        if let (Ok(Some(token)), Some(session)) = (&row, self.session.as_mut()) {
            session.effects.locked_tokens.push(token.clone());
        }
        Ok(row)
    }

    async fn consume_token(
        &mut self,
        tx: Resource<Tx>,
        id: String,
    ) -> wasmtime::Result<Result<u32, TxError>> {
        self.copied(id.len())?;
        let locked = self
            .session
            .as_ref()
            .is_some_and(|s| s.effects.locked_tokens.iter().any(|t| t.id == id));
        if !locked {
            check_rep(&tx)?;
            return Ok(Err(TxError::Invalid(
                "the token is not locked in this transaction".into(),
            )));
        }
        if let Some(limit) = self.write(id.len(), false) {
            check_rep(&tx)?;
            return Ok(Err(over_limit(limit)));
        }
        let outcome = timed!(self, tx, |s| s.backend.consume_token(&id), TxError::Storage);
        Ok(match outcome {
            Ok(ConsumeOutcome::Consumed(left)) => {
                if let Some(session) = self.session.as_mut() {
                    session.effects.consumed_tokens.push(id);
                }
                Ok(left)
            }
            Ok(ConsumeOutcome::NoneLeft) => {
                Err(TxError::Invalid("the token has no use left".into()))
            }
            Err(e) => Err(e),
        })
    }

    async fn node(
        &mut self,
        tx: Resource<Tx>,
        id: String,
    ) -> wasmtime::Result<Result<Option<Node>, TxError>> {
        self.copied(id.len())?;
        if let Err(e) = check_len("node id", id.len(), MAX_NAME) {
            return Ok(Err(e));
        }
        Ok(timed!(self, tx, |s| s.backend.node(&id), TxError::Storage))
    }

    async fn node_cert(
        &mut self,
        tx: Resource<Tx>,
        der: Vec<u8>,
    ) -> wasmtime::Result<Result<Option<NodeCert>, TxError>> {
        self.copied(der.len())?;
        if let Err(e) = check_len("certificate", der.len(), MAX_DER) {
            return Ok(Err(e));
        }
        Ok(timed!(
            self,
            tx,
            |s| async {
                let Some(cert) = s.backend.node_cert(&der).await? else {
                    return Ok(None);
                };
                // Renewal refuses a certificate of a retired node CA (`retired-ca`); an
                // attestor that admits on a certificate (x509pop's re-join of an expired one)
                // must not find it either.
                let now = s.backend.now().await?;
                Ok(s.pki.check_issuer(&der, now).is_ok().then_some(cert))
            },
            TxError::Storage
        ))
    }

    async fn node_cert_for_key(
        &mut self,
        tx: Resource<Tx>,
        node_id: String,
        spki_sha256: Vec<u8>,
    ) -> wasmtime::Result<Result<Option<NodeCert>, TxError>> {
        self.copied(node_id.len() + spki_sha256.len())?;
        if let Err(e) = check_len("node id", node_id.len(), MAX_NAME) {
            return Ok(Err(e));
        }
        if spki_sha256.len() != 32 {
            check_rep(&tx)?;
            return Ok(Err(TxError::Invalid("spki-sha256 must be 32 bytes".into())));
        }
        Ok(timed!(
            self,
            tx,
            |s| s.backend.node_cert_for_key(&node_id, &spki_sha256),
            TxError::Storage
        ))
    }

    async fn inventory_by_mac(
        &mut self,
        tx: Resource<Tx>,
        mac: String,
    ) -> wasmtime::Result<Result<Option<Inventory>, TxError>> {
        self.copied(mac.len())?;
        if let Err(e) = check_len("mac", mac.len(), MAX_NAME) {
            return Ok(Err(e));
        }
        Ok(timed!(
            self,
            tx,
            |s| s.backend.inventory_by_mac(&mac),
            TxError::Storage
        ))
    }

    async fn bound_node(
        &mut self,
        tx: Resource<Tx>,
        kind: String,
        value: String,
    ) -> wasmtime::Result<Result<Option<String>, TxError>> {
        self.copied(kind.len() + value.len())?;
        if let Err(e) = check_len("binding", kind.len() + value.len(), MAX_NAME) {
            return Ok(Err(e));
        }
        Ok(timed!(
            self,
            tx,
            |s| s.backend.bound_node(&kind, &value),
            TxError::Storage
        ))
    }

    async fn lease(
        &mut self,
        tx: Resource<Tx>,
        name: String,
    ) -> wasmtime::Result<Result<Option<Lease>, TxError>> {
        self.copied(name.len())?;
        if let Err(e) = check_len("lease name", name.len(), MAX_NAME) {
            return Ok(Err(e));
        }
        Ok(timed!(
            self,
            tx,
            |s| s.backend.lease(&name),
            TxError::Storage
        ))
    }

    async fn newest_inventory(
        &mut self,
        tx: Resource<Tx>,
        node_id: String,
    ) -> wasmtime::Result<Result<Option<Inventory>, TxError>> {
        self.copied(node_id.len())?;
        if let Err(e) = check_len("node id", node_id.len(), MAX_NAME) {
            return Ok(Err(e));
        }
        Ok(timed!(
            self,
            tx,
            |s| s.backend.newest_inventory(&node_id),
            TxError::Storage
        ))
    }

    async fn token_workflow(
        &mut self,
        tx: Resource<Tx>,
        token_id: String,
    ) -> wasmtime::Result<Result<Option<Workflow>, TxError>> {
        self.copied(token_id.len())?;
        if let Err(e) = check_len("token id", token_id.len(), MAX_NAME) {
            return Ok(Err(e));
        }
        Ok(timed!(
            self,
            tx,
            |s| s.backend.token_workflow(&token_id),
            TxError::Storage
        ))
    }

    async fn record_use(
        &mut self,
        tx: Resource<Tx>,
        subject: String,
        expires_at: i64,
    ) -> wasmtime::Result<Result<(), UseError>> {
        self.copied(subject.len())?;
        if subject.is_empty() || subject.len() > MAX_NAME {
            // A subject the ledger cannot hold must not admit: report it as a storage failure.
            check_rep(&tx)?;
            return Ok(Err(UseError::Storage));
        }
        if self.write(subject.len(), true).is_some() {
            // `use-error` has no variant for it; the call cannot admit either way.
            check_rep(&tx)?;
            return Ok(Err(UseError::Storage));
        }
        let outcome = timed!(
            self,
            tx,
            |s| s.backend.record_use(&s.attestor, &subject, expires_at),
            UseError::Storage
        );
        Ok(match outcome {
            Ok(UseOutcome::Recorded) => {
                if let Some(session) = self.session.as_mut() {
                    session.effects.recorded_uses.push(subject);
                }
                Ok(())
            }
            Ok(UseOutcome::Reused) => Err(UseError::Reused),
            Err(e) => Err(e),
        })
    }

    async fn open_join_request(
        &mut self,
        tx: Resource<Tx>,
        subject: String,
        details: String,
    ) -> wasmtime::Result<Result<JoinRequestRow, TxError>> {
        self.copied(subject.len() + details.len())?;
        if let Err(e) = check_len("subject", subject.len(), MAX_NAME).and(check_len(
            "details",
            details.len(),
            MAX_VALUE,
        )) {
            return Ok(Err(e));
        }
        if serde_json::from_str::<serde_json::Value>(&details).is_err() {
            return Ok(Err(TxError::Invalid("details must be JSON".into())));
        }
        if let Some(limit) = self.write(subject.len() + details.len(), false) {
            check_rep(&tx)?;
            return Ok(Err(over_limit(limit)));
        }
        Ok(timed!(
            self,
            tx,
            |s| s
                .backend
                .open_join_request(&s.attestor, &subject, &s.csr_sha256, &details),
            TxError::Storage
        ))
    }

    async fn join_request(
        &mut self,
        tx: Resource<Tx>,
        id: String,
    ) -> wasmtime::Result<Result<Option<JoinRequestRow>, TxError>> {
        self.copied(id.len())?;
        if let Err(e) = check_len("join request id", id.len(), MAX_NAME) {
            return Ok(Err(e));
        }
        Ok(timed!(
            self,
            tx,
            |s| s.backend.join_request(&s.attestor, &id),
            TxError::Storage
        ))
    }

    async fn consume_join_request(
        &mut self,
        tx: Resource<Tx>,
        id: String,
    ) -> wasmtime::Result<Result<(), TxError>> {
        self.copied(id.len())?;
        if let Err(e) = check_len("join request id", id.len(), MAX_NAME) {
            return Ok(Err(e));
        }
        if let Some(limit) = self.write(id.len(), false) {
            check_rep(&tx)?;
            return Ok(Err(over_limit(limit)));
        }
        let consumed = timed!(
            self,
            tx,
            |s| s.backend.consume_join_request(&s.attestor, &id),
            TxError::Storage
        );
        Ok(match consumed {
            Ok(true) => {
                if let Some(session) = self.session.as_mut() {
                    session.effects.consumed_join_requests.push(id);
                }
                Ok(())
            }
            Ok(false) => Err(TxError::Invalid(
                "the join request is not approved and unused".into(),
            )),
            Err(e) => Err(e),
        })
    }

    async fn kv_get(
        &mut self,
        tx: Resource<Tx>,
        key: String,
    ) -> wasmtime::Result<Result<Option<Vec<u8>>, TxError>> {
        self.copied(key.len())?;
        if let Err(e) = check_len("key", key.len(), MAX_NAME) {
            return Ok(Err(e));
        }
        let value = timed!(
            self,
            tx,
            |s| s.backend.kv_get(&s.attestor, &key),
            TxError::Storage
        );
        if let Ok(Some(v)) = &value {
            self.copied(v.len())?;
        }
        Ok(value)
    }

    async fn kv_put(
        &mut self,
        tx: Resource<Tx>,
        key: String,
        value: Vec<u8>,
    ) -> wasmtime::Result<Result<(), TxError>> {
        self.copied(key.len() + value.len())?;
        if let Err(e) =
            check_len("key", key.len(), MAX_NAME).and(check_len("value", value.len(), MAX_VALUE))
        {
            return Ok(Err(e));
        }
        if let Some(limit) = self.write(key.len() + value.len(), false) {
            check_rep(&tx)?;
            return Ok(Err(over_limit(limit)));
        }
        Ok(timed!(
            self,
            tx,
            |s| s.backend.kv_put(&s.attestor, &key, &value),
            TxError::Storage
        ))
    }

    async fn kv_delete(
        &mut self,
        tx: Resource<Tx>,
        key: String,
    ) -> wasmtime::Result<Result<(), TxError>> {
        self.copied(key.len())?;
        if let Err(e) = check_len("key", key.len(), MAX_NAME) {
            return Ok(Err(e));
        }
        if let Some(limit) = self.write(key.len(), false) {
            check_rep(&tx)?;
            return Ok(Err(over_limit(limit)));
        }
        Ok(timed!(
            self,
            tx,
            |s| s.backend.kv_delete(&s.attestor, &key),
            TxError::Storage
        ))
    }

    async fn drop(&mut self, tx: Resource<Tx>) -> wasmtime::Result<()> {
        // The transaction belongs to JoinService; a guest dropping its borrow ends nothing.
        check_rep(&tx)
    }
}
