//! Encoders for the structures this crate parses, in the TPM's wire format: what a software
//! TPM would emit. The host's benchmark and the tests build signed structures with them; the
//! verification path never uses them.

use crate::{HashAlg, ST_ATTEST_CERTIFY, ST_ATTEST_QUOTE, TPM_GENERATED_VALUE, alg, attr};

/// The attributes of an attestation key the agent makes: a restricted P-256 signing key.
pub const AK_ATTRIBUTES: u32 = attr::FIXED_TPM
    | attr::FIXED_PARENT
    | attr::SENSITIVE_DATA_ORIGIN
    | attr::USER_WITH_AUTH
    | attr::NO_DA
    | attr::RESTRICTED
    | attr::SIGN;

/// The attributes of the node key: an unrestricted P-256 signing key in the TPM.
pub const NODE_KEY_ATTRIBUTES: u32 = attr::FIXED_TPM
    | attr::FIXED_PARENT
    | attr::SENSITIVE_DATA_ORIGIN
    | attr::USER_WITH_AUTH
    | attr::NO_DA
    | attr::SIGN;

/// The attributes of the TCG default EK (template L-1).
pub const EK_ATTRIBUTES: u32 = attr::FIXED_TPM
    | attr::FIXED_PARENT
    | attr::SENSITIVE_DATA_ORIGIN
    | attr::ADMIN_WITH_POLICY
    | attr::RESTRICTED
    | attr::DECRYPT;

/// The TCG EK profile's authPolicy for template L-1 (PolicySecret(TPM_RH_ENDORSEMENT)).
pub const EK_POLICY: [u8; 32] = [
    0x83, 0x71, 0x97, 0x67, 0x44, 0x84, 0xb3, 0xf8, 0x1a, 0x90, 0xcc, 0x8d, 0x46, 0xa5, 0xd7, 0x24,
    0xfd, 0x52, 0xd7, 0x6e, 0x06, 0x52, 0x0b, 0x64, 0xf2, 0xa1, 0xda, 0x1b, 0x33, 0x14, 0x69, 0xaa,
];

fn tpm2b(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&u16::try_from(bytes.len()).unwrap_or(u16::MAX).to_be_bytes());
    out.extend_from_slice(bytes);
}

/// A TPMT_PUBLIC of a P-256 key, nameAlg SHA-256, with `attributes` and, when `ecdsa_sha256`,
/// the ECDSA-SHA-256 scheme (else TPM_ALG_NULL).
pub fn ecc_p256_public(attributes: u32, ecdsa_sha256: bool, x: &[u8], y: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&alg::ECC.to_be_bytes());
    out.extend_from_slice(&alg::SHA256.to_be_bytes());
    out.extend_from_slice(&attributes.to_be_bytes());
    tpm2b(&mut out, &[]);
    out.extend_from_slice(&alg::NULL.to_be_bytes()); // symmetric
    if ecdsa_sha256 {
        out.extend_from_slice(&alg::ECDSA.to_be_bytes());
        out.extend_from_slice(&alg::SHA256.to_be_bytes());
    } else {
        out.extend_from_slice(&alg::NULL.to_be_bytes());
    }
    out.extend_from_slice(&0x0003u16.to_be_bytes()); // TPM_ECC_NIST_P256
    out.extend_from_slice(&alg::NULL.to_be_bytes()); // kdf
    tpm2b(&mut out, x);
    tpm2b(&mut out, y);
    out
}

