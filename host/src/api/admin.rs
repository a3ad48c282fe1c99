//! The admin API, behind a bearer key: tokens, nodes, events, attestors.
//!
//! Every write is one transaction, committed, that also appends the event saying what the
//! operator did (`node.cordoned`, `node.deleted`, ...). A node action first locks the node's
//! row ([`crate::store::Tx::lock_node`]), so what it reports (the certificates it revoked, the
//! bindings it freed) is what it changed. An action that would change nothing (cordoning a
//! cordoned node) answers `"changed": false` and writes no event.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};

use super::AppState;
use super::error::ApiError;
use crate::runtime::AttestorSummary;
use crate::store::{
    AuditRow, Cursor, EventRow, NewEvent, NewToken, NodeRole, NodeRow, PoolCursor, Revocation,
    TokenExpect, TokenRole, TokenRow, Tx,
};

/// Checks `Authorization: Bearer <key>` against the configured key's hash in constant time.
/// A presented key shorter than the host's minimum is refused before hashing: the host never
/// starts with such a key ([`crate::app::MIN_ADMIN_KEY_BYTES`]), so only its length leaks.
pub(super) fn authorize(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let presented = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|k| k.len() >= crate::app::MIN_ADMIN_KEY_BYTES)
        .ok_or(ApiError::Unauthenticated)?;
    // The current key, or the previous one until its rotation window ends (`AdminKeys`).
    if state
        .admin_keys
        .accepts(presented, super::publish::wall_clock_ms())
    {
        Ok(())
    } else {
        Err(ApiError::Unauthenticated)
    }
}

/// `POST /v1/admin/tokens` body.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct CreateToken {
    role: String,
    #[serde(default = "one")]
    uses: u32,
    ttl_seconds: u64,
    #[serde(default = "root")]
    tenant_id: String,
    #[serde(default)]
    pool_id: Option<String>,
    #[serde(default)]
    site_id: Option<String>,
    #[serde(default)]
    expect: Expect,
    #[serde(default)]
    reclaim: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Expect {
    product_uuid: Option<String>,
    mac: Option<String>,
    node_id: Option<String>,
}

/// An id as this API takes them: 1 to 128 ASCII letters, digits, `-`, `_` or `.`.
pub(super) fn is_id(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= 128
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// Puts `prefix` in front of an invalid-input message (which field it was about).
fn prefixed(prefix: &'static str) -> impl Fn(ApiError) -> ApiError {
    move |e| match e {
        ApiError::InvalidInput(m) => ApiError::InvalidInput(format!("{prefix}{m}")),
        other => other,
    }
}

fn one() -> u32 {
    1
}
fn root() -> String {
    "root".into()
}

/// The token, shown once.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct CreatedToken {
    id: String,
    token: String,
    expires_at: i64,
}

const MAX_TTL_SECONDS: u64 = 30 * 24 * 3600;

