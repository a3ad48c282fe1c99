//! Who a node certificate names: the SPIFFE trust domain and ID, the node id and the role,
//! and reading them back from a certificate.
//!
//! A node certificate's URI SANs are exactly one SPIFFE ID,
//! `spiffe://<trust domain>/node/<node id>`, followed only by `urn:bc:` statements. The node id
//! is read from that one SPIFFE ID and never from a statement, and a certificate with no or
//! several SPIFFE IDs names nobody.
//!
//! The role (`node`, `site`, `ramdisk`, `node-tenant`) is the subject's one organizationalUnit,
//! not a `urn:bc:role:` statement: statements are the claims a renewal must prove again (and
//! share a budget of four URIs with the SPIFFE ID), whereas the role is the CA's own
//! decision, which renewal takes from the `node_certs` row. Keeping it out of the SAN list
//! leaves that list exactly "identity, then proofs", and leaves every statement slot to
//! attestors.

use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;

/// The roles a node certificate can carry.
pub const ROLES: [&str; 4] = ["node", "site", "ramdisk", "node-tenant"];
/// Longest node id: it is also the subject CN, whose X.509 upper bound is 64.
pub const MAX_NODE_ID_LEN: usize = 64;
/// Longest trust domain (the SPIFFE specification's bound).
const MAX_TRUST_DOMAIN_LEN: usize = 255;
/// Where node ids live under the trust domain.
const NODE_PATH: &str = "/node/";

/// Why an identity was refused, or could not be read from a certificate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdentityError {
    /// The trust domain is empty, too long, or has characters other than lowercase letters,
    /// digits, dots, hyphens and underscores.
    #[error("invalid SPIFFE trust domain {0:?}")]
    TrustDomain(String),
    /// The node id is empty, `.` or `..`, longer than [`MAX_NODE_ID_LEN`], or has characters
    /// other than letters, digits, dots, hyphens and underscores.
    #[error("invalid node id {0:?}")]
    NodeId(String),
    /// The role is not one of [`ROLES`].
    #[error("unknown role {0:?}")]
    Role(String),
    /// The certificate does not parse, or its extensions are malformed.
    #[error("malformed certificate: {0}")]
    Certificate(String),
    /// The certificate has no SPIFFE ID among its URI SANs.
    #[error("the certificate has no SPIFFE ID")]
    NoSpiffeId,
    /// The certificate has more than one SPIFFE ID, so it names nobody.
    #[error("the certificate has {0} SPIFFE IDs")]
    SeveralSpiffeIds(usize),
    /// The SPIFFE ID is not a node of the expected trust domain.
    #[error("{0:?} is not a node SPIFFE ID of this trust domain")]
    NotANode(String),
    /// The subject does not carry exactly one organizationalUnit naming a role.
    #[error("the certificate does not carry exactly one role")]
    NoRole,
}

/// Checks a SPIFFE trust domain: lowercase letters, digits, `.`, `-` and `_`, at most 255.
pub fn validate_trust_domain(trust_domain: &str) -> Result<(), IdentityError> {
    let ok = !trust_domain.is_empty()
        && trust_domain.len() <= MAX_TRUST_DOMAIN_LEN
        && trust_domain.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'-' | b'_')
        });
    if ok {
        Ok(())
    } else {
        Err(IdentityError::TrustDomain(trust_domain.to_owned()))
    }
}

/// Checks a node id: one SPIFFE path segment (letters, digits, `.`, `-`, `_`; not `.` or
/// `..`) of at most [`MAX_NODE_ID_LEN`] bytes.
pub fn validate_node_id(node_id: &str) -> Result<(), IdentityError> {
    let ok = !node_id.is_empty()
        && node_id.len() <= MAX_NODE_ID_LEN
        && node_id != "."
        && node_id != ".."
        && node_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
    if ok {
        Ok(())
    } else {
        Err(IdentityError::NodeId(node_id.to_owned()))
    }
}

/// Checks that `role` is one of [`ROLES`].
pub fn validate_role(role: &str) -> Result<(), IdentityError> {
    if ROLES.contains(&role) {
        Ok(())
    } else {
        Err(IdentityError::Role(role.to_owned()))
    }
}

