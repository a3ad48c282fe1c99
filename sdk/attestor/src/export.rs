//! The glue [`export_attestor!`](crate::export_attestor) expands to: the WIT `verifier`
//! implementation for any [`Attestor`], and the [`Tx`]/[`Crypto`] implementations that call
//! the host's imports.

use alloc::string::String;
use alloc::vec::Vec;
use core::marker::PhantomData;

use crate::calls::Declared;
use crate::wit::better_compute::attestor::{crypto, prepared, tpm, transaction};
use crate::wit::exports::better_compute::attestor::verifier::Guest;
use crate::{
    Attestor, Context, Crypto, CryptoError, Info, Inventory, JoinRequest, JoinRequestRow, Lease,
    NoTpm, Node, NodeCert, Outcome, SignatureScheme, TimestampMs, Token, Tpm, TpmCredential,
    TpmError, TpmPcrValue, TpmPublicInfo, Tx, TxError, UseError, VerifiedChain, Workflow, reason,
    refuse,
};

/// The exported `verifier` for attestor `T`.
pub struct Export<T>(PhantomData<T>);

impl<T: Attestor> Guest for Export<T> {
    fn describe() -> Info {
        T::info()
    }

    fn configure(config: String) -> Result<(), String> {
        let attestor = T::configure(&config)?;
        // `T::PREPARED` is a constant, as `T::TPM` below: a component that leaves it false
        // never references the `prepared` imports and does not import the interface.
        if T::PREPARED {
            prepared::keep(&attestor.prepare())?;
        }
        Ok(())
    }

    fn verify(tx: &transaction::Tx, config: String, request: JoinRequest) -> Outcome {
        let kept = if T::PREPARED {
            prepared::kept().and_then(|bytes| T::from_prepared(&bytes))
        } else {
            None
        };
        // The host passes the text `configure` accepted at load, so configuring fails only if
        // the attestor's `configure` is not deterministic; refusing is the safe answer.
        let attestor = match kept.map_or_else(|| T::configure(&config), Ok) {
            Ok(attestor) => attestor,
            Err(_) => return refuse(reason::BAD_CONFIG).into(),
        };
        // `T::TPM` is a constant, so the optimiser removes the branch not taken: a component
        // whose attestor leaves it false never references `HostTpm` and so does not import the
        // `tpm` interface (tests/artifacts checks which components do).
        let tpm: &dyn Tpm = if T::TPM { &HostTpm } else { &NoTpm };
        // `Declared` keeps the host functions `T::CALLS` leaves out unreferenced, so the
        // component does not import them (see `crate::calls`).
        let host_tx = HostTx(tx);
        let cx = Context {
            tx: &Declared::<T, _>::new(&host_tx),
            crypto: &Declared::<T, _>::new(&HostCrypto),
            tpm,
        };
        attestor.verify(&cx, &request)
    }
}

/// [`Tx`] over the borrowed `transaction.tx` resource the host passed to `verify`.
struct HostTx<'a>(&'a transaction::Tx);

impl Tx for HostTx<'_> {
    fn now(&self) -> TimestampMs {
        self.0.now()
    }
    fn lock_token(&self, id: &str) -> Result<Option<Token>, TxError> {
        self.0.lock_token(id)
    }
    fn consume_token(&self, id: &str) -> Result<u32, TxError> {
        self.0.consume_token(id)
    }
    fn node(&self, id: &str) -> Result<Option<Node>, TxError> {
        self.0.node(id)
    }
    fn node_cert(&self, der: &[u8]) -> Result<Option<NodeCert>, TxError> {
        self.0.node_cert(der)
    }
    fn bound_node(&self, kind: &str, value: &str) -> Result<Option<String>, TxError> {
        self.0.bound_node(kind, value)
    }
    fn lease(&self, name: &str) -> Result<Option<Lease>, TxError> {
        self.0.lease(name)
    }
    fn newest_inventory(&self, node_id: &str) -> Result<Option<Inventory>, TxError> {
        self.0.newest_inventory(node_id)
    }
    fn token_workflow(&self, token_id: &str) -> Result<Option<Workflow>, TxError> {
        self.0.token_workflow(token_id)
    }
    fn record_use(&self, subject: &str, expires_at: TimestampMs) -> Result<(), UseError> {
        self.0.record_use(subject, expires_at)
    }
    fn open_join_request(&self, subject: &str, details: &str) -> Result<JoinRequestRow, TxError> {
        self.0.open_join_request(subject, details)
    }
    fn join_request(&self, id: &str) -> Result<Option<JoinRequestRow>, TxError> {
        self.0.join_request(id)
    }
    fn consume_join_request(&self, id: &str) -> Result<(), TxError> {
        self.0.consume_join_request(id)
    }
    fn kv_get(&self, key: &str) -> Result<Option<Vec<u8>>, TxError> {
        self.0.kv_get(key)
    }
    fn kv_put(&self, key: &str, value: &[u8]) -> Result<(), TxError> {
        self.0.kv_put(key, value)
    }
    fn kv_delete(&self, key: &str) -> Result<(), TxError> {
        self.0.kv_delete(key)
    }
    fn node_cert_for_key(
        &self,
        node_id: &str,
        spki_sha256: &[u8],
    ) -> Result<Option<NodeCert>, TxError> {
        self.0.node_cert_for_key(node_id, spki_sha256)
    }
    fn inventory_by_mac(&self, mac: &str) -> Result<Option<Inventory>, TxError> {
        self.0.inventory_by_mac(mac)
    }
}

