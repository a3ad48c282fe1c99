//! Verification of the PKCS#10 CSR a machine joins with.
//!
//! The CSR proves possession of the new node key and carries its public half; nothing else in
//! it is trusted. Its subject and requested extensions are ignored: the node id, SANs and
//! statements come from JoinService's decision alone. It is verified before the join
//! transaction opens, so a bad request costs no database work.

use aws_lc_rs::signature::{ECDSA_P256_SHA256_ASN1, UnparsedPublicKey};
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::oid_registry::OID_SIG_ECDSA_WITH_SHA256;
use x509_parser::prelude::FromDer;
use x509_parser::x509::X509Version;

use super::verify::{self, KeyKind, VerifyError};

/// Largest CSR accepted; a P-256 CSR is a few hundred bytes.
pub const MAX_CSR_LEN: usize = 8 * 1024;

/// A CSR whose self-signature verified under its own P-256 key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedCsr {
    /// The CSR, DER, exactly as received.
    pub der: Vec<u8>,
    /// SHA-256 of `der`: what responses, sealed tokens and challenge state bind to.
    pub sha256: [u8; 32],
    /// The node key's SubjectPublicKeyInfo, DER, exactly as in the CSR.
    pub spki_der: Vec<u8>,
    /// SHA-256 of `spki_der`: what key attestations (TPM2_Certify) are compared with.
    pub spki_sha256: [u8; 32],
}

/// Why a CSR was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CsrError {
    /// The CSR is larger than [`MAX_CSR_LEN`].
    #[error("the CSR is {0} bytes, more than {MAX_CSR_LEN}")]
    TooLarge(usize),
    /// The bytes are not a DER PKCS#10 CertificationRequest.
    #[error("malformed CSR: {0}")]
    Malformed(String),
    /// Bytes follow the CertificationRequest.
    #[error("trailing bytes after the CSR")]
    TrailingBytes,
    /// The CSR version is not v1 (0).
    #[error("the CSR version is not v1")]
    Version,
    /// The key is not an EC P-256 key (id-ecPublicKey with prime256v1).
    #[error("the CSR key must be EC P-256: {0}")]
    Key(String),
    /// The CSR is not signed with ecdsa-with-SHA256.
    #[error("the CSR must be signed with ecdsa-with-SHA256, not {0}")]
    SignatureAlgorithm(String),
    /// The self-signature does not verify under the CSR's key.
    #[error("the CSR signature does not verify")]
    BadSignature,
}

