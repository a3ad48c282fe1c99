//! `POST /v1/renew`: a node renews its certificate over mTLS.
//!
//! The TLS handshake proves possession of the current certificate's key (the client's
//! CertificateVerify); the request carries only the CSR of the next key. The answer is a
//! [`crate::JoinResponse`], signed and bound to the CSR exactly as a join's.

use serde::{Deserialize, Serialize};

/// A renewal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RenewRequest {
    /// The CSR, PKCS#10 DER, signed by the next node key (P-256). Its subject and SANs are
    /// ignored: the new certificate's identity and statements come from the presented leaf.
    #[serde(with = "crate::b64")]
    pub csr: Vec<u8>,
    /// Required when the presented leaf names a TPM attestation key (`urn:bc:tpm-ak:`): the
    /// AK's certification of the CSR's key, qualified by `sha256(csr)`. No downgrade: such a
    /// leaf never renews without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_attestation: Option<crate::tpm::TpmKeyAttestation>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_shape() {
        let r: RenewRequest = serde_json::from_str(r#"{"csr":"AQID"}"#).unwrap();
        assert_eq!(r.csr, vec![1, 2, 3]);
        assert!(serde_json::from_str::<RenewRequest>(r#"{"csr":"AQID","role":"site"}"#).is_err());
    }
}
