//! What a site node may do over mTLS: hold its site's boot lease (acquire, renew, release) and
//! fetch the discovery tokens of the machines an operator's discovery workflow lets its boot
//! server serve. The HTTP side is `crate::api::site`; the rules live here.
//!
//! A site node authenticates as a renewal does: the TLS handshake proved it holds the key of
//! the leaf it presented (`api::mtls`), and the leaf must be byte for byte a live `node_certs`
//! row of the node's current identity generation, of a node that is not retired (the node row
//! is locked, so an operator's retire is never overtaken). The node must be of role site with
//! a site, and may touch only its own site's lease, `site:<siteId>:boot`, and fetch only the
//! tokens of its own site's running discovery workflows, while it holds that lease
//! (discovery's two parties: the operator starts the workflow, the boot server vouches for the
//! boot). Every refusal is a [`SiteRefusal`], recorded as a `security.site.refused` event in a
//! transaction of its own; losing a lease race is not a refusal but a conflict.

use std::net::SocketAddr;

use gatehouse_proto::discovery::is_mac;
use gatehouse_proto::site::{DiscoveryToken, DiscoveryTokenRequest, LeaseRequest, LeaseState};
use serde_json::json;

use super::{OpsError, event, is_id, tokens};
use crate::join::renew::{self, RenewRefusal};
use crate::store::{
    Db, LeaseOutcome, LeaseRow, NodeRole, NodeRow, StoreError, TokenExpect, TokenRole, Tx,
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

/// Why a site request did not happen. Nothing was changed in either case but the refusal's
/// event.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SiteError {
    /// The node may not do this; the refusal is recorded.
    #[error("site request refused: {0}")]
    Refused(SiteRefusal),
    /// The request is malformed, the lease race was lost, or the database failed.
    #[error(transparent)]
    Ops(#[from] OpsError),
}

impl From<StoreError> for SiteError {
    fn from(e: StoreError) -> Self {
        SiteError::Ops(e.into())
    }
}

/// The connection a site request came on.
#[derive(Debug, Clone, Copy)]
pub struct SiteClient<'a> {
    /// The remote address, for the refusal's event.
    pub addr: SocketAddr,
    /// The leaf certificate (DER) the client presented and proved it holds the key of.
    pub leaf: Option<&'a [u8]>,
}

/// Which lease operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseOp {
    /// `{ttlSeconds}`: take the lease if it is free or lapsed, at a new epoch.
    Acquire,
    /// `{epoch, ttlSeconds}`: extend the lease held at `epoch`.
    Renew,
    /// `{epoch}`: give up the lease held at `epoch`.
    Release,
}

impl LeaseOp {
    /// The request's name in a refusal's event.
    fn what(self) -> &'static str {
        match self {
            LeaseOp::Acquire => "lease.acquire",
            LeaseOp::Renew => "lease.renew",
            LeaseOp::Release => "lease.release",
        }
    }
}

/// A site node, authenticated.
struct SiteNode {
    node: NodeRow,
    site_id: String,
}

