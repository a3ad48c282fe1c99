//! What the host publishes for relying parties: the node CA as a SPIFFE trust bundle, and the
//! certificates it revoked as an X.509 CRL signed by the node CA. During a rotation's overlap
//! window both node CAs are in the bundle and each signs a CRL of its own.
//!
//! Both are public: a relying party (a service checking a node's mTLS certificate) fetches
//! them without credentials and trusts them because of who signed them (the CRL) or because
//! it fetched them over the API's pinned TLS (the bundle), as the SPIFFE Trust Domain and
//! Bundle specification describes for the `https_web`/`https_spiffe` bundle endpoint profiles.

use rcgen::{
    CertificateRevocationListParams, KeyIdMethod, RevocationReason, RevokedCertParams, SerialNumber,
};
use serde::Serialize;
use time::OffsetDateTime;

use super::{Pki, PkiError};

/// One revoked certificate in a CRL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrlEntry {
    /// The serial number, lowercase hex as `node_certs` stores it.
    pub serial_hex: String,
    /// When it was revoked, ms since the Unix epoch.
    pub revoked_at_ms: i64,
    /// Why, as RFC 5280's CRLReason.
    pub reason: RevocationReason,
}

/// A SPIFFE trust bundle (a JWK Set): the X.509 authorities of the trust domain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SpiffeBundle {
    /// The authorities, one JWK each.
    pub keys: Vec<SpiffeJwk>,
    /// Increases whenever the bundle's content changes: here the newest authority's notBefore
    /// or, once a rotation's window is over, its end (seconds), which every replica computes
    /// alike.
    pub spiffe_sequence: u64,
    /// How often to fetch the bundle again, in seconds.
    pub spiffe_refresh_hint: u64,
}

/// One X.509 authority of a [`SpiffeBundle`] (an EC P-256 JWK with `use: x509-svid`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SpiffeJwk {
    /// Always `x509-svid`: the key is an X.509 authority.
    #[serde(rename = "use")]
    pub use_: String,
    /// `EC`.
    pub kty: String,
    /// `P-256`.
    pub crv: String,
    /// The public point's x coordinate, base64url.
    pub x: String,
    /// Its y coordinate, base64url.
    pub y: String,
    /// The CA certificate, standard base64 DER (RFC 7517 §4.7), exactly one.
    pub x5c: Vec<String>,
}

/// `der` as one PEM block labelled `label` (`CERTIFICATE`, `X509 CRL`), 64 characters a line.
pub fn pem_block(label: &str, der: &[u8]) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// Whole seconds (rounded down) as a time.
fn time_of(ms: i64) -> Result<OffsetDateTime, PkiError> {
    OffsetDateTime::from_unix_timestamp(ms.div_euclid(1000))
        .map_err(|_| PkiError::Certificate(format!("time {ms} ms is out of range")))
}

impl Pki {
    /// The CRLs of `revoked`, issued at `this_update_ms` and valid until `next_update_ms`, one
    /// signed by each node CA live then (DER), the current CA's first. Each lists every entry:
    /// serials are random, so another CA's serials in a CRL match none of its own
    /// certificates. Its CRL number is `this_update_ms`, which grows with the database's clock
    /// that every replica shares, so a later CRL from any replica has a larger number.
    pub fn sign_crls(
        &self,
        revoked: &[CrlEntry],
        this_update_ms: i64,
        next_update_ms: i64,
    ) -> Result<Vec<Vec<u8>>, PkiError> {
        let mut revoked_certs = Vec::with_capacity(revoked.len());
        for entry in revoked {
            let serial = hex::decode(&entry.serial_hex).map_err(|_| {
                PkiError::Certificate(format!("serial {:?} is not hex", entry.serial_hex))
            })?;
            revoked_certs.push(RevokedCertParams {
                serial_number: SerialNumber::from_slice(&serial),
                revocation_time: time_of(entry.revoked_at_ms)?,
                reason_code: Some(entry.reason),
                invalidity_date: None,
            });
        }
        let number = u64::try_from(this_update_ms).unwrap_or(0).to_be_bytes();
        let params = CertificateRevocationListParams {
            this_update: time_of(this_update_ms)?,
            next_update: time_of(next_update_ms)?,
            crl_number: SerialNumber::from_slice(&number),
            issuing_distribution_point: None,
            revoked_certs,
            key_identifier_method: KeyIdMethod::Sha256,
        };
        self.live_issuers(this_update_ms)
            .into_iter()
            .map(|issuer| -> Result<Vec<u8>, PkiError> {
                Ok(params.signed_by(issuer)?.der().to_vec())
            })
            .collect()
    }

