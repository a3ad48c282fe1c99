//! Total parsers and checks over TPM 2.0 wire structures (TPM 2.0 Library, Part 2).
//!
//! Everything here takes untrusted bytes (what an agent sent) and either returns a parsed
//! value or a [`TpmError`]: no function panics, recurses, or allocates more than a small
//! multiple of its (length-capped) input.
//!
//! - [`Public`]: a TPMT_PUBLIC (RSA and ECC keys), its TPM name and its SubjectPublicKeyInfo;
//! - [`Attest`]: a TPMS_ATTEST (quote and certify bodies), [`Signature`]: a TPMT_SIGNATURE;
//! - [`verify_quote`], [`verify_certify`], [`check_ak`]: the checks the tpm attestor and
//!   renewal make, with signature verification behind the small [`Verifier`] trait so the
//!   host plugs in aws-lc-rs and a wasm build RustCrypto (feature `rustcrypto`);
//! - [`make_credential`]: TPM2_MakeCredential done in software (Part 1 §24) for RSA and ECC
//!   EKs of any EK-profile template, with the RSA-OAEP, ECDH and AES-CFB steps behind
//!   [`CredentialCrypto`].
//!
//! The parsing is written by hand rather than with tss-esapi's marshalling types: tss-esapi
//! links the C TSS (tss2-mu), which cannot be built into a wasm32-wasip2 component, and its
//! unmarshalling of attacker input is C code we would rather not run on the host's join path.
//! Only the few structures an attestor reads are parsed, each field length-capped.

mod attest;
mod credential;
mod der;
pub mod marshal;
mod nv;
mod public;
mod reader;
#[cfg(feature = "rustcrypto")]
mod rustcrypto;
mod signature;
mod verify;

pub use attest::{Attest, Attested, ClockInfo, PcrSelection};
pub use credential::{Credential, CredentialCrypto, EcdhShare, kdfa, kdfe, make_credential};
pub use nv::{nv_certificate, nv_certificates};
pub use public::{EccCurve, KeyParams, Public, PublicKey, SymDef};
#[cfg(feature = "rustcrypto")]
pub use rustcrypto::RustCryptoVerifier;
pub use signature::Signature;
pub use verify::{
    PcrValue, Verifier, check_ak, check_certified_key, pcr_digest, verify_certify, verify_quote,
    verify_signed,
};

/// The most bytes of a TPMT_PUBLIC accepted (an RSA-4096 area is about 550).
pub const MAX_PUBLIC_LEN: usize = 2048;
/// The most bytes of a TPMS_ATTEST accepted.
pub const MAX_ATTEST_LEN: usize = 2048;
/// The most bytes of a TPMT_SIGNATURE accepted.
pub const MAX_SIGNATURE_LEN: usize = 1024;
/// The most PCR values a quote may carry (24 PCRs in each of a few banks).
pub const MAX_PCRS: usize = 128;

