//! The cloud-iid evidence: a cloud VM proves which instance of which account it is with the
//! identity document its cloud signs, and needs no join token.
//!
//! The evidence is UTF-8 JSON in the join request's `attestation`:
//!
//! ```json
//! { "provider": "aws", "document": "<the document>", "signature": "<AWS only>" }
//! ```
//!
//! `document` per provider, exactly as the instance's metadata service returns it:
//!
//! | provider | `document` | `signature` |
//! | --- | --- | --- |
//! | `aws` | the JSON text of `/latest/dynamic/instance-identity/document` | the text of `/latest/dynamic/instance-identity/rsa2048` (base64 of a PKCS#7 SignedData, SHA-256 with the region's RSA-2048 certificate; PEM armour and line breaks allowed), or of `/latest/dynamic/instance-identity/signature` (base64 of a bare RSA-SHA256 signature by the region's RSA-1024 certificate; accepted only where the host enables it). Not `/pkcs7`: that one is DSA with SHA-1, refused `legacy-algorithm` |
//! | `gcp` | the identity token of `/computeMetadata/v1/instance/service-accounts/default/identity?audience=…&format=full` (a JWS compact RS256 JWT) | absent |
//! | `azure` | the `signature` member of `/metadata/attested/document?nonce=<azure_nonce>` (base64 of a PKCS#7 SignedData carrying the attested JSON and its signer's certificate; see [`azure_nonce`]) | absent |
//! | `oidc` | a JWS compact JWT (RS256 or ES256) from the issuer the host is configured with | absent |
//!
//! The document is not bound to the join's CSR (no cloud lets the instance put a CSR hash into
//! it): the host admits each (provider, account, instance) exactly once, ever, so a document
//! read by another process on the VM, or seen on the wire, cannot mint a second node.

use serde::{Deserialize, Serialize};

/// The attestor id.
pub const CLOUD_IID: &str = "cloud-iid";

/// The nonce an Azure VM asks IMDS's attested document for (`?nonce=`), bound to the join's
/// node key: 10 decimal digits (IMDS takes a 10-digit string) of SHA-256 of the CSR's
/// SubjectPublicKeyInfo, `node_key_sha256`. A host configured with `nonce = "csr"` admits a
/// document only for the key it was fetched for, so one copied off the VM cannot join another
/// key. About 33 bits: binding, not secrecy.
pub fn azure_nonce(node_key_sha256: &[u8]) -> String {
    let mut first = [0u8; 8];
    for (to, from) in first.iter_mut().zip(node_key_sha256) {
        *to = *from;
    }
    format!("{:010}", u64::from_be_bytes(first) % 10_000_000_000)
}

/// Whose identity document the evidence carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    /// An AWS EC2 instance identity document with its `/rsa2048` (or `/signature`) signature.
    Aws,
    /// A Google Compute Engine identity token (`format=full`).
    Gcp,
    /// Azure IMDS attested data.
    Azure,
    /// An identity token from a generic OpenID Connect issuer.
    Oidc,
}

impl Provider {
    /// Every provider, in the order of this enum.
    pub const ALL: [Provider; 4] = [
        Provider::Aws,
        Provider::Gcp,
        Provider::Azure,
        Provider::Oidc,
    ];

    /// The lowercase name used in the evidence, the configuration and the result's subject.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Aws => "aws",
            Provider::Gcp => "gcp",
            Provider::Azure => "azure",
            Provider::Oidc => "oidc",
        }
    }

    /// The provider named `name` (`aws`, `gcp`, `azure`, `oidc`).
    pub fn parse(name: &str) -> Option<Provider> {
        Provider::ALL.into_iter().find(|p| p.as_str() == name)
    }
}

impl std::fmt::Display for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The cloud-iid evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CloudIidEvidence {
    /// Whose document it is.
    pub provider: Provider,
    /// The document, as the metadata service returned it (see the module docs).
    pub document: String,
    /// AWS only: the document's signature, as `/rsa2048` (or `/signature`) returned it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evidence_round_trips_and_refuses_unknown_fields() {
        let evidence = CloudIidEvidence {
            provider: Provider::Gcp,
            document: "a.b.c".into(),
            signature: None,
        };
        let text = serde_json::to_string(&evidence).unwrap();
        assert_eq!(text, r#"{"provider":"gcp","document":"a.b.c"}"#);
        assert_eq!(
            serde_json::from_str::<CloudIidEvidence>(&text).unwrap(),
            evidence
        );
        assert!(
            serde_json::from_str::<CloudIidEvidence>(
                r#"{"provider":"gcp","document":"x","extra":1}"#
            )
            .is_err()
        );
        assert!(
            serde_json::from_str::<CloudIidEvidence>(r#"{"provider":"ibm","document":"x"}"#)
                .is_err()
        );
    }

    #[test]
    fn azure_nonce_is_ten_digits_of_the_key_hash() {
        assert_eq!(azure_nonce(&[0u8; 32]), "0000000000");
        let n = azure_nonce(&[0xff; 32]);
        assert_eq!(n.len(), 10);
        assert!(n.bytes().all(|b| b.is_ascii_digit()));
        assert_ne!(azure_nonce(&[1u8; 32]), azure_nonce(&[2u8; 32]));
    }

    #[test]
    fn provider_names() {
        for p in Provider::ALL {
            assert_eq!(Provider::parse(p.as_str()), Some(p));
            assert_eq!(p.to_string(), p.as_str());
        }
        assert_eq!(Provider::parse("AWS"), None);
    }
}
