//! The native TPM checks with aws-lc-rs: a real swtpm EK certificate chain, MakeCredential
//! undone as TPM2_ActivateCredential would, and quotes/certifications signed by P-256 keys.

use aws_lc_rs::agreement::{self, ECDH_P256, ECDH_P384};
use aws_lc_rs::cipher::{AES_128, AES_256, DecryptingKey, DecryptionContext, UnboundCipherKey};
use aws_lc_rs::encoding::AsDer as _;
use aws_lc_rs::hmac;
use aws_lc_rs::iv::FixedLength;
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::rsa::{
    KeySize, OAEP_SHA256_MGF1SHA256, OAEP_SHA384_MGF1SHA384, OaepPrivateDecryptingKey,
    PrivateDecryptingKey,
};
use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _};
use gatehouse_tpm::marshal::{
    AK_ATTRIBUTES, NODE_KEY_ATTRIBUTES, certify_attest, ecc_ek_public, ecc_p256_public,
    ecc_p384_ek_public, ecdsa_sha256_signature, quote_attest, rsa_ek_public, rsa3072_ek_public,
};
use gatehouse_tpm::{HashAlg, PcrValue, TpmError, kdfa, kdfe};

use super::native::{self, AwsLcVerifier, EkError};

const EK_CERT: &[u8] = include_bytes!("../testdata/swtpm-ek-rsa2048.der");
const LOCAL_CA: &[u8] = include_bytes!("../testdata/swtpm-localca.der");
const ROOT: &[u8] = include_bytes!("../testdata/swtpm-localca-root.der");
const MODULUS_HEX: &str = include_str!("../testdata/swtpm-ek-rsa2048.modulus.hex");
/// 2030-01-01, inside the swtpm certificates' validity.
const AT: i64 = 1_893_456_000_000;

fn swtpm_ek_public() -> Vec<u8> {
    rsa_ek_public(&hex::decode(MODULUS_HEX.trim()).unwrap())
}

#[test]
fn a_real_swtpm_ek_certificate_verifies() {
    let ek = native::verify_ek(
        &swtpm_ek_public(),
        EK_CERT,
        &[LOCAL_CA.to_vec()],
        &[ROOT.to_vec()],
        AT,
    )
    .unwrap();
    assert_eq!(ek.name_alg, HashAlg::Sha256);
    // The intermediate may also be configured as the root.
    assert!(native::verify_ek(&swtpm_ek_public(), EK_CERT, &[], &[LOCAL_CA.to_vec()], AT).is_ok());
}

#[test]
fn an_ek_certificate_from_another_ca_or_for_another_key_is_refused() {
    // Without the intermediate, the root alone does not reach the EK certificate.
    assert!(matches!(
        native::verify_ek(&swtpm_ek_public(), EK_CERT, &[], &[ROOT.to_vec()], AT),
        Err(EkError::Chain(_))
    ));
    // A root that is not the swtpm CA (the EK certificate itself is no CA).
    assert!(matches!(
        native::verify_ek(
            &swtpm_ek_public(),
            EK_CERT,
            &[LOCAL_CA.to_vec()],
            &[EK_CERT.to_vec()],
            AT
        ),
        Err(EkError::Chain(_))
    ));
    // Before the certificates' notBefore.
    assert!(matches!(
        native::verify_ek(
            &swtpm_ek_public(),
            EK_CERT,
            &[LOCAL_CA.to_vec()],
            &[ROOT.to_vec()],
            0
        ),
        Err(EkError::Chain(_))
    ));
    // A trusted certificate for another EK.
    let mut other = hex::decode(MODULUS_HEX.trim()).unwrap();
    other[100] ^= 1;
    assert_eq!(
        native::verify_ek(
            &rsa_ek_public(&other),
            EK_CERT,
            &[LOCAL_CA.to_vec()],
            &[ROOT.to_vec()],
            AT
        ),
        Err(EkError::KeyMismatch)
    );
    // Garbage.
    assert!(native::verify_ek(b"junk", EK_CERT, &[], &[ROOT.to_vec()], AT).is_err());
    assert!(native::verify_ek(&swtpm_ek_public(), b"junk", &[], &[ROOT.to_vec()], AT).is_err());
}