pub(super) async fn create_token(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Json<CreateToken>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<CreatedToken>, ApiError> {
    authorize(&state, &headers)?;
    let Json(req) = body.map_err(ApiError::from)?;
    let role: TokenRole = req.role.parse().map_err(|_| {
        ApiError::InvalidInput("role must be node, site, provisioned or discovery".into())
    })?;
    if !(1..=100_000).contains(&req.uses) {
        return Err(ApiError::InvalidInput("uses must be 1 to 100000".into()));
    }
    if !(60..=MAX_TTL_SECONDS).contains(&req.ttl_seconds) {
        return Err(ApiError::InvalidInput(format!(
            "ttlSeconds must be 60 to {MAX_TTL_SECONDS}"
        )));
    }
    for (what, v) in [
        ("tenantId", Some(&req.tenant_id)),
        ("poolId", req.pool_id.as_ref()),
        ("siteId", req.site_id.as_ref()),
        ("expect.nodeId", req.expect.node_id.as_ref()),
    ] {
        if let Some(v) = v
            && !is_id(v)
        {
            return Err(ApiError::InvalidInput(format!("{what} is not an id")));
        }
    }
    // What is stored is what joins compare against: normalised here, refused if malformed.
    let expect = TokenExpect {
        product_uuid: req
            .expect
            .product_uuid
            .as_deref()
            .map(|u| super::provisioning::product_uuid(u).map_err(prefixed("expect.")))
            .transpose()?,
        mac: req
            .expect
            .mac
            .as_deref()
            .map(|m| super::provisioning::mac(m).map_err(prefixed("expect.mac: ")))
            .transpose()?,
        node_id: req.expect.node_id,
    };
    let secret: [u8; 32] = rand::random();
    let token = gatehouse_proto::TokenString {
        id: crate::join::new_id("tok_"),
        secret: secret.to_vec(),
    };
    let mut tx = state.db.begin().await?;
    // A token naming a tenant or pool that does not exist could never admit anyone (and the
    // foreign keys would make the insert fail as a 5xx): say so instead.
    if !tx.tenant_exists(&req.tenant_id).await? {
        tx.rollback().await?;
        return Err(ApiError::InvalidInput(format!(
            "tenant {} does not exist",
            req.tenant_id
        )));
    }
    if let Some(pool_id) = &req.pool_id
        && tx.pool(&req.tenant_id, pool_id).await?.is_none()
    {
        tx.rollback().await?;
        return Err(ApiError::InvalidInput(format!(
            "pool {pool_id} does not exist in tenant {}",
            req.tenant_id
        )));
    }
    let now = tx.now().await?;
    let expires_at = now + (req.ttl_seconds as i64) * 1000;
    tx.insert_token(&NewToken {
        id: token.id.clone(),
        role,
        secret_sha256: Sha256::digest(secret).into(),
        tenant_id: req.tenant_id,
        pool_id: req.pool_id,
        site_id: req.site_id,
        expires_at,
        uses: req.uses,
        expect,
        reclaim: req.reclaim,
        created_at: now,
    })
    .await?;
    tx.commit().await?;
    tracing::info!(token_id = %token.id, role = %role.as_str(), uses = req.uses, "token created");
    Ok(Json(CreatedToken {
        id: token.id.clone(),
        token: token.to_text(),
        expires_at,
    }))
}

/// The header naming where the next page starts, present when a page came back full.
pub(super) const NEXT_CURSOR: &str = "x-next-cursor";
/// Rows per page when the client names no `limit`, and the most it may name.
pub(super) const DEFAULT_PAGE: u32 = 500;
pub(super) const MAX_PAGE: u32 = 1000;

/// A position in a paged list, as the client sends back the [`NEXT_CURSOR`] it was given:
/// `(created_at, id)` for lists in creation order, `(tenant, id)` for pools, the id for events
/// and audits.
pub(super) trait PageKey: Sized + std::fmt::Display {
    /// The key as its `Display` wrote it; `None` for anything else.
    fn parse(text: &str) -> Option<Self>;
}

impl PageKey for Cursor {
    fn parse(text: &str) -> Option<Self> {
        Cursor::parse(text)
    }
}

impl PageKey for PoolCursor {
    fn parse(text: &str) -> Option<Self> {
        PoolCursor::parse(text)
    }
}

/// Events and audits: the id of the last row of the previous page.
impl PageKey for i64 {
    fn parse(text: &str) -> Option<Self> {
        text.parse().ok()
    }
}

/// `?after=CURSOR&limit=N` of every admin list: one short transaction per page, `limit` rows
/// at most ([`DEFAULT_PAGE`] unless named, never above [`MAX_PAGE`]).
#[derive(Debug, Default, Deserialize)]
pub(super) struct ListPage {
    #[serde(default)]
    pub(super) after: Option<String>,
    #[serde(default)]
    pub(super) limit: Option<u32>,
}

impl ListPage {
    /// The checked limit, and the cursor if the client named one (the caller knows where its
    /// list starts).
    pub(super) fn resolve<K: PageKey>(&self) -> Result<(Option<K>, u32), ApiError> {
        let limit = self.limit.unwrap_or(DEFAULT_PAGE);
        if !(1..=MAX_PAGE).contains(&limit) {
            return Err(ApiError::InvalidInput(format!(
                "limit must be 1 to {MAX_PAGE}"
            )));
        }
        let after = match &self.after {
            None => None,
            Some(text) => Some(K::parse(text).ok_or_else(|| {
                ApiError::InvalidInput("after is not a cursor of this list".into())
            })?),
        };
        Ok((after, limit))
    }
}

/// A page as JSON, with [`NEXT_CURSOR`] (the key of its last row) when it is full.
pub(super) fn page<T: Serialize, K: PageKey>(
    rows: Vec<T>,
    limit: u32,
    key: impl Fn(&T) -> K,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let next = (rows.len() >= limit as usize)
        .then(|| rows.last().map(&key))
        .flatten();
    let mut response = Json(rows).into_response();
    if let Some(next) = next
        && let Ok(value) = axum::http::HeaderValue::from_str(&next.to_string())
    {
        response.headers_mut().insert(NEXT_CURSOR, value);
    }
    response
}

/// `GET /v1/admin/tokens?after=&limit=`: oldest first, a page at a time.
pub(super) async fn list_tokens(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<ListPage>, axum::extract::rejection::QueryRejection>,
) -> Result<axum::response::Response, ApiError> {
    authorize(&state, &headers)?;
    let (after, limit) = query?.0.resolve()?;
    let after = after.unwrap_or_else(Cursor::start);
    let mut tx = state.db.begin().await?;
    let tokens = tx.list_tokens_page(&after, limit).await?;
    tx.commit().await?;
    Ok(page(tokens, limit, |t: &TokenRow| Cursor {
        created_at: t.created_at,
        id: t.id.clone(),
    }))
}

pub(super) async fn revoke_token(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    authorize(&state, &headers)?;
    let mut tx = state.db.begin().await?;
    let revoked = tx.revoke_token(&id).await?;
    tx.commit().await?;
    if !revoked {
        return Err(ApiError::NotFound);
    }
    tracing::info!(token_id = %id, "token revoked");
    Ok(Json(serde_json::json!({ "id": id, "revoked": true })))
}

/// `GET /v1/admin/nodes?after=&limit=`: oldest first, a page at a time.
pub(super) async fn list_nodes(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<ListPage>, axum::extract::rejection::QueryRejection>,
) -> Result<axum::response::Response, ApiError> {
    authorize(&state, &headers)?;
    let (after, limit) = query?.0.resolve()?;
    let after = after.unwrap_or_else(Cursor::start);
    let mut tx = state.db.begin().await?;
    let nodes = tx.list_nodes_page(&after, limit).await?;
    tx.commit().await?;
    Ok(page(nodes, limit, |n: &NodeRow| Cursor {
        created_at: n.created_at,
        id: n.id.clone(),
    }))
}

/// A certificate as `GET /v1/admin/nodes/{id}` shows it (without its DER).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct CertSummary {
    serial: String,
    generation: u32,
    role: NodeRole,
    not_before: i64,
    not_after: i64,
    /// Why it was revoked; `null` while it is live.
    revoked: Option<Revocation>,
    statements: Vec<String>,
    created_at: i64,
}

