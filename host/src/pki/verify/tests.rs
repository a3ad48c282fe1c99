use super::*;
use aws_lc_rs::encoding::AsDer;
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::rsa::{KeyPair as RsaKeyPair, KeySize};
use aws_lc_rs::signature::{
    ECDSA_P256_SHA256_ASN1_SIGNING, ECDSA_P256_SHA256_FIXED_SIGNING,
    ECDSA_P384_SHA384_ASN1_SIGNING, ECDSA_P521_SHA512_ASN1_SIGNING, EcdsaKeyPair, Ed25519KeyPair,
    KeyPair as _, RSA_PKCS1_SHA256, RSA_PSS_SHA256,
};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    PKCS_ECDSA_P256_SHA256, PKCS_ECDSA_P384_SHA384, PKCS_RSA_SHA256, PKCS_RSA_SHA512, SerialNumber,
    SignatureAlgorithm,
};
use std::sync::atomic::{AtomicU64, Ordering};
use time::OffsetDateTime;

const MESSAGE: &[u8] = b"evidence to verify";

fn date(year: i32) -> OffsetDateTime {
    rcgen::date_time_ymd(year, 1, 1)
}

fn ms(year: i32) -> i64 {
    date(year).unix_timestamp() * 1000
}

/// 2026-01-01: inside the default validity 2025..2027.
fn at() -> i64 {
    ms(2026)
}

// --- signatures ---------------------------------------------------------------------------

fn ecdsa(alg: &'static aws_lc_rs::signature::EcdsaSigningAlgorithm) -> (Vec<u8>, Vec<u8>) {
    let key = EcdsaKeyPair::generate(alg).unwrap();
    let sig = key.sign(&SystemRandom::new(), MESSAGE).unwrap();
    (
        key.public_key().as_der().unwrap().as_ref().to_vec(),
        sig.as_ref().to_vec(),
    )
}

fn rsa(padding: &'static dyn aws_lc_rs::signature::RsaEncoding) -> (Vec<u8>, Vec<u8>) {
    let key = RsaKeyPair::generate(KeySize::Rsa2048).unwrap();
    let mut sig = vec![0; key.public_modulus_len()];
    key.sign(padding, &SystemRandom::new(), MESSAGE, &mut sig)
        .unwrap();
    (key.public_key().as_der().unwrap().as_ref().to_vec(), sig)
}

fn ed25519() -> (Vec<u8>, Vec<u8>) {
    let key = Ed25519KeyPair::generate().unwrap();
    let sig = key.sign(MESSAGE);
    (
        key.public_key().as_der().unwrap().as_ref().to_vec(),
        sig.as_ref().to_vec(),
    )
}

#[test]
fn sha256_vector() {
    assert_eq!(
        hex::encode(sha256(b"abc")),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
}

#[test]
fn every_scheme_verifies_and_refuses() {
    let cases = [
        (
            Scheme::EcdsaP256Sha256Fixed,
            ecdsa(&ECDSA_P256_SHA256_FIXED_SIGNING),
        ),
        (
            Scheme::EcdsaP256Sha256Der,
            ecdsa(&ECDSA_P256_SHA256_ASN1_SIGNING),
        ),
        (
            Scheme::EcdsaP384Sha384Der,
            ecdsa(&ECDSA_P384_SHA384_ASN1_SIGNING),
        ),
        (Scheme::RsaPkcs1Sha256, rsa(&RSA_PKCS1_SHA256)),
        (Scheme::RsaPssSha256, rsa(&RSA_PSS_SHA256)),
        (Scheme::Ed25519, ed25519()),
    ];
    for (scheme, (spki, sig)) in &cases {
        verify_signature(*scheme, spki, MESSAGE, sig).unwrap_or_else(|e| panic!("{scheme:?}: {e}"));
        assert_eq!(
            verify_signature(*scheme, spki, b"other message", sig),
            Err(VerifyError::BadSignature),
            "{scheme:?}"
        );
        let mut flipped = sig.clone();
        flipped[sig.len() / 2] ^= 1;
        assert_eq!(
            verify_signature(*scheme, spki, MESSAGE, &flipped),
            Err(VerifyError::BadSignature),
            "{scheme:?}"
        );
    }
    // A DER signature is not a fixed one and vice versa; PKCS#1 is not PSS.
    let (spki, der_sig) = &cases[1].1;
    assert_eq!(
        verify_signature(Scheme::EcdsaP256Sha256Fixed, spki, MESSAGE, der_sig),
        Err(VerifyError::BadSignature)
    );
    let (spki, pkcs1_sig) = &cases[3].1;
    assert_eq!(
        verify_signature(Scheme::RsaPssSha256, spki, MESSAGE, pkcs1_sig),
        Err(VerifyError::BadSignature)
    );
}

#[test]
fn keys_must_fit_the_scheme() {
    let (p256, sig) = ecdsa(&ECDSA_P256_SHA256_ASN1_SIGNING);
    assert_eq!(
        verify_signature(Scheme::EcdsaP384Sha384Der, &p256, MESSAGE, &sig),
        Err(VerifyError::KeyMismatch {
            scheme: Scheme::EcdsaP384Sha384Der,
            key: "P-256"
        })
    );
    let (rsa_key, sig) = rsa(&RSA_PKCS1_SHA256);
    assert_eq!(
        verify_signature(Scheme::Ed25519, &rsa_key, MESSAGE, &sig),
        Err(VerifyError::KeyMismatch {
            scheme: Scheme::Ed25519,
            key: "RSA"
        })
    );
    // P-521 keys are known (as certificate issuers) but no scheme verifies with one.
    let (p521, sig) = ecdsa(&ECDSA_P521_SHA512_ASN1_SIGNING);
    assert_eq!(
        verify_signature(Scheme::EcdsaP256Sha256Der, &p521, MESSAGE, &sig),
        Err(VerifyError::KeyMismatch {
            scheme: Scheme::EcdsaP256Sha256Der,
            key: "P-521"
        })
    );
}

/// DER TLV with a definite length.
fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    match content.len() {
        n if n < 0x80 => out.push(n as u8),
        n if n < 0x100 => out.extend([0x81, n as u8]),
        n => out.extend([0x82, (n >> 8) as u8, n as u8]),
    }
    out.extend_from_slice(content);
    out
}

