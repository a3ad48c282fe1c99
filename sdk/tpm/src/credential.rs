//! TPM2_MakeCredential in software (TPM 2.0 Part 1 §24, Part 3 §12.6).
//!
//! A random seed is encrypted to the EK with RSA-OAEP (label `IDENTITY\0`); from it KDFa
//! derives a symmetric key (label `STORAGE`, context the AK's name) that encrypts the secret
//! (as a TPM2B_DIGEST, AES-CFB with a zero IV), and an HMAC key (label `INTEGRITY`) for the
//! outer HMAC over `encIdentity ‖ name`. Only the TPM holding the EK's private key, with the
//! object named `ak_name` loaded, can run TPM2_ActivateCredential and get the secret back.

use hmac::{Hmac, Mac as _};
use sha2::Sha256;

use crate::public::{Public, PublicKey};
use crate::{HashAlg, TpmError, alg, attr, is_object_name};

/// MakeCredential's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    /// The contents of TPM2B_ID_OBJECT: TPM2B_DIGEST(outer HMAC) ‖ encIdentity.
    pub credential_blob: Vec<u8>,
    /// The contents of TPM2B_ENCRYPTED_SECRET: the RSA-OAEP encryption of the seed.
    pub encrypted_secret: Vec<u8>,
}

/// The two primitives MakeCredential needs besides HMAC: the host implements them with
/// aws-lc-rs.
pub trait CredentialCrypto {
    /// RSA-OAEP with SHA-256 (and MGF1-SHA-256) of `plaintext` to the RSA key in `spki` (DER),
    /// with `label` (which includes its terminating zero byte).
    fn rsa_oaep_sha256(
        &self,
        spki: &[u8],
        plaintext: &[u8],
        label: &[u8],
    ) -> Result<Vec<u8>, TpmError>;
    /// AES in CFB-128 mode with a zero IV, in place; `key` is 16 or 32 bytes.
    fn aes_cfb_encrypt(&self, key: &[u8], data: &mut [u8]) -> Result<(), TpmError>;
}

/// KDFa (Part 1 §11.4.10.2) with HMAC-SHA-256: `bits` bits of
/// `HMAC(key, i ‖ label ‖ 0 ‖ context_u ‖ context_v ‖ bits)` for i = 1, 2, …
/// (`label` without its terminating zero: it is added here).
pub fn kdfa(key: &[u8], label: &[u8], context_u: &[u8], context_v: &[u8], bits: u32) -> Vec<u8> {
    let bytes = usize::try_from(bits.div_ceil(8)).unwrap_or(0);
    let mut out = Vec::with_capacity(bytes + 32);
    let mut counter: u32 = 1;
    while out.len() < bytes {
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) else {
            // HMAC takes keys of any length; unreachable, but never panic.
            return Vec::new();
        };
        mac.update(&counter.to_be_bytes());
        mac.update(label);
        mac.update(&[0]);
        mac.update(context_u);
        mac.update(context_v);
        mac.update(&bits.to_be_bytes());
        out.extend_from_slice(&mac.finalize().into_bytes());
        counter = counter.wrapping_add(1);
    }
    out.truncate(bytes);
    out
}

/// MakeCredential of `secret` for the EK `ek` and the object named `ak_name`, with `seed`
/// (the caller's fresh random bytes, as many as the EK's nameAlg digest).
///
/// The EK must be an RSA storage key as the TCG EK profile makes it: restricted, decrypt set,
/// sign clear, nameAlg SHA-256, AES-128 or AES-256 in CFB mode (other EKs are
/// [`TpmError::Unsupported`]). `secret` is 1 to 32 bytes.
pub fn make_credential(
    crypto: &dyn CredentialCrypto,
    ek: &Public,
    ak_name: &[u8],
    secret: &[u8],
    seed: &[u8],
) -> Result<Credential, TpmError> {
    if !matches!(ek.key, PublicKey::Rsa { .. }) {
        return Err(TpmError::Unsupported("EK type (RSA only)"));
    }
    if !ek.has(attr::RESTRICTED | attr::DECRYPT) || ek.has(attr::SIGN) {
        return Err(TpmError::Attributes(
            "the EK is not a restricted decryption key",
        ));
    }
    if ek.name_alg != HashAlg::Sha256 {
        return Err(TpmError::Unsupported("EK nameAlg (SHA-256 only)"));
    }
    let key_bits = match ek.params.symmetric {
        Some(sym)
            if sym.alg == alg::AES && sym.mode == alg::CFB && matches!(sym.key_bits, 128 | 256) =>
        {
            u32::from(sym.key_bits)
        }
        _ => {
            return Err(TpmError::Unsupported(
                "EK symmetric algorithm (AES-CFB only)",
            ));
        }
    };
    if !is_object_name(ak_name) {
        return Err(TpmError::Malformed("AK name"));
    }
    if secret.is_empty() || secret.len() > HashAlg::Sha256.size() {
        return Err(TpmError::Malformed("secret length"));
    }
    if seed.len() != HashAlg::Sha256.size() {
        return Err(TpmError::Malformed("seed length"));
    }

    let encrypted_secret = crypto.rsa_oaep_sha256(&ek.spki, seed, b"IDENTITY\0")?;
    let sym_key = kdfa(seed, b"STORAGE", ak_name, &[], key_bits);
    let hmac_key = kdfa(seed, b"INTEGRITY", &[], &[], 256);

    // encIdentity: the secret as a TPM2B_DIGEST, encrypted.
    let mut enc_identity = u16::try_from(secret.len())
        .map_err(|_| TpmError::Malformed("secret length"))?
        .to_be_bytes()
        .to_vec();
    enc_identity.extend_from_slice(secret);
    crypto.aes_cfb_encrypt(&sym_key, &mut enc_identity)?;

    let mut mac =
        Hmac::<Sha256>::new_from_slice(&hmac_key).map_err(|_| TpmError::Malformed("HMAC key"))?;
    mac.update(&enc_identity);
    mac.update(ak_name);
    let integrity = mac.finalize().into_bytes();

    let mut credential_blob = Vec::with_capacity(2 + integrity.len() + enc_identity.len());
    credential_blob.extend_from_slice(&[0x00, 0x20]);
    credential_blob.extend_from_slice(&integrity);
    credential_blob.extend_from_slice(&enc_identity);
    Ok(Credential {
        credential_blob,
        encrypted_secret,
    })
}
