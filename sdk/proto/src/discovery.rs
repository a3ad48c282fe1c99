//! The discovery assertion (`bettercompute.site.v1`): a site node's signed statement that its
//! boot server just served a PXE boot to a MAC, which a commissioning ramdisk presents
//! together with its single-use discovery token.
//!
//! # The serialized form
//!
//! ```text
//! <b64url(payload)> "." <b64url(signature)>
//! ```
//!
//! where `payload` is the UTF-8 JSON of [`DiscoveryAssertion`] exactly as the site node signed
//! it, and `signature` is ES256 (ECDSA P-256 over SHA-256) as fixed-width `r || s` over
//!
//! ```text
//! "gatehouse/discovery-assertion/v1" 0x00 ‖ payload
//! ```
//!
//! The verifier checks the signature over the bytes it received and only then parses them, so
//! no JSON canonicalization is needed (as in JWS). The context string keeps every other
//! signature by a node key (x509pop proofs under `gatehouse/x509pop/v1`, join responses under
//! `gatehouse/join-response/v1`, TLS 1.3 CertificateVerify starting with 64 spaces) from
//! passing for an assertion, and the fixed prefix with its NUL makes the payload the whole
//! rest of the message, so nothing can be moved across the boundary. The form is compact and
//! free of spaces, `=` and quotes so it goes on a kernel command line as `bc.assertion=…`.
//!
//! `kid` names the signing key (lowercase hex SHA-256 of its SubjectPublicKeyInfo, as bcd
//! names node keys), so the host finds the one certificate of the signer to check against even
//! while a renewal has two of them live.

use serde::{Deserialize, Serialize};

/// The context string that starts every discovery assertion's signing input.
pub const DISCOVERY_CONTEXT: &[u8] = b"gatehouse/discovery-assertion/v1\0";

/// The schema every assertion names.
pub const DISCOVERY_SCHEMA: &str = "bettercompute.site.v1";

/// The longest serialized assertion accepted (a few hundred bytes in practice): bounds the
/// work done on untrusted input and keeps it fit for a kernel command line.
pub const MAX_SERIALIZED_LEN: usize = 2048;

/// Longest an assertion may claim to be valid (and the attestor's default `maxAgeMs`).
pub const MAX_ASSERTION_AGE_MS: i64 = 15 * 60 * 1000;

/// What the site node asserts about one boot it served.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DiscoveryAssertion {
    /// Always [`DISCOVERY_SCHEMA`].
    pub schema: String,
    /// The site whose boot server served the boot.
    pub site_id: String,
    /// The vouching site node.
    pub node_id: String,
    /// Lowercase hex SHA-256 of the signing key's SubjectPublicKeyInfo (DER).
    pub kid: String,
    /// The epoch of the `site:<siteId>:boot` lease the site node held when it signed.
    pub lease_epoch: u64,
    /// The MAC the boot was served to, lowercase and colon-separated.
    pub mac: String,
    /// The machine's IP address, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
    /// The machine's SMBIOS product UUID, when known: the ramdisk must claim the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub product_uuid: Option<String>,
    /// The commissioning workflow the boot belongs to, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow_id: Option<String>,
    /// When the site node signed it (its clock), ms since the Unix epoch.
    pub issued_at: i64,
    /// When it stops admitting, ms since the Unix epoch.
    pub not_after: i64,
}

/// A serialized assertion split into its signed payload and its signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedDiscoveryAssertion {
    /// The payload bytes exactly as signed (JSON of a [`DiscoveryAssertion`]).
    pub payload: Vec<u8>,
    /// ES256 `r || s` over [`signing_input`] of the payload.
    pub signature: Vec<u8>,
}

/// Why a serialized assertion could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AssertionError {
    /// Longer than [`MAX_SERIALIZED_LEN`].
    #[error("the assertion is longer than {MAX_SERIALIZED_LEN} bytes")]
    TooLong,
    /// Not `<b64url>.<b64url>`.
    #[error("the assertion is not two base64url parts")]
    Shape,
    /// The payload is not an assertion of this schema.
    #[error("the assertion's payload: {0}")]
    Payload(String),
}