fn rsa_spki(modulus: &[u8]) -> Vec<u8> {
    let alg = tlv(
        0x30,
        &[
            &tlv(0x06, &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 1, 1, 1])[..],
            &[0x05, 0x00],
        ]
        .concat(),
    );
    let key = tlv(0x30, &[tlv(0x02, modulus), tlv(0x02, &[1, 0, 1])].concat());
    tlv(
        0x30,
        &[alg, tlv(0x03, &[&[0u8][..], &key].concat())].concat(),
    )
}

#[test]
fn malformed_and_out_of_range_keys() {
    let (spki, sig) = ecdsa(&ECDSA_P256_SHA256_ASN1_SIGNING);
    assert!(matches!(
        verify_signature(Scheme::EcdsaP256Sha256Der, b"junk", MESSAGE, &sig),
        Err(VerifyError::MalformedKey(_))
    ));
    assert!(matches!(
        verify_signature(Scheme::EcdsaP256Sha256Der, &[], MESSAGE, &sig),
        Err(VerifyError::MalformedKey(_))
    ));
    let trailing = [spki.as_slice(), &[0]].concat();
    assert!(matches!(
        verify_signature(Scheme::EcdsaP256Sha256Der, &trailing, MESSAGE, &sig),
        Err(VerifyError::MalformedKey(_))
    ));
    // A 1024-bit modulus (positive: a leading zero byte before the top bit).
    let mut small = vec![0u8; 129];
    small[1] = 0xc0;
    small[128] = 1;
    assert_eq!(
        verify_signature(
            Scheme::RsaPkcs1Sha256,
            &rsa_spki(&small),
            MESSAGE,
            &[0; 128]
        ),
        Err(VerifyError::RsaKeySize(1024))
    );
    let mut big = vec![0xffu8; 1025];
    big[0] = 0;
    // 8192 bits is in range: the size passes and the (zero) signature does not.
    assert_eq!(
        verify_signature(Scheme::RsaPkcs1Sha256, &rsa_spki(&big), MESSAGE, &[0; 1]),
        Err(VerifyError::BadSignature)
    );
    let mut huge = vec![0xffu8; 1026];
    huge[0] = 0;
    assert_eq!(
        verify_signature(Scheme::RsaPkcs1Sha256, &rsa_spki(&huge), MESSAGE, &[0; 1]),
        Err(VerifyError::RsaKeySize(8200))
    );
    assert_eq!(
        verify_signature(Scheme::EcdsaP256Sha256Der, &spki, MESSAGE, &[0; 1025]),
        Err(VerifyError::TooLarge)
    );
    assert_eq!(
        verify_signature(Scheme::EcdsaP256Sha256Der, &[0x30; 4097], MESSAGE, &sig),
        Err(VerifyError::TooLarge)
    );
}

