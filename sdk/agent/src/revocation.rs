//! Whether the host revoked a certificate: its CRL (`GET /v1/crl`), fetched over the pinned
//! TLS CA and believed only when it is signed by the pinned node CA and still current.
//!
//! `gatehouse-agent doctor --server … --ca …` uses it, so that a revoked (or superseded)
//! certificate is reported as such instead of "ok". The CRL is untrusted bytes until its
//! signature verifies: it is parsed by x509-parser (total), its issuer compared with the node
//! CA's subject, its signature checked with aws-lc-rs, and a CRL past its nextUpdate is
//! refused as stale rather than read as "not revoked".

use aws_lc_rs::signature::{ECDSA_P256_SHA256_ASN1, UnparsedPublicKey};
use gatehouse_proto::JoinTrust;
use x509_parser::prelude::FromDer as _;
use x509_parser::revocation_list::CertificateRevocationList;

use crate::client::{JoinError, endpoint, http_client, tls_builder, transport_error};

/// Largest CRL read (a host with many revoked, unexpired certificates; ~60 bytes each).
pub const MAX_CRL_LEN: usize = 16 << 20;

/// Why the CRL could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CrlError {
    /// It could not be fetched.
    #[error(transparent)]
    Fetch(#[from] JoinError),
    /// It is not a DER CRL.
    #[error("the CRL does not parse: {0}")]
    Malformed(String),
    /// It was not issued by the pinned node CA, or its signature does not verify under it.
    #[error("the CRL is not signed by the pinned node CA")]
    NotSigned,
    /// Its nextUpdate has passed: it may be missing newer revocations.
    #[error("the CRL is stale: its nextUpdate was {next_update_s} s after the epoch")]
    Stale {
        /// nextUpdate, seconds since the Unix epoch.
        next_update_s: i64,
    },
}

/// A certificate found in a CRL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revoked {
    /// When it was revoked, seconds since the Unix epoch.
    pub revoked_at_s: i64,
    /// RFC 5280's reason, as text (`superseded`, `cessationOfOperation`, ...), if given.
    pub reason: Option<String>,
}

/// Fetches the host's CRL (DER) over TLS that trusts only the pinned TLS CA.
pub async fn fetch_crl(server: &str, trust: &JoinTrust) -> Result<Vec<u8>, JoinError> {
    let url = endpoint(server, "/v1/crl")?;
    let http = http_client(tls_builder(trust)?.with_no_client_auth())?;
    let mut resp = http.get(url).send().await.map_err(transport_error)?;
    let status = resp.status();
    if status != reqwest::StatusCode::OK {
        return Err(JoinError::Host {
            status: status.as_u16(),
            code: String::new(),
            message: "GET /v1/crl".into(),
        });
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(transport_error)? {
        if body.len() + chunk.len() > MAX_CRL_LEN {
            return Err(JoinError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Whether the certificate with serial `serial_hex` (lowercase hex, as [`crate::NodeCert`]
/// reads it) is in `crl_der`, a CRL that must be signed by a pinned node CA and current at
/// `now_ms`. `Ok(None)`: not revoked.
pub fn check_crl(
    crl_der: &[u8],
    trust: &JoinTrust,
    serial_hex: &str,
    now_ms: i64,
) -> Result<Option<Revoked>, CrlError> {
    let (rest, crl) = CertificateRevocationList::from_der(crl_der)
        .map_err(|e| CrlError::Malformed(e.to_string()))?;
    if !rest.is_empty() {
        return Err(CrlError::Malformed("trailing bytes".into()));
    }
    // Signed by a pinned node CA: during a rotation's window, either of the two.
    let signed = x509_parser::pem::Pem::iter_from_buffer(trust.node_ca_pem.as_bytes())
        .map_while(Result::ok)
        .any(|pem| {
            pem.parse_x509().is_ok_and(|ca| {
                crl.issuer() == ca.subject()
                    && UnparsedPublicKey::new(
                        &ECDSA_P256_SHA256_ASN1,
                        &ca.public_key().subject_public_key.data,
                    )
                    .verify(crl.tbs_cert_list.as_ref(), &crl.signature_value.data)
                    .is_ok()
            })
        });
    if !signed {
        return Err(CrlError::NotSigned);
    }
    match crl.next_update() {
        Some(next) if next.timestamp().saturating_mul(1000) > now_ms => {}
        Some(next) => {
            return Err(CrlError::Stale {
                next_update_s: next.timestamp(),
            });
        }
        // A CRL without a nextUpdate says nothing about how long it holds.
        None => return Err(CrlError::Stale { next_update_s: 0 }),
    }
    let wanted = serial_hex.trim_start_matches("00");
    Ok(crl
        .iter_revoked_certificates()
        .find(|r| hex::encode(r.raw_serial()).trim_start_matches("00") == wanted)
        .map(|r| Revoked {
            revoked_at_s: r.revocation_date.timestamp(),
            reason: r.reason_code().map(|(_, code)| code.to_string()),
        }))
}