/// An EK's private key, for TPM2_ActivateCredential in software.
enum EkPrivate<'a> {
    /// RSA: the seed is OAEP-decrypted with the nameAlg `hash`.
    Rsa(&'a PrivateDecryptingKey, HashAlg),
    /// ECC: the seed is KDFe of ECDH with the ephemeral point; `x` is the EK's x.
    Ecc(&'a agreement::PrivateKey, HashAlg, Vec<u8>),
}

/// TPM2_ActivateCredential in software, from the EK's private key (Part 1 §24): the seed
/// recovered, the outer HMAC checked, the secret decrypted.
fn activate(ek: &EkPrivate<'_>, ak_name: &[u8], blob: &[u8], encrypted: &[u8]) -> Option<Vec<u8>> {
    let (seed, hash) = match ek {
        EkPrivate::Rsa(key, hash) => {
            let algorithm = match hash {
                HashAlg::Sha256 => &OAEP_SHA256_MGF1SHA256,
                _ => &OAEP_SHA384_MGF1SHA384,
            };
            let oaep = OaepPrivateDecryptingKey::new((*key).clone()).unwrap();
            let mut seed = vec![0; oaep.min_output_size()];
            let seed = oaep
                .decrypt(algorithm, encrypted, &mut seed, Some(b"IDENTITY\0"))
                .unwrap()
                .to_vec();
            (seed, *hash)
        }
        EkPrivate::Ecc(key, hash, ek_x) => {
            // TPMS_ECC_POINT: TPM2B x ‖ TPM2B y.
            let width = ek_x.len();
            assert_eq!(encrypted.len(), 4 + 2 * width);
            assert_eq!(
                &encrypted[..2],
                &u16::try_from(width).unwrap().to_be_bytes()
            );
            let x = &encrypted[2..2 + width];
            let y = &encrypted[4 + width..];
            let mut point = vec![4];
            point.extend_from_slice(x);
            point.extend_from_slice(y);
            let algorithm = if width == 32 { &ECDH_P256 } else { &ECDH_P384 };
            let z = agreement::agree(
                key,
                agreement::UnparsedPublicKey::new(algorithm, &point),
                (),
                |z| Ok(z.to_vec()),
            )
            .unwrap();
            let bits = u32::try_from(hash.size() * 8).unwrap();
            (kdfe(*hash, &z, b"IDENTITY", x, ek_x, bits).unwrap(), *hash)
        }
    };
    assert_eq!(seed.len(), hash.size());
    let size = hash.size();
    let (blob_size, rest) = blob.split_at(2);
    assert_eq!(blob_size, u16::try_from(size).unwrap().to_be_bytes());
    let (integrity, enc_identity) = rest.split_at(size);
    let bits = u32::try_from(size * 8).unwrap();
    let hmac_key = kdfa(hash, &seed, b"INTEGRITY", &[], &[], bits).unwrap();
    let hmac_key = match hash {
        HashAlg::Sha256 => hmac::Key::new(hmac::HMAC_SHA256, &hmac_key),
        _ => hmac::Key::new(hmac::HMAC_SHA384, &hmac_key),
    };
    let mut message = enc_identity.to_vec();
    message.extend_from_slice(ak_name);
    hmac::verify(&hmac_key, &message, integrity).ok()?;
    let (cipher, key_bits) = match hash {
        HashAlg::Sha256 => (&AES_128, 128),
        _ => (&AES_256, 256),
    };
    let sym = kdfa(hash, &seed, b"STORAGE", ak_name, &[], key_bits).unwrap();
    let key = DecryptingKey::cfb128(UnboundCipherKey::new(cipher, &sym).unwrap()).unwrap();
    let mut plain = enc_identity.to_vec();
    key.decrypt(
        &mut plain,
        DecryptionContext::Iv128(FixedLength::from([0u8; 16])),
    )
    .unwrap();
    let len = usize::from(u16::from_be_bytes([plain[0], plain[1]]));
    Some(plain[2..2 + len].to_vec())
}

fn modulus_of(key: &PrivateDecryptingKey) -> Vec<u8> {
    use x509_parser::prelude::FromDer as _;
    let der = key.public_key().as_der().unwrap();
    let (_, spki) = x509_parser::x509::SubjectPublicKeyInfo::from_der(der.as_ref()).unwrap();
    let x509_parser::public_key::PublicKey::RSA(rsa) = spki.parsed().unwrap() else {
        panic!("not RSA")
    };
    let m = rsa.modulus;
    m[m.iter().position(|b| *b != 0).unwrap()..].to_vec()
}

/// Makes a credential for `ek_public`, checks that `ek` activates it and that another AK
/// name does not; returns the encrypted secret's length.
fn round_trip(ek: &EkPrivate<'_>, ek_public: &[u8]) -> usize {
    let ak_name = gatehouse_tpm::Public::parse(&ak().1).unwrap().name;
    let secret = [0x5e; 32];
    let credential = native::make_credential(ek_public, &ak_name, &secret).unwrap();
    assert_eq!(
        activate(
            ek,
            &ak_name,
            &credential.credential_blob,
            &credential.encrypted_secret
        ),
        Some(secret.to_vec())
    );
    // A fresh seed (or ephemeral key) each time.
    let again = native::make_credential(ek_public, &ak_name, &secret).unwrap();
    assert_ne!(again.encrypted_secret, credential.encrypted_secret);
    // Another AK name: the integrity check fails (ActivateCredential would refuse).
    let mut other_name = ak_name.clone();
    other_name[5] ^= 1;
    assert_eq!(
        activate(
            ek,
            &other_name,
            &credential.credential_blob,
            &credential.encrypted_secret
        ),
        None
    );
    credential.encrypted_secret.len()
}

#[test]
fn make_credential_activates_only_with_the_ek_and_the_ak_name() {
    let ek = PrivateDecryptingKey::generate(KeySize::Rsa2048).unwrap();
    let ek_public = rsa_ek_public(&modulus_of(&ek));
    assert_eq!(
        round_trip(&EkPrivate::Rsa(&ek, HashAlg::Sha256), &ek_public),
        256
    );
    // Not an EK.
    let ak_name = gatehouse_tpm::Public::parse(&ak().1).unwrap().name;
    assert!(native::make_credential(&ak().1, &ak_name, &[1; 32]).is_err());
}

#[test]
fn make_credential_for_a_high_range_rsa3072_ek_uses_oaep_sha384() {
    let ek = PrivateDecryptingKey::generate(KeySize::Rsa3072).unwrap();
    let ek_public = rsa3072_ek_public(&modulus_of(&ek));
    assert_eq!(
        round_trip(&EkPrivate::Rsa(&ek, HashAlg::Sha384), &ek_public),
        384
    );
}

/// An ECC EK key pair and its public area (`p384`: template H-3, else L-2).
fn ecc_ek(p384: bool) -> (agreement::PrivateKey, Vec<u8>, Vec<u8>) {
    let (algorithm, width) = if p384 {
        (&ECDH_P384, 48)
    } else {
        (&ECDH_P256, 32)
    };
    let key = agreement::PrivateKey::generate(algorithm).unwrap();
    let point = key.compute_public_key().unwrap().as_ref().to_vec();
    let (x, y) = point[1..].split_at(width);
    let public = if p384 {
        ecc_p384_ek_public(x, y)
    } else {
        ecc_ek_public(x, y)
    };
    (key, public, x.to_vec())
}

#[test]
fn make_credential_for_ecc_eks_uses_ecdh_and_kdfe() {
    let (key, public, x) = ecc_ek(false);
    assert_eq!(
        round_trip(&EkPrivate::Ecc(&key, HashAlg::Sha256, x), &public),
        4 + 64
    );
    let (key, public, x) = ecc_ek(true);
    assert_eq!(
        round_trip(&EkPrivate::Ecc(&key, HashAlg::Sha384, x), &public),
        4 + 96
    );
}

#[test]
fn make_credential_refuses_an_ecc_ek_whose_point_is_not_on_its_curve() {
    let ak_name = gatehouse_tpm::Public::parse(&ak().1).unwrap().name;
    let (_, _, x) = ecc_ek(false);
    // The point (x, x) is (with overwhelming probability) not on P-256.
    let off_curve = ecc_ek_public(&x, &x);
    assert_eq!(
        native::make_credential(&off_curve, &ak_name, &[1; 32]),
        Err(TpmError::Malformed("the EK's point is not on its curve"))
    );
}

/// A P-256 AK (its key pair and public area).
fn ak() -> (EcdsaKeyPair, Vec<u8>) {
    p256_key(AK_ATTRIBUTES, true)
}

fn p256_key(attributes: u32, scheme: bool) -> (EcdsaKeyPair, Vec<u8>) {
    let pair = EcdsaKeyPair::generate(&ECDSA_P256_SHA256_FIXED_SIGNING).unwrap();
    let point = pair.public_key().as_ref().to_vec();
    let public = ecc_p256_public(attributes, scheme, &point[1..33], &point[33..65]);
    (pair, public)
}

fn sign(pair: &EcdsaKeyPair, message: &[u8]) -> Vec<u8> {
    let sig = pair.sign(&SystemRandom::new(), message).unwrap();
    ecdsa_sha256_signature(sig.as_ref())
}

#[test]
fn quotes_and_certifications_verify_with_aws_lc() {
    let (ak_pair, ak_public) = ak();
    let nonce = [3u8; 32];
    let pcrs = vec![PcrValue {
        hash_alg: 0x000b,
        index: 7,
        digest: vec![7; 32],
    }];
    let digest = gatehouse_tpm::pcr_digest(HashAlg::Sha256, &pcrs).unwrap();
    let quote = quote_attest(&nonce, &[7], &digest);
    let sig = sign(&ak_pair, &quote);
    assert_eq!(
        gatehouse_tpm::verify_quote(&AwsLcVerifier, &ak_public, &quote, &sig, &pcrs, &nonce)
            .unwrap(),
        pcrs
    );
    let mut flipped = quote.clone();
    flipped[20] ^= 1;
    assert_eq!(
        gatehouse_tpm::verify_quote(&AwsLcVerifier, &ak_public, &flipped, &sig, &pcrs, &nonce),
        Err(TpmError::BadSignature)
    );

    let (_, node_public) = p256_key(NODE_KEY_ATTRIBUTES, false);
    let name = gatehouse_tpm::Public::parse(&node_public).unwrap().name;
    let info = certify_attest(&nonce, &name);
    let sig = sign(&ak_pair, &info);
    assert!(
        gatehouse_tpm::verify_certify(
            &AwsLcVerifier,
            &ak_public,
            &info,
            &sig,
            &node_public,
            &nonce
        )
        .is_ok()
    );
    let (other_pair, _) = p256_key(AK_ATTRIBUTES, true);
    let forged = sign(&other_pair, &info);
    assert_eq!(
        gatehouse_tpm::verify_certify(
            &AwsLcVerifier,
            &ak_public,
            &info,
            &forged,
            &node_public,
            &nonce
        ),
        Err(TpmError::BadSignature)
    );
}

/// Every entry point of the import on `bytes`: an error or a value, never a panic.
fn all_entry_points(bytes: &[u8]) {
    let _ = native::parse_public(bytes);
    let _ = gatehouse_tpm::check_ak(bytes);
    let _ = native::make_credential(bytes, bytes, bytes);
    let _ = native::make_credential(&swtpm_ek_public(), bytes, &[1; 32]);
    let _ = native::verify_ek(bytes, EK_CERT, &[LOCAL_CA.to_vec()], &[ROOT.to_vec()], AT);
    let _ = native::verify_ek(
        &swtpm_ek_public(),
        bytes,
        &[bytes.to_vec()],
        &[ROOT.to_vec()],
        AT,
    );
    let _ = gatehouse_tpm::verify_quote(&AwsLcVerifier, bytes, bytes, bytes, &[], bytes);
    let _ = gatehouse_tpm::verify_certify(&AwsLcVerifier, bytes, bytes, bytes, bytes, bytes);
    let (_, ak_public) = ak();
    let _ = gatehouse_tpm::verify_quote(&AwsLcVerifier, &ak_public, bytes, bytes, &[], &[]);
}

mod fuzz {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            all_entry_points(&bytes);
        }

        #[test]
        fn mutated_valid_structures_never_panic(
            which in 0usize..6,
            edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
        ) {
            let (pair, ak_public) = ak();
            let quote = quote_attest(&[1; 32], &[0], &[0; 32]);
            let mut bytes = match which {
                0 => ak_public.clone(),
                1 => swtpm_ek_public(),
                2 => EK_CERT.to_vec(),
                3 => ecc_ek(false).1,
                4 => ecc_ek(true).1,
                _ => sign(&pair, &quote),
            };
            for (at, value) in edits {
                let len = bytes.len();
                bytes[at % len] = value;
            }
            all_entry_points(&bytes);
        }
    }
}

