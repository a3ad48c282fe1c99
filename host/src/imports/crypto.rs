//! The host side of the WIT `crypto` interface: native (aws-lc-rs) hashing, signature and
//! chain verification, and sealing of challenge state under the host's challenge key, scoped
//! to the calling attestor, lasting at most five minutes by the join transaction's database
//! time.

use std::time::Instant;

use super::{CallState, TxBackend};
use crate::pki::StateError;
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
        self.seal("seal-state", &plaintext, &binding, i64::MAX)
            .await
    }

    async fn seal_state_until(
        &mut self,
        plaintext: Vec<u8>,
        binding: Vec<u8>,
        not_after: i64,
    ) -> wasmtime::Result<Vec<u8>> {
        self.seal("seal-state-until", &plaintext, &binding, not_after)
            .await
    }

    async fn open_state(
        &mut self,
        sealed: Vec<u8>,
        binding: Vec<u8>,
    ) -> wasmtime::Result<Result<Vec<u8>, CryptoError>> {
        let now = self.database_now("open-state").await?;
        let Some(session) = self.session.as_ref() else {
            wasmtime::bail!("open-state is only available inside verify");
        };
        Ok(session
            .pki
            .open_state(&session.attestor, &binding, &sealed, now)
            .map_err(|e| match e {
                StateError::Expired => CryptoError::Expired,
                _ => CryptoError::Unsealable,
            }))
    }
}

impl<B: TxBackend> CallState<B> {
    /// Seals for the calling attestor at database time, expiring at `not_after` or after
    /// [`crate::pki::MAX_STATE_TTL_MS`], whichever is sooner.
    async fn seal(
        &mut self,
        what: &str,
        plaintext: &[u8],
        binding: &[u8],
        not_after: i64,
    ) -> wasmtime::Result<Vec<u8>> {
        let now = self.database_now(what).await?;
        let Some(session) = self.session.as_ref() else {
            wasmtime::bail!("{what} is only available inside verify");
        };
        session
            .pki
            .seal_state_until(&session.attestor, binding, plaintext, now, not_after)
            .map_err(|e| wasmtime::format_err!("{what}: {e}"))
    }

    /// The join transaction's database time, which sealed state's expiry is set and checked
    /// by (the clock every replica shares; on PostgreSQL the transaction's start). It is a
    /// transaction call like `tx.now` (counted, timed); a failure traps, and counts as a
    /// storage failure so the call cannot admit.
    async fn database_now(&mut self, what: &str) -> wasmtime::Result<i64> {
        let session = self.enter()?;
        let started = Instant::now();
        let now = session.backend.now().await;
        if let Err(e) = &now {
            tracing::warn!(attestor = %session.attestor, error = %e, "{what}: database clock unavailable");
            session.effects.storage_failures += 1;
        }
        self.host_time += started.elapsed();
        now.map_err(|_| wasmtime::format_err!("{what}: database clock unavailable"))
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
