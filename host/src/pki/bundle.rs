//! The PKI bundle file `gatehouse pki init` writes and every replica loads.
//!
//! JSON. The public parts are in clear, so operators and `gatehouse pki trust` can read them
//! without the secret: the trust domain, the node CA certificate (PEM), the join signing key's
//! SubjectPublicKeyInfo and the join encryption public key. The private parts (both P-256
//! keys as PKCS#8, the X25519 key and the challenge key) are one AES-256-GCM ciphertext under
//! a key Argon2id derives from the operator's secret, with the parameters and salt recorded
//! beside it. The associated data covers every clear field, so changing any of them (or the
//! ciphertext) makes the bundle refuse to open, the same way a wrong secret does; after
//! opening, the keys are checked to be the ones the clear fields publish.
//!
//! A bundle that has been rotated (`gatehouse pki rotate`) is format v2: it adds the rotation
//! count and the previous keys with their retire times, public parts in clear beside the
//! current ones and private parts in the same ciphertext. A bundle never rotated is written
//! as v1, byte for byte what hosts before rotation read.

use aws_lc_rs::aead::{AES_256_GCM, Aad, NONCE_LEN, Nonce, RandomizedNonceKey};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use super::rotation::{CaParts, PreviousParts, Retiring};
use super::{Parts, Pki, PkiError};

/// The `format` field of a bundle without rotation state.
const FORMAT: &str = "gatehouse-pki/v1";
/// The `format` field of a bundle with rotation state (`sequence`, `previous`).
const FORMAT_V2: &str = "gatehouse-pki/v2";
/// The only KDF bundles use.
const KDF: &str = "argon2id";
/// Argon2 version 1.3.
const ARGON2_VERSION: u32 = 0x13;
/// Argon2id parameters written into new bundles: 64 MiB, 3 passes, 1 lane (RFC 9106's
/// second recommended option, on one lane).
const M_COST_KIB: u32 = 64 * 1024;
const T_COST: u32 = 3;
const P_COST: u32 = 1;
/// Bounds on the parameters a bundle may ask for when it is opened, so a crafted file can
/// neither exhaust memory nor CPU before the secret is even checked.
const MAX_M_COST_KIB: u32 = 1024 * 1024;
const MAX_T_COST: u32 = 16;
const MAX_P_COST: u32 = 16;
const SALT_LEN: usize = 16;
/// Shortest secret accepted.
pub const MIN_SECRET_LEN: usize = 16;
/// Largest bundle file read.
const MAX_BUNDLE_LEN: usize = 64 * 1024;

/// Why a bundle could not be written or opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BundleError {
    /// The secret is shorter than [`MIN_SECRET_LEN`] bytes.
    #[error("the secret must be at least {MIN_SECRET_LEN} bytes")]
    SecretTooShort,
    /// The file is larger than any bundle this code writes.
    #[error("the bundle is larger than {MAX_BUNDLE_LEN} bytes")]
    TooLarge,
    /// The file is not bundle JSON, or a field is not of the expected form.
    #[error("malformed bundle: {0}")]
    Malformed(String),
    /// The bundle is of another format version or KDF.
    #[error("unsupported bundle format {0:?}")]
    UnsupportedFormat(String),
    /// The recorded Argon2id parameters are out of the accepted bounds.
    #[error("the bundle's Argon2id parameters are out of bounds")]
    KdfParams,
    /// The ciphertext does not open: the secret is wrong or the file was changed.
    #[error("the bundle does not open: wrong secret, or the file was modified")]
    WrongSecretOrTampered,
    /// The decrypted keys do not match the public parts, or do not load.
    #[error("the bundle's keys are inconsistent: {0}")]
    Inconsistent(&'static str),
}

/// The file as written: public parts in clear, private parts sealed.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct BundleFile {
    format: String,
    trust_domain: String,
    node_ca_pem: String,
    #[serde(with = "gatehouse_proto::b64")]
    join_signing_key: Vec<u8>,
    #[serde(with = "gatehouse_proto::b64")]
    join_encryption_key: Vec<u8>,
    /// How many rotations the keys have been through (v2).
    #[serde(default, skip_serializing_if = "is_zero")]
    sequence: u64,
    /// The keys rotations replaced, public parts, each with its retire time (v2).
    #[serde(default, skip_serializing_if = "PreviousFile::is_empty")]
    previous: PreviousFile,
    kdf: Kdf,
    /// The AES-256-GCM nonce followed by the ciphertext and tag of [`Secrets`] as JSON.
    #[serde(with = "gatehouse_proto::b64")]
    sealed: Vec<u8>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The public parts of the previous keys.