// --- real manufacturer EK certificates (tests/vectors/tpm, see its PROVENANCE.md) -----------

/// The vendors' published roots and intermediates (169 certificates, `#` comments between
/// them), all configured as trust anchors, as an operator configures the bundle.
fn vendor_bundle() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for text in [
        include_str!("../../../../tests/vectors/tpm/ca/tpm-ca-certificates.pem"),
        include_str!("../../../../tests/vectors/tpm/ca/tpm-intermediate-ca-certificates.pem"),
    ] {
        for pem in x509_parser::pem::Pem::iter_from_buffer(text.as_bytes()) {
            out.push(pem.unwrap().contents);
        }
    }
    out
}

/// The EK public area (TCG default template) holding the key `certificate` certifies: what the
/// TPM's EK is, derived here because the vectors are certificates only.
fn ek_public_of(certificate: &[u8]) -> Vec<u8> {
    let der = gatehouse_tpm::nv_certificate(certificate).unwrap();
    let (_, cert) = x509_parser::parse_x509_certificate(der).unwrap();
    match cert.public_key().parsed().unwrap() {
        x509_parser::public_key::PublicKey::RSA(rsa) => {
            let modulus = rsa.modulus.strip_prefix(&[0]).unwrap_or(rsa.modulus);
            rsa_ek_public(modulus)
        }
        x509_parser::public_key::PublicKey::EC(point) => match point.data() {
            // Uncompressed points: P-256 (template L-2), P-384 (template H-3).
            data if data.len() == 65 => ecc_ek_public(&data[1..33], &data[33..]),
            data if data.len() == 97 => ecc_p384_ek_public(&data[1..49], &data[49..]),
            data => panic!("unexpected EC point of {} bytes", data.len()),
        },
        other => panic!("unexpected EK key {other:?}"),
    }
}