/// A TPMT_PUBLIC of an RSA-2048 EK as the TCG template L-1 makes it (AES-128-CFB, SHA-256),
/// with `modulus` (256 bytes) and exponent 65537 (encoded as 0).
pub fn rsa_ek_public(modulus: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&alg::RSA.to_be_bytes());
    out.extend_from_slice(&alg::SHA256.to_be_bytes());
    out.extend_from_slice(&EK_ATTRIBUTES.to_be_bytes());
    tpm2b(&mut out, &EK_POLICY);
    out.extend_from_slice(&alg::AES.to_be_bytes());
    out.extend_from_slice(&128u16.to_be_bytes());
    out.extend_from_slice(&alg::CFB.to_be_bytes());
    out.extend_from_slice(&alg::NULL.to_be_bytes()); // scheme
    let bits = u16::try_from(modulus.len() * 8).unwrap_or(u16::MAX);
    out.extend_from_slice(&bits.to_be_bytes());
    out.extend_from_slice(&0u32.to_be_bytes());
    tpm2b(&mut out, modulus);
    out
}

/// A TPMT_PUBLIC of a P-256 EK as the TCG template L-2 makes it (AES-128-CFB, SHA-256,
/// KDF and scheme NULL), with the point (`x`, `y`, 32 bytes each).
pub fn ecc_ek_public(x: &[u8], y: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&alg::ECC.to_be_bytes());
    out.extend_from_slice(&alg::SHA256.to_be_bytes());
    out.extend_from_slice(&EK_ATTRIBUTES.to_be_bytes());
    tpm2b(&mut out, &EK_POLICY);
    out.extend_from_slice(&alg::AES.to_be_bytes());
    out.extend_from_slice(&128u16.to_be_bytes());
    out.extend_from_slice(&alg::CFB.to_be_bytes());
    out.extend_from_slice(&alg::NULL.to_be_bytes()); // scheme
    out.extend_from_slice(&0x0003u16.to_be_bytes()); // TPM_ECC_NIST_P256
    out.extend_from_slice(&alg::NULL.to_be_bytes()); // kdf
    tpm2b(&mut out, x);
    tpm2b(&mut out, y);
    out
}

/// The attributes of the TCG high-range EK templates (H-1 to H-7): those of L-1 with
/// userWithAuth set, so the EK's user role may be authorized with its (empty) auth value.
pub const HIGH_RANGE_EK_ATTRIBUTES: u32 = EK_ATTRIBUTES | attr::USER_WITH_AUTH;

/// The TCG EK profile's authPolicy B for SHA-384 (the high-range SHA-384 templates).
pub const EK_POLICY_B_SHA384: [u8; 48] = [
    0xb2, 0x6e, 0x7d, 0x28, 0xd1, 0x1a, 0x50, 0xbc, 0x53, 0xd8, 0x82, 0xbc, 0xf5, 0xfd, 0x3a, 0x1a,
    0x07, 0x41, 0x48, 0xbb, 0x35, 0xd3, 0xb4, 0xe4, 0xcb, 0x1c, 0x0a, 0xd9, 0xbd, 0xe4, 0x19, 0xca,
    0xcb, 0x47, 0xba, 0x09, 0x69, 0x96, 0x46, 0x15, 0x0f, 0x9f, 0xc0, 0x00, 0xf3, 0xf8, 0x0e, 0x12,
];

/// A TPMT_PUBLIC of an RSA-3072 EK as the TCG high-range template H-6 makes it (SHA-384,
/// AES-256-CFB), with `modulus` (384 bytes) and exponent 65537 (encoded as 0).
pub fn rsa3072_ek_public(modulus: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&alg::RSA.to_be_bytes());
    out.extend_from_slice(&alg::SHA384.to_be_bytes());
    out.extend_from_slice(&HIGH_RANGE_EK_ATTRIBUTES.to_be_bytes());
    tpm2b(&mut out, &EK_POLICY_B_SHA384);
    out.extend_from_slice(&alg::AES.to_be_bytes());
    out.extend_from_slice(&256u16.to_be_bytes());
    out.extend_from_slice(&alg::CFB.to_be_bytes());
    out.extend_from_slice(&alg::NULL.to_be_bytes()); // scheme
    let bits = u16::try_from(modulus.len() * 8).unwrap_or(u16::MAX);
    out.extend_from_slice(&bits.to_be_bytes());
    out.extend_from_slice(&0u32.to_be_bytes());
    tpm2b(&mut out, modulus);
    out
}