/// Parses `der` as a PKCS#10 CSR, requires an EC P-256 key and an ecdsa-with-SHA256
/// self-signature, and verifies that signature (aws-lc-rs).
pub fn verify_csr(der: &[u8]) -> Result<VerifiedCsr, CsrError> {
    if der.len() > MAX_CSR_LEN {
        return Err(CsrError::TooLarge(der.len()));
    }
    let (rest, csr) =
        X509CertificationRequest::from_der(der).map_err(|e| CsrError::Malformed(e.to_string()))?;
    if !rest.is_empty() {
        return Err(CsrError::TrailingBytes);
    }
    let info = &csr.certification_request_info;
    if info.version != X509Version::V1 {
        return Err(CsrError::Version);
    }
    let key = verify::classify_key(&info.subject_pki).map_err(|e| match e {
        VerifyError::MalformedKey(m) => CsrError::Malformed(m),
        other => CsrError::Key(other.to_string()),
    })?;
    if key.kind != KeyKind::P256 {
        return Err(CsrError::Key(format!("found a {} key", key.kind.name())));
    }
    let alg = &csr.signature_algorithm;
    if alg.algorithm != OID_SIG_ECDSA_WITH_SHA256 || alg.parameters.is_some() {
        return Err(CsrError::SignatureAlgorithm(alg.algorithm.to_id_string()));
    }
    if csr.signature_value.unused_bits != 0 {
        return Err(CsrError::BadSignature);
    }
    UnparsedPublicKey::new(&ECDSA_P256_SHA256_ASN1, key.bytes)
        .verify(info.raw, csr.signature_value.data.as_ref())
        .map_err(|_| CsrError::BadSignature)?;
    let spki_der = info.subject_pki.raw.to_vec();
    Ok(VerifiedCsr {
        der: der.to_vec(),
        sha256: verify::sha256(der),
        spki_sha256: verify::sha256(&spki_der),
        spki_der,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{
        CertificateParams, KeyPair, PKCS_ECDSA_P256_SHA256, PKCS_ECDSA_P384_SHA384,
        PKCS_RSA_SHA256, PublicKeyData as _,
    };

    fn csr_with(key: &KeyPair) -> Vec<u8> {
        // SANs and subject are ignored by verify_csr; put some in to show it.
        let params = CertificateParams::new(vec!["ignored.example".to_owned()]).unwrap();
        params.serialize_request(key).unwrap().der().to_vec()
    }

    fn p256_csr() -> (KeyPair, Vec<u8>) {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let der = csr_with(&key);
        (key, der)
    }

    #[test]
    fn accepts_p256_and_hashes() {
        let (key, der) = p256_csr();
        let csr = verify_csr(&der).unwrap();
        assert_eq!(csr.der, der);
        assert_eq!(csr.sha256, verify::sha256(&der));
        assert_eq!(csr.spki_der, key.subject_public_key_info());
        assert_eq!(
            csr.spki_sha256,
            verify::sha256(&key.subject_public_key_info())
        );
    }

    #[test]
    fn refuses_other_keys() {
        let p384 = KeyPair::generate_for(&PKCS_ECDSA_P384_SHA384).unwrap();
        assert!(matches!(
            verify_csr(&csr_with(&p384)),
            Err(CsrError::Key(_))
        ));
        let rsa = KeyPair::generate_for(&PKCS_RSA_SHA256).unwrap();
        assert!(matches!(verify_csr(&csr_with(&rsa)), Err(CsrError::Key(_))));
    }

    #[test]
    fn refuses_bad_signature() {
        let (_, mut der) = p256_csr();
        // The signature's last byte is the CSR's last byte.
        let last = der.len() - 1;
        der[last] ^= 0x01;
        assert_eq!(verify_csr(&der), Err(CsrError::BadSignature));
    }

    #[test]
    fn refuses_a_changed_request_info() {
        let (_, der) = p256_csr();
        let (_, csr) = X509CertificationRequest::from_der(&der).unwrap();
        let info = csr.certification_request_info.raw;
        let start = der.windows(info.len()).position(|w| w == info).unwrap();
        // Flip a byte of the "ignored.example" SAN: structure intact, signature not.
        let offset = start + info.windows(7).position(|w| w == b"ignored").unwrap();
        let mut bad = der.clone();
        bad[offset] = b'J';
        assert_eq!(verify_csr(&bad), Err(CsrError::BadSignature));
    }

    #[test]
    fn refuses_trailing_bytes_garbage_and_size() {
        let (_, mut der) = p256_csr();
        der.push(0);
        assert_eq!(verify_csr(&der), Err(CsrError::TrailingBytes));
        assert!(matches!(
            verify_csr(b"not a csr"),
            Err(CsrError::Malformed(_))
        ));
        assert!(matches!(verify_csr(&[]), Err(CsrError::Malformed(_))));
        assert_eq!(
            verify_csr(&vec![0x30; MAX_CSR_LEN + 1]),
            Err(CsrError::TooLarge(MAX_CSR_LEN + 1))
        );
    }

    #[test]
    fn display() {
        assert_eq!(
            CsrError::BadSignature.to_string(),
            "the CSR signature does not verify"
        );
        assert_eq!(
            CsrError::TooLarge(9000).to_string(),
            "the CSR is 9000 bytes, more than 8192"
        );
        assert_eq!(
            CsrError::Key("found a RSA key".into()).to_string(),
            "the CSR key must be EC P-256: found a RSA key"
        );
        assert_eq!(
            CsrError::SignatureAlgorithm("1.2.3".into()).to_string(),
            "the CSR must be signed with ecdsa-with-SHA256, not 1.2.3"
        );
        assert_eq!(
            CsrError::TrailingBytes.to_string(),
            "trailing bytes after the CSR"
        );
        assert_eq!(CsrError::Version.to_string(), "the CSR version is not v1");
        assert_eq!(
            CsrError::Malformed("x".into()).to_string(),
            "malformed CSR: x"
        );
    }
}
