//! The site node's API over mTLS: its boot lease (`POST /v1/leases/{name}/acquire|renew|release`)
//! and fetching the discovery tokens of the machines an operator's discovery workflow lets its
//! boot server serve (`POST /v1/site/discovery-tokens`).
//!
//! A site node authenticates as `POST /v1/renew` does: the TLS handshake proved it holds the
//! key of the leaf it presented (`api::mtls`), and the leaf must be byte for byte a live
//! `node_certs` row of the node's current identity generation, of a node that is not retired
//! (the node row is locked, so an operator's retire is never overtaken). The node must be of
//! role site with a site, and may touch only its own site's lease, `site:<siteId>:boot`, and
//! fetch only the tokens of its own site's running discovery workflows, while it holds that
//! lease (discovery's two parties: the operator starts the workflow, the boot server vouches
//! for the boot). Every refusal is `403 ACCESS_DENIED` ("Site
//! request refused") and a `security.site.refused` event with the reason; losing a lease
//! race is not a refusal but `409 CONFLICT`.

use axum::Json;
use axum::extract::{Path, State};
use axum::{Extension, extract::rejection::JsonRejection};
use gatehouse_proto::discovery::is_mac;
use gatehouse_proto::site::{DiscoveryToken, DiscoveryTokenRequest, LeaseRequest, LeaseState};
use serde_json::json;

use super::error::ApiError;
use super::{AppState, Peer};
use crate::join::renew::{self, RenewRefusal};
use crate::store::{
    LeaseOutcome, LeaseRow, NewEvent, NodeRole, NodeRow, TokenExpect, TokenRole, Tx,
    WORKFLOW_RUNNING,
};

/// Shortest and longest lease, seconds. A boot lease is renewed every few seconds; its TTL is
/// how long a boot server that stopped renewing still vouches.
const LEASE_TTL_SECONDS: std::ops::RangeInclusive<u32> = 5..=600;

/// Why a site request was refused: the reason in `security.site.refused`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SiteRefusal {
    /// The connection carried no client certificate.
    #[error("no-client-certificate")]
    NoClientCertificate,
    /// The leaf is not a certificate this host issued.
    #[error("unknown-certificate")]
    UnknownCertificate,
    /// The leaf would not renew (unknown or retired node, revoked, expired, old generation):
    /// the reason is renewal's.
    #[error("{0}")]
    Certificate(RenewRefusal),
    /// The node is not a site node, or has no site.
    #[error("not-a-site-node")]
    NotASiteNode,
    /// The lease is not this node's site's boot lease.
    #[error("foreign-lease")]
    ForeignLease,
    /// A discovery token was asked for by a node that does not hold its site's boot lease at
    /// the epoch it named (unexpired).
    #[error("not-lease-holder")]
    NotLeaseHolder,
    /// No running discovery workflow an operator started for that MAC at this node's site
    /// (or the named workflow is another site's, another MAC's, or finished).
    #[error("no-workflow")]
    NoWorkflow,
}

/// A site node, authenticated.
struct SiteNode {
    node: NodeRow,
    site_id: String,
}

/// Authenticates the connection's leaf as a live site node in `tx`.
async fn site_node(
    tx: &mut Tx,
    peer: &Peer,
) -> Result<Result<SiteNode, (SiteRefusal, Option<NodeRow>)>, ApiError> {
    let Some(leaf) = peer.client_cert.as_deref() else {
        return Ok(Err((SiteRefusal::NoClientCertificate, None)));
    };
    let Some(first) = tx.node_cert_by_der(leaf).await? else {
        return Ok(Err((SiteRefusal::UnknownCertificate, None)));
    };
    let node = tx.lock_node(&first.node_id).await?;
    // Read again under the lock (see `join::renew::lookup`).
    let Some(cert) = tx.node_cert_by_der(leaf).await? else {
        return Ok(Err((SiteRefusal::UnknownCertificate, node)));
    };
    let now = tx.now().await?;
    match renew::check(&cert, node.as_ref(), now) {
        // A TPM-held key authenticates TLS as well as any; only renewing it needs its proof.
        Ok(()) | Err(RenewRefusal::KeyAttestationRequired) => {}
        Err(r) => return Ok(Err((SiteRefusal::Certificate(r), node))),
    }
    let Some(node) = node else {
        return Ok(Err((
            SiteRefusal::Certificate(RenewRefusal::UnknownNode),
            None,
        )));
    };
    match (&node.role, node.site_id.clone()) {
        (NodeRole::Site, Some(site_id)) => Ok(Ok(SiteNode { node, site_id })),
        _ => Ok(Err((SiteRefusal::NotASiteNode, Some(node)))),
    }
}

