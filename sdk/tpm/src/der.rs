//! The DER encoding of a SubjectPublicKeyInfo for the two key shapes a TPM public area holds.
//!
//! Written by hand rather than with the `der`/`spki` crates: it only *encodes* two fixed
//! shapes from values already validated and length-capped by the public-area parser (nothing
//! untrusted is parsed here), and it keeps the component build small.

use crate::public::{EccCurve, PublicKey};

/// rsaEncryption (1.2.840.113549.1.1.1) with its NULL parameters.
const RSA_ALGORITHM: &[u8] = &[
    0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01, 0x05, 0x00,
];
/// id-ecPublicKey (1.2.840.10045.2.1).
const EC_PUBLIC_KEY: &[u8] = &[0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
/// prime256v1 (1.2.840.10045.3.1.7).
const P256: &[u8] = &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
/// secp384r1 (1.3.132.0.34).
const P384: &[u8] = &[0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x22];

/// The SubjectPublicKeyInfo of `key`.
pub(crate) fn spki(key: &PublicKey) -> Vec<u8> {
    match key {
        PublicKey::Rsa { modulus, exponent } => {
            let mut rsa_key = integer(modulus);
            rsa_key.extend(integer(&exponent.to_be_bytes()));
            let mut body = RSA_ALGORITHM.to_vec();
            body.extend(bit_string(&tlv(0x30, &rsa_key)));
            tlv(0x30, &body)
        }
        PublicKey::Ecc { curve, x, y } => {
            let mut algorithm = EC_PUBLIC_KEY.to_vec();
            algorithm.extend_from_slice(match curve {
                EccCurve::P256 => P256,
                EccCurve::P384 => P384,
            });
            let mut point = vec![0x04];
            point.extend_from_slice(x);
            point.extend_from_slice(y);
            let mut body = tlv(0x30, &algorithm);
            body.extend(bit_string(&point));
            tlv(0x30, &body)
        }
    }
}

/// The uncompressed point 0x04 ‖ x ‖ y of an ECC key (for the RustCrypto verifier).
#[cfg(any(test, feature = "rustcrypto"))]
pub(crate) fn ec_point(x: &[u8], y: &[u8]) -> Vec<u8> {
    let mut point = Vec::with_capacity(1 + x.len() + y.len());
    point.push(0x04);
    point.extend_from_slice(x);
    point.extend_from_slice(y);
    point
}

/// A DER INTEGER of an unsigned big-endian value.
pub(crate) fn integer(value: &[u8]) -> Vec<u8> {
    let trimmed = match value.iter().position(|b| *b != 0) {
        Some(i) => value.get(i..).unwrap_or_default(),
        None => &[0][..],
    };
    let mut content = Vec::with_capacity(trimmed.len() + 1);
    if trimmed.first().is_some_and(|b| b & 0x80 != 0) {
        content.push(0);
    }
    content.extend_from_slice(trimmed);
    tlv(0x02, &content)
}

/// A BIT STRING with no unused bits.
fn bit_string(content: &[u8]) -> Vec<u8> {
    let mut inner = Vec::with_capacity(content.len() + 1);
    inner.push(0);
    inner.extend_from_slice(content);
    tlv(0x03, &inner)
}

/// Tag, definite length, content.
pub(crate) fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let len = content.len();
    let mut out = Vec::with_capacity(len + 6);
    out.push(tag);
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        let significant = bytes.get(skip..).unwrap_or_default();
        out.push(0x80 | significant.len() as u8);
        out.extend_from_slice(significant);
    }
    out.extend_from_slice(content);
    out
}
