//! Issuing node certificates under the node CA.
//!
//! A node certificate is a P-256 leaf: subject CN = the node id and OU = the role (see
//! [`super::identity`] for why the role is not a statement), URI SANs the SPIFFE ID first
//! and then the `urn:bc:` statements (at most [`MAX_URIS`] in all), keyUsage
//! digitalSignature (critical), extKeyUsage clientAuth and serverAuth, basicConstraints
//! CA:false, subject and authority key identifiers, and a positive 16-byte serial that starts
//! with the time of issue (see [`new_serial`]).

use rcgen::{
    CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyUsagePurpose, SanType,
    SerialNumber, SubjectPublicKeyInfo,
};
use time::OffsetDateTime;

use super::identity::{self, IdentityError};
use super::verify::{self, KeyKind};
use super::{Pki, PkiError};

/// Most URI SANs in a node certificate: the SPIFFE ID and up to three statements.
pub const MAX_URIS: usize = 4;
/// What every statement URI starts with.
pub const STATEMENT_PREFIX: &str = "urn:bc:";
/// Longest statement accepted.
const MAX_STATEMENT_LEN: usize = 512;
/// Serial numbers are 16 bytes: 2 fixed bits, 48 of time, 78 random.
const SERIAL_LEN: usize = 16;
/// The random bits of a serial: more than the 64 of CSPRNG output the CA/Browser Forum asks
/// of a public CA, so a serial stays unpredictable to whoever asks for a certificate.
const SERIAL_RANDOM_BITS: u32 = 78;

/// What to put in a node certificate.
#[derive(Debug, Clone, Copy)]
pub struct IssueRequest<'a> {
    /// The node id: the subject CN and the SPIFFE ID's last segment.
    pub node_id: &'a str,
    /// One of [`identity::ROLES`]: the subject OU.
    pub role: &'a str,
    /// The node key's SubjectPublicKeyInfo (DER, EC P-256), as in the verified CSR.
    pub spki_der: &'a [u8],
    /// `urn:bc:` statement URIs, placed after the SPIFFE ID.
    pub statements: &'a [String],
    /// Validity start, milliseconds since the Unix epoch (truncated to the second).
    pub not_before_ms: i64,
    /// Validity end, milliseconds since the Unix epoch (truncated to the second).
    pub not_after_ms: i64,
}

/// An issued node certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedCert {
    /// The certificate, DER.
    pub der: Vec<u8>,
    /// The serial number, lowercase hex of its 16 bytes.
    pub serial_hex: String,
    /// The validity start as written in the certificate (whole seconds), in milliseconds.
    pub not_before_ms: i64,
    /// The validity end as written in the certificate (whole seconds), in milliseconds.
    pub not_after_ms: i64,
}

/// Why a node certificate request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IssueError {
    /// The node id or the role is invalid.
    #[error(transparent)]
    Identity(#[from] IdentityError),
    /// More URIs than [`MAX_URIS`] would go in the certificate.
    #[error("at most {MAX_URIS} URIs (the SPIFFE ID and {statements} statements), asked for {0}", statements = MAX_URIS - 1)]
    TooManyUris(usize),
    /// A statement does not start with `urn:bc:`, is too long, or has characters outside
    /// printable ASCII.
    #[error("invalid statement {0:?}: statements are printable urn:bc: URIs")]
    Statement(String),
    /// The key is not an EC P-256 SubjectPublicKeyInfo.
    #[error("the node key must be EC P-256: {0}")]
    Key(String),
    /// The validity period is empty or not representable in a certificate.
    #[error("invalid validity period {not_before_ms}..{not_after_ms}")]
    Validity {
        /// The requested start.
        not_before_ms: i64,
        /// The requested end.
        not_after_ms: i64,
    },
}

/// A positive serial of exactly [`SERIAL_LEN`] bytes and its hex: the top bit clear so it is
/// positive, the next one set so DER keeps every byte, then the host's wall-clock time in ms
/// (48 bits) and [`SERIAL_RANDOM_BITS`] random bits.
///
/// Why the time first: `node_certs` is keyed by the serial's hex, and a key that grows with
/// time is appended at the right edge of its index, where a random one dirties a different
/// page per certificate: at 100,000 nodes that made SQLite's batch commits write several
/// times the pages. Uniqueness and unpredictability rest on the random bits; a clock stepped
/// back only costs locality.
pub fn new_serial() -> Result<(SerialNumber, String), PkiError> {
    let mut random = [0u8; SERIAL_LEN];
    aws_lc_rs::rand::fill(&mut random).map_err(|_| PkiError::Crypto("randomness"))?;
    let random = u128::from_be_bytes(random) & ((1 << SERIAL_RANDOM_BITS) - 1);
    let ms = u128::try_from(crate::wall_clock::now_ms()).unwrap_or(0) & ((1 << 48) - 1);
    let value = (1 << 126) | (ms << SERIAL_RANDOM_BITS) | random;
    let bytes = value.to_be_bytes();
    Ok((SerialNumber::from_slice(&bytes), hex::encode(bytes)))
}

