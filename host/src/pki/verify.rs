//! Native cryptography for attestors: hashing, signature verification and X.509 path
//! building, as pure functions over untrusted bytes.
//!
//! These back the WIT `crypto` interface (`imports::crypto` maps the types), so a component
//! neither carries nor slowly interprets them. Every input is attacker-controlled: keys and
//! certificates are parsed by x509-parser into errors, never panics, and path building is an
//! explicit-stack search with hard caps, so neither a deep nor a looping set of certificates
//! can exhaust the native stack or the CPU.

use aws_lc_rs::digest;
use aws_lc_rs::signature::{self, UnparsedPublicKey, VerificationAlgorithm};
use x509_parser::asn1_rs::Tag;
use x509_parser::certificate::X509Certificate;
use x509_parser::oid_registry::{
    OID_EC_P256, OID_KEY_TYPE_EC_PUBLIC_KEY, OID_NIST_EC_P384, OID_NIST_EC_P521,
    OID_NIST_HASH_SHA256, OID_NIST_HASH_SHA384, OID_NIST_HASH_SHA512, OID_PKCS1_RSAENCRYPTION,
    OID_PKCS1_RSASSAPSS, OID_PKCS1_SHA256WITHRSA, OID_PKCS1_SHA384WITHRSA, OID_PKCS1_SHA512WITHRSA,
    OID_SIG_ECDSA_WITH_SHA256, OID_SIG_ECDSA_WITH_SHA384, OID_SIG_ECDSA_WITH_SHA512,
    OID_SIG_ED25519,
};
use x509_parser::prelude::FromDer;
use x509_parser::public_key::RSAPublicKey;
use x509_parser::signature_algorithm::RsaSsaPssParams;
use x509_parser::x509::{
    AlgorithmIdentifier, AttributeTypeAndValue, RelativeDistinguishedName, SubjectPublicKeyInfo,
    X509Name,
};

/// Largest SubjectPublicKeyInfo accepted (an RSA-8192 key is about 1.1 KiB).
const MAX_SPKI_LEN: usize = 4 * 1024;
/// Largest signature accepted (RSA-8192 signatures are 1 KiB).
const MAX_SIGNATURE_LEN: usize = 1024;
/// Largest certificate accepted on a chain or as a root.
const MAX_CERT_LEN: usize = 16 * 1024;
/// Most certificates in `chain` (leaf included), as the WIT documents.
pub const MAX_CHAIN_CERTS: usize = 8;
/// Most signature checks one [`verify_chain`] call performs.
pub const MAX_SIGNATURE_CHECKS: usize = 64;
/// RSA moduli outside this range are refused (aws-lc-rs's `2048_8192` algorithms agree).
const RSA_BITS: std::ops::RangeInclusive<usize> = 2048..=8192;
/// id-mgf1 (RFC 8017), the only mask generation function RSA-PSS is accepted with.
const MGF1: &str = "1.2.840.113549.1.1.8";

/// SHA-256 of `data`.
pub fn sha256(data: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(digest::digest(&digest::SHA256, data).as_ref());
    out
}

/// A signature scheme attestors can ask for (the WIT `signature-scheme`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// ECDSA P-256 with SHA-256, fixed-width `r || s` (64 bytes).
    EcdsaP256Sha256Fixed,
    /// ECDSA P-256 with SHA-256, ASN.1 DER signature.
    EcdsaP256Sha256Der,
    /// ECDSA P-384 with SHA-384, ASN.1 DER signature.
    EcdsaP384Sha384Der,
    /// RSASSA-PKCS1-v1_5 with SHA-256, 2048 to 8192-bit keys.
    RsaPkcs1Sha256,
    /// RSASSA-PSS with SHA-256, MGF1-SHA-256 and a 32-byte salt, 2048 to 8192-bit keys.
    RsaPssSha256,
    /// Ed25519.
    Ed25519,
}

