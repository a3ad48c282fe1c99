//! Structures built and signed in-process with P-256 software keys, marshalled per Part 2, and
//! every tampering the attestor must catch.

use p256::ecdsa::signature::Signer as _;
use p256::ecdsa::{Signature as P256Signature, SigningKey};
use proptest::prelude::*;

use super::marshal::{
    AK_ATTRIBUTES, NODE_KEY_ATTRIBUTES, certify_attest, ecc_ek_public, ecc_p256_public,
    ecc_p384_ek_public, ecdsa_sha256_signature, quote_attest, rsa_ek_public, rsa3072_ek_public,
};
use super::*;

/// The verifier under test: RustCrypto's, the one a wasm build uses.
#[cfg(feature = "rustcrypto")]
fn verifier() -> RustCryptoVerifier {
    RustCryptoVerifier
}

/// Without the feature, the same P-256 verification through the trait.
#[cfg(not(feature = "rustcrypto"))]
fn verifier() -> TestVerifier {
    TestVerifier
}

#[cfg(not(feature = "rustcrypto"))]
struct TestVerifier;

#[cfg(not(feature = "rustcrypto"))]
impl Verifier for TestVerifier {
    fn verify(&self, key: &Public, message: &[u8], signature: &Signature) -> Result<(), TpmError> {
        use p256::ecdsa::signature::Verifier as _;
        let PublicKey::Ecc { x, y, .. } = &key.key else {
            return Err(TpmError::Unsupported("test verifier: P-256 only"));
        };
        let fixed = signature.ecdsa_fixed(32).ok_or(TpmError::BadSignature)?;
        let key = p256::ecdsa::VerifyingKey::from_sec1_bytes(&der::ec_point(x, y))
            .map_err(|_| TpmError::Malformed("point"))?;
        let sig = P256Signature::from_slice(&fixed).map_err(|_| TpmError::BadSignature)?;
        key.verify(message, &sig)
            .map_err(|_| TpmError::BadSignature)
    }
}

fn key(seed: u8) -> SigningKey {
    SigningKey::from_slice(&[seed; 32]).unwrap()
}

fn public_of(key: &SigningKey, attributes: u32, scheme: bool) -> Vec<u8> {
    let point = key.verifying_key().to_encoded_point(false);
    ecc_p256_public(attributes, scheme, point.x().unwrap(), point.y().unwrap())
}

fn sign(key: &SigningKey, message: &[u8]) -> Vec<u8> {
    let sig: P256Signature = key.sign(message);
    ecdsa_sha256_signature(&sig.to_bytes())
}

const NONCE: [u8; 32] = [7; 32];

fn pcrs() -> Vec<PcrValue> {
    [0u8, 7, 14]
        .iter()
        .map(|i| PcrValue {
            hash_alg: alg::SHA256,
            index: *i,
            digest: vec![*i; 32],
        })
        .collect()
}

/// A quote by AK `ak` over [`pcrs`] with `nonce`.
fn quote(ak: &SigningKey, nonce: &[u8], values: &[PcrValue]) -> (Vec<u8>, Vec<u8>) {
    let digest = pcr_digest(HashAlg::Sha256, values).unwrap();
    let indexes: Vec<u8> = values.iter().map(|v| v.index).collect();
    let attest = quote_attest(nonce, &indexes, &digest);
    let sig = sign(ak, &attest);
    (attest, sig)
}

#[test]
fn parses_an_ecc_public_area_and_names_it() {
    let ak = key(1);
    let bytes = public_of(&ak, AK_ATTRIBUTES, true);
    let public = Public::parse(&bytes).unwrap();
    assert_eq!(public.name_alg, HashAlg::Sha256);
    assert_eq!(public.attributes, AK_ATTRIBUTES);
    let mut name = vec![0x00, 0x0b];
    name.extend(HashAlg::Sha256.digest(&bytes).unwrap());
    assert_eq!(public.name, name);
    assert!(is_object_name(&public.name));
    // The SPKI is the one p256 itself encodes.
    use p256::pkcs8::EncodePublicKey as _;
    let expected = ak.verifying_key().to_public_key_der().unwrap();
    assert_eq!(public.spki, expected.as_bytes());
    // TPM2B-wrapped: the same area.
    let mut wrapped = (bytes.len() as u16).to_be_bytes().to_vec();
    wrapped.extend(&bytes);
    assert_eq!(Public::parse(&wrapped).unwrap(), public);
}

