//! The trait an attestor implements and the capabilities it decides with.

use crate::{
    CryptoError, Info, Inventory, JoinRequest, JoinRequestRow, Lease, Node, NodeCert, Outcome,
    SignatureScheme, TimestampMs, Token, TpmCredential, TpmError, TpmPcrValue, TpmPublicInfo,
    TxError, UseError, VerifiedChain, Workflow,
};

/// An attestor: decides, from one round's evidence, whether a machine may join and as whom.
///
/// The host calls [`info`](Attestor::info) and [`configure`](Attestor::configure) once at load,
/// then, for every join round, configures a fresh value and calls
/// [`verify`](Attestor::verify): no state crosses rounds except through the transaction or
/// state sealed with [`Crypto::seal_state`].
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an attestor",
    label = "`export_attestor!` needs a type implementing `gatehouse_sdk::Attestor`",
    note = "implement `gatehouse_sdk::Attestor` (info, configure, verify) for `{Self}`"
)]
pub trait Attestor: Sized {
    /// Who the attestor is: its id, version and the most rounds a join through it takes.
    fn info() -> Info;

    /// Validates the configuration (the JSON form of the attestor's `[attestors.<id>]` table,
    /// `{}` when there is none). An error refuses to load the attestor; the message is shown
    /// to the operator.
    fn configure(config: &str) -> Result<Self, String>;

    /// Decides one join round. Everything it reads or writes through `cx.tx` is rolled back
    /// unless it admits or defers.
    fn verify(&self, cx: &Context<'_>, request: &JoinRequest) -> Outcome;
}

/// What an attestor decides with: the join's transaction and the host's cryptography.
///
/// In a component both call the host's imports; natively (the host's benchmark, unit tests)
/// any implementation of the traits will do.
pub struct Context<'a> {
    /// The database transaction JoinService holds for this round.
    pub tx: &'a dyn Tx,
    /// Cryptography the host runs natively.
    pub crypto: &'a dyn Crypto,
}

/// The typed capability over the join's database transaction (the WIT `transaction.tx`
/// resource). There is no raw SQL: every operation is one an attestor needs.
pub trait Tx {
    /// The database's clock, the only clock attestors should decide by.
    fn now(&self) -> TimestampMs;
    /// Locks the token row (`FOR UPDATE`) and returns it, or `None` if there is no such id.
    fn lock_token(&self, id: &str) -> Result<Option<Token>, TxError>;
    /// Spends one use of a token locked in this transaction; returns the uses left.
    fn consume_token(&self, id: &str) -> Result<u32, TxError>;
    /// Looks up a node.
    fn node(&self, id: &str) -> Result<Option<Node>, TxError>;
    /// Looks up a certificate the host issued, by its exact DER bytes.
    fn node_cert(&self, der: &[u8]) -> Result<Option<NodeCert>, TxError>;
    /// The node a hardware identity is bound to, if any.
    fn bound_node(&self, kind: &str, value: &str) -> Result<Option<String>, TxError>;
    /// Looks up a lease.
    fn lease(&self, name: &str) -> Result<Option<Lease>, TxError>;
    /// The newest inventory of a node.
    fn newest_inventory(&self, node_id: &str) -> Result<Option<Inventory>, TxError>;
    /// The workflow whose `userdata.render` step minted a token, if any.
    fn token_workflow(&self, token_id: &str) -> Result<Option<Workflow>, TxError>;
    /// Records single-use evidence; fails with [`UseError::Reused`] for a replay.
    fn record_use(&self, subject: &str, expires_at: TimestampMs) -> Result<(), UseError>;
    /// Opens (or finds, for the same subject and CSR) a join request an operator decides.
    fn open_join_request(&self, subject: &str, details: &str) -> Result<JoinRequestRow, TxError>;
    /// Looks up a join request this attestor opened.
    fn join_request(&self, id: &str) -> Result<Option<JoinRequestRow>, TxError>;
    /// Marks an approved join request used, so it admits only once.
    fn consume_join_request(&self, id: &str) -> Result<(), TxError>;
    /// Reads a value from the attestor's private key/value space.
    fn kv_get(&self, key: &str) -> Result<Option<Vec<u8>>, TxError>;
    /// Writes a value to the attestor's private key/value space (at most 64 KiB).
    fn kv_put(&self, key: &str, value: &[u8]) -> Result<(), TxError>;
    /// Deletes a value from the attestor's private key/value space.
    fn kv_delete(&self, key: &str) -> Result<(), TxError>;
    /// The newest certificate the host issued to `node_id` for the key whose
    /// SubjectPublicKeyInfo has SHA-256 `spki_sha256`, neither revoked nor expired.
    ///
    /// Defaults to [`TxError::Invalid`] so implementations written before it (fakes in tests)
    /// keep compiling; the host's implementation answers it.
    fn node_cert_for_key(
        &self,
        node_id: &str,
        spki_sha256: &[u8],
    ) -> Result<Option<NodeCert>, TxError> {
        let _ = (node_id, spki_sha256);
        Err(TxError::Invalid(
            "node-cert-for-key is not implemented".into(),
        ))
    }
    /// The newest inventory of any node that reports `mac`.
    ///
    /// Defaults to [`TxError::Invalid`], like [`Tx::node_cert_for_key`].
    fn inventory_by_mac(&self, mac: &str) -> Result<Option<Inventory>, TxError> {
        let _ = mac;
        Err(TxError::Invalid(
            "inventory-by-mac is not implemented".into(),
        ))
    }
}

