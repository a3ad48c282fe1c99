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
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn wire_shape() {
        let r: RenewRequest = serde_json::from_str(r#"{"csr":"AQID"}"#).unwrap();
        assert_eq!(r.csr, vec![1, 2, 3]);
        assert!(serde_json::from_str::<RenewRequest>(r#"{"csr":"AQID","role":"site"}"#).is_err());
    }
}