/// The SPIFFE ID of a node (both parts already validated).
pub(super) fn spiffe_id(trust_domain: &str, node_id: &str) -> String {
    format!("spiffe://{trust_domain}{NODE_PATH}{node_id}")
}

fn parse(cert_der: &[u8]) -> Result<X509Certificate<'_>, IdentityError> {
    let (rest, cert) = x509_parser::parse_x509_certificate(cert_der)
        .map_err(|e| IdentityError::Certificate(e.to_string()))?;
    if !rest.is_empty() {
        return Err(IdentityError::Certificate(
            "trailing bytes after the certificate".into(),
        ));
    }
    Ok(cert)
}

/// Whether a URI is a SPIFFE ID (the scheme is case-insensitive, so `SPIFFE://` counts too).
fn is_spiffe(uri: &str) -> bool {
    uri.get(..7)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("spiffe:"))
}

/// The node id of a node certificate of `trust_domain`, read from its one SPIFFE ID URI SAN
/// (`urn:bc:` statements and every other SAN are never consulted).
pub fn spiffe_node_id(cert_der: &[u8], trust_domain: &str) -> Result<String, IdentityError> {
    let cert = parse(cert_der)?;
    let san = cert
        .subject_alternative_name()
        .map_err(|e| IdentityError::Certificate(e.to_string()))?;
    let ids: Vec<&str> = san
        .iter()
        .flat_map(|san| san.value.general_names.iter())
        .filter_map(|name| match name {
            GeneralName::URI(uri) if is_spiffe(uri) => Some(*uri),
            _ => None,
        })
        .collect();
    let id = match ids.as_slice() {
        [] => return Err(IdentityError::NoSpiffeId),
        [one] => *one,
        several => return Err(IdentityError::SeveralSpiffeIds(several.len())),
    };
    let prefix = format!("spiffe://{trust_domain}{NODE_PATH}");
    let node_id = id
        .strip_prefix(&prefix)
        .ok_or_else(|| IdentityError::NotANode(id.to_owned()))?;
    validate_node_id(node_id).map_err(|_| IdentityError::NotANode(id.to_owned()))?;
    Ok(node_id.to_owned())
}

/// The role a node certificate was issued for: its subject's one organizationalUnit, which
/// must be one of [`ROLES`].
pub fn node_cert_role(cert_der: &[u8]) -> Result<String, IdentityError> {
    let cert = parse(cert_der)?;
    let mut units = cert.subject().iter_organizational_unit();
    let (Some(unit), None) = (units.next(), units.next()) else {
        return Err(IdentityError::NoRole);
    };
    let role = unit.as_str().map_err(|_| IdentityError::NoRole)?;
    validate_role(role).map_err(|_| IdentityError::NoRole)?;
    Ok(role.to_owned())
}

