//! `POST /v1/join`: the request an agent sends and the signed response it verifies.

use serde::{Deserialize, Serialize};

/// The role a machine asks to join as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// A compute node.
    Node,
    /// A site agent.
    Site,
    /// A commissioning ramdisk.
    Ramdisk,
}

impl Role {
    /// The role's wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Node => "node",
            Role::Site => "site",
            Role::Ramdisk => "ramdisk",
        }
    }
}

/// What the agent reports about its hardware (claims, not proof).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Claims {
    /// MAC addresses, lowercase, colon-separated.
    #[serde(default)]
    pub macs: Vec<String>,
    /// The SMBIOS product UUID, lowercase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub product_uuid: Option<String>,
}

/// One round of a join.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JoinRequest {
    /// The attestor that decides; empty means `join-token`.
    #[serde(default)]
    pub attestor: String,
    /// The role the machine asks for.
    pub role: Role,
    /// The join token sealed to the JoinService encryption key (see [`crate::TokenString`]).
    #[serde(
        default,
        with = "crate::b64::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub sealed_token: Option<Vec<u8>>,
    /// Attestor-specific evidence.
    #[serde(default, with = "crate::b64", skip_serializing_if = "Vec::is_empty")]
    pub attestation: Vec<u8>,
    /// The CSR, PKCS#10 DER, signed by the new node key (P-256).
    #[serde(with = "crate::b64")]
    pub csr: Vec<u8>,
    /// Hardware claims.
    #[serde(default)]
    pub claims: Claims,
    /// 1 for a first request, incremented for each answer to a deferral.
    #[serde(default = "first_round")]
    pub round: u8,
}

fn first_round() -> u8 {
    1
}

/// The envelope of every answer to a join round that was not refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JoinResponse {
    /// The JSON of a [`JoinResponseBody`], exactly as signed.
    #[serde(with = "crate::b64")]
    pub body: Vec<u8>,
    /// ECDSA P-256 SHA-256, fixed-width `r || s`, over [`response_signing_input`]`(body)`.
    #[serde(with = "crate::b64")]
    pub signature: Vec<u8>,
    /// Lowercase hex SHA-256 of the signing key's SubjectPublicKeyInfo.
    pub key_id: String,
}

/// Domain separation for join response signatures: no other signature by the join signing
/// key can be taken for one.
pub const RESPONSE_SIGNING_CONTEXT: &[u8] = b"gatehouse/join-response/v1\0";

/// The bytes the join signing key signs for a response body.
pub fn response_signing_input(body: &[u8]) -> Vec<u8> {
    let mut input = Vec::with_capacity(RESPONSE_SIGNING_CONTEXT.len() + body.len());
    input.extend_from_slice(RESPONSE_SIGNING_CONTEXT);
    input.extend_from_slice(body);
    input
}

/// What the host answers, signed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JoinResponseBody {
    /// Format version, 1.
    pub v: u8,
    /// Lowercase hex SHA-256 of the request's CSR: binds the answer to that request.
    pub csr_sha256: String,
    /// The node id; empty for a deferral.
    pub node_id: String,
    /// The certificate chain, leaf first (DER); empty for a deferral.
    #[serde(with = "crate::b64::list")]
    pub chain: Vec<Vec<u8>>,
    /// Set when the attestor could not decide this round.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deferral: Option<Deferral>,
    /// The host's join keys, sent once they have been rotated: the agent pins them in place
    /// of its own (the signature over this body, by a key it pins, vouches for them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust: Option<crate::TrustUpdate>,
}

/// A round that did not decide.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum Deferral {
    /// Wait for an operator, then ask again with the same CSR.
    Pending(Pending),
    /// Answer the challenge with the same CSR.
    Challenge(Challenge),
}

/// JoinPending.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Pending {
    /// The join request an operator decides.
    pub request_id: String,
    /// Seconds to wait before asking again.
    pub retry_after_seconds: u32,
}

/// JoinChallenge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Challenge {
    /// The attestor whose evidence producer answers it.
    pub attestor: String,
    /// Attestor-specific challenge bytes.
    #[serde(with = "crate::b64")]
    pub payload: Vec<u8>,
    /// Milliseconds since the Unix epoch (server time) after which answers are refused.
    pub not_after: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_defaults_and_round_trip() {
        let text = r#"{"role":"node","csr":"AQID"}"#;
        let req: JoinRequest = serde_json::from_str(text).unwrap();
        assert_eq!(req.attestor, "");
        assert_eq!(req.round, 1);
        assert_eq!(req.csr, vec![1, 2, 3]);
        let back: JoinRequest =
            serde_json::from_str(&serde_json::to_string(&req).unwrap()).unwrap();
        assert_eq!(back, req);
    }

    #[test]
    fn request_rejects_unknown_fields_and_bad_base64() {
        assert!(
            serde_json::from_str::<JoinRequest>(r#"{"role":"node","csr":"AQID","x":1}"#).is_err()
        );
        assert!(serde_json::from_str::<JoinRequest>(r#"{"role":"node","csr":"AQ=="}"#).is_err());
        assert!(serde_json::from_str::<JoinRequest>(r#"{"role":"admin","csr":"AQID"}"#).is_err());
    }

    #[test]
    fn signing_input_is_separated() {
        let input = response_signing_input(b"{}");
        assert!(input.starts_with(RESPONSE_SIGNING_CONTEXT));
        assert!(input.ends_with(b"{}"));
    }

    #[test]
    fn deferral_wire_shape() {
        let body = JoinResponseBody {
            v: 1,
            csr_sha256: "00".into(),
            node_id: String::new(),
            chain: vec![],
            deferral: Some(Deferral::Pending(Pending {
                request_id: "jr_1".into(),
                retry_after_seconds: 30,
            })),
            trust: None,
        };
        let json = serde_json::to_value(&body).unwrap();
        assert_eq!(json["deferral"]["pending"]["requestId"], "jr_1");
    }
}
