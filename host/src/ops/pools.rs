//! Pools: create, list, show, and replace a pool's policy.
//!
//! A pool's policy is `{ joinAttestors?: [id, ...] }`: when set, only those attestors may
//! admit a machine into the pool (JoinService refuses any other with `pool-attestor`, see
//! [`crate::join::policy::pool_admits`]). The list must hold 1 to [`MAX_JOIN_ATTESTORS`]
//! distinct ids of attestors this host runs (`join-token` and every loaded attestor);
//! anything else is invalid input. Absent means every attestor admits. An update replaces the
//! policy as a whole, as the seed's `pools.update` does: `{"policy": {}}` lifts the list.
//! Each write commits with its event, `pool.created` or `pool.updated` (an update that changes
//! nothing answers `changed: false` and writes no event).

use serde_json::{Value, json};

use super::types::{CreatePool, Pool, PoolPolicy, UpdatePool, UpdatedPool};
use super::{Actor, Id, OpsError, Page, PageRequest, event, record};
use crate::store::{Db, PoolCursor, PoolRow, Tx};

/// Most attestors a pool's `joinAttestors` may list.
pub const MAX_JOIN_ATTESTORS: usize = 16;

/// Checks a `joinAttestors` list: absent, or 1 to [`MAX_JOIN_ATTESTORS`] distinct ids, each
/// of an attestor `runs`.
fn join_attestors(
    list: Option<&[String]>,
    runs: &(dyn Fn(&str) -> bool + Sync),
) -> Result<Option<Vec<String>>, OpsError> {
    let invalid = |m: String| Err(OpsError::invalid(format!("policy.joinAttestors {m}")));
    let Some(list) = list else {
        return Ok(None);
    };
    if list.is_empty() || list.len() > MAX_JOIN_ATTESTORS {
        return invalid(format!(
            "must list 1 to {MAX_JOIN_ATTESTORS} attestors, not {}",
            list.len()
        ));
    }
    let mut ids: Vec<String> = Vec::with_capacity(list.len());
    for id in list {
        if !super::is_id(id) || !runs(id) {
            return invalid(format!("names `{id}`, which this host does not run"));
        }
        if ids.contains(id) {
            return invalid(format!("lists `{id}` twice"));
        }
        ids.push(id.clone());
    }
    Ok(Some(ids))
}

/// A pool row as the API shows it.
pub(crate) fn view(p: PoolRow) -> Pool {
    Pool {
        tenant_id: p.tenant_id,
        id: p.id,
        policy: PoolPolicy {
            join_attestors: p.join_attestors,
        },
        owner: p.owner,
    }
}

async fn pool_event(
    tx: &mut Tx,
    actor: &Actor,
    kind: &str,
    pool: &PoolRow,
    payload: Value,
) -> Result<(), OpsError> {
    let at = tx.now().await?;
    let mut e = event(at, kind, payload);
    e.tenant_id = Some(pool.tenant_id.clone());
    record(tx, actor, &e).await?;
    Ok(())
}

/// Creates a pool in an existing tenant; `runs` says whether this host runs an attestor.
pub async fn create(
    db: &Db,
    actor: &Actor,
    runs: &(dyn Fn(&str) -> bool + Sync),
    req: CreatePool,
) -> Result<Pool, OpsError> {
    let pool = PoolRow {
        join_attestors: join_attestors(req.policy.join_attestors.as_deref(), runs)?,
        tenant_id: req.tenant_id.into_string(),
        id: req.id.into_string(),
        owner: req.owner.map(Id::into_string),
    };
    let mut tx = db.begin().await?;
    if !tx.tenant_exists(&pool.tenant_id).await? {
        tx.rollback().await?;
        return Err(OpsError::invalid(format!(
            "tenant `{}` does not exist",
            pool.tenant_id
        )));
    }
    if !tx.create_pool(&pool).await? {
        tx.rollback().await?;
        return Err(OpsError::invalid(format!(
            "pool {}/{} exists already",
            pool.tenant_id, pool.id
        )));
    }
    let shown = view(pool.clone());
    pool_event(
        &mut tx,
        actor,
        "pool.created",
        &pool,
        json!({ "poolId": pool.id, "policy": shown.policy, "owner": pool.owner }),
    )
    .await?;
    tx.commit().await?;
    tracing::info!(tenant_id = %pool.tenant_id, pool_id = %pool.id, %actor, "pool created");
    Ok(shown)
}

