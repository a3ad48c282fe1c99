//! `x509pop`, Gatehouse's built-in attestor: a node whose certificate expired while it was
//! offline re-joins as itself.
//!
//! A node certificate lasts a day, and renewal refuses an expired one. The machine presents
//! its last certificate chain and a proof by that certificate's key, bound to its new CSR
//! ([`gatehouse_proto::x509pop`] defines the evidence and the signing input). The attestor
//! admits it as the same node only if, in this order:
//!
//! 1. the evidence parses (bounded JSON, `v` 1, 1 to 4 non-empty certificates, a 64-byte
//!    signature, a sane node id), the machine asks to join as `node` or `site` (a ramdisk
//!    never re-joins this way), and the request carries no token;
//! 2. the leaf is byte for byte a certificate this host issued (a `node_certs` row), to the
//!    node the evidence names;
//! 3. that node exists and is not retired;
//! 4. `clientTime` is within `windowMs` of database time;
//! 5. the signature verifies with the certificate's key;
//! 6. the proof was not used before: the single-use ledger is keyed on the SHA-256 of the
//!    signing input, not on the signature bytes (ECDSA signatures are malleable: a second
//!    valid signature over the same input is easy to make from the first). The proof is
//!    judged before the certificate, so a replay is refused as one even after the first use
//!    superseded the certificate;
//! 7. the certificate is of the node's current identity generation and not revoked;
//! 8. its role is the requested one (`node-tenant` counting as `node`);
//! 9. it expired at most `graceMs` ago, by database time (one still valid will do too);
//! 10. it names no TPM-held key (`urn:bc:tpm-ak:`), which comes back only through its TPM:
//!     no downgrade to an unattested key.
//!
//! Only the leaf is looked at: the host's own `node_certs` row is the authority, so the
//! issuer certificates are accepted as sent and never trusted. The result names the node, so
//! JoinService re-keys it in place: a new identity generation, every older certificate
//! revoked.
//!
//! The crate is both the component the host loads and an `rlib`: [`X509pop`] runs natively
//! through [`gatehouse_sdk::Attestor`] too.

use gatehouse_proto::x509pop::{X509POP_VERSION, X509popEvidence, signing_input};
use gatehouse_sdk::{
    AttestationResult, Attestor, Context, Info, JoinRequest, JoinRole, NodeCert,
    NodeKeyAttestation, Outcome, Refusal, Revocation, SignatureScheme, UseError, reason, refuse,
};

/// The evidence does not parse, breaks a bound, or the request carries a token.
pub const BAD_EVIDENCE: &str = "bad-evidence";
/// The leaf is not a certificate this host issued.
pub const UNKNOWN_CERTIFICATE: &str = "unknown-certificate";
/// The certificate was issued to another node than the one the evidence names.
pub const WRONG_NODE: &str = "wrong-node";
/// The certificate's node does not exist.
pub const UNKNOWN_NODE: &str = "unknown-node";
/// The node is retired (or deleted): it never joins again.
pub const RETIRED: &str = "retired";
/// An operator revoked the node's identity after this certificate was issued.
pub const IDENTITY_REVOKED: &str = "identity-revoked";
/// The certificate is of an older identity generation than the node's (a reclaim superseded
/// it).
pub const OLD_GENERATION: &str = "old-generation";
/// The certificate expired more than `graceMs` ago.
pub const EXPIRED_PAST_GRACE: &str = "expired-past-grace";
/// `clientTime` is more than `windowMs` away from database time.
pub const CLOCK_SKEW: &str = "clock-skew";
/// The signature does not verify with the certificate's key over this request's signing input
/// (for example a proof made for another CSR).
pub const BAD_SIGNATURE: &str = "bad-signature";
/// The same proof (the same signing input) admitted a join before.
pub const PROOF_REUSED: &str = "proof-reused";
/// The certificate names a TPM-held key (`urn:bc:tpm-ak:`): it re-joins only with its TPM.
pub const KEY_ATTESTATION_REQUIRED: &str = "key-attestation-required";

/// The statement of a certificate whose key a TPM holds and an attestation key certified.
const TPM_AK_STATEMENT: &str = "urn:bc:tpm-ak:";

/// Default `graceMs`: 7 days.
pub const DEFAULT_GRACE_MS: u64 = 7 * DAY_MS;
/// Largest `graceMs`: 30 days.
pub const MAX_GRACE_MS: u64 = 30 * DAY_MS;
/// Default `windowMs`: 60 seconds.
pub const DEFAULT_WINDOW_MS: u64 = 60_000;
/// Smallest `windowMs`: 1 second.
pub const MIN_WINDOW_MS: u64 = 1_000;
/// Largest `windowMs`: 10 minutes.
pub const MAX_WINDOW_MS: u64 = 10 * 60_000;

