//! The trait an attestor implements and the capabilities it decides with.

use crate::{
    Calls, CryptoError, Info, Inventory, JoinRequest, JoinRequestRow, Lease, Node, NodeCert,
    Outcome, SignatureScheme, TimestampMs, Token, TpmCredential, TpmError, TpmPcrValue,
    TpmPublicInfo, TxError, UseError, VerifiedChain, Workflow,
};
use alloc::string::String;
use alloc::vec::Vec;

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
    /// Whether the attestor uses the host's TPM functions ([`Context::tpm`]). Leave it `false`
    /// unless it does: [`export_attestor!`](crate::export_attestor) then hands `verify` a
    /// [`NoTpm`] and never references the host's `tpm` imports, so the component does not
    /// import the `tpm` interface at all (a host without TPM support still loads it).
    const TPM: bool = false;

    /// Whether `configure` prepares a binary form of the configured value
    /// ([`prepare`](Attestor::prepare)) that every `verify` of the same configuration starts
    /// from ([`from_prepared`](Attestor::from_prepared)) instead of parsing the configuration
    /// text again: keys and certificates parsed once per configuration, not once per join.
    /// Leave it `false` unless both are implemented; the component then does not import the
    /// `prepared` interface (WIT 0.2.1) at all.
    const PREPARED: bool = false;

    /// The transaction and crypto functions the attestor calls (the SDK helpers it uses
    /// included: [`Calls::TOKEN`], [`Calls::APPROVAL`]). Every one by default. Naming only
    /// those it calls makes its component import only those, and the host links a
    /// component's imports each time it instantiates it, so once per join (join-token names
    /// [`Calls::TOKEN`]: 5 imports instead of 25). A call it does not name panics, naming the
    /// function: a trap in the component, a failed test under the test kit's `Kit::round`.
    const CALLS: Calls = Calls::all();

    /// Who the attestor is: its id, version and the most rounds a join through it takes.
    fn info() -> Info;

    /// Validates the configuration (the JSON form of the attestor's `[attestors.<id>]` table,
    /// `{}` when there is none). An error refuses to load the attestor; the message is shown
    /// to the operator.
    fn configure(config: &str) -> Result<Self, String>;

    /// The prepared form of a value [`configure`](Attestor::configure) returned, which the
    /// host keeps (at most 1 MiB) when [`PREPARED`](Attestor::PREPARED) is set. Any encoding
    /// [`from_prepared`](Attestor::from_prepared) reads back.
    fn prepare(&self) -> Vec<u8> {
        Vec::new()
    }

    /// The configured value again from [`prepare`](Attestor::prepare)'s bytes, for a `verify`
    /// of the same configuration; `None` (bytes it cannot read) configures from the text
    /// instead.
    fn from_prepared(bytes: &[u8]) -> Option<Self> {
        let _ = bytes;
        None
    }

    /// Decides one join round. Everything it reads or writes through `cx.tx` is rolled back
    /// unless it admits or defers.
    fn verify(&self, cx: &Context<'_>, request: &JoinRequest) -> Outcome;
}

/// What an attestor decides with: the join's transaction and the host's cryptography.
///
/// In a component all three call the host's imports; natively (unit tests with the
/// `gatehouse-sdk-test` kit, the host's benchmark) any implementation of the traits will do.
///
/// ```
/// # use gatehouse_sdk::{Context, Tx, Crypto, NoTpm};
/// fn database_time(cx: &Context<'_>) -> i64 {
///     cx.tx.now()
/// }
/// ```
pub struct Context<'a> {
    /// The database transaction JoinService holds for this round.
    pub tx: &'a dyn Tx,
    /// Cryptography the host runs natively.
    pub crypto: &'a dyn Crypto,
    /// TPM 2.0 checks the host runs natively: [`NoTpm`] unless the attestor sets
    /// [`Attestor::TPM`].
    pub tpm: &'a dyn Tpm,
}

/// The typed capability over the join's database transaction (the WIT `transaction.tx`
/// resource). There is no raw SQL: every operation is one an attestor needs.
///
/// Each operation's semantics and limits are the WIT's (`wit/transaction.wit`). In unit tests,
/// `gatehouse-sdk-test`'s `MemoryTx` implements it in memory:
///
/// ```
/// use gatehouse_sdk::{Tx, UseError};
/// use gatehouse_sdk_test::MemoryTx;
///
/// let tx = MemoryTx::new(1_000);
/// // Single-use evidence: the second use of a subject, before it expires, is a replay.
/// assert_eq!(tx.record_use("nonce:1", 2_000), Ok(()));
/// assert_eq!(tx.record_use("nonce:1", 2_000), Err(UseError::Reused));
/// tx.set_now(2_000);
/// assert_eq!(tx.record_use("nonce:1", 3_000), Ok(()), "expired: usable again");
/// ```
pub trait Tx {
    /// The database's clock, the only clock attestors should decide by.
    fn now(&self) -> TimestampMs;
    /// Reads the token row as committed, or `None` if there is no such id. No lock is taken:
    /// the host spends the use after the call, on the row as read (the WIT's `lock-token`).
    fn lock_token(&self, id: &str) -> Result<Option<Token>, TxError>;
    /// Spends one use of a token `lock_token` read in this call; returns the uses left.
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
    fn node_cert_for_key(
        &self,
        node_id: &str,
        spki_sha256: &[u8],
    ) -> Result<Option<NodeCert>, TxError>;
    /// The newest inventory of any node that reports `mac`.
    fn inventory_by_mac(&self, mac: &str) -> Result<Option<Inventory>, TxError>;
}