#[derive(Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PreviousFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    node_ca: Option<PreviousCaFile>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    join_signing_key: Option<PreviousKeyFile>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    join_encryption_key: Option<PreviousKeyFile>,
}

impl PreviousFile {
    fn is_empty(&self) -> bool {
        self.node_ca.is_none()
            && self.join_signing_key.is_none()
            && self.join_encryption_key.is_none()
    }
}

/// A previous node CA: its certificate, and when it stops being accepted (ms since the epoch).
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PreviousCaFile {
    pem: String,
    retire_at: i64,
}

/// A previous join key's public part (SubjectPublicKeyInfo or X25519 key), and its retire time.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PreviousKeyFile {
    #[serde(with = "gatehouse_proto::b64")]
    key: Vec<u8>,
    retire_at: i64,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Kdf {
    alg: String,
    version: u32,
    m_cost_kib: u32,
    t_cost: u32,
    p_cost: u32,
    #[serde(with = "gatehouse_proto::b64")]
    salt: Vec<u8>,
}

/// The private parts, as JSON inside the ciphertext.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Secrets {
    /// The node CA key, PKCS#8.
    #[serde(with = "gatehouse_proto::b64")]
    node_ca_key: Vec<u8>,
    /// The join signing key, PKCS#8.
    #[serde(with = "gatehouse_proto::b64")]
    join_signing_key: Vec<u8>,
    /// The X25519 private key, 32 bytes.
    #[serde(with = "gatehouse_proto::b64")]
    join_encryption_key: Vec<u8>,
    /// The AES-256-GCM challenge key, 32 bytes.
    #[serde(with = "gatehouse_proto::b64")]
    challenge_key: Vec<u8>,
    /// The previous node CA key, PKCS#8 (v2).
    #[serde(
        default,
        with = "gatehouse_proto::b64::option",
        skip_serializing_if = "Option::is_none"
    )]
    previous_node_ca_key: Option<Vec<u8>>,
    /// The previous join signing key, PKCS#8 (v2).
    #[serde(
        default,
        with = "gatehouse_proto::b64::option",
        skip_serializing_if = "Option::is_none"
    )]
    previous_join_signing_key: Option<Vec<u8>>,
    /// The previous X25519 private key, 32 bytes (v2).
    #[serde(
        default,
        with = "gatehouse_proto::b64::option",
        skip_serializing_if = "Option::is_none"
    )]
    previous_join_encryption_key: Option<Vec<u8>>,
}

impl Drop for Secrets {
    fn drop(&mut self) {
        use zeroize::Zeroize as _;
        self.node_ca_key.zeroize();
        self.join_signing_key.zeroize();
        self.join_encryption_key.zeroize();
        self.challenge_key.zeroize();
        self.previous_node_ca_key.zeroize();
        self.previous_join_signing_key.zeroize();
        self.previous_join_encryption_key.zeroize();
    }
}

/// The associated data: every clear field, each length-prefixed, in a fixed order; for v2 the
/// rotation count and the previous keys' JSON after them.
fn associated_data(file: &BundleFile) -> Vec<u8> {
    let k = &file.kdf;
    let fields: [&[u8]; 11] = [
        file.format.as_bytes(),
        file.trust_domain.as_bytes(),
        file.node_ca_pem.as_bytes(),
        &file.join_signing_key,
        &file.join_encryption_key,
        k.alg.as_bytes(),
        &k.version.to_be_bytes(),
        &k.m_cost_kib.to_be_bytes(),
        &k.t_cost.to_be_bytes(),
        &k.p_cost.to_be_bytes(),
        &k.salt,
    ];
    let mut aad = Vec::new();
    for field in fields {
        // Every field is far below 4 GiB (the file is capped at 64 KiB).
        aad.extend_from_slice(&u32::try_from(field.len()).unwrap_or(u32::MAX).to_be_bytes());
        aad.extend_from_slice(field);
    }
    if file.format == FORMAT_V2 {
        // A struct serializes the same way for writer and reader: its fields in order.
        let previous = serde_json::to_vec(&file.previous).unwrap_or_default();
        for field in [&file.sequence.to_be_bytes()[..], &previous] {
            aad.extend_from_slice(&u32::try_from(field.len()).unwrap_or(u32::MAX).to_be_bytes());
            aad.extend_from_slice(field);
        }
    }
    aad
}

