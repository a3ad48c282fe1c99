//! Workflows: provisioning (its `userdata.render` step mints the node's single-use
//! provisioned token and renders its user data) and discovery (binds a MAC to a site, whose
//! boot server then fetches the machine's discovery token while it holds the site's lease).
//!
//! A workflow is `running` from its start until an operator completes or cancels it; only a
//! running workflow binds its token (the `provisioned` attestor's resolver and JoinService
//! both read it through `token_workflow`). Finishing a workflow revokes its token if it is
//! still unspent, so the rendered credential dies with the deploy. Every write is one
//! transaction that also appends its event, naming the operator.

use serde_json::json;

use super::tokens::{Mint, mint, revoke_unspent};
use super::types::{
    DiscoveryWorkflow, FinishedWorkflow, ProvisionWorkflow, StartDiscovery, StartProvisioning,
    StartWorkflow, StartedProvisioning, StartedWorkflow, Workflow, WorkflowDetail, WorkflowToken,
};
use super::{Actor, Id, OpsError, Page, PageRequest, event, record};
use crate::store::{
    Cursor, Db, DiscoveryWorkflowRow, NodeRole, TokenExpect, TokenRole, Tx, USERDATA_RENDER,
    WORKFLOW_CANCELLED, WORKFLOW_RUNNING, WORKFLOW_SUCCEEDED, WorkflowRow,
};

/// The provisioned token's default lifetime: a deploy and first boot fit in a day.
const DEFAULT_TOKEN_TTL_SECONDS: u64 = 24 * 3600;
/// The longest a provisioned token may live.
const MAX_TOKEN_TTL_SECONDS: u64 = 30 * 24 * 3600;
/// The default lifetime of a discovery token a fetch mints: one boot fits in an hour.
const DEFAULT_DISCOVERY_TTL_SECONDS: u64 = 3600;
/// The longest: a day.
const MAX_DISCOVERY_TTL_SECONDS: u64 = 24 * 3600;
/// Longest `serverUrl` a workflow renders into user data.
const MAX_SERVER_URL: usize = 2048;

/// An `https://` URL without whitespace or control characters (it is rendered into the
/// machine's user data, where a newline would start a line of its own).
fn is_server_url(s: &str) -> bool {
    s.len() > "https://".len()
        && s.len() <= MAX_SERVER_URL
        && s.starts_with("https://")
        && s.bytes().all(|b| b.is_ascii_graphic())
}

fn provision_view(w: WorkflowRow) -> ProvisionWorkflow {
    ProvisionWorkflow {
        id: w.id,
        node_id: w.node_id,
        state: w.state,
        step: w.step,
        token_id: w.token_id,
        created_at: w.created_at,
    }
}

fn discovery_view(w: DiscoveryWorkflowRow) -> DiscoveryWorkflow {
    DiscoveryWorkflow {
        id: w.id,
        tenant_id: w.tenant_id,
        site_id: w.site_id,
        mac: w.mac,
        product_uuid: w.product_uuid,
        state: w.state,
        token_ttl_seconds: w.token_ttl_seconds,
        token_id: w.token_id,
        created_at: w.created_at,
    }
}

/// Starts a workflow of either kind.
pub async fn start(
    db: &Db,
    actor: &Actor,
    req: StartWorkflow,
) -> Result<StartedWorkflow, OpsError> {
    match req {
        StartWorkflow::Provision(req) => start_provisioning(db, actor, req)
            .await
            .map(StartedWorkflow::Provision),
        StartWorkflow::Discovery(req) => start_discovery(db, actor, req)
            .await
            .map(StartedWorkflow::Discovery),
    }
}