/// A hardware identity bound to a node.
#[derive(Debug, Serialize)]
pub(super) struct Binding {
    kind: String,
    value: String,
}

/// `GET /v1/admin/nodes/{id}`: the node row (with `deletedAt` when an operator deleted it),
/// its certificates newest first and its bindings.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct NodeDetail {
    #[serde(flatten)]
    node: NodeRow,
    certificates: Vec<CertSummary>,
    bindings: Vec<Binding>,
}

/// The node id of a path, checked.
fn path_node_id(id: &str) -> Result<(), ApiError> {
    if is_id(id) {
        Ok(())
    } else {
        Err(ApiError::InvalidInput("the node id is not an id".into()))
    }
}

/// The certificate serial of a path (hex, up to 20 bytes as X.509 allows), lowercased.
fn path_serial(serial: &str) -> Result<String, ApiError> {
    if !serial.is_empty() && serial.len() <= 40 && serial.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(serial.to_ascii_lowercase())
    } else {
        Err(ApiError::InvalidInput(
            "the serial is not a certificate serial (hex)".into(),
        ))
    }
}

/// Locks the node an action is about; `None` if there is no such node or it is deleted (the
/// caller rolls back and answers [`ApiError::NotFound`]).
async fn lock_live_node(tx: &mut Tx, id: &str) -> Result<Option<NodeRow>, ApiError> {
    Ok(tx.lock_node(id).await?.filter(|n| n.deleted_at.is_none()))
}