#[test]
fn modulus_bits_counts_significant_bits() {
    assert_eq!(modulus_bits(&[]), 0);
    assert_eq!(modulus_bits(&[0, 0]), 0);
    assert_eq!(modulus_bits(&[0, 1]), 1);
    assert_eq!(modulus_bits(&[0, 0x80, 0]), 16);
    assert_eq!(modulus_bits(&[0x7f, 0]), 15);
}

// --- chains -------------------------------------------------------------------------------

static SERIAL: AtomicU64 = AtomicU64::new(1);

/// A certificate authority for tests: its params (for issuing) and key.
struct Ca {
    params: CertificateParams,
    key: KeyPair,
    der: Vec<u8>,
}

fn params(name: &str, is_ca: IsCa, from: i32, to: i32) -> CertificateParams {
    let mut p = CertificateParams::default();
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name.push(DnType::CommonName, name);
    p.is_ca = is_ca;
    if matches!(is_ca, IsCa::Ca(_)) {
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    }
    p.not_before = date(from);
    p.not_after = date(to);
    p.serial_number = Some(SerialNumber::from(SERIAL.fetch_add(1, Ordering::Relaxed)));
    p
}

fn key(alg: &'static SignatureAlgorithm) -> KeyPair {
    KeyPair::generate_for(alg).unwrap()
}

fn root(name: &str, alg: &'static SignatureAlgorithm) -> Ca {
    let params = params(name, IsCa::Ca(BasicConstraints::Unconstrained), 2025, 2027);
    let key = key(alg);
    let der = params.self_signed(&key).unwrap().der().to_vec();
    Ca { params, key, der }
}

fn issue(issuer: &Ca, params: CertificateParams, key: KeyPair) -> Ca {
    let der = params
        .signed_by(&key, &Issuer::from_params(&issuer.params, &issuer.key))
        .unwrap()
        .der()
        .to_vec();
    Ca { params, key, der }
}

fn intermediate(issuer: &Ca, name: &str, alg: &'static SignatureAlgorithm) -> Ca {
    issue(
        issuer,
        params(name, IsCa::Ca(BasicConstraints::Unconstrained), 2025, 2027),
        key(alg),
    )
}

fn leaf_of(issuer: &Ca, from: i32, to: i32) -> Ca {
    issue(
        issuer,
        params("leaf", IsCa::ExplicitNoCa, from, to),
        key(&PKCS_ECDSA_P256_SHA256),
    )
}

#[test]
fn three_levels_across_algorithms() {
    // RSA root (PKCS#1 SHA-512) -> P-384 intermediate (ECDSA SHA-384) -> P-256 leaf.
    let root_ca = root("root", &PKCS_RSA_SHA512);
    let inter = intermediate(&root_ca, "inter", &PKCS_ECDSA_P384_SHA384);
    let leaf = leaf_of(&inter, 2025, 2027);
    let unrelated = root("unrelated", &PKCS_ECDSA_P256_SHA256);
    let chain = verify_chain(
        &[leaf.der.clone(), inter.der.clone()],
        &[unrelated.der, root_ca.der.clone()],
        at(),
    )
    .unwrap();
    assert_eq!(chain.root_index, 1);
    assert_eq!(
        chain.leaf_spki,
        rcgen::PublicKeyData::subject_public_key_info(&leaf.key)
    );
    assert_eq!(chain.leaf_not_after_ms, ms(2027));

    // RSA PKCS#1 SHA-256 and P-256 throughout.
    let root_ca = root("root2", &PKCS_RSA_SHA256);
    let inter = intermediate(&root_ca, "inter2", &PKCS_ECDSA_P256_SHA256);
    let leaf = leaf_of(&inter, 2025, 2027);
    verify_chain(&[leaf.der, inter.der], &[root_ca.der], at()).unwrap();
}

#[test]
fn intermediates_in_any_order_and_duplicates() {
    let root_ca = root("root", &PKCS_ECDSA_P256_SHA256);
    let a = intermediate(&root_ca, "a", &PKCS_ECDSA_P256_SHA256);
    let b = intermediate(&a, "b", &PKCS_ECDSA_P256_SHA256);
    let leaf = leaf_of(&b, 2025, 2027);
    let decoy = intermediate(
        &root("other", &PKCS_ECDSA_P256_SHA256),
        "b",
        &PKCS_ECDSA_P256_SHA256,
    );
    let chain = [
        leaf.der.clone(),
        decoy.der,
        a.der.clone(),
        b.der.clone(),
        a.der.clone(),
        leaf.der.clone(),
        b.der,
    ];
    let verified = verify_chain(&chain, &[root_ca.der.clone(), root_ca.der], at()).unwrap();
    assert_eq!(verified.root_index, 0);
}