/// The bytes a site node signs for `payload`.
pub fn signing_input(payload: &[u8]) -> Vec<u8> {
    let mut input = Vec::with_capacity(DISCOVERY_CONTEXT.len() + payload.len());
    input.extend_from_slice(DISCOVERY_CONTEXT);
    input.extend_from_slice(payload);
    input
}

impl SignedDiscoveryAssertion {
    /// Signs `assertion` with `sign` (ES256 `r || s` over the bytes it is given).
    pub fn sign<E>(
        assertion: &DiscoveryAssertion,
        sign: impl FnOnce(&[u8]) -> Result<Vec<u8>, E>,
    ) -> Result<Self, E> {
        // Serializing a struct of strings and integers cannot fail.
        let payload = serde_json::to_vec(assertion).unwrap_or_default();
        let signature = sign(&signing_input(&payload))?;
        Ok(Self { payload, signature })
    }

    /// The serialized form, `<b64url(payload)>.<b64url(signature)>`.
    pub fn to_text(&self) -> String {
        format!(
            "{}.{}",
            crate::b64::encode(&self.payload),
            crate::b64::encode(&self.signature)
        )
    }

    /// Splits the serialized form (a total function of untrusted text).
    pub fn parse(text: &str) -> Result<Self, AssertionError> {
        if text.len() > MAX_SERIALIZED_LEN {
            return Err(AssertionError::TooLong);
        }
        let (payload, signature) = text.split_once('.').ok_or(AssertionError::Shape)?;
        let payload = crate::b64::decode(payload).map_err(|_| AssertionError::Shape)?;
        let signature = crate::b64::decode(signature).map_err(|_| AssertionError::Shape)?;
        if payload.is_empty() || signature.is_empty() {
            return Err(AssertionError::Shape);
        }
        Ok(Self { payload, signature })
    }

    /// The bytes the signature is over.
    pub fn signing_input(&self) -> Vec<u8> {
        signing_input(&self.payload)
    }

    /// The payload as an assertion of [`DISCOVERY_SCHEMA`]. Only meaningful after the
    /// signature verified.
    pub fn assertion(&self) -> Result<DiscoveryAssertion, AssertionError> {
        let a: DiscoveryAssertion = serde_json::from_slice(&self.payload)
            .map_err(|e| AssertionError::Payload(e.to_string()))?;
        if a.schema != DISCOVERY_SCHEMA {
            return Err(AssertionError::Payload(format!(
                "schema {:?}, not {DISCOVERY_SCHEMA}",
                a.schema
            )));
        }
        Ok(a)
    }
}

