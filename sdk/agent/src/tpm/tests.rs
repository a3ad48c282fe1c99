//! The TPM module against swtpm: a real TPM 2.0 with an EK certificate from a local CA.

use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED, UnparsedPublicKey};
use gatehouse_proto::Challenge;
use gatehouse_proto::tpm::{TpmChallenge, TpmEvidence, ak_statement};
use tss_esapi::structures::{Attest, AttestInfo, Public, Signature};
use tss_esapi::traits::UnMarshall as _;
use x509_parser::prelude::{FromDer, X509Certificate};

use super::swtpm::{LocalCa, Swtpm};
use super::*;
use crate::producer::EvidenceProducer as _;

fn started() -> (LocalCa, Swtpm, Tpm) {
    let ca = LocalCa::new().unwrap();
    let sw = Swtpm::start(&ca).unwrap();
    let tpm = sw.open().unwrap();
    (ca, sw, tpm)
}

/// Verifies a TPMT_SIGNATURE (ECDSA) over `message` by the P-256 key in `public`.
fn verify(public: &[u8], message: &[u8], signature: &[u8]) -> bool {
    let public = Public::unmarshall(public).unwrap();
    let (point, _) = p256_public(&public).unwrap();
    let Signature::EcDsa(sig) = Signature::unmarshall(signature).unwrap() else {
        panic!("not ECDSA")
    };
    let mut rs = fixed32(sig.signature_r()).unwrap().to_vec();
    rs.extend(fixed32(sig.signature_s()).unwrap());
    UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, point)
        .verify(message, &rs)
        .is_ok()
}

#[test]
fn enrollment_carries_the_ek_its_certificate_and_an_attestation_key() {
    let (ca, _sw, tpm) = started();
    let e = tpm.enrollment().unwrap();
    assert_eq!(e.v, 1);
    // The EK is the default RSA-2048 EK, and its certificate certifies it.
    let Public::Rsa {
        unique,
        object_attributes,
        ..
    } = Public::unmarshall(&e.ek_public).unwrap()
    else {
        panic!("an RSA EK")
    };
    assert!(object_attributes.restricted() && object_attributes.decrypt());
    let (_, cert) = X509Certificate::from_der(&e.ek_certificate).unwrap();
    let modulus = match cert.public_key().parsed().unwrap() {
        x509_parser::public_key::PublicKey::RSA(rsa) => rsa.modulus.to_vec(),
        other => panic!("{other:?}"),
    };
    let modulus = modulus
        .strip_prefix(&[0u8][..])
        .unwrap_or(&modulus)
        .to_vec();
    assert_eq!(modulus, unique.value());
    // Issued by the local CA's intermediate.
    let inter = ca.intermediate_der().unwrap();
    let (_, inter) = X509Certificate::from_der(&inter).unwrap();
    cert.verify_signature(Some(inter.public_key())).unwrap();
    // The AK: a restricted P-256 signing key made in the TPM.
    let Public::Ecc {
        object_attributes: a,
        ..
    } = Public::unmarshall(&e.ak_public).unwrap()
    else {
        panic!("a P-256 AK")
    };
    assert!(a.restricted() && a.sign_encrypt() && !a.decrypt());
    assert!(a.fixed_tpm() && a.fixed_parent() && a.sensitive_data_origin());
    // Nothing persisted: the same keys again.
    let again = tpm.enrollment().unwrap();
    assert_eq!(
        (&again.ek_public, &again.ak_public),
        (&e.ek_public, &e.ak_public)
    );
    assert!(ak_statement(&tpm_name(&e.ak_public)).is_some());
}

/// The point of an ECC EK certificate, `04 ‖ x ‖ y`.
fn certified_point(certificate: &[u8]) -> Vec<u8> {
    let (_, cert) = X509Certificate::from_der(certificate).unwrap();
    match cert.public_key().parsed().unwrap() {
        x509_parser::public_key::PublicKey::EC(point) => point.data().to_vec(),
        other => panic!("{other:?}"),
    }
}