#[test]
fn leaf_directly_under_a_root() {
    let root_ca = root("root", &PKCS_ECDSA_P384_SHA384);
    let leaf = leaf_of(&root_ca, 2025, 2027);
    verify_chain(&[leaf.der], &[root_ca.der], at()).unwrap();
}

#[test]
fn validity_at_the_given_time() {
    let root_ca = root("root", &PKCS_ECDSA_P256_SHA256);
    let leaf = leaf_of(&root_ca, 2025, 2026);
    let roots = [root_ca.der.clone()];
    assert_eq!(
        verify_chain(std::slice::from_ref(&leaf.der), &roots, ms(2026) + 1),
        Err(ChainError::Expired {
            not_after_ms: ms(2026)
        })
    );
    assert_eq!(
        verify_chain(std::slice::from_ref(&leaf.der), &roots, ms(2024)),
        Err(ChainError::NotYetValid {
            not_before_ms: ms(2025)
        })
    );
    // The bounds are inclusive.
    verify_chain(std::slice::from_ref(&leaf.der), &roots, ms(2026)).unwrap();
    verify_chain(&[leaf.der], &roots, ms(2025)).unwrap();

    // An expired or not-yet-valid intermediate breaks the path too.
    let old = issue(
        &root_ca,
        params("old", IsCa::Ca(BasicConstraints::Unconstrained), 2025, 2026),
        key(&PKCS_ECDSA_P256_SHA256),
    );
    let leaf = leaf_of(&old, 2025, 2027);
    assert_eq!(
        verify_chain(&[leaf.der, old.der], &roots, ms(2026) + 1000),
        Err(ChainError::Expired {
            not_after_ms: ms(2026)
        })
    );
    let young = issue(
        &root_ca,
        params(
            "young",
            IsCa::Ca(BasicConstraints::Unconstrained),
            2026,
            2027,
        ),
        key(&PKCS_ECDSA_P256_SHA256),
    );
    let leaf = leaf_of(&young, 2025, 2027);
    assert_eq!(
        verify_chain(&[leaf.der, young.der], &roots, ms(2025) + 1000),
        Err(ChainError::NotYetValid {
            not_before_ms: ms(2026)
        })
    );
}

#[test]
fn unknown_root() {
    let root_ca = root("root", &PKCS_ECDSA_P256_SHA256);
    let inter = intermediate(&root_ca, "inter", &PKCS_ECDSA_P256_SHA256);
    let leaf = leaf_of(&inter, 2025, 2027);
    let other = root("other", &PKCS_ECDSA_P256_SHA256);
    assert_eq!(
        verify_chain(&[leaf.der.clone(), inter.der.clone()], &[other.der], at()),
        Err(ChainError::Untrusted)
    );
    assert_eq!(
        verify_chain(&[leaf.der.clone(), inter.der], &[], at()),
        Err(ChainError::Untrusted)
    );
    // Without the intermediate there is no path either.
    assert_eq!(
        verify_chain(&[leaf.der], &[root_ca.der], at()),
        Err(ChainError::Untrusted)
    );
}

#[test]
fn a_root_of_the_same_name_with_another_key_is_a_bad_signature() {
    let root_ca = root("root", &PKCS_ECDSA_P256_SHA256);
    let leaf = leaf_of(&root_ca, 2025, 2027);
    let impostor = root("root", &PKCS_ECDSA_P256_SHA256);
    assert_eq!(
        verify_chain(&[leaf.der], &[impostor.der], at()),
        Err(ChainError::BadSignature)
    );
}

