//! [`SoftCrypto`]: the WIT `crypto` interface in pure Rust.

use std::cell::Cell;

use der::{Decode as _, Encode as _};
use gatehouse_sdk::{CryptoError, SignatureScheme, TimestampMs, VerifiedChain};
use hmac::Mac as _;
use sha2::Digest as _;
use x509_cert::Certificate;

use crate::Clock;

/// How long sealed state lives at most (the host's limit): 5 minutes.
const SEAL_MS: i64 = 5 * 60 * 1000;
/// Most certificates a chain may have (the host's limit).
const MAX_CHAIN: usize = 8;

/// Software cryptography for one attestor: SHA-256, every [`SignatureScheme`], X.509 chain
/// verification at a given time, and state sealing bound to the attestor, a binding and an
/// expiry by the shared [`Clock`] (database time).
///
/// The answers are the host's: the same schemes and encodings, `expired` for state past its
/// not-after, `unsealable` for state altered or sealed for another binding. Sealed state is
/// encrypted and authenticated (a SHA-256 keystream and HMAC-SHA-256 under a key of this
/// instance), so a test that leaks a sealed secret to the agent still sees only ciphertext;
/// it is not the host's AES-256-GCM and its bytes are not interchangeable with it.
#[derive(Debug)]
pub struct SoftCrypto {
    attestor: String,
    clock: Clock,
    key: [u8; 32],
    counter: Cell<u64>,
}

impl SoftCrypto {
    /// Cryptography for attestor `attestor`, sealing by `clock`.
    pub fn new(attestor: &str, clock: Clock) -> Self {
        let key: [u8; 32] =
            sha2::Sha256::digest(format!("gatehouse-sdk-test key {attestor}")).into();
        SoftCrypto {
            attestor: attestor.into(),
            clock,
            key,
            counter: Cell::new(0),
        }
    }

    /// The keystream block `i` for `nonce`.
    fn block(&self, nonce: &[u8], i: u64) -> [u8; 32] {
        let mut h = sha2::Sha256::new();
        h.update(self.key);
        h.update(nonce);
        h.update(i.to_be_bytes());
        h.finalize().into()
    }

    fn xor(&self, nonce: &[u8], data: &mut [u8]) {
        for (i, chunk) in data.chunks_mut(32).enumerate() {
            let block = self.block(nonce, i as u64);
            for (b, k) in chunk.iter_mut().zip(block) {
                *b ^= k;
            }
        }
    }

    fn tag(
        &self,
        nonce: &[u8],
        not_after: TimestampMs,
        binding: &[u8],
        ciphertext: &[u8],
    ) -> Vec<u8> {
        let Ok(mut mac) = hmac::Hmac::<sha2::Sha256>::new_from_slice(&self.key) else {
            return Vec::new();
        };
        for part in [self.attestor.as_bytes(), binding, nonce] {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part);
        }
        mac.update(&not_after.to_be_bytes());
        mac.update(ciphertext);
        mac.finalize().into_bytes().to_vec()
    }
}

/// Sealed state: nonce (16) ‖ not-after (8) ‖ ciphertext ‖ tag (32).
const NONCE: usize = 16;

impl gatehouse_sdk::Crypto for SoftCrypto {
    fn sha256(&self, data: &[u8]) -> Vec<u8> {
        sha2::Sha256::digest(data).to_vec()
    }

    fn verify_signature(
        &self,
        scheme: SignatureScheme,
        spki: &[u8],
        message: &[u8],
        signature: &[u8],
    ) -> Result<(), CryptoError> {
        verify_signature(scheme, spki, message, signature)
    }

    fn verify_chain(
        &self,
        chain: &[Vec<u8>],
        roots: &[Vec<u8>],
        at: TimestampMs,
    ) -> Result<VerifiedChain, CryptoError> {
        verify_chain(chain, roots, at)
    }

    fn seal_state(&self, plaintext: &[u8], binding: &[u8]) -> Vec<u8> {
        self.seal_state_until(plaintext, binding, TimestampMs::MAX)
    }

