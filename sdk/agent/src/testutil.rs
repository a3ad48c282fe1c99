//! A local stand-in for the host's PKI: a join signing key, a node CA and a trust file, to
//! build the responses the verification and join-loop tests feed the agent.

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _};
use gatehouse_proto::{JoinResponse, JoinResponseBody, JoinTrust, response_signing_input};
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, PublicKeyData, SanType};

pub(crate) const TRUST_DOMAIN: &str = "td.test";

pub(crate) use crate::verify::sha256;

/// A P-256 signing key as the host's join signing key is.
pub(crate) fn signer() -> EcdsaKeyPair {
    let pkcs8 =
        EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &SystemRandom::new())
            .unwrap();
    EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref()).unwrap()
}

/// The DER SubjectPublicKeyInfo of a P-256 key: the fixed header, then the uncompressed point.
pub(crate) fn spki_of(pair: &EcdsaKeyPair) -> Vec<u8> {
    let mut spki = vec![
        0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08,
        0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
    ];
    spki.extend_from_slice(pair.public_key().as_ref());
    spki
}

pub(crate) struct Pki {
    pub(crate) trust: JoinTrust,
    pub(crate) signer: EcdsaKeyPair,
    pub(crate) ca_key: KeyPair,
    ca_params: CertificateParams,
    /// Opens tokens sealed to `trust.join_encryption_key`.
    pub(crate) opener: gatehouse_proto::TokenOpener,
}

impl Pki {
    pub(crate) fn new() -> Self {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "test node CA");
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let signer = signer();
        let (opening_key, public) = gatehouse_proto::generate_token_keypair().unwrap();
        let opener = gatehouse_proto::TokenOpener::new(opening_key).unwrap();
        let trust = JoinTrust {
            trust_domain: TRUST_DOMAIN.into(),
            node_ca_pem: ca.pem(),
            tls_ca_pem: ca.pem(),
            join_signing_key: spki_of(&signer),
            join_encryption_key: public.to_vec(),
            other_join_signing_keys: vec![],
            sequence: 0,
        };
        Self {
            trust,
            signer,
            ca_key,
            ca_params,
            opener,
        }
    }

    /// A leaf for `subject` signed by `issuer_key` under the node CA's name, with one URI SAN
    /// and the role `node`.
    pub(crate) fn leaf(
        &self,
        issuer_key: &KeyPair,
        subject: &impl PublicKeyData,
        uri: &str,
    ) -> Vec<u8> {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.subject_alt_names = vec![SanType::URI(uri.try_into().unwrap())];
        p.distinguished_name
            .push(rcgen::DnType::OrganizationalUnitName, "node");
        let issuer = Issuer::from_params(&self.ca_params, issuer_key);
        p.signed_by(subject, &issuer).unwrap().der().to_vec()
    }

    /// A node certificate as the host issues it: `role`, valid from `not_before_s` to
    /// `not_after_s` (seconds since the epoch).
    pub(crate) fn node_cert(
        &self,
        subject: &impl PublicKeyData,
        node_id: &str,
        role: &str,
        not_before_s: i64,
        not_after_s: i64,
    ) -> Vec<u8> {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        let uri = format!("spiffe://{TRUST_DOMAIN}/node/{node_id}");
        p.subject_alt_names = vec![SanType::URI(uri.as_str().try_into().unwrap())];
        p.distinguished_name
            .push(rcgen::DnType::OrganizationalUnitName, role);
        p.not_before = time::OffsetDateTime::from_unix_timestamp(not_before_s).unwrap();
        p.not_after = time::OffsetDateTime::from_unix_timestamp(not_after_s).unwrap();
        p.serial_number = Some(rand_serial().into());
        let issuer = Issuer::from_params(&self.ca_params, &self.ca_key);
        p.signed_by(subject, &issuer).unwrap().der().to_vec()
    }

    /// The node CA certificate (DER).
    pub(crate) fn ca_der(&self) -> Vec<u8> {
        self.ca_params
            .self_signed(&self.ca_key)
            .unwrap()
            .der()
            .to_vec()
    }

    /// A good leaf for `subject` as node `node_id`.
    pub(crate) fn node_leaf(&self, subject: &impl PublicKeyData, node_id: &str) -> Vec<u8> {
        self.leaf(
            &self.ca_key,
            subject,
            &format!("spiffe://{TRUST_DOMAIN}/node/{node_id}"),
        )
    }

    /// `body`, signed by the join signing key.
    pub(crate) fn respond(&self, body: &JoinResponseBody) -> JoinResponse {
        let bytes = serde_json::to_vec(body).unwrap();
        let sig = self
            .signer
            .sign(&SystemRandom::new(), &response_signing_input(&bytes))
            .unwrap();
        JoinResponse {
            body: bytes,
            signature: sig.as_ref().to_vec(),
            key_id: hex::encode(sha256(&self.trust.join_signing_key)),
        }
    }
}

fn rand_serial() -> Vec<u8> {
    let mut serial = [0u8; 16];
    aws_lc_rs::rand::SecureRandom::fill(&SystemRandom::new(), &mut serial).unwrap();
    serial[0] &= 0x7f;
    serial.to_vec()
}