#[test]
fn issuers_must_be_cas() {
    let root_ca = root("root", &PKCS_ECDSA_P256_SHA256);
    let not_ca = issue(
        &root_ca,
        params("inter", IsCa::ExplicitNoCa, 2025, 2027),
        key(&PKCS_ECDSA_P256_SHA256),
    );
    let leaf = leaf_of(&not_ca, 2025, 2027);
    assert_eq!(
        verify_chain(
            &[leaf.der, not_ca.der],
            std::slice::from_ref(&root_ca.der),
            at()
        ),
        Err(ChainError::IssuerNotCa)
    );

    // No basicConstraints at all is not a CA either.
    let bare = issue(
        &root_ca,
        params("bare", IsCa::NoCa, 2025, 2027),
        key(&PKCS_ECDSA_P256_SHA256),
    );
    let leaf = leaf_of(&bare, 2025, 2027);
    assert_eq!(
        verify_chain(
            &[leaf.der, bare.der],
            std::slice::from_ref(&root_ca.der),
            at()
        ),
        Err(ChainError::IssuerNotCa)
    );

    // A CA whose keyUsage lacks keyCertSign may not issue.
    let mut p = params(
        "no-sign",
        IsCa::Ca(BasicConstraints::Unconstrained),
        2025,
        2027,
    );
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    let no_sign = issue(&root_ca, p, key(&PKCS_ECDSA_P256_SHA256));
    let leaf = leaf_of(&no_sign, 2025, 2027);
    assert_eq!(
        verify_chain(&[leaf.der, no_sign.der], &[root_ca.der], at()),
        Err(ChainError::IssuerNotCa)
    );

    // pathlen 0 on the root: it may issue leaves but not intermediates.
    let mut p = params(
        "root0",
        IsCa::Ca(BasicConstraints::Constrained(0)),
        2025,
        2027,
    );
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    let key0 = key(&PKCS_ECDSA_P256_SHA256);
    let der = p.self_signed(&key0).unwrap().der().to_vec();
    let root0 = Ca {
        params: p,
        key: key0,
        der,
    };
    verify_chain(
        &[leaf_of(&root0, 2025, 2027).der],
        std::slice::from_ref(&root0.der),
        at(),
    )
    .unwrap();
    let inter = intermediate(&root0, "inter", &PKCS_ECDSA_P256_SHA256);
    let leaf = leaf_of(&inter, 2025, 2027);
    assert_eq!(
        verify_chain(&[leaf.der, inter.der], &[root0.der], at()),
        Err(ChainError::IssuerNotCa)
    );
}

#[test]
fn wrong_signature() {
    let root_ca = root("root", &PKCS_ECDSA_P256_SHA256);
    let inter = intermediate(&root_ca, "inter", &PKCS_ECDSA_P256_SHA256);
    let mut leaf = leaf_of(&inter, 2025, 2027).der;
    // The signature's last byte is the certificate's last byte.
    let last = leaf.len() - 1;
    leaf[last] ^= 1;
    assert_eq!(
        verify_chain(&[leaf, inter.der], &[root_ca.der], at()),
        Err(ChainError::BadSignature)
    );
}

#[test]
fn a_loop_of_certificates_ends() {
    // a is issued by b and b by a; the leaf by a. Nothing leads to the root.
    let key_a = key(&PKCS_ECDSA_P256_SHA256);
    let key_b = key(&PKCS_ECDSA_P256_SHA256);
    let params_a = params("a", IsCa::Ca(BasicConstraints::Unconstrained), 2025, 2027);
    let params_b = params("b", IsCa::Ca(BasicConstraints::Unconstrained), 2025, 2027);
    let a = params_a
        .signed_by(&key_a, &Issuer::from_params(&params_b, &key_b))
        .unwrap()
        .der()
        .to_vec();
    let b = params_b
        .signed_by(&key_b, &Issuer::from_params(&params_a, &key_a))
        .unwrap()
        .der()
        .to_vec();
    let ca_a = Ca {
        params: params_a,
        key: key_a,
        der: a.clone(),
    };
    let leaf = leaf_of(&ca_a, 2025, 2027);
    let unrelated = root("root", &PKCS_ECDSA_P256_SHA256);
    assert_eq!(
        verify_chain(
            &[leaf.der.clone(), a.clone(), b.clone()],
            &[unrelated.der],
            at()
        ),
        Err(ChainError::Untrusted)
    );
    // A root that is a's own key closes the same set into a path.
    let root_a = ca_a.params.self_signed(&ca_a.key).unwrap().der().to_vec();
    verify_chain(&[leaf.der, a, b], &[root_a], at()).unwrap();
}

#[test]
fn path_building_is_capped() {
    // Seven intermediates of one name and key, each "issued" by any other: a search without
    // a cap would try every ordering of them.
    let shared = key(&PKCS_ECDSA_P256_SHA256);
    let mut chain = Vec::new();
    let mut last = None;
    for _ in 0..7 {
        let p = params("x", IsCa::Ca(BasicConstraints::Unconstrained), 2025, 2027);
        chain.push(p.self_signed(&shared).unwrap().der().to_vec());
        last = Some(p);
    }
    let x = Ca {
        params: last.unwrap(),
        key: shared,
        der: Vec::new(),
    };
    chain.insert(0, leaf_of(&x, 2025, 2027).der);
    let unrelated = root("root", &PKCS_ECDSA_P256_SHA256);
    assert_eq!(
        verify_chain(&chain, &[unrelated.der], at()),
        Err(ChainError::TooManySignatureChecks)
    );
}