/// The AES-256-GCM key Argon2id derives from `secret` under `kdf`.
fn derive_key(secret: &[u8], kdf: &Kdf) -> Result<RandomizedNonceKey, BundleError> {
    if kdf.alg != KDF || kdf.version != ARGON2_VERSION {
        return Err(BundleError::UnsupportedFormat(format!(
            "{} v{}",
            kdf.alg, kdf.version
        )));
    }
    if kdf.m_cost_kib > MAX_M_COST_KIB || kdf.t_cost > MAX_T_COST || kdf.p_cost > MAX_P_COST {
        return Err(BundleError::KdfParams);
    }
    let params = argon2::Params::new(kdf.m_cost_kib, kdf.t_cost, kdf.p_cost, Some(32))
        .map_err(|_| BundleError::KdfParams)?;
    let argon = argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params);
    let mut key = Zeroizing::new([0u8; 32]);
    argon
        .hash_password_into(secret, &kdf.salt, key.as_mut())
        .map_err(|_| BundleError::KdfParams)?;
    RandomizedNonceKey::new(&AES_256_GCM, key.as_ref()).map_err(|_| BundleError::KdfParams)
}

fn check_secret(secret: &[u8]) -> Result<(), BundleError> {
    if secret.len() < MIN_SECRET_LEN {
        Err(BundleError::SecretTooShort)
    } else {
        Ok(())
    }
}

fn key_32(bytes: &[u8], what: &'static str) -> Result<Zeroizing<[u8; 32]>, BundleError> {
    let mut out = Zeroizing::new([0u8; 32]);
    if bytes.len() != 32 {
        return Err(BundleError::Inconsistent(what));
    }
    out.copy_from_slice(bytes);
    Ok(out)
}

impl Pki {
    /// Writes the bundle: public parts in clear, private parts sealed under a key Argon2id
    /// derives from `secret` (at least [`MIN_SECRET_LEN`] bytes) with a fresh salt.
    pub fn to_bundle(&self, secret: &[u8]) -> Result<String, PkiError> {
        check_secret(secret)?;
        let mut salt = vec![0u8; SALT_LEN];
        aws_lc_rs::rand::fill(&mut salt).map_err(|_| PkiError::Crypto("randomness"))?;
        let kdf = Kdf {
            alg: KDF.to_owned(),
            version: ARGON2_VERSION,
            m_cost_kib: M_COST_KIB,
            t_cost: T_COST,
            p_cost: P_COST,
            salt,
        };
        let parts = self.parts()?;
        let previous = &parts.previous;
        let secrets = Secrets {
            node_ca_key: parts.node_ca_key_pkcs8.to_vec(),
            join_signing_key: parts.signing_key_pkcs8.to_vec(),
            join_encryption_key: parts.encryption_secret.to_vec(),
            challenge_key: parts.challenge_secret.to_vec(),
            previous_node_ca_key: previous.node_ca.as_ref().map(|p| p.key.key_pkcs8.to_vec()),
            previous_join_signing_key: previous.signing.as_ref().map(|p| p.key.to_vec()),
            previous_join_encryption_key: previous.encryption.as_ref().map(|p| p.key.to_vec()),
        };
        let mut in_out = Zeroizing::new(
            serde_json::to_vec(&secrets).map_err(|e| BundleError::Malformed(e.to_string()))?,
        );
        let previous_file = PreviousFile {
            node_ca: self
                .previous_node_ca()
                .map(|(pem, retire_at)| PreviousCaFile {
                    pem: pem.to_owned(),
                    retire_at,
                }),
            join_signing_key: self
                .previous_signing_spki()
                .zip(previous.signing.as_ref())
                .map(|(spki, p)| PreviousKeyFile {
                    key: spki.to_vec(),
                    retire_at: p.retire_at_ms,
                }),
            join_encryption_key: self
                .previous_encryption_public()
                .zip(previous.encryption.as_ref())
                .map(|(public, p)| PreviousKeyFile {
                    key: public.to_vec(),
                    retire_at: p.retire_at_ms,
                }),
        };
        let rotated = parts.sequence > 0 || !previous_file.is_empty();
        let mut file = BundleFile {
            format: if rotated { FORMAT_V2 } else { FORMAT }.to_owned(),
            trust_domain: self.trust_domain.clone(),
            node_ca_pem: self.node_ca_pem.clone(),
            join_signing_key: self.signing_spki.clone(),
            join_encryption_key: self.join_encryption_public().to_vec(),
            sequence: parts.sequence,
            previous: previous_file,
            kdf,
            sealed: Vec::new(),
        };
        let key = derive_key(secret, &file.kdf)?;
        let nonce = key
            .seal_in_place_append_tag(Aad::from(associated_data(&file)), &mut *in_out)
            .map_err(|_| PkiError::Crypto("bundle encryption"))?;
        file.sealed = [nonce.as_ref().as_slice(), in_out.as_slice()].concat();
        let mut text = serde_json::to_string_pretty(&file)
            .map_err(|e| BundleError::Malformed(e.to_string()))?;
        text.push('\n');
        Ok(text)
    }

