//! The site agent's side of discovery: it holds its site's boot lease and, for every boot its
//! boot server serves, signs one discovery assertion under the lease's epoch, fetches the
//! machine's single-use discovery token, and renders both onto the ramdisk's kernel command
//! line (`bc.token=… bc.assertion=…`).
//!
//! Everything goes over TLS authenticated by the site node's current certificate, as renewal
//! does ([`crate::RenewClient`]).

use std::sync::Arc;
use std::time::Duration;

use gatehouse_proto::discovery::{
    DISCOVERY_SCHEMA, DiscoveryAssertion, MAX_ASSERTION_AGE_MS, SignedDiscoveryAssertion,
    render_cmdline,
};
use gatehouse_proto::site::{DiscoveryToken, DiscoveryTokenRequest, LeaseRequest, LeaseState};
use gatehouse_proto::{ACCESS_DENIED, ApiError, JoinTrust};
use serde::{Deserialize, Serialize};

use crate::client::{JoinError, endpoint, http_client};
use crate::identity::LoadedIdentity;
use crate::key::{KeyError, NodeKey};
use crate::verify::sha256;

/// Why a site request failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SiteError {
    /// The host refused (403 ACCESS_DENIED): not a live site node, or another site's lease.
    #[error("site request refused: ACCESS_DENIED")]
    Denied,
    /// The lease is held by another node, at another epoch, or lapsed (409).
    #[error("lease conflict: {0}")]
    Conflict(String),
    /// The host answered another error.
    #[error("the host answered HTTP {status}: {code} {message}")]
    Host {
        /// The HTTP status.
        status: u16,
        /// The error code.
        code: String,
        /// Its message.
        message: String,
    },
    /// The host could not be reached or the exchange failed.
    #[error("cannot reach the host: {0}")]
    Transport(#[source] reqwest::Error),
    /// The host's TLS certificate does not chain to the pinned TLS CA (see
    /// [`JoinError::Untrusted`]).
    #[error(
        "TLS trust failure: the host's certificate is not trusted by the pinned TLS CA (--ca): {0}"
    )]
    Untrusted(#[source] reqwest::Error),
    /// The answer is not what the API returns.
    #[error("unexpected answer: {0}")]
    Malformed(String),
    /// The client could not be set up.
    #[error(transparent)]
    Setup(#[from] JoinError),
    /// The node key could not sign.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// The boot entry cannot be rendered (bad MAC, or its notAfter passed).
    #[error("boot entry: {0}")]
    Entry(String),
}

/// One boot the boot server serves (a small JSON file, or the command line).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BootEntry {
    /// The machine's MAC, lowercase and colon-separated.
    pub mac: String,
    /// The commissioning workflow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow_id: Option<String>,
    /// The machine's product UUID, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub product_uuid: Option<String>,
    /// The machine's IP, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
    /// The boot entry's end, ms since the Unix epoch: no assertion outlives it.
    pub not_after: i64,
}

/// A client of one host for one site node's identity.
#[derive(Debug, Clone)]
pub struct SiteClient {
    http: reqwest::Client,
    base: reqwest::Url,
    node_id: String,
    site_id: String,
    key: Arc<NodeKey>,
}

/// The lease name of a site's boot server.
pub fn boot_lease_name(site_id: &str) -> String {
    format!("site:{site_id}:boot")
}

impl SiteClient {
    /// A client of `server` for the site node `identity` of site `site_id`.
    pub fn new(
        server: &str,
        trust: &JoinTrust,
        identity: LoadedIdentity,
        site_id: &str,
    ) -> Result<Self, SiteError> {
        let base = endpoint(server, "/")?;
        let tls = crate::renew::mtls_config(trust, &identity.key, &identity.chain)?;
        Ok(Self {
            http: http_client(tls)?,
            base,
            node_id: identity.identity.node_id,
            site_id: site_id.to_owned(),
            key: Arc::new(identity.key),
        })
    }

    /// The site's boot lease name.
    pub fn lease_name(&self) -> String {
        boot_lease_name(&self.site_id)
    }

    /// Takes the boot lease for `ttl` (or extends it if this node holds it).
    pub async fn acquire(&self, ttl: Duration) -> Result<LeaseState, SiteError> {
        let body = LeaseRequest {
            ttl_seconds: Some(ttl_seconds(ttl)),
            epoch: None,
        };
        self.lease_call("acquire", &body).await
    }

    /// Extends the boot lease this node holds at `epoch`.
    pub async fn renew(&self, epoch: u64, ttl: Duration) -> Result<LeaseState, SiteError> {
        let body = LeaseRequest {
            ttl_seconds: Some(ttl_seconds(ttl)),
            epoch: Some(epoch),
        };
        self.lease_call("renew", &body).await
    }

    /// Ends the boot lease this node holds at `epoch` now.
    pub async fn release(&self, epoch: u64) -> Result<LeaseState, SiteError> {
        let body = LeaseRequest {
            ttl_seconds: None,
            epoch: Some(epoch),
        };
        self.lease_call("release", &body).await
    }

