//! The join trust file: everything an agent pins before its first join, and the signed
//! updates that carry it across a key rotation.

use serde::{Deserialize, Serialize};

/// What `gatehouse serve --dev` and `gatehouse pki trust` write for agents (`--ca FILE`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JoinTrust {
    /// The SPIFFE trust domain node certificates are issued in.
    pub trust_domain: String,
    /// The node CA certificate(s), PEM: what node certificates chain to. During a rotation's
    /// overlap window it holds the new CA first and the retiring one after it.
    pub node_ca_pem: String,
    /// The CA certificate(s), PEM, the API's TLS server certificate chains to.
    pub tls_ca_pem: String,
    /// The join signing key's SubjectPublicKeyInfo (DER): responses must verify under it (or
    /// one of [`JoinTrust::other_join_signing_keys`]).
    #[serde(with = "crate::b64")]
    pub join_signing_key: Vec<u8>,
    /// The JoinService encryption key (HPKE public key, X25519, 32 bytes): tokens are sealed to it.
    #[serde(with = "crate::b64")]
    pub join_encryption_key: Vec<u8>,
    /// The other join signing keys a response may be signed by: during a rotation's overlap
    /// window, the retiring key, which keeps signing until the window ends.
    #[serde(
        default,
        with = "crate::b64::list",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub other_join_signing_keys: Vec<Vec<u8>>,
    /// How many rotations the host's keys have been through: of two trusts for one host, the
    /// one with the larger sequence is the newer (0 before the first rotation).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sequence: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The host's join keys as they are now, in every signed response while its keys are being
/// (or have been) rotated: a key the agent already pins vouches for them, so an agent picks
/// up a rotation on its next renewal. It carries neither the trust domain nor the TLS CA,
/// which an update never changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TrustUpdate {
    /// [`JoinTrust::sequence`] of the keys below.
    pub sequence: u64,
    /// [`JoinTrust::node_ca_pem`].
    pub node_ca_pem: String,
    /// [`JoinTrust::join_signing_key`].
    #[serde(with = "crate::b64")]
    pub join_signing_key: Vec<u8>,
    /// [`JoinTrust::other_join_signing_keys`].
    #[serde(
        default,
        with = "crate::b64::list",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub other_join_signing_keys: Vec<Vec<u8>>,
    /// [`JoinTrust::join_encryption_key`].
    #[serde(with = "crate::b64")]
    pub join_encryption_key: Vec<u8>,
}

impl JoinTrust {
    /// Every join signing key a response may be signed by: the primary one first.
    pub fn join_signing_keys(&self) -> impl Iterator<Item = &[u8]> {
        std::iter::once(self.join_signing_key.as_slice())
            .chain(self.other_join_signing_keys.iter().map(Vec::as_slice))
    }

    /// The keys of this trust, as an update would carry them.
    pub fn keys(&self) -> TrustUpdate {
        TrustUpdate {
            sequence: self.sequence,
            node_ca_pem: self.node_ca_pem.clone(),
            join_signing_key: self.join_signing_key.clone(),
            other_join_signing_keys: self.other_join_signing_keys.clone(),
            join_encryption_key: self.join_encryption_key.clone(),
        }
    }

    /// This trust with `update`'s keys: the trust domain and TLS CA stay.
    pub fn updated(&self, update: &TrustUpdate) -> JoinTrust {
        JoinTrust {
            trust_domain: self.trust_domain.clone(),
            tls_ca_pem: self.tls_ca_pem.clone(),
            node_ca_pem: update.node_ca_pem.clone(),
            join_signing_key: update.join_signing_key.clone(),
            other_join_signing_keys: update.other_join_signing_keys.clone(),
            join_encryption_key: update.join_encryption_key.clone(),
            sequence: update.sequence,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trust() -> JoinTrust {
        JoinTrust {
            trust_domain: "td".into(),
            node_ca_pem: "ca".into(),
            tls_ca_pem: "tls".into(),
            join_signing_key: vec![1],
            join_encryption_key: vec![2; 32],
            other_join_signing_keys: vec![],
            sequence: 0,
        }
    }

    #[test]
    fn a_trust_file_without_rotation_fields_reads_and_writes_as_before() {
        let text = r#"{"trustDomain":"td","nodeCaPem":"ca","tlsCaPem":"tls","joinSigningKey":"AQ","joinEncryptionKey":"AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI"}"#;
        let parsed: JoinTrust = serde_json::from_str(text).unwrap();
        assert_eq!(parsed, trust());
        let back = serde_json::to_value(&parsed).unwrap();
        assert!(back.get("sequence").is_none() && back.get("otherJoinSigningKeys").is_none());
    }

    #[test]
    fn an_update_replaces_the_keys_and_keeps_the_domain_and_tls_ca() {
        let update = TrustUpdate {
            sequence: 2,
            node_ca_pem: "new ca\nold ca".into(),
            join_signing_key: vec![3],
            other_join_signing_keys: vec![vec![1]],
            join_encryption_key: vec![4; 32],
        };
        let next = trust().updated(&update);
        assert_eq!(next.trust_domain, "td");
        assert_eq!(next.tls_ca_pem, "tls");
        assert_eq!(next.sequence, 2);
        assert_eq!(
            next.join_signing_keys().collect::<Vec<_>>(),
            [&[3u8][..], &[1u8][..]]
        );
        assert_eq!(next.join_encryption_key, vec![4; 32]);
    }
}
