//! The admin API of provisioning: a node's inventories, provisioning workflows whose
//! `userdata.render` step mints the single-use provisioned token and renders the machine's
//! user data.
//!
//! A workflow is `running` from its start until an operator completes or cancels it; only a
//! running workflow binds its token to its node (the `provisioned` attestor's resolver and
//! JoinService both read it through `token_workflow`). Finishing a workflow revokes its token
//! if it is still unspent, so the rendered credential dies with the deploy. Every write is one
//! transaction that also appends its event.

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::AppState;
use super::admin::{ListPage, authorize, begin_node_action, is_id, node_event, page};
use super::error::ApiError;
use crate::store::{
    Cursor, DiscoveryWorkflowRow, InventoryRow, NewEvent, NewToken, NodeRole, TokenExpect,
    TokenRole, USERDATA_RENDER, WORKFLOW_CANCELLED, WORKFLOW_RUNNING, WORKFLOW_SUCCEEDED,
    WorkflowRow,
};

/// Most MACs one inventory records (as many as a join may claim).
const MAX_MACS: usize = 64;
/// The provisioned token's default lifetime: a deploy and first boot fit in a day.
const DEFAULT_TOKEN_TTL_SECONDS: u64 = 24 * 3600;
/// The longest a provisioned token may live.
const MAX_TOKEN_TTL_SECONDS: u64 = 30 * 24 * 3600;
fn json_body<T>(body: Result<Json<T>, JsonRejection>) -> Result<T, ApiError> {
    body.map(|Json(v)| v).map_err(ApiError::from)
}

/// A UUID in its 8-4-4-4-12 hex form, lowercased (as agents claim SMBIOS product UUIDs).
pub(super) fn product_uuid(s: &str) -> Result<String, ApiError> {
    let lens: Vec<usize> = s.split('-').map(str::len).collect();
    if lens == [8, 4, 4, 4, 12] && s.bytes().all(|b| b == b'-' || b.is_ascii_hexdigit()) {
        Ok(s.to_ascii_lowercase())
    } else {
        Err(ApiError::InvalidInput(format!(
            "productUuid {s:?} is not a UUID"
        )))
    }
}

/// Six hex octets separated by `:` or `-`, lowercased with colons (as agents claim MACs).
pub(super) fn mac(s: &str) -> Result<String, ApiError> {
    let octets: Vec<&str> = s.split([':', '-']).collect();
    if octets.len() == 6
        && octets
            .iter()
            .all(|o| o.len() == 2 && o.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        Ok(octets.join(":").to_ascii_lowercase())
    } else {
        Err(ApiError::InvalidInput(format!(
            "{s:?} is not a MAC address"
        )))
    }
}

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

/// `POST /v1/admin/nodes/{id}/inventories` body.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct RecordInventory {
    #[serde(default)]
    product_uuid: Option<String>,
    #[serde(default)]
    macs: Vec<String>,
}

/// `POST /v1/admin/nodes/{id}/inventories`: records what the node's hardware is (the newest
/// inventory is what a provisioned join's product UUID is checked against).
pub(super) async fn record_inventory(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Result<Json<RecordInventory>, JsonRejection>,
) -> Result<Json<InventoryRow>, ApiError> {
    authorize(&state, &headers)?;
    let req = json_body(body)?;
    let product_uuid = req.product_uuid.as_deref().map(product_uuid).transpose()?;
    if req.macs.len() > MAX_MACS {
        return Err(ApiError::InvalidInput(format!("at most {MAX_MACS} MACs")));
    }
    let mut macs = req
        .macs
        .iter()
        .map(|m| mac(m))
        .collect::<Result<Vec<_>, _>>()?;
    macs.dedup();
    let (mut tx, node) = begin_node_action(&state, &headers, &id).await?;
    let at = tx.now().await?;
    let row = InventoryRow {
        id: crate::join::new_id("inv_"),
        node_id: node.id.clone(),
        product_uuid,
        macs,
        recorded_at: at,
    };
    tx.insert_inventory(&row).await?;
    node_event(
        &mut tx,
        "node.inventory-recorded",
        &node,
        at,
        json!({
            "inventoryId": row.id,
            "productUuid": row.product_uuid,
            "macs": row.macs,
        }),
    )
    .await?;
    tx.commit().await?;
    tracing::info!(node_id = %node.id, inventory_id = %row.id, "inventory recorded");
    Ok(Json(row))
}