/// Why a TPM structure was rejected. Mirrors the WIT `tpm-error`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TpmError {
    /// The bytes are not a well-formed structure of the expected type.
    #[error("malformed: {0}")]
    Malformed(&'static str),
    /// The signature does not verify.
    #[error("bad signature")]
    BadSignature,
    /// The attestation structure has the wrong magic or type.
    #[error("wrong magic or attestation type")]
    WrongType,
    /// The attestation's extraData is not the expected nonce.
    #[error("wrong nonce")]
    WrongNonce,
    /// PCR values or selection do not match the quote.
    #[error("PCR values do not match the quote")]
    PcrMismatch,
    /// The certified name is not the name of the given public area.
    #[error("wrong name")]
    WrongName,
    /// Object attributes do not satisfy the check.
    #[error("attributes: {0}")]
    Attributes(&'static str),
    /// The algorithm or key type is not supported.
    #[error("unsupported: {0}")]
    Unsupported(&'static str),
}

/// TPM_ALG_ID values this crate knows.
pub mod alg {
    /// TPM_ALG_RSA.
    pub const RSA: u16 = 0x0001;
    /// TPM_ALG_SHA1.
    pub const SHA1: u16 = 0x0004;
    /// TPM_ALG_HMAC.
    pub const HMAC: u16 = 0x0005;
    /// TPM_ALG_AES.
    pub const AES: u16 = 0x0006;
    /// TPM_ALG_KEYEDHASH.
    pub const KEYEDHASH: u16 = 0x0008;
    /// TPM_ALG_XOR.
    pub const XOR: u16 = 0x000a;
    /// TPM_ALG_SHA256.
    pub const SHA256: u16 = 0x000b;
    /// TPM_ALG_SHA384.
    pub const SHA384: u16 = 0x000c;
    /// TPM_ALG_SHA512.
    pub const SHA512: u16 = 0x000d;
    /// TPM_ALG_NULL.
    pub const NULL: u16 = 0x0010;
    /// TPM_ALG_RSASSA.
    pub const RSASSA: u16 = 0x0014;
    /// TPM_ALG_RSAES.
    pub const RSAES: u16 = 0x0015;
    /// TPM_ALG_RSAPSS.
    pub const RSAPSS: u16 = 0x0016;
    /// TPM_ALG_OAEP.
    pub const OAEP: u16 = 0x0017;
    /// TPM_ALG_ECDSA.
    pub const ECDSA: u16 = 0x0018;
    /// TPM_ALG_ECDH.
    pub const ECDH: u16 = 0x0019;
    /// TPM_ALG_ECDAA.
    pub const ECDAA: u16 = 0x001a;
    /// TPM_ALG_ECSCHNORR.
    pub const ECSCHNORR: u16 = 0x001c;
    /// TPM_ALG_ECC.
    pub const ECC: u16 = 0x0023;
    /// TPM_ALG_SYMCIPHER.
    pub const SYMCIPHER: u16 = 0x0025;
    /// TPM_ALG_CFB.
    pub const CFB: u16 = 0x0043;
}

/// TPMA_OBJECT bits.
pub mod attr {
    /// The object's hierarchy cannot change: it cannot be duplicated.
    pub const FIXED_TPM: u32 = 1 << 1;
    /// Saved contexts are lost on TPM Restart.
    pub const ST_CLEAR: u32 = 1 << 2;
    /// The parent cannot change.
    pub const FIXED_PARENT: u32 = 1 << 4;
    /// The TPM generated the sensitive part.
    pub const SENSITIVE_DATA_ORIGIN: u32 = 1 << 5;
    /// The user role may authorize with the auth value.
    pub const USER_WITH_AUTH: u32 = 1 << 6;
    /// The admin role needs a policy.
    pub const ADMIN_WITH_POLICY: u32 = 1 << 7;
    /// Not subject to dictionary-attack protection.
    pub const NO_DA: u32 = 1 << 10;
    /// Duplication needs an inner wrapper.
    pub const ENCRYPTED_DUPLICATION: u32 = 1 << 11;
    /// Only operates on TPM-made structures (restricted).
    pub const RESTRICTED: u32 = 1 << 16;
    /// A decryption key.
    pub const DECRYPT: u32 = 1 << 17;
    /// A signing key.
    pub const SIGN: u32 = 1 << 18;
}

/// TPM_GENERATED_VALUE: the magic of every TPMS_ATTEST the TPM makes.
pub const TPM_GENERATED_VALUE: u32 = 0xff54_4347;
/// TPM_ST_ATTEST_CERTIFY.
pub const ST_ATTEST_CERTIFY: u16 = 0x8017;
/// TPM_ST_ATTEST_QUOTE.
pub const ST_ATTEST_QUOTE: u16 = 0x8018;

/// A hash algorithm TPM structures name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HashAlg {
    /// SHA-1 (PCR banks only: never a name or a signature hash here).
    Sha1,
    /// SHA-256.
    Sha256,
    /// SHA-384.
    Sha384,
    /// SHA-512.
    Sha512,
}

impl HashAlg {
    /// The hash for a TPM_ALG_ID, or `None`.
    pub fn from_id(id: u16) -> Option<Self> {
        match id {
            alg::SHA1 => Some(Self::Sha1),
            alg::SHA256 => Some(Self::Sha256),
            alg::SHA384 => Some(Self::Sha384),
            alg::SHA512 => Some(Self::Sha512),
            _ => None,
        }
    }

    /// Its TPM_ALG_ID.
    pub fn id(self) -> u16 {
        match self {
            Self::Sha1 => alg::SHA1,
            Self::Sha256 => alg::SHA256,
            Self::Sha384 => alg::SHA384,
            Self::Sha512 => alg::SHA512,
        }
    }

    /// Its digest size in bytes.
    pub fn size(self) -> usize {
        match self {
            Self::Sha1 => 20,
            Self::Sha256 => 32,
            Self::Sha384 => 48,
            Self::Sha512 => 64,
        }
    }

    /// The digest of `data`. SHA-1 is not computed here (nothing this crate verifies is hashed
    /// with it), so it is [`TpmError::Unsupported`].
    pub fn digest(self, data: &[u8]) -> Result<Vec<u8>, TpmError> {
        use sha2::Digest as _;
        match self {
            Self::Sha1 => Err(TpmError::Unsupported("SHA-1 digests")),
            Self::Sha256 => Ok(sha2::Sha256::digest(data).to_vec()),
            Self::Sha384 => Ok(sha2::Sha384::digest(data).to_vec()),
            Self::Sha512 => Ok(sha2::Sha512::digest(data).to_vec()),
        }
    }
}

/// Whether `name` is a well-formed TPM name of an object: a SHA-256, -384 or -512 nameAlg and
/// a digest of its size.
pub fn is_object_name(name: &[u8]) -> bool {
    match name.split_first_chunk::<2>() {
        Some((id, digest)) => match HashAlg::from_id(u16::from_be_bytes(*id)) {
            Some(HashAlg::Sha1) | None => false,
            Some(hash) => digest.len() == hash.size(),
        },
        None => false,
    }
}

#[cfg(test)]
mod tests;