impl Scheme {
    /// The kind of key the scheme needs and the aws-lc-rs algorithm that verifies it.
    fn parts(self) -> (KeyKind, &'static dyn VerificationAlgorithm) {
        match self {
            Scheme::EcdsaP256Sha256Fixed => (KeyKind::P256, &signature::ECDSA_P256_SHA256_FIXED),
            Scheme::EcdsaP256Sha256Der => (KeyKind::P256, &signature::ECDSA_P256_SHA256_ASN1),
            Scheme::EcdsaP384Sha384Der => (KeyKind::P384, &signature::ECDSA_P384_SHA384_ASN1),
            Scheme::RsaPkcs1Sha256 => (KeyKind::Rsa, &signature::RSA_PKCS1_2048_8192_SHA256),
            Scheme::RsaPssSha256 => (KeyKind::Rsa, &signature::RSA_PSS_2048_8192_SHA256),
            Scheme::Ed25519 => (KeyKind::Ed25519, &signature::ED25519),
        }
    }
}

/// Why [`verify_signature`] failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// The SubjectPublicKeyInfo or the signature is larger than any supported key makes.
    #[error("the key or signature is too large")]
    TooLarge,
    /// The SubjectPublicKeyInfo does not parse as one DER structure.
    #[error("malformed SubjectPublicKeyInfo: {0}")]
    MalformedKey(String),
    /// The key is of a type or curve this host does not verify with.
    #[error("unsupported public key: {0}")]
    UnsupportedKey(String),
    /// The RSA modulus is outside 2048 to 8192 bits.
    #[error("RSA keys must have 2048 to 8192 bits, this one has {0}")]
    RsaKeySize(usize),
    /// The key is valid but of another kind than the scheme needs.
    #[error("a {key} key cannot verify {scheme:?} signatures")]
    KeyMismatch {
        /// The scheme asked for.
        scheme: Scheme,
        /// The kind of key given.
        key: &'static str,
    },
    /// The signature does not verify under the key.
    #[error("the signature does not verify")]
    BadSignature,
}

/// The kinds of public key this module verifies with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KeyKind {
    /// ECDSA on P-256.
    P256,
    /// ECDSA on P-384.
    P384,
    /// ECDSA on P-521: only as a certificate issuer (Nuvoton's `NPCTxxx ECC521 RootCA`, Infineon's
    /// and STMicro's newer ECC roots), never as a [`Scheme`] key.
    P521,
    /// RSA (rsaEncryption).
    Rsa,
    /// Ed25519.
    Ed25519,
}

impl KeyKind {
    pub(super) fn name(self) -> &'static str {
        match self {
            KeyKind::P256 => "P-256",
            KeyKind::P384 => "P-384",
            KeyKind::P521 => "P-521",
            KeyKind::Rsa => "RSA",
            KeyKind::Ed25519 => "Ed25519",
        }
    }
}

/// A public key as aws-lc-rs takes it: its kind and the subjectPublicKey bits (an EC point,
/// a PKCS#1 RSAPublicKey or 32 Ed25519 bytes).
#[derive(Debug, Clone, Copy)]
pub(super) struct Key<'a> {
    /// What kind of key this is.
    pub(super) kind: KeyKind,
    /// The subjectPublicKey bits.
    pub(super) bytes: &'a [u8],
}

