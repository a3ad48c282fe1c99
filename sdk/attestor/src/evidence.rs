//! Parsing untrusted evidence.

use serde::de::DeserializeOwned;

use crate::{Refusal, reason, refuse};

/// The most bytes of JSON evidence [`json`] parses. Real evidence (a certificate chain, an
/// identity document, TPM structures) is a few KiB; the cap bounds the parser's work and
/// memory on hostile input.
pub const MAX_JSON_BYTES: usize = 256 * 1024;

/// Parses JSON evidence into `T`. Evidence longer than [`MAX_JSON_BYTES`], not UTF-8 JSON, or
/// not of `T`'s shape is a [`reason::MALFORMED_EVIDENCE`] refusal (derive `T` with
/// `#[serde(deny_unknown_fields)]` to refuse unexpected fields too).
pub fn json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Refusal> {
    if bytes.len() > MAX_JSON_BYTES {
        return Err(refuse(reason::MALFORMED_EVIDENCE));
    }
    serde_json::from_slice(bytes).map_err(|_| refuse(reason::MALFORMED_EVIDENCE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Evidence {
        v: u8,
        node_id: String,
    }

    #[test]
    fn parses_well_formed_evidence() {
        let evidence: Evidence = json(br#"{"v":1,"node_id":"node_1"}"#).unwrap();
        assert_eq!(
            evidence,
            Evidence {
                v: 1,
                node_id: "node_1".into()
            }
        );
    }

    #[test]
    fn refuses_malformed_evidence() {
        for bytes in [
            &b""[..],
            b"{",
            b"\xff\xfe",
            br#"{"v":1}"#,
            br#"{"v":256,"node_id":"n"}"#,
            br#"{"v":1,"node_id":"n","extra":true}"#,
        ] {
            assert_eq!(
                json::<Evidence>(bytes).unwrap_err(),
                refuse(reason::MALFORMED_EVIDENCE)
            );
        }
    }

    #[test]
    fn refuses_oversized_evidence() {
        let body = r#"{"v":1,"node_id":"n"}"#;
        let fits = format!("{body}{}", " ".repeat(MAX_JSON_BYTES - body.len()));
        assert_eq!(fits.len(), MAX_JSON_BYTES);
        assert!(json::<Evidence>(fits.as_bytes()).is_ok());
        let over = format!("{fits} ");
        assert_eq!(
            json::<Evidence>(over.as_bytes()).unwrap_err(),
            refuse(reason::MALFORMED_EVIDENCE)
        );
    }
}