/// The ECC EKs: swtpm_setup's P-384 certificate (template H-3) and a P-256 one provisioned
/// at 0x01c0000a (L-2) each certify the key the agent derives from its template, and each EK
/// activates the TPM's own MakeCredential (through a password for the high-range EK, the
/// PolicySecret session for the low-range one).
#[test]
fn ecc_eks_match_their_certificates_and_activate_credentials() {
    let (ca, sw, tpm) = started();
    sw.provision_ecc_p256_ek(&ca).unwrap();
    for (template, name_alg) in [
        (EkTemplate::EccP256, gatehouse_tpm::HashAlg::Sha256),
        (EkTemplate::EccP384, gatehouse_tpm::HashAlg::Sha384),
    ] {
        let (e, used) = tpm
            .enrollment_with(EkSelection::Template(template))
            .unwrap();
        assert_eq!(used, template);
        let ek = gatehouse_tpm::Public::parse(&e.ek_public).unwrap();
        assert_eq!(ek.name_alg, name_alg, "{template}");
        let gatehouse_tpm::PublicKey::Ecc { x, y, .. } = &ek.key else {
            panic!("{template}: an ECC EK")
        };
        assert_eq!(
            certified_point(&e.ek_certificate),
            [&[4u8][..], x, y].concat(),
            "{template}: the certificate certifies the derived EK"
        );
        let secret = vec![0x42; 32];
        let (blob, encrypted) = tpm
            .make_credential(e.ek_public.clone(), tpm_name(&e.ak_public), secret.clone())
            .unwrap();
        let answer = tpm
            .answer(template, blob, encrypted, vec![], [0; 32], vec![0], None)
            .unwrap();
        assert_eq!(answer.secret, secret, "{template}");
    }
    // With the RSA-2048 certificate present, auto keeps proving the RSA EK.
    assert_eq!(
        tpm.resolve_ek(EkSelection::Auto).unwrap(),
        EkTemplate::Rsa2048
    );
}

#[test]
fn answers_a_make_credential_challenge_with_a_quote_and_a_certified_node_key() {
    let (_ca, _sw, tpm) = started();
    let node_key = TpmNodeKey::generate(&tpm).unwrap();
    let mut producer = TpmProducer::new(tpm.clone(), Some(node_key.clone()));
    let csr = crate::key::build_csr(&crate::NodeKey::Tpm(node_key.clone())).unwrap();
    let TpmEvidence::Enroll(e) = serde_json::from_slice(&producer.evidence(&csr).unwrap()).unwrap()
    else {
        panic!("round 1 is an enrollment")
    };
    let secret = b"0123456789abcdef0123456789abcdef".to_vec();
    let (blob, seed) = tpm
        .make_credential(e.ek_public.clone(), tpm_name(&e.ak_public), secret.clone())
        .unwrap();
    let payload = serde_json::to_vec(&TpmChallenge {
        v: 1,
        credential_blob: blob,
        encrypted_secret: seed,
        state: b"sealed".to_vec(),
    })
    .unwrap();
    let challenge = Challenge {
        attestor: "tpm".into(),
        payload,
        not_after: 0,
    };
    let TpmEvidence::Answer(a) =
        serde_json::from_slice(&producer.answer(&challenge, &csr).unwrap()).unwrap()
    else {
        panic!("round 2 is an answer")
    };
    assert_eq!(a.secret, secret, "only this TPM activates the credential");
    assert_eq!(a.state, b"sealed");
    // The quote: signed by the AK over the marshalled TPMS_ATTEST, extraData the nonce.
    assert!(verify(&e.ak_public, &a.quote.attest, &a.quote.signature));
    let attest = Attest::unmarshall(&a.quote.attest).unwrap();
    let nonce = sha256(&gatehouse_proto::tpm::quote_nonce_input(
        &secret,
        &sha256(&csr),
    ));
    assert_eq!(attest.extra_data().value(), nonce);
    assert!(matches!(attest.attested(), AttestInfo::Quote { .. }));
    let indices: Vec<u8> = a.quote.pcrs.iter().map(|p| p.index).collect();
    assert_eq!(indices, [0, 1, 2, 3, 4, 5, 6, 7]);
    assert!(
        a.quote
            .pcrs
            .iter()
            .all(|p| p.hash_alg == 0x000b && p.digest.len() == 32)
    );
    // The node key: certified by the AK over sha256(csr), its name the public area's.
    let certified = a.node_key.unwrap();
    assert_eq!(certified.public, node_key.public_area());
    assert!(verify(
        &e.ak_public,
        &certified.certify_info,
        &certified.signature
    ));
    let info = Attest::unmarshall(&certified.certify_info).unwrap();
    assert_eq!(info.extra_data().value(), sha256(&csr));
    let AttestInfo::Certify { info } = info.attested() else {
        panic!("a certification")
    };
    assert_eq!(info.name().value(), tpm_name(&certified.public));
    // A flipped byte no longer verifies.
    let mut flipped = a.quote.attest.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    assert!(!verify(&e.ak_public, &flipped, &a.quote.signature));
}