#[test]
fn parses_an_rsa_ek_and_encodes_its_spki() {
    let mut modulus = vec![0xc1; 256];
    modulus[255] = 0x01;
    let public = Public::parse(&rsa_ek_public(&modulus)).unwrap();
    let PublicKey::Rsa { exponent, .. } = &public.key else {
        panic!("not RSA")
    };
    assert_eq!(*exponent, 65_537);
    assert_eq!(
        public.params.symmetric,
        Some(SymDef {
            alg: alg::AES,
            key_bits: 128,
            mode: alg::CFB
        })
    );
    // SEQUENCE(len 0x122) { AlgorithmIdentifier, BIT STRING { SEQUENCE { INTEGER(257), INTEGER(3) } } }
    assert_eq!(&public.spki[..4], &[0x30, 0x82, 0x01, 0x22]);
    assert_eq!(public.spki.len(), 0x126);
    assert!(public.spki.ends_with(&[0x02, 0x03, 0x01, 0x00, 0x01]));
}

#[test]
fn refuses_malformed_public_areas() {
    let good = public_of(&key(1), AK_ATTRIBUTES, true);
    assert!(Public::parse(&good[..good.len() - 1]).is_err());
    let mut trailing = good.clone();
    trailing.push(0);
    assert_eq!(
        Public::parse(&trailing),
        Err(TpmError::Malformed("trailing bytes after the public area"))
    );
    let mut keyedhash = good.clone();
    keyedhash[..2].copy_from_slice(&alg::KEYEDHASH.to_be_bytes());
    assert!(matches!(
        Public::parse(&keyedhash),
        Err(TpmError::Unsupported(_))
    ));
    let mut sha1 = good.clone();
    sha1[2..4].copy_from_slice(&alg::SHA1.to_be_bytes());
    assert!(matches!(
        Public::parse(&sha1),
        Err(TpmError::Unsupported(_))
    ));
    assert!(Public::parse(&[]).is_err());
    assert!(Public::parse(&vec![0; MAX_PUBLIC_LEN + 1]).is_err());
}

#[test]
fn checks_ak_attributes() {
    let ak = key(1);
    assert!(check_ak(&public_of(&ak, AK_ATTRIBUTES, true)).is_ok());
    for (clear, set, what) in [
        (attr::RESTRICTED, 0, "restricted clear"),
        (attr::FIXED_TPM, 0, "fixedTPM clear"),
        (attr::FIXED_PARENT, 0, "fixedParent clear"),
        (attr::SENSITIVE_DATA_ORIGIN, 0, "sensitiveDataOrigin clear"),
        (attr::SIGN, 0, "sign clear"),
        (0, attr::DECRYPT, "decrypt set"),
    ] {
        let bytes = public_of(&ak, (AK_ATTRIBUTES & !clear) | set, true);
        assert_eq!(check_ak(&bytes), Err(TpmError::Attributes(what)));
    }
}

#[test]
fn verifies_a_quote() {
    let ak = key(1);
    let ak_public = public_of(&ak, AK_ATTRIBUTES, true);
    let (attest, sig) = quote(&ak, &NONCE, &pcrs());
    let covered = verify_quote(&verifier(), &ak_public, &attest, &sig, &pcrs(), &NONCE).unwrap();
    assert_eq!(covered, pcrs());
}