/// Classifies a parsed SubjectPublicKeyInfo, refusing every key type, curve or parameter
/// encoding this host does not verify with.
pub(super) fn classify_key<'a>(spki: &SubjectPublicKeyInfo<'a>) -> Result<Key<'a>, VerifyError> {
    if spki.subject_public_key.unused_bits != 0 {
        return Err(VerifyError::MalformedKey(
            "the key bit string is not whole bytes".into(),
        ));
    }
    // DER parsing borrows the input; an owned copy would only come from re-encoding.
    let bytes: &'a [u8] = match &spki.subject_public_key.data {
        std::borrow::Cow::Borrowed(bytes) => bytes,
        std::borrow::Cow::Owned(_) => {
            return Err(VerifyError::MalformedKey(
                "the key bits are not borrowed".into(),
            ));
        }
    };
    let alg = &spki.algorithm;
    let kind = if alg.algorithm == OID_KEY_TYPE_EC_PUBLIC_KEY {
        let curve = alg
            .parameters
            .as_ref()
            .and_then(|p| p.as_oid().ok())
            .ok_or_else(|| VerifyError::UnsupportedKey("EC key without a named curve".into()))?;
        if curve == OID_EC_P256 {
            KeyKind::P256
        } else if curve == OID_NIST_EC_P384 {
            KeyKind::P384
        } else if curve == OID_NIST_EC_P521 {
            KeyKind::P521
        } else {
            return Err(VerifyError::UnsupportedKey(format!("EC curve {curve}")));
        }
    } else if alg.algorithm == OID_PKCS1_RSAENCRYPTION {
        // RFC 3279: the parameters are NULL; absent parameters are a common, harmless slip.
        if alg
            .parameters
            .as_ref()
            .is_some_and(|p| p.as_null().is_err())
        {
            return Err(VerifyError::MalformedKey(
                "rsaEncryption parameters are not NULL".into(),
            ));
        }
        let (rest, rsa) = RSAPublicKey::from_der(bytes)
            .map_err(|e| VerifyError::MalformedKey(format!("RSAPublicKey: {e}")))?;
        if !rest.is_empty() {
            return Err(VerifyError::MalformedKey(
                "trailing bytes after RSAPublicKey".into(),
            ));
        }
        let bits = modulus_bits(rsa.modulus);
        if !RSA_BITS.contains(&bits) {
            return Err(VerifyError::RsaKeySize(bits));
        }
        KeyKind::Rsa
    } else if alg.algorithm == OID_SIG_ED25519 {
        if alg.parameters.is_some() || bytes.len() != 32 {
            return Err(VerifyError::MalformedKey(
                "an Ed25519 key is 32 bytes without parameters".into(),
            ));
        }
        KeyKind::Ed25519
    } else {
        return Err(VerifyError::UnsupportedKey(format!(
            "algorithm {}",
            alg.algorithm
        )));
    };
    Ok(Key { kind, bytes })
}

/// Parses a whole DER SubjectPublicKeyInfo and classifies its key.
pub(super) fn parse_key(spki_der: &[u8]) -> Result<Key<'_>, VerifyError> {
    if spki_der.len() > MAX_SPKI_LEN {
        return Err(VerifyError::TooLarge);
    }
    let (rest, spki) = SubjectPublicKeyInfo::from_der(spki_der)
        .map_err(|e| VerifyError::MalformedKey(e.to_string()))?;
    if !rest.is_empty() {
        return Err(VerifyError::MalformedKey(
            "trailing bytes after SubjectPublicKeyInfo".into(),
        ));
    }
    classify_key(&spki)
}

/// The bit length of a big-endian unsigned modulus (leading zero bytes ignored).
fn modulus_bits(modulus: &[u8]) -> usize {
    let significant = match modulus.iter().position(|&b| b != 0) {
        Some(first) => &modulus[first..],
        None => return 0,
    };
    match significant.first() {
        Some(&top) => (significant.len() - 1) * 8 + (8 - top.leading_zeros() as usize),
        None => 0,
    }
}

fn check(
    alg: &'static dyn VerificationAlgorithm,
    key: &[u8],
    message: &[u8],
    sig: &[u8],
) -> Result<(), VerifyError> {
    UnparsedPublicKey::new(alg, key)
        .verify(message, sig)
        .map_err(|_| VerifyError::BadSignature)
}

/// Verifies `signature` over `message` with the key in `spki_der` (SubjectPublicKeyInfo,
/// DER) under `scheme`; the key's type must be the scheme's.
pub fn verify_signature(
    scheme: Scheme,
    spki_der: &[u8],
    message: &[u8],
    signature: &[u8],
) -> Result<(), VerifyError> {
    if signature.len() > MAX_SIGNATURE_LEN {
        return Err(VerifyError::TooLarge);
    }
    let key = parse_key(spki_der)?;
    let (kind, alg) = scheme.parts();
    if key.kind != kind {
        return Err(VerifyError::KeyMismatch {
            scheme,
            key: key.kind.name(),
        });
    }
    check(alg, key.bytes, message, signature)
}