/// What every operator action on a node starts with: the admin key, a well-formed id, and a
/// transaction holding the live (not deleted) node's row locked; `NotFound` otherwise.
pub(super) async fn begin_node_action(
    state: &AppState,
    headers: &HeaderMap,
    id: &str,
) -> Result<(Tx, NodeRow), ApiError> {
    authorize(state, headers)?;
    path_node_id(id)?;
    let mut tx = state.db.begin().await?;
    match lock_live_node(&mut tx, id).await? {
        Some(node) => Ok((tx, node)),
        None => {
            tx.rollback().await?;
            Err(ApiError::NotFound)
        }
    }
}

/// Appends the event of an operator's action on `node`.
pub(super) async fn node_event(
    tx: &mut Tx,
    kind: &str,
    node: &NodeRow,
    at: i64,
    payload: serde_json::Value,
) -> Result<(), ApiError> {
    tx.insert_event(&NewEvent {
        at,
        kind: kind.to_owned(),
        tenant_id: Some(node.tenant_id.clone()),
        node_id: Some(node.id.clone()),
        attestor: None,
        reason: None,
        token_id: None,
        payload,
    })
    .await?;
    Ok(())
}

/// How many of a node's certificates are live (not revoked).
async fn live_certs(tx: &mut Tx, node_id: &str) -> Result<u64, ApiError> {
    let certs = tx.node_certs(node_id).await?;
    Ok(certs.iter().filter(|c| c.revoked.is_none()).count() as u64)
}

