//! The join loop over HTTPS.

use std::time::Duration;

use gatehouse_proto::{
    ApiError, Claims, JoinRequest, JoinResponse, JoinTrust, TokenString, seal_token,
};

use crate::key::{KeyError, NodeKey, build_csr};
use crate::producer::{EvidenceProducer, ProducerError};
use crate::verify::{ResponseError, Verified, verify_response};

/// Most challenge rounds one join answers.
const MAX_CHALLENGES: u32 = 3;
/// Longest wait a pending approval may ask for.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

/// Why a join did not produce a certificate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JoinError {
    /// The host refused (ACCESS_DENIED); it never says why.
    #[error("join refused: ACCESS_DENIED")]
    Denied,
    /// The host answered with another error.
    #[error("the host answered {status}: {code} {message}")]
    Host {
        /// The HTTP status.
        status: u16,
        /// The error code.
        code: String,
        /// Its message.
        message: String,
    },
    /// The host could not be reached.
    #[error("cannot reach the host: {0}")]
    Transport(String),
    /// The response did not verify: it must not be used.
    #[error("the host's response was rejected: {0}")]
    Response(#[from] ResponseError),
    /// The key or CSR could not be made.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// The evidence producer failed.
    #[error(transparent)]
    Producer(#[from] ProducerError),
    /// The token could not be sealed to the pinned key.
    #[error("cannot seal the token: {0}")]
    Seal(#[from] gatehouse_proto::SealError),
    /// More challenges than an honest attestor sends.
    #[error("the host sent more than {MAX_CHALLENGES} challenges")]
    TooManyChallenges,
    /// The TLS CA in the trust file is unusable.
    #[error("the trust file's TLS CA is unusable: {0}")]
    Trust(String),
}

/// A successful join.
#[derive(Debug, Clone)]
pub struct Joined {
    /// The node id the host assigned.
    pub node_id: String,
    /// The SPIFFE ID in the certificate.
    pub spiffe_id: String,
    /// The certificate chain, leaf first (DER).
    pub chain: Vec<Vec<u8>>,
    /// The leaf's notAfter, ms since the epoch.
    pub not_after_ms: i64,
    /// The attestor that admitted it.
    pub attestor: String,
    /// How many rounds it took.
    pub rounds: u8,
}

/// Knobs of the join loop.
#[derive(Debug, Clone)]
pub struct JoinOptions {
    /// The machine's hardware claims.
    pub claims: Claims,
    /// Cap on a pending approval's wait (tests shorten it).
    pub max_retry_after: Duration,
}

impl Default for JoinOptions {
    fn default() -> Self {
        Self {
            claims: Claims::default(),
            max_retry_after: MAX_RETRY_AFTER,
        }
    }
}

/// An HTTPS client of one host, trusting only the pinned TLS CA.
#[derive(Debug, Clone)]
pub struct JoinClient {
    http: reqwest::Client,
    base: String,
}

impl JoinClient {
    /// A client of `server` (e.g. `https://gatehouse.example:8443`) trusting `trust.tls_ca_pem`.
    pub fn new(server: &str, trust: &JoinTrust) -> Result<Self, JoinError> {
        let mut builder = reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .timeout(Duration::from_secs(60));
        let mut added = 0;
        for cert in rustls_pemfile::certs(&mut trust.tls_ca_pem.as_bytes()) {
            let cert = cert.map_err(|e| JoinError::Trust(e.to_string()))?;
            builder = builder.add_root_certificate(
                reqwest::Certificate::from_der(&cert)
                    .map_err(|e| JoinError::Trust(e.to_string()))?,
            );
            added += 1;
        }
        if added == 0 {
            return Err(JoinError::Trust("no certificate in tlsCaPem".into()));
        }
        let http = builder
            .build()
            .map_err(|e| JoinError::Trust(e.to_string()))?;
        Ok(Self {
            http,
            base: server.trim_end_matches('/').to_owned(),
        })
    }

    /// Sends one round.
    pub async fn send(&self, request: &JoinRequest) -> Result<JoinResponse, JoinError> {
        let resp = self
            .http
            .post(format!("{}/v1/join", self.base))
            .json(request)
            .send()
            .await
            .map_err(|e| JoinError::Transport(e.to_string()))?;
        let status = resp.status();
        if status.is_success() {
            return resp
                .json()
                .await
                .map_err(|e| JoinError::Response(ResponseError::Malformed(e.to_string())));
        }
        let err: ApiError = resp.json().await.unwrap_or(ApiError {
            code: String::new(),
            message: String::new(),
        });
        if status == reqwest::StatusCode::FORBIDDEN && err.code == gatehouse_proto::ACCESS_DENIED {
            return Err(JoinError::Denied);
        }
        Err(JoinError::Host {
            status: status.as_u16(),
            code: err.code,
            message: err.message,
        })
    }
}

fn sha256(data: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, data).as_ref());
    out
}

/// Joins: one CSR for the whole join; pending approvals are waited out and challenges answered
/// with the same CSR; only a verified response is returned.
pub async fn join(
    client: &JoinClient,
    trust: &JoinTrust,
    producer: &mut dyn EvidenceProducer,
    token: Option<&TokenString>,
    key: &NodeKey,
    options: &JoinOptions,
) -> Result<Joined, JoinError> {
    let csr = build_csr(key)?;
    let csr_sha256 = sha256(&csr);
    let spki = key.spki_der();
    // Sealed once: the seal binds the CSR, which does not change across rounds.
    let sealed_token = match token {
        Some(t) => Some(seal_token(&trust.join_encryption_key, t, &csr_sha256)?),
        None => None,
    };
    let mut request = JoinRequest {
        attestor: producer.attestor().to_owned(),
        role: producer.role(),
        sealed_token,
        attestation: producer.evidence(&csr)?,
        csr: csr.clone(),
        claims: options.claims.clone(),
        round: 1,
    };
    let mut challenges = 0;
    loop {
        let response = client.send(&request).await?;
        match verify_response(trust, &response, &csr_sha256, &spki)? {
            Verified::Joined {
                node_id,
                chain,
                not_after_ms,
            } => {
                let spiffe_id = format!("spiffe://{}/node/{node_id}", trust.trust_domain);
                return Ok(Joined {
                    node_id,
                    spiffe_id,
                    chain,
                    not_after_ms,
                    attestor: request.attestor,
                    rounds: request.round,
                });
            }
            Verified::Pending(p) => {
                let wait = Duration::from_secs(u64::from(p.retry_after_seconds))
                    .min(options.max_retry_after);
                tokio::time::sleep(wait).await;
            }
            Verified::Challenge(c) => {
                challenges += 1;
                if challenges > MAX_CHALLENGES {
                    return Err(JoinError::TooManyChallenges);
                }
                request.attestation = producer.answer(&c, &csr)?;
            }
        }
        request.round = request.round.saturating_add(1);
    }
}