    /// Opens a bundle [`Pki::to_bundle`] wrote, with the same `secret`.
    ///
    /// A wrong secret and a modified file are the same error
    /// ([`BundleError::WrongSecretOrTampered`]); the keys that open are then checked against
    /// the public parts.
    pub fn from_bundle(text: &str, secret: &[u8]) -> Result<Pki, PkiError> {
        check_secret(secret)?;
        let file = parse_file(text)?;
        let key = derive_key(secret, &file.kdf)?;
        if file.sealed.len() < NONCE_LEN {
            return Err(BundleError::Malformed("the sealed part is too short".into()).into());
        }
        let (nonce, ciphertext) = file.sealed.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce)
            .map_err(|_| BundleError::WrongSecretOrTampered)?;
        let mut in_out = Zeroizing::new(ciphertext.to_vec());
        let plaintext = key
            .open_in_place(nonce, Aad::from(associated_data(&file)), &mut in_out)
            .map_err(|_| BundleError::WrongSecretOrTampered)?;
        let secrets: Secrets = serde_json::from_slice(plaintext)
            .map_err(|_| BundleError::Inconsistent("the sealed keys do not parse"))?;

        let node_ca_der = CertificateDer::from_pem_slice(file.node_ca_pem.as_bytes())
            .map_err(|_| BundleError::Malformed("nodeCaPem is not one PEM certificate".into()))?
            .to_vec();
        let previous = previous_parts(&file, &secrets)?;
        let pki = Pki::assemble(Parts {
            trust_domain: file.trust_domain.clone(),
            node_ca_pem: file.node_ca_pem.clone(),
            node_ca_der,
            node_ca_key_pkcs8: Zeroizing::new(secrets.node_ca_key.clone()),
            signing_key_pkcs8: Zeroizing::new(secrets.join_signing_key.clone()),
            encryption_secret: key_32(
                &secrets.join_encryption_key,
                "the join encryption key is not 32 bytes",
            )?,
            challenge_secret: key_32(&secrets.challenge_key, "the challenge key is not 32 bytes")?,
            previous,
            sequence: file.sequence,
        })?;
        if pki.signing_spki != file.join_signing_key {
            return Err(
                BundleError::Inconsistent("the join signing key is not the published one").into(),
            );
        }
        if pki.join_encryption_public().as_slice() != file.join_encryption_key {
            return Err(BundleError::Inconsistent(
                "the join encryption key is not the published one",
            )
            .into());
        }
        let published = &file.previous;
        if published
            .join_signing_key
            .as_ref()
            .map(|p| p.key.as_slice())
            != pki.previous_signing_spki()
        {
            return Err(BundleError::Inconsistent(
                "the previous join signing key is not the published one",
            )
            .into());
        }
        if published
            .join_encryption_key
            .as_ref()
            .map(|p| p.key.as_slice())
            != pki
                .previous_encryption_public()
                .as_ref()
                .map(|k| k.as_slice())
        {
            return Err(BundleError::Inconsistent(
                "the previous join encryption key is not the published one",
            )
            .into());
        }
        Ok(pki)
    }
}