/// Records a refusal in a transaction of its own and returns the one error it becomes.
async fn refuse(
    state: &AppState,
    what: &str,
    refusal: SiteRefusal,
    node: Option<&NodeRow>,
    peer: &Peer,
) -> ApiError {
    tracing::warn!(request = what, reason = %refusal, node = ?node.map(|n| &n.id), peer = %peer.addr, "site request refused");
    let write = async {
        let mut tx = state.db.begin().await?;
        let at = tx.now().await?;
        tx.insert_event(&NewEvent {
            at,
            kind: "security.site.refused".into(),
            tenant_id: node.map(|n| n.tenant_id.clone()),
            node_id: node.map(|n| n.id.clone()),
            attestor: None,
            reason: Some(refusal.to_string()),
            token_id: None,
            payload: json!({ "request": what, "clientAddr": peer.addr.to_string() }),
        })
        .await?;
        tx.commit().await
    };
    if let Err(e) = write.await {
        tracing::error!(error = %e, "could not record a refused site request");
    }
    ApiError::SiteDenied
}

fn body<T>(body: Result<Json<T>, JsonRejection>) -> Result<T, ApiError> {
    body.map(|Json(b)| b).map_err(ApiError::from)
}

fn state_of(row: LeaseRow) -> LeaseState {
    LeaseState {
        name: row.name,
        holder: row.holder,
        epoch: row.epoch,
        expires_at: row.expires_at,
    }
}

/// Which lease operation.
#[derive(Debug, Clone, Copy)]
enum LeaseOp {
    Acquire,
    Renew,
    Release,
}

/// `POST /v1/leases/{name}/acquire`: `{ttlSeconds}`.
pub(super) async fn acquire(
    State(state): State<AppState>,
    Extension(peer): Extension<Peer>,
    Path(name): Path<String>,
    request: Result<Json<LeaseRequest>, JsonRejection>,
) -> Result<Json<LeaseState>, ApiError> {
    lease(state, peer, name, body(request)?, LeaseOp::Acquire).await
}

/// `POST /v1/leases/{name}/renew`: `{epoch, ttlSeconds}`.
pub(super) async fn renew_lease(
    State(state): State<AppState>,
    Extension(peer): Extension<Peer>,
    Path(name): Path<String>,
    request: Result<Json<LeaseRequest>, JsonRejection>,
) -> Result<Json<LeaseState>, ApiError> {
    lease(state, peer, name, body(request)?, LeaseOp::Renew).await
}

/// `POST /v1/leases/{name}/release`: `{epoch}`.
pub(super) async fn release(
    State(state): State<AppState>,
    Extension(peer): Extension<Peer>,
    Path(name): Path<String>,
    request: Result<Json<LeaseRequest>, JsonRejection>,
) -> Result<Json<LeaseState>, ApiError> {
    lease(state, peer, name, body(request)?, LeaseOp::Release).await
}