/// `GET /v1/admin/nodes/{id}`: also a deleted node, so operators see what happened to it.
pub(super) async fn show_node(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<NodeDetail>, ApiError> {
    authorize(&state, &headers)?;
    path_node_id(&id)?;
    let mut tx = state.db.begin().await?;
    let Some(node) = tx.node(&id).await? else {
        tx.rollback().await?;
        return Err(ApiError::NotFound);
    };
    let certificates = tx
        .node_certs(&id)
        .await?
        .into_iter()
        .map(|c| CertSummary {
            serial: c.serial,
            generation: c.generation,
            role: c.role,
            not_before: c.not_before,
            not_after: c.not_after,
            revoked: c.revoked,
            statements: c.statements,
            created_at: c.created_at,
        })
        .collect();
    let bindings = tx
        .node_bindings(&id)
        .await?
        .into_iter()
        .map(|(kind, value)| Binding { kind, value })
        .collect();
    tx.commit().await?;
    Ok(Json(NodeDetail {
        node,
        certificates,
        bindings,
    }))
}

/// `POST /v1/admin/nodes/{id}/cordon`.
pub(super) async fn cordon_node(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    set_cordon(&state, &headers, &id, true).await
}

/// `POST /v1/admin/nodes/{id}/uncordon`.
pub(super) async fn uncordon_node(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    set_cordon(&state, &headers, &id, false).await
}

async fn set_cordon(
    state: &AppState,
    headers: &HeaderMap,
    id: &str,
    cordoned: bool,
) -> Result<Json<serde_json::Value>, ApiError> {
    let (mut tx, node) = begin_node_action(state, headers, id).await?;
    let changed = node.cordoned != cordoned;
    if changed {
        let at = tx.now().await?;
        if !tx.set_cordoned(id, cordoned, at).await? {
            return Err(ApiError::NotFound);
        }
        let kind = if cordoned {
            "node.cordoned"
        } else {
            "node.uncordoned"
        };
        node_event(&mut tx, kind, &node, at, json!({ "cordoned": cordoned })).await?;
    }
    tx.commit().await?;
    if changed {
        tracing::info!(node_id = %id, cordoned, "node cordon changed");
    }
    Ok(Json(
        json!({ "id": id, "cordoned": cordoned, "changed": changed }),
    ))
}

/// `POST /v1/admin/nodes/{id}/retire`: the node never joins or renews again; its
/// certificates are revoked (`node-removed`). It stays listed.
pub(super) async fn retire_node(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let (mut tx, node) = begin_node_action(&state, &headers, &id).await?;
    let mut revoked = 0;
    let changed = !node.retired;
    if changed {
        revoked = live_certs(&mut tx, &id).await?;
        let at = tx.now().await?;
        if !tx.retire_node(&id, at).await? {
            return Err(ApiError::NotFound);
        }
        node_event(
            &mut tx,
            "node.retired",
            &node,
            at,
            json!({ "certificatesRevoked": revoked }),
        )
        .await?;
    }
    tx.commit().await?;
    if changed {
        tracing::info!(node_id = %id, certificates_revoked = revoked, "node retired");
    }
    Ok(Json(json!({
        "id": id,
        "retired": true,
        "changed": changed,
        "certificatesRevoked": revoked,
    })))
}

/// `DELETE /v1/admin/nodes/{id}`: retires the node, revokes its certificates, frees its
/// bindings and hardware key (so the machine can join again as a new node) and hides it from
/// the list. `GET /v1/admin/nodes/{id}` still shows it, with `deletedAt`.
pub(super) async fn delete_node(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let (mut tx, node) = begin_node_action(&state, &headers, &id).await?;
    let revoked = live_certs(&mut tx, &id).await?;
    let bindings: Vec<_> = tx
        .node_bindings(&id)
        .await?
        .into_iter()
        .map(|(kind, value)| Binding { kind, value })
        .collect();
    let at = tx.now().await?;
    if !tx.delete_node(&id, at).await? {
        return Err(ApiError::NotFound);
    }
    let hardware_key_freed = node.hardware_key.is_some();
    node_event(
        &mut tx,
        "node.deleted",
        &node,
        at,
        json!({
            "certificatesRevoked": revoked,
            "bindingsFreed": bindings,
            "hardwareKeyFreed": hardware_key_freed,
        }),
    )
    .await?;
    tx.commit().await?;
    tracing::info!(
        node_id = %id,
        certificates_revoked = revoked,
        bindings_freed = bindings.len(),
        "node deleted"
    );
    Ok(Json(json!({
        "id": id,
        "deletedAt": at,
        "certificatesRevoked": revoked,
        "bindingsFreed": bindings,
        "hardwareKeyFreed": hardware_key_freed,
    })))
}

/// `POST /v1/admin/nodes/{id}/revoke-identity`: raises the node's identity generation and
/// revokes every certificate it holds (`identity-revoked`); the machine joins again only with
/// a token that re-keys it (`expect.nodeId`, or `reclaim`) or an attestor that proves it
/// afresh. Answers the new generation.
pub(super) async fn revoke_node_identity(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let (mut tx, node) = begin_node_action(&state, &headers, &id).await?;
    if node.retired {
        tx.rollback().await?;
        return Err(ApiError::InvalidInput(
            "the node is retired: it has no identity left to revoke".into(),
        ));
    }
    let revoked = live_certs(&mut tx, &id).await?;
    let at = tx.now().await?;
    let Some(generation) = tx.revoke_identity(&id, at).await? else {
        return Err(ApiError::NotFound);
    };
    let previous = node.identity_generation;
    node_event(
        &mut tx,
        "node.identity-revoked",
        &node,
        at,
        json!({
            "previousGeneration": previous,
            "generation": generation,
            "certificatesRevoked": revoked,
        }),
    )
    .await?;
    tx.commit().await?;
    tracing::info!(node_id = %id, generation, certificates_revoked = revoked, "node identity revoked");
    Ok(Json(json!({
        "id": id,
        "previousGeneration": previous,
        "generation": generation,
        "certificatesRevoked": revoked,
    })))
}

/// `POST /v1/admin/nodes/{id}/certs/{serial}/revoke`: revokes one certificate of the node
/// (`operator`). [`ApiError::NotFound`] if the node has no certificate of that serial.
pub(super) async fn revoke_node_cert(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path((id, serial)): Path<(String, String)>,
) -> Result<Json<serde_json::Value>, ApiError> {
    authorize(&state, &headers)?;
    let serial = path_serial(&serial)?;
    let (mut tx, node) = begin_node_action(&state, &headers, &id).await?;
    let Some(cert) = tx
        .node_certs(&id)
        .await?
        .into_iter()
        .find(|c| c.serial == serial)
    else {
        tx.rollback().await?;
        return Err(ApiError::NotFound);
    };
    let changed = cert.revoked.is_none();
    let reason = cert.revoked.unwrap_or(Revocation::Operator);
    if changed {
        let at = tx.now().await?;
        if !tx.revoke_node_cert(&id, &serial).await? {
            return Err(ApiError::NotFound);
        }
        node_event(
            &mut tx,
            "node.cert-revoked",
            &node,
            at,
            json!({ "serial": serial, "generation": cert.generation }),
        )
        .await?;
    }
    tx.commit().await?;
    if changed {
        tracing::info!(node_id = %id, %serial, "node certificate revoked");
    }
    Ok(Json(json!({
        "id": id,
        "serial": serial,
        "revoked": reason,
        "changed": changed,
    })))
}

/// `GET /v1/admin/events?after=ID&limit=N`. Events come in feed order, which on Postgres is
/// not id order: the cursor is the id of the last event of the previous page (what
/// [`NEXT_CURSOR`] names), and no event is skipped or repeated (see `Tx::event_feed`). A
/// follower that reached the end keeps asking with the id of the last event it saw.
pub(super) async fn list_events(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<ListPage>, axum::extract::rejection::QueryRejection>,
) -> Result<axum::response::Response, ApiError> {
    authorize(&state, &headers)?;
    let (after, limit) = query?.0.resolve::<i64>()?;
    let mut tx = state.db.begin().await?;
    let events = tx.event_feed(after.unwrap_or(0), limit).await?;
    tx.commit().await?;
    Ok(page(events, limit, |e: &EventRow| e.id))
}

/// `GET /v1/admin/audits?after=ID&limit=N`: in id order.
pub(super) async fn list_audits(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<ListPage>, axum::extract::rejection::QueryRejection>,
) -> Result<axum::response::Response, ApiError> {
    authorize(&state, &headers)?;
    let (after, limit) = query?.0.resolve::<i64>()?;
    let mut tx = state.db.begin().await?;
    let audits = tx.list_audits(after.unwrap_or(0), limit).await?;
    tx.commit().await?;
    Ok(page(audits, limit, |a: &AuditRow| a.id))
}

pub(super) async fn list_attestors(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Vec<AttestorSummary>>, ApiError> {
    authorize(&state, &headers)?;
    let list = state.join.runtime().attestors();
    Ok(Json(list))
}