    async fn lease_call(&self, op: &str, body: &LeaseRequest) -> Result<LeaseState, SiteError> {
        let path = format!("/v1/leases/{}/{op}", self.lease_name());
        self.post(&path, body).await
    }

    /// Fetches the single-use discovery token of the machine `entry` describes: the token of
    /// the discovery workflow an operator started for its MAC at this site, which the host
    /// hands out only while this node holds the boot `lease` (at its epoch).
    pub async fn discovery_token(
        &self,
        lease: &LeaseState,
        entry: &BootEntry,
    ) -> Result<DiscoveryToken, SiteError> {
        let body = DiscoveryTokenRequest {
            mac: entry.mac.clone(),
            epoch: lease.epoch,
            workflow_id: entry.workflow_id.clone(),
        };
        self.post("/v1/site/discovery-tokens", &body).await
    }

    /// Signs the assertion for one boot of `entry` under `lease`, at `now_ms` (this machine's
    /// clock): valid until the earlier of 15 minutes from now and the entry's notAfter.
    pub fn sign_assertion(
        &self,
        lease: &LeaseState,
        entry: &BootEntry,
        now_ms: i64,
    ) -> Result<SignedDiscoveryAssertion, SiteError> {
        if !gatehouse_proto::discovery::is_mac(&entry.mac) {
            return Err(SiteError::Entry(format!(
                "{} is not a lowercase MAC",
                entry.mac
            )));
        }
        let not_after = entry
            .not_after
            .min(now_ms.saturating_add(MAX_ASSERTION_AGE_MS));
        if not_after <= now_ms {
            return Err(SiteError::Entry(format!(
                "the boot entry of {} ended already",
                entry.mac
            )));
        }
        let assertion = DiscoveryAssertion {
            schema: DISCOVERY_SCHEMA.into(),
            site_id: self.site_id.clone(),
            node_id: self.node_id.clone(),
            kid: hex::encode(sha256(&self.key.spki_der())),
            lease_epoch: lease.epoch,
            mac: entry.mac.clone(),
            ip: entry.ip.clone(),
            product_uuid: entry.product_uuid.clone(),
            workflow_id: entry.workflow_id.clone(),
            issued_at: now_ms,
            not_after,
        };
        Ok(SignedDiscoveryAssertion::sign(&assertion, |m| {
            self.key.sign(m)
        })?)
    }

    /// Renders one iPXE boot: signs its assertion, fetches its token, and returns the kernel
    /// command line parameters `bc.token=… bc.assertion=…`.
    pub async fn render_boot(
        &self,
        lease: &LeaseState,
        entry: &BootEntry,
        now_ms: i64,
    ) -> Result<String, SiteError> {
        // Sign first: a refused entry mints no token.
        let assertion = self.sign_assertion(lease, entry, now_ms)?;
        let token = self.discovery_token(lease, entry).await?;
        Ok(render_cmdline(&token.token, &assertion))
    }

    async fn post<B: Serialize, T: for<'de> Deserialize<'de>>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, SiteError> {
        let url = self
            .base
            .join(path)
            .map_err(|e| SiteError::Malformed(e.to_string()))?;
        let resp = self
            .http
            .post(url)
            .json(body)
            .send()
            .await
            .map_err(site_transport)?;
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(site_transport)?;
        if status == reqwest::StatusCode::OK {
            return serde_json::from_slice(&bytes).map_err(|e| SiteError::Malformed(e.to_string()));
        }
        let err: ApiError = serde_json::from_slice(&bytes).unwrap_or(ApiError {
            code: String::new(),
            message: String::new(),
            retryable: None,
        });
        Err(match status {
            reqwest::StatusCode::FORBIDDEN if err.code == ACCESS_DENIED => SiteError::Denied,
            reqwest::StatusCode::CONFLICT => SiteError::Conflict(err.message),
            _ => SiteError::Host {
                status: status.as_u16(),
                code: err.code,
                message: err.message,
            },
        })
    }
}

/// A failed exchange: [`SiteError::Untrusted`] for a certificate the pinned CA does not
/// vouch for, [`SiteError::Transport`] otherwise.
fn site_transport(e: reqwest::Error) -> SiteError {
    if crate::client::is_tls_trust_error(&e) {
        SiteError::Untrusted(e)
    } else {
        SiteError::Transport(e)
    }
}

fn ttl_seconds(ttl: Duration) -> u32 {
    u32::try_from(ttl.as_secs()).unwrap_or(u32::MAX)
}

/// The file name a rendered boot of `mac` is written to: `<mac with dashes>.cmdline`.
pub fn cmdline_file_name(mac: &str) -> String {
    format!("{}.cmdline", mac.replace(':', "-"))
}