/// Cryptography the host runs natively (the WIT `crypto` interface). Every function takes
/// untrusted bytes and fails cleanly on bad input.
pub trait Crypto {
    /// SHA-256 of `data`.
    fn sha256(&self, data: &[u8]) -> Vec<u8>;
    /// Verifies `signature` over `message` with the key in `spki` (SubjectPublicKeyInfo, DER).
    fn verify_signature(
        &self,
        scheme: SignatureScheme,
        spki: &[u8],
        message: &[u8],
        signature: &[u8],
    ) -> Result<(), CryptoError>;
    /// Verifies that `chain` (DER, leaf first) leads to one of `roots` (DER), every
    /// certificate valid at `at`.
    fn verify_chain(
        &self,
        chain: &[Vec<u8>],
        roots: &[Vec<u8>],
        at: TimestampMs,
    ) -> Result<VerifiedChain, CryptoError>;
    /// Seals `plaintext` under the host's challenge key, bound to this attestor and `binding`,
    /// for 5 minutes (database time) at most.
    fn seal_state(&self, plaintext: &[u8], binding: &[u8]) -> Vec<u8>;
    /// [`seal_state`](Crypto::seal_state), expiring at `not_after` if that is sooner: seal a
    /// challenge's state with its not-after, and [`open_state`](Crypto::open_state) refuses a
    /// late answer's state with [`CryptoError::Expired`]. The host's implementation does; the
    /// default (for test doubles) ignores `not_after` and keeps the 5-minute limit.
    fn seal_state_until(
        &self,
        plaintext: &[u8],
        binding: &[u8],
        not_after: TimestampMs,
    ) -> Vec<u8> {
        let _ = not_after;
        self.seal_state(plaintext, binding)
    }
    /// Opens what [`seal_state`](Crypto::seal_state) sealed with the same binding.
    fn open_state(&self, sealed: &[u8], binding: &[u8]) -> Result<Vec<u8>, CryptoError>;

    // The TPM functions (the WIT `tpm` interface). They are provided methods answering
    // `unsupported`, so test doubles that need no TPM compile unchanged; the component's
    // import-backed implementation overrides every one.

    /// Parses a TPMT_PUBLIC and computes its TPM name and SPKI.
    fn tpm_parse_public(&self, public: &[u8]) -> Result<TpmPublicInfo, TpmError> {
        let _ = public;
        Err(no_tpm())
    }
    /// Checks a public area has attestation-key attributes (restricted signing key, fixedTPM,
    /// fixedParent, sensitiveDataOrigin, decrypt clear).
    fn tpm_check_ak(&self, public: &[u8]) -> Result<TpmPublicInfo, TpmError> {
        let _ = public;
        Err(no_tpm())
    }
    /// TPM2_MakeCredential of `secret` for the EK `ek_public` and the object named `ak_name`.
    fn tpm_make_credential(
        &self,
        ek_public: &[u8],
        ak_name: &[u8],
        secret: &[u8],
    ) -> Result<TpmCredential, TpmError> {
        let _ = (ek_public, ak_name, secret);
        Err(no_tpm())
    }
    /// Verifies a TPM2_Quote by `ak_public` over exactly `pcrs` with extraData `nonce`;
    /// returns the PCRs covered.
    fn tpm_verify_quote(
        &self,
        ak_public: &[u8],
        quote: &[u8],
        signature: &[u8],
        pcrs: &[TpmPcrValue],
        nonce: &[u8],
    ) -> Result<Vec<TpmPcrValue>, TpmError> {
        let _ = (ak_public, quote, signature, pcrs, nonce);
        Err(no_tpm())
    }
    /// Verifies a TPM2_Certify of `key_public` by `ak_public` with extraData `nonce`; returns
    /// the certified key.
    fn tpm_verify_certify(
        &self,
        ak_public: &[u8],
        certify_info: &[u8],
        signature: &[u8],
        key_public: &[u8],
        nonce: &[u8],
    ) -> Result<TpmPublicInfo, TpmError> {
        let _ = (ak_public, certify_info, signature, key_public, nonce);
        Err(no_tpm())
    }
    /// Verifies that `ek_certificate` chains through `intermediates` to one of `roots` at `at`
    /// and certifies the key of `ek_public`.
    fn tpm_verify_ek(
        &self,
        ek_public: &[u8],
        ek_certificate: &[u8],
        intermediates: &[Vec<u8>],
        roots: &[Vec<u8>],
        at: TimestampMs,
    ) -> Result<TpmPublicInfo, TpmError> {
        let _ = (ek_public, ek_certificate, intermediates, roots, at);
        Err(no_tpm())
    }
}

/// Most `roots` one [`Crypto::tpm_verify_ek`] call takes (the host's `verify-ek` refuses more),
/// so an attestor's EK trust configuration and the host agree: a whole vendor trust bundle
/// (about 170 roots and intermediates in 2026) fits several times over.
pub const MAX_EK_ROOTS: usize = 1024;

/// What a [`Crypto`] without TPM support answers.
fn no_tpm() -> TpmError {
    TpmError::Unsupported("this Crypto implementation has no TPM support".into())
}
