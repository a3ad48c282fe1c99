//! Throwaway TLS material for `gatehouse serve --dev`: a self-signed P-256 CA and a server
//! certificate it issues for the given names, so a development host serves real TLS that
//! agents verify against the CA in the join trust file.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PKCS_ECDSA_P256_SHA256, SanType,
};
use rustls::pki_types::ServerName;

use super::{PkiError, issue};

/// How long development TLS certificates are valid.
const VALIDITY_DAYS: i64 = 365;
/// Most names one server certificate is made for.
const MAX_NAMES: usize = 32;

/// A development TLS CA and server certificate, PEM.
#[derive(Clone)]
pub struct DevTls {
    /// The CA certificate agents trust.
    pub ca_pem: String,
    /// The server certificate (leaf only).
    pub cert_pem: String,
    /// The server key, PKCS#8.
    pub key_pem: String,
}

impl std::fmt::Debug for DevTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevTls")
            .field("ca_pem", &self.ca_pem)
            .field("cert_pem", &self.cert_pem)
            .finish_non_exhaustive()
    }
}

/// The subject alternative name for `name`: an IP address if it parses as one, else a DNS
/// name, which must be valid.
fn san(name: &str) -> Result<SanType, PkiError> {
    let bad = || PkiError::Certificate(format!("{name:?} is not a DNS name or IP address"));
    match ServerName::try_from(name).map_err(|_| bad())? {
        ServerName::IpAddress(ip) => Ok(SanType::IpAddress(std::net::IpAddr::from(ip))),
        ServerName::DnsName(dns) => Ok(SanType::DnsName(dns.as_ref().try_into()?)),
        _ => Err(bad()),
    }
}

/// Makes a fresh CA and a server certificate for `names` (DNS names and IP addresses, for
/// example `localhost` and `127.0.0.1`), valid from an hour ago for a year.
pub fn dev_tls(names: &[String]) -> Result<DevTls, PkiError> {
    if names.is_empty() || names.len() > MAX_NAMES {
        return Err(PkiError::Certificate(format!(
            "give 1 to {MAX_NAMES} names for the TLS certificate"
        )));
    }
    let sans = names
        .iter()
        .map(|n| san(n))
        .collect::<Result<Vec<_>, _>>()?;
    let now = time::OffsetDateTime::now_utc();
    let not_before = now - time::Duration::hours(1);
    let not_after = now + time::Duration::days(VALIDITY_DAYS);

    let ca_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
    let mut ca = CertificateParams::default();
    ca.distinguished_name = rcgen::DistinguishedName::new();
    ca.distinguished_name
        .push(DnType::CommonName, "Gatehouse development TLS CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca.serial_number = Some(issue::new_serial()?.0);
    ca.not_before = not_before;
    ca.not_after = not_after;
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);

    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
    let mut leaf = CertificateParams::default();
    leaf.distinguished_name = rcgen::DistinguishedName::new();
    leaf.distinguished_name
        .push(DnType::CommonName, names[0].as_str());
    leaf.subject_alt_names = sans;
    leaf.is_ca = IsCa::ExplicitNoCa;
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf.use_authority_key_identifier_extension = true;
    leaf.serial_number = Some(issue::new_serial()?.0);
    leaf.not_before = not_before;
    leaf.not_after = not_after;
    let cert = leaf.signed_by(&key, &issuer)?;
    Ok(DevTls {
        ca_pem: ca_cert.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig, ServerConnection};
    use std::sync::Arc;

    /// A full in-memory TLS handshake of a rustls client trusting `ca_pem` with `name`.
    fn handshake(tls: &DevTls, name: &str) -> Result<(), rustls::Error> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut roots = RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(tls.ca_pem.as_bytes()).unwrap())
            .unwrap();
        let client = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let server = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from_pem_slice(tls.cert_pem.as_bytes()).unwrap()],
                PrivateKeyDer::from_pem_slice(tls.key_pem.as_bytes()).unwrap(),
            )?;
        let mut client = ClientConnection::new(
            Arc::new(client),
            ServerName::try_from(name).unwrap().to_owned(),
        )?;
        let mut server = ServerConnection::new(Arc::new(server))?;
        for _ in 0..10 {
            let mut buf = Vec::new();
            client.write_tls(&mut buf).unwrap();
            server.read_tls(&mut buf.as_slice()).unwrap();
            server.process_new_packets()?;
            let mut buf = Vec::new();
            server.write_tls(&mut buf).unwrap();
            client.read_tls(&mut buf.as_slice()).unwrap();
            client.process_new_packets()?;
            if !client.is_handshaking() && !server.is_handshaking() {
                return Ok(());
            }
        }
        panic!("the handshake did not finish");
    }

    #[test]
    fn serves_tls_for_the_names() {
        let names = vec![
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
            "::1".to_owned(),
        ];
        let tls = dev_tls(&names).unwrap();
        handshake(&tls, "localhost").unwrap();
        handshake(&tls, "127.0.0.1").unwrap();
        handshake(&tls, "::1").unwrap();
        assert!(handshake(&tls, "example.com").is_err());
        // Another dev CA does not vouch for it.
        let other = dev_tls(&names).unwrap();
        let mixed = DevTls {
            ca_pem: other.ca_pem,
            ..tls
        };
        assert!(handshake(&mixed, "localhost").is_err());
    }

    #[test]
    fn refuses_bad_names() {
        assert!(dev_tls(&[]).is_err());
        assert!(dev_tls(&["not a name".to_owned()]).is_err());
        assert!(dev_tls(&["a..b".to_owned()]).is_err());
        assert!(dev_tls(&vec!["localhost".to_owned(); MAX_NAMES + 1]).is_err());
    }

    #[test]
    fn debug_hides_the_key() {
        let tls = dev_tls(&["localhost".to_owned()]).unwrap();
        assert!(!format!("{tls:?}").contains("PRIVATE KEY"));
    }
}