#[test]
fn refuses_tampered_quotes() {
    let v = verifier();
    let ak = key(1);
    let ak_public = public_of(&ak, AK_ATTRIBUTES, true);
    let (attest, sig) = quote(&ak, &NONCE, &pcrs());

    // A flipped byte of the quote (in the clock: still parses) breaks the signature.
    let mut flipped = attest.clone();
    let clock_at = 4 + 2 + 2 + 4 + 2 + 32;
    flipped[clock_at + 3] ^= 1;
    assert_eq!(
        verify_quote(&v, &ak_public, &flipped, &sig, &pcrs(), &NONCE),
        Err(TpmError::BadSignature)
    );
    // A flipped signature byte.
    let mut bad_sig = sig.clone();
    let last = bad_sig.len() - 1;
    bad_sig[last] ^= 1;
    assert_eq!(
        verify_quote(&v, &ak_public, &attest, &bad_sig, &pcrs(), &NONCE),
        Err(TpmError::BadSignature)
    );
    // Another key's signature.
    let other = sign(&key(2), &attest);
    assert_eq!(
        verify_quote(&v, &ak_public, &attest, &other, &pcrs(), &NONCE),
        Err(TpmError::BadSignature)
    );
    // Another nonce.
    assert_eq!(
        verify_quote(&v, &ak_public, &attest, &sig, &pcrs(), &[8; 32]),
        Err(TpmError::WrongNonce)
    );
    // A PCR value that does not match the digest.
    let mut values = pcrs();
    values[1].digest[0] ^= 1;
    assert_eq!(
        verify_quote(&v, &ak_public, &attest, &sig, &values, &NONCE),
        Err(TpmError::PcrMismatch)
    );
    // A PCR the quote does not cover, added or substituted.
    let mut extra = pcrs();
    extra.push(PcrValue {
        hash_alg: alg::SHA256,
        index: 15,
        digest: vec![0; 32],
    });
    assert_eq!(
        verify_quote(&v, &ak_public, &attest, &sig, &extra, &NONCE),
        Err(TpmError::PcrMismatch)
    );
    let mut other_index = pcrs();
    other_index[2].index = 15;
    assert_eq!(
        verify_quote(&v, &ak_public, &attest, &sig, &other_index, &NONCE),
        Err(TpmError::PcrMismatch)
    );
    // One missing, or out of order.
    assert_eq!(
        verify_quote(&v, &ak_public, &attest, &sig, &pcrs()[..2], &NONCE),
        Err(TpmError::PcrMismatch)
    );
    let mut swapped = pcrs();
    swapped.swap(0, 1);
    assert_eq!(
        verify_quote(&v, &ak_public, &attest, &sig, &swapped, &NONCE),
        Err(TpmError::PcrMismatch)
    );
    // A certify signed by the AK is not a quote.
    let certify = certify_attest(&NONCE, &[0x00, 0x0b]);
    let certify_sig = sign(&ak, &certify);
    assert_eq!(
        verify_quote(&v, &ak_public, &certify, &certify_sig, &pcrs(), &NONCE),
        Err(TpmError::WrongType)
    );
    // Wrong magic (signed: a key signing chosen bytes).
    let mut magic = attest.clone();
    magic[0] = 0;
    let magic_sig = sign(&ak, &magic);
    assert_eq!(
        verify_quote(&v, &ak_public, &magic, &magic_sig, &pcrs(), &NONCE),
        Err(TpmError::WrongType)
    );
}

#[test]
fn a_signature_must_fit_the_keys_scheme() {
    let ak = key(1);
    let ak_public = public_of(&ak, AK_ATTRIBUTES, true);
    let (attest, sig) = quote(&ak, &NONCE, &pcrs());
    // The same r and s labelled SHA-384.
    let mut relabelled = sig.clone();
    relabelled[2..4].copy_from_slice(&alg::SHA384.to_be_bytes());
    assert_eq!(
        verify_quote(
            &verifier(),
            &ak_public,
            &attest,
            &relabelled,
            &pcrs(),
            &NONCE
        ),
        Err(TpmError::BadSignature)
    );
    // A decryption-only key signs nothing.
    let not_signing = public_of(&ak, AK_ATTRIBUTES & !attr::SIGN, false);
    assert!(matches!(
        verify_quote(&verifier(), &not_signing, &attest, &sig, &pcrs(), &NONCE),
        Err(TpmError::Attributes(_))
    ));
}

