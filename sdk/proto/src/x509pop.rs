//! The x509pop evidence: a node whose certificate expired offline proves it still holds the
//! certificate's key, bound to its new CSR, and re-joins as itself.
//!
//! # The signing input
//!
//! ```text
//! "gatehouse/x509pop/v1" 0x00
//! sha256(csr DER)                      32 bytes
//! len(node id)                         u16, big-endian
//! node id                              UTF-8
//! client time                          i64, big-endian, milliseconds since the Unix epoch
//! ```
//!
//! signed with ES256 (ECDSA P-256 over SHA-256 of the input), the signature as fixed-width
//! `r || s`. The context string keeps every other signature by a node key from being taken
//! for an x509pop proof: join responses are signed under `gatehouse/join-response/v1`, and a
//! renewal's proof is the TLS 1.3 client CertificateVerify, whose signed content starts with
//! 64 spaces. The CSR hash ties a proof to one join request, so a proof seen on the wire
//! admits no other key; the client time and the host's single-use ledger make each proof
//! good for one join, within a minute of its making. The length prefix keeps the node id and
//! the time from running into each other.

use serde::{Deserialize, Serialize};

/// The context string that starts every x509pop signing input.
pub const X509POP_CONTEXT: &[u8] = b"gatehouse/x509pop/v1\0";

/// The evidence format version.
pub const X509POP_VERSION: u8 = 1;

/// The x509pop evidence, UTF-8 JSON in the join request's `attestation`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct X509popEvidence {
    /// Format version, 1.
    pub v: u8,
    /// The node the machine says it is.
    pub node_id: String,
    /// The node's last certificate chain, leaf first (DER).
    #[serde(with = "crate::b64::list")]
    pub chain: Vec<Vec<u8>>,
    /// The agent's clock when it made the proof, ms since the Unix epoch.
    pub client_time: i64,
    /// ES256 `r || s` over [`signing_input`].
    #[serde(with = "crate::b64")]
    pub sig: Vec<u8>,
}

/// The bytes an x509pop proof signs. `None` when the node id is longer than 65535 bytes (no
/// valid node id is).
pub fn signing_input(csr_sha256: &[u8; 32], node_id: &str, client_time: i64) -> Option<Vec<u8>> {
    let len = u16::try_from(node_id.len()).ok()?;
    let mut input = Vec::with_capacity(X509POP_CONTEXT.len() + 32 + 2 + node_id.len() + 8);
    input.extend_from_slice(X509POP_CONTEXT);
    input.extend_from_slice(csr_sha256);
    input.extend_from_slice(&len.to_be_bytes());
    input.extend_from_slice(node_id.as_bytes());
    input.extend_from_slice(&client_time.to_be_bytes());
    Some(input)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pins the signing input: a change here is a change of the wire format, which breaks
    /// every deployed agent.
    #[test]
    fn signing_input_vector() {
        let csr_sha256 = [0x11; 32];
        let input = signing_input(&csr_sha256, "node_abc", 1_790_000_000_000).unwrap();
        assert_eq!(
            hex::encode(&input),
            concat!(
                "67617465686f7573652f78353039706f702f763100", // "gatehouse/x509pop/v1\0"
                "1111111111111111111111111111111111111111111111111111111111111111",
                "0008",             // len("node_abc")
                "6e6f64655f616263", // "node_abc"
                "000001a0c4506c00"  // 1790000000000
            )
        );
    }

    #[test]
    fn fields_cannot_run_into_each_other() {
        let h = [0; 32];
        assert_ne!(
            signing_input(&h, "node_a", 1).unwrap(),
            signing_input(&h, "node_a\0\0\0\0\0\0\0", 1).unwrap()
        );
        assert!(signing_input(&h, &"x".repeat(70_000), 1).is_none());
    }

    #[test]
    fn evidence_wire_shape() {
        let text = r#"{"v":1,"nodeId":"node_a","chain":["AQ"],"clientTime":5,"sig":"Ag"}"#;
        let e: X509popEvidence = serde_json::from_str(text).unwrap();
        assert_eq!(e.chain, vec![vec![1]]);
        assert_eq!(e.sig, vec![2]);
        assert_eq!(serde_json::to_string(&e).unwrap(), text);
        assert!(serde_json::from_str::<X509popEvidence>(r#"{"v":1}"#).is_err());
    }
}