/// The previous keys' private parts from the sealed secrets, with the retire times the clear
/// part records; a public part without its private part (or the reverse) is inconsistent.
fn previous_parts(file: &BundleFile, secrets: &Secrets) -> Result<PreviousParts, BundleError> {
    use BundleError::Inconsistent;
    let published = &file.previous;
    let node_ca = match (&published.node_ca, &secrets.previous_node_ca_key) {
        (None, None) => None,
        (Some(ca), Some(key)) => Some(Retiring {
            key: CaParts {
                der: CertificateDer::from_pem_slice(ca.pem.as_bytes())
                    .map_err(|_| {
                        BundleError::Malformed(
                            "previous.nodeCa.pem is not one PEM certificate".into(),
                        )
                    })?
                    .to_vec(),
                pem: ca.pem.clone(),
                key_pkcs8: Zeroizing::new(key.clone()),
            },
            retire_at_ms: ca.retire_at,
        }),
        _ => {
            return Err(Inconsistent(
                "the previous node CA is not both in clear and sealed",
            ));
        }
    };
    let signing = match (
        &published.join_signing_key,
        &secrets.previous_join_signing_key,
    ) {
        (None, None) => None,
        (Some(public), Some(key)) => Some(Retiring {
            key: Zeroizing::new(key.clone()),
            retire_at_ms: public.retire_at,
        }),
        _ => {
            return Err(Inconsistent(
                "the previous join signing key is not both in clear and sealed",
            ));
        }
    };
    let encryption = match (
        &published.join_encryption_key,
        &secrets.previous_join_encryption_key,
    ) {
        (None, None) => None,
        (Some(public), Some(key)) => Some(Retiring {
            key: key_32(key, "the previous join encryption key is not 32 bytes")?,
            retire_at_ms: public.retire_at,
        }),
        _ => {
            return Err(Inconsistent(
                "the previous join encryption key is not both in clear and sealed",
            ));
        }
    };
    Ok(PreviousParts {
        node_ca,
        signing,
        encryption,
    })
}

/// A bundle file of this format, not larger than any this code writes.
fn parse_file(text: &str) -> Result<BundleFile, BundleError> {
    if text.len() > MAX_BUNDLE_LEN {
        return Err(BundleError::TooLarge);
    }
    let file: BundleFile =
        serde_json::from_str(text).map_err(|e| BundleError::Malformed(e.to_string()))?;
    let rotated = file.sequence != 0 || !file.previous.is_empty();
    match file.format.as_str() {
        FORMAT_V2 => {}
        // v1's associated data does not cover rotation state: it must have none.
        FORMAT if !rotated => {}
        FORMAT => {
            return Err(BundleError::Malformed(
                "a v1 bundle has no rotation state".into(),
            ));
        }
        other => return Err(BundleError::UnsupportedFormat(other.to_owned())),
    }
    Ok(file)
}