/// `GET /v1/admin/nodes/{id}/inventories?after=&limit=`: newest first, a page at a time.
pub(super) async fn list_inventories(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    query: Result<Query<ListPage>, QueryRejection>,
) -> Result<axum::response::Response, ApiError> {
    let (before, limit) = query?.0.resolve::<Cursor>()?;
    let before = before.unwrap_or_else(Cursor::end);
    let (mut tx, _node) = begin_node_action(&state, &headers, &id).await?;
    let rows = tx.inventories(&id, &before, limit).await?;
    tx.commit().await?;
    Ok(page(rows, limit, |i: &InventoryRow| Cursor {
        created_at: i.recorded_at,
        id: i.id.clone(),
    }))
}

/// `POST /v1/admin/workflows` body.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct StartWorkflow {
    node_id: String,
    /// The host's URL as the machine reaches it, rendered into the user data.
    server_url: String,
    #[serde(default = "default_token_ttl")]
    token_ttl_seconds: u64,
}

fn default_token_ttl() -> u64 {
    DEFAULT_TOKEN_TTL_SECONDS
}

/// What starting a workflow answers: the workflow, the token (shown once, as in the user data)
/// and the rendered user data.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct StartedWorkflow {
    workflow: WorkflowRow,
    token_id: String,
    token: String,
    token_expires_at: i64,
    user_data: String,
}

/// `POST /v1/admin/workflows`: starts provisioning a node. Its `userdata.render` step mints a
/// provisioned token with one use in the node's tenant, pool and site, with no `expect` (the
/// attestor's resolver binds it to this node through the workflow), records the token on the
/// workflow, and renders the user data.
///
/// With `"kind": "discovery"` it starts a discovery workflow instead
/// ([`start_discovery_workflow`]).
pub(super) async fn start_workflow(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Json<Value>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    authorize(&state, &headers)?;
    let mut body = json_body(body)?;
    let kind = match body.as_object_mut().and_then(|o| o.remove("kind")) {
        None => PROVISION.to_owned(),
        Some(Value::String(kind)) => kind,
        Some(_) => return Err(ApiError::InvalidInput("kind must be a string".into())),
    };
    let parse = |e: serde_json::Error| ApiError::InvalidInput(e.to_string());
    let started = match kind.as_str() {
        PROVISION => serde_json::to_value(
            start_provisioning(
                &state,
                &headers,
                serde_json::from_value(body).map_err(parse)?,
            )
            .await?,
        ),
        DISCOVERY => serde_json::to_value(
            start_discovery_workflow(&state, serde_json::from_value(body).map_err(parse)?).await?,
        ),
        _ => {
            return Err(ApiError::InvalidInput(
                "kind must be provision or discovery".into(),
            ));
        }
    };
    started
        .map(Json)
        .map_err(|e| ApiError::Internal(format!("workflow json: {e}")))
}

/// The kind of a workflow that provisions a node (the default).
const PROVISION: &str = "provision";
/// The kind of a workflow that lets a machine boot the discovery ramdisk at a site.
const DISCOVERY: &str = "discovery";

/// `POST /v1/admin/workflows` body with `"kind": "discovery"`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct StartDiscovery {
    site_id: String,
    mac: String,
    #[serde(default)]
    product_uuid: Option<String>,
    #[serde(default = "root_tenant")]
    tenant_id: String,
    #[serde(default = "default_discovery_ttl")]
    token_ttl_seconds: u64,
}

fn root_tenant() -> String {
    "root".into()
}

/// The default lifetime of a discovery token a fetch mints: one boot fits in an hour.
const DEFAULT_DISCOVERY_TTL_SECONDS: u64 = 3600;
/// The longest: a day.
const MAX_DISCOVERY_TTL_SECONDS: u64 = 24 * 3600;

fn default_discovery_ttl() -> u64 {
    DEFAULT_DISCOVERY_TTL_SECONDS
}