async fn lease(
    state: AppState,
    peer: Peer,
    name: String,
    req: LeaseRequest,
    op: LeaseOp,
) -> Result<Json<LeaseState>, ApiError> {
    let ttl = match op {
        LeaseOp::Acquire | LeaseOp::Renew => {
            let ttl = req
                .ttl_seconds
                .ok_or_else(|| ApiError::InvalidInput("ttlSeconds is required".into()))?;
            if !LEASE_TTL_SECONDS.contains(&ttl) {
                return Err(ApiError::InvalidInput(format!(
                    "ttlSeconds must be {} to {}",
                    LEASE_TTL_SECONDS.start(),
                    LEASE_TTL_SECONDS.end()
                )));
            }
            i64::from(ttl) * 1000
        }
        LeaseOp::Release => 0,
    };
    let epoch = match op {
        LeaseOp::Acquire => 0,
        LeaseOp::Renew | LeaseOp::Release => req
            .epoch
            .ok_or_else(|| ApiError::InvalidInput("epoch is required".into()))?,
    };
    // Epochs are stored as signed 64-bit integers and start at 1: a larger one names no lease,
    // and must be refused here rather than fail in the database as a 5xx.
    if i64::try_from(epoch).is_err() {
        return Err(ApiError::InvalidInput(format!(
            "epoch must be at most {}",
            i64::MAX
        )));
    }
    let what = match op {
        LeaseOp::Acquire => "lease.acquire",
        LeaseOp::Renew => "lease.renew",
        LeaseOp::Release => "lease.release",
    };

    let mut tx = state.db.begin().await?;
    let site = match site_node(&mut tx, &peer).await? {
        Ok(site) => site,
        Err((refusal, node)) => {
            drop(tx);
            return Err(refuse(&state, what, refusal, node.as_ref(), &peer).await);
        }
    };
    if name != format!("site:{}:boot", site.site_id) {
        drop(tx);
        return Err(refuse(
            &state,
            what,
            SiteRefusal::ForeignLease,
            Some(&site.node),
            &peer,
        )
        .await);
    }
    let now = tx.now().await?;
    let holder = site.node.id.as_str();
    let outcome = match op {
        LeaseOp::Acquire => tx.acquire_lease(&name, holder, now + ttl, now).await?,
        LeaseOp::Renew => tx.renew_lease(&name, holder, epoch, now + ttl, now).await?,
        LeaseOp::Release => tx.release_lease(&name, holder, epoch, now).await?,
    };
    let row = match outcome {
        LeaseOutcome::Held(row) => row,
        LeaseOutcome::Lost(current) => {
            drop(tx);
            let detail = match current {
                Some(c) if c.holder != holder && c.expires_at > now => {
                    "the lease is held by another node".to_owned()
                }
                Some(c) if c.epoch != epoch => format!("the lease is at epoch {}", c.epoch),
                _ => "the lease lapsed".to_owned(),
            };
            return Err(ApiError::Conflict(detail));
        }
    };
    // An event when the lease changes hands (a new epoch) or is released, not per renewal.
    let changed = match op {
        LeaseOp::Acquire => Some("lease.acquired"),
        LeaseOp::Release => Some("lease.released"),
        LeaseOp::Renew => None,
    };
    if let Some(kind) = changed {
        tx.insert_event(&NewEvent {
            at: now,
            kind: kind.into(),
            tenant_id: Some(site.node.tenant_id.clone()),
            node_id: Some(site.node.id.clone()),
            attestor: None,
            reason: None,
            token_id: None,
            payload: json!({ "lease": row.name, "epoch": row.epoch, "expiresAt": row.expires_at }),
        })
        .await?;
    }
    tx.commit().await?;
    Ok(Json(state_of(row)))
}