#[test]
fn input_limits_and_garbage() {
    assert_eq!(verify_chain(&[], &[], at()), Err(ChainError::Empty));
    let root_ca = root("root", &PKCS_ECDSA_P256_SHA256);
    let nine = vec![root_ca.der.clone(); 9];
    assert_eq!(
        verify_chain(&nine, &[], at()),
        Err(ChainError::TooManyCertificates(9))
    );
    let leaf = leaf_of(&root_ca, 2025, 2027);
    assert!(matches!(
        verify_chain(&[leaf.der.clone(), b"junk".to_vec()], std::slice::from_ref(&root_ca.der), at()),
        Err(ChainError::Malformed { which, .. }) if which == "chain[1]"
    ));
    assert!(matches!(
        verify_chain(std::slice::from_ref(&leaf.der), &[root_ca.der.clone(), vec![]], at()),
        Err(ChainError::Malformed { which, .. }) if which == "roots[1]"
    ));
    let trailing = [leaf.der.as_slice(), &[0]].concat();
    assert!(matches!(
        verify_chain(&[trailing], std::slice::from_ref(&root_ca.der), at()),
        Err(ChainError::Malformed { which, .. }) if which == "chain[0]"
    ));
    assert!(matches!(
        verify_chain(&[vec![0x30; MAX_CERT_LEN + 1]], &[], at()),
        Err(ChainError::Malformed { .. })
    ));
}

/// Re-signs `cert` (issued by an RSA key) with RSA-PSS SHA-256 under `rsa_pkcs8`, rewriting
/// both signature AlgorithmIdentifiers: rcgen cannot sign PSS itself.
fn resign_pss(cert: &[u8], rsa_pkcs8: &[u8], pss_alg_id: &[u8]) -> Vec<u8> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert).unwrap();
    let tbs = parsed.tbs_certificate.as_ref();
    let header = if tbs[1] < 0x80 {
        2
    } else {
        2 + usize::from(tbs[1] & 0x7f)
    };
    let pkcs1_alg_id = tlv(
        0x30,
        &[
            &tlv(0x06, &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 1, 1, 11])[..],
            &[0x05, 0x00],
        ]
        .concat(),
    );
    let content = &tbs[header..];
    let at = content
        .windows(pkcs1_alg_id.len())
        .position(|w| w == pkcs1_alg_id)
        .unwrap();
    let new_tbs = tlv(
        0x30,
        &[
            &content[..at],
            pss_alg_id,
            &content[at + pkcs1_alg_id.len()..],
        ]
        .concat(),
    );
    let key = RsaKeyPair::from_pkcs8(rsa_pkcs8).unwrap();
    let mut sig = vec![0; key.public_modulus_len()];
    key.sign(&RSA_PSS_SHA256, &SystemRandom::new(), &new_tbs, &mut sig)
        .unwrap();
    tlv(
        0x30,
        &[
            new_tbs,
            pss_alg_id.to_vec(),
            tlv(0x03, &[&[0u8][..], &sig].concat()),
        ]
        .concat(),
    )
}

/// RSASSA-PSS with SHA-256, MGF1-SHA-256, salt 32 (RFC 4055 encoding).
fn pss_alg_id(salt: u8) -> Vec<u8> {
    let sha256 = tlv(
        0x30,
        &[
            &tlv(
                0x06,
                &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x01],
            )[..],
            &[0x05, 0x00],
        ]
        .concat(),
    );
    let mgf1 = tlv(
        0x30,
        &[
            tlv(0x06, &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 1, 1, 8]),
            sha256.clone(),
        ]
        .concat(),
    );
    let params = tlv(
        0x30,
        &[
            tlv(0xa0, &sha256),
            tlv(0xa1, &mgf1),
            tlv(0xa2, &tlv(0x02, &[salt])),
        ]
        .concat(),
    );
    tlv(
        0x30,
        &[
            tlv(0x06, &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 1, 1, 10]),
            params,
        ]
        .concat(),
    )
}