#[test]
fn node_keys_derive_again_sign_and_change_after_a_clear() {
    let (_ca, _sw, tpm) = started();
    let key = TpmNodeKey::generate(&tpm).unwrap();
    let again = TpmNodeKey::from_record(&tpm, &key.record_pem()).unwrap();
    assert_eq!(
        again.spki_der(),
        key.spki_der(),
        "the same unique derives the same key"
    );
    // ES256 by the TPM verifies against the SPKI.
    let sig = key.sign_fixed(b"message").unwrap();
    let (_, spki) = x509_parser::x509::SubjectPublicKeyInfo::from_der(key.spki_der()).unwrap();
    UnparsedPublicKey::new(
        &ECDSA_P256_SHA256_FIXED,
        spki.subject_public_key.data.as_ref(),
    )
    .verify(b"message", &sig)
    .unwrap();
    // A CSR signed in the TPM.
    let node_key = crate::NodeKey::Tpm(key.clone());
    let der = crate::key::build_csr(&node_key).unwrap();
    let (_, csr) =
        x509_parser::certification_request::X509CertificationRequest::from_der(&der).unwrap();
    csr.verify_signature().unwrap();
    assert_eq!(
        csr.certification_request_info.subject_pki.raw,
        key.spki_der()
    );
    // The renewal proof refuses another AK, and certifies with this one.
    let ak = tpm.ak_public().unwrap();
    assert!(matches!(
        tpm.key_attestation(vec![0x00, 0x0b, 1, 2], key.unique(), [0; 32]),
        Err(TpmError::OtherAk)
    ));
    let proof = tpm
        .key_attestation(tpm_name(&ak), key.unique(), [9; 32])
        .unwrap();
    assert_eq!(proof.ak_public, ak);
    assert_eq!(proof.key_public, key.public_area());
    assert!(verify(&ak, &proof.certify_info, &proof.signature));
    // TPM2_Clear: the owner seed changes, the endorsement seed does not.
    let ek = tpm.enrollment().unwrap().ek_public;
    tpm.clear().unwrap();
    let after = TpmNodeKey::derive(&tpm, key.unique()).unwrap();
    assert_ne!(
        after.spki_der(),
        key.spki_der(),
        "another key from the same record"
    );
    assert_eq!(tpm.ak_public().unwrap(), ak, "the AK survives a clear");
    assert_eq!(tpm.enrollment().unwrap().ek_public, ek, "so does the EK");
}

#[test]
fn a_new_tpm_has_another_ek_from_the_same_ca() {
    let (ca, _a, first) = started();
    let second = Swtpm::start(&ca).unwrap();
    let other = second.open().unwrap();
    let (a, b) = (first.enrollment().unwrap(), other.enrollment().unwrap());
    assert_ne!(a.ek_public, b.ek_public);
    assert_ne!(a.ak_public, b.ak_public);
}

