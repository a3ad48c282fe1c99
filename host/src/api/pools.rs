//! The admin API's pools: create, list, show, and replace a pool's policy.
//!
//! A pool's policy is `{ joinAttestors?: [id, ...] }`: when set, only those attestors may
//! admit a machine into the pool (JoinService refuses any other with `pool-attestor`, see
//! [`crate::join::policy::pool_admits`]). The list must hold 1 to 16 distinct ids of
//! attestors this host runs (`join-token` and every loaded attestor); anything else is
//! INVALID_INPUT. Absent (or `null`) means every attestor admits. An update replaces the
//! policy as a whole, as the seed's `pools.update` does: `{"policy": {}}` lifts the list.
//! Each write commits with its event, `pool.created` or `pool.updated` (an update that changes
//! nothing answers `"changed": false` and writes no event).

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::AppState;
use super::admin::{ListPage, authorize, is_id, page};
use super::error::ApiError;
use crate::join::DEFAULT_ATTESTOR;
use crate::store::{NewEvent, PoolCursor, PoolRow, Tx};

/// Most attestors a pool's `joinAttestors` may list.
pub const MAX_JOIN_ATTESTORS: usize = 16;

/// A pool's policy as the API takes it. `joinAttestors` is taken as raw JSON so every wrong
/// shape gets its own INVALID_INPUT message.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct PolicyBody {
    #[serde(default)]
    join_attestors: Option<Value>,
}

/// `POST /v1/admin/pools` body.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct CreatePool {
    #[serde(default = "root")]
    tenant_id: String,
    id: String,
    #[serde(default)]
    policy: PolicyBody,
    #[serde(default)]
    owner: Option<String>,
}

/// `PUT`/`POST /v1/admin/pools/{tenant}/{id}` body: the whole new policy.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct UpdatePool {
    policy: PolicyBody,
}

fn root() -> String {
    "root".into()
}

/// A pool's policy as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct PolicyView {
    #[serde(skip_serializing_if = "Option::is_none")]
    join_attestors: Option<Vec<String>>,
}

/// A pool as the API shows it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct PoolView {
    tenant_id: String,
    id: String,
    policy: PolicyView,
    owner: Option<String>,
}

impl From<PoolRow> for PoolView {
    fn from(p: PoolRow) -> Self {
        Self {
            tenant_id: p.tenant_id,
            id: p.id,
            policy: PolicyView {
                join_attestors: p.join_attestors,
            },
            owner: p.owner,
        }
    }
}

/// The answer to an update: the pool as it is now, and whether the policy changed.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct UpdatedPool {
    #[serde(flatten)]
    pool: PoolView,
    changed: bool,
}

/// Checks a `joinAttestors` value: absent or `null`, or an array of 1 to
/// [`MAX_JOIN_ATTESTORS`] distinct strings, each the id of an attestor `runs`.
fn join_attestors(
    value: Option<&Value>,
    runs: impl Fn(&str) -> bool,
) -> Result<Option<Vec<String>>, ApiError> {
    let invalid = |m: String| Err(ApiError::InvalidInput(format!("policy.joinAttestors {m}")));
    let list = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(list)) => list,
        Some(_) => return invalid("must be an array of attestor ids".into()),
    };
    if list.is_empty() || list.len() > MAX_JOIN_ATTESTORS {
        return invalid(format!(
            "must list 1 to {MAX_JOIN_ATTESTORS} attestors, not {}",
            list.len()
        ));
    }
    let mut ids: Vec<String> = Vec::with_capacity(list.len());
    for v in list {
        let Some(id) = v.as_str() else {
            return invalid(format!("holds {v}, which is not an attestor id"));
        };
        if !is_id(id) || !runs(id) {
            return invalid(format!("names `{id}`, which this host does not run"));
        }
        if ids.iter().any(|seen| seen == id) {
            return invalid(format!("lists `{id}` twice"));
        }
        ids.push(id.to_owned());
    }
    Ok(Some(ids))
}