#[test]
fn verifies_a_certification_and_each_tampering() {
    let v = verifier();
    let ak = key(1);
    let ak_public = public_of(&ak, AK_ATTRIBUTES, true);
    let node = key(3);
    let node_public = public_of(&node, NODE_KEY_ATTRIBUTES, false);
    let name = Public::parse(&node_public).unwrap().name;
    let info = certify_attest(&NONCE, &name);
    let sig = sign(&ak, &info);
    let certified = verify_certify(&v, &ak_public, &info, &sig, &node_public, &NONCE).unwrap();
    use p256::pkcs8::EncodePublicKey as _;
    assert_eq!(
        certified.spki,
        node.verifying_key().to_public_key_der().unwrap().as_bytes()
    );

    // Another nonce.
    assert_eq!(
        verify_certify(&v, &ak_public, &info, &sig, &node_public, &[0; 32]),
        Err(TpmError::WrongNonce)
    );
    // A flipped byte.
    let mut flipped = info.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    assert_eq!(
        verify_certify(&v, &ak_public, &flipped, &sig, &node_public, &NONCE),
        Err(TpmError::BadSignature)
    );
    // Another key than the one certified.
    let other_public = public_of(&key(4), NODE_KEY_ATTRIBUTES, false);
    assert_eq!(
        verify_certify(&v, &ak_public, &info, &sig, &other_public, &NONCE),
        Err(TpmError::WrongName)
    );
    // A quote is not a certification.
    let (quote, quote_sig) = quote(&ak, &NONCE, &pcrs());
    assert_eq!(
        verify_certify(&v, &ak_public, &quote, &quote_sig, &node_public, &NONCE),
        Err(TpmError::WrongType)
    );
    // Certified keys with the wrong attributes: decrypt set, fixedTPM clear, …
    for (clear, set, what) in [
        (0, attr::DECRYPT, "decrypt set"),
        (attr::FIXED_TPM, 0, "fixedTPM clear"),
        (attr::FIXED_PARENT, 0, "fixedParent clear"),
        (attr::SENSITIVE_DATA_ORIGIN, 0, "sensitiveDataOrigin clear"),
        (attr::SIGN, 0, "sign clear"),
    ] {
        let public = public_of(&node, (NODE_KEY_ATTRIBUTES & !clear) | set, false);
        let name = Public::parse(&public).unwrap().name;
        let info = certify_attest(&NONCE, &name);
        let sig = sign(&ak, &info);
        assert_eq!(
            verify_certify(&v, &ak_public, &info, &sig, &public, &NONCE),
            Err(TpmError::Attributes(what))
        );
    }
    // Signed by another key than the AK.
    let forged = sign(&key(2), &info);
    assert_eq!(
        verify_certify(&v, &ak_public, &info, &forged, &node_public, &NONCE),
        Err(TpmError::BadSignature)
    );
}

#[test]
fn kdfa_matches_its_definition() {
    // One block: HMAC-SHA-256(key, 00000001 ‖ "STORAGE" ‖ 00 ‖ ctx ‖ 00000080), first 16 bytes.
    use hmac::{Hmac, Mac as _};
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(b"seed").unwrap();
    mac.update(&[0, 0, 0, 1]);
    mac.update(b"STORAGE\0name");
    mac.update(&[0, 0, 0, 0x80]);
    let block = mac.finalize().into_bytes();
    let sha256 = HashAlg::Sha256;
    assert_eq!(
        kdfa(sha256, b"seed", b"STORAGE", b"name", b"", 128).unwrap(),
        block[..16]
    );
    // Two blocks for 320 bits; the second uses counter 2.
    let long = kdfa(sha256, b"seed", b"INTEGRITY", b"", b"", 320).unwrap();
    assert_eq!(long.len(), 40);
    assert_ne!(long[..32], long[32..]);
    // SHA-384: one 48-byte block.
    let mut mac = Hmac::<sha2::Sha384>::new_from_slice(b"seed").unwrap();
    mac.update(&[0, 0, 0, 1]);
    mac.update(b"INTEGRITY\0");
    mac.update(&384u32.to_be_bytes());
    assert_eq!(
        kdfa(HashAlg::Sha384, b"seed", b"INTEGRITY", b"", b"", 384).unwrap(),
        mac.finalize().into_bytes()[..]
    );
    assert!(kdfa(HashAlg::Sha1, b"seed", b"STORAGE", b"", b"", 128).is_err());
}