/// Cryptography the host runs natively (the WIT `crypto` interface). Every function takes
/// untrusted bytes and fails cleanly on bad input.
///
/// State sealed for a challenge opens only for the same attestor and binding, and only until
/// its not-after (database time); `gatehouse-sdk-test`'s `SoftCrypto` behaves the same way:
///
/// ```
/// use gatehouse_sdk::{Crypto, CryptoError};
/// use gatehouse_sdk_test::{MemoryTx, SoftCrypto};
///
/// let tx = MemoryTx::new(1_000);
/// let crypto = SoftCrypto::new("mine", tx.clock());
/// let csr_sha256 = [7u8; 32];
/// let sealed = crypto.seal_state_until(b"nonce", &csr_sha256, 5_000);
/// assert_eq!(crypto.open_state(&sealed, &csr_sha256), Ok(b"nonce".to_vec()));
/// assert_eq!(crypto.open_state(&sealed, &[8u8; 32]), Err(CryptoError::Unsealable));
/// tx.set_now(5_001);
/// assert_eq!(crypto.open_state(&sealed, &csr_sha256), Err(CryptoError::Expired));
/// ```
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
    /// late answer's state with [`CryptoError::Expired`].
    fn seal_state_until(&self, plaintext: &[u8], binding: &[u8], not_after: TimestampMs)
    -> Vec<u8>;
    /// Opens what [`seal_state`](Crypto::seal_state) sealed with the same binding.
    fn open_state(&self, sealed: &[u8], binding: &[u8]) -> Result<Vec<u8>, CryptoError>;
}

/// TPM 2.0 checks the host runs natively (the WIT `tpm` interface). Every function parses
/// untrusted TPM wire structures and fails cleanly on bad input.
pub trait Tpm {
    /// Parses a TPMT_PUBLIC and computes its TPM name and SPKI.
    fn parse_public(&self, public: &[u8]) -> Result<TpmPublicInfo, TpmError>;
    /// Checks a public area has attestation-key attributes (restricted signing key, fixedTPM,
    /// fixedParent, sensitiveDataOrigin, decrypt clear).
    fn check_ak(&self, public: &[u8]) -> Result<TpmPublicInfo, TpmError>;
    /// TPM2_MakeCredential of `secret` for the EK `ek_public` and the object named `ak_name`.
    fn make_credential(
        &self,
        ek_public: &[u8],
        ak_name: &[u8],
        secret: &[u8],
    ) -> Result<TpmCredential, TpmError>;
    /// Verifies a TPM2_Quote by `ak_public` over exactly `pcrs` with extraData `nonce`;
    /// returns the PCRs covered.
    fn verify_quote(
        &self,
        ak_public: &[u8],
        quote: &[u8],
        signature: &[u8],
        pcrs: &[TpmPcrValue],
        nonce: &[u8],
    ) -> Result<Vec<TpmPcrValue>, TpmError>;
    /// Verifies a TPM2_Certify of `key_public` by `ak_public` with extraData `nonce`; returns
    /// the certified key.
    fn verify_certify(
        &self,
        ak_public: &[u8],
        certify_info: &[u8],
        signature: &[u8],
        key_public: &[u8],
        nonce: &[u8],
    ) -> Result<TpmPublicInfo, TpmError>;
    /// Verifies that `ek_certificate` chains through `intermediates` to one of `roots` at `at`
    /// and certifies the key of `ek_public`.
    fn verify_ek(
        &self,
        ek_public: &[u8],
        ek_certificate: &[u8],
        intermediates: &[Vec<u8>],
        roots: &[Vec<u8>],
        at: TimestampMs,
    ) -> Result<TpmPublicInfo, TpmError>;
}

/// The [`Tpm`] of an attestor that does not set [`Attestor::TPM`]: every function answers
/// [`TpmError::Unsupported`]. Keeping the host's `tpm` imports out of such a component is what
/// lets it load on a host that offers none.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoTpm;

impl NoTpm {
    fn unsupported<T>() -> Result<T, TpmError> {
        Err(TpmError::Unsupported(
            "this attestor does not use the TPM (Attestor::TPM is false)".into(),
        ))
    }
}

impl Tpm for NoTpm {
    fn parse_public(&self, _: &[u8]) -> Result<TpmPublicInfo, TpmError> {
        Self::unsupported()
    }
    fn check_ak(&self, _: &[u8]) -> Result<TpmPublicInfo, TpmError> {
        Self::unsupported()
    }
    fn make_credential(&self, _: &[u8], _: &[u8], _: &[u8]) -> Result<TpmCredential, TpmError> {
        Self::unsupported()
    }
    fn verify_quote(
        &self,
        _: &[u8],
        _: &[u8],
        _: &[u8],
        _: &[TpmPcrValue],
        _: &[u8],
    ) -> Result<Vec<TpmPcrValue>, TpmError> {
        Self::unsupported()
    }
    fn verify_certify(
        &self,
        _: &[u8],
        _: &[u8],
        _: &[u8],
        _: &[u8],
        _: &[u8],
    ) -> Result<TpmPublicInfo, TpmError> {
        Self::unsupported()
    }
    fn verify_ek(
        &self,
        _: &[u8],
        _: &[u8],
        _: &[Vec<u8>],
        _: &[Vec<u8>],
        _: TimestampMs,
    ) -> Result<TpmPublicInfo, TpmError> {
        Self::unsupported()
    }
}

/// Most `roots` one [`Tpm::verify_ek`] call takes (the host's `verify-ek` refuses more),
/// so an attestor's EK trust configuration and the host agree: a whole vendor trust bundle
/// (about 170 roots and intermediates in 2026) fits several times over.
pub const MAX_EK_ROOTS: usize = 1024;