/// Whether `mac` is a MAC as the wire writes them: six lowercase hex pairs separated by `:`.
pub fn is_mac(mac: &str) -> bool {
    let parts: Vec<&str> = mac.split(':').collect();
    parts.len() == 6
        && parts.iter().all(|p| {
            p.len() == 2
                && p.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
}

/// The kernel command line parameter carrying the discovery token.
pub const CMDLINE_TOKEN: &str = "bc.token";
/// The kernel command line parameter carrying the serialized assertion.
pub const CMDLINE_ASSERTION: &str = "bc.assertion";

/// The `bc.token=… bc.assertion=…` part of a ramdisk's kernel command line.
pub fn render_cmdline(token: &str, assertion: &SignedDiscoveryAssertion) -> String {
    format!(
        "{CMDLINE_TOKEN}={token} {CMDLINE_ASSERTION}={}",
        assertion.to_text()
    )
}

/// Reads `bc.token` and `bc.assertion` back from a kernel command line (the last occurrence
/// of each wins, as the kernel's own parameters do). `None` for each one missing.
pub fn parse_cmdline(cmdline: &str) -> (Option<String>, Option<String>) {
    let mut token = None;
    let mut assertion = None;
    for word in cmdline.split_ascii_whitespace() {
        if let Some((key, value)) = word.split_once('=') {
            match key {
                CMDLINE_TOKEN => token = Some(value.to_owned()),
                CMDLINE_ASSERTION => assertion = Some(value.to_owned()),
                _ => {}
            }
        }
    }
    (token, assertion)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> DiscoveryAssertion {
        DiscoveryAssertion {
            schema: DISCOVERY_SCHEMA.into(),
            site_id: "fra1".into(),
            node_id: "node_site".into(),
            kid: "ab".repeat(32),
            lease_epoch: 7,
            mac: "52:54:00:ab:cd:ef".into(),
            ip: None,
            product_uuid: Some("4c4c4544-0042-3510-8052-b4c04f4e4d32".into()),
            workflow_id: Some("wf_1".into()),
            issued_at: 1_790_000_000_000,
            not_after: 1_790_000_900_000,
        }
    }

    /// Pins the signing input and the payload's JSON: a change here is a change of the wire
    /// format, which breaks every deployed site agent.
    #[test]
    fn signing_input_vector() {
        let signed = SignedDiscoveryAssertion::sign(&sample(), |m| {
            Ok::<_, ()>(m.to_vec()) // the "signature" is the input itself, to see it
        })
        .unwrap();
        let text = concat!(
            r#"{"schema":"bettercompute.site.v1","siteId":"fra1","nodeId":"node_site","#,
            r#""kid":"abababababababababababababababababababababababababababababababab","#,
            r#""leaseEpoch":7,"mac":"52:54:00:ab:cd:ef","#,
            r#""productUuid":"4c4c4544-0042-3510-8052-b4c04f4e4d32","workflowId":"wf_1","#,
            r#""issuedAt":1790000000000,"notAfter":1790000900000}"#
        );
        assert_eq!(std::str::from_utf8(&signed.payload).unwrap(), text);
        assert_eq!(
            hex::encode(&signed.signature[..DISCOVERY_CONTEXT.len()]),
            // "gatehouse/discovery-assertion/v1\0"
            "67617465686f7573652f646973636f766572792d617373657274696f6e2f763100"
        );
        assert_eq!(
            &signed.signature[DISCOVERY_CONTEXT.len()..],
            text.as_bytes()
        );
    }

    #[test]
    fn round_trips_through_text_and_the_command_line() {
        let signed =
            SignedDiscoveryAssertion::sign(&sample(), |_| Ok::<_, ()>(vec![9; 64])).unwrap();
        let text = signed.to_text();
        assert!(!text.contains(['=', ' ', '"', '+', '/']));
        let back = SignedDiscoveryAssertion::parse(&text).unwrap();
        assert_eq!(back, signed);
        assert_eq!(back.assertion().unwrap(), sample());

        let line = format!(
            "initrd=ramdisk.img console=ttyS0 {} quiet",
            render_cmdline("gh1.tok_a.c2VjcmV0", &signed)
        );
        let (token, assertion) = parse_cmdline(&line);
        assert_eq!(token.as_deref(), Some("gh1.tok_a.c2VjcmV0"));
        assert_eq!(assertion.as_deref(), Some(text.as_str()));
        assert_eq!(parse_cmdline("quiet"), (None, None));
    }

    #[test]
    fn refuses_what_is_not_an_assertion() {
        for bad in ["", "abc", ".", "a.", ".a", "a.b.c", "***.AA", "AA.***"] {
            assert!(SignedDiscoveryAssertion::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            SignedDiscoveryAssertion::parse(&"A".repeat(3000)),
            Err(AssertionError::TooLong)
        );
        let other_schema = DiscoveryAssertion {
            schema: "bettercompute.site.v2".into(),
            ..sample()
        };
        let signed =
            SignedDiscoveryAssertion::sign(&other_schema, |_| Ok::<_, ()>(vec![1])).unwrap();
        assert!(matches!(
            signed.assertion(),
            Err(AssertionError::Payload(_))
        ));
        let unknown_field = SignedDiscoveryAssertion {
            payload: br#"{"schema":"bettercompute.site.v1","x":1}"#.to_vec(),
            signature: vec![1],
        };
        assert!(unknown_field.assertion().is_err());
    }

    #[test]
    fn macs() {
        assert!(is_mac("52:54:00:ab:cd:ef"));
        for bad in [
            "52:54:00:AB:CD:EF",
            "52:54:00:ab:cd",
            "52-54-00-ab-cd-ef",
            "",
            "zz:54:00:ab:cd:ef",
        ] {
            assert!(!is_mac(bad), "{bad}");
        }
    }
}
