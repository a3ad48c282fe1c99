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
//! | `aws` | the JSON text of `/latest/dynamic/instance-identity/document` | the text of `/latest/dynamic/instance-identity/pkcs7` (base64 of a PKCS#7 SignedData by the region's AWS certificate; PEM armour and line breaks allowed) |
//! | `gcp` | the identity token of `/computeMetadata/v1/instance/service-accounts/default/identity?audience=…&format=full` (a JWS compact RS256 JWT) | absent |
//! | `azure` | the `signature` member of `/metadata/attested/document` (base64 of a PKCS#7 SignedData carrying the attested JSON and its signer's certificate) | absent |
//! | `oidc` | a JWS compact JWT (RS256 or ES256) from the issuer the host is configured with | absent |
//!
//! The document is not bound to the join's CSR (no cloud lets the instance put a CSR hash into
//! it): the host admits each (provider, account, instance) exactly once, ever, so a document
//! read by another process on the VM, or seen on the wire, cannot mint a second node.

use serde::{Deserialize, Serialize};

/// The attestor id.
pub const CLOUD_IID: &str = "cloud-iid";

/// Whose identity document the evidence carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    /// An AWS EC2 instance identity document with its PKCS#7 signature.
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
    /// AWS only: the document's PKCS#7 signature, as `/pkcs7` returned it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
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
    fn provider_names() {
        for p in Provider::ALL {
            assert_eq!(Provider::parse(p.as_str()), Some(p));
            assert_eq!(p.to_string(), p.as_str());
        }
        assert_eq!(Provider::parse("AWS"), None);
    }
}