/// Whether this host runs attestor `id`: `join-token` and every loaded attestor.
fn runs(state: &AppState) -> impl Fn(&str) -> bool + '_ {
    move |id| id == DEFAULT_ATTESTOR || state.join.runtime().contains(id)
}

fn check_id(what: &str, v: &str) -> Result<(), ApiError> {
    if is_id(v) {
        Ok(())
    } else {
        Err(ApiError::InvalidInput(format!("{what} is not an id")))
    }
}

async fn pool_event(
    tx: &mut Tx,
    kind: &str,
    pool: &PoolRow,
    payload: Value,
) -> Result<(), ApiError> {
    let at = tx.now().await?;
    tx.insert_event(&NewEvent {
        at,
        kind: kind.to_owned(),
        tenant_id: Some(pool.tenant_id.clone()),
        node_id: None,
        attestor: None,
        reason: None,
        token_id: None,
        payload,
    })
    .await?;
    Ok(())
}

/// `POST /v1/admin/pools`.
pub(super) async fn create_pool(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Json<CreatePool>, JsonRejection>,
) -> Result<Json<PoolView>, ApiError> {
    authorize(&state, &headers)?;
    let Json(req) = body.map_err(ApiError::from)?;
    check_id("tenantId", &req.tenant_id)?;
    check_id("id", &req.id)?;
    if let Some(owner) = &req.owner {
        check_id("owner", owner)?;
    }
    let pool = PoolRow {
        join_attestors: join_attestors(req.policy.join_attestors.as_ref(), runs(&state))?,
        tenant_id: req.tenant_id,
        id: req.id,
        owner: req.owner,
    };
    let mut tx = state.db.begin().await?;
    if !tx.tenant_exists(&pool.tenant_id).await? {
        tx.rollback().await?;
        return Err(ApiError::InvalidInput(format!(
            "tenant `{}` does not exist",
            pool.tenant_id
        )));
    }
    if !tx.create_pool(&pool).await? {
        tx.rollback().await?;
        return Err(ApiError::InvalidInput(format!(
            "pool {}/{} exists already",
            pool.tenant_id, pool.id
        )));
    }
    let view = PoolView::from(pool.clone());
    pool_event(
        &mut tx,
        "pool.created",
        &pool,
        json!({ "poolId": pool.id, "policy": view.policy, "owner": pool.owner }),
    )
    .await?;
    tx.commit().await?;
    tracing::info!(tenant_id = %pool.tenant_id, pool_id = %pool.id, "pool created");
    Ok(Json(view))
}

/// `GET /v1/admin/pools?after=&limit=`: by tenant and id, a page at a time.
pub(super) async fn list_pools(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<ListPage>, QueryRejection>,
) -> Result<axum::response::Response, ApiError> {
    authorize(&state, &headers)?;
    let (after, limit) = query?.0.resolve::<PoolCursor>()?;
    let mut tx = state.db.begin().await?;
    let pools = tx.list_pools(&after.unwrap_or_default(), limit).await?;
    tx.commit().await?;
    let views: Vec<PoolView> = pools.into_iter().map(PoolView::from).collect();
    Ok(page(views, limit, |v: &PoolView| PoolCursor {
        tenant_id: v.tenant_id.clone(),
        id: v.id.clone(),
    }))
}

/// `GET /v1/admin/pools/{tenant}/{id}`.
pub(super) async fn show_pool(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path((tenant, id)): Path<(String, String)>,
) -> Result<Json<PoolView>, ApiError> {
    authorize(&state, &headers)?;
    check_id("the tenant", &tenant)?;
    check_id("the pool id", &id)?;
    let mut tx = state.db.begin().await?;
    let pool = tx.pool(&tenant, &id).await?;
    tx.commit().await?;
    pool.map(|p| Json(p.into())).ok_or(ApiError::NotFound)
}

