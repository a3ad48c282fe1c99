//! A node key held by the TPM: a primary of the owner hierarchy derived from a 32-byte unique,
//! which is all `node.key` keeps (a PEM block `BCD TPM NODE KEY`).

use std::sync::Arc;

use base64::Engine as _;
use rustls::SignatureScheme;
use tss_esapi::interface_types::algorithm::HashingAlgorithm;

use super::{Tpm, TpmError, sha256};

/// The PEM label of a node key record: its bytes are the 32-byte unique the key derives from.
pub const NODE_KEY_PEM_LABEL: &str = "BCD TPM NODE KEY";

/// A P-256 node key in the TPM. Cloning shares the TPM connection.
#[derive(Clone)]
pub struct TpmNodeKey {
    tpm: Tpm,
    unique: [u8; 32],
    /// TPMT_PUBLIC as the TPM returned it.
    public: Vec<u8>,
    /// `04 ‖ x ‖ y`.
    point: Vec<u8>,
    /// SubjectPublicKeyInfo (DER).
    spki: Vec<u8>,
}

impl std::fmt::Debug for TpmNodeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The unique is not secret without the TPM, but there is no reason to print it.
        f.debug_struct("TpmNodeKey")
            .field("tpm", &self.tpm)
            .finish_non_exhaustive()
    }
}

impl TpmNodeKey {
    /// A new key: a fresh random unique, the key derived in `tpm`.
    pub fn generate(tpm: &Tpm) -> Result<Self, TpmError> {
        let mut unique = [0u8; 32];
        aws_lc_rs::rand::fill(&mut unique).map_err(|_| TpmError::Unexpected("randomness"))?;
        Self::derive(tpm, unique)
    }

    /// The key `tpm` derives from `unique` (another key after a TPM2_Clear).
    pub fn derive(tpm: &Tpm, unique: [u8; 32]) -> Result<Self, TpmError> {
        let derived = tpm.node_key(unique)?;
        Ok(Self {
            tpm: tpm.clone(),
            unique,
            public: derived.public,
            point: derived.point,
            spki: derived.spki,
        })
    }

    /// The key a `node.key` record (PEM `BCD TPM NODE KEY`) names, derived in `tpm`.
    pub fn from_record(tpm: &Tpm, pem: &str) -> Result<Self, TpmError> {
        Self::derive(tpm, parse_record(pem)?)
    }

    /// The `node.key` record: the unique as a PEM block `BCD TPM NODE KEY`.
    pub fn record_pem(&self) -> String {
        let b64 = base64::engine::general_purpose::STANDARD.encode(self.unique);
        format!("-----BEGIN {NODE_KEY_PEM_LABEL}-----\n{b64}\n-----END {NODE_KEY_PEM_LABEL}-----\n")
    }

    /// The 32-byte unique.
    pub fn unique(&self) -> [u8; 32] {
        self.unique
    }

    /// The TPM the key lives in.
    pub fn tpm(&self) -> &Tpm {
        &self.tpm
    }

    /// The key's public area (TPMT_PUBLIC).
    pub fn public_area(&self) -> &[u8] {
        &self.public
    }

    /// The SubjectPublicKeyInfo (DER).
    pub fn spki_der(&self) -> &[u8] {
        &self.spki
    }

    /// ES256 over `message`: `r ‖ s`, 64 bytes.
    pub fn sign_fixed(&self, message: &[u8]) -> Result<Vec<u8>, TpmError> {
        let (r, s) = self.checked_sign(message)?;
        let mut out = r.to_vec();
        out.extend_from_slice(&s);
        Ok(out)
    }

    /// ECDSA P-256 SHA-256 over `message`, DER (X.509 and TLS encode it so).
    pub fn sign_der(&self, message: &[u8]) -> Result<Vec<u8>, TpmError> {
        let (r, s) = self.checked_sign(message)?;
        Ok(ecdsa_der(&r, &s))
    }

    /// The TPM's (or the helper's) signature over `message`, checked against this key's
    /// public half before it is used: a forged or broken answer is refused
    /// ([`TpmError::BadSignature`]).
    fn checked_sign(&self, message: &[u8]) -> Result<([u8; 32], [u8; 32]), TpmError> {
        use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED, UnparsedPublicKey};
        let (r, s) = self.tpm.sign(
            self.unique,
            sha256(message).to_vec(),
            HashingAlgorithm::Sha256,
        )?;
        let mut fixed = r.to_vec();
        fixed.extend_from_slice(&s);
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, &self.point)
            .verify(message, &fixed)
            .map_err(|_| TpmError::BadSignature)?;
        Ok((r, s))
    }

    /// The key as a rustls signing key, for TLS client authentication.
    pub fn tls_signing_key(&self) -> Arc<dyn rustls::sign::SigningKey> {
        Arc::new(TlsKey(self.clone()))
    }
}

/// Whether a `node.key` file's text is a TPM key record rather than a PKCS#8 key.
pub fn is_record(pem: &str) -> bool {
    pem.trim_start()
        .starts_with(&format!("-----BEGIN {NODE_KEY_PEM_LABEL}-----"))
}