#[test]
fn kdfe_matches_its_definition() {
    // SHA-256(00000001 ‖ Z ‖ "IDENTITY" ‖ 00 ‖ U ‖ V), then counter 2 for more bits.
    use sha2::Digest as _;
    let first = sha2::Sha256::digest(b"\0\0\0\x01zIDENTITY\0uv");
    let second = sha2::Sha256::digest(b"\0\0\0\x02zIDENTITY\0uv");
    let out = kdfe(HashAlg::Sha256, b"z", b"IDENTITY", b"u", b"v", 384).unwrap();
    assert_eq!(out[..32], first[..]);
    assert_eq!(out[32..], second[..16]);
    let sha384 = sha2::Sha384::digest(b"\0\0\0\x01zIDENTITY\0uv");
    assert_eq!(
        kdfe(HashAlg::Sha384, b"z", b"IDENTITY", b"u", b"v", 384).unwrap(),
        sha384[..]
    );
}

/// XOR "encryption", an identity "OAEP", a fixed "random" seed and a fixed ECDH share, to
/// check the blob's layout. Every call is recorded so tests can see what was asked.
#[derive(Default)]
struct Transparent {
    oaep: std::cell::RefCell<Vec<HashAlg>>,
    aes_keys: std::cell::RefCell<Vec<usize>>,
}

const SEED_BYTE: u8 = 9;

impl CredentialCrypto for Transparent {
    fn fill_random(&self, out: &mut [u8]) -> Result<(), TpmError> {
        out.fill(SEED_BYTE);
        Ok(())
    }
    fn rsa_oaep(
        &self,
        hash: HashAlg,
        _: &[u8],
        plaintext: &[u8],
        label: &[u8],
    ) -> Result<Vec<u8>, TpmError> {
        if label != b"IDENTITY\0" {
            return Err(TpmError::Malformed("label"));
        }
        self.oaep.borrow_mut().push(hash);
        Ok(plaintext.to_vec())
    }
    fn ecdh_ephemeral(&self, curve: EccCurve, _: &[u8], _: &[u8]) -> Result<EcdhShare, TpmError> {
        let width = curve.coordinate_len();
        Ok(EcdhShare {
            z: vec![0x22; width],
            x: vec![0x33; width],
            y: vec![0x44; width],
        })
    }
    fn aes_cfb_encrypt(&self, key: &[u8], data: &mut [u8]) -> Result<(), TpmError> {
        self.aes_keys.borrow_mut().push(key.len());
        data.iter_mut().for_each(|b| *b ^= 0x5a);
        Ok(())
    }
}

/// Checks a blob made with [`Transparent`] from `seed`: its HMAC, and that it hides `secret`.
fn check_blob(hash: HashAlg, seed: &[u8], ak_name: &[u8], blob: &[u8], secret: &[u8]) {
    let size = hash.size();
    assert_eq!(&blob[..2], &u16::try_from(size).unwrap().to_be_bytes());
    let enc_identity = &blob[2 + size..];
    let plain: Vec<u8> = enc_identity.iter().map(|b| b ^ 0x5a).collect();
    let mut expected = u16::try_from(secret.len()).unwrap().to_be_bytes().to_vec();
    expected.extend_from_slice(secret);
    assert_eq!(plain, expected);
    let hmac_key = kdfa(
        hash,
        seed,
        b"INTEGRITY",
        &[],
        &[],
        u32::try_from(size * 8).unwrap(),
    )
    .unwrap();
    let mut message = enc_identity.to_vec();
    message.extend_from_slice(ak_name);
    use hmac::{Hmac, Mac as _};
    let integrity = match hash {
        HashAlg::Sha256 => {
            let mut m = Hmac::<sha2::Sha256>::new_from_slice(&hmac_key).unwrap();
            m.update(&message);
            m.finalize().into_bytes().to_vec()
        }
        _ => {
            let mut m = Hmac::<sha2::Sha384>::new_from_slice(&hmac_key).unwrap();
            m.update(&message);
            m.finalize().into_bytes().to_vec()
        }
    };
    assert_eq!(&blob[2..2 + size], &integrity[..]);
}