/// 2025-06-01: inside every vector's validity.
const REAL_AT: i64 = 1_748_736_000_000;

#[test]
fn real_vendor_ek_certificates_verify_against_the_published_bundle() {
    let roots = vendor_bundle();
    assert_eq!(roots.len(), 169);
    for (name, cert) in [
        (
            "STMicro RSA, NV-padded",
            &include_bytes!("../../../../tests/vectors/tpm/ek/stm-rsa-nv-padded.der")[..],
        ),
        (
            "STMicro ECC P-256",
            &include_bytes!("../../../../tests/vectors/tpm/ek/stm-ecc-p256.der")[..],
        ),
        (
            "Infineon RSA",
            &include_bytes!("../../../../tests/vectors/tpm/ek/ifx-rsa.der")[..],
        ),
        (
            "Infineon ECC P-256",
            &include_bytes!("../../../../tests/vectors/tpm/ek/ifx-ecc-p256.der")[..],
        ),
        (
            "Nuvoton NPCT6xx RSA (Root CA 1110)",
            &include_bytes!("../../../../tests/vectors/tpm/ek/ntc-npct6xx-rsa-root1110.der")[..],
        ),
        (
            "Nuvoton NPCT75x RSA (Root CA 2111)",
            &include_bytes!("../../../../tests/vectors/tpm/ek/ntc-npct75x-rsa.der")[..],
        ),
        (
            "Nuvoton NPCT75x ECC P-256 (Root CA 2111)",
            &include_bytes!("../../../../tests/vectors/tpm/ek/ntc-npct75x-ecc-p256.der")[..],
        ),
        (
            // Signed with P-521 (ecdsa-with-SHA512) by "TPM 2.0 ECC CA 056", itself under the
            // P-521 "Infineon OPTIGA(TM) ECC Root CA 2".
            "Infineon SLB 9672 ECC P-384 (ECC Root CA 2, P-521)",
            &include_bytes!("../../../../tests/vectors/tpm/ek/ifx-slb9672-ecc-p384.der")[..],
        ),
    ] {
        let ek = ek_public_of(cert);
        native::verify_ek(&ek, cert, &[], &roots, REAL_AT)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        // The vendor's key (RSA, or a P-256 point for ECDH) takes a MakeCredential challenge.
        let ak_name = gatehouse_tpm::Public::parse(&ak().1).unwrap().name;
        native::make_credential(&ek, &ak_name, &[1; 32])
            .unwrap_or_else(|e| panic!("{name}: MakeCredential: {e}"));
        // One byte of the signature changed.
        let der_len = gatehouse_tpm::nv_certificate(cert).unwrap().len();
        let mut tampered = cert.to_vec();
        tampered[der_len - 1] ^= 0x01;
        assert!(
            matches!(
                native::verify_ek(&ek, &tampered, &[], &roots, REAL_AT),
                Err(EkError::Chain(_))
            ),
            "{name}: tampered"
        );
        // Another EK's public area.
        let other = ek_public_of(include_bytes!(
            "../../../../tests/vectors/tpm/ek/ifx-ecc-p256.der"
        ));
        if other != ek {
            assert_eq!(
                native::verify_ek(&other, cert, &[], &roots, REAL_AT),
                Err(EkError::KeyMismatch),
                "{name}: another EK"
            );
        }
    }
}

