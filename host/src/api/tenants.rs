//! The admin API's tenants: create and list. Only `root` exists after the first migration; an
//! attestor configured for another tenant (`acme`) admits machines only once that tenant
//! exists (until then every such join fails for its missing row). A tenant is an id and
//! nothing else; creating one commits with its event, `tenant.created`.

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use serde::{Deserialize, Serialize};

use super::AppState;
use super::admin::{ListPage, PageKey, authorize, is_id, page};
use super::error::ApiError;
use crate::store::NewEvent;

/// `POST /v1/admin/tenants` body.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct CreateTenant {
    id: String,
}

/// A tenant as the API shows it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct TenantView {
    id: String,
}

/// The tenants list's cursor: the last id of the previous page.
#[derive(Debug, Clone)]
pub(super) struct TenantCursor(String);

impl std::fmt::Display for TenantCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl PageKey for TenantCursor {
    fn parse(text: &str) -> Option<Self> {
        is_id(text).then(|| Self(text.to_owned()))
    }
}

/// `POST /v1/admin/tenants`: 400 if the id is not an id or the tenant exists.
pub(super) async fn create_tenant(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Json<CreateTenant>, JsonRejection>,
) -> Result<Json<TenantView>, ApiError> {
    authorize(&state, &headers)?;
    let Json(req) = body.map_err(ApiError::from)?;
    if !is_id(&req.id) {
        return Err(ApiError::InvalidInput("id is not an id".into()));
    }
    let mut tx = state.db.begin().await?;
    if !tx.create_tenant(&req.id).await? {
        tx.rollback().await?;
        return Err(ApiError::InvalidInput(format!(
            "tenant `{}` exists already",
            req.id
        )));
    }
    let at = tx.now().await?;
    tx.insert_event(&NewEvent {
        at,
        kind: "tenant.created".into(),
        tenant_id: Some(req.id.clone()),
        node_id: None,
        attestor: None,
        reason: None,
        token_id: None,
        payload: serde_json::json!({}),
    })
    .await?;
    tx.commit().await?;
    tracing::info!(tenant_id = %req.id, "tenant created");
    Ok(Json(TenantView { id: req.id }))
}

/// `GET /v1/admin/tenants?after=&limit=`: by id, a page at a time.
pub(super) async fn list_tenants(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<ListPage>, QueryRejection>,
) -> Result<axum::response::Response, ApiError> {
    authorize(&state, &headers)?;
    let (after, limit) = query?.0.resolve::<TenantCursor>()?;
    let mut tx = state.db.begin().await?;
    let after = after.map(|c| c.0).unwrap_or_default();
    let ids = tx.list_tenants(&after, limit).await?;
    tx.commit().await?;
    let views: Vec<TenantView> = ids.into_iter().map(|id| TenantView { id }).collect();
    Ok(page(views, limit, |v: &TenantView| {
        TenantCursor(v.id.clone())
    }))
}
