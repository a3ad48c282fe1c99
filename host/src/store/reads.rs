//! Tenants, pools, leases, inventories and workflows: rows attestors and JoinService read to
//! decide. Site agents and provisioning write most of them; the writers here serve the admin
//! API and tests.

use sqlx::any::AnyRow;

use super::decode::{Fields, json_list};
use super::{InventoryRow, LeaseRow, PoolRow, StoreError, Tx, WorkflowRow};

fn pool(row: &AnyRow) -> Result<PoolRow, StoreError> {
    let f = Fields::new(row, "pools");
    Ok(PoolRow {
        tenant_id: f.text("tenant_id")?,
        id: f.text("id")?,
        join_attestors: f.opt_json("join_attestors")?,
        owner: f.opt_text("owner")?,
    })
}

fn lease(row: &AnyRow) -> Result<LeaseRow, StoreError> {
    let f = Fields::new(row, "leases");
    Ok(LeaseRow {
        name: f.text("name")?,
        holder: f.text("holder")?,
        epoch: f.u64("epoch")?,
        expires_at: f.i64("expires_at")?,
    })
}

pub(super) fn inventory(row: &AnyRow) -> Result<InventoryRow, StoreError> {
    let f = Fields::new(row, "inventories");
    Ok(InventoryRow {
        id: f.text("id")?,
        node_id: f.text("node_id")?,
        product_uuid: f.opt_text("product_uuid")?,
        macs: f.json("macs")?,
        recorded_at: f.i64("recorded_at")?,
    })
}

pub(super) fn workflow(row: &AnyRow) -> Result<WorkflowRow, StoreError> {
    let f = Fields::new(row, "workflows");
    Ok(WorkflowRow {
        id: f.text("id")?,
        node_id: f.text("node_id")?,
        state: f.text("state")?,
        step: f.text("step")?,
        token_id: f.opt_text("token_id")?,
        created_at: f.i64("created_at")?,
    })
}

impl Tx {
    /// Creates a tenant (`root` exists from the first migration).
    pub async fn insert_tenant(&mut self, id: &str) -> Result<(), StoreError> {
        self.execute(sqlx::query("INSERT INTO tenants (id) VALUES ($1)").bind(id))
            .await
            .map(drop)
    }

    /// Creates a pool in an existing tenant.
    pub async fn insert_pool(&mut self, p: &PoolRow) -> Result<(), StoreError> {
        let q = sqlx::query(
            "INSERT INTO pools (tenant_id, id, join_attestors, owner) VALUES ($1, $2, $3, $4)",
        )
        .bind(&p.tenant_id)
        .bind(&p.id)
        .bind(p.join_attestors.as_deref().map(json_list))
        .bind(&p.owner);
        self.execute(q).await.map(drop)
    }

    /// Creates a tenant unless one of that id exists; whether it did.
    pub async fn create_tenant(&mut self, id: &str) -> Result<bool, StoreError> {
        let q = sqlx::query("INSERT INTO tenants (id) VALUES ($1) ON CONFLICT (id) DO NOTHING")
            .bind(id);
        Ok(self.execute(q).await? == 1)
    }

    /// At most `limit` tenant ids after `after` (`""`: from the start), in id order.
    pub async fn list_tenants(
        &mut self,
        after: &str,
        limit: u32,
    ) -> Result<Vec<String>, StoreError> {
        let q = sqlx::query("SELECT id FROM tenants WHERE id > $1 ORDER BY id LIMIT $2")
            .bind(after)
            .bind(i64::from(limit));
        let rows = self.fetch_all(q).await?;
        rows.iter()
            .map(|r| Fields::new(r, "tenants").text("id"))
            .collect()
    }

    /// Whether a tenant exists.
    pub async fn tenant_exists(&mut self, id: &str) -> Result<bool, StoreError> {
        let q = sqlx::query("SELECT id FROM tenants WHERE id = $1").bind(id);
        Ok(self.fetch_optional(q).await?.is_some())
    }

    /// Creates a pool unless the tenant has one of that id already; whether it did.
    pub async fn create_pool(&mut self, p: &PoolRow) -> Result<bool, StoreError> {
        let q = sqlx::query(
            "INSERT INTO pools (tenant_id, id, join_attestors, owner) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (tenant_id, id) DO NOTHING",
        )
        .bind(&p.tenant_id)
        .bind(&p.id)
        .bind(p.join_attestors.as_deref().map(json_list))
        .bind(&p.owner);
        Ok(self.execute(q).await? == 1)
    }

    /// At most `limit` pools after `after`, by tenant and id: one page.
    pub async fn list_pools(
        &mut self,
        after: &super::PoolCursor,
        limit: u32,
    ) -> Result<Vec<PoolRow>, StoreError> {
        let q = sqlx::query(
            "SELECT tenant_id, id, join_attestors, owner FROM pools \
             WHERE tenant_id > $1 OR (tenant_id = $1 AND id > $2) \
             ORDER BY tenant_id, id LIMIT $3",
        )
        .bind(after.tenant_id.as_str())
        .bind(after.id.as_str())
        .bind(i64::from(limit));
        self.fetch_all(q).await?.iter().map(pool).collect()
    }

    /// Replaces a pool's policy (`join_attestors`; `None` admits every attestor); whether
    /// the pool exists.
    pub async fn update_pool_policy(
        &mut self,
        tenant_id: &str,
        pool_id: &str,
        join_attestors: Option<&[String]>,
    ) -> Result<bool, StoreError> {
        let q =
            sqlx::query("UPDATE pools SET join_attestors = $3 WHERE tenant_id = $1 AND id = $2")
                .bind(tenant_id)
                .bind(pool_id)
                .bind(join_attestors.map(json_list));
        Ok(self.execute(q).await? == 1)
    }