#[test]
fn nv_fill_is_cut_but_other_trailing_bytes_refused() {
    let padded = include_bytes!("../../../../tests/vectors/tpm/ek/stm-rsa-nv-padded.der");
    let roots = vendor_bundle();
    let ek = ek_public_of(padded);
    let der_len = gatehouse_tpm::nv_certificate(padded).unwrap().len();
    assert_eq!((der_len, padded.len()), (1169, 1600));
    // The DER alone verifies too.
    native::verify_ek(&ek, &padded[..der_len], &[], &roots, REAL_AT).unwrap();
    // A byte in the fill that is not fill: the index no longer holds only a certificate.
    let mut junk = padded.to_vec();
    junk[der_len + 10] = 0x00;
    assert!(matches!(
        native::verify_ek(&ek, &junk, &[], &roots, REAL_AT),
        Err(EkError::Chain(_))
    ));
}

/// Intel PTT (firmware TPM) EKs certified by Intel's EK service, under Intel's "TPM EK root
/// cert signing" root (in Microsoft's TrustedTpm.cab, not in the vendor bundle above), each with
/// its platform's intermediate as the TPM sends it. The GLK certificate names its issuer with one
/// space where the intermediate's subject has two: the same name under RFC 5280.
#[test]
fn real_intel_ptt_ek_certificates_verify_under_intels_ek_root() {
    let root = include_bytes!("../../../../tests/vectors/tpm/ca/intel-ek-root.der").to_vec();
    let spt = pem(include_str!(
        "../../../../tests/vectors/tpm/ek/intel-ptt-spt-rsa.pem"
    ));
    for (name, cert, intermediate) in [
        (
            "Intel PTT SPT RSA",
            spt,
            &include_bytes!("../../../../tests/vectors/tpm/ca/intel-ek-intermediate-spth.der")[..],
        ),
        (
            "Intel PTT GLK ECC P-256",
            include_bytes!("../../../../tests/vectors/tpm/ek/intel-ptt-glk-ecc-p256.der").to_vec(),
            &include_bytes!("../../../../tests/vectors/tpm/ca/intel-ek-intermediate-glk.der")[..],
        ),
    ] {
        let ek = ek_public_of(&cert);
        let chain = [intermediate.to_vec()];
        native::verify_ek(&ek, &cert, &chain, std::slice::from_ref(&root), REAL_AT)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        // Without Intel's root configured, the vendor bundle alone does not admit it.
        assert!(
            matches!(
                native::verify_ek(&ek, &cert, &chain, &vendor_bundle(), REAL_AT),
                Err(EkError::Chain(_))
            ),
            "{name}: bundle only"
        );
        // One byte of the signature changed.
        let mut tampered = cert.clone();
        let last = tampered.len() - 1;
        tampered[last] ^= 0x01;
        assert!(
            matches!(
                native::verify_ek(&ek, &tampered, &chain, std::slice::from_ref(&root), REAL_AT),
                Err(EkError::Chain(_))
            ),
            "{name}: tampered"
        );
    }
}

