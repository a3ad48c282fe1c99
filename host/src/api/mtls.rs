//! Optional client certificates: how a node authenticates `POST /v1/renew`.
//!
//! The verifier asks every client for a certificate, requires none, and checks only that the
//! client holds the key of the certificate it presents (the handshake's CertificateVerify
//! signature). It deliberately accepts certificates that no longer validate (expired, revoked,
//! of an older identity generation), since whether a certificate may renew is not a TLS
//! question: the renew handler looks the presented leaf up byte for byte in `node_certs`,
//! which only certificates this host issued can match, and refuses each of those cases with
//! its own reason in `security.renew.refused`. Refusing them in the handshake instead would
//! leave the operator no event and the agent no ACCESS_DENIED to act on.

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};

/// Requests a client certificate, hinting the node CA, and checks possession of its key.
#[derive(Debug)]
pub(super) struct NodeCertProof {
    hints: Vec<DistinguishedName>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl NodeCertProof {
    /// A verifier hinting `node_ca_subject` (the DER of the node CA's subject name).
    pub(super) fn new(
        node_ca_subject: Vec<u8>,
        provider: &rustls::crypto::CryptoProvider,
    ) -> Arc<Self> {
        Arc::new(Self {
            hints: vec![DistinguishedName::from(node_ca_subject)],
            algorithms: provider.signature_verification_algorithms,
        })
    }
}

impl ClientCertVerifier for NodeCertProof {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        // Agents joining for the first time have no certificate; only renew needs one.
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &self.hints
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        // See the module docs: the renew handler decides by the database, not by the chain.
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
