//! TPM2_MakeCredential in software (TPM 2.0 Part 1 §24 and Annex C/D, Part 3 §12.6).
//!
//! A seed is shared with the EK's owner: for an RSA EK a random seed encrypted with RSA-OAEP
//! (label `IDENTITY\0`, hash the EK's nameAlg); for an ECC EK the one-pass Diffie-Hellman of
//! Part 1 §C.6.1 / Annex D (an ephemeral key on the EK's curve, `Z` the x-coordinate of the
//! shared point, seed = KDFe(nameAlg, Z, "IDENTITY", ephemeral.x, EK.x)), the encrypted secret
//! then being the ephemeral public point (TPMS_ECC_POINT). From the seed KDFa derives a
//! symmetric key (label `STORAGE`, context the AK's name) that encrypts the secret (as a
//! TPM2B_DIGEST, AES-CFB with a zero IV), and an HMAC key (label `INTEGRITY`) for the outer
//! HMAC over `encIdentity ‖ name`; every hash is the EK's nameAlg, so the high-range EK
//! templates (SHA-384, AES-256) work as the low-range ones do. Only the TPM holding the EK's
//! private key, with the object named `ak_name` loaded, can run TPM2_ActivateCredential and
//! get the secret back.

use hmac::Hmac;

use crate::public::{EccCurve, Public, PublicKey};
use crate::{HashAlg, TpmError, alg, attr, is_object_name};

/// MakeCredential's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    /// The contents of TPM2B_ID_OBJECT: TPM2B_DIGEST(outer HMAC) ‖ encIdentity.
    pub credential_blob: Vec<u8>,
    /// The contents of TPM2B_ENCRYPTED_SECRET: the RSA-OAEP encryption of the seed, or for an
    /// ECC EK the ephemeral public point as a TPMS_ECC_POINT (TPM2B x ‖ TPM2B y).
    pub encrypted_secret: Vec<u8>,
}

/// An ephemeral ECDH share with an EK's point: the ephemeral public point and the shared
/// secret `Z`, every value big-endian and as wide as the curve's coordinates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EcdhShare {
    /// The x-coordinate of the shared point (d_e · Q_EK).
    pub z: Vec<u8>,
    /// The ephemeral public point's x.
    pub x: Vec<u8>,
    /// The ephemeral public point's y.
    pub y: Vec<u8>,
}

/// The primitives MakeCredential needs besides hashing: the host implements them with
/// aws-lc-rs.
pub trait CredentialCrypto {
    /// Fills `out` with fresh random bytes (the seed for an RSA EK).
    fn fill_random(&self, out: &mut [u8]) -> Result<(), TpmError>;
    /// RSA-OAEP with `hash` (and MGF1 with `hash`) of `plaintext` to the RSA key in `spki`
    /// (DER), with `label` (which includes its terminating zero byte).
    fn rsa_oaep(
        &self,
        hash: HashAlg,
        spki: &[u8],
        plaintext: &[u8],
        label: &[u8],
    ) -> Result<Vec<u8>, TpmError>;
    /// A fresh ephemeral key on `curve` and its ECDH with the point (`x`, `y`), which must be
    /// checked to be on the curve.
    fn ecdh_ephemeral(&self, curve: EccCurve, x: &[u8], y: &[u8]) -> Result<EcdhShare, TpmError>;
    /// AES in CFB-128 mode with a zero IV, in place; `key` is 16 or 32 bytes.
    fn aes_cfb_encrypt(&self, key: &[u8], data: &mut [u8]) -> Result<(), TpmError>;
}

/// HMAC with `hash` of the concatenation of `parts`.
fn mac_of(hash: HashAlg, key: &[u8], parts: &[&[u8]]) -> Result<Vec<u8>, TpmError> {
    fn run<M: hmac::Mac + hmac::digest::KeyInit>(
        key: &[u8],
        parts: &[&[u8]],
    ) -> Result<Vec<u8>, TpmError> {
        let mut mac = <M as hmac::digest::KeyInit>::new_from_slice(key)
            .map_err(|_| TpmError::Malformed("HMAC key"))?;
        for part in parts {
            mac.update(part);
        }
        Ok(mac.finalize().into_bytes().to_vec())
    }
    match hash {
        HashAlg::Sha256 => run::<Hmac<sha2::Sha256>>(key, parts),
        HashAlg::Sha384 => run::<Hmac<sha2::Sha384>>(key, parts),
        HashAlg::Sha512 => run::<Hmac<sha2::Sha512>>(key, parts),
        HashAlg::Sha1 => Err(TpmError::Unsupported("SHA-1 HMAC")),
    }
}

/// KDFa (Part 1 §11.4.10.2) with HMAC-`hash`: `bits` bits of
/// `HMAC(key, i ‖ label ‖ 0 ‖ context_u ‖ context_v ‖ bits)` for i = 1, 2, …
/// (`label` without its terminating zero: it is added here).
pub fn kdfa(
    hash: HashAlg,
    key: &[u8],
    label: &[u8],
    context_u: &[u8],
    context_v: &[u8],
    bits: u32,
) -> Result<Vec<u8>, TpmError> {
    let bytes = usize::try_from(bits.div_ceil(8)).map_err(|_| TpmError::Malformed("KDF size"))?;
    let mut out = Vec::with_capacity(bytes + hash.size());
    let mut counter: u32 = 1;
    while out.len() < bytes {
        out.extend(mac_of(
            hash,
            key,
            &[
                &counter.to_be_bytes(),
                label,
                &[0],
                context_u,
                context_v,
                &bits.to_be_bytes(),
            ],
        )?);
        counter = counter.wrapping_add(1);
    }
    out.truncate(bytes);
    Ok(out)
}