/// `PUT` (or `POST`) `/v1/admin/pools/{tenant}/{id}`: replaces the pool's policy as a whole.
pub(super) async fn update_pool(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path((tenant, id)): Path<(String, String)>,
    body: Result<Json<UpdatePool>, JsonRejection>,
) -> Result<Json<UpdatedPool>, ApiError> {
    authorize(&state, &headers)?;
    check_id("the tenant", &tenant)?;
    check_id("the pool id", &id)?;
    let Json(req) = body.map_err(ApiError::from)?;
    let attestors = join_attestors(req.policy.join_attestors.as_ref(), runs(&state))?;
    let mut tx = state.db.begin().await?;
    let Some(before) = tx.pool(&tenant, &id).await? else {
        tx.rollback().await?;
        return Err(ApiError::NotFound);
    };
    let changed = before.join_attestors != attestors;
    let after = PoolRow {
        join_attestors: attestors,
        ..before.clone()
    };
    if changed {
        if !tx
            .update_pool_policy(&tenant, &id, after.join_attestors.as_deref())
            .await?
        {
            return Err(ApiError::NotFound);
        }
        let previous = PoolView::from(before).policy;
        let view = PoolView::from(after.clone());
        pool_event(
            &mut tx,
            "pool.updated",
            &after,
            json!({ "poolId": id, "previousPolicy": previous, "policy": view.policy }),
        )
        .await?;
    }
    tx.commit().await?;
    if changed {
        tracing::info!(tenant_id = %tenant, pool_id = %id, "pool policy replaced");
    }
    Ok(Json(UpdatedPool {
        pool: after.into(),
        changed,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(v: Value) -> Result<Option<Vec<String>>, String> {
        join_attestors(Some(&v), |id| {
            ["join-token", "x509pop", "tpm"].contains(&id)
        })
        .map_err(|e| e.to_string())
    }

    #[test]
    fn join_attestors_are_1_to_16_distinct_ids_of_attestors_this_host_runs() {
        assert_eq!(join_attestors(None, |_| false).unwrap(), None);
        assert_eq!(check(Value::Null).unwrap(), None);
        assert_eq!(
            check(json!(["tpm", "x509pop"])).unwrap(),
            Some(vec!["tpm".into(), "x509pop".into()])
        );
        for (bad, why) in [
            (json!([]), "must list 1 to 16 attestors, not 0"),
            (
                json!(vec!["tpm"; 17]),
                "must list 1 to 16 attestors, not 17",
            ),
            (
                json!(["tpm", "cloud-iid"]),
                "names `cloud-iid`, which this host does not run",
            ),
            (
                json!(["../x"]),
                "names `../x`, which this host does not run",
            ),
            (json!(["tpm", 7]), "holds 7, which is not an attestor id"),
            (json!([null]), "holds null, which is not an attestor id"),
            (json!(["tpm", "tpm"]), "lists `tpm` twice"),
            (json!("tpm"), "must be an array of attestor ids"),
            (json!({"tpm": true}), "must be an array of attestor ids"),
        ] {
            assert_eq!(
                check(bad.clone()).unwrap_err(),
                format!("invalid input: policy.joinAttestors {why}"),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_pool_shows_its_policy_as_the_seed_does() {
        let view = PoolView::from(PoolRow {
            tenant_id: "root".into(),
            id: "gpu".into(),
            join_attestors: Some(vec!["tpm".into()]),
            owner: None,
        });
        assert_eq!(
            serde_json::to_value(&view).unwrap(),
            json!({ "tenantId": "root", "id": "gpu", "policy": { "joinAttestors": ["tpm"] }, "owner": null })
        );
        let open = PoolView::from(PoolRow {
            join_attestors: None,
            tenant_id: "t".into(),
            id: "p".into(),
            owner: Some("o".into()),
        });
        assert_eq!(serde_json::to_value(&open).unwrap()["policy"], json!({}));
    }
}