/// A started discovery workflow, as the API shows it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ShownDiscovery {
    kind: &'static str,
    #[serde(flatten)]
    workflow: DiscoveryWorkflowRow,
}

/// Starts a discovery workflow: the operator's half of discovery's two parties. It binds a
/// MAC to a site (and tenant); the site's boot server then fetches the workflow's single-use
/// discovery token (`POST /v1/site/discovery-tokens`) only while it holds the site's boot
/// lease. One running workflow per MAC and site.
async fn start_discovery_workflow(
    state: &AppState,
    req: StartDiscovery,
) -> Result<ShownDiscovery, ApiError> {
    for (what, v) in [("siteId", &req.site_id), ("tenantId", &req.tenant_id)] {
        if !is_id(v) {
            return Err(ApiError::InvalidInput(format!("{what} is not an id")));
        }
    }
    let mac = mac(&req.mac)?;
    let product_uuid = req.product_uuid.as_deref().map(product_uuid).transpose()?;
    if !(60..=MAX_DISCOVERY_TTL_SECONDS).contains(&req.token_ttl_seconds) {
        return Err(ApiError::InvalidInput(format!(
            "tokenTtlSeconds must be 60 to {MAX_DISCOVERY_TTL_SECONDS}"
        )));
    }
    let token_ttl_seconds = u32::try_from(req.token_ttl_seconds)
        .map_err(|_| ApiError::InvalidInput("tokenTtlSeconds is too large".into()))?;
    let mut tx = state.db.begin().await?;
    if !tx.tenant_exists(&req.tenant_id).await? {
        tx.rollback().await?;
        return Err(ApiError::InvalidInput(format!(
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
        return Err(ApiError::Conflict(format!(
            "{mac} at site {} has a running discovery workflow {running}: complete or cancel it first",
            req.site_id
        )));
    }
    let now = tx.now().await?;
    let workflow = DiscoveryWorkflowRow {
        id: crate::join::new_id("wf_"),
        tenant_id: req.tenant_id,
        site_id: req.site_id,
        mac,
        product_uuid,
        state: WORKFLOW_RUNNING.into(),
        token_ttl_seconds,
        token_id: None,
        created_at: now,
    };
    tx.insert_discovery_workflow(&workflow).await?;
    tx.insert_event(&NewEvent {
        at: now,
        kind: "workflow.started".into(),
        tenant_id: Some(workflow.tenant_id.clone()),
        node_id: None,
        attestor: None,
        reason: None,
        token_id: None,
        payload: json!({
            "workflowId": workflow.id,
            "kind": DISCOVERY,
            "siteId": workflow.site_id,
            "mac": workflow.mac,
            "productUuid": workflow.product_uuid,
        }),
    })
    .await?;
    tx.commit().await?;
    tracing::info!(workflow_id = %workflow.id, site_id = %workflow.site_id, mac = %workflow.mac, "discovery workflow started");
    Ok(ShownDiscovery {
        kind: DISCOVERY,
        workflow,
    })
}

/// Starts provisioning a node (the default kind).
async fn start_provisioning(
    state: &AppState,
    headers: &HeaderMap,
    req: StartWorkflow,
) -> Result<StartedWorkflow, ApiError> {
    if !is_id(&req.node_id) {
        return Err(ApiError::InvalidInput("nodeId is not an id".into()));
    }
    if !is_server_url(&req.server_url) {
        return Err(ApiError::InvalidInput(format!(
            "serverUrl must be an https:// URL of at most {MAX_SERVER_URL} printable characters"
        )));
    }
    if !(60..=MAX_TOKEN_TTL_SECONDS).contains(&req.token_ttl_seconds) {
        return Err(ApiError::InvalidInput(format!(
            "tokenTtlSeconds must be 60 to {MAX_TOKEN_TTL_SECONDS}"
        )));
    }
    let (mut tx, node) = begin_node_action(state, headers, &req.node_id).await?;
    if node.retired {
        tx.rollback().await?;
        return Err(ApiError::Conflict(format!(
            "node {} is retired: it is never provisioned again",
            node.id
        )));
    }
    if !matches!(node.role, NodeRole::Node | NodeRole::NodeTenant) {
        tx.rollback().await?;
        return Err(ApiError::InvalidInput(format!(
            "node {} is a {} node: a provisioned token re-keys compute nodes only",
            node.id,
            node.role.as_str()
        )));
    }
    if let Some(running) = tx.running_workflows(&node.id).await?.first() {
        let running = running.id.clone();
        tx.rollback().await?;
        return Err(ApiError::Conflict(format!(
            "node {} has a running workflow {running}: complete or cancel it first",
            node.id
        )));
    }

    // userdata.render: mint the token, render it.
    let secret: [u8; 32] = rand::random();
    let token = gatehouse_proto::TokenString {
        id: crate::join::new_id("tok_"),
        secret: secret.to_vec(),
    };
    let token_text = token.to_text();
    let workflow_id = crate::join::new_id("wf_");
    let user_data = gatehouse_proto::userdata::render(&gatehouse_proto::userdata::Userdata {
        workflow_id: &workflow_id,
        node_id: &node.id,
        token: &token_text,
        server_url: &req.server_url,
    })
    .map_err(|e| ApiError::InvalidInput(e.to_string()))?;
    let now = tx.now().await?;
    let ttl_ms = i64::try_from(req.token_ttl_seconds * 1000)
        .map_err(|_| ApiError::InvalidInput("tokenTtlSeconds is too large".into()))?;
    let expires_at = now + ttl_ms;
    tx.insert_token(&NewToken {
        id: token.id.clone(),
        role: TokenRole::Provisioned,
        secret_sha256: Sha256::digest(secret).into(),
        tenant_id: node.tenant_id.clone(),
        pool_id: node.pool_id.clone(),
        site_id: node.site_id.clone(),
        expires_at,
        uses: 1,
        expect: TokenExpect::default(),
        reclaim: false,
        created_at: now,
    })
    .await?;
    let workflow = WorkflowRow {
        id: workflow_id,
        node_id: node.id.clone(),
        state: WORKFLOW_RUNNING.into(),
        step: USERDATA_RENDER.into(),
        token_id: Some(token.id.clone()),
        created_at: now,
    };
    tx.insert_workflow(&workflow).await?;
    tx.insert_event(&NewEvent {
        at: now,
        kind: "workflow.started".into(),
        tenant_id: Some(node.tenant_id.clone()),
        node_id: Some(node.id.clone()),
        attestor: None,
        reason: None,
        token_id: Some(token.id.clone()),
        payload: json!({
            "workflowId": workflow.id,
            "step": workflow.step,
            "tokenExpiresAt": expires_at,
        }),
    })
    .await?;
    tx.commit().await?;
    tracing::info!(node_id = %node.id, workflow_id = %workflow.id, token_id = %token.id, "workflow started");
    Ok(StartedWorkflow {
        workflow,
        token_id: token.id,
        token: token_text,
        token_expires_at: expires_at,
        user_data,
    })
}

/// `GET /v1/admin/workflows?after=&limit=`: provisioning and discovery workflows together,
/// oldest first, each with its `kind`, a page at a time. A page takes up to `limit` rows of
/// each table after the cursor and keeps the `limit` oldest, so the two interleave by creation
/// and none is skipped.
pub(super) async fn list_workflows(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<ListPage>, QueryRejection>,
) -> Result<axum::response::Response, ApiError> {
    authorize(&state, &headers)?;
    let (after, limit) = query?.0.resolve::<Cursor>()?;
    let after = after.unwrap_or_else(Cursor::start);
    let mut tx = state.db.begin().await?;
    let rows = tx.list_workflows(&after, limit).await?;
    let discovery = tx.list_discovery_workflows(&after, limit).await?;
    tx.commit().await?;
    let mut list = Vec::with_capacity(rows.len() + discovery.len());
    for row in rows {
        list.push(ListedWorkflow::new(
            row.created_at,
            &row.id,
            with_kind(&row, PROVISION)?,
        ));
    }
    for w in discovery {
        list.push(ListedWorkflow::new(
            w.created_at,
            &w.id,
            with_kind(&w, DISCOVERY)?,
        ));
    }
    list.sort_by(|a, b| (a.key.created_at, &a.key.id).cmp(&(b.key.created_at, &b.key.id)));
    list.truncate(limit as usize);
    Ok(page(list, limit, |w: &ListedWorkflow| w.key.clone()))
}

/// A workflow of either kind in a page of the list, with its place in it.
#[derive(Debug, Serialize)]
struct ListedWorkflow {
    #[serde(skip)]
    key: Cursor,
    #[serde(flatten)]
    row: Value,
}

impl ListedWorkflow {
    fn new(created_at: i64, id: &str, row: Value) -> Self {
        Self {
            key: Cursor {
                created_at,
                id: id.to_owned(),
            },
            row,
        }
    }
}

/// A workflow row as JSON with its `kind`.
fn with_kind<T: Serialize>(row: &T, kind: &str) -> Result<Value, ApiError> {
    let mut v =
        serde_json::to_value(row).map_err(|e| ApiError::Internal(format!("workflow json: {e}")))?;
    v["kind"] = json!(kind);
    Ok(v)
}

/// `GET /v1/admin/workflows/{id}`: the workflow and where its token stands.
pub(super) async fn show_workflow(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    authorize(&state, &headers)?;
    path_workflow_id(&id)?;
    let mut tx = state.db.begin().await?;
    let Some(workflow) = tx.workflow(&id).await? else {
        let Some(discovery) = tx.lock_discovery_workflow(&id).await? else {
            tx.rollback().await?;
            return Err(ApiError::NotFound);
        };
        let token = token_summary(&mut tx, discovery.token_id.as_deref()).await?;
        tx.commit().await?;
        let mut answer = with_kind(&discovery, DISCOVERY)?;
        answer["token"] = token.unwrap_or(Value::Null);
        return Ok(Json(answer));
    };
    let token = match &workflow.token_id {
        Some(token_id) => tx.lock_token(token_id).await?.map(|t| {
            json!({
                "id": t.id,
                "usesLeft": t.uses_left,
                "revoked": t.revoked,
                "expiresAt": t.expires_at,
            })
        }),
        None => None,
    };
    tx.commit().await?;
    let mut answer = with_kind(&workflow, PROVISION)?;
    answer["token"] = token.unwrap_or(Value::Null);
    Ok(Json(answer))
}

/// Where a workflow's token stands.
async fn token_summary(
    tx: &mut crate::store::Tx,
    token_id: Option<&str>,
) -> Result<Option<Value>, ApiError> {
    let Some(token_id) = token_id else {
        return Ok(None);
    };
    Ok(tx.lock_token(token_id).await?.map(|t| {
        json!({
            "id": t.id,
            "usesLeft": t.uses_left,
            "revoked": t.revoked,
            "expiresAt": t.expires_at,
        })
    }))
}

fn path_workflow_id(id: &str) -> Result<(), ApiError> {
    if is_id(id) {
        Ok(())
    } else {
        Err(ApiError::InvalidInput(
            "the workflow id is not an id".into(),
        ))
    }
}

/// `POST /v1/admin/workflows/{id}/complete`: the deploy finished.
pub(super) async fn complete_workflow(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    finish(
        &state,
        &headers,
        &id,
        WORKFLOW_SUCCEEDED,
        "workflow.completed",
    )
    .await
}

/// `POST /v1/admin/workflows/{id}/cancel`: an operator stopped the deploy.
pub(super) async fn cancel_workflow(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    finish(
        &state,
        &headers,
        &id,
        WORKFLOW_CANCELLED,
        "workflow.cancelled",
    )
    .await
}

/// Moves a running workflow to `to` and revokes its token if it is still unspent: a finished
/// workflow no longer binds the token to its node, and its user data must not admit anyone.
async fn finish(
    state: &AppState,
    headers: &HeaderMap,
    id: &str,
    to: &str,
    event: &str,
) -> Result<Json<Value>, ApiError> {
    authorize(state, headers)?;
    path_workflow_id(id)?;
    let mut tx = state.db.begin().await?;
    let Some(workflow) = tx.workflow(id).await? else {
        return finish_discovery(tx, id, to, event).await;
    };
    if !tx.finish_workflow(id, to).await? {
        tx.rollback().await?;
        return Err(ApiError::Conflict(format!(
            "workflow {id} is {}, not running",
            workflow.state
        )));
    }
    let mut token_revoked = false;
    if let Some(token_id) = &workflow.token_id
        && let Some(token) = tx.lock_token(token_id).await?
        && token.uses_left > 0
        && !token.revoked
    {
        token_revoked = tx.revoke_token(token_id).await?;
    }
    let at = tx.now().await?;
    let tenant_id = tx.node(&workflow.node_id).await?.map(|n| n.tenant_id);
    tx.insert_event(&NewEvent {
        at,
        kind: event.to_owned(),
        tenant_id,
        node_id: Some(workflow.node_id.clone()),
        attestor: None,
        reason: None,
        token_id: workflow.token_id.clone(),
        payload: json!({ "workflowId": id, "state": to, "tokenRevoked": token_revoked }),
    })
    .await?;
    tx.commit().await?;
    tracing::info!(workflow_id = %id, state = to, token_revoked, "workflow finished");
    Ok(Json(json!({
        "id": id,
        "nodeId": workflow.node_id,
        "state": to,
        "tokenRevoked": token_revoked,
    })))
}

/// [`finish`] for a discovery workflow: its newest token, if unspent, is revoked, so a boot
/// the operator no longer wants cannot join.
async fn finish_discovery(
    mut tx: crate::store::Tx,
    id: &str,
    to: &str,
    event: &str,
) -> Result<Json<Value>, ApiError> {
    let Some(workflow) = tx.lock_discovery_workflow(id).await? else {
        tx.rollback().await?;
        return Err(ApiError::NotFound);
    };
    if !tx.finish_discovery_workflow(id, to).await? {
        tx.rollback().await?;
        return Err(ApiError::Conflict(format!(
            "workflow {id} is {}, not running",
            workflow.state
        )));
    }
    let token_revoked = revoke_unspent(&mut tx, workflow.token_id.as_deref()).await?;
    let at = tx.now().await?;
    tx.insert_event(&NewEvent {
        at,
        kind: event.to_owned(),
        tenant_id: Some(workflow.tenant_id.clone()),
        node_id: None,
        attestor: None,
        reason: None,
        token_id: workflow.token_id.clone(),
        payload: json!({
            "workflowId": id,
            "kind": DISCOVERY,
            "state": to,
            "tokenRevoked": token_revoked,
        }),
    })
    .await?;
    tx.commit().await?;
    tracing::info!(workflow_id = %id, state = to, token_revoked, "discovery workflow finished");
    Ok(Json(json!({
        "id": id,
        "kind": DISCOVERY,
        "siteId": workflow.site_id,
        "mac": workflow.mac,
        "state": to,
        "tokenRevoked": token_revoked,
    })))
}

/// Revokes a token if it exists, is not revoked and has uses left; whether it did.
pub(super) async fn revoke_unspent(
    tx: &mut crate::store::Tx,
    token_id: Option<&str>,
) -> Result<bool, ApiError> {
    let Some(token_id) = token_id else {
        return Ok(false);
    };
    match tx.lock_token(token_id).await? {
        Some(token) if token.uses_left > 0 && !token.revoked => {
            Ok(tx.revoke_token(token_id).await?)
        }
        _ => Ok(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_and_macs_are_normalised_or_refused() {
        assert_eq!(
            product_uuid("4C4C4544-0042-3510-8052-B4C04F384D32").unwrap(),
            "4c4c4544-0042-3510-8052-b4c04f384d32"
        );
        for bad in [
            "",
            "4c4c4544",
            "4c4c4544-0042-3510-8052-b4c04f384d3g",
            "{4c4c4544-0042-3510-8052-b4c04f384d32}",
        ] {
            assert!(product_uuid(bad).is_err(), "{bad}");
        }
        assert_eq!(mac("AA-BB-CC-00-11-22").unwrap(), "aa:bb:cc:00:11:22");
        for bad in ["", "aa:bb:cc:dd:ee", "aa:bb:cc:dd:ee:fg", "aabb.ccdd.eeff"] {
            assert!(mac(bad).is_err(), "{bad}");
        }
    }
}