/// Most certificates in the evidence's chain.
pub const MAX_CHAIN: usize = 4;
/// Most bytes of the evidence's node id.
pub const MAX_NODE_ID_LEN: usize = 128;
/// The length of an ES256 `r || s` signature.
const SIGNATURE_LEN: usize = 64;

const DAY_MS: u64 = 24 * 3600 * 1000;

/// The `x509pop` attestor, configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct X509pop {
    /// How long after its expiry a certificate still re-joins, ms.
    grace_ms: i64,
    /// How far `clientTime` may be from database time, ms.
    window_ms: i64,
}

/// The configuration (the JSON form of `[attestors.x509pop] config`).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Config {
    #[serde(default = "default_grace_ms")]
    grace_ms: u64,
    #[serde(default = "default_window_ms")]
    window_ms: u64,
}

fn default_grace_ms() -> u64 {
    DEFAULT_GRACE_MS
}

fn default_window_ms() -> u64 {
    DEFAULT_WINDOW_MS
}

impl X509pop {
    /// The attestor with `graceMs` and `windowMs`, if both are in range.
    pub fn new(grace_ms: u64, window_ms: u64) -> Result<Self, String> {
        if grace_ms > MAX_GRACE_MS {
            return Err(format!(
                "invalid configuration: graceMs {grace_ms} is more than 30 days ({MAX_GRACE_MS})"
            ));
        }
        if !(MIN_WINDOW_MS..=MAX_WINDOW_MS).contains(&window_ms) {
            return Err(format!(
                "invalid configuration: windowMs {window_ms} is not between {MIN_WINDOW_MS} \
                 (1 s) and {MAX_WINDOW_MS} (10 min)"
            ));
        }
        // Both are bounded far below i64::MAX by the checks above.
        Ok(Self {
            grace_ms: i64::try_from(grace_ms).map_err(|e| e.to_string())?,
            window_ms: i64::try_from(window_ms).map_err(|e| e.to_string())?,
        })
    }
}

impl Attestor for X509pop {
    fn info() -> Info {
        Info {
            id: "x509pop".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            rounds: 1,
        }
    }

    fn configure(config: &str) -> Result<Self, String> {
        let Config {
            grace_ms,
            window_ms,
        } = gatehouse_sdk::config::parse(config)?;
        X509pop::new(grace_ms, window_ms)
    }

    fn verify(&self, cx: &Context<'_>, request: &JoinRequest) -> Outcome {
        match self.admit(cx, request) {
            Ok(result) => result.into(),
            Err(refusal) => refusal.into(),
        }
    }
}

gatehouse_sdk::export_attestor!(X509pop);