/// The join trust agents pin at `now_ms`, from a bundle's public parts and the API's TLS CA
/// (PEM), read without the secret (what `gatehouse pki trust` writes): during a rotation's
/// overlap window, the previous node CA and join signing key too. The clear fields are checked
/// to be of their form (a CA certificate, a P-256 SubjectPublicKeyInfo, 32 bytes of X25519
/// key, a valid trust domain); that they belong to the sealed keys is checked only by opening
/// the bundle, which every host does at start.
pub fn join_trust_from_bundle(
    text: &str,
    tls_ca_pem: &str,
    now_ms: i64,
) -> Result<gatehouse_proto::JoinTrust, PkiError> {
    let file = parse_file(text)?;
    super::identity::validate_trust_domain(&file.trust_domain)?;
    let node_ca_der = CertificateDer::from_pem_slice(file.node_ca_pem.as_bytes())
        .map_err(|_| BundleError::Malformed("nodeCaPem is not one PEM certificate".into()))?;
    match x509_parser::parse_x509_certificate(&node_ca_der) {
        Ok((rest, cert)) if rest.is_empty() && cert.is_ca() => {}
        _ => return Err(BundleError::Malformed("nodeCaPem is not a CA certificate".into()).into()),
    }
    let is_ca = |pem: &str| {
        CertificateDer::from_pem_slice(pem.as_bytes()).is_ok_and(|der| {
            matches!(x509_parser::parse_x509_certificate(&der),
                Ok((rest, cert)) if rest.is_empty() && cert.is_ca())
        })
    };
    let is_p256_spki = |der: &[u8]| {
        use x509_parser::prelude::FromDer as _;
        matches!(x509_parser::x509::SubjectPublicKeyInfo::from_der(der),
            Ok((rest, spki)) if rest.is_empty() && spki.subject_public_key.data.len() == 65)
    };
    if !is_p256_spki(&file.join_signing_key) {
        return Err(BundleError::Malformed(
            "joinSigningKey is not a P-256 SubjectPublicKeyInfo".into(),
        )
        .into());
    }
    let mut node_ca_pem = file.node_ca_pem.clone();
    if let Some(previous) = file
        .previous
        .node_ca
        .as_ref()
        .filter(|p| now_ms < p.retire_at)
    {
        if !is_ca(&previous.pem) {
            return Err(
                BundleError::Malformed("previous.nodeCa is not a CA certificate".into()).into(),
            );
        }
        if !node_ca_pem.ends_with('\n') {
            node_ca_pem.push('\n');
        }
        node_ca_pem.push_str(&previous.pem);
    }
    let mut other_join_signing_keys = Vec::new();
    if let Some(previous) = file
        .previous
        .join_signing_key
        .as_ref()
        .filter(|p| now_ms < p.retire_at)
    {
        if !is_p256_spki(&previous.key) {
            return Err(BundleError::Malformed(
                "previous.joinSigningKey is not a P-256 SubjectPublicKeyInfo".into(),
            )
            .into());
        }
        other_join_signing_keys.push(previous.key.clone());
    }
    if file.join_encryption_key.len() != 32 {
        return Err(BundleError::Malformed("joinEncryptionKey is not 32 bytes".into()).into());
    }
    let tls_ca = CertificateDer::pem_slice_iter(tls_ca_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| BundleError::Malformed("the TLS CA is not PEM certificates".into()))?;
    if tls_ca.is_empty() {
        return Err(BundleError::Malformed("the TLS CA file holds no certificate".into()).into());
    }
    Ok(gatehouse_proto::JoinTrust {
        trust_domain: file.trust_domain.clone(),
        node_ca_pem,
        tls_ca_pem: tls_ca_pem.to_owned(),
        join_signing_key: file.join_signing_key.clone(),
        join_encryption_key: file.join_encryption_key.clone(),
        other_join_signing_keys,
        sequence: file.sequence,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"correct horse battery staple";

    fn edit(text: &str, f: impl FnOnce(&mut serde_json::Value)) -> String {
        let mut value: serde_json::Value = serde_json::from_str(text).unwrap();
        f(&mut value);
        value.to_string()
    }

    fn err(text: &str, secret: &[u8]) -> BundleError {
        match Pki::from_bundle(text, secret).unwrap_err() {
            PkiError::Bundle(e) => e,
            other => panic!("not a bundle error: {other}"),
        }
    }

    #[test]
    fn round_trip() {
        let pki = Pki::generate("example.org").unwrap();
        let text = pki.to_bundle(SECRET).unwrap();
        let back = Pki::from_bundle(&text, SECRET).unwrap();
        assert_eq!(back.trust_domain(), "example.org");
        assert_eq!(back.node_ca_der(), pki.node_ca_der());
        assert_eq!(back.node_ca_pem(), pki.node_ca_pem());
        assert_eq!(back.join_signing_spki(), pki.join_signing_spki());
        assert_eq!(
            back.token_opening_key().to_bytes(),
            pki.token_opening_key().to_bytes()
        );
        assert_eq!(back.join_encryption_public(), pki.join_encryption_public());
        assert_eq!(*back.challenge_secret, *pki.challenge_secret);
        // The loaded CA key is the CA's: what it issues chains to the CA.
        let sealed = pki.seal_state("a", b"b", b"state", 0).unwrap();
        assert_eq!(back.open_state("a", b"b", &sealed, 0).unwrap(), b"state");

        // Public parts are readable without the secret; private parts are not in clear.
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["trustDomain"], "example.org");
        assert_eq!(value["kdf"]["alg"], "argon2id");
        assert_eq!(value["kdf"]["mCostKib"], M_COST_KIB);
        assert_eq!(
            value["joinEncryptionKey"],
            gatehouse_proto::b64::encode(pki.join_encryption_public())
        );
        assert!(!text.contains(&gatehouse_proto::b64::encode(
            pki.token_opening_key().to_bytes()
        )));
        assert!(!text.contains(&gatehouse_proto::b64::encode(*pki.challenge_secret)));
    }

    #[test]
    fn a_rotated_bundle_round_trips_and_a_never_rotated_one_stays_v1() {
        use crate::pki::KeyKind;
        let pki = Pki::generate("td").unwrap();
        let v1 = pki.to_bundle(SECRET).unwrap();
        assert!(v1.contains("\"gatehouse-pki/v1\"") && !v1.contains("previous"));
        let now = time::OffsetDateTime::now_utc().unix_timestamp() * 1000;
        let hour = 3_600_000;
        let rotated = pki.rotate(&KeyKind::ALL, now, hour).unwrap();
        let text = rotated.to_bundle(SECRET).unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["format"], "gatehouse-pki/v2");
        assert_eq!(value["sequence"], 1);
        assert_eq!(value["previous"]["nodeCa"]["pem"], pki.node_ca_pem());
        assert_eq!(value["previous"]["nodeCa"]["retireAt"], now + hour);

        let back = Pki::from_bundle(&text, SECRET).unwrap();
        assert_eq!(back.sequence(), 1);
        assert_eq!(back.retiring(), rotated.retiring());
        assert_eq!(back.node_ca_der(), rotated.node_ca_der());
        assert_eq!(
            back.live_node_cas_der(now),
            [rotated.node_ca_der(), pki.node_ca_der()]
        );
        assert_eq!(back.join_signing_spki(), rotated.join_signing_spki());
        assert_eq!(back.signer(now).1, pki.join_signing_key_id());
        // The previous encryption key came back too: what was sealed to it opens.
        let token = gatehouse_proto::TokenString {
            id: "tok_a".into(),
            secret: vec![7; 32],
        };
        let sealed =
            gatehouse_proto::seal_token(&pki.join_encryption_public(), &token, &[1; 32]).unwrap();
        assert_eq!(back.open_token(&sealed, &[1; 32], now).unwrap(), token);

        // The rotation state is authenticated: a window stretched, or the previous keys or
        // the version dropped, does not open.
        let stretched = edit(&text, |v| {
            v["previous"]["nodeCa"]["retireAt"] = (now + 100 * hour).into()
        });
        assert_eq!(err(&stretched, SECRET), BundleError::WrongSecretOrTampered);
        let stripped = edit(&text, |v| {
            v.as_object_mut().unwrap().remove("previous");
        });
        assert_eq!(err(&stripped, SECRET), BundleError::WrongSecretOrTampered);
        let renumbered = edit(&text, |v| v["sequence"] = 7.into());
        assert_eq!(err(&renumbered, SECRET), BundleError::WrongSecretOrTampered);
        let downgraded = edit(&text, |v| v["format"] = "gatehouse-pki/v1".into());
        assert!(matches!(
            err(&downgraded, SECRET),
            BundleError::Malformed(_)
        ));

        // The trust file of the window names both CAs and both signing keys; after it, one.
        let trust = join_trust_from_bundle(&text, pki.node_ca_pem(), now).unwrap();
        assert_eq!(trust.sequence, 1);
        assert_eq!(trust.join_signing_key, rotated.join_signing_spki());
        assert_eq!(trust.other_join_signing_keys, [pki.join_signing_spki()]);
        assert_eq!(trust.join_encryption_key, rotated.join_encryption_public());
        assert!(trust.node_ca_pem.starts_with(rotated.node_ca_pem()));
        assert!(trust.node_ca_pem.contains(pki.node_ca_pem()));
        assert_eq!(trust, rotated.join_trust(pki.node_ca_pem(), now));
        let later = join_trust_from_bundle(&text, pki.node_ca_pem(), now + hour).unwrap();
        assert!(later.other_join_signing_keys.is_empty());
        assert_eq!(later.node_ca_pem, rotated.node_ca_pem());
        assert_eq!(later, rotated.join_trust(pki.node_ca_pem(), now + hour));
    }

    #[test]
    fn wrong_secret() {
        let text = Pki::generate("td").unwrap().to_bundle(SECRET).unwrap();
        assert_eq!(
            err(&text, b"another secret of enough length"),
            BundleError::WrongSecretOrTampered
        );
    }

    #[test]
    fn short_secret() {
        let pki = Pki::generate("td").unwrap();
        assert_eq!(
            pki.to_bundle(b"short").unwrap_err(),
            PkiError::Bundle(BundleError::SecretTooShort)
        );
        let text = pki.to_bundle(SECRET).unwrap();
        assert_eq!(err(&text, &SECRET[..15]), BundleError::SecretTooShort);
    }

    #[test]
    fn tampered() {
        let pki = Pki::generate("td").unwrap();
        let text = pki.to_bundle(SECRET).unwrap();
        let other = Pki::generate("td").unwrap();
        let flipped = edit(&text, |v| {
            let mut sealed = gatehouse_proto::b64::decode(v["sealed"].as_str().unwrap()).unwrap();
            let last = sealed.len() - 1;
            sealed[last] ^= 1;
            v["sealed"] = gatehouse_proto::b64::encode(sealed).into();
        });
        let cases = [
            flipped,
            edit(&text, |v| v["trustDomain"] = "other".into()),
            edit(&text, |v| v["nodeCaPem"] = other.node_ca_pem().into()),
            edit(&text, |v| {
                v["joinSigningKey"] = gatehouse_proto::b64::encode(other.join_signing_spki()).into()
            }),
            edit(&text, |v| {
                v["joinEncryptionKey"] =
                    gatehouse_proto::b64::encode(other.join_encryption_public()).into()
            }),
            edit(&text, |v| v["kdf"]["tCost"] = 2.into()),
            edit(&text, |v| {
                v["kdf"]["salt"] = gatehouse_proto::b64::encode([0u8; 16]).into()
            }),
        ];
        for case in cases {
            assert_eq!(err(&case, SECRET), BundleError::WrongSecretOrTampered);
        }
    }

    #[test]
    fn malformed() {
        let text = Pki::generate("td").unwrap().to_bundle(SECRET).unwrap();
        assert!(matches!(err("not json", SECRET), BundleError::Malformed(_)));
        assert!(matches!(err("{}", SECRET), BundleError::Malformed(_)));
        assert!(matches!(
            err(&edit(&text, |v| v["extra"] = 1.into()), SECRET),
            BundleError::Malformed(_)
        ));
        assert!(matches!(
            err(&edit(&text, |v| v["sealed"] = "AAAA".into()), SECRET),
            BundleError::Malformed(_)
        ));
        assert_eq!(
            err(
                &edit(&text, |v| v["format"] = "gatehouse-pki/v9".into()),
                SECRET
            ),
            BundleError::UnsupportedFormat("gatehouse-pki/v9".into())
        );
        assert!(matches!(
            err(&edit(&text, |v| v["kdf"]["alg"] = "scrypt".into()), SECRET),
            BundleError::UnsupportedFormat(_)
        ));
        // A crafted file cannot make the host allocate terabytes before checking the secret.
        assert_eq!(
            err(
                &edit(&text, |v| v["kdf"]["mCostKib"] = u32::MAX.into()),
                SECRET
            ),
            BundleError::KdfParams
        );
        assert_eq!(
            err(&edit(&text, |v| v["kdf"]["pCost"] = 0.into()), SECRET),
            BundleError::KdfParams
        );
        assert_eq!(
            err(&"x".repeat(MAX_BUNDLE_LEN + 1), SECRET),
            BundleError::TooLarge
        );
    }

    #[test]
    fn display() {
        assert_eq!(
            BundleError::SecretTooShort.to_string(),
            "the secret must be at least 16 bytes"
        );
        assert_eq!(
            BundleError::TooLarge.to_string(),
            "the bundle is larger than 65536 bytes"
        );
        assert_eq!(
            BundleError::Malformed("x".into()).to_string(),
            "malformed bundle: x"
        );
        assert_eq!(
            BundleError::UnsupportedFormat("v9".into()).to_string(),
            "unsupported bundle format \"v9\""
        );
        assert_eq!(
            BundleError::KdfParams.to_string(),
            "the bundle's Argon2id parameters are out of bounds"
        );
        assert_eq!(
            BundleError::WrongSecretOrTampered.to_string(),
            "the bundle does not open: wrong secret, or the file was modified"
        );
        assert_eq!(
            BundleError::Inconsistent("the keys differ").to_string(),
            "the bundle's keys are inconsistent: the keys differ"
        );
    }
}