    fn seal_state_until(
        &self,
        plaintext: &[u8],
        binding: &[u8],
        not_after: TimestampMs,
    ) -> Vec<u8> {
        let not_after = not_after.min(self.clock.now().saturating_add(SEAL_MS));
        let n = self.counter.get().wrapping_add(1);
        self.counter.set(n);
        let digest = sha2::Sha256::digest([&self.key[..], &n.to_be_bytes()].concat());
        let nonce = &digest[..NONCE];
        let mut ciphertext = plaintext.to_vec();
        self.xor(nonce, &mut ciphertext);
        let tag = self.tag(nonce, not_after, binding, &ciphertext);
        [
            nonce,
            &not_after.to_be_bytes()[..],
            &ciphertext[..],
            &tag[..],
        ]
        .concat()
    }

    fn open_state(&self, sealed: &[u8], binding: &[u8]) -> Result<Vec<u8>, CryptoError> {
        let (nonce, rest) = sealed
            .split_at_checked(NONCE)
            .ok_or(CryptoError::Unsealable)?;
        let (not_after, rest) = rest.split_at_checked(8).ok_or(CryptoError::Unsealable)?;
        let tag_at = rest.len().checked_sub(32).ok_or(CryptoError::Unsealable)?;
        let (ciphertext, tag) = rest.split_at(tag_at);
        let not_after_bytes: [u8; 8] = not_after.try_into().map_err(|_| CryptoError::Unsealable)?;
        let not_after = i64::from_be_bytes(not_after_bytes);
        let expected = self.tag(nonce, not_after, binding, ciphertext);
        if !gatehouse_sdk::constant_time_eq(&expected, tag) {
            return Err(CryptoError::Unsealable);
        }
        if self.clock.now() > not_after {
            return Err(CryptoError::Expired);
        }
        let mut plaintext = ciphertext.to_vec();
        self.xor(nonce, &mut plaintext);
        Ok(plaintext)
    }
}

fn malformed(error: impl std::fmt::Display) -> CryptoError {
    CryptoError::Malformed(error.to_string())
}

/// Verifies a signature as the host's `verify-signature` does.
pub(crate) fn verify_signature(
    scheme: SignatureScheme,
    spki: &[u8],
    message: &[u8],
    signature: &[u8],
) -> Result<(), CryptoError> {
    use p256::ecdsa::signature::Verifier as _;
    use p256::pkcs8::DecodePublicKey as _;
    let bad = |_| CryptoError::BadSignature;
    match scheme {
        SignatureScheme::EcdsaP256Sha256Fixed | SignatureScheme::EcdsaP256Sha256Der => {
            let key = p256::ecdsa::VerifyingKey::from_public_key_der(spki).map_err(malformed)?;
            let signature = if scheme == SignatureScheme::EcdsaP256Sha256Fixed {
                p256::ecdsa::Signature::from_slice(signature)
            } else {
                p256::ecdsa::Signature::from_der(signature)
            }
            .map_err(malformed)?;
            key.verify(message, &signature).map_err(bad)
        }
        SignatureScheme::EcdsaP384Sha384Der => {
            let key = p384::ecdsa::VerifyingKey::from_public_key_der(spki).map_err(malformed)?;
            let signature = p384::ecdsa::Signature::from_der(signature).map_err(malformed)?;
            key.verify(message, &signature).map_err(bad)
        }
        SignatureScheme::RsaPkcs1Sha256 | SignatureScheme::RsaPssSha256 => {
            let key = rsa::RsaPublicKey::from_public_key_der(spki).map_err(malformed)?;
            let bits = rsa::traits::PublicKeyParts::size(&key) * 8;
            if !(2048..=8192).contains(&bits) {
                return Err(CryptoError::Malformed(format!("a {bits}-bit RSA key")));
            }
            if scheme == SignatureScheme::RsaPkcs1Sha256 {
                let key = rsa::pkcs1v15::VerifyingKey::<sha2::Sha256>::new(key);
                let signature = rsa::pkcs1v15::Signature::try_from(signature).map_err(malformed)?;
                key.verify(message, &signature).map_err(bad)
            } else {
                let key = rsa::pss::VerifyingKey::<sha2::Sha256>::new(key);
                let signature = rsa::pss::Signature::try_from(signature).map_err(malformed)?;
                key.verify(message, &signature).map_err(bad)
            }
        }
        SignatureScheme::Ed25519 => {
            let key = ed25519_dalek::VerifyingKey::from_public_key_der(spki).map_err(malformed)?;
            let signature = ed25519_dalek::Signature::from_slice(signature).map_err(malformed)?;
            key.verify_strict(message, &signature).map_err(bad)
        }
    }
}