impl X509pop {
    /// Decides one join, recording the proof in the single-use ledger when it admits.
    fn admit(&self, cx: &Context<'_>, request: &JoinRequest) -> Result<AttestationResult, Refusal> {
        // 1. The evidence and the request's shape.
        let evidence = parse(&request.attestation)?;
        if !matches!(request.role, JoinRole::Node | JoinRole::Site) {
            return Err(refuse(reason::WRONG_ROLE));
        }
        if request.token.is_some() {
            return Err(refuse(BAD_EVIDENCE));
        }

        // 2. The leaf is one of this host's certificates, of the node the evidence names.
        let leaf = evidence.chain.first().ok_or_else(|| refuse(BAD_EVIDENCE))?;
        let cert = cx
            .tx
            .node_cert(leaf)?
            .ok_or_else(|| refuse(UNKNOWN_CERTIFICATE))?;
        if cert.node_id != evidence.node_id {
            return Err(refuse(WRONG_NODE).node(&cert.node_id));
        }

        // 3. The node.
        let node = cx
            .tx
            .node(&cert.node_id)
            .map_err(|error| Refusal::from(error).node(&cert.node_id))?
            .ok_or_else(|| refuse(UNKNOWN_NODE).node(&cert.node_id))?;
        let refusal = |code: &str| refuse(code).node(&node.id).tenant(&node.tenant_id);
        if node.retired {
            return Err(refusal(RETIRED));
        }

        // 4. Freshness of the proof, by database time.
        let now = cx.tx.now();
        if now.abs_diff(evidence.client_time) > self.window_ms.unsigned_abs() {
            return Err(refusal(CLOCK_SKEW));
        }

        // 5. The proof, by the certificate's key, over this request's CSR.
        let csr_sha256: &[u8; 32] = request
            .csr_sha256
            .as_slice()
            .try_into()
            .map_err(|_| refusal(BAD_EVIDENCE))?;
        let input = signing_input(csr_sha256, &evidence.node_id, evidence.client_time)
            .ok_or_else(|| refusal(BAD_EVIDENCE))?;
        cx.crypto
            .verify_signature(
                SignatureScheme::EcdsaP256Sha256Fixed,
                &cert.spki,
                &input,
                &evidence.sig,
            )
            .map_err(|_| refusal(BAD_SIGNATURE))?;

        // 6. Once: keyed on what was signed, never on the (malleable) signature. Checked before
        // the certificate's state, so a replay is named a replay even after the first use
        // superseded the certificate; a refusal below rolls the record back.
        let subject = ledger_subject(&cx.crypto.sha256(&input));
        let expires_at = evidence
            .client_time
            .saturating_add(self.window_ms)
            .saturating_add(1);
        cx.tx
            .record_use(&subject, expires_at)
            .map_err(|error| match error {
                UseError::Reused => refusal(PROOF_REUSED),
                UseError::Storage => refusal(reason::STORAGE),
            })?;

        // 7. Revocation and the identity generation.
        if let Some(code) = revocation_refusal(&cert, node.identity_generation) {
            return Err(refusal(code));
        }

        // 8. The role.
        if certified_role(&cert.role) != Some(request.role) {
            return Err(refusal(reason::WRONG_ROLE));
        }

        // 9. Expiry, by database time.
        if cert.not_after.saturating_add(self.grace_ms) < now {
            return Err(refusal(EXPIRED_PAST_GRACE));
        }

        // 10. No downgrade: a certificate naming a TPM-held key comes back only through its TPM,
        // never as an unattested key.
        if cert
            .statements
            .iter()
            .any(|s| s.starts_with(TPM_AK_STATEMENT))
        {
            return Err(refusal(KEY_ATTESTATION_REQUIRED));
        }

        Ok(AttestationResult {
            node_id: Some(node.id),
            tenant_id: Some(node.tenant_id),
            pool_id: node.pool_id,
            site_id: node.site_id,
            subject: Some(format!("x509pop:{}", cert.serial)),
            node_key: NodeKeyAttestation::Unattested,
            ..AttestationResult::default()
        })
    }
}

/// Parses and bounds the evidence; every failure is [`BAD_EVIDENCE`].
fn parse(attestation: &[u8]) -> Result<X509popEvidence, Refusal> {
    let evidence: X509popEvidence =
        gatehouse_sdk::evidence::json(attestation).map_err(|_| refuse(BAD_EVIDENCE))?;
    let well_formed = evidence.v == X509POP_VERSION
        && (1..=MAX_CHAIN).contains(&evidence.chain.len())
        && evidence.chain.iter().all(|cert| !cert.is_empty())
        && evidence.sig.len() == SIGNATURE_LEN
        && sane_node_id(&evidence.node_id);
    if well_formed {
        Ok(evidence)
    } else {
        Err(refuse(BAD_EVIDENCE))
    }
}

/// Whether `id` can be a node id: 1 to [`MAX_NODE_ID_LEN`] bytes of ASCII letters, digits,
/// `_`, `-` and `.`.
fn sane_node_id(id: &str) -> bool {
    (1..=MAX_NODE_ID_LEN).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// Why a certificate of a node at `identity_generation` no longer re-joins, if it does not.
fn revocation_refusal(cert: &NodeCert, identity_generation: u32) -> Option<&'static str> {
    match cert.revoked {
        Some(Revocation::IdentityRevoked) => Some(IDENTITY_REVOKED),
        _ if cert.generation != identity_generation => Some(OLD_GENERATION),
        Some(Revocation::Superseded) => Some(OLD_GENERATION),
        Some(Revocation::NodeRemoved | Revocation::Operator) => Some(reason::REVOKED),
        None => None,
    }
}

/// The role a certificate re-joins as: a lessee's `node-tenant` certificate re-joins as
/// `node` (JoinService restores the restriction); `ramdisk` and anything else never.
fn certified_role(role: &str) -> Option<JoinRole> {
    match role {
        "node" | "node-tenant" => Some(JoinRole::Node),
        "site" => Some(JoinRole::Site),
        _ => None,
    }
}

/// The single-use ledger's subject for a proof: `x509pop:` and the lowercase hex SHA-256 of
/// its signing input.
fn ledger_subject(input_sha256: &[u8]) -> String {
    format!("x509pop:{}", hex::encode(input_sha256))
}

#[cfg(test)]
mod tests;