/// What [`verify_chain`] proved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedChain {
    /// The leaf's SubjectPublicKeyInfo (DER).
    pub leaf_spki: Vec<u8>,
    /// The leaf's notAfter, milliseconds since the Unix epoch.
    pub leaf_not_after_ms: i64,
    /// Index into `roots` of the root the path ends at.
    pub root_index: u32,
}

/// Why [`verify_chain`] found no path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChainError {
    /// The chain has no leaf.
    #[error("the chain is empty")]
    Empty,
    /// More certificates than [`MAX_CHAIN_CERTS`] were given.
    #[error("a chain has at most {MAX_CHAIN_CERTS} certificates, this one has {0}")]
    TooManyCertificates(usize),
    /// A certificate does not parse as exactly one DER X.509 certificate.
    #[error("malformed certificate ({which}): {reason}")]
    Malformed {
        /// Which input, e.g. `chain[1]` or `roots[0]`.
        which: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A certificate on the only candidate path had expired at the given time.
    #[error("a certificate expired at {not_after_ms} ms since the epoch")]
    Expired {
        /// Its notAfter, milliseconds since the Unix epoch.
        not_after_ms: i64,
    },
    /// A certificate on the only candidate path was not yet valid at the given time.
    #[error("a certificate is valid only from {not_before_ms} ms since the epoch")]
    NotYetValid {
        /// Its notBefore, milliseconds since the Unix epoch.
        not_before_ms: i64,
    },
    /// The certificate naming the issuer is not a CA (basicConstraints CA:true, keyCertSign,
    /// path length), so it may not issue.
    #[error("an issuer is not allowed to issue certificates")]
    IssuerNotCa,
    /// An issuer was found by name but its key does not verify the signature.
    #[error("a certificate's signature does not verify under its issuer's key")]
    BadSignature,
    /// A certificate is signed with an algorithm (or key) this host does not verify.
    #[error("unsupported certificate signature: {0}")]
    UnsupportedAlgorithm(String),
    /// More than [`MAX_SIGNATURE_CHECKS`] signatures would have to be checked.
    #[error("path building gave up after {MAX_SIGNATURE_CHECKS} signature checks")]
    TooManySignatureChecks,
    /// No path leads from the leaf to one of the roots.
    #[error("no path leads from the leaf to a trusted root")]
    Untrusted,
}

/// One parsed certificate with what path building needs of it.
struct Cert<'a> {
    x509: X509Certificate<'a>,
    /// notBefore / notAfter in milliseconds.
    not_before_ms: i64,
    not_after_ms: i64,
}

fn parse_cert<'a>(der: &'a [u8], which: impl Fn() -> String) -> Result<Cert<'a>, ChainError> {
    let malformed = |reason: String| ChainError::Malformed {
        which: which(),
        reason,
    };
    if der.len() > MAX_CERT_LEN {
        return Err(malformed(format!("larger than {MAX_CERT_LEN} bytes")));
    }
    let (rest, x509) =
        x509_parser::parse_x509_certificate(der).map_err(|e| malformed(e.to_string()))?;
    if !rest.is_empty() {
        return Err(malformed("trailing bytes after the certificate".into()));
    }
    if x509.signature_algorithm != x509.tbs_certificate.signature {
        return Err(malformed(
            "the outer and inner signature algorithms differ".into(),
        ));
    }
    let validity = x509.validity();
    Ok(Cert {
        not_before_ms: validity.not_before.timestamp().saturating_mul(1000),
        not_after_ms: validity.not_after.timestamp().saturating_mul(1000),
        x509,
    })
}

impl Cert<'_> {
    fn time_error(&self, at_ms: i64) -> Option<ChainError> {
        if at_ms < self.not_before_ms {
            Some(ChainError::NotYetValid {
                not_before_ms: self.not_before_ms,
            })
        } else if at_ms > self.not_after_ms {
            Some(ChainError::Expired {
                not_after_ms: self.not_after_ms,
            })
        } else {
            None
        }
    }

    /// Whether this certificate may issue one that has `below` intermediates under it.
    fn may_issue(&self, below: usize) -> bool {
        let Ok(Some(bc)) = self.x509.basic_constraints() else {
            return false;
        };
        if !bc.value.ca {
            return false;
        }
        if let Some(max) = bc.value.path_len_constraint
            && usize::try_from(max).is_ok_and(|max| below > max)
        {
            return false;
        }
        match self.x509.key_usage() {
            Ok(Some(ku)) => ku.value.key_cert_sign(),
            Ok(None) => true,
            Err(_) => false,
        }
    }
}