    /// The node CAs live at `now_ms` as a SPIFFE trust bundle, to be fetched again after
    /// `refresh_seconds`.
    pub fn spiffe_bundle(
        &self,
        refresh_seconds: u64,
        now_ms: i64,
    ) -> Result<SpiffeBundle, PkiError> {
        let mut keys = Vec::new();
        let mut sequence = 0;
        for der in self.live_node_cas_der(now_ms) {
            let (key, not_before) = authority_jwk(der)?;
            keys.push(key);
            sequence = sequence.max(not_before);
        }
        // The previous CA leaving the bundle is a change too.
        if let Some((_, retire_at_ms)) = self.previous_node_ca().filter(|(_, at)| *at <= now_ms) {
            sequence = sequence.max(u64::try_from(retire_at_ms / 1000).unwrap_or(0));
        }
        Ok(SpiffeBundle {
            keys,
            spiffe_sequence: sequence,
            spiffe_refresh_hint: refresh_seconds,
        })
    }
}

/// A node CA certificate as a SPIFFE bundle's JWK, and its notBefore (seconds).
fn authority_jwk(der: &[u8]) -> Result<(SpiffeJwk, u64), PkiError> {
    use base64::Engine as _;
    let (_, ca) = x509_parser::parse_x509_certificate(der)
        .map_err(|_| PkiError::Certificate("the node CA does not parse".into()))?;
    let point = &ca.public_key().subject_public_key.data;
    // An uncompressed P-256 point: 0x04 ‖ x (32) ‖ y (32); `assemble` checked the curve.
    let (x, y) = match point.split_first() {
        Some((4, xy)) if xy.len() == 64 => xy.split_at(32),
        _ => {
            return Err(PkiError::Certificate(
                "the node CA key is not an uncompressed P-256 point".into(),
            ));
        }
    };
    let not_before = u64::try_from(ca.validity().not_before.timestamp()).unwrap_or(0);
    let jwk = SpiffeJwk {
        use_: "x509-svid".into(),
        kty: "EC".into(),
        crv: "P-256".into(),
        x: gatehouse_proto::b64::encode(x),
        y: gatehouse_proto::b64::encode(y),
        x5c: vec![base64::engine::general_purpose::STANDARD.encode(der)],
    };
    Ok((jwk, not_before))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use x509_parser::prelude::FromDer as _;
    use x509_parser::revocation_list::CertificateRevocationList;

    const T: i64 = 1_800_000_000_000;

    #[test]
    fn the_crl_lists_what_it_is_given_and_verifies_under_the_node_ca() {
        let pki = Pki::generate("example.org").unwrap();
        let entries = [
            CrlEntry {
                serial_hex: "4a0b".into(),
                revoked_at_ms: T - 5_000,
                reason: RevocationReason::Superseded,
            },
            CrlEntry {
                serial_hex: "7fffffffffffffffffff".into(),
                revoked_at_ms: T - 1_000,
                reason: RevocationReason::KeyCompromise,
            },
        ];
        let crls = pki.sign_crls(&entries, T, T + 600_000).unwrap();
        assert_eq!(crls.len(), 1);
        let der = crls[0].clone();
        let (rest, crl) = CertificateRevocationList::from_der(&der).unwrap();
        assert!(rest.is_empty());
        let (_, ca) = x509_parser::parse_x509_certificate(pki.node_ca_der()).unwrap();
        assert_eq!(crl.issuer(), ca.subject());
        let verify = |spki: &[u8]| {
            crate::pki::verify::verify_signature(
                crate::pki::verify::Scheme::EcdsaP256Sha256Der,
                spki,
                crl.tbs_cert_list.as_ref(),
                &crl.signature_value.data,
            )
        };
        verify(ca.public_key().raw).unwrap();
        assert_eq!(crl.last_update().timestamp(), T / 1000);
        assert_eq!(
            crl.next_update().map(|t| t.timestamp()),
            Some((T + 600_000) / 1000)
        );
        let serials: Vec<String> = crl
            .iter_revoked_certificates()
            .map(|r| hex::encode(r.raw_serial()))
            .collect();
        assert_eq!(serials, ["4a0b", "7fffffffffffffffffff"]);
        let first = crl.iter_revoked_certificates().next().unwrap();
        assert_eq!(first.revocation_date.timestamp(), (T - 5_000) / 1000);
        // Signed by another CA, it does not verify.
        let other = Pki::generate("example.org").unwrap();
        let (_, other_ca) = x509_parser::parse_x509_certificate(other.node_ca_der()).unwrap();
        assert!(verify(other_ca.public_key().raw).is_err());
        // A serial that is not hex, or nextUpdate not after thisUpdate, is an error.
        let bad = CrlEntry {
            serial_hex: "zz".into(),
            ..entries[0].clone()
        };
        assert!(pki.sign_crls(&[bad], T, T + 1_000).is_err());
        assert!(pki.sign_crls(&[], T, T).is_err());
    }

    #[test]
    fn the_bundle_is_the_node_ca_as_a_jwk() {
        use base64::Engine as _;
        let pki = Pki::generate("example.org").unwrap();
        let bundle = pki.spiffe_bundle(300, T).unwrap();
        assert_eq!(bundle.keys.len(), 1);
        let key = &bundle.keys[0];
        assert_eq!(
            (key.use_.as_str(), key.kty.as_str(), key.crv.as_str()),
            ("x509-svid", "EC", "P-256")
        );
        let der = base64::engine::general_purpose::STANDARD
            .decode(&key.x5c[0])
            .unwrap();
        assert_eq!(der, pki.node_ca_der());
        let (_, ca) = x509_parser::parse_x509_certificate(&der).unwrap();
        let point = &ca.public_key().subject_public_key.data;
        let x = gatehouse_proto::b64::decode(&key.x).unwrap();
        let y = gatehouse_proto::b64::decode(&key.y).unwrap();
        assert_eq!([&[4u8][..], &x, &y].concat(), point.to_vec());
        assert_eq!(bundle.spiffe_refresh_hint, 300);
        let json = serde_json::to_value(&bundle).unwrap();
        assert_eq!(json["keys"][0]["use"], "x509-svid");
        assert!(json["spiffe_sequence"].as_u64().unwrap() > 0);
    }

    #[test]
    fn in_a_rotation_window_both_cas_are_published_and_each_signs_a_crl() {
        use base64::Engine as _;
        let old = Pki::generate("example.org").unwrap();
        let new = old
            .rotate(&[crate::pki::KeyKind::NodeCa], T, 600_000)
            .unwrap();
        let x5c = |bundle: &SpiffeBundle| -> Vec<Vec<u8>> {
            bundle
                .keys
                .iter()
                .map(|k| {
                    base64::engine::general_purpose::STANDARD
                        .decode(&k.x5c[0])
                        .unwrap()
                })
                .collect()
        };
        let before = old.spiffe_bundle(300, T).unwrap();
        let during = new.spiffe_bundle(300, T).unwrap();
        assert_eq!(x5c(&during), [new.node_ca_der(), old.node_ca_der()]);
        assert!(during.spiffe_sequence >= before.spiffe_sequence);
        let after = new.spiffe_bundle(300, T + 600_000).unwrap();
        assert_eq!(x5c(&after), [new.node_ca_der()]);
        assert!(after.spiffe_sequence > during.spiffe_sequence);

        let entry = CrlEntry {
            serial_hex: "4a0b".into(),
            revoked_at_ms: T - 5_000,
            reason: RevocationReason::Superseded,
        };
        let crls = new
            .sign_crls(std::slice::from_ref(&entry), T, T + 1_000)
            .unwrap();
        assert_eq!(crls.len(), 2);
        for (der, ca) in crls.iter().zip([new.node_ca_der(), old.node_ca_der()]) {
            let (_, crl) = CertificateRevocationList::from_der(der).unwrap();
            let (_, ca) = x509_parser::parse_x509_certificate(ca).unwrap();
            crate::pki::verify::verify_signature(
                crate::pki::verify::Scheme::EcdsaP256Sha256Der,
                ca.public_key().raw,
                crl.tbs_cert_list.as_ref(),
                &crl.signature_value.data,
            )
            .unwrap();
        }
        assert_eq!(
            new.sign_crls(&[entry], T + 600_000, T + 601_000)
                .unwrap()
                .len(),
            1
        );
    }
}