/// Starts a discovery workflow: the operator's half of discovery's two parties. One running
/// workflow per MAC and site.
async fn start_discovery(
    db: &Db,
    actor: &Actor,
    req: StartDiscovery,
) -> Result<DiscoveryWorkflow, OpsError> {
    let mac = super::mac(&req.mac)?;
    let product_uuid = req
        .product_uuid
        .as_deref()
        .map(super::product_uuid)
        .transpose()?;
    let ttl = req
        .token_ttl_seconds
        .unwrap_or(DEFAULT_DISCOVERY_TTL_SECONDS);
    if !(60..=MAX_DISCOVERY_TTL_SECONDS).contains(&ttl) {
        return Err(OpsError::invalid(format!(
            "tokenTtlSeconds must be 60 to {MAX_DISCOVERY_TTL_SECONDS}"
        )));
    }
    let token_ttl_seconds =
        u32::try_from(ttl).map_err(|_| OpsError::invalid("tokenTtlSeconds is too large"))?;
    let mut tx = db.begin().await?;
    if !tx.tenant_exists(&req.tenant_id).await? {
        tx.rollback().await?;
        return Err(OpsError::invalid(format!(
            "tenant {} does not exist",
            req.tenant_id
        )));
    }
    if let Some(running) = tx
        .running_discovery_workflows(&req.site_id, &mac)
        .await?
        .first()
    {
        let running = running.id.clone();
        tx.rollback().await?;
        return Err(OpsError::Conflict(format!(
            "{mac} at site {} has a running discovery workflow {running}: complete or cancel it first",
            req.site_id
        )));
    }
    let now = tx.now().await?;
    let workflow = DiscoveryWorkflowRow {
        id: crate::store::new_id("wf_"),
        tenant_id: req.tenant_id.into_string(),
        site_id: req.site_id.into_string(),
        mac,
        product_uuid,
        state: WORKFLOW_RUNNING.into(),
        token_ttl_seconds,
        token_id: None,
        created_at: now,
    };
    tx.insert_discovery_workflow(&workflow).await?;
    let mut e = event(
        now,
        "workflow.started",
        json!({
            "workflowId": workflow.id,
            "kind": "discovery",
            "siteId": workflow.site_id,
            "mac": workflow.mac,
            "productUuid": workflow.product_uuid,
        }),
    );
    e.tenant_id = Some(workflow.tenant_id.clone());
    record(&mut tx, actor, &e).await?;
    tx.commit().await?;
    tracing::info!(workflow_id = %workflow.id, site_id = %workflow.site_id, mac = %workflow.mac, %actor, "discovery workflow started");
    Ok(discovery_view(workflow))
}

/// Starts provisioning a node. Its `userdata.render` step mints a provisioned token with one
/// use in the node's tenant, pool and site, with no `expect` (the attestor's resolver binds it
/// to this node through the workflow), records the token on the workflow, and renders the
/// user data.
async fn start_provisioning(
    db: &Db,
    actor: &Actor,
    req: StartProvisioning,
) -> Result<StartedProvisioning, OpsError> {
    if !is_server_url(&req.server_url) {
        return Err(OpsError::invalid(format!(
            "serverUrl must be an https:// URL of at most {MAX_SERVER_URL} printable characters"
        )));
    }
    let ttl = req.token_ttl_seconds.unwrap_or(DEFAULT_TOKEN_TTL_SECONDS);
    if !(60..=MAX_TOKEN_TTL_SECONDS).contains(&ttl) {
        return Err(OpsError::invalid(format!(
            "tokenTtlSeconds must be 60 to {MAX_TOKEN_TTL_SECONDS}"
        )));
    }
    let (mut tx, node) = super::nodes::begin_node_action(db, &req.node_id).await?;
    if node.retired {
        tx.rollback().await?;
        return Err(OpsError::Conflict(format!(
            "node {} is retired: it is never provisioned again",
            node.id
        )));
    }
    if !matches!(node.role, NodeRole::Node | NodeRole::NodeTenant) {
        tx.rollback().await?;
        return Err(OpsError::invalid(format!(
            "node {} is a {} node: a provisioned token re-keys compute nodes only",
            node.id,
            node.role.as_str()
        )));
    }
    if let Some(running) = tx.running_workflows(&node.id).await?.first() {
        let running = running.id.clone();
        tx.rollback().await?;
        return Err(OpsError::Conflict(format!(
            "node {} has a running workflow {running}: complete or cancel it first",
            node.id
        )));
    }

    // userdata.render: mint the token, render it.
    let now = tx.now().await?;
    let token = mint(
        &mut tx,
        Mint {
            role: TokenRole::Provisioned,
            tenant_id: node.tenant_id.clone(),
            pool_id: node.pool_id.clone(),
            site_id: node.site_id.clone(),
            uses: 1,
            now,
            // At most 30 days in ms: no overflow.
            ttl_ms: ttl as i64 * 1000,
            expect: TokenExpect::default(),
            reclaim: false,
        },
    )
    .await?;
    let workflow_id = crate::store::new_id("wf_");
    let user_data = gatehouse_proto::userdata::render(&gatehouse_proto::userdata::Userdata {
        workflow_id: &workflow_id,
        node_id: &node.id,
        token: &token.text,
        server_url: &req.server_url,
    })
    .map_err(|e| OpsError::invalid(e.to_string()))?;
    let workflow = WorkflowRow {
        id: workflow_id,
        node_id: node.id.clone(),
        state: WORKFLOW_RUNNING.into(),
        step: USERDATA_RENDER.into(),
        token_id: Some(token.id.clone()),
        created_at: now,
    };
    tx.insert_workflow(&workflow).await?;
    let mut e = event(
        now,
        "workflow.started",
        json!({
            "workflowId": workflow.id,
            "step": workflow.step,
            "tokenExpiresAt": token.expires_at,
        }),
    );
    e.tenant_id = Some(node.tenant_id.clone());
    e.node_id = Some(node.id.clone());
    e.token_id = Some(token.id.clone());
    record(&mut tx, actor, &e).await?;
    tx.commit().await?;
    tracing::info!(node_id = %node.id, workflow_id = %workflow.id, token_id = %token.id, %actor, "workflow started");
    Ok(StartedProvisioning {
        workflow: provision_view(workflow),
        token_id: token.id,
        token: token.text,
        token_expires_at: token.expires_at,
        user_data,
    })
}