#[test]
fn make_credential_lays_out_the_blob() {
    let crypto = Transparent::default();
    let ek = Public::parse(&rsa_ek_public(&[0xc1; 256])).unwrap();
    let ak_name = Public::parse(&public_of(&key(1), AK_ATTRIBUTES, true))
        .unwrap()
        .name;
    let credential = make_credential(&crypto, &ek, &ak_name, b"secret").unwrap();
    let seed = [SEED_BYTE; 32];
    assert_eq!(credential.encrypted_secret, seed);
    assert_eq!(*crypto.oaep.borrow(), [HashAlg::Sha256]);
    assert_eq!(*crypto.aes_keys.borrow(), [16]);
    check_blob(
        HashAlg::Sha256,
        &seed,
        &ak_name,
        &credential.credential_blob,
        b"secret",
    );

    // Not an EK, a malformed name, an oversized secret.
    let ak = Public::parse(&public_of(&key(1), AK_ATTRIBUTES, true)).unwrap();
    assert!(make_credential(&crypto, &ak, &ak_name, b"s").is_err());
    assert!(make_credential(&crypto, &ek, &ak_name[..5], b"s").is_err());
    assert!(make_credential(&crypto, &ek, &ak_name, &[1; 33]).is_err());
    assert!(make_credential(&crypto, &ek, &ak_name, b"").is_err());
}

#[test]
fn make_credential_for_a_high_range_rsa_ek_uses_sha384_and_aes256() {
    let crypto = Transparent::default();
    let ek = Public::parse(&rsa3072_ek_public(&[0xc1; 384])).unwrap();
    let ak_name = Public::parse(&public_of(&key(1), AK_ATTRIBUTES, true))
        .unwrap()
        .name;
    // A secret up to the nameAlg's size.
    let credential = make_credential(&crypto, &ek, &ak_name, &[7; 48]).unwrap();
    let seed = [SEED_BYTE; 48];
    assert_eq!(credential.encrypted_secret, seed);
    assert_eq!(*crypto.oaep.borrow(), [HashAlg::Sha384]);
    assert_eq!(*crypto.aes_keys.borrow(), [32]);
    check_blob(
        HashAlg::Sha384,
        &seed,
        &ak_name,
        &credential.credential_blob,
        &[7; 48],
    );
    assert!(make_credential(&crypto, &ek, &ak_name, &[7; 49]).is_err());
}

#[test]
fn make_credential_for_an_ecc_ek_derives_the_seed_with_kdfe() {
    let ak_name = Public::parse(&public_of(&key(1), AK_ATTRIBUTES, true))
        .unwrap()
        .name;
    for (public, hash, width) in [
        (ecc_ek_public(&[0x11; 32], &[0x12; 32]), HashAlg::Sha256, 32),
        (
            ecc_p384_ek_public(&[0x11; 48], &[0x12; 48]),
            HashAlg::Sha384,
            48,
        ),
    ] {
        let crypto = Transparent::default();
        let ek = Public::parse(&public).unwrap();
        let credential = make_credential(&crypto, &ek, &ak_name, b"secret").unwrap();
        // The encrypted secret is the ephemeral point, a TPMS_ECC_POINT.
        let mut point = u16::try_from(width).unwrap().to_be_bytes().to_vec();
        point.extend(vec![0x33; width]);
        point.extend(u16::try_from(width).unwrap().to_be_bytes());
        point.extend(vec![0x44; width]);
        assert_eq!(credential.encrypted_secret, point);
        assert!(crypto.oaep.borrow().is_empty(), "no RSA for an ECC EK");
        let bits = u32::try_from(hash.size() * 8).unwrap();
        let (z, ephemeral_x, ek_x) = ([0x22; 48], [0x33; 48], [0x11; 48]);
        let seed = kdfe(
            hash,
            &z[..width],
            b"IDENTITY",
            &ephemeral_x[..width],
            &ek_x[..width],
            bits,
        )
        .unwrap();
        check_blob(
            hash,
            &seed,
            &ak_name,
            &credential.credential_blob,
            b"secret",
        );
    }
}