/// Pools by tenant and id, a page at a time.
pub async fn list(db: &Db, page: &PageRequest) -> Result<Page<Pool>, OpsError> {
    let (after, limit) = page.resolve::<PoolCursor>()?;
    let mut tx = db.begin().await?;
    let pools = tx.list_pools(&after.unwrap_or_default(), limit).await?;
    tx.commit().await?;
    let rows: Vec<Pool> = pools.into_iter().map(view).collect();
    Ok(Page::new(rows, limit, |p: &Pool| PoolCursor {
        tenant_id: p.tenant_id.clone(),
        id: p.id.clone(),
    }))
}

/// One pool.
pub async fn show(db: &Db, tenant: &Id, id: &Id) -> Result<Pool, OpsError> {
    let mut tx = db.begin().await?;
    let pool = tx.pool(tenant, id).await?;
    tx.commit().await?;
    pool.map(view).ok_or(OpsError::NotFound)
}

/// Replaces a pool's policy as a whole.
pub async fn update(
    db: &Db,
    actor: &Actor,
    runs: &(dyn Fn(&str) -> bool + Sync),
    tenant: &Id,
    id: &Id,
    req: UpdatePool,
) -> Result<UpdatedPool, OpsError> {
    let attestors = join_attestors(req.policy.join_attestors.as_deref(), runs)?;
    let mut tx = db.begin().await?;
    let Some(before) = tx.pool(tenant, id).await? else {
        tx.rollback().await?;
        return Err(OpsError::NotFound);
    };
    let changed = before.join_attestors != attestors;
    let after = PoolRow {
        join_attestors: attestors,
        ..before.clone()
    };
    if changed {
        if !tx
            .update_pool_policy(tenant, id, after.join_attestors.as_deref())
            .await?
        {
            return Err(OpsError::NotFound);
        }
        let previous = view(before).policy;
        let now = view(after.clone()).policy;
        pool_event(
            &mut tx,
            actor,
            "pool.updated",
            &after,
            json!({ "poolId": id, "previousPolicy": previous, "policy": now }),
        )
        .await?;
    }
    tx.commit().await?;
    if changed {
        tracing::info!(tenant_id = %tenant, pool_id = %id, %actor, "pool policy replaced");
    }
    Ok(UpdatedPool {
        pool: view(after),
        changed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(list: &[&str]) -> Result<Option<Vec<String>>, String> {
        let list: Vec<String> = list.iter().map(|s| s.to_string()).collect();
        join_attestors(Some(&list), &|id| {
            ["join-token", "x509pop", "tpm"].contains(&id)
        })
        .map_err(|e| e.to_string())
    }

    #[test]
    fn join_attestors_are_1_to_16_distinct_ids_of_attestors_this_host_runs() {
        assert_eq!(join_attestors(None, &|_| false).unwrap(), None);
        assert_eq!(
            check(&["tpm", "x509pop"]).unwrap(),
            Some(vec!["tpm".into(), "x509pop".into()])
        );
        for (bad, why) in [
            (vec![], "must list 1 to 16 attestors, not 0"),
            (vec!["tpm"; 17], "must list 1 to 16 attestors, not 17"),
            (
                vec!["tpm", "cloud-iid"],
                "names `cloud-iid`, which this host does not run",
            ),
            (vec!["../x"], "names `../x`, which this host does not run"),
            (vec!["tpm", "tpm"], "lists `tpm` twice"),
        ] {
            assert_eq!(
                check(&bad).unwrap_err(),
                format!("invalid input: policy.joinAttestors {why}"),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_pool_shows_its_policy_as_the_seed_does() {
        let shown = view(PoolRow {
            tenant_id: "root".into(),
            id: "gpu".into(),
            join_attestors: Some(vec!["tpm".into()]),
            owner: None,
        });
        assert_eq!(
            serde_json::to_value(&shown).unwrap(),
            json!({ "tenantId": "root", "id": "gpu", "policy": { "joinAttestors": ["tpm"] }, "owner": null })
        );
        let open = view(PoolRow {
            join_attestors: None,
            tenant_id: "t".into(),
            id: "p".into(),
            owner: Some("o".into()),
        });
        assert_eq!(serde_json::to_value(&open).unwrap()["policy"], json!({}));
    }
}