/// A Nuvoton NPCT6xx EK under "Nuvoton TPM Root CA 2110", a root the vendor bundle lacks. That
/// root names itself (and the EK its issuer) with one multi-valued RDN whose SET is not in DER
/// order (python-cryptography refuses to parse it; OpenSSL and RFC 5280 matching accept it).
#[test]
fn a_real_nuvoton_ek_under_a_root_outside_the_bundle_needs_that_root() {
    let cert = include_bytes!("../../../../tests/vectors/tpm/ek/ntc-npct6xx-rsa-root2110.der");
    let root = include_bytes!("../../../../tests/vectors/tpm/ca/ntc-root-ca-2110.der").to_vec();
    let ek = ek_public_of(cert);
    assert!(matches!(
        native::verify_ek(&ek, cert, &[], &vendor_bundle(), REAL_AT),
        Err(EkError::Chain(_))
    ));
    native::verify_ek(&ek, cert, &[], std::slice::from_ref(&root), REAL_AT).unwrap();
    let mut tampered = cert.to_vec();
    let last = tampered.len() - 1;
    tampered[last] ^= 0x01;
    assert!(matches!(
        native::verify_ek(&ek, &tampered, &[], std::slice::from_ref(&root), REAL_AT),
        Err(EkError::Chain(_))
    ));
}

fn pem(text: &str) -> Vec<u8> {
    x509_parser::pem::Pem::iter_from_buffer(text.as_bytes())
        .next()
        .unwrap()
        .unwrap()
        .contents
}