/// The aws-lc-rs algorithm for a certificate signature `sig_alg` made by an `issuer` key.
fn certificate_algorithm(
    sig_alg: &AlgorithmIdentifier<'_>,
    issuer: KeyKind,
) -> Result<&'static dyn VerificationAlgorithm, ChainError> {
    let oid = &sig_alg.algorithm;
    let unsupported =
        || ChainError::UnsupportedAlgorithm(format!("{oid} with a {} key", issuer.name()));
    let alg: &'static dyn VerificationAlgorithm = if *oid == OID_SIG_ECDSA_WITH_SHA256 {
        match issuer {
            KeyKind::P256 => &signature::ECDSA_P256_SHA256_ASN1,
            KeyKind::P384 => &signature::ECDSA_P384_SHA256_ASN1,
            KeyKind::P521 => &signature::ECDSA_P521_SHA256_ASN1,
            _ => return Err(unsupported()),
        }
    } else if *oid == OID_SIG_ECDSA_WITH_SHA384 {
        match issuer {
            KeyKind::P256 => &signature::ECDSA_P256_SHA384_ASN1,
            KeyKind::P384 => &signature::ECDSA_P384_SHA384_ASN1,
            KeyKind::P521 => &signature::ECDSA_P521_SHA384_ASN1,
            _ => return Err(unsupported()),
        }
    } else if *oid == OID_SIG_ECDSA_WITH_SHA512 {
        match issuer {
            KeyKind::P256 => &signature::ECDSA_P256_SHA512_ASN1,
            KeyKind::P384 => &signature::ECDSA_P384_SHA512_ASN1,
            KeyKind::P521 => &signature::ECDSA_P521_SHA512_ASN1,
            _ => return Err(unsupported()),
        }
    } else if issuer == KeyKind::Rsa && *oid == OID_PKCS1_SHA256WITHRSA {
        &signature::RSA_PKCS1_2048_8192_SHA256
    } else if issuer == KeyKind::Rsa && *oid == OID_PKCS1_SHA384WITHRSA {
        &signature::RSA_PKCS1_2048_8192_SHA384
    } else if issuer == KeyKind::Rsa && *oid == OID_PKCS1_SHA512WITHRSA {
        &signature::RSA_PKCS1_2048_8192_SHA512
    } else if issuer == KeyKind::Rsa && *oid == OID_PKCS1_RSASSAPSS {
        pss_algorithm(sig_alg).ok_or_else(unsupported)?
    } else if issuer == KeyKind::Ed25519 && *oid == OID_SIG_ED25519 {
        &signature::ED25519
    } else {
        return Err(unsupported());
    };
    Ok(alg)
}

