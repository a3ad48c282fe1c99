//! The host's keys and what it does with them: the node CA that issues node certificates, the
//! join signing key that signs responses, the join encryption key tokens are sealed to, and
//! the challenge key that seals attestors' state between rounds.
//!
//! [`Pki`] is the loaded bundle (`gatehouse pki init` writes it, encrypted under the
//! operator's secret; every replica loads the same one). Around it: [`verify_csr`] checks a
//! join's CSR, [`identity`] reads node identities back from certificates, [`verify`] is the
//! native crypto attestors call, and [`dev_tls`] makes throwaway TLS material for
//! `gatehouse serve --dev`. All crypto is aws-lc-rs; certificates are built with rcgen and
//! parsed with x509-parser.

mod bundle;
mod csr;
mod dev_tls;
pub mod identity;
mod issue;
mod live;
pub mod native;
mod publish;
mod response;
mod rotation;
mod state;
pub mod verify;

use std::fmt;

use aws_lc_rs::aead::{AES_256_GCM, RandomizedNonceKey};
use aws_lc_rs::encoding::AsDer;
use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _};
use gatehouse_proto::{TokenOpener, TokenOpeningKey};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    PKCS_ECDSA_P256_SHA256, PublicKeyData as _,
};
use zeroize::Zeroizing;

pub use bundle::{BundleError, MIN_SECRET_LEN, join_trust_from_bundle};
pub use csr::{CsrError, MAX_CSR_LEN, VerifiedCsr, verify_csr};
pub use dev_tls::{DevTls, dev_tls};
pub use identity::{IdentityError, spiffe_node_id};
pub use issue::{IssueError, IssueRequest, IssuedCert, MAX_URIS, STATEMENT_PREFIX, new_serial};
pub use live::{LivePki, ReplaceError};
pub use publish::{CrlEntry, SpiffeBundle, SpiffeJwk, pem_block};
pub use rcgen::RevocationReason;
pub use rotation::{IssuerError, KeyKind, OpenError, RotationError};
pub use state::{MAX_BINDING_LEN, MAX_STATE_LEN, MAX_STATE_TTL_MS, StateError};

/// How long a generated node CA is valid.
const CA_VALIDITY_DAYS: i64 = 3653;

