//! The admin API, behind a bearer key: tokens, nodes, events, attestors.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::AppState;
use super::error::ApiError;
use crate::runtime::AttestorSummary;
use crate::store::{AuditRow, EventRow, NewToken, NodeRow, TokenExpect, TokenRole, TokenRow};

/// Checks `Authorization: Bearer <key>` against the configured key's hash in constant time.
pub(super) fn authorize(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let presented = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or(ApiError::Unauthenticated)?;
    let hash: [u8; 32] = Sha256::digest(presented.trim().as_bytes()).into();
    if bool::from(hash.ct_eq(&state.admin_key_sha256)) {
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
    let Json(req) = body.map_err(|e| ApiError::InvalidInput(e.body_text()))?;
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
            && (v.is_empty()
                || v.len() > 128
                || !v
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)))
        {
            return Err(ApiError::InvalidInput(format!("{what} is not an id")));
        }
    }
    let secret: [u8; 32] = rand::random();
    let token = gatehouse_proto::TokenString {
        id: crate::join::new_id("tok_"),
        secret: secret.to_vec(),
    };
    let mut tx = state.db.begin().await?;
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
        expect: TokenExpect {
            product_uuid: req.expect.product_uuid.map(|u| u.to_ascii_lowercase()),
            mac: req.expect.mac.map(|m| m.to_ascii_lowercase()),
            node_id: req.expect.node_id,
        },
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

pub(super) async fn list_tokens(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Vec<TokenRow>>, ApiError> {
    authorize(&state, &headers)?;
    let mut tx = state.db.begin().await?;
    let tokens = tx.list_tokens().await?;
    tx.commit().await?;
    Ok(Json(tokens))
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

pub(super) async fn list_nodes(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Vec<NodeRow>>, ApiError> {
    authorize(&state, &headers)?;
    let mut tx = state.db.begin().await?;
    let nodes = tx.list_nodes().await?;
    tx.commit().await?;
    Ok(Json(nodes))
}

/// `GET /v1/admin/events?after=ID&limit=N`.
#[derive(Debug, Deserialize)]
pub(super) struct Page {
    #[serde(default)]
    after: i64,
    #[serde(default = "default_limit")]
    limit: u32,
}

fn default_limit() -> u32 {
    100
}

pub(super) async fn list_events(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(page): Query<Page>,
) -> Result<Json<Vec<EventRow>>, ApiError> {
    authorize(&state, &headers)?;
    let limit = page.limit.clamp(1, 1000);
    let mut tx = state.db.begin().await?;
    let events = tx.list_events(page.after, limit).await?;
    tx.commit().await?;
    Ok(Json(events))
}

pub(super) async fn list_audits(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(page): Query<Page>,
) -> Result<Json<Vec<AuditRow>>, ApiError> {
    authorize(&state, &headers)?;
    let limit = page.limit.clamp(1, 1000);
    let mut tx = state.db.begin().await?;
    let audits = tx.list_audits(page.after, limit).await?;
    tx.commit().await?;
    Ok(Json(audits))
}

pub(super) async fn list_attestors(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Vec<AttestorSummary>>, ApiError> {
    authorize(&state, &headers)?;
    let list: Vec<_> = state.join.runtime().attestors().cloned().collect();
    Ok(Json(list))
}