/// The SubjectPublicKeyInfo (DER) of a certificate: the key its holder proves possession of.
pub fn cert_spki(cert_der: &[u8]) -> Result<Vec<u8>, IdentityError> {
    Ok(parse(cert_der)?.tbs_certificate.subject_pki.raw.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, DnType, KeyPair, SanType};

    fn cert_with(uris: &[&str], units: &[&str]) -> Vec<u8> {
        let mut params = CertificateParams::default();
        params.subject_alt_names = uris
            .iter()
            .map(|u| SanType::URI((*u).try_into().unwrap()))
            .collect();
        // rcgen keeps one value per attribute type; a custom type of the same OID adds a
        // second organizationalUnit.
        let types = [
            DnType::OrganizationalUnitName,
            DnType::CustomDnType(vec![2, 5, 4, 11]),
        ];
        for (unit, ty) in units.iter().zip(types) {
            params.distinguished_name.push(ty, *unit);
        }
        let key = KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn trust_domains() {
        for ok in ["example.org", "a", "prod-1.corp_x", "0.0"] {
            validate_trust_domain(ok).unwrap();
        }
        for bad in [
            "",
            "Example.org",
            "a/b",
            "a:1",
            "ex ample",
            &"a".repeat(256),
        ] {
            assert_eq!(
                validate_trust_domain(bad),
                Err(IdentityError::TrustDomain(bad.to_owned()))
            );
        }
    }

    #[test]
    fn node_ids_and_roles() {
        for ok in ["node_x", "N-1.a", &"a".repeat(64)] {
            validate_node_id(ok).unwrap();
        }
        for bad in ["", ".", "..", "a/b", "a b", "ä", &"a".repeat(65)] {
            assert!(validate_node_id(bad).is_err(), "{bad}");
        }
        for role in ROLES {
            validate_role(role).unwrap();
        }
        assert_eq!(
            validate_role("admin"),
            Err(IdentityError::Role("admin".into()))
        );
    }

    #[test]
    fn reads_the_one_spiffe_id() {
        let der = cert_with(
            &["spiffe://td/node/node_a", "urn:bc:tpm-ak:sha256:00"],
            &["node"],
        );
        assert_eq!(spiffe_node_id(&der, "td").unwrap(), "node_a");
        assert_eq!(node_cert_role(&der).unwrap(), "node");
        assert!(matches!(
            spiffe_node_id(&der, "other"),
            Err(IdentityError::NotANode(_))
        ));
    }

    #[test]
    fn never_reads_a_statement() {
        // A statement that looks like a node id is not one.
        let der = cert_with(&["urn:bc:spiffe://td/node/node_a"], &[]);
        assert_eq!(spiffe_node_id(&der, "td"), Err(IdentityError::NoSpiffeId));
        let der = cert_with(&[], &[]);
        assert_eq!(spiffe_node_id(&der, "td"), Err(IdentityError::NoSpiffeId));
    }

    #[test]
    fn refuses_several_or_odd_spiffe_ids() {
        let der = cert_with(&["spiffe://td/node/a", "SPIFFE://td/node/b"], &[]);
        assert_eq!(
            spiffe_node_id(&der, "td"),
            Err(IdentityError::SeveralSpiffeIds(2))
        );
        for odd in [
            "spiffe://td/node/a/b",
            "spiffe://td/node/",
            "spiffe://td/site/a",
            "spiffe://td/node/..",
        ] {
            let der = cert_with(&[odd], &[]);
            assert_eq!(
                spiffe_node_id(&der, "td"),
                Err(IdentityError::NotANode(odd.into())),
                "{odd}"
            );
        }
        assert!(matches!(
            spiffe_node_id(b"junk", "td"),
            Err(IdentityError::Certificate(_))
        ));
    }

    #[test]
    fn roles_from_the_subject() {
        assert_eq!(
            node_cert_role(&cert_with(&[], &[])),
            Err(IdentityError::NoRole)
        );
        assert_eq!(
            node_cert_role(&cert_with(&[], &["node", "site"])),
            Err(IdentityError::NoRole)
        );
        assert_eq!(
            node_cert_role(&cert_with(&[], &["admin"])),
            Err(IdentityError::NoRole)
        );
        assert_eq!(
            node_cert_role(&cert_with(&[], &["node-tenant"])).unwrap(),
            "node-tenant"
        );
    }

    #[test]
    fn display() {
        assert_eq!(
            IdentityError::TrustDomain("A".into()).to_string(),
            "invalid SPIFFE trust domain \"A\""
        );
        assert_eq!(
            IdentityError::NodeId("..".into()).to_string(),
            "invalid node id \"..\""
        );
        assert_eq!(
            IdentityError::Role("x".into()).to_string(),
            "unknown role \"x\""
        );
        assert_eq!(
            IdentityError::Certificate("x".into()).to_string(),
            "malformed certificate: x"
        );
        assert_eq!(
            IdentityError::NoSpiffeId.to_string(),
            "the certificate has no SPIFFE ID"
        );
        assert_eq!(
            IdentityError::SeveralSpiffeIds(2).to_string(),
            "the certificate has 2 SPIFFE IDs"
        );
        assert_eq!(
            IdentityError::NotANode("spiffe://x/y".into()).to_string(),
            "\"spiffe://x/y\" is not a node SPIFFE ID of this trust domain"
        );
        assert_eq!(
            IdentityError::NoRole.to_string(),
            "the certificate does not carry exactly one role"
        );
    }
}