#[test]
fn rsa_pss_certificates() {
    let root_ca = root("root", &PKCS_RSA_SHA256);
    let leaf = leaf_of(&root_ca, 2025, 2027);
    let pss = resign_pss(&leaf.der, root_ca.key.serialized_der(), &pss_alg_id(32));
    verify_chain(&[pss], std::slice::from_ref(&root_ca.der), at()).unwrap();
    // A salt other than the hash length is refused rather than guessed.
    let odd_salt = resign_pss(&leaf.der, root_ca.key.serialized_der(), &pss_alg_id(20));
    assert!(matches!(
        verify_chain(&[odd_salt], &[root_ca.der], at()),
        Err(ChainError::UnsupportedAlgorithm(_))
    ));
}

#[test]
fn display() {
    let cases: [(ChainError, &str); 10] = [
        (ChainError::Empty, "the chain is empty"),
        (
            ChainError::TooManyCertificates(9),
            "a chain has at most 8 certificates, this one has 9",
        ),
        (
            ChainError::Malformed {
                which: "chain[1]".into(),
                reason: "junk".into(),
            },
            "malformed certificate (chain[1]): junk",
        ),
        (
            ChainError::Expired { not_after_ms: 5 },
            "a certificate expired at 5 ms since the epoch",
        ),
        (
            ChainError::NotYetValid { not_before_ms: 5 },
            "a certificate is valid only from 5 ms since the epoch",
        ),
        (
            ChainError::IssuerNotCa,
            "an issuer is not allowed to issue certificates",
        ),
        (
            ChainError::BadSignature,
            "a certificate's signature does not verify under its issuer's key",
        ),
        (
            ChainError::UnsupportedAlgorithm("x".into()),
            "unsupported certificate signature: x",
        ),
        (
            ChainError::TooManySignatureChecks,
            "path building gave up after 64 signature checks",
        ),
        (
            ChainError::Untrusted,
            "no path leads from the leaf to a trusted root",
        ),
    ];
    for (e, text) in cases {
        assert_eq!(e.to_string(), text);
    }
    let cases: [(VerifyError, &str); 6] = [
        (VerifyError::TooLarge, "the key or signature is too large"),
        (
            VerifyError::MalformedKey("x".into()),
            "malformed SubjectPublicKeyInfo: x",
        ),
        (
            VerifyError::UnsupportedKey("x".into()),
            "unsupported public key: x",
        ),
        (
            VerifyError::RsaKeySize(1024),
            "RSA keys must have 2048 to 8192 bits, this one has 1024",
        ),
        (
            VerifyError::KeyMismatch {
                scheme: Scheme::Ed25519,
                key: "RSA",
            },
            "a RSA key cannot verify Ed25519 signatures",
        ),
        (VerifyError::BadSignature, "the signature does not verify"),
    ];
    for (e, text) in cases {
        assert_eq!(e.to_string(), text);
    }
}

// --- real manufacturer CAs (tests/vectors/tpm, see its PROVENANCE.md) -----------------------

fn pem_der(pem: &str) -> Vec<u8> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap();
    pem.contents
}

/// 2025-06-01, inside every real vector's validity.
const REAL_AT: i64 = 1_748_736_000_000;

/// Flips one byte of the certificate's signature (its last byte).
fn tampered(der: &[u8]) -> Vec<u8> {
    let mut der = der.to_vec();
    *der.last_mut().unwrap() ^= 0x01;
    der
}

#[test]
fn nuvoton_p384_ca_under_the_p521_root_verifies() {
    let root = pem_der(include_str!(
        "../../../../tests/vectors/tpm/ca/ntc-ecc521-root.pem"
    ));
    let ca = pem_der(include_str!(
        "../../../../tests/vectors/tpm/ca/ntc-ecc384-leafca-022111.pem"
    ));
    let verified = verify_chain(
        std::slice::from_ref(&ca),
        std::slice::from_ref(&root),
        REAL_AT,
    )
    .unwrap();
    assert_eq!(verified.root_index, 0);
    // The root signs itself with ecdsa-with-SHA512 on P-521 too.
    verify_chain(
        std::slice::from_ref(&root),
        std::slice::from_ref(&root),
        REAL_AT,
    )
    .unwrap();
    assert_eq!(
        verify_chain(&[tampered(&ca)], &[root], REAL_AT),
        Err(ChainError::BadSignature)
    );
}