/// Authenticates the connection's leaf as a live site node in `tx`.
async fn site_node(
    tx: &mut Tx,
    client: &SiteClient<'_>,
) -> Result<Result<SiteNode, (SiteRefusal, Option<NodeRow>)>, StoreError> {
    let Some(leaf) = client.leaf else {
        return Ok(Err((SiteRefusal::NoClientCertificate, None)));
    };
    let Some(first) = tx.node_cert_by_der(leaf).await? else {
        return Ok(Err((SiteRefusal::UnknownCertificate, None)));
    };
    let node = tx.lock_node(&first.node_id).await?;
    // Read again under the lock (see `join::renew::lookup`).
    let Some(cert) = tx.node_cert(&first.serial, leaf).await? else {
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

/// Records a refusal in a transaction of its own (the request's was dropped, so nothing it
/// did stays) and returns the one error it becomes. A refusal that cannot be recorded is
/// still a refusal.
async fn refuse(
    db: &Db,
    client: &SiteClient<'_>,
    what: &str,
    refusal: SiteRefusal,
    node: Option<&NodeRow>,
) -> SiteError {
    tracing::warn!(request = what, reason = %refusal, node = ?node.map(|n| &n.id), peer = %client.addr, "site request refused");
    let write = async {
        let mut tx = db.begin().await?;
        let at = tx.now().await?;
        let mut refused = event(
            at,
            "security.site.refused",
            json!({ "request": what, "clientAddr": client.addr.to_string() }),
        );
        refused.tenant_id = node.map(|n| n.tenant_id.clone());
        refused.node_id = node.map(|n| n.id.clone());
        refused.reason = Some(refusal.to_string());
        tx.insert_event(&refused).await?;
        tx.commit().await
    };
    if let Err(e) = write.await {
        tracing::error!(error = %e, "could not record a refused site request");
    }
    SiteError::Refused(refusal)
}

/// Authenticates the site node in `tx` and hands `tx` back; or drops it (so nothing the
/// request did stays) and records the refusal.
async fn authenticate(
    db: &Db,
    mut tx: Tx,
    client: &SiteClient<'_>,
    what: &str,
) -> Result<(Tx, SiteNode), SiteError> {
    match site_node(&mut tx, client).await? {
        Ok(site) => Ok((tx, site)),
        Err((refusal, node)) => {
            drop(tx);
            Err(refuse(db, client, what, refusal, node.as_ref()).await)
        }
    }
}

/// The lease's time to live in milliseconds and the epoch the operation names, checked.
fn lease_terms(req: &LeaseRequest, op: LeaseOp) -> Result<(i64, u64), OpsError> {
    let ttl_ms = match op {
        LeaseOp::Acquire | LeaseOp::Renew => {
            let ttl = req
                .ttl_seconds
                .ok_or_else(|| OpsError::invalid("ttlSeconds is required"))?;
            if !LEASE_TTL_SECONDS.contains(&ttl) {
                return Err(OpsError::invalid(format!(
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
            .ok_or_else(|| OpsError::invalid("epoch is required"))?,
    };
    // Epochs are stored as signed 64-bit integers and start at 1: a larger one names no lease,
    // and must be refused here rather than fail in the database as a 5xx.
    if i64::try_from(epoch).is_err() {
        return Err(OpsError::invalid(format!(
            "epoch must be at most {}",
            i64::MAX
        )));
    }
    Ok((ttl_ms, epoch))
}

/// Acquires, renews or releases the lease `name`, which must be the client's own site's boot
/// lease. A lost race (another holder, another epoch, a lapsed lease) is
/// [`OpsError::Conflict`]; a change of hands or a release is an event, a renewal is not.
pub async fn lease(
    db: &Db,
    client: &SiteClient<'_>,
    name: &str,
    req: &LeaseRequest,
    op: LeaseOp,
) -> Result<LeaseState, SiteError> {
    let (ttl_ms, epoch) = lease_terms(req, op)?;
    let what = op.what();
    let (mut tx, site) = authenticate(db, db.begin().await?, client, what).await?;
    if name != format!("site:{}:boot", site.site_id) {
        drop(tx);
        return Err(refuse(
            db,
            client,
            what,
            SiteRefusal::ForeignLease,
            Some(&site.node),
        )
        .await);
    }
    let now = tx.now().await?;
    let holder = site.node.id.as_str();
    let outcome = match op {
        LeaseOp::Acquire => tx.acquire_lease(name, holder, now + ttl_ms, now).await?,
        LeaseOp::Renew => {
            tx.renew_lease(name, holder, epoch, now + ttl_ms, now)
                .await?
        }
        LeaseOp::Release => tx.release_lease(name, holder, epoch, now).await?,
    };
    let row = match outcome {
        LeaseOutcome::Held(row) => row,
        LeaseOutcome::Lost(current) => {
            let detail = match current {
                Some(c) if c.holder != holder && c.expires_at > now => {
                    "the lease is held by another node".to_owned()
                }
                Some(c) if c.epoch != epoch => format!("the lease is at epoch {}", c.epoch),
                _ => "the lease lapsed".to_owned(),
            };
            return Err(OpsError::Conflict(detail).into());
        }
    };
    let changed = match op {
        LeaseOp::Acquire => Some("lease.acquired"),
        LeaseOp::Release => Some("lease.released"),
        LeaseOp::Renew => None,
    };
    if let Some(kind) = changed {
        let mut e = event(
            now,
            kind,
            json!({ "lease": row.name, "epoch": row.epoch, "expiresAt": row.expires_at }),
        );
        e.tenant_id = Some(site.node.tenant_id.clone());
        e.node_id = Some(site.node.id.clone());
        tx.insert_event(&e).await?;
    }
    tx.commit().await?;
    Ok(state_of(row))
}

fn state_of(row: LeaseRow) -> LeaseState {
    LeaseState {
        name: row.name,
        holder: row.holder,
        epoch: row.epoch,
        expires_at: row.expires_at,
    }
}

/// The site node fetches the single-use discovery token of the running discovery workflow an
/// operator started for that MAC at the node's own site (`workflowId`, when given, must be
/// that workflow), and only while it holds the site's boot lease at `epoch`, unexpired, by
/// database time. Each fetch mints a new token (the workflow's tenant and site, `expect.mac`
/// and the workflow's product UUID, one use, the workflow's lifetime), revokes the workflow's
/// previous token if it is unspent, and records the new one on the workflow: a boot server
/// can never hold more than one live token per workflow, and none without a workflow. Shown
/// once.
pub async fn discovery_token(
    db: &Db,
    client: &SiteClient<'_>,
    req: &DiscoveryTokenRequest,
) -> Result<DiscoveryToken, SiteError> {
    const WHAT: &str = "discovery-token";
    let mac = req.mac.to_ascii_lowercase();
    if !is_mac(&mac) {
        return Err(OpsError::invalid("mac is not a MAC address").into());
    }
    if let Some(w) = &req.workflow_id
        && !is_id(w)
    {
        return Err(OpsError::invalid("workflowId is not an id").into());
    }

    let (mut tx, site) = authenticate(db, db.begin().await?, client, WHAT).await?;
    let now = tx.now().await?;
    let lease_name = format!("site:{}:boot", site.site_id);
    let holds_lease = tx
        .lock_lease(&lease_name)
        .await?
        .is_some_and(|l| l.holder == site.node.id && l.epoch == req.epoch && l.expires_at > now);
    if !holds_lease {
        drop(tx);
        return Err(refuse(
            db,
            client,
            WHAT,
            SiteRefusal::NotLeaseHolder,
            Some(&site.node),
        )
        .await);
    }
    let workflow = match &req.workflow_id {
        Some(id) => tx
            .lock_discovery_workflow(id)
            .await?
            .filter(|w| w.site_id == site.site_id && w.mac == mac),
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
        return Err(refuse(db, client, WHAT, SiteRefusal::NoWorkflow, Some(&site.node)).await);
    };

    let revoked = tokens::revoke_unspent(&mut tx, workflow.token_id.as_deref()).await?;
    let token = tokens::mint(
        &mut tx,
        tokens::Mint {
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
    if !tx
        .set_discovery_workflow_token(&workflow.id, &token.id)
        .await?
    {
        // The workflow row is locked and running: this would be a store bug, and the
        // transaction is dropped, so the minted token never existed.
        return Err(OpsError::Conflict("the locked workflow stopped running".into()).into());
    }
    let mut e = event(
        now,
        "discovery-token.created",
        json!({
            "siteId": workflow.site_id,
            "mac": workflow.mac,
            "productUuid": workflow.product_uuid,
            "workflowId": workflow.id,
            "leaseEpoch": req.epoch,
            "previousTokenRevoked": revoked,
            "expiresAt": token.expires_at,
        }),
    );
    e.tenant_id = Some(workflow.tenant_id.clone());
    e.node_id = Some(site.node.id.clone());
    e.token_id = Some(token.id.clone());
    tx.insert_event(&e).await?;
    tx.commit().await?;
    tracing::info!(token_id = %token.id, node = %site.node.id, workflow_id = %workflow.id, %mac, "discovery token fetched");
    Ok(DiscoveryToken {
        id: token.id,
        token: token.text,
        expires_at: token.expires_at,
    })
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

    #[test]
    fn lease_terms_are_checked_before_any_database_work() {
        let req = |epoch, ttl_seconds| LeaseRequest { epoch, ttl_seconds };
        assert_eq!(
            lease_terms(&req(None, Some(30)), LeaseOp::Acquire).unwrap(),
            (30_000, 0)
        );
        assert_eq!(
            lease_terms(&req(Some(7), None), LeaseOp::Release).unwrap(),
            (0, 7)
        );
        for (r, op, message) in [
            (req(None, None), LeaseOp::Acquire, "ttlSeconds is required"),
            (
                req(None, Some(4)),
                LeaseOp::Acquire,
                "ttlSeconds must be 5 to 600",
            ),
            (
                req(Some(1), Some(601)),
                LeaseOp::Renew,
                "ttlSeconds must be 5 to 600",
            ),
            (req(None, Some(30)), LeaseOp::Renew, "epoch is required"),
            (req(None, None), LeaseOp::Release, "epoch is required"),
            (
                req(Some(u64::MAX), None),
                LeaseOp::Release,
                "epoch must be at most 9223372036854775807",
            ),
        ] {
            match lease_terms(&r, op) {
                Err(OpsError::InvalidInput(m)) => assert_eq!(m, message, "{op:?}"),
                other => panic!("{op:?}: {other:?}"),
            }
        }
    }
}
