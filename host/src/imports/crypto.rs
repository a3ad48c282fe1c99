//! The host side of the WIT `crypto` interface: native (aws-lc-rs) hashing, signature and
//! chain verification, and sealing of challenge state under the host's challenge key, scoped
//! to the calling attestor.

use super::{CallState, TxBackend};
use crate::pki::verify::{self, ChainError, Scheme, VerifyError};
use crate::runtime::bindings::crypto::{CryptoError, Host, SignatureScheme, VerifiedChain};

/// Most certificates in a chain and roots in a trust list the host will look at.
const MAX_CHAIN: usize = 8;
const MAX_ROOTS: usize = 1024;

impl<B: TxBackend> Host for CallState<B> {
    async fn sha256(&mut self, data: Vec<u8>) -> wasmtime::Result<Vec<u8>> {
        Ok(verify::sha256(&data).to_vec())
    }

    async fn verify_signature(
        &mut self,
        scheme: SignatureScheme,
        spki: Vec<u8>,
        message: Vec<u8>,
        signature: Vec<u8>,
    ) -> wasmtime::Result<Result<(), CryptoError>> {
        let scheme = match scheme {
            SignatureScheme::EcdsaP256Sha256Fixed => Scheme::EcdsaP256Sha256Fixed,
            SignatureScheme::EcdsaP256Sha256Der => Scheme::EcdsaP256Sha256Der,
            SignatureScheme::EcdsaP384Sha384Der => Scheme::EcdsaP384Sha384Der,
            SignatureScheme::RsaPkcs1Sha256 => Scheme::RsaPkcs1Sha256,
            SignatureScheme::RsaPssSha256 => Scheme::RsaPssSha256,
            SignatureScheme::Ed25519 => Scheme::Ed25519,
        };
        Ok(verify::verify_signature(scheme, &spki, &message, &signature).map_err(verify_error))
    }

    async fn verify_chain(
        &mut self,
        chain: Vec<Vec<u8>>,
        roots: Vec<Vec<u8>>,
        at: i64,
    ) -> wasmtime::Result<Result<VerifiedChain, CryptoError>> {
        if chain.len() > MAX_CHAIN || roots.len() > MAX_ROOTS {
            return Ok(Err(CryptoError::Malformed(format!(
                "at most {MAX_CHAIN} certificates and {MAX_ROOTS} roots"
            ))));
        }
        Ok(verify::verify_chain(&chain, &roots, at)
            .map(|v| VerifiedChain {
                leaf_spki: v.leaf_spki,
                leaf_not_after: v.leaf_not_after_ms,
                root_index: v.root_index,
            })
            .map_err(chain_error))
    }

    async fn seal_state(
        &mut self,
        plaintext: Vec<u8>,
        binding: Vec<u8>,
    ) -> wasmtime::Result<Vec<u8>> {
        let Some(session) = self.session.as_ref() else {
            wasmtime::bail!("seal-state is only available inside verify");
        };
        session
            .pki
            .seal_state(&session.attestor, &binding, &plaintext)
            .map_err(|e| wasmtime::format_err!("seal-state: {e}"))
    }

    async fn open_state(
        &mut self,
        sealed: Vec<u8>,
        binding: Vec<u8>,
    ) -> wasmtime::Result<Result<Vec<u8>, CryptoError>> {
        let Some(session) = self.session.as_ref() else {
            wasmtime::bail!("open-state is only available inside verify");
        };
        Ok(session
            .pki
            .open_state(&session.attestor, &binding, &sealed)
            .map_err(|_| CryptoError::Unsealable))
    }
}

fn verify_error(e: VerifyError) -> CryptoError {
    match e {
        VerifyError::BadSignature => CryptoError::BadSignature,
        other => CryptoError::Malformed(other.to_string()),
    }
}

fn chain_error(e: ChainError) -> CryptoError {
    match e {
        ChainError::Expired { .. } | ChainError::NotYetValid { .. } => CryptoError::Expired,
        ChainError::Untrusted => CryptoError::Untrusted,
        ChainError::BadSignature => CryptoError::BadSignature,
        other => CryptoError::Malformed(other.to_string()),
    }
}