#[test]
fn stm_utf8string_issuer_matches_its_printablestring_root() {
    let root = pem_der(include_str!(
        "../../../../tests/vectors/tpm/ca/stm-ecc-root-ca-01.pem"
    ));
    let ca = pem_der(include_str!(
        "../../../../tests/vectors/tpm/ca/stm-ecc-intermediate-ca-02.pem"
    ));
    let (_, parsed_ca) = x509_parser::parse_x509_certificate(&ca).unwrap();
    let (_, parsed_root) = x509_parser::parse_x509_certificate(&root).unwrap();
    // Different bytes, same name.
    assert_ne!(parsed_ca.issuer().as_raw(), parsed_root.subject().as_raw());
    assert!(same_name(parsed_ca.issuer(), parsed_root.subject()));
    verify_chain(
        std::slice::from_ref(&ca),
        std::slice::from_ref(&root),
        REAL_AT,
    )
    .unwrap();
    assert_eq!(
        verify_chain(&[tampered(&ca)], &[root], REAL_AT),
        Err(ChainError::BadSignature)
    );
}

#[test]
fn nuvoton_multi_valued_rdn_root_parses_and_verifies() {
    let root = include_bytes!("../../../../tests/vectors/tpm/ca/ntc-root-ca-2110.der").to_vec();
    verify_chain(
        std::slice::from_ref(&root),
        std::slice::from_ref(&root),
        REAL_AT,
    )
    .unwrap();
    assert_eq!(
        verify_chain(&[tampered(&root)], &[root], REAL_AT),
        Err(ChainError::BadSignature)
    );
}

/// A Name of one RDN holding `attrs` (type OID bytes, string tag, value) in this order.
fn name_der(rdns: &[&[(&[u8], u8, &str)]]) -> Vec<u8> {
    let mut seq = Vec::new();
    for rdn in rdns {
        let mut set = Vec::new();
        for (oid, tag, value) in rdn.iter() {
            let mut atv = tlv(0x06, oid);
            atv.extend(tlv(*tag, value.as_bytes()));
            set.extend(tlv(0x30, &atv));
        }
        seq.extend(tlv(0x31, &set));
    }
    tlv(0x30, &seq)
}

#[test]
fn names_match_under_rfc5280() {
    const CN: &[u8] = &[0x55, 0x04, 0x03];
    const O: &[u8] = &[0x55, 0x04, 0x0a];
    const C: &[u8] = &[0x55, 0x04, 0x06];
    const PRINTABLE: u8 = 0x13;
    const UTF8: u8 = 0x0c;
    const IA5: u8 = 0x16;
    let same = |a: Vec<u8>, b: Vec<u8>| {
        let (_, a) = X509Name::from_der(&a).unwrap();
        let (_, b) = X509Name::from_der(&b).unwrap();
        same_name(&a, &b)
    };
    let base = name_der(&[&[(C, PRINTABLE, "TW")], &[(CN, PRINTABLE, "Root CA 01")]]);
    // String type, case and insignificant spaces do not matter.
    assert!(same(
        base.clone(),
        name_der(&[&[(C, UTF8, "tw")], &[(CN, UTF8, "  root   ca 01 ")]])
    ));
    // Values, types, RDN order and count do.
    assert!(!same(
        base.clone(),
        name_der(&[&[(C, PRINTABLE, "TW")], &[(CN, PRINTABLE, "Root CA 02")]])
    ));
    assert!(!same(
        base.clone(),
        name_der(&[&[(C, PRINTABLE, "TW")], &[(O, PRINTABLE, "Root CA 01")]])
    ));
    assert!(!same(
        base.clone(),
        name_der(&[&[(CN, PRINTABLE, "Root CA 01")], &[(C, PRINTABLE, "TW")]])
    ));
    assert!(!same(base.clone(), name_der(&[&[(C, PRINTABLE, "TW")]])));
    assert!(!same(
        base.clone(),
        name_der(&[&[(C, PRINTABLE, "TW")], &[(CN, PRINTABLE, "RootCA 01")]])
    ));
    // Other string types compare by tag and bytes.
    assert!(!same(
        name_der(&[&[(CN, IA5, "a")]]),
        name_der(&[&[(CN, UTF8, "a")]])
    ));
    // A multi-valued RDN is a set: any order.
    let multi = name_der(&[&[
        (CN, PRINTABLE, "x"),
        (O, PRINTABLE, "y"),
        (C, PRINTABLE, "TW"),
    ]]);
    assert!(same(
        multi.clone(),
        name_der(&[&[
            (C, PRINTABLE, "TW"),
            (CN, PRINTABLE, "x"),
            (O, PRINTABLE, "y")
        ]])
    ));
    assert!(!same(
        multi,
        name_der(&[&[
            (C, PRINTABLE, "TW"),
            (CN, PRINTABLE, "x"),
            (CN, PRINTABLE, "y")
        ]])
    ));
}