#[test]
fn bad_tctis_are_refused() {
    assert!(matches!(
        Tpm::open("carrier-pigeon:"),
        Err(TpmError::Tcti(_))
    ));
    assert!(matches!(
        Tpm::open("swtpm:host=127.0.0.1,port=1"),
        Err(TpmError::Open { .. })
    ));
}

#[test]
fn odd_keys_are_certified_with_their_attributes() {
    let (_ca, _sw, tpm) = started();
    let ak = tpm.ak_public().unwrap();
    for odd in [OddKey::Decrypt, OddKey::NotFixedTpm] {
        let certified = tpm.certify_odd_key(odd, [1; 32]).unwrap();
        assert!(
            verify(&ak, &certified.certify_info, &certified.signature),
            "{odd:?}"
        );
        let Public::Ecc {
            object_attributes: a,
            ..
        } = Public::unmarshall(&certified.public).unwrap()
        else {
            panic!("P-256")
        };
        match odd {
            OddKey::Decrypt => assert!(a.decrypt() && a.sign_encrypt() && a.fixed_tpm()),
            OddKey::NotFixedTpm => assert!(!a.fixed_tpm() && !a.fixed_parent()),
        }
    }
}

/// Writes `data` into a new NV index `index` (owner-written, readable with its empty auth),
/// as a manufacturer provisions the EK chain indices.
fn provision_nv(sw: &Swtpm, index: u32, data: &[u8]) {
    use std::io::Write as _;
    use std::str::FromStr as _;
    use tss_esapi::abstraction::nv::NvOpenOptions;
    use tss_esapi::attributes::NvIndexAttributesBuilder;
    use tss_esapi::handles::NvIndexTpmHandle;
    use tss_esapi::interface_types::resource_handles::NvAuth;
    use tss_esapi::structures::NvPublicBuilder;

    let mut ctx = Context::new(TctiNameConf::from_str(&sw.tcti()).unwrap()).unwrap();
    let attributes = NvIndexAttributesBuilder::new()
        .with_owner_write(true)
        .with_owner_read(true)
        .with_auth_read(true)
        .with_no_da(true)
        .build()
        .unwrap();
    let public = NvPublicBuilder::new()
        .with_nv_index(NvIndexTpmHandle::new(index).unwrap())
        .with_index_name_algorithm(HashingAlgorithm::Sha256)
        .with_index_attributes(attributes)
        .with_data_area_size(data.len())
        .build()
        .unwrap();
    ctx.execute_with_nullauth_session(|ctx| {
        let mut writer = NvOpenOptions::NewIndex {
            nv_public: public,
            auth_handle: NvAuth::Owner,
        }
        .open(ctx)?;
        writer
            .write_all(data)
            .map_err(|_| tss_esapi::Error::WrapperError(tss_esapi::WrapperErrorKind::InternalError))
    })
    .unwrap();
}

#[test]
fn enrollment_sends_the_chain_certificates_found_in_nv() {
    let ca = LocalCa::new().unwrap();
    let sw = Swtpm::start(&ca).unwrap();
    let inter = ca.intermediate_der().unwrap();
    let root_pem = ca.root_pem().unwrap();
    let (_, root) = x509_parser::pem::parse_x509_pem(root_pem.as_bytes()).unwrap();
    // The chain indices from 0x01c00100, each sized larger than its certificate and filled
    // with 0xFF (an index holds at most 2 KiB on swtpm, so one certificate each here).
    let first = *EK_CHAIN_NV_INDICES.start();
    for (index, cert) in [(first + 1, &root.contents), (first, &inter)] {
        let mut nv = cert.clone();
        nv.extend([0xff; 64]);
        provision_nv(&sw, index, &nv);
    }
    let e = sw.open().unwrap().enrollment().unwrap();
    assert_eq!(e.ek_chain, vec![inter, root.contents]);
    // And the EK certificate, cut at its DER length, is exactly one certificate.
    let (rest, _) = X509Certificate::from_der(&e.ek_certificate).unwrap();
    assert!(rest.is_empty());
}