/// The unique in a record; anything but one block of exactly 32 bytes is refused.
pub fn parse_record(pem: &str) -> Result<[u8; 32], TpmError> {
    let begin = format!("-----BEGIN {NODE_KEY_PEM_LABEL}-----");
    let end = format!("-----END {NODE_KEY_PEM_LABEL}-----");
    let body = pem
        .trim()
        .strip_prefix(&begin)
        .and_then(|rest| rest.strip_suffix(&end))
        .ok_or_else(|| TpmError::Record(format!("not one {NODE_KEY_PEM_LABEL} PEM block")))?;
    let b64: String = body.split_whitespace().collect();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|e| TpmError::Record(e.to_string()))?;
    <[u8; 32]>::try_from(bytes.as_slice())
        .map_err(|_| TpmError::Record(format!("{} bytes, not 32", bytes.len())))
}

/// `r` and `s` as an ECDSA-Sig-Value (SEQUENCE of two INTEGERs). Written out because the
/// shape is fixed and small (at most 72 bytes for P-256, so every length is one byte).
fn ecdsa_der(r: &[u8; 32], s: &[u8; 32]) -> Vec<u8> {
    fn integer(v: &[u8]) -> Vec<u8> {
        let start = v.iter().position(|&b| b != 0).unwrap_or(v.len() - 1);
        let v = &v[start..];
        let mut out = vec![0x02];
        if v[0] & 0x80 != 0 {
            out.push(len_u8(v.len() + 1));
            out.push(0);
        } else {
            out.push(len_u8(v.len()));
        }
        out.extend_from_slice(v);
        out
    }
    let (r, s) = (integer(r), integer(s));
    let mut out = vec![0x30, len_u8(r.len() + s.len())];
    out.extend(r);
    out.extend(s);
    out
}

/// A length below 128 (every length in a P-256 ECDSA-Sig-Value is).
fn len_u8(n: usize) -> u8 {
    u8::try_from(n).unwrap_or(u8::MAX)
}

impl rcgen::PublicKeyData for TpmNodeKey {
    fn der_bytes(&self) -> &[u8] {
        &self.point
    }

    fn algorithm(&self) -> &'static rcgen::SignatureAlgorithm {
        &rcgen::PKCS_ECDSA_P256_SHA256
    }
}

impl rcgen::SigningKey for TpmNodeKey {
    fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, rcgen::Error> {
        self.sign_der(msg).map_err(|_| rcgen::Error::RemoteKeyError)
    }
}

/// The node key as rustls sees it: ECDSA P-256 with SHA-256, the one scheme a P-256 key has in
/// TLS 1.3 and that every TLS 1.2 server offers.
#[derive(Debug)]
struct TlsKey(TpmNodeKey);

impl rustls::sign::SigningKey for TlsKey {
    fn choose_scheme(&self, offered: &[SignatureScheme]) -> Option<Box<dyn rustls::sign::Signer>> {
        offered
            .contains(&SignatureScheme::ECDSA_NISTP256_SHA256)
            .then(|| Box::new(TlsSigner(self.0.clone())) as Box<dyn rustls::sign::Signer>)
    }

    fn algorithm(&self) -> rustls::SignatureAlgorithm {
        rustls::SignatureAlgorithm::ECDSA
    }
}

#[derive(Debug)]
struct TlsSigner(TpmNodeKey);

impl rustls::sign::Signer for TlsSigner {
    fn sign(&self, message: &[u8]) -> Result<Vec<u8>, rustls::Error> {
        self.0
            .sign_der(message)
            .map_err(|e| rustls::Error::General(e.to_string()))
    }

    fn scheme(&self) -> SignatureScheme {
        SignatureScheme::ECDSA_NISTP256_SHA256
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn der_integers_are_minimal_and_positive() {
        let mut r = [0u8; 32];
        r[31] = 1;
        let s = [0xff; 32];
        let der = ecdsa_der(&r, &s);
        assert_eq!(&der[..5], &[0x30, 3 + 35, 0x02, 0x01, 0x01]);
        assert_eq!(&der[5..8], &[0x02, 33, 0x00]);
        assert_eq!(der.len(), 2 + 3 + 35);
        let zero = ecdsa_der(&[0; 32], &[0; 32]);
        assert_eq!(zero, [0x30, 6, 0x02, 1, 0, 0x02, 1, 0]);
    }

    #[test]
    fn records_parse_strictly() {
        let b64 = base64::engine::general_purpose::STANDARD.encode([7u8; 32]);
        let pem = format!(
            "-----BEGIN {NODE_KEY_PEM_LABEL}-----\n{b64}\n-----END {NODE_KEY_PEM_LABEL}-----\n"
        );
        assert!(is_record(&pem));
        assert_eq!(parse_record(&pem).unwrap(), [7u8; 32]);
        let short = base64::engine::general_purpose::STANDARD.encode([7u8; 31]);
        let pem31 = format!(
            "-----BEGIN {NODE_KEY_PEM_LABEL}-----\n{short}\n-----END {NODE_KEY_PEM_LABEL}-----\n"
        );
        assert!(parse_record(&pem31).is_err());
        assert!(
            parse_record("-----BEGIN PRIVATE KEY-----\nAA==\n-----END PRIVATE KEY-----\n").is_err()
        );
        assert!(!is_record("-----BEGIN PRIVATE KEY-----"));
        assert!(
            parse_record(&format!(
                "-----BEGIN {NODE_KEY_PEM_LABEL}-----\n!!\n-----END {NODE_KEY_PEM_LABEL}-----"
            ))
            .is_err()
        );
    }
}