/// KDFe (Part 1 §11.4.10.3), the single-step KDF of SP 800-56A: `bits` bits of
/// `H(i ‖ Z ‖ label ‖ 0 ‖ party_u ‖ party_v)` for i = 1, 2, … (`label` without its
/// terminating zero: it is added here).
pub fn kdfe(
    hash: HashAlg,
    z: &[u8],
    label: &[u8],
    party_u: &[u8],
    party_v: &[u8],
    bits: u32,
) -> Result<Vec<u8>, TpmError> {
    let bytes = usize::try_from(bits.div_ceil(8)).map_err(|_| TpmError::Malformed("KDF size"))?;
    let mut out = Vec::with_capacity(bytes + hash.size());
    let mut counter: u32 = 1;
    while out.len() < bytes {
        let mut input =
            Vec::with_capacity(4 + z.len() + label.len() + 1 + party_u.len() + party_v.len());
        input.extend_from_slice(&counter.to_be_bytes());
        input.extend_from_slice(z);
        input.extend_from_slice(label);
        input.push(0);
        input.extend_from_slice(party_u);
        input.extend_from_slice(party_v);
        out.extend(hash.digest(&input)?);
        counter = counter.wrapping_add(1);
    }
    out.truncate(bytes);
    Ok(out)
}

/// MakeCredential of `secret` for the EK `ek` and the object named `ak_name`.
///
/// The EK must be a storage key as the TCG EK profile makes it: restricted, decrypt set, sign
/// clear, an RSA key or an ECC key on P-256 or P-384, nameAlg SHA-256, -384 or -512, AES-128
/// or AES-256 in CFB mode (other EKs are [`TpmError::Unsupported`]). `secret` is 1 byte to
/// the nameAlg's digest size.
pub fn make_credential(
    crypto: &dyn CredentialCrypto,
    ek: &Public,
    ak_name: &[u8],
    secret: &[u8],
) -> Result<Credential, TpmError> {
    if !ek.has(attr::RESTRICTED | attr::DECRYPT) || ek.has(attr::SIGN) {
        return Err(TpmError::Attributes(
            "the EK is not a restricted decryption key",
        ));
    }
    let hash = ek.name_alg;
    if hash == HashAlg::Sha1 {
        return Err(TpmError::Unsupported("EK nameAlg SHA-1"));
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
    if secret.is_empty() || secret.len() > hash.size() {
        return Err(TpmError::Malformed("secret length"));
    }
    let seed_bits = u32::try_from(hash.size() * 8).map_err(|_| TpmError::Malformed("seed"))?;

    let (seed, encrypted_secret) = match &ek.key {
        PublicKey::Rsa { .. } => {
            let mut seed = vec![0; hash.size()];
            crypto.fill_random(&mut seed)?;
            let encrypted = crypto.rsa_oaep(hash, &ek.spki, &seed, b"IDENTITY\0")?;
            (seed, encrypted)
        }
        PublicKey::Ecc { curve, x, y } => {
            let share = crypto.ecdh_ephemeral(*curve, x, y)?;
            let width = curve.coordinate_len();
            if share.z.len() != width || share.x.len() != width || share.y.len() != width {
                return Err(TpmError::Malformed("ECDH share"));
            }
            let seed = kdfe(hash, &share.z, b"IDENTITY", &share.x, x, seed_bits)?;
            let mut point = Vec::with_capacity(4 + 2 * width);
            for coordinate in [&share.x, &share.y] {
                let size = u16::try_from(coordinate.len())
                    .map_err(|_| TpmError::Malformed("ECDH share"))?;
                point.extend_from_slice(&size.to_be_bytes());
                point.extend_from_slice(coordinate);
            }
            (seed, point)
        }
    };

    let sym_key = kdfa(hash, &seed, b"STORAGE", ak_name, &[], key_bits)?;
    let hmac_key = kdfa(hash, &seed, b"INTEGRITY", &[], &[], seed_bits)?;

    // encIdentity: the secret as a TPM2B_DIGEST, encrypted.
    let mut enc_identity = u16::try_from(secret.len())
        .map_err(|_| TpmError::Malformed("secret length"))?
        .to_be_bytes()
        .to_vec();
    enc_identity.extend_from_slice(secret);
    crypto.aes_cfb_encrypt(&sym_key, &mut enc_identity)?;

    let integrity = mac_of(hash, &hmac_key, &[&enc_identity, ak_name])?;
    let integrity_size =
        u16::try_from(integrity.len()).map_err(|_| TpmError::Malformed("HMAC size"))?;
    let mut credential_blob = Vec::with_capacity(2 + integrity.len() + enc_identity.len());
    credential_blob.extend_from_slice(&integrity_size.to_be_bytes());
    credential_blob.extend_from_slice(&integrity);
    credential_blob.extend_from_slice(&enc_identity);
    Ok(Credential {
        credential_blob,
        encrypted_secret,
    })
}
