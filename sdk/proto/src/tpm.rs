//! The tpm attestor's evidence and the TPM key attestation a renewal carries.
//!
//! A tpm join is two rounds (the go-attestation enrollment flow):
//!
//! 1. [`TpmEvidence::Enroll`]: the agent sends its endorsement key (EK) public area and
//!    certificate and an attestation key (AK). The attestor checks the EK certificate chains
//!    to its `ekRoots` and that the AK has attestation-key attributes, and answers a challenge
//!    whose payload is a [`TpmChallenge`]: a MakeCredential blob for that EK and AK, and the
//!    attestor's state sealed by the host (bound to the CSR, at most 5 minutes).
//! 2. [`TpmEvidence::Answer`]: the agent activates the credential (only the TPM holding that
//!    EK, with that AK loaded, can) and sends the secret, a quote whose extraData is
//!    [`quote_nonce`] input `sha256(secret ‖ sha256(csr))`, and the AK's TPM2_Certify of the
//!    node key qualified by `sha256(csr)`.
//!
//! # Encodings
//!
//! TPM structures travel in the TPM's own big-endian wire encoding, as base64url:
//!
//! | field | structure |
//! |---|---|
//! | `ekPublic`, `akPublic`, `public`, `keyPublic` | TPMT_PUBLIC (no TPM2B size prefix) |
//! | `credentialBlob` | the contents of TPM2B_ID_OBJECT (no outer size) |
//! | `encryptedSecret` | the contents of TPM2B_ENCRYPTED_SECRET (no outer size) |
//! | `attest`, `certifyInfo` | TPMS_ATTEST (the contents of TPM2B_ATTEST, no outer size) |
//! | `signature` | TPMT_SIGNATURE |
//! | `ekCertificate`, `ekChain` | X.509 DER |
//!
//! Every one of these is untrusted on the host: it is parsed by total functions.

use serde::{Deserialize, Serialize};

/// The evidence format version.
pub const TPM_EVIDENCE_VERSION: u8 = 1;

/// The tpm attestor's evidence, UTF-8 JSON in the join request's `attestation`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum TpmEvidence {
    /// Round 1: who the TPM is.
    Enroll(TpmEnrollment),
    /// Round 2: the answer to the challenge.
    Answer(TpmAnswer),
}

/// Round 1: the EK and the AK.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TpmEnrollment {
    /// Format version, 1.
    pub v: u8,
    /// The EK's public area (TPMT_PUBLIC): the default RSA-2048 EK (TCG EK profile template
    /// L-1). The machine is keyed by its SHA-256.
    #[serde(with = "crate::b64")]
    pub ek_public: Vec<u8>,
    /// The EK certificate the manufacturer wrote into NV (DER).
    #[serde(with = "crate::b64")]
    pub ek_certificate: Vec<u8>,
    /// Intermediate CA certificates between the EK certificate and a root (DER), if the
    /// agent has them; may be empty.
    #[serde(with = "crate::b64::list", default)]
    pub ek_chain: Vec<Vec<u8>>,
    /// The AK's public area (TPMT_PUBLIC): a restricted P-256 signing key.
    #[serde(with = "crate::b64")]
    pub ak_public: Vec<u8>,
}

/// The payload of the round-1 challenge (JSON, in the JoinResponse's challenge payload).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TpmChallenge {
    /// Format version, 1.
    pub v: u8,
    /// MakeCredential's credential blob (TPM2B_ID_OBJECT contents).
    #[serde(with = "crate::b64")]
    pub credential_blob: Vec<u8>,
    /// MakeCredential's encrypted seed (TPM2B_ENCRYPTED_SECRET contents).
    #[serde(with = "crate::b64")]
    pub encrypted_secret: Vec<u8>,
    /// The attestor's state, sealed by the host; sent back unchanged in the answer.
    #[serde(with = "crate::b64")]
    pub state: Vec<u8>,
}

/// Round 2: the activated secret, a quote and the node key's certification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TpmAnswer {
    /// Format version, 1.
    pub v: u8,
    /// [`TpmChallenge::state`], unchanged.
    #[serde(with = "crate::b64")]
    pub state: Vec<u8>,
    /// The secret TPM2_ActivateCredential released.
    #[serde(with = "crate::b64")]
    pub secret: Vec<u8>,
    /// A TPM2_Quote by the AK over the PCRs, extraData `sha256(secret ‖ sha256(csr))`.
    pub quote: TpmQuote,
    /// The AK's TPM2_Certify of the node key, qualified by `sha256(csr)`; absent when the node
    /// key is not in the TPM (an attestor configured `nodeKey: certified` then refuses).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_key: Option<TpmCertifiedKey>,
}

/// A TPM2_Quote and the PCR values it covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TpmQuote {
    /// TPMS_ATTEST of type TPM_ST_ATTEST_QUOTE.
    #[serde(with = "crate::b64")]
    pub attest: Vec<u8>,
    /// TPMT_SIGNATURE by the AK over `attest`.
    #[serde(with = "crate::b64")]
    pub signature: Vec<u8>,
    /// The values of exactly the PCRs the quote selects, in selection order (bank by bank,
    /// ascending index).
    pub pcrs: Vec<PcrValue>,
}