fn validate_statement(statement: &str) -> Result<(), IssueError> {
    let ok = statement.len() > STATEMENT_PREFIX.len()
        && statement.len() <= MAX_STATEMENT_LEN
        && statement.starts_with(STATEMENT_PREFIX)
        && statement.bytes().all(|b| b.is_ascii_graphic());
    if ok {
        Ok(())
    } else {
        Err(IssueError::Statement(statement.to_owned()))
    }
}

/// Whole seconds (rounded down) as a certificate time.
fn cert_time(ms: i64) -> Option<OffsetDateTime> {
    OffsetDateTime::from_unix_timestamp(ms.div_euclid(1000)).ok()
}

impl Pki {
    /// Issues a node certificate for `req` signed by the node CA.
    ///
    /// Everything in it comes from `req` (JoinService's decision); the key comes in as a
    /// SubjectPublicKeyInfo and must be P-256. The certificate's SPKI is checked to be
    /// byte-for-byte `req.spki_der`, so the CSR's `spki_sha256` names the issued key.
    pub fn issue_node_cert(&self, req: &IssueRequest<'_>) -> Result<IssuedCert, PkiError> {
        identity::validate_node_id(req.node_id).map_err(IssueError::Identity)?;
        identity::validate_role(req.role).map_err(IssueError::Identity)?;
        let uris = 1 + req.statements.len();
        if uris > MAX_URIS {
            return Err(IssueError::TooManyUris(uris).into());
        }
        for statement in req.statements {
            validate_statement(statement)?;
        }
        let key = verify::parse_key(req.spki_der).map_err(|e| IssueError::Key(e.to_string()))?;
        if key.kind != KeyKind::P256 {
            return Err(IssueError::Key(format!("found a {} key", key.kind.name())).into());
        }
        let invalid = || IssueError::Validity {
            not_before_ms: req.not_before_ms,
            not_after_ms: req.not_after_ms,
        };
        let (Some(not_before), Some(not_after)) =
            (cert_time(req.not_before_ms), cert_time(req.not_after_ms))
        else {
            return Err(invalid().into());
        };
        // X.509 times end at 9999-12-31; an empty period is no certificate.
        if not_before >= not_after || not_after.year() > 9999 || not_before.year() < 1950 {
            return Err(invalid().into());
        }
        let public_key = SubjectPublicKeyInfo::from_der(req.spki_der)?;

        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, req.node_id);
        params
            .distinguished_name
            .push(DnType::OrganizationalUnitName, req.role);
        let spiffe = identity::spiffe_id(&self.trust_domain, req.node_id);
        params.subject_alt_names = std::iter::once(&spiffe)
            .chain(req.statements)
            .map(|uri| Ok(SanType::URI(uri.as_str().try_into()?)))
            .collect::<Result<_, rcgen::Error>>()?;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ClientAuth,
            ExtendedKeyUsagePurpose::ServerAuth,
        ];
        params.use_authority_key_identifier_extension = true;
        let (serial, serial_hex) = new_serial()?;
        params.serial_number = Some(serial);
        params.not_before = not_before;
        params.not_after = not_after;
        let der = params.signed_by(&public_key, &self.ca)?.der().to_vec();

        let (_, issued) = x509_parser::parse_x509_certificate(&der).map_err(|e| {
            PkiError::Certificate(format!("the issued certificate does not parse: {e}"))
        })?;
        if issued.public_key().raw != req.spki_der {
            return Err(PkiError::Certificate(
                "the issued certificate re-encoded the key".into(),
            ));
        }
        Ok(IssuedCert {
            der,
            serial_hex,
            not_before_ms: not_before.unix_timestamp() * 1000,
            not_after_ms: not_after.unix_timestamp() * 1000,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::verify::verify_chain;
    use rcgen::{KeyPair, PKCS_ECDSA_P384_SHA384, PublicKeyData as _};
    use x509_parser::extensions::{GeneralName, ParsedExtension};
    use x509_parser::oid_registry::{OID_X509_EXT_BASIC_CONSTRAINTS, OID_X509_EXT_KEY_USAGE};

    /// Now in whole seconds, fixed once for all tests (the node CA is valid from an hour ago).
    static NOW: std::sync::LazyLock<i64> =
        std::sync::LazyLock::new(|| OffsetDateTime::now_utc().unix_timestamp() * 1000);

    fn t0() -> i64 {
        *NOW
    }

    fn request<'a>(spki: &'a [u8], statements: &'a [String]) -> IssueRequest<'a> {
        IssueRequest {
            node_id: "node_a1",
            role: "node",
            spki_der: spki,
            statements,
            not_before_ms: t0() - 60_000,
            not_after_ms: t0() + 86_400_000,
        }
    }

    fn node_key() -> Vec<u8> {
        KeyPair::generate().unwrap().subject_public_key_info()
    }

    #[test]
    fn issues_a_node_certificate() {
        let pki = Pki::generate("example.org").unwrap();
        let spki = node_key();
        let statements = vec!["urn:bc:tpm-ak:sha256:ab".to_owned(), "urn:bc:x".to_owned()];
        let issued = pki.issue_node_cert(&request(&spki, &statements)).unwrap();
        assert_eq!(issued.not_before_ms, t0() - 60_000);
        assert_eq!(issued.not_after_ms, t0() + 86_400_000);

        let (rest, cert) = x509_parser::parse_x509_certificate(&issued.der).unwrap();
        assert!(rest.is_empty());
        assert_eq!(cert.subject().to_string(), "CN=node_a1, OU=node");
        assert_eq!(cert.raw_serial().len(), 16);
        assert_eq!(hex::encode(cert.raw_serial()), issued.serial_hex);
        assert!(cert.raw_serial()[0] & 0x80 == 0);
        assert_eq!(cert.public_key().raw, spki.as_slice());

        let uris: Vec<&str> = cert
            .subject_alternative_name()
            .unwrap()
            .unwrap()
            .value
            .general_names
            .iter()
            .map(|n| match n {
                GeneralName::URI(u) => *u,
                other => panic!("unexpected SAN {other:?}"),
            })
            .collect();
        assert_eq!(
            uris,
            [
                "spiffe://example.org/node/node_a1",
                "urn:bc:tpm-ak:sha256:ab",
                "urn:bc:x"
            ]
        );
        assert_eq!(
            crate::pki::spiffe_node_id(&issued.der, "example.org").unwrap(),
            "node_a1"
        );
        assert_eq!(
            crate::pki::identity::node_cert_role(&issued.der).unwrap(),
            "node"
        );

        let ku = cert
            .get_extension_unique(&OID_X509_EXT_KEY_USAGE)
            .unwrap()
            .unwrap();
        assert!(ku.critical);
        let ParsedExtension::KeyUsage(ku) = ku.parsed_extension() else {
            panic!()
        };
        assert!(ku.digital_signature() && !ku.key_cert_sign());
        let bc = cert
            .get_extension_unique(&OID_X509_EXT_BASIC_CONSTRAINTS)
            .unwrap()
            .unwrap();
        let ParsedExtension::BasicConstraints(bc) = bc.parsed_extension() else {
            panic!()
        };
        assert!(!bc.ca);
        let eku = cert.extended_key_usage().unwrap().unwrap().value;
        assert!(eku.client_auth && eku.server_auth && !eku.any);
        let (_, ca) = x509_parser::parse_x509_certificate(pki.node_ca_der()).unwrap();
        let ski = ca
            .iter_extensions()
            .find_map(|e| match e.parsed_extension() {
                ParsedExtension::SubjectKeyIdentifier(k) => Some(k.0.to_vec()),
                _ => None,
            });
        let aki = cert
            .iter_extensions()
            .find_map(|e| match e.parsed_extension() {
                ParsedExtension::AuthorityKeyIdentifier(k) => {
                    k.key_identifier.as_ref().map(|k| k.0.to_vec())
                }
                _ => None,
            });
        assert!(ski.is_some());
        assert_eq!(aki, ski);

        // It chains to the node CA, by our own path building.
        let chain = verify_chain(
            std::slice::from_ref(&issued.der),
            &[pki.node_ca_der().to_vec()],
            t0(),
        )
        .unwrap();
        assert_eq!(chain.leaf_spki, spki);
        assert_eq!(chain.leaf_not_after_ms, t0() + 86_400_000);
        // And not to another PKI's CA.
        let other = Pki::generate("example.org").unwrap();
        assert!(verify_chain(&[issued.der], &[other.node_ca_der().to_vec()], t0()).is_err());
    }

    #[test]
    fn serials_are_unique() {
        let pki = Pki::generate("td").unwrap();
        let spki = node_key();
        let a = pki.issue_node_cert(&request(&spki, &[])).unwrap();
        let b = pki.issue_node_cert(&request(&spki, &[])).unwrap();
        assert_ne!(a.serial_hex, b.serial_hex);
        assert_eq!(a.serial_hex.len(), 32);
    }

    #[test]
    fn serials_are_positive_full_length_and_sort_by_time_of_issue() {
        let (_, first) = new_serial().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let later: Vec<String> = (0..64).map(|_| new_serial().unwrap().1).collect();
        for serial in &later {
            assert_eq!(serial.len(), 2 * SERIAL_LEN);
            // 01 then time: positive, and DER keeps all 16 bytes.
            assert!(matches!(&serial[..1], "4" | "5" | "6" | "7"), "{serial}");
            assert!(serial > &first, "{serial} after {first}");
        }
        // Unpredictable below the time: 64 serials within a few ms all differ.
        let mut distinct = later.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), later.len());
    }

    #[test]
    fn refuses_a_fifth_uri_and_foreign_statements() {
        let pki = Pki::generate("td").unwrap();
        let spki = node_key();
        let three: Vec<String> = (0..3).map(|i| format!("urn:bc:s{i}")).collect();
        pki.issue_node_cert(&request(&spki, &three)).unwrap();
        let four: Vec<String> = (0..4).map(|i| format!("urn:bc:s{i}")).collect();
        assert_eq!(
            pki.issue_node_cert(&request(&spki, &four)).unwrap_err(),
            PkiError::Issue(IssueError::TooManyUris(5))
        );
        for bad in [
            "spiffe://td/node/other",
            "urn:other:x",
            "urn:bc:",
            "urn:bc:a b",
            "https://x",
        ] {
            let statements = vec![bad.to_owned()];
            assert_eq!(
                pki.issue_node_cert(&request(&spki, &statements))
                    .unwrap_err(),
                PkiError::Issue(IssueError::Statement(bad.to_owned())),
                "{bad}"
            );
        }
    }

    #[test]
    fn refuses_bad_identity_key_and_validity() {
        let pki = Pki::generate("td").unwrap();
        let spki = node_key();
        let bad_id = IssueRequest {
            node_id: "a/b",
            ..request(&spki, &[])
        };
        assert!(matches!(
            pki.issue_node_cert(&bad_id),
            Err(PkiError::Issue(IssueError::Identity(_)))
        ));
        let bad_role = IssueRequest {
            role: "admin",
            ..request(&spki, &[])
        };
        assert!(matches!(
            pki.issue_node_cert(&bad_role),
            Err(PkiError::Issue(IssueError::Identity(_)))
        ));
        let p384 = KeyPair::generate_for(&PKCS_ECDSA_P384_SHA384)
            .unwrap()
            .subject_public_key_info();
        assert!(matches!(
            pki.issue_node_cert(&request(&p384, &[])),
            Err(PkiError::Issue(IssueError::Key(_)))
        ));
        assert!(matches!(
            pki.issue_node_cert(&request(b"junk", &[])),
            Err(PkiError::Issue(IssueError::Key(_)))
        ));
        let empty = IssueRequest {
            not_after_ms: t0() - 60_000,
            ..request(&spki, &[])
        };
        assert!(matches!(
            pki.issue_node_cert(&empty),
            Err(PkiError::Issue(IssueError::Validity { .. }))
        ));
        let huge = IssueRequest {
            not_after_ms: i64::MAX,
            ..request(&spki, &[])
        };
        assert!(matches!(
            pki.issue_node_cert(&huge),
            Err(PkiError::Issue(IssueError::Validity { .. }))
        ));
    }

    #[test]
    fn every_role_is_issuable() {
        let pki = Pki::generate("td").unwrap();
        let spki = node_key();
        for role in crate::pki::identity::ROLES {
            let issued = pki
                .issue_node_cert(&IssueRequest {
                    role,
                    ..request(&spki, &[])
                })
                .unwrap();
            assert_eq!(
                crate::pki::identity::node_cert_role(&issued.der).unwrap(),
                role
            );
        }
    }

    #[test]
    fn display() {
        assert_eq!(
            IssueError::TooManyUris(5).to_string(),
            "at most 4 URIs (the SPIFFE ID and 3 statements), asked for 5"
        );
        assert_eq!(
            IssueError::Statement("x".into()).to_string(),
            "invalid statement \"x\": statements are printable urn:bc: URIs"
        );
        assert_eq!(
            IssueError::Key("found a RSA key".into()).to_string(),
            "the node key must be EC P-256: found a RSA key"
        );
        assert_eq!(
            IssueError::Validity {
                not_before_ms: 2,
                not_after_ms: 1
            }
            .to_string(),
            "invalid validity period 2..1"
        );
        assert_eq!(
            IssueError::Identity(IdentityError::Role("x".into())).to_string(),
            "unknown role \"x\""
        );
    }
}