/// Provisioning and discovery workflows together, oldest first, a page at a time. A page
/// takes up to `limit` rows of each table after the cursor and keeps the `limit` oldest, so
/// the two interleave by creation and none is skipped.
pub async fn list(db: &Db, page: &PageRequest) -> Result<Page<Workflow>, OpsError> {
    let (after, limit) = page.resolve::<Cursor>()?;
    let after = after.unwrap_or_else(Cursor::start);
    let mut tx = db.begin().await?;
    let rows = tx.list_workflows(&after, limit).await?;
    let discovery = tx.list_discovery_workflows(&after, limit).await?;
    tx.commit().await?;
    let mut list: Vec<Workflow> = rows
        .into_iter()
        .map(|w| Workflow::Provision(provision_view(w)))
        .chain(
            discovery
                .into_iter()
                .map(|w| Workflow::Discovery(discovery_view(w))),
        )
        .collect();
    list.sort_by(|a, b| (a.created_at(), a.id()).cmp(&(b.created_at(), b.id())));
    list.truncate(limit as usize);
    Ok(Page::new(list, limit, |w: &Workflow| Cursor {
        created_at: w.created_at(),
        id: w.id().to_owned(),
    }))
}

/// Where a workflow's token stands.
async fn token_state(
    tx: &mut Tx,
    token_id: Option<&str>,
) -> Result<Option<WorkflowToken>, OpsError> {
    let Some(token_id) = token_id else {
        return Ok(None);
    };
    Ok(tx.lock_token(token_id).await?.map(|t| WorkflowToken {
        id: t.id,
        uses_left: t.uses_left,
        revoked: t.revoked,
        expires_at: t.expires_at,
    }))
}

/// A workflow and where its token stands.
pub async fn show(db: &Db, id: &Id) -> Result<WorkflowDetail, OpsError> {
    let mut tx = db.begin().await?;
    let workflow = match tx.workflow(id).await? {
        Some(w) => Workflow::Provision(provision_view(w)),
        None => match tx.lock_discovery_workflow(id).await? {
            Some(w) => Workflow::Discovery(discovery_view(w)),
            None => {
                tx.rollback().await?;
                return Err(OpsError::NotFound);
            }
        },
    };
    let token_id = match &workflow {
        Workflow::Provision(w) => w.token_id.clone(),
        Workflow::Discovery(w) => w.token_id.clone(),
    };
    let token = token_state(&mut tx, token_id.as_deref()).await?;
    tx.commit().await?;
    Ok(WorkflowDetail { workflow, token })
}

