//! The SDK's [`gatehouse_sdk::Crypto`] natively, for calling an attestor crate without wasm
//! (the benchmark's native path, the real-vector tests): the same [`crate::pki`] functions the
//! component's `crypto` import runs, with the host clock standing in for database time.

use gatehouse_sdk::{CryptoError, SignatureScheme, VerifiedChain};

use crate::pki::Pki;
use crate::pki::verify::{self, Scheme};

/// Native crypto for one attestor.
pub struct NativeCrypto<'a> {
    /// The PKI whose challenge key seals state.
    pub pki: &'a Pki,
    /// The attestor state is sealed for.
    pub attestor: &'a str,
}

impl gatehouse_sdk::Crypto for NativeCrypto<'_> {
    fn sha256(&self, data: &[u8]) -> Vec<u8> {
        verify::sha256(data).to_vec()
    }

    fn verify_signature(
        &self,
        scheme: SignatureScheme,
        spki: &[u8],
        message: &[u8],
        signature: &[u8],
    ) -> Result<(), CryptoError> {
        let scheme = match scheme {
            SignatureScheme::EcdsaP256Sha256Fixed => Scheme::EcdsaP256Sha256Fixed,
            SignatureScheme::EcdsaP256Sha256Der => Scheme::EcdsaP256Sha256Der,
            SignatureScheme::EcdsaP384Sha384Der => Scheme::EcdsaP384Sha384Der,
            SignatureScheme::RsaPkcs1Sha256 => Scheme::RsaPkcs1Sha256,
            SignatureScheme::RsaPssSha256 => Scheme::RsaPssSha256,
            SignatureScheme::Ed25519 => Scheme::Ed25519,
        };
        verify::verify_signature(scheme, spki, message, signature).map_err(|e| match e {
            verify::VerifyError::BadSignature => CryptoError::BadSignature,
            other => CryptoError::Malformed(other.to_string()),
        })
    }

    fn verify_chain(
        &self,
        chain: &[Vec<u8>],
        roots: &[Vec<u8>],
        at: i64,
    ) -> Result<VerifiedChain, CryptoError> {
        verify::verify_chain(chain, roots, at)
            .map(|v| VerifiedChain {
                leaf_spki: v.leaf_spki,
                leaf_not_after: v.leaf_not_after_ms,
                root_index: v.root_index,
            })
            .map_err(|e| CryptoError::Malformed(e.to_string()))
    }

    fn seal_state(&self, plaintext: &[u8], binding: &[u8]) -> Vec<u8> {
        self.pki
            .seal_state(
                self.attestor,
                binding,
                plaintext,
                crate::wall_clock::now_ms(),
            )
            .unwrap_or_default()
    }

    fn seal_state_until(&self, plaintext: &[u8], binding: &[u8], not_after: i64) -> Vec<u8> {
        self.pki
            .seal_state_until(
                self.attestor,
                binding,
                plaintext,
                crate::wall_clock::now_ms(),
                not_after,
            )
            .unwrap_or_default()
    }

    fn open_state(&self, sealed: &[u8], binding: &[u8]) -> Result<Vec<u8>, CryptoError> {
        self.pki
            .open_state(self.attestor, binding, sealed, crate::wall_clock::now_ms())
            .map_err(|e| match e {
                crate::pki::StateError::Expired => CryptoError::Expired,
                _ => CryptoError::Unsealable,
            })
    }
}
