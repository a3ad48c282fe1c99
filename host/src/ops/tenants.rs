//! Tenants: create and list. Only `root` exists after the first migration; an attestor
//! configured for another tenant (`acme`) admits machines only once that tenant exists. A
//! tenant is an id and nothing else; creating one commits with its event, `tenant.created`.

use serde_json::json;

use super::types::{CreateTenant, Tenant};
use super::{Actor, Id, OpsError, Page, PageRequest, event, record};
use crate::store::Db;

/// Creates a tenant; [`OpsError::InvalidInput`] if it exists.
pub async fn create(db: &Db, actor: &Actor, req: CreateTenant) -> Result<Tenant, OpsError> {
    let mut tx = db.begin().await?;
    if !tx.create_tenant(&req.id).await? {
        tx.rollback().await?;
        return Err(OpsError::invalid(format!(
            "tenant `{}` exists already",
            req.id
        )));
    }
    let at = tx.now().await?;
    let mut e = event(at, "tenant.created", json!({}));
    e.tenant_id = Some(req.id.to_string());
    record(&mut tx, actor, &e).await?;
    tx.commit().await?;
    tracing::info!(tenant_id = %req.id, %actor, "tenant created");
    Ok(Tenant {
        id: req.id.into_string(),
    })
}

/// Tenants by id, a page at a time.
pub async fn list(db: &Db, page: &PageRequest) -> Result<Page<Tenant>, OpsError> {
    let (after, limit) = page.resolve::<Id>()?;
    let mut tx = db.begin().await?;
    let after = after.map(Id::into_string).unwrap_or_default();
    let ids = tx.list_tenants(&after, limit).await?;
    tx.commit().await?;
    let rows: Vec<Tenant> = ids.into_iter().map(|id| Tenant { id }).collect();
    Ok(Page::new(rows, limit, |t: &Tenant| t.id.clone()))
}