/// How an operator finishes a workflow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// The deploy finished.
    Complete,
    /// The operator stopped it.
    Cancel,
}

impl Finish {
    fn state(self) -> &'static str {
        match self {
            Finish::Complete => WORKFLOW_SUCCEEDED,
            Finish::Cancel => WORKFLOW_CANCELLED,
        }
    }

    fn event(self) -> &'static str {
        match self {
            Finish::Complete => "workflow.completed",
            Finish::Cancel => "workflow.cancelled",
        }
    }
}

/// Moves a running workflow to its end state and revokes its token if it is still unspent:
/// a finished workflow no longer binds the token to its node, and its user data must not
/// admit anyone.
pub async fn finish(
    db: &Db,
    actor: &Actor,
    id: &Id,
    how: Finish,
) -> Result<FinishedWorkflow, OpsError> {
    let to = how.state();
    let mut tx = db.begin().await?;
    let Some(workflow) = tx.workflow(id).await? else {
        return finish_discovery(tx, actor, id, how).await;
    };
    if !tx.finish_workflow(id, to).await? {
        tx.rollback().await?;
        return Err(OpsError::Conflict(format!(
            "workflow {id} is {}, not running",
            workflow.state
        )));
    }
    let token_revoked = revoke_unspent(&mut tx, workflow.token_id.as_deref()).await?;
    let at = tx.now().await?;
    let tenant_id = tx.node(&workflow.node_id).await?.map(|n| n.tenant_id);
    let mut e = event(
        at,
        how.event(),
        json!({ "workflowId": id, "state": to, "tokenRevoked": token_revoked }),
    );
    e.tenant_id = tenant_id;
    e.node_id = Some(workflow.node_id.clone());
    e.token_id = workflow.token_id.clone();
    record(&mut tx, actor, &e).await?;
    tx.commit().await?;
    tracing::info!(workflow_id = %id, state = to, token_revoked, %actor, "workflow finished");
    Ok(FinishedWorkflow {
        id: id.to_string(),
        kind: "provision".into(),
        node_id: Some(workflow.node_id),
        site_id: None,
        mac: None,
        state: to.to_owned(),
        token_revoked,
    })
}

/// [`finish`] for a discovery workflow: its newest token, if unspent, is revoked, so a boot
/// the operator no longer wants cannot join.
async fn finish_discovery(
    mut tx: Tx,
    actor: &Actor,
    id: &Id,
    how: Finish,
) -> Result<FinishedWorkflow, OpsError> {
    let to = how.state();
    let Some(workflow) = tx.lock_discovery_workflow(id).await? else {
        tx.rollback().await?;
        return Err(OpsError::NotFound);
    };
    if !tx.finish_discovery_workflow(id, to).await? {
        tx.rollback().await?;
        return Err(OpsError::Conflict(format!(
            "workflow {id} is {}, not running",
            workflow.state
        )));
    }
    let token_revoked = revoke_unspent(&mut tx, workflow.token_id.as_deref()).await?;
    let at = tx.now().await?;
    let mut e = event(
        at,
        how.event(),
        json!({
            "workflowId": id,
            "kind": "discovery",
            "state": to,
            "tokenRevoked": token_revoked,
        }),
    );
    e.tenant_id = Some(workflow.tenant_id.clone());
    e.token_id = workflow.token_id.clone();
    record(&mut tx, actor, &e).await?;
    tx.commit().await?;
    tracing::info!(workflow_id = %id, state = to, token_revoked, %actor, "discovery workflow finished");
    Ok(FinishedWorkflow {
        id: id.to_string(),
        kind: "discovery".into(),
        node_id: None,
        site_id: Some(workflow.site_id),
        mac: Some(workflow.mac),
        state: to.to_owned(),
        token_revoked,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_urls_are_https_and_printable() {
        assert!(is_server_url("https://gatehouse.example:8443"));
        for bad in [
            "http://h",
            "https://",
            "https://h x",
            "https://h\n#cloud-config",
            &format!("https://{}", "h".repeat(MAX_SERVER_URL)),
        ] {
            assert!(!is_server_url(bad), "{bad:?}");
        }
    }
}
