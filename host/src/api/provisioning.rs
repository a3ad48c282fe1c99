//! The admin API of provisioning: a node's inventories, provisioning workflows whose
//! `userdata.render` step mints the single-use provisioned token and renders the machine's
//! user data, and pruning the single-use evidence ledger.
//!
//! A workflow is `running` from its start until an operator completes or cancels it; only a
//! running workflow binds its token to its node (the `provisioned` attestor's resolver and
//! JoinService both read it through `token_workflow`). Finishing a workflow revokes its token
//! if it is still unspent, so the rendered credential dies with the deploy. Every write is one
//! transaction that also appends its event.

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::AppState;
use super::admin::{authorize, begin_node_action, is_id, node_event};
use super::error::ApiError;
use crate::store::{
    InventoryRow, NewEvent, NewToken, NodeRole, TokenExpect, TokenRole, USERDATA_RENDER,
    WORKFLOW_CANCELLED, WORKFLOW_RUNNING, WORKFLOW_SUCCEEDED, WorkflowRow,
};

/// Most MACs one inventory records (as many as a join may claim).
const MAX_MACS: usize = 64;
/// The provisioned token's default lifetime: a deploy and first boot fit in a day.
const DEFAULT_TOKEN_TTL_SECONDS: u64 = 24 * 3600;
/// The longest a provisioned token may live.
const MAX_TOKEN_TTL_SECONDS: u64 = 30 * 24 * 3600;
/// Default and largest batch of `POST /v1/admin/attestation-uses/prune` (seed: 5,000 per call).
const DEFAULT_PRUNE_BATCH: u32 = 5_000;
const MAX_PRUNE_BATCH: u32 = 100_000;

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

/// `GET /v1/admin/nodes/{id}/inventories`: newest first.
pub(super) async fn list_inventories(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<Vec<InventoryRow>>, ApiError> {
    let (mut tx, _node) = begin_node_action(&state, &headers, &id).await?;
    let rows = tx.inventories(&id).await?;
    tx.commit().await?;
    Ok(Json(rows))
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
pub(super) async fn start_workflow(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Json<StartWorkflow>, JsonRejection>,
) -> Result<Json<StartedWorkflow>, ApiError> {
    authorize(&state, &headers)?;
    let req = json_body(body)?;
    if !is_id(&req.node_id) {
        return Err(ApiError::InvalidInput("nodeId is not an id".into()));
    }
    if !(req.server_url.starts_with("https://") && req.server_url.len() > "https://".len()) {
        return Err(ApiError::InvalidInput(
            "serverUrl must be an https:// URL".into(),
        ));
    }
    if !(60..=MAX_TOKEN_TTL_SECONDS).contains(&req.token_ttl_seconds) {
        return Err(ApiError::InvalidInput(format!(
            "tokenTtlSeconds must be 60 to {MAX_TOKEN_TTL_SECONDS}"
        )));
    }
    let (mut tx, node) = begin_node_action(&state, &headers, &req.node_id).await?;
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
    Ok(Json(StartedWorkflow {
        workflow,
        token_id: token.id,
        token: token_text,
        token_expires_at: expires_at,
        user_data,
    }))
}

/// `GET /v1/admin/workflows`: oldest first.
pub(super) async fn list_workflows(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Vec<WorkflowRow>>, ApiError> {
    authorize(&state, &headers)?;
    let mut tx = state.db.begin().await?;
    let rows = tx.list_workflows().await?;
    tx.commit().await?;
    Ok(Json(rows))
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
        tx.rollback().await?;
        return Err(ApiError::NotFound);
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
    let mut answer = serde_json::to_value(&workflow)
        .map_err(|e| ApiError::Internal(format!("workflow json: {e}")))?;
    answer["token"] = token.unwrap_or(Value::Null);
    Ok(Json(answer))
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
        tx.rollback().await?;
        return Err(ApiError::NotFound);
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

/// `POST /v1/admin/attestation-uses/prune` body.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct Prune {
    #[serde(default)]
    batch: Option<u32>,
}

/// `POST /v1/admin/attestation-uses/prune`: deletes up to `batch` (default 5,000) single-use
/// records that expired by database time, in one short transaction; answers how many. Call it
/// again while it answers a full batch (`gatehouse prune-uses` does).
pub(super) async fn prune_uses(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Json<Prune>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    authorize(&state, &headers)?;
    let batch = json_body(body)?.batch.unwrap_or(DEFAULT_PRUNE_BATCH);
    if !(1..=MAX_PRUNE_BATCH).contains(&batch) {
        return Err(ApiError::InvalidInput(format!(
            "batch must be 1 to {MAX_PRUNE_BATCH}"
        )));
    }
    let mut tx = state.db.begin().await?;
    let now = tx.now().await?;
    let deleted = tx.prune_uses(now, batch).await?;
    tx.commit().await?;
    if deleted > 0 {
        tracing::info!(deleted, batch, "expired single-use records pruned");
    }
    Ok(Json(json!({ "deleted": deleted, "batch": batch })))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
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