/// RSA-PSS as certificates use it (RFC 4055): one hash for the message and MGF1, a salt as
/// long as the hash, trailer 1. Anything else is refused rather than guessed.
fn pss_algorithm(sig_alg: &AlgorithmIdentifier<'_>) -> Option<&'static dyn VerificationAlgorithm> {
    let params = RsaSsaPssParams::try_from(sig_alg.parameters.as_ref()?).ok()?;
    let hash = params.hash_algorithm_oid();
    let mgf = params.mask_gen_algorithm().ok()?;
    if mgf.mgf.to_id_string() != MGF1 || mgf.hash != *hash || params.trailer_field() != 1 {
        return None;
    }
    let (alg, salt): (&'static dyn VerificationAlgorithm, u32) = if *hash == OID_NIST_HASH_SHA256 {
        (&signature::RSA_PSS_2048_8192_SHA256, 32)
    } else if *hash == OID_NIST_HASH_SHA384 {
        (&signature::RSA_PSS_2048_8192_SHA384, 48)
    } else if *hash == OID_NIST_HASH_SHA512 {
        (&signature::RSA_PSS_2048_8192_SHA512, 64)
    } else {
        return None;
    };
    (params.salt_length() == salt).then_some(alg)
}

/// Most attributes in one RDN compared as a set; a larger RDN matches only byte for byte, so a
/// hostile name cannot make the comparison quadratic in its size.
const MAX_RDN_ATTRIBUTES: usize = 16;

/// Whether two distinguished names are the same name under RFC 5280 7.1: the same number of
/// RDNs, each the same set of attributes (in any order), values compared with
/// [`same_attribute`]. Byte-equal names match at once; vendors' CA hierarchies write one name
/// in two encodings (STMicro's ECC intermediates name their root in UTF8String, the root
/// writes itself in PrintableString) or put a whole name in one multi-valued RDN whose SET is
/// not in DER order (Nuvoton TPM Root CA 2110).
pub(crate) fn same_name(a: &X509Name<'_>, b: &X509Name<'_>) -> bool {
    if a.as_raw() == b.as_raw() {
        return true;
    }
    let mut left = a.iter_rdn();
    let mut right = b.iter_rdn();
    loop {
        match (left.next(), right.next()) {
            (None, None) => return true,
            (Some(x), Some(y)) if same_rdn(x, y) => {}
            _ => return false,
        }
    }
}

/// Whether two RDNs hold the same set of attributes.
fn same_rdn(a: &RelativeDistinguishedName<'_>, b: &RelativeDistinguishedName<'_>) -> bool {
    let (count_a, count_b) = (a.iter().count(), b.iter().count());
    if count_a != count_b {
        return false;
    }
    if count_a > MAX_RDN_ATTRIBUTES {
        return a.iter().zip(b.iter()).all(|(x, y)| x == y);
    }
    // Same size, and each attribute of one is in the other, and vice versa (duplicates).
    a.iter().all(|x| b.iter().any(|y| same_attribute(x, y)))
        && b.iter().all(|y| a.iter().any(|x| same_attribute(x, y)))
}

/// Whether two attributes are equal: the same type, and values that are the same string
/// under caseIgnoreMatch with insignificant spaces removed (RFC 4518: leading and trailing
/// spaces dropped, inner runs made one) when both are PrintableString or UTF8String, else the
/// same tag and bytes.
fn same_attribute(a: &AttributeTypeAndValue<'_>, b: &AttributeTypeAndValue<'_>) -> bool {
    if a.attr_type() != b.attr_type() {
        return false;
    }
    let (x, y) = (a.attr_value(), b.attr_value());
    let text = |tag: Tag| matches!(tag, Tag::PrintableString | Tag::Utf8String);
    if text(x.tag()) && text(y.tag()) {
        return match (std::str::from_utf8(x.data), std::str::from_utf8(y.data)) {
            (Ok(s), Ok(t)) => folded(s).eq(folded(t)),
            _ => false,
        };
    }
    x.tag() == y.tag() && x.data == y.data
}

/// A string's characters with case folded and insignificant spaces removed (RFC 4518 2.6.1).
fn folded(s: &str) -> impl Iterator<Item = char> + '_ {
    s.split_whitespace()
        .enumerate()
        .flat_map(|(i, word)| (i > 0).then_some(' ').into_iter().chain(word.chars()))
        .flat_map(char::to_lowercase)
}

/// Checks that `issuer`'s key signed `subject`.
fn signed_by(subject: &Cert<'_>, issuer: &Cert<'_>) -> Result<(), ChainError> {
    let key = classify_key(issuer.x509.public_key())
        .map_err(|e| ChainError::UnsupportedAlgorithm(format!("issuer key: {e}")))?;
    let alg = certificate_algorithm(&subject.x509.signature_algorithm, key.kind)?;
    let sig = &subject.x509.signature_value;
    if sig.unused_bits != 0 {
        return Err(ChainError::BadSignature);
    }
    check(
        alg,
        key.bytes,
        subject.x509.tbs_certificate.as_ref(),
        sig.data.as_ref(),
    )
    .map_err(|_| ChainError::BadSignature)
}

/// A node of the path being built: the leaf, or an intermediate by its index.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Node {
    Leaf,
    Intermediate(usize),
}

