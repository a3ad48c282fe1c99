//! What a site node sends and gets over mTLS: its boot lease and the discovery tokens of the
//! machines its boot server serves.
//!
//! `POST /v1/leases/{name}/acquire|renew|release` and `POST /v1/site/discovery-tokens`, each
//! authenticated by the site node's current certificate as the TLS client certificate.

use serde::{Deserialize, Serialize};

/// The body of `acquire`, `renew` and `release`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LeaseRequest {
    /// How long the lease lasts from now (acquire, renew), seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds: Option<u32>,
    /// The epoch the caller holds (renew, release).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
}

/// A lease as the caller now holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseState {
    /// The lease name, `site:<siteId>:boot`.
    pub name: String,
    /// The node holding it (the caller).
    pub holder: String,
    /// Its epoch: raised every time it changes hands.
    pub epoch: u64,
    /// When it lapses unless renewed, database time in ms.
    pub expires_at: i64,
}

/// The body of `POST /v1/site/discovery-tokens`: fetch the single-use discovery token of the
/// discovery workflow an operator started for one machine at the site.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DiscoveryTokenRequest {
    /// The machine's MAC (the workflow's, which the token is bound to as `expect.mac`).
    pub mac: String,
    /// The epoch at which the asking site node holds its site's boot lease.
    pub epoch: u64,
    /// The discovery workflow, when the boot server knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow_id: Option<String>,
}

/// A minted discovery token, shown once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiscoveryToken {
    /// The token id.
    pub id: String,
    /// `gh1.<id>.<secret>`.
    pub token: String,
    /// When it expires, database time in ms.
    pub expires_at: i64,
}
