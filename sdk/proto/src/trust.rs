//! The join trust file: everything an agent pins before its first join.

use serde::{Deserialize, Serialize};

/// What `gatehouse serve --dev` and `gatehouse pki trust` write for agents (`--ca FILE`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JoinTrust {
    /// The SPIFFE trust domain node certificates are issued in.
    pub trust_domain: String,
    /// The node CA certificate, PEM: what node certificates chain to.
    pub node_ca_pem: String,
    /// The CA certificate(s), PEM, the API's TLS server certificate chains to.
    pub tls_ca_pem: String,
    /// The join signing key's SubjectPublicKeyInfo (DER): responses must verify under it.
    #[serde(with = "crate::b64")]
    pub join_signing_key: Vec<u8>,
    /// The JoinService encryption key (HPKE public key, X25519, 32 bytes): tokens are sealed to it.
    #[serde(with = "crate::b64")]
    pub join_encryption_key: Vec<u8>,
}