/// One level of the explicit search stack: a certificate on the current path and the next
/// candidate issuer to try for it (roots first, then intermediates).
struct Frame {
    node: Node,
    next: usize,
}

/// Verifies that `chain` (DER; the leaf first, then intermediates in any order) leads to one
/// of `roots` (DER), with every certificate on the path valid at `at_ms` and every issuer a
/// CA allowed to issue.
///
/// Path building is a depth-first search on an explicit stack: a certificate already on the
/// current path is never tried again (so loops end), duplicate inputs are ignored, and at most
/// [`MAX_CHAIN_CERTS`] certificates and [`MAX_SIGNATURE_CHECKS`] signature checks are spent.
/// When no path exists, the error names the first reason a candidate issuer failed
/// (time, CA-ness, signature), else [`ChainError::Untrusted`].
pub fn verify_chain(
    chain: &[Vec<u8>],
    roots: &[Vec<u8>],
    at_ms: i64,
) -> Result<VerifiedChain, ChainError> {
    let Some((leaf_der, rest)) = chain.split_first() else {
        return Err(ChainError::Empty);
    };
    if chain.len() > MAX_CHAIN_CERTS {
        return Err(ChainError::TooManyCertificates(chain.len()));
    }
    let leaf = parse_cert(leaf_der, || "chain[0]".to_owned())?;
    if let Some(e) = leaf.time_error(at_ms) {
        return Err(e);
    }
    let mut intermediates: Vec<Cert<'_>> = Vec::with_capacity(rest.len());
    let mut seen: Vec<&[u8]> = vec![leaf_der.as_slice()];
    for (i, der) in rest.iter().enumerate() {
        if seen.contains(&der.as_slice()) {
            continue;
        }
        seen.push(der);
        intermediates.push(parse_cert(der, || format!("chain[{}]", i + 1))?);
    }
    let roots: Vec<Cert<'_>> = roots
        .iter()
        .enumerate()
        .map(|(i, der)| parse_cert(der, || format!("roots[{i}]")))
        .collect::<Result<_, _>>()?;

    let mut checks = 0usize;
    let mut first_failure: Option<ChainError> = None;
    let mut stack = vec![Frame {
        node: Node::Leaf,
        next: 0,
    }];
    while let Some(top) = stack.last_mut() {
        let candidate = top.next;
        top.next += 1;
        let subject = match top.node {
            Node::Leaf => &leaf,
            Node::Intermediate(i) => &intermediates[i],
        };
        // Roots first, then intermediates; `None` marks a root, which ends the path.
        let (issuer, node) = match roots.get(candidate) {
            Some(root) => (root, None),
            None => {
                let i = candidate - roots.len();
                let Some(inter) = intermediates.get(i) else {
                    stack.pop();
                    continue;
                };
                let node = Node::Intermediate(i);
                if stack.iter().any(|f| f.node == node) || stack.len() >= MAX_CHAIN_CERTS {
                    continue;
                }
                (inter, Some(node))
            }
        };
        if !same_name(issuer.x509.subject(), subject.x509.issuer()) {
            continue;
        }
        // Intermediates between the leaf and this issuer: the stack minus the leaf.
        let failure = if let Some(e) = issuer.time_error(at_ms) {
            Some(e)
        } else if !issuer.may_issue(stack.len() - 1) {
            Some(ChainError::IssuerNotCa)
        } else if checks >= MAX_SIGNATURE_CHECKS {
            return Err(ChainError::TooManySignatureChecks);
        } else {
            checks += 1;
            signed_by(subject, issuer).err()
        };
        if let Some(e) = failure {
            first_failure.get_or_insert(e);
            continue;
        }
        match node {
            Some(node) => stack.push(Frame { node, next: 0 }),
            None => {
                return Ok(VerifiedChain {
                    leaf_spki: leaf.x509.public_key().raw.to_vec(),
                    leaf_not_after_ms: leaf.not_after_ms,
                    root_index: u32::try_from(candidate).map_err(|_| ChainError::Untrusted)?,
                });
            }
        }
    }
    Err(first_failure.unwrap_or(ChainError::Untrusted))
}

#[cfg(test)]
mod tests;
