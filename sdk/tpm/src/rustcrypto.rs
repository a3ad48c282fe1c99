//! A [`Verifier`] over RustCrypto's p256, for builds without the host's import (the
//! benchmark's in-component path). ECDSA P-256 with SHA-256 only: the AK the agent makes.

use p256::ecdsa::signature::Verifier as _;
use p256::ecdsa::{Signature as EcdsaSignature, VerifyingKey};

use crate::public::{EccCurve, Public, PublicKey};
use crate::signature::Signature;
use crate::{HashAlg, TpmError, Verifier, der};

/// ECDSA P-256/SHA-256 verification in pure Rust.
#[derive(Debug, Clone, Copy, Default)]
pub struct RustCryptoVerifier;

impl Verifier for RustCryptoVerifier {
    fn verify(&self, key: &Public, message: &[u8], signature: &Signature) -> Result<(), TpmError> {
        let PublicKey::Ecc {
            curve: EccCurve::P256,
            x,
            y,
        } = &key.key
        else {
            return Err(TpmError::Unsupported(
                "RustCrypto verifier: P-256 keys only",
            ));
        };
        if signature.hash() != HashAlg::Sha256 {
            return Err(TpmError::Unsupported("RustCrypto verifier: SHA-256 only"));
        }
        let fixed = signature.ecdsa_fixed(32).ok_or(TpmError::BadSignature)?;
        let key = VerifyingKey::from_sec1_bytes(&der::ec_point(x, y))
            .map_err(|_| TpmError::Malformed("P-256 point"))?;
        let sig = EcdsaSignature::from_slice(&fixed).map_err(|_| TpmError::BadSignature)?;
        key.verify(message, &sig)
            .map_err(|_| TpmError::BadSignature)
    }
}
