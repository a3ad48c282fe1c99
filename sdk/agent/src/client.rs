//! The join loop, and the HTTPS client it runs over.

use std::sync::Arc;
use std::time::Duration;

use gatehouse_proto::{
    ACCESS_DENIED, ApiError, Claims, JoinRequest, JoinResponse, JoinTrust, TokenString, seal_token,
};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

use crate::key::{KeyError, NodeKey, build_csr};
use crate::producer::{EvidenceProducer, ProducerError};
use crate::verify::{ResponseError, Verified, sha256, verify_response};

/// Most challenge rounds one join answers (the seed's limit).
pub const MAX_CHALLENGES: u32 = 3;
/// Longest wait a pending approval may ask for between two rounds.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);
/// Largest response body read: a chain and a challenge are a few kilobytes.
const MAX_BODY: usize = 1 << 20;
/// Time allowed for one round, connection included.
const ROUND_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a join did not produce a certificate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JoinError {
    /// The host refused (HTTP 403, ACCESS_DENIED); it never says why.
    #[error("join refused: ACCESS_DENIED")]
    Denied,
    /// The host answered with another error status.
    #[error("the host answered HTTP {status}: {code} {message}")]
    Host {
        /// The HTTP status.
        status: u16,
        /// The error code from the body, empty if the body was not an API error.
        code: String,
        /// Its message.
        message: String,
    },
    /// The host could not be reached, TLS failed other than on its certificate, or the
    /// exchange broke off.
    #[error("cannot reach the host: {0}")]
    Transport(#[source] reqwest::Error),
    /// The host was reached, but its TLS certificate does not chain to the TLS CA the trust
    /// file pins (`--ca`): another host, or a trust file of another installation or from
    /// before the host's certificate changed. Retrying does not help; the trust file must be
    /// the host's (`gatehouse pki trust`, or compare with `GET /v1/trust`).
    #[error(
        "TLS trust failure: the host's certificate is not trusted by the pinned TLS CA (--ca): {0}"
    )]
    Untrusted(#[source] reqwest::Error),
    /// The response body was larger than any honest answer.
    #[error("the host's response is larger than {MAX_BODY} bytes")]
    TooLarge,
    /// The response did not verify: it must not be used.
    #[error("the host's response was rejected: {0}")]
    Response(#[from] ResponseError),
    /// The key or CSR could not be made.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// The evidence producer failed.
    #[error(transparent)]
    Producer(#[from] ProducerError),
    /// The token could not be sealed to the pinned JoinService key.
    #[error("cannot seal the token: {0}")]
    Seal(#[from] gatehouse_proto::SealError),
    /// The host challenged more often than the protocol allows.
    #[error("the host sent more than {MAX_CHALLENGES} challenges")]
    TooManyChallenges,
    /// The host challenged on behalf of another attestor than the one asked for.
    #[error("the host sent a challenge of attestor {challenged}, not {asked}")]
    OtherAttestorChallenge {
        /// The attestor the join asked for.
        asked: String,
        /// The attestor the challenge names.
        challenged: String,
    },
    /// The server URL or the trust file's TLS CA is unusable.
    #[error("cannot set up the HTTPS client: {0}")]
    Setup(String),
}

/// A successful, verified join.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Joined {
    /// The node id the host assigned.
    pub node_id: String,
    /// The trust domain the certificate is in.
    pub trust_domain: String,
    /// The SPIFFE ID in the certificate: `spiffe://<trust_domain>/node/<node_id>`.
    pub spiffe_id: String,
    /// The certificate chain, leaf first (DER).
    pub chain: Vec<Vec<u8>>,
    /// The leaf's notAfter, ms since the Unix epoch.
    pub not_after_ms: i64,
    /// The attestor that admitted the machine.
    pub attestor: String,
    /// How many rounds the join took.
    pub rounds: u8,
    /// The trust to pin from now on, when the host's keys were rotated (see
    /// [`crate::verify_response`]); `None` when the pinned trust stays as it is.
    pub trust: Option<JoinTrust>,
}

/// What a join sends besides evidence, and the knobs of its loop.
#[derive(Debug, Clone)]
pub struct JoinOptions {
    /// The machine's hardware claims, sent in every round.
    pub claims: Claims,
    /// Cap on a pending approval's wait; [`MAX_RETRY_AFTER`] unless a test shortens it.
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

/// An HTTPS client of one host that trusts only the pinned TLS CA: no system roots, no
/// redirects, no plain HTTP.
#[derive(Debug, Clone)]
pub struct JoinClient {
    http: reqwest::Client,
    join_url: reqwest::Url,
}

impl JoinClient {
    /// A client of `server` (e.g. `https://gatehouse.example:8443`) trusting only
    /// `trust.tls_ca_pem`.
    pub fn new(server: &str, trust: &JoinTrust) -> Result<Self, JoinError> {
        let join_url = endpoint(server, "/v1/join")?;
        let tls = tls_builder(trust)?.with_no_client_auth();
        Ok(Self {
            http: http_client(tls)?,
            join_url,
        })
    }

    /// Sends one round and returns the (not yet verified) response.
    pub async fn send(&self, request: &JoinRequest) -> Result<JoinResponse, JoinError> {
        post(&self.http, &self.join_url, request).await
    }
}

/// `path` on the https `server`.
pub(crate) fn endpoint(server: &str, path: &str) -> Result<reqwest::Url, JoinError> {
    let base = reqwest::Url::parse(server)
        .map_err(|e| JoinError::Setup(format!("server URL {server}: {e}")))?;
    if base.scheme() != "https" {
        return Err(JoinError::Setup(format!(
            "server URL {server} is not https"
        )));
    }
    base.join(path)
        .map_err(|e| JoinError::Setup(format!("server URL {server}: {e}")))
}

/// A rustls client config on aws-lc-rs trusting only the pinned TLS CA, up to the choice of
/// client authentication.
pub(crate) fn tls_builder(
    trust: &JoinTrust,
) -> Result<rustls::ConfigBuilder<rustls::ClientConfig, rustls::client::WantsClientCert>, JoinError>
{
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(trust.tls_ca_pem.as_bytes()) {
        let cert = cert.map_err(|e| JoinError::Setup(format!("tlsCaPem: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| JoinError::Setup(format!("tlsCaPem: {e}")))?;
    }
    if roots.is_empty() {
        return Err(JoinError::Setup("tlsCaPem holds no certificate".into()));
    }
    Ok(rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| JoinError::Setup(e.to_string()))?
    .with_root_certificates(roots))
}

/// An HTTPS-only client over `tls`: no redirects, every exchange bounded in time.
pub(crate) fn http_client(tls: rustls::ClientConfig) -> Result<reqwest::Client, JoinError> {
    reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .https_only(true)
        .redirect(reqwest::redirect::Policy::none())
        .timeout(ROUND_TIMEOUT)
        .build()
        .map_err(|e| JoinError::Setup(e.to_string()))
}

/// POSTs `body` as JSON and reads a (not yet verified) JoinResponse, or the API error.
pub(crate) async fn post(
    http: &reqwest::Client,
    url: &reqwest::Url,
    body: &impl serde::Serialize,
) -> Result<JoinResponse, JoinError> {
    let resp = http
        .post(url.clone())
        .json(body)
        .send()
        .await
        .map_err(transport_error)?;
    let status = resp.status();
    let body = read_capped(resp).await?;
    if status == reqwest::StatusCode::OK {
        return serde_json::from_slice(&body)
            .map_err(|e| ResponseError::Malformed(e.to_string()).into());
    }
    let err: ApiError = serde_json::from_slice(&body).unwrap_or(ApiError {
        code: String::new(),
        message: String::new(),
        retryable: None,
    });
    if status == reqwest::StatusCode::FORBIDDEN && err.code == ACCESS_DENIED {
        return Err(JoinError::Denied);
    }
    Err(JoinError::Host {
        status: status.as_u16(),
        code: err.code,
        message: err.message,
    })
}

/// A failed exchange as a [`JoinError`]: [`JoinError::Untrusted`] when the server's
/// certificate did not verify against the pinned CA, [`JoinError::Transport`] otherwise.
pub(crate) fn transport_error(e: reqwest::Error) -> JoinError {
    if is_tls_trust_error(&e) {
        JoinError::Untrusted(e)
    } else {
        JoinError::Transport(e)
    }
}

/// Whether `e` failed because the server's certificate did not verify against the pinned CA
/// (rustls' `InvalidCertificate`, or no certificate presented), anywhere in its causes.
pub fn is_tls_trust_error(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(tls) = err.downcast_ref::<rustls::Error>() {
            return matches!(
                tls,
                rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented
            );
        }
        // io::Error's source() skips the error it wraps; look inside it.
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && let Some(inner) = io.get_ref()
            && is_tls_trust_error(inner)
        {
            return true;
        }
        cur = err.source();
    }
    false
}

/// An error and its causes as one line, each cause once: a cause whose text the line already
/// holds (an error that prints its source in its own message, as most here do) is not
/// repeated. What both binaries print when a command fails.
pub fn error_line(error: &(dyn std::error::Error + 'static)) -> String {
    let mut line = String::new();
    let mut cur = Some(error);
    while let Some(err) = cur {
        let text = err.to_string();
        if !text.is_empty() && !line.contains(&text) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&text);
        }
        cur = err.source();
    }
    line
}

async fn read_capped(mut resp: reqwest::Response) -> Result<Vec<u8>, JoinError> {
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(transport_error)? {
        if body.len() + chunk.len() > MAX_BODY {
            return Err(JoinError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// One round trip of the join loop: HTTPS in production, a script in the tests.
trait Transport {
    fn round(
        &mut self,
        request: &JoinRequest,
    ) -> impl Future<Output = Result<JoinResponse, JoinError>> + Send;
}

impl Transport for &JoinClient {
    fn round(
        &mut self,
        request: &JoinRequest,
    ) -> impl Future<Output = Result<JoinResponse, JoinError>> + Send {
        self.send(request)
    }
}

/// Joins with `key`: one CSR for the whole join, the token (if any) sealed to the pinned
/// JoinService key for that CSR; pending approvals are waited out and challenges answered
/// (at most [`MAX_CHALLENGES`]) with the same CSR; only a verified admission is returned.
pub async fn join(
    client: &JoinClient,
    trust: &JoinTrust,
    producer: &mut dyn EvidenceProducer,
    token: Option<&TokenString>,
    key: &NodeKey,
    options: &JoinOptions,
) -> Result<Joined, JoinError> {
    run(client, trust, producer, token, key, options).await
}

/// Retries of one round the host answered "try again" (503 `UNAVAILABLE` or 429
/// `RATE_LIMITED`, both `retryable`), and the first wait, doubled each time up to
/// [`RETRY_MAX_WAIT`]: about 30 s in all before the error is returned.
const RETRIES: u32 = 6;
const RETRY_FIRST_WAIT: Duration = Duration::from_millis(500);
const RETRY_MAX_WAIT: Duration = Duration::from_secs(8);

/// One round, sent again with backoff while the host says it may succeed later (its database
/// is briefly unreachable, or this address sent too many rounds). A refusal is never retried.
async fn round_retrying(
    transport: &mut impl Transport,
    request: &JoinRequest,
) -> Result<JoinResponse, JoinError> {
    let mut wait = RETRY_FIRST_WAIT;
    let mut attempt = 0;
    loop {
        match transport.round(request).await {
            Err(JoinError::Host { status, .. })
                if matches!(status, 429 | 503) && attempt < RETRIES =>
            {
                attempt += 1;
                // Spread the retries of many machines hit by the same outage (a clock's
                // nanoseconds are jitter enough for that).
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.subsec_nanos());
                let jitter = Duration::from_millis(u64::from(nanos % 250));
                tokio::time::sleep(wait + jitter).await;
                wait = (wait * 2).min(RETRY_MAX_WAIT);
            }
            other => return other,
        }
    }
}

/// A join's first round as [`join`] sends it, and the SHA-256 of its CSR, which the host's
/// signed answer must name ([`verify_response`]).
#[derive(Debug, Clone)]
pub struct FirstRound {
    /// The request; a later round is the same request with its round and evidence changed.
    pub request: JoinRequest,
    /// The SHA-256 of `request.csr`.
    pub csr_sha256: [u8; 32],
}

/// The first round of a join with `key`: one CSR for the whole join, the token (if any) sealed
/// to the pinned JoinService key for that CSR, and `producer`'s evidence. [`join`] sends it; a
/// caller that drives the rounds itself (a load generator making its requests ahead) sends it
/// with [`JoinClient::send`] and checks the answer with [`verify_response`].
pub fn first_round(
    trust: &JoinTrust,
    producer: &mut dyn EvidenceProducer,
    token: Option<&TokenString>,
    key: &NodeKey,
    options: &JoinOptions,
) -> Result<FirstRound, JoinError> {
    let csr = build_csr(key)?;
    let csr_sha256 = sha256(&csr);
    // Sealed once: the seal binds the CSR, which does not change across rounds.
    let sealed_token = token
        .map(|t| seal_token(&trust.join_encryption_key, t, &csr_sha256))
        .transpose()?;
    let request = JoinRequest {
        attestor: producer.attestor().to_owned(),
        role: producer.role(),
        sealed_token,
        attestation: producer.evidence(&csr)?,
        csr,
        claims: options.claims.clone(),
        round: 1,
    };
    Ok(FirstRound {
        request,
        csr_sha256,
    })
}

async fn run(
    mut transport: impl Transport,
    trust: &JoinTrust,
    producer: &mut dyn EvidenceProducer,
    token: Option<&TokenString>,
    key: &NodeKey,
    options: &JoinOptions,
) -> Result<Joined, JoinError> {
    let FirstRound {
        mut request,
        csr_sha256,
    } = first_round(trust, producer, token, key, options)?;
    let spki = key.spki_der();
    let mut challenges = 0;
    loop {
        let response = round_retrying(&mut transport, &request).await?;
        match verify_response(trust, &response, &csr_sha256, &spki)? {
            Verified::Joined {
                node_id,
                chain,
                not_after_ms,
                trust: updated,
            } => {
                return Ok(Joined {
                    spiffe_id: format!("spiffe://{}/node/{node_id}", trust.trust_domain),
                    node_id,
                    trust_domain: trust.trust_domain.clone(),
                    chain,
                    not_after_ms,
                    attestor: request.attestor,
                    rounds: request.round,
                    trust: updated,
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
                if c.attestor != request.attestor {
                    return Err(JoinError::OtherAttestorChallenge {
                        asked: request.attestor,
                        challenged: c.attestor,
                    });
                }
                request.attestation = producer.answer(&c, &request.csr)?;
            }
        }
        request.round = request.round.saturating_add(1);
    }
}

#[cfg(test)]
mod tests;