/// Google Compute Engine vTPM EKs under both of Google's hierarchies. Google signs EKs and AKs
/// with two intermediates of the same name ("EK/AK CA Intermediate") and different keys: a
/// chain holding both must still verify (every candidate issuer is tried), and the AK one
/// alone must not.
#[test]
fn real_gce_vtpm_ek_certificates_verify_under_googles_roots() {
    let cert = pem(include_str!(
        "../../../../tests/vectors/tpm/ek/gce-vtpm-ek-rsa.pem"
    ));
    let root = pem(include_str!(
        "../../../../tests/vectors/tpm/ca/gce-ek-ak-ca-root.pem"
    ));
    let for_eks = pem(include_str!(
        "../../../../tests/vectors/tpm/ca/gce-ek-ak-ca-intermediate-ek.pem"
    ));
    let for_aks = pem(include_str!(
        "../../../../tests/vectors/tpm/ca/gce-ek-ak-ca-intermediate-ak.pem"
    ));
    let ek = ek_public_of(&cert);
    let roots = std::slice::from_ref(&root);
    native::verify_ek(&ek, &cert, std::slice::from_ref(&for_eks), roots, REAL_AT).unwrap();
    native::verify_ek(
        &ek,
        &cert,
        &[for_aks.clone(), for_eks.clone()],
        roots,
        REAL_AT,
    )
    .expect("the right one of two same-name intermediates");
    assert!(matches!(
        native::verify_ek(&ek, &cert, std::slice::from_ref(&for_aks), roots, REAL_AT),
        Err(EkError::Chain(_))
    ));
    let mut tampered = cert.clone();
    let last = tampered.len() - 1;
    tampered[last] ^= 0x01;
    assert!(matches!(
        native::verify_ek(
            &ek,
            &tampered,
            std::slice::from_ref(&for_eks),
            roots,
            REAL_AT
        ),
        Err(EkError::Chain(_))
    ));

    // The older hierarchy: an EK of a "tpm_ek_v1_cloud_host" signer, under tpm_ek_root_1.
    let v1 = include_bytes!("../../../../tests/vectors/tpm/ek/gce-vtpm-ek-rsa-v1.der");
    let root_1 =
        include_bytes!("../../../../tests/vectors/tpm/quote/gce-tpm-ek-root-1.der").to_vec();
    let intermediate_3 = pem(include_str!(
        "../../../../tests/vectors/tpm/ca/gce-tpm-ek-intermediate-3.pem"
    ));
    let ek = ek_public_of(v1);
    native::verify_ek(
        &ek,
        v1,
        std::slice::from_ref(&intermediate_3),
        std::slice::from_ref(&root_1),
        REAL_AT,
    )
    .unwrap();
    assert!(matches!(
        native::verify_ek(&ek, v1, &[], std::slice::from_ref(&root_1), REAL_AT),
        Err(EkError::Chain(_))
    ));
}

// --- real quotes (tests/vectors/tpm/quote, see tests/vectors/tpm/PROVENANCE.md) -------------

/// A `pcrs.txt` vector ("index hex" lines) as the bank `hash_alg`'s values.
fn real_pcrs(text: &str, hash_alg: u16) -> Vec<PcrValue> {
    text.lines()
        .map(|line| {
            let (index, hex_value) = line.split_once(' ').unwrap();
            PcrValue {
                hash_alg,
                index: index.parse().unwrap(),
                digest: hex::decode(hex_value.trim()).unwrap(),
            }
        })
        .collect()
}