/// A TPMT_PUBLIC of a P-384 EK as the TCG high-range template H-3 makes it (SHA-384,
/// AES-256-CFB, KDF and scheme NULL), with the point (`x`, `y`, 48 bytes each).
pub fn ecc_p384_ek_public(x: &[u8], y: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&alg::ECC.to_be_bytes());
    out.extend_from_slice(&alg::SHA384.to_be_bytes());
    out.extend_from_slice(&HIGH_RANGE_EK_ATTRIBUTES.to_be_bytes());
    tpm2b(&mut out, &EK_POLICY_B_SHA384);
    out.extend_from_slice(&alg::AES.to_be_bytes());
    out.extend_from_slice(&256u16.to_be_bytes());
    out.extend_from_slice(&alg::CFB.to_be_bytes());
    out.extend_from_slice(&alg::NULL.to_be_bytes()); // scheme
    out.extend_from_slice(&0x0004u16.to_be_bytes()); // TPM_ECC_NIST_P384
    out.extend_from_slice(&alg::NULL.to_be_bytes()); // kdf
    tpm2b(&mut out, x);
    tpm2b(&mut out, y);
    out
}

/// The header of a TPMS_ATTEST of `kind` with `extra_data` (a fixed signer name and clock).
fn attest_header(kind: u16, extra_data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&TPM_GENERATED_VALUE.to_be_bytes());
    out.extend_from_slice(&kind.to_be_bytes());
    tpm2b(&mut out, &[0x00, 0x0b, 0x5a, 0x5a]); // a short qualifiedSigner; not checked
    tpm2b(&mut out, extra_data);
    out.extend_from_slice(&1_000u64.to_be_bytes()); // clock
    out.extend_from_slice(&1u32.to_be_bytes()); // resetCount
    out.extend_from_slice(&0u32.to_be_bytes()); // restartCount
    out.push(1); // safe
    out.extend_from_slice(&0x2019_1023_0016_3636u64.to_be_bytes()); // firmwareVersion
    out
}

/// A TPMS_ATTEST quote over the SHA-256 bank's PCRs `indexes` (ascending, < 24) with
/// `pcr_digest`.
pub fn quote_attest(extra_data: &[u8], indexes: &[u8], pcr_digest: &[u8]) -> Vec<u8> {
    let mut out = attest_header(ST_ATTEST_QUOTE, extra_data);
    out.extend_from_slice(&1u32.to_be_bytes());
    out.extend_from_slice(&HashAlg::Sha256.id().to_be_bytes());
    out.push(3);
    let mut bitmap = [0u8; 3];
    for i in indexes {
        if let Some(byte) = bitmap.get_mut(usize::from(i / 8)) {
            *byte |= 1 << (i % 8);
        }
    }
    out.extend_from_slice(&bitmap);
    tpm2b(&mut out, pcr_digest);
    out
}

/// A TPMS_ATTEST certify of the object named `name` with `extra_data`.
pub fn certify_attest(extra_data: &[u8], name: &[u8]) -> Vec<u8> {
    let mut out = attest_header(ST_ATTEST_CERTIFY, extra_data);
    tpm2b(&mut out, name);
    tpm2b(&mut out, name);
    out
}

/// A TPMT_SIGNATURE of ECDSA-SHA-256 from a fixed-width `r ‖ s` (64 bytes).
pub fn ecdsa_sha256_signature(fixed: &[u8]) -> Vec<u8> {
    let (r, s) = fixed.split_at(fixed.len() / 2);
    let mut out = Vec::new();
    out.extend_from_slice(&alg::ECDSA.to_be_bytes());
    out.extend_from_slice(&alg::SHA256.to_be_bytes());
    tpm2b(&mut out, r);
    tpm2b(&mut out, s);
    out
}
