//! What the agent reads back from its own node certificate: who it names, its role, its
//! validity. The host already verified the certificate when it was issued (see
//! [`crate::verify_response`]); this only reads it.

use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

use gatehouse_proto::Role;

/// Why a certificate could not be read as a node certificate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CertError {
    /// Not one DER certificate.
    #[error("malformed certificate: {0}")]
    Malformed(String),
    /// Not exactly one `spiffe://<trust domain>/node/<node id>` URI SAN.
    #[error("the certificate does not name one node")]
    NoNode,
    /// The subject does not carry exactly one organizationalUnit naming a role.
    #[error("the certificate does not carry exactly one role")]
    NoRole,
}

/// A node certificate, as read by its holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeCert {
    /// The trust domain of its SPIFFE ID.
    pub trust_domain: String,
    /// The node id of its SPIFFE ID.
    pub node_id: String,
    /// Its role: `node`, `site`, `ramdisk` or `node-tenant`.
    pub role: String,
    /// Its serial number, lowercase hex.
    pub serial: String,
    /// notBefore, ms since the Unix epoch.
    pub not_before_ms: i64,
    /// notAfter, ms since the Unix epoch.
    pub not_after_ms: i64,
    /// The SubjectPublicKeyInfo (DER) it certifies.
    pub spki_der: Vec<u8>,
}

impl NodeCert {
    /// Reads a node certificate (DER).
    pub fn parse(der: &[u8]) -> Result<Self, CertError> {
        let (rest, cert) =
            X509Certificate::from_der(der).map_err(|e| CertError::Malformed(e.to_string()))?;
        if !rest.is_empty() {
            return Err(CertError::Malformed(
                "trailing bytes after the certificate".into(),
            ));
        }
        let uris: Vec<&str> = cert
            .subject_alternative_name()
            .map_err(|e| CertError::Malformed(e.to_string()))?
            .map(|san| {
                san.value
                    .general_names
                    .iter()
                    .filter_map(|n| match n {
                        GeneralName::URI(u) => Some(*u),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        let mut spiffe = uris.iter().filter_map(|u| u.strip_prefix("spiffe://"));
        let (Some(id), None) = (spiffe.next(), spiffe.next()) else {
            return Err(CertError::NoNode);
        };
        let (trust_domain, node_id) = id.split_once("/node/").ok_or(CertError::NoNode)?;
        if trust_domain.is_empty() || node_id.is_empty() || node_id.contains('/') {
            return Err(CertError::NoNode);
        }
        let mut units = cert.subject().iter_organizational_unit();
        let (Some(unit), None) = (units.next(), units.next()) else {
            return Err(CertError::NoRole);
        };
        let role = unit.as_str().map_err(|_| CertError::NoRole)?.to_owned();
        let validity = cert.validity();
        Ok(Self {
            trust_domain: trust_domain.to_owned(),
            node_id: node_id.to_owned(),
            role,
            serial: hex::encode(cert.raw_serial()),
            not_before_ms: validity.not_before.timestamp().saturating_mul(1000),
            not_after_ms: validity.not_after.timestamp().saturating_mul(1000),
            spki_der: cert.public_key().raw.to_vec(),
        })
    }

    /// The role an x509pop re-join asks for: `node` or `site` as the certificate says, `node`
    /// for a lessee's `node-tenant` certificate (the host restores the restriction). `None`
    /// for a role that never re-joins this way (a ramdisk).
    pub fn rejoin_role(&self) -> Option<Role> {
        match self.role.as_str() {
            "node" | "node-tenant" => Some(Role::Node),
            "site" => Some(Role::Site),
            _ => None,
        }
    }
}

/// The TPM name of the attestation key a certificate's `urn:bc:tpm-ak:` statement names, if
/// it has exactly one well-formed statement (a certificate from a certified tpm join). A
/// certificate that does not parse names none.
pub fn ak_name(der: &[u8]) -> Option<Vec<u8>> {
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    let san = cert.subject_alternative_name().ok()??;
    let mut names = san.value.general_names.iter().filter_map(|n| match n {
        GeneralName::URI(u) if u.starts_with(gatehouse_proto::tpm::TPM_AK_STATEMENT_PREFIX) => {
            Some(*u)
        }
        _ => None,
    });
    match (names.next(), names.next()) {
        (Some(statement), None) => gatehouse_proto::tpm::ak_name_from_statement(statement),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, DnType, KeyPair, SanType};

    fn cert(uris: &[&str], unit: Option<&str>) -> Vec<u8> {
        let mut params = CertificateParams::default();
        params.subject_alt_names = uris
            .iter()
            .map(|u| SanType::URI((*u).try_into().unwrap()))
            .collect();
        if let Some(unit) = unit {
            params
                .distinguished_name
                .push(DnType::OrganizationalUnitName, unit);
        }
        params
            .self_signed(&KeyPair::generate().unwrap())
            .unwrap()
            .der()
            .to_vec()
    }

    #[test]
    fn reads_the_ak_statement() {
        let statement = format!("urn:bc:tpm-ak:sha256:{}", "ab".repeat(32));
        let der = cert(&["spiffe://td.test/node/node_a", &statement], Some("node"));
        let mut name = vec![0x00, 0x0b];
        name.extend([0xab; 32]);
        assert_eq!(ak_name(&der), Some(name));
        let plain = cert(&["spiffe://td.test/node/node_a"], Some("node"));
        assert_eq!(ak_name(&plain), None);
        let two = cert(
            &["spiffe://td.test/node/node_a", &statement, &statement],
            Some("node"),
        );
        assert_eq!(ak_name(&two), None, "ambiguous");
        assert_eq!(ak_name(b"junk"), None);
    }

    #[test]
    fn reads_a_node_certificate() {
        let der = cert(
            &["spiffe://td.test/node/node_a", "urn:bc:tpm-ak:000b:ab"],
            Some("node-tenant"),
        );
        let c = NodeCert::parse(&der).unwrap();
        assert_eq!(
            (c.trust_domain.as_str(), c.node_id.as_str()),
            ("td.test", "node_a")
        );
        assert_eq!(c.role, "node-tenant");
        assert_eq!(c.rejoin_role(), Some(Role::Node));
        assert!(c.not_after_ms > c.not_before_ms);
        assert!(!c.serial.is_empty());
        let site = NodeCert::parse(&cert(&["spiffe://td.test/node/s"], Some("site"))).unwrap();
        assert_eq!(site.rejoin_role(), Some(Role::Site));
        let ramdisk =
            NodeCert::parse(&cert(&["spiffe://td.test/node/r"], Some("ramdisk"))).unwrap();
        assert_eq!(ramdisk.rejoin_role(), None);
    }

    #[test]
    fn refuses_what_names_no_node() {
        for uris in [
            &[][..],
            &["spiffe://td.test/node/a", "spiffe://td.test/node/b"][..],
            &["spiffe://td.test/workload/a"][..],
            &["spiffe://td.test/node/a/b"][..],
        ] {
            assert_eq!(
                NodeCert::parse(&cert(uris, Some("node"))),
                Err(CertError::NoNode),
                "{uris:?}"
            );
        }
        assert_eq!(
            NodeCert::parse(&cert(&["spiffe://td.test/node/a"], None)),
            Err(CertError::NoRole)
        );
        assert!(matches!(
            NodeCert::parse(b"junk"),
            Err(CertError::Malformed(_))
        ));
        assert_eq!(
            CertError::NoNode.to_string(),
            "the certificate does not name one node"
        );
    }
}