/// A Google Compute Engine Shielded VM's vTPM quoted PCRs 0-23 of each of its three banks for
/// the nonce `90 09`, signed RSASSA-SHA256 by its AK: each verifies through what the `tpm`
/// import's `verify-quote` calls, and each change of the quote, the nonce, a PCR value or the
/// signature is refused.
#[test]
fn real_gce_vtpm_quotes_verify_and_any_change_is_refused() {
    let ak = include_bytes!("../../../../tests/vectors/tpm/quote/gce-cos85.akpub.bin");
    let nonce = [0x90, 0x09];
    for (bank, hash_alg, quote, signature, pcrs) in [
        (
            "SHA-1 bank",
            HashAlg::Sha1.id(),
            &include_bytes!("../../../../tests/vectors/tpm/quote/gce-cos85.sha1.attest.bin")[..],
            &include_bytes!("../../../../tests/vectors/tpm/quote/gce-cos85.sha1.sig.bin")[..],
            include_str!("../../../../tests/vectors/tpm/quote/gce-cos85.sha1.pcrs.txt"),
        ),
        (
            "SHA-256 bank",
            HashAlg::Sha256.id(),
            &include_bytes!("../../../../tests/vectors/tpm/quote/gce-cos85.sha256.attest.bin")[..],
            &include_bytes!("../../../../tests/vectors/tpm/quote/gce-cos85.sha256.sig.bin")[..],
            include_str!("../../../../tests/vectors/tpm/quote/gce-cos85.sha256.pcrs.txt"),
        ),
        (
            "SHA-384 bank",
            HashAlg::Sha384.id(),
            &include_bytes!("../../../../tests/vectors/tpm/quote/gce-cos85.sha384.attest.bin")[..],
            &include_bytes!("../../../../tests/vectors/tpm/quote/gce-cos85.sha384.sig.bin")[..],
            include_str!("../../../../tests/vectors/tpm/quote/gce-cos85.sha384.pcrs.txt"),
        ),
    ] {
        let pcrs = real_pcrs(pcrs, hash_alg);
        assert_eq!(pcrs.len(), 24, "{bank}");
        let verify = |quote: &[u8], signature: &[u8], pcrs: &[PcrValue], nonce: &[u8]| {
            gatehouse_tpm::verify_quote(&AwsLcVerifier, ak, quote, signature, pcrs, nonce)
        };
        assert_eq!(
            verify(quote, signature, &pcrs, &nonce).unwrap_or_else(|e| panic!("{bank}: {e}")),
            pcrs,
            "{bank}"
        );
        let mut changed = quote.to_vec();
        let last = changed.len() - 1;
        changed[last] ^= 0x01;
        assert_eq!(
            verify(&changed, signature, &pcrs, &nonce),
            Err(TpmError::BadSignature),
            "{bank}: quote"
        );
        let mut changed = signature.to_vec();
        changed[100] ^= 0x01;
        assert_eq!(
            verify(quote, &changed, &pcrs, &nonce),
            Err(TpmError::BadSignature),
            "{bank}: signature"
        );
        assert_eq!(
            verify(quote, signature, &pcrs, &[0x90, 0x0a]),
            Err(TpmError::WrongNonce),
            "{bank}: nonce"
        );
        let mut changed = pcrs.clone();
        changed[7].digest[0] ^= 0x01;
        assert_eq!(
            verify(quote, signature, &changed, &nonce),
            Err(TpmError::PcrMismatch),
            "{bank}: PCR 7"
        );
    }
}

/// A Windows GCE VM's real quote signed RSASSA-**SHA1** (its AK's scheme): refused, though
/// the signature is genuine (OpenSSL verifies it, see the provenance), because the host
/// accepts no SHA-1 signature.
#[test]
fn a_real_sha1_signed_quote_is_refused() {
    let refused = gatehouse_tpm::verify_quote(
        &AwsLcVerifier,
        include_bytes!("../../../../tests/vectors/tpm/quote/gcp-windows-sha1.akpub.bin"),
        include_bytes!("../../../../tests/vectors/tpm/quote/gcp-windows-sha1.attest.bin"),
        include_bytes!("../../../../tests/vectors/tpm/quote/gcp-windows-sha1.sig.bin"),
        &real_pcrs(
            include_str!("../../../../tests/vectors/tpm/quote/gcp-windows-sha1.pcrs.txt"),
            HashAlg::Sha1.id(),
        ),
        &[],
    );
    assert_eq!(refused, Err(TpmError::Unsupported("signature hash")));
}

#[test]
fn the_intermediate_may_come_from_the_tpm_instead_of_the_configuration() {
    // Infineon's manufacturing CA sent as an intermediate; only the vendor roots configured.
    let roots: Vec<Vec<u8>> = x509_parser::pem::Pem::iter_from_buffer(include_bytes!(
        "../../../../tests/vectors/tpm/ca/tpm-ca-certificates.pem"
    ))
    .map(|p| p.unwrap().contents)
    .collect();
    let cert = include_bytes!("../../../../tests/vectors/tpm/ek/ifx-rsa.der");
    let inter = include_bytes!("../../../../tests/vectors/tpm/ca/ifx-rsa-mfr-ca-022.der");
    let ek = ek_public_of(cert);
    native::verify_ek(&ek, cert, &[inter.to_vec()], &roots, REAL_AT).unwrap();
    assert!(matches!(
        native::verify_ek(&ek, cert, &[], &roots, REAL_AT),
        Err(EkError::Chain(_))
    ));
}
