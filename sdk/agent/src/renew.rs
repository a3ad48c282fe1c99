//! Renewing a node certificate: `POST /v1/renew` over TLS authenticated by the current
//! certificate, with a CSR of the next node key.

use std::sync::Arc;

use gatehouse_proto::tpm::TpmKeyAttestation;
use gatehouse_proto::{JoinTrust, RenewRequest};
use rustls::pki_types::CertificateDer;

use crate::client::{JoinError, Joined, endpoint, http_client, post, tls_builder};
use crate::key::{KeyError, NodeKey, build_csr};
use crate::verify::{ResponseError, Verified, sha256, verify_response};

/// Why a renewal did not produce a certificate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RenewError {
    /// The host refused (HTTP 403, ACCESS_DENIED: "Renew refused"); it never says why. An
    /// expired, revoked or superseded certificate is refused so.
    #[error("renewal refused: ACCESS_DENIED")]
    Denied,
    /// The exchange failed: the host unreachable, TLS, another HTTP error, or a response that
    /// did not verify as a join's would.
    #[error(transparent)]
    Exchange(JoinError),
    /// The host answered with a deferral, which a renewal never gets.
    #[error("the host deferred a renewal")]
    Deferred,
    /// The new certificate names another node than the one renewing.
    #[error("the renewed certificate names node {got}, not {expected}")]
    OtherNode {
        /// The node renewing.
        expected: String,
        /// The node the response names.
        got: String,
    },
    /// The next key's CSR could not be made.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// The TPM could not prove the next key (the certificate names an AK, so the renewal is
    /// not sent without the proof).
    #[error("the TPM key attestation failed: {0}")]
    Attestation(String),
}

/// Makes a renewal's TPM key attestation for a CSR (DER).
pub type Attester<'a> = &'a (dyn Fn(&[u8]) -> Result<TpmKeyAttestation, RenewError> + Sync);

impl From<JoinError> for RenewError {
    fn from(e: JoinError) -> Self {
        match e {
            JoinError::Denied => Self::Denied,
            JoinError::Key(k) => Self::Key(k),
            other => Self::Exchange(other),
        }
    }
}

impl From<ResponseError> for RenewError {
    fn from(e: ResponseError) -> Self {
        Self::Exchange(JoinError::Response(e))
    }
}

/// An HTTPS client of one host that trusts only the pinned TLS CA and authenticates with a
/// node certificate: it presents the chain (leaf, node CA) and signs the handshake with the
/// key the leaf certifies. One client serves one certificate; a renewed node makes a new one.
#[derive(Debug, Clone)]
pub struct RenewClient {
    http: reqwest::Client,
    renew_url: reqwest::Url,
}

impl RenewClient {
    /// A client of `server` presenting `chain` (leaf first, DER) with `key`.
    pub fn new(
        server: &str,
        trust: &JoinTrust,
        key: &NodeKey,
        chain: &[Vec<u8>],
    ) -> Result<Self, JoinError> {
        let renew_url = endpoint(server, "/v1/renew")?;
        let tls = mtls_config(trust, key, chain)?;
        Ok(Self {
            http: http_client(tls)?,
            renew_url,
        })
    }

    /// Renews node `node_id`'s certificate for `next`: sends a CSR of `next` and accepts only
    /// a response that verifies as a join's would (signed by the pinned key, bound to this
    /// CSR, a leaf for `next` from the pinned node CA) and names `node_id`. The returned
    /// [`Joined::attestor`] is empty: no attestor decides a renewal.
    pub async fn renew(
        &self,
        trust: &JoinTrust,
        node_id: &str,
        next: &NodeKey,
    ) -> Result<Joined, RenewError> {
        self.renew_attested(trust, node_id, next, None).await
    }

    /// [`RenewClient::renew`], with the TPM key attestation `attester` makes for the CSR when
    /// the current certificate names an AK.
    pub async fn renew_attested(
        &self,
        trust: &JoinTrust,
        node_id: &str,
        next: &NodeKey,
        attester: Option<Attester<'_>>,
    ) -> Result<Joined, RenewError> {
        let csr = build_csr(next)?;
        let key_attestation = attester.map(|a| a(&csr)).transpose()?;
        let response = post(
            &self.http,
            &self.renew_url,
            &RenewRequest {
                csr: csr.clone(),
                key_attestation,
            },
        )
        .await?;
        admit(trust, &response, &csr, next, node_id)
    }
}

/// The TLS client configuration of a node talking to the host over mTLS: the pinned CA, and
/// `chain` (leaf first, DER) presented with `key`, checked to be the leaf's key.
pub(crate) fn mtls_config(
    trust: &JoinTrust,
    key: &NodeKey,
    chain: &[Vec<u8>],
) -> Result<rustls::ClientConfig, JoinError> {
    let chain: Vec<CertificateDer<'static>> = chain
        .iter()
        .map(|c| CertificateDer::from(c.clone()))
        .collect();
    // rustls checks this for key bytes; a signing key it cannot check.
    let spki = key.spki_der();
    let matches = chain.first().is_some_and(|c| {
        use x509_parser::prelude::FromDer as _;
        x509_parser::certificate::X509Certificate::from_der(c.as_ref())
            .is_ok_and(|(_, leaf)| leaf.public_key().raw == spki.as_slice())
    });
    if !matches {
        return Err(JoinError::Setup(
            "client certificate: the key is not the leaf's".into(),
        ));
    }
    // Through a signing key rather than key bytes: a node key in the TPM signs the
    // handshake there.
    let signing = key
        .tls_signing_key()
        .map_err(|e| JoinError::Setup(format!("client key: {e}")))?;
    let certified = rustls::sign::CertifiedKey::new(chain, signing);
    Ok(tls_builder(trust)?
        .with_client_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(certified))))
}

/// The renewal answer's verification: a join's, no deferral, the same node.
pub(crate) fn admit(
    trust: &JoinTrust,
    response: &gatehouse_proto::JoinResponse,
    csr: &[u8],
    next: &NodeKey,
    node_id: &str,
) -> Result<Joined, RenewError> {
    match verify_response(trust, response, &sha256(csr), &next.spki_der())? {
        Verified::Joined {
            node_id: got,
            chain,
            not_after_ms,
            trust: updated,
        } => {
            if got != node_id {
                return Err(RenewError::OtherNode {
                    expected: node_id.to_owned(),
                    got,
                });
            }
            Ok(Joined {
                spiffe_id: format!("spiffe://{}/node/{got}", trust.trust_domain),
                node_id: got,
                trust_domain: trust.trust_domain.clone(),
                chain,
                not_after_ms,
                attestor: String::new(),
                rounds: 1,
                trust: updated,
            })
        }
        Verified::Pending(_) | Verified::Challenge(_) => Err(RenewError::Deferred),
    }
}

#[cfg(test)]
mod tests;