/// The `gatehouse-agent site` loop: holds the boot lease and renders boots.
#[derive(Debug, Clone)]
pub struct SiteLoop {
    /// The host's URL.
    pub server: String,
    /// The pinned trust. Only its TLS CA is used (the site API's answers are not signed), and
    /// a key rotation never changes that: the keys a rotation changes are taken, and stored
    /// beside the identity, by the `gatehouse-agent run` that keeps this identity renewed.
    pub trust: JoinTrust,
    /// The site node's identity directory (kept renewed by `gatehouse-agent run`).
    pub dir: std::path::PathBuf,
    /// The site.
    pub site_id: String,
    /// The boot entries: a JSON array of [`BootEntry`], read again at every tick.
    pub boots: std::path::PathBuf,
    /// Where each rendered boot is written ([`cmdline_file_name`]).
    pub out: std::path::PathBuf,
    /// The lease's time to live; it is renewed every third of it.
    pub lease_ttl: Duration,
}

impl SiteLoop {
    /// Runs until `stop` completes, then releases the lease. Each tick (a third of the
    /// lease's TTL) takes or renews the lease and, while it is held, renders every boot entry
    /// that has no output file yet (the boot server removes a file to have it rendered again,
    /// for example after serving it). A lost lease is taken again when it is free, under a new
    /// epoch. Fails only when the host refuses this node (not a live site node of the site).
    pub async fn run(&self, stop: impl Future<Output = ()>) -> Result<(), SiteError> {
        tokio::pin!(stop);
        let mut held: Option<LeaseState> = None;
        let tick = (self.lease_ttl / 3).max(Duration::from_secs(1));
        loop {
            match self.tick(held.as_ref()).await {
                Ok(lease) => held = lease,
                Err(SiteError::Denied) => return Err(SiteError::Denied),
                Err(e) => {
                    tracing::warn!(error = %e, "site tick failed");
                }
            }
            tokio::select! {
                () = &mut stop => break,
                () = tokio::time::sleep(tick) => {}
            }
        }
        if let Some(lease) = held {
            let client = self.client()?;
            match client.release(lease.epoch).await {
                Ok(_) => {
                    tracing::info!(lease = %lease.name, epoch = lease.epoch, "released the boot lease")
                }
                Err(e) => tracing::warn!(error = %e, "could not release the boot lease"),
            }
        }
        Ok(())
    }

    fn client(&self) -> Result<SiteClient, SiteError> {
        let identity = crate::identity::load_identity(&self.dir)
            .map_err(|e| SiteError::Entry(format!("identity: {e}")))?;
        SiteClient::new(&self.server, &self.trust, identity, &self.site_id)
    }

    /// One tick: the lease, then the boots. Returns the lease held afterwards.
    async fn tick(&self, held: Option<&LeaseState>) -> Result<Option<LeaseState>, SiteError> {
        let client = self.client()?;
        let lease = match held {
            None => client.acquire(self.lease_ttl).await,
            Some(l) => client.renew(l.epoch, self.lease_ttl).await,
        };
        let lease = match lease {
            Ok(l) => {
                if held.map(|h| h.epoch) != Some(l.epoch) {
                    tracing::info!(lease = %l.name, epoch = l.epoch, "holding the boot lease");
                }
                l
            }
            Err(SiteError::Conflict(why)) => {
                if held.is_some() {
                    tracing::warn!(%why, "lost the boot lease");
                }
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        let text = std::fs::read_to_string(&self.boots)
            .map_err(|e| SiteError::Entry(format!("{}: {e}", self.boots.display())))?;
        let entries: Vec<BootEntry> = serde_json::from_str(&text)
            .map_err(|e| SiteError::Entry(format!("{}: {e}", self.boots.display())))?;
        for entry in entries {
            let path = self.out.join(cmdline_file_name(&entry.mac));
            if path.exists() {
                continue;
            }
            let now_ms = now_ms();
            if entry.not_after <= now_ms {
                continue;
            }
            match client.render_boot(&lease, &entry, now_ms).await {
                Ok(cmdline) => {
                    write_replacing(&path, &cmdline)
                        .map_err(|e| SiteError::Entry(format!("{}: {e}", path.display())))?;
                    tracing::info!(mac = %entry.mac, file = %path.display(), "rendered a boot");
                }
                Err(SiteError::Entry(why)) => {
                    tracing::warn!(mac = %entry.mac, %why, "boot entry skipped")
                }
                Err(e) => return Err(e),
            }
        }
        Ok(Some(lease))
    }
}

/// This machine's clock, ms since the Unix epoch.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Writes `text` to `path` through a temporary file and one rename (mode 0600: it holds a
/// token), so the boot server never reads half a command line.
fn write_replacing(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_entries_parse() {
        let entries: Vec<BootEntry> = serde_json::from_str(
            r#"[{"mac":"52:54:00:ab:cd:ef","workflowId":"wf_1","notAfter":5},
                {"mac":"52:54:00:ab:cd:01","productUuid":"4c4c4544-0042-3510-8052-b4c04f4e4d32","ip":"10.0.0.9","notAfter":6}]"#,
        )
        .unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].workflow_id.as_deref(), Some("wf_1"));
        assert!(serde_json::from_str::<BootEntry>(r#"{"mac":"x","notAfter":1,"y":2}"#).is_err());
        assert_eq!(
            cmdline_file_name("52:54:00:ab:cd:ef"),
            "52-54-00-ab-cd-ef.cmdline"
        );
        assert_eq!(boot_lease_name("fra1"), "site:fra1:boot");
    }
}
