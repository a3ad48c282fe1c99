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

use aws_lc_rs::aead::{AES_256_GCM, Aad, NONCE_LEN, Nonce, RandomizedNonceKey};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use super::{Parts, Pki, PkiError};

/// The `format` field of every bundle this code writes.
const FORMAT: &str = "gatehouse-pki/v1";
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
    kdf: Kdf,
    /// The AES-256-GCM nonce followed by the ciphertext and tag of [`Secrets`] as JSON.
    #[serde(with = "gatehouse_proto::b64")]
    sealed: Vec<u8>,
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
}

impl Drop for Secrets {
    fn drop(&mut self) {
        use zeroize::Zeroize as _;
        self.node_ca_key.zeroize();
        self.join_signing_key.zeroize();
        self.join_encryption_key.zeroize();
        self.challenge_key.zeroize();
    }
}

/// The associated data: every clear field, each length-prefixed, in a fixed order.
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
        let secrets = Secrets {
            node_ca_key: self.ca.key().serialize_der(),
            join_signing_key: self
                .signing_key
                .to_pkcs8v1()
                .map_err(|_| PkiError::Crypto("join signing key export"))?
                .as_ref()
                .to_vec(),
            join_encryption_key: self.token_key.to_bytes().to_vec(),
            challenge_key: self.challenge_secret.to_vec(),
        };
        let mut in_out = Zeroizing::new(
            serde_json::to_vec(&secrets).map_err(|e| BundleError::Malformed(e.to_string()))?,
        );
        let mut file = BundleFile {
            format: FORMAT.to_owned(),
            trust_domain: self.trust_domain.clone(),
            node_ca_pem: self.node_ca_pem.clone(),
            join_signing_key: self.signing_spki.clone(),
            join_encryption_key: self.encryption_public.to_vec(),
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
        })?;
        if pki.signing_spki != file.join_signing_key {
            return Err(
                BundleError::Inconsistent("the join signing key is not the published one").into(),
            );
        }
        if pki.encryption_public.as_slice() != file.join_encryption_key {
            return Err(BundleError::Inconsistent(
                "the join encryption key is not the published one",
            )
            .into());
        }
        Ok(pki)
    }
}

/// A bundle file of this format, not larger than any this code writes.
fn parse_file(text: &str) -> Result<BundleFile, BundleError> {
    if text.len() > MAX_BUNDLE_LEN {
        return Err(BundleError::TooLarge);
    }
    let file: BundleFile =
        serde_json::from_str(text).map_err(|e| BundleError::Malformed(e.to_string()))?;
    if file.format != FORMAT {
        return Err(BundleError::UnsupportedFormat(file.format));
    }
    Ok(file)
}

/// The join trust agents pin, from a bundle's public parts and the API's TLS CA (PEM), read
/// without the secret (what `gatehouse pki trust` writes). The clear fields are checked to be
/// of their form (a CA certificate, a P-256 SubjectPublicKeyInfo, 32 bytes of X25519 key, a
/// valid trust domain); that they belong to the sealed keys is checked only by opening the
/// bundle, which every host does at start.
pub fn join_trust_from_bundle(
    text: &str,
    tls_ca_pem: &str,
) -> Result<gatehouse_proto::JoinTrust, PkiError> {
    let file = parse_file(text)?;
    super::identity::validate_trust_domain(&file.trust_domain)?;
    let node_ca_der = CertificateDer::from_pem_slice(file.node_ca_pem.as_bytes())
        .map_err(|_| BundleError::Malformed("nodeCaPem is not one PEM certificate".into()))?;
    match x509_parser::parse_x509_certificate(&node_ca_der) {
        Ok((rest, cert)) if rest.is_empty() && cert.is_ca() => {}
        _ => return Err(BundleError::Malformed("nodeCaPem is not a CA certificate".into()).into()),
    }
    use x509_parser::prelude::FromDer as _;
    match x509_parser::x509::SubjectPublicKeyInfo::from_der(&file.join_signing_key) {
        Ok((rest, spki)) if rest.is_empty() && spki.subject_public_key.data.len() == 65 => {}
        _ => {
            return Err(BundleError::Malformed(
                "joinSigningKey is not a P-256 SubjectPublicKeyInfo".into(),
            )
            .into());
        }
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
        node_ca_pem: file.node_ca_pem.clone(),
        tls_ca_pem: tls_ca_pem.to_owned(),
        join_signing_key: file.join_signing_key.clone(),
        join_encryption_key: file.join_encryption_key.clone(),
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
                &edit(&text, |v| v["format"] = "gatehouse-pki/v2".into()),
                SECRET
            ),
            BundleError::UnsupportedFormat("gatehouse-pki/v2".into())
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