/// `POST /v1/site/discovery-tokens`: `{mac, epoch, workflowId?}`. The site node fetches the
/// single-use discovery token of the running discovery workflow an operator started for that
/// MAC at the node's own site (`workflowId`, when given, must be that workflow), and only
/// while it holds the site's boot lease at `epoch`, unexpired, by database time. Each fetch
/// mints a new token (the workflow's tenant and site, `expect.mac` and the workflow's product
/// UUID, one use, the workflow's lifetime), revokes the workflow's previous token if it is
/// unspent, and records the new one on the workflow: a boot server can never hold more than
/// one live token per workflow, and none without a workflow. Shown once.
pub(super) async fn discovery_token(
    State(state): State<AppState>,
    Extension(peer): Extension<Peer>,
    request: Result<Json<DiscoveryTokenRequest>, JsonRejection>,
) -> Result<Json<DiscoveryToken>, ApiError> {
    let req = body(request)?;
    let mac = req.mac.to_ascii_lowercase();
    if !is_mac(&mac) {
        return Err(ApiError::InvalidInput("mac is not a MAC address".into()));
    }
    if let Some(w) = &req.workflow_id
        && !crate::ops::is_id(w)
    {
        return Err(ApiError::InvalidInput("workflowId is not an id".into()));
    }
    const WHAT: &str = "discovery-token";

    let mut tx = state.db.begin().await?;
    let site = match site_node(&mut tx, &peer).await? {
        Ok(site) => site,
        Err((refusal, node)) => {
            drop(tx);
            return Err(refuse(&state, WHAT, refusal, node.as_ref(), &peer).await);
        }
    };
    let now = tx.now().await?;
    let lease_name = format!("site:{}:boot", site.site_id);
    let holds_lease = tx
        .lock_lease(&lease_name)
        .await?
        .is_some_and(|l| l.holder == site.node.id && l.epoch == req.epoch && l.expires_at > now);
    if !holds_lease {
        drop(tx);
        return Err(refuse(
            &state,
            WHAT,
            SiteRefusal::NotLeaseHolder,
            Some(&site.node),
            &peer,
        )
        .await);
    }
    let workflow = match &req.workflow_id {
        Some(id) => tx
            .lock_discovery_workflow(id)
            .await?
            .filter(|w| w.state == WORKFLOW_RUNNING && w.site_id == site.site_id && w.mac == mac),
        None => {
            let running = tx.running_discovery_workflows(&site.site_id, &mac).await?;
            match running.into_iter().next() {
                Some(w) => tx.lock_discovery_workflow(&w.id).await?,
                None => None,
            }
        }
    };
    let Some(workflow) = workflow.filter(|w| w.state == WORKFLOW_RUNNING) else {
        drop(tx);
        return Err(refuse(
            &state,
            WHAT,
            SiteRefusal::NoWorkflow,
            Some(&site.node),
            &peer,
        )
        .await);
    };

    let revoked = crate::ops::tokens::revoke_unspent(&mut tx, workflow.token_id.as_deref()).await?;
    let token = crate::ops::tokens::mint(
        &mut tx,
        crate::ops::tokens::Mint {
            role: TokenRole::Discovery,
            tenant_id: workflow.tenant_id.clone(),
            pool_id: None,
            site_id: Some(workflow.site_id.clone()),
            uses: 1,
            now,
            ttl_ms: i64::from(workflow.token_ttl_seconds) * 1000,
            expect: TokenExpect {
                product_uuid: workflow.product_uuid.clone(),
                mac: Some(workflow.mac.clone()),
                node_id: None,
            },
            reclaim: false,
        },
    )
    .await?;
    let expires_at = token.expires_at;
    if !tx
        .set_discovery_workflow_token(&workflow.id, &token.id)
        .await?
    {
        return Err(ApiError::Internal(
            "the locked workflow stopped running".into(),
        ));
    }
    tx.insert_event(&NewEvent {
        at: now,
        kind: "discovery-token.created".into(),
        tenant_id: Some(workflow.tenant_id.clone()),
        node_id: Some(site.node.id.clone()),
        attestor: None,
        reason: None,
        token_id: Some(token.id.clone()),
        payload: json!({
            "siteId": workflow.site_id,
            "mac": workflow.mac,
            "productUuid": workflow.product_uuid,
            "workflowId": workflow.id,
            "leaseEpoch": req.epoch,
            "previousTokenRevoked": revoked,
            "expiresAt": expires_at,
        }),
    })
    .await?;
    tx.commit().await?;
    tracing::info!(token_id = %token.id, node = %site.node.id, workflow_id = %workflow.id, %mac, "discovery token fetched");
    Ok(Json(DiscoveryToken {
        id: token.id,
        token: token.text,
        expires_at,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_reasons() {
        assert_eq!(SiteRefusal::ForeignLease.to_string(), "foreign-lease");
        assert_eq!(SiteRefusal::NotLeaseHolder.to_string(), "not-lease-holder");
        assert_eq!(SiteRefusal::NoWorkflow.to_string(), "no-workflow");
        assert_eq!(
            SiteRefusal::Certificate(RenewRefusal::Retired).to_string(),
            "retired"
        );
    }
}