/// One PCR value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PcrValue {
    /// The bank's hash algorithm (TPM_ALG_ID: 0x000b SHA-256, 0x0004 SHA-1, …).
    pub hash_alg: u16,
    /// The PCR index, 0 to 23.
    pub index: u8,
    /// The PCR's value.
    #[serde(with = "crate::b64")]
    pub digest: Vec<u8>,
}

/// A key certified by the AK with TPM2_Certify.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TpmCertifiedKey {
    /// The certified key's public area (TPMT_PUBLIC).
    #[serde(with = "crate::b64")]
    pub public: Vec<u8>,
    /// TPMS_ATTEST of type TPM_ST_ATTEST_CERTIFY.
    #[serde(with = "crate::b64")]
    pub certify_info: Vec<u8>,
    /// TPMT_SIGNATURE by the AK over `certify_info`.
    #[serde(with = "crate::b64")]
    pub signature: Vec<u8>,
}

/// What a renewal of a certificate naming an AK (`urn:bc:tpm-ak:…`) must carry: the AK's
/// TPM2_Certify of the next node key, qualified by `sha256(csr)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TpmKeyAttestation {
    /// The AK's public area (TPMT_PUBLIC); its TPM name must be the one the leaf names.
    #[serde(with = "crate::b64")]
    pub ak_public: Vec<u8>,
    /// The new node key's public area (TPMT_PUBLIC).
    #[serde(with = "crate::b64")]
    pub key_public: Vec<u8>,
    /// TPMS_ATTEST of type TPM_ST_ATTEST_CERTIFY.
    #[serde(with = "crate::b64")]
    pub certify_info: Vec<u8>,
    /// TPMT_SIGNATURE by the AK over `certify_info`.
    #[serde(with = "crate::b64")]
    pub signature: Vec<u8>,
}

/// The prefix of the certificate statement naming a TPM attestation key.
pub const TPM_AK_STATEMENT_PREFIX: &str = "urn:bc:tpm-ak:";

/// The statement `urn:bc:tpm-ak:<nameAlg>:<digest>` for a TPM name (2-byte big-endian nameAlg
/// then the digest), the digest in lowercase hex. `None` for a name algorithm other than
/// SHA-256, SHA-384 or SHA-512, or a digest of the wrong length.
pub fn ak_statement(name: &[u8]) -> Option<String> {
    let (alg, digest) = name.split_first_chunk::<2>()?;
    let (label, len) = match u16::from_be_bytes(*alg) {
        0x000b => ("sha256", 32),
        0x000c => ("sha384", 48),
        0x000d => ("sha512", 64),
        _ => return None,
    };
    if digest.len() != len {
        return None;
    }
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    Some(format!("{TPM_AK_STATEMENT_PREFIX}{label}:{hex}"))
}

/// The TPM name a `urn:bc:tpm-ak:` statement names, or `None` if it is not one (or malformed).
/// The inverse of [`ak_statement`].
pub fn ak_name_from_statement(statement: &str) -> Option<Vec<u8>> {
    let rest = statement.strip_prefix(TPM_AK_STATEMENT_PREFIX)?;
    let (label, hex) = rest.split_once(':')?;
    let (alg, len): (u16, usize) = match label {
        "sha256" => (0x000b, 32),
        "sha384" => (0x000c, 48),
        "sha512" => (0x000d, 64),
        _ => return None,
    };
    if hex.len() != 2 * len || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    let mut name = alg.to_be_bytes().to_vec();
    for pair in hex.as_bytes().chunks_exact(2) {
        let text = std::str::from_utf8(pair).ok()?;
        name.push(u8::from_str_radix(text, 16).ok()?);
    }
    Some(name)
}

/// The input whose SHA-256 is the quote's extraData: `secret ‖ sha256(csr)`.
pub fn quote_nonce_input(secret: &[u8], csr_sha256: &[u8]) -> Vec<u8> {
    let mut input = Vec::with_capacity(secret.len() + csr_sha256.len());
    input.extend_from_slice(secret);
    input.extend_from_slice(csr_sha256);
    input
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statement_round_trips() {
        let mut name = vec![0x00, 0x0b];
        name.extend((0..32).map(|i| i as u8));
        let s = ak_statement(&name).unwrap();
        assert_eq!(
            s,
            "urn:bc:tpm-ak:sha256:000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
        );
        assert_eq!(ak_name_from_statement(&s).unwrap(), name);
    }

    #[test]
    fn statement_refuses_malformed() {
        assert!(ak_statement(&[0x00, 0x0b, 1, 2]).is_none());
        assert!(ak_statement(&[0x00, 0x04]).is_none());
        assert!(ak_statement(&[]).is_none());
        assert!(ak_name_from_statement("urn:bc:tpm-ak:sha256:00").is_none());
        assert!(ak_name_from_statement("urn:bc:tpm-ak:md5:00").is_none());
        assert!(
            ak_name_from_statement(&format!("urn:bc:tpm-ak:sha256:{}", "A".repeat(64))).is_none()
        );
        assert!(ak_name_from_statement("urn:bc:other").is_none());
    }

    #[test]
    fn evidence_is_tagged() {
        let e = TpmEvidence::Enroll(TpmEnrollment {
            v: 1,
            ek_public: vec![1],
            ek_certificate: vec![2],
            ek_chain: vec![],
            ak_public: vec![3],
        });
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(json["kind"], "enroll");
        assert_eq!(json["ekPublic"], "AQ");
        let back: TpmEvidence = serde_json::from_value(json).unwrap();
        assert_eq!(back, e);
    }
}
