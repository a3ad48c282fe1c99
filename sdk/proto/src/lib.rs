//! Gatehouse's wire format, shared by the host and the agent.
//!
//! Everything here is plain data plus total parsers: the host reads these types from
//! untrusted agents, and the agent reads [`JoinResponse`] from a server it verifies only
//! through the pinned join signing key.

pub mod b64;
pub mod cloud_iid;
pub mod discovery;
mod join;
pub mod kinds;
mod renew;
#[cfg(feature = "seal")]
mod seal;
pub mod site;
mod token;
pub mod tpm;
mod trust;
pub mod userdata;
pub mod x509pop;

pub use join::{
    Challenge, Claims, Deferral, JoinRequest, JoinResponse, JoinResponseBody, Pending,
    RESPONSE_SIGNING_CONTEXT, Role, response_signing_input,
};
pub use renew::RenewRequest;
#[cfg(feature = "seal")]
pub use seal::{SealError, TokenOpener, TokenOpeningKey, generate_token_keypair, seal_token};
pub use token::{TOKEN_SEAL_INFO, TokenError, TokenString};
pub use trust::{JoinTrust, TrustUpdate};

/// How far before its issuance a node certificate's notBefore lies (ms), for relying parties
/// whose clocks lag the database's. A certificate's lifetime counts from its issuance,
/// notBefore plus this: an agent scheduling its renewal by a fraction of the lifetime must not
/// count the back-dating, or a short lifetime makes it renew at once, again and again.
pub const ISSUANCE_BACKDATE_MS: i64 = 60_000;

/// The body every refused join answers with, whatever the reason: the reason goes only to the
/// host's events, audit rows and log.
pub const ACCESS_DENIED: &str = "ACCESS_DENIED";

/// The code of a host failure (the database unreachable, say): the same request may succeed
/// later, and the body says `retryable: true`.
pub const UNAVAILABLE: &str = "UNAVAILABLE";

/// The error body of every API failure: a stable code and a human message that never carries
/// the reason for a refusal.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ApiError {
    /// `ACCESS_DENIED`, `INVALID_INPUT`, `NOT_FOUND`, `UNAUTHENTICATED`, `UNAVAILABLE`,
    /// `RATE_LIMITED`, `PAYLOAD_TOO_LARGE`, ...
    pub code: String,
    /// A short message for people.
    pub message: String,
    /// `true` when the same request may succeed later (a host failure, a rate limit): a
    /// client retries with backoff. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retryable: Option<bool>,
}