/// Milliseconds since the Unix epoch of an X.509 time.
fn ms(time: x509_cert::time::Time) -> TimestampMs {
    i64::try_from(time.to_unix_duration().as_millis()).unwrap_or(i64::MAX)
}

/// The scheme a certificate's signature algorithm names.
fn scheme_of(cert: &Certificate) -> Result<SignatureScheme, CryptoError> {
    use der::asn1::ObjectIdentifier as Oid;
    const ECDSA_SHA256: Oid = Oid::new_unwrap("1.2.840.10045.4.3.2");
    const ECDSA_SHA384: Oid = Oid::new_unwrap("1.2.840.10045.4.3.3");
    const RSA_SHA256: Oid = Oid::new_unwrap("1.2.840.113549.1.1.11");
    const ED25519: Oid = Oid::new_unwrap("1.3.101.112");
    match cert.signature_algorithm.oid {
        oid if oid == ECDSA_SHA256 => Ok(SignatureScheme::EcdsaP256Sha256Der),
        oid if oid == ECDSA_SHA384 => Ok(SignatureScheme::EcdsaP384Sha384Der),
        oid if oid == RSA_SHA256 => Ok(SignatureScheme::RsaPkcs1Sha256),
        oid if oid == ED25519 => Ok(SignatureScheme::Ed25519),
        other => Err(CryptoError::Malformed(format!(
            "signature algorithm {other} is not in the test kit"
        ))),
    }
}

/// Whether `issuer` issued and signed `cert`.
fn issued_by(cert: &Certificate, issuer: &Certificate) -> bool {
    if cert.tbs_certificate.issuer != issuer.tbs_certificate.subject {
        return false;
    }
    let (Ok(spki), Ok(tbs), Ok(scheme)) = (
        issuer.tbs_certificate.subject_public_key_info.to_der(),
        cert.tbs_certificate.to_der(),
        scheme_of(cert),
    ) else {
        return false;
    };
    verify_signature(scheme, &spki, &tbs, cert.signature.raw_bytes()).is_ok()
}

fn valid_at(cert: &Certificate, at: TimestampMs) -> bool {
    let validity = &cert.tbs_certificate.validity;
    ms(validity.not_before) <= at && at <= ms(validity.not_after)
}

/// Verifies a chain as the host's `verify-chain` does: leaf first, intermediates in any order,
/// to one of `roots`, every certificate valid at `at`, at most 8 certificates.
pub(crate) fn verify_chain(
    chain: &[Vec<u8>],
    roots: &[Vec<u8>],
    at: TimestampMs,
) -> Result<VerifiedChain, CryptoError> {
    if chain.is_empty() || chain.len() > MAX_CHAIN {
        return Err(CryptoError::Malformed(
            "a chain of 1 to 8 certificates".into(),
        ));
    }
    let certs = chain
        .iter()
        .map(|der| Certificate::from_der(der).map_err(malformed))
        .collect::<Result<Vec<_>, _>>()?;
    let roots = roots
        .iter()
        .map(|der| Certificate::from_der(der).map_err(malformed))
        .collect::<Result<Vec<_>, _>>()?;
    let leaf = &certs[0];
    let mut current = leaf;
    for _ in 0..MAX_CHAIN {
        if !valid_at(current, at) {
            return Err(CryptoError::Expired);
        }
        if let Some(index) = roots.iter().position(|root| issued_by(current, root)) {
            if !valid_at(&roots[index], at) {
                return Err(CryptoError::Expired);
            }
            return Ok(VerifiedChain {
                leaf_spki: leaf
                    .tbs_certificate
                    .subject_public_key_info
                    .to_der()
                    .map_err(malformed)?,
                leaf_not_after: ms(leaf.tbs_certificate.validity.not_after),
                root_index: u32::try_from(index).unwrap_or(u32::MAX),
            });
        }
        match certs[1..].iter().find(|c| issued_by(current, c)) {
            Some(issuer) => current = issuer,
            None => return Err(CryptoError::Untrusted),
        }
    }
    Err(CryptoError::Untrusted)
}