    /// Looks up a pool of a tenant.
    pub async fn pool(
        &mut self,
        tenant_id: &str,
        pool_id: &str,
    ) -> Result<Option<PoolRow>, StoreError> {
        let q = sqlx::query(
            "SELECT tenant_id, id, join_attestors, owner FROM pools WHERE tenant_id = $1 AND id = $2",
        )
        .bind(tenant_id)
        .bind(pool_id);
        let row = self.fetch_optional(q).await?;
        row.as_ref().map(pool).transpose()
    }

    /// Stores a lease as given (the holder's protocol raises the epoch on a change of hands).
    pub async fn put_lease(&mut self, l: &LeaseRow) -> Result<(), StoreError> {
        let epoch = i64::try_from(l.epoch).map_err(|_| StoreError::OutOfRange("lease epoch"))?;
        let q = sqlx::query(
            "INSERT INTO leases (name, holder, epoch, expires_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, epoch = excluded.epoch, \
             expires_at = excluded.expires_at",
        )
        .bind(&l.name)
        .bind(&l.holder)
        .bind(epoch)
        .bind(l.expires_at);
        self.execute(q).await.map(drop)
    }

    /// Looks up a lease.
    pub async fn lease(&mut self, name: &str) -> Result<Option<LeaseRow>, StoreError> {
        let q = sqlx::query("SELECT name, holder, epoch, expires_at FROM leases WHERE name = $1")
            .bind(name);
        let row = self.fetch_optional(q).await?;
        row.as_ref().map(lease).transpose()
    }

    /// Records an inventory a node reported.
    pub async fn insert_inventory(&mut self, i: &InventoryRow) -> Result<(), StoreError> {
        let q = sqlx::query(
            "INSERT INTO inventories (id, node_id, product_uuid, macs, recorded_at) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(&i.id)
        .bind(&i.node_id)
        .bind(&i.product_uuid)
        .bind(json_list(&i.macs))
        .bind(i.recorded_at);
        self.execute(q).await.map(drop)
    }

    /// The newest inventory of a node.
    pub async fn newest_inventory(
        &mut self,
        node_id: &str,
    ) -> Result<Option<InventoryRow>, StoreError> {
        let q = sqlx::query(
            "SELECT id, node_id, product_uuid, macs, recorded_at FROM inventories \
             WHERE node_id = $1 ORDER BY recorded_at DESC, id DESC LIMIT 1",
        )
        .bind(node_id);
        let row = self.fetch_optional(q).await?;
        row.as_ref().map(inventory).transpose()
    }

    /// Records a provisioning workflow.
    pub async fn insert_workflow(&mut self, w: &WorkflowRow) -> Result<(), StoreError> {
        let q = sqlx::query(
            "INSERT INTO workflows (id, node_id, state, step, token_id, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&w.id)
        .bind(&w.node_id)
        .bind(&w.state)
        .bind(&w.step)
        .bind(&w.token_id)
        .bind(w.created_at);
        self.execute(q).await.map(drop)
    }

    /// The workflow whose `userdata.render` step minted `token_id` (the newest, should there
    /// be several).
    pub async fn token_workflow(
        &mut self,
        token_id: &str,
    ) -> Result<Option<WorkflowRow>, StoreError> {
        let q = sqlx::query(
            "SELECT id, node_id, state, step, token_id, created_at FROM workflows \
             WHERE token_id = $1 ORDER BY created_at DESC, id DESC LIMIT 1",
        )
        .bind(token_id);
        let row = self.fetch_optional(q).await?;
        row.as_ref().map(workflow).transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::super::{PoolCursor, testing};
    use super::*;

    fn gpu(join_attestors: Option<Vec<String>>) -> PoolRow {
        PoolRow {
            tenant_id: "root".into(),
            id: "gpu".into(),
            join_attestors,
            owner: Some("lessee-1".into()),
        }
    }

    #[tokio::test]
    async fn pools_are_created_once_listed_and_their_policy_replaced() {
        for t in testing::all().await {
            let mut tx = t.db.begin().await.unwrap();
            assert!(tx.tenant_exists("root").await.unwrap());
            assert!(!tx.tenant_exists("nobody").await.unwrap());
            let tpm = Some(vec!["tpm".to_owned()]);
            assert!(tx.create_pool(&gpu(tpm.clone())).await.unwrap());
            // A second create of the same id changes nothing.
            assert!(!tx.create_pool(&gpu(None)).await.unwrap());
            assert_eq!(
                tx.list_pools(&PoolCursor::default(), 10).await.unwrap(),
                [gpu(tpm)]
            );

            let both = ["join-token".to_owned(), "x509pop".to_owned()];
            assert!(
                tx.update_pool_policy("root", "gpu", Some(&both))
                    .await
                    .unwrap()
            );
            assert_eq!(
                tx.pool("root", "gpu").await.unwrap(),
                Some(gpu(Some(both.to_vec())))
            );
            assert!(tx.update_pool_policy("root", "gpu", None).await.unwrap());
            assert_eq!(tx.pool("root", "gpu").await.unwrap(), Some(gpu(None)));
            assert!(!tx.update_pool_policy("root", "cpu", None).await.unwrap());
            tx.commit().await.unwrap();
        }
    }
}