/// A body admitting node `node_id` with `chain`, for the CSR hashing to `csr_sha256`.
pub(crate) fn joined_body(
    csr_sha256: &[u8; 32],
    node_id: &str,
    chain: Vec<Vec<u8>>,
) -> JoinResponseBody {
    JoinResponseBody {
        v: 1,
        csr_sha256: hex::encode(csr_sha256),
        node_id: node_id.into(),
        chain,
        deferral: None,
        trust: None,
    }
}

/// A body deferring the CSR hashing to `csr_sha256`.
pub(crate) fn deferred_body(
    csr_sha256: &[u8; 32],
    deferral: gatehouse_proto::Deferral,
) -> JoinResponseBody {
    JoinResponseBody {
        v: 1,
        csr_sha256: hex::encode(csr_sha256),
        node_id: String::new(),
        chain: vec![],
        deferral: Some(deferral),
        trust: None,
    }
}

/// A TLS CA for test servers.
pub(crate) struct TlsCa {
    pub(crate) pem: String,
    issuer: Issuer<'static, KeyPair>,
}

pub(crate) fn tls_ca() -> TlsCa {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let key = KeyPair::generate().unwrap();
    let pem = params.self_signed(&key).unwrap().pem();
    TlsCa {
        pem,
        issuer: Issuer::new(params, key),
    }
}

/// What a test server saw.
pub(crate) struct Served {
    /// The HTTP request, head and body.
    pub(crate) request: Vec<u8>,
    /// The client's certificate chain, if it presented one.
    pub(crate) peer: Vec<Vec<u8>>,
}

/// Serves one request on 127.0.0.1 with a certificate for `localhost` from `ca` (asking for
/// a client certificate when `client_auth` is set), answering `status` and `body`; returns
/// the server URL and what it saw.
pub(crate) async fn serve_https(
    ca: &TlsCa,
    client_auth: Option<std::sync::Arc<dyn rustls::server::danger::ClientCertVerifier>>,
    status: &'static str,
    body: Vec<u8>,
) -> (String, tokio::task::JoinHandle<Served>) {
    serve_https_with(ca, client_auth, move |_| (status, body)).await
}

/// [`serve_https`] answering what `respond` makes of the request.
pub(crate) async fn serve_https_with(
    ca: &TlsCa,
    client_auth: Option<std::sync::Arc<dyn rustls::server::danger::ClientCertVerifier>>,
    respond: impl FnOnce(&Served) -> (&'static str, Vec<u8>) + Send + 'static,
) -> (String, tokio::task::JoinHandle<Served>) {
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["localhost".into()])
        .unwrap()
        .signed_by(&key, &ca.issuer)
        .unwrap();
    let builder = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap();
    let builder = match client_auth {
        Some(v) => builder.with_client_cert_verifier(v),
        None => builder.with_no_client_auth(),
    };
    let config = builder
        .with_single_cert(
            vec![CertificateDer::from(cert.der().to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!(
        "https://localhost:{}",
        listener.local_addr().unwrap().port()
    );
    let task = tokio::spawn(async move {
        let mut served = Served {
            request: Vec::new(),
            peer: Vec::new(),
        };
        let (tcp, _) = listener.accept().await.unwrap();
        let Ok(mut tls) = acceptor.accept(tcp).await else {
            return served;
        };
        served.peer = tls
            .get_ref()
            .1
            .peer_certificates()
            .map(|c| c.iter().map(|c| c.to_vec()).collect())
            .unwrap_or_default();
        let mut buf = [0u8; 4096];
        loop {
            let Ok(n) = tls.read(&mut buf).await else {
                return served;
            };
            let request = &mut served.request;
            request.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(request).to_lowercase();
            if let Some(end) = text.find("\r\n\r\n") {
                let len: usize = text
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map_or(0, |v| v.trim().parse().unwrap());
                if request.len() >= end + 4 + len || n == 0 {
                    break;
                }
            }
            if n == 0 {
                break;
            }
        }
        let (status, body) = respond(&served);
        let head = format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        // The client may hang up early (an oversized body): that is not the server's failure.
        if tls.write_all(head.as_bytes()).await.is_ok() && tls.write_all(&body).await.is_ok() {
            let _ = tls.shutdown().await;
        }
        served
    });
    (url, task)
}

/// The body of an HTTP request `served` read.
pub(crate) fn request_body(served: &Served) -> &[u8] {
    let head_end = served
        .request
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap();
    &served.request[head_end + 4..]
}

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};

/// Asks for a client certificate, requires one, and checks only that the client signed the
/// handshake with the key of the certificate it presented (as the host's renew listener does).
#[derive(Debug)]
struct ProofOfPossession(rustls::crypto::WebPkiSupportedAlgorithms);

impl ClientCertVerifier for ProofOfPossession {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }
    fn verify_client_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

pub(crate) fn proof() -> Arc<dyn ClientCertVerifier> {
    Arc::new(ProofOfPossession(
        rustls::crypto::aws_lc_rs::default_provider().signature_verification_algorithms,
    ))
}

/// The SubjectPublicKeyInfo (DER) and the EC point of a CSR's key.
pub(crate) fn csr_key(csr: &[u8]) -> (Vec<u8>, Vec<u8>) {
    use x509_parser::prelude::FromDer as _;
    let (_, req) =
        x509_parser::certification_request::X509CertificationRequest::from_der(csr).unwrap();
    let spki = &req.certification_request_info.subject_pki;
    (spki.raw.to_vec(), spki.subject_public_key.data.to_vec())
}