/// [`Crypto`] over the host's `crypto` imports.
struct HostCrypto;

impl Crypto for HostCrypto {
    fn sha256(&self, data: &[u8]) -> Vec<u8> {
        crypto::sha256(data)
    }
    fn verify_signature(
        &self,
        scheme: SignatureScheme,
        spki: &[u8],
        message: &[u8],
        signature: &[u8],
    ) -> Result<(), CryptoError> {
        crypto::verify_signature(scheme, spki, message, signature)
    }
    fn verify_chain(
        &self,
        chain: &[Vec<u8>],
        roots: &[Vec<u8>],
        at: TimestampMs,
    ) -> Result<VerifiedChain, CryptoError> {
        crypto::verify_chain(chain, roots, at)
    }
    fn seal_state(&self, plaintext: &[u8], binding: &[u8]) -> Vec<u8> {
        crypto::seal_state(plaintext, binding)
    }
    fn seal_state_until(
        &self,
        plaintext: &[u8],
        binding: &[u8],
        not_after: TimestampMs,
    ) -> Vec<u8> {
        crypto::seal_state_until(plaintext, binding, not_after)
    }
    fn open_state(&self, sealed: &[u8], binding: &[u8]) -> Result<Vec<u8>, CryptoError> {
        crypto::open_state(sealed, binding)
    }
}

/// [`Tpm`] over the host's `tpm` imports, for attestors that set [`Attestor::TPM`].
struct HostTpm;

impl Tpm for HostTpm {
    fn parse_public(&self, public: &[u8]) -> Result<TpmPublicInfo, TpmError> {
        tpm::parse_public(public)
    }
    fn check_ak(&self, public: &[u8]) -> Result<TpmPublicInfo, TpmError> {
        tpm::check_ak(public)
    }
    fn make_credential(
        &self,
        ek_public: &[u8],
        ak_name: &[u8],
        secret: &[u8],
    ) -> Result<TpmCredential, TpmError> {
        tpm::make_credential(ek_public, ak_name, secret)
    }
    fn verify_quote(
        &self,
        ak_public: &[u8],
        quote: &[u8],
        signature: &[u8],
        pcrs: &[TpmPcrValue],
        nonce: &[u8],
    ) -> Result<Vec<TpmPcrValue>, TpmError> {
        tpm::verify_quote(ak_public, quote, signature, pcrs, nonce)
    }
    fn verify_certify(
        &self,
        ak_public: &[u8],
        certify_info: &[u8],
        signature: &[u8],
        key_public: &[u8],
        nonce: &[u8],
    ) -> Result<TpmPublicInfo, TpmError> {
        tpm::verify_certify(ak_public, certify_info, signature, key_public, nonce)
    }
    fn verify_ek(
        &self,
        ek_public: &[u8],
        ek_certificate: &[u8],
        intermediates: &[Vec<u8>],
        roots: &[Vec<u8>],
        at: TimestampMs,
    ) -> Result<TpmPublicInfo, TpmError> {
        tpm::verify_ek(ek_public, ek_certificate, intermediates, roots, at)
    }
}