/// Why a PKI operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PkiError {
    /// The trust domain (or another identity part) is invalid.
    #[error(transparent)]
    Identity(#[from] IdentityError),
    /// The bundle could not be written or opened.
    #[error("PKI bundle: {0}")]
    Bundle(#[from] BundleError),
    /// A node certificate request was refused.
    #[error("node certificate: {0}")]
    Issue(#[from] IssueError),
    /// aws-lc-rs failed to generate a key, sign or draw randomness.
    #[error("cryptographic operation failed: {0}")]
    Crypto(&'static str),
    /// rcgen failed to build a certificate.
    #[error("certificate building failed: {0}")]
    Certificate(String),
    /// A response body did not serialize.
    #[error("response body does not serialize: {0}")]
    Encode(String),
    /// A key rotation was refused.
    #[error("rotation: {0}")]
    Rotation(#[from] RotationError),
}

impl From<rcgen::Error> for PkiError {
    fn from(e: rcgen::Error) -> Self {
        PkiError::Certificate(e.to_string())
    }
}

/// The loaded PKI bundle: everything the JoinService signs, issues, opens and seals with.
///
/// It is shared read-only (`Arc<Pki>`, through [`LivePki`]) by every join; nothing in it
/// changes after loading, though which of its keys are live depends on the time (see
/// [`rotation`]). A rotated bundle replaces it whole. `Debug` shows
/// only public parts.
pub struct Pki {
    trust_domain: String,
    node_ca_der: Vec<u8>,
    node_ca_pem: String,
    /// The node CA as an rcgen issuer (its subject, key identifier and key).
    ca: Issuer<'static, KeyPair>,
    signing_key: EcdsaKeyPair,
    signing_spki: Vec<u8>,
    signing_key_id: String,
    /// The join encryption key, which opens the tokens agents seal to its public key.
    token_key: TokenOpener,
    challenge_secret: Zeroizing<[u8; 32]>,
    challenge_key: RandomizedNonceKey,
    /// The keys a rotation replaced, each until its overlap window ends.
    previous: rotation::Previous,
    /// How many rotations the bundle has been through.
    sequence: u64,
}

impl fmt::Debug for Pki {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pki")
            .field("trust_domain", &self.trust_domain)
            .field("signing_key_id", &self.signing_key_id)
            .finish_non_exhaustive()
    }
}

/// The private and public parts a [`Pki`] is assembled from, as generated or as decrypted
/// from a bundle.
struct Parts {
    trust_domain: String,
    node_ca_pem: String,
    node_ca_der: Vec<u8>,
    node_ca_key_pkcs8: Zeroizing<Vec<u8>>,
    signing_key_pkcs8: Zeroizing<Vec<u8>>,
    encryption_secret: Zeroizing<[u8; 32]>,
    challenge_secret: Zeroizing<[u8; 32]>,
    previous: rotation::PreviousParts,
    sequence: u64,
}

fn random_32() -> Result<Zeroizing<[u8; 32]>, PkiError> {
    let mut bytes = Zeroizing::new([0u8; 32]);
    aws_lc_rs::rand::fill(bytes.as_mut()).map_err(|_| PkiError::Crypto("randomness"))?;
    Ok(bytes)
}

/// A new node CA for `trust_domain`: a P-256 key and a self-signed certificate (10 years,
/// pathlen 0), as PEM, DER and the key's PKCS#8.
fn new_node_ca(trust_domain: &str) -> Result<rotation::CaParts, PkiError> {
    let ca_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
    let mut params = CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(
        DnType::CommonName,
        format!("Gatehouse node CA {trust_domain}"),
    );
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.serial_number = Some(issue::new_serial()?.0);
    let now = time::OffsetDateTime::now_utc();
    // Back-dated an hour for relying parties whose clocks lag.
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(CA_VALIDITY_DAYS);
    let ca_cert = params.self_signed(&ca_key)?;
    Ok(rotation::CaParts {
        pem: ca_cert.pem(),
        der: ca_cert.der().to_vec(),
        key_pkcs8: Zeroizing::new(ca_key.serialize_der()),
    })
}

/// A join signing key from its PKCS#8, and its SubjectPublicKeyInfo.
fn load_signing_key(pkcs8: &[u8]) -> Result<(EcdsaKeyPair, Vec<u8>), PkiError> {
    let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8)
        .map_err(|_| BundleError::Inconsistent("a join signing key does not load"))?;
    let spki = key
        .public_key()
        .as_der()
        .map_err(|_| PkiError::Crypto("join signing key export"))?
        .as_ref()
        .to_vec();
    Ok((key, spki))
}

impl Pki {
    /// Generates a new PKI for `trust_domain` (a SPIFFE trust domain): a P-256 node CA with a
    /// self-signed certificate (10 years, pathlen 0), a P-256 join signing key, an X25519
    /// join encryption key (HPKE, `gatehouse_proto::generate_token_keypair`) and a 32-byte AES-256-GCM challenge key.
    pub fn generate(trust_domain: &str) -> Result<Pki, PkiError> {
        identity::validate_trust_domain(trust_domain)?;
        let rotation::CaParts {
            pem: node_ca_pem,
            der: node_ca_der,
            key_pkcs8: node_ca_key_pkcs8,
        } = new_node_ca(trust_domain)?;

        let rng = aws_lc_rs::rand::SystemRandom::new();
        let signing = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .map_err(|_| PkiError::Crypto("join signing key generation"))?;
        let (token_key, _) = gatehouse_proto::generate_token_keypair()
            .map_err(|_| PkiError::Crypto("join encryption key generation"))?;
        let encryption_secret = Zeroizing::new(token_key.to_bytes());

        Pki::assemble(Parts {
            trust_domain: trust_domain.to_owned(),
            node_ca_pem,
            node_ca_der,
            node_ca_key_pkcs8,
            signing_key_pkcs8: Zeroizing::new(signing.as_ref().to_vec()),
            encryption_secret,
            challenge_secret: random_32()?,
            previous: rotation::PreviousParts::default(),
            sequence: 0,
        })
    }

    /// Builds the usable keys from their parts and checks that they belong together (the CA
    /// key is the CA certificate's, which is a CA of the trust domain's form).
    fn assemble(parts: Parts) -> Result<Pki, PkiError> {
        use BundleError::Inconsistent;
        identity::validate_trust_domain(&parts.trust_domain)?;
        let ca_key = KeyPair::try_from(parts.node_ca_key_pkcs8.as_slice())
            .map_err(|_| Inconsistent("the node CA key does not load"))?;
        if ca_key.algorithm() != &PKCS_ECDSA_P256_SHA256 {
            return Err(Inconsistent("the node CA key is not P-256").into());
        }
        let (rest, ca_cert) = x509_parser::parse_x509_certificate(&parts.node_ca_der)
            .map_err(|_| Inconsistent("the node CA certificate does not parse"))?;
        if !rest.is_empty() || !ca_cert.is_ca() {
            return Err(Inconsistent("the node CA certificate is not a CA certificate").into());
        }
        if ca_cert.public_key().raw != ca_key.subject_public_key_info().as_slice() {
            return Err(Inconsistent("the node CA key is not the CA certificate's").into());
        }
        let ca = Issuer::from_ca_cert_der(&parts.node_ca_der.clone().into(), ca_key)?;

        let (signing_key, signing_spki) = load_signing_key(&parts.signing_key_pkcs8)?;

        let token_key = TokenOpener::new(TokenOpeningKey::from_bytes(*parts.encryption_secret))
            .map_err(|_| Inconsistent("the join encryption key does not load"))?;

        let challenge_key = RandomizedNonceKey::new(&AES_256_GCM, parts.challenge_secret.as_ref())
            .map_err(|_| PkiError::Crypto("challenge key"))?;

        Ok(Pki {
            signing_key_id: hex::encode(verify::sha256(&signing_spki)),
            trust_domain: parts.trust_domain,
            node_ca_der: parts.node_ca_der,
            node_ca_pem: parts.node_ca_pem,
            ca,
            signing_key,
            signing_spki,
            token_key,
            challenge_secret: parts.challenge_secret,
            challenge_key,
            previous: rotation::load_previous(parts.previous)?,
            sequence: parts.sequence,
        })
    }

    /// The SPIFFE trust domain node certificates are issued in.
    pub fn trust_domain(&self) -> &str {
        &self.trust_domain
    }

    /// The node CA certificate (DER): the second element of every issued chain.
    pub fn node_ca_der(&self) -> &[u8] {
        &self.node_ca_der
    }

    /// The node CA certificate (PEM), as agents and relying parties pin it.
    pub fn node_ca_pem(&self) -> &str {
        &self.node_ca_pem
    }

    /// The join signing key's SubjectPublicKeyInfo (DER): responses verify under it.
    pub fn join_signing_spki(&self) -> &[u8] {
        &self.signing_spki
    }

    /// Lowercase hex SHA-256 of [`Pki::join_signing_spki`], the `keyId` of responses.
    pub fn join_signing_key_id(&self) -> &str {
        &self.signing_key_id
    }

    /// The join encryption key (X25519) as the bundle stores it. Requests' sealed tokens open
    /// with [`Pki::open_token`].
    pub fn token_opening_key(&self) -> &TokenOpeningKey {
        self.token_key.key()
    }

    /// The join encryption key's X25519 public key, which agents seal tokens to.
    pub fn join_encryption_public(&self) -> [u8; 32] {
        self.token_key.public()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generates_a_ca_of_the_trust_domain() {
        let pki = Pki::generate("example.org").unwrap();
        let (_, ca) = x509_parser::parse_x509_certificate(pki.node_ca_der()).unwrap();
        assert_eq!(ca.subject().to_string(), "CN=Gatehouse node CA example.org");
        assert_eq!(ca.subject(), ca.issuer());
        let bc = ca.basic_constraints().unwrap().unwrap().value;
        assert!(bc.ca);
        assert_eq!(bc.path_len_constraint, Some(0));
        let ku = ca.key_usage().unwrap().unwrap().value;
        assert!(ku.key_cert_sign() && !ku.digital_signature());
        let years = (ca.validity().not_after.timestamp() - ca.validity().not_before.timestamp())
            / (365 * 86_400);
        assert_eq!(years, 10);
        // Self-signed, and verifiable with our own chain verification.
        let now = time::OffsetDateTime::now_utc().unix_timestamp() * 1000;
        let ca_der = [pki.node_ca_der().to_vec()];
        assert!(verify::verify_chain(&ca_der, &ca_der, now).is_ok());
        assert!(pki.node_ca_pem().starts_with("-----BEGIN CERTIFICATE-----"));
        assert_eq!(
            pki.join_signing_key_id(),
            hex::encode(verify::sha256(pki.join_signing_spki()))
        );
    }

    #[test]
    fn keys_are_fresh_and_tokens_open() {
        let a = Pki::generate("td").unwrap();
        let b = Pki::generate("td").unwrap();
        assert_ne!(
            a.token_opening_key().to_bytes(),
            b.token_opening_key().to_bytes()
        );
        assert_ne!(a.join_signing_spki(), b.join_signing_spki());
        assert_ne!(*a.challenge_secret, *b.challenge_secret);
        // A token sealed to the published key opens with the bundle's key, and only that.
        let token = gatehouse_proto::TokenString {
            id: "tok_a".into(),
            secret: vec![7; 32],
        };
        let sealed =
            gatehouse_proto::seal_token(&a.join_encryption_public(), &token, &[1; 32]).unwrap();
        assert_eq!(a.open_token(&sealed, &[1; 32], 0).unwrap(), token);
        assert!(b.open_token(&sealed, &[1; 32], 0).is_err());
    }

    #[test]
    fn refuses_bad_trust_domains() {
        assert_eq!(
            Pki::generate("Example.org").unwrap_err(),
            PkiError::Identity(IdentityError::TrustDomain("Example.org".into()))
        );
        assert!(Pki::generate("").is_err());
    }

    #[test]
    fn debug_shows_no_secrets() {
        let pki = Pki::generate("td").unwrap();
        let text = format!("{pki:?}");
        assert!(text.contains("td") && text.contains(pki.join_signing_key_id()));
        assert!(!text.contains(&hex::encode(pki.token_opening_key().to_bytes())));
    }

    #[test]
    fn is_shareable() {
        fn check<T: Send + Sync>() {}
        check::<Pki>();
    }

    #[test]
    fn display() {
        assert_eq!(
            PkiError::Crypto("randomness").to_string(),
            "cryptographic operation failed: randomness"
        );
        assert_eq!(
            PkiError::Certificate("x".into()).to_string(),
            "certificate building failed: x"
        );
        assert_eq!(
            PkiError::Encode("x".into()).to_string(),
            "response body does not serialize: x"
        );
        assert_eq!(
            PkiError::Identity(IdentityError::NoRole).to_string(),
            "the certificate does not carry exactly one role"
        );
        assert_eq!(
            PkiError::Bundle(BundleError::SecretTooShort).to_string(),
            "PKI bundle: the secret must be at least 16 bytes"
        );
        assert_eq!(
            PkiError::Issue(IssueError::TooManyUris(5)).to_string(),
            "node certificate: at most 4 URIs (the SPIFFE ID and 3 statements), asked for 5"
        );
    }
}