/// An ECDH that answers a share of the wrong width.
struct ShortShare;

impl CredentialCrypto for ShortShare {
    fn fill_random(&self, out: &mut [u8]) -> Result<(), TpmError> {
        out.fill(1);
        Ok(())
    }
    fn rsa_oaep(&self, _: HashAlg, _: &[u8], p: &[u8], _: &[u8]) -> Result<Vec<u8>, TpmError> {
        Ok(p.to_vec())
    }
    fn ecdh_ephemeral(&self, _: EccCurve, _: &[u8], _: &[u8]) -> Result<EcdhShare, TpmError> {
        Ok(EcdhShare {
            z: vec![1; 31],
            x: vec![1; 32],
            y: vec![1; 32],
        })
    }
    fn aes_cfb_encrypt(&self, _: &[u8], _: &mut [u8]) -> Result<(), TpmError> {
        Ok(())
    }
}

#[test]
fn make_credential_refuses_a_malformed_ecdh_share() {
    let ek = Public::parse(&ecc_ek_public(&[0x11; 32], &[0x12; 32])).unwrap();
    let ak_name = Public::parse(&public_of(&key(1), AK_ATTRIBUTES, true))
        .unwrap()
        .name;
    assert_eq!(
        make_credential(&ShortShare, &ek, &ak_name, b"s"),
        Err(TpmError::Malformed("ECDH share"))
    );
}

/// Every entry point on arbitrary bytes: an error or a value, never a panic.
fn all_parsers(bytes: &[u8]) {
    let _ = Public::parse(bytes);
    let _ = Attest::parse(bytes);
    let _ = Signature::parse(bytes);
    let _ = check_ak(bytes);
    let v = verifier();
    let _ = verify_quote(&v, bytes, bytes, bytes, &[], bytes);
    let _ = verify_certify(&v, bytes, bytes, bytes, bytes, bytes);
    if let Ok(ek) = Public::parse(bytes) {
        let _ = make_credential(&Transparent::default(), &ek, bytes, bytes);
        let _ = make_credential(&Transparent::default(), &ek, &[0; 34], b"secret");
    }
}

/// Valid structures to mutate.
fn valid_corpus() -> Vec<Vec<u8>> {
    let ak = key(1);
    let node_public = public_of(&key(3), NODE_KEY_ATTRIBUTES, false);
    let name = Public::parse(&node_public).unwrap().name;
    let (attest, sig) = quote(&ak, &NONCE, &pcrs());
    vec![
        public_of(&ak, AK_ATTRIBUTES, true),
        rsa_ek_public(&[0xc1; 256]),
        node_public,
        attest,
        sig,
        certify_attest(&NONCE, &name),
        ecc_ek_public(&[0x11; 32], &[0x12; 32]),
        ecc_p384_ek_public(&[0x11; 48], &[0x12; 48]),
        rsa3072_ek_public(&[0xc1; 384]),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..700)) {
        all_parsers(&bytes);
    }

    #[test]
    fn mutated_structures_never_panic(
        which in 0usize..9,
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
        cut in any::<usize>(),
    ) {
        let corpus = valid_corpus();
        let mut bytes = corpus[which].clone();
        for (at, value) in edits {
            let len = bytes.len();
            bytes[at % len] = value;
        }
        all_parsers(&bytes);
        let len = bytes.len();
        bytes.truncate(cut % (len + 1));
        all_parsers(&bytes);
    }

    #[test]
    fn mutated_quotes_never_verify(at in any::<usize>(), flip in 1u8..=255) {
        let ak = key(1);
        let ak_public = public_of(&ak, AK_ATTRIBUTES, true);
        let (mut attest, sig) = quote(&ak, &NONCE, &pcrs());
        let len = attest.len();
        attest[at % len] ^= flip;
        prop_assert!(verify_quote(&verifier(), &ak_public, &attest, &sig, &pcrs(), &NONCE).is_err());
    }
}
