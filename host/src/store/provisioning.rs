//! Provisioning workflows and inventories as the admin API manages them: listing, moving a
//! workflow on, and a node's inventories. (The rows attestors read, `newest_inventory` and
//! `token_workflow`, and the inserts live in `reads.rs`.)

use sqlx::any::AnyRow;

use super::decode::Fields;
use super::reads::{inventory, workflow};
use super::{Cursor, InventoryRow, StoreError, Tx, WorkflowRow};

/// A workflow that is deploying its node: the only state in which it vouches for the token its
/// `userdata.render` step minted.
pub const WORKFLOW_RUNNING: &str = "running";
/// A workflow whose deploy finished.
pub const WORKFLOW_SUCCEEDED: &str = "succeeded";
/// A workflow whose deploy failed.
pub const WORKFLOW_FAILED: &str = "failed";
/// A workflow an operator stopped.
pub const WORKFLOW_CANCELLED: &str = "cancelled";
/// The step that mints the provisioned token and renders it into the machine's user data.
pub const USERDATA_RENDER: &str = "userdata.render";

/// A discovery workflow: an operator's decision that the machine with `mac` may boot the
/// discovery ramdisk at `site_id`. While it runs, the site's boot server (the holder of the
/// site's boot lease) may fetch its single-use discovery token; a fetch mints a new token
/// and revokes the one before it if it is unspent.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DiscoveryWorkflowRow {
    /// The workflow id.
    pub id: String,
    /// The tenant the ramdisk joins.
    pub tenant_id: String,
    /// The site whose boot server serves the machine.
    pub site_id: String,
    /// The machine's MAC, lowercase with colons.
    pub mac: String,
    /// The machine's product UUID, when the operator knows it.
    pub product_uuid: Option<String>,
    /// `running`, `succeeded` or `cancelled`.
    pub state: String,
    /// Lifetime of each token a fetch mints.
    pub token_ttl_seconds: u32,
    /// The newest token the workflow minted, if any.
    pub token_id: Option<String>,
    /// When it started.
    pub created_at: i64,
}

/// The columns [`discovery_workflow`] reads.
const DISCOVERY_COLUMNS: &str =
    "id, tenant_id, site_id, mac, product_uuid, state, token_ttl_seconds, token_id, created_at";

fn discovery_workflow(row: &AnyRow) -> Result<DiscoveryWorkflowRow, StoreError> {
    let f = Fields::new(row, "discovery_workflows");
    Ok(DiscoveryWorkflowRow {
        id: f.text("id")?,
        tenant_id: f.text("tenant_id")?,
        site_id: f.text("site_id")?,
        mac: f.text("mac")?,
        product_uuid: f.opt_text("product_uuid")?,
        state: f.text("state")?,
        token_ttl_seconds: u32::try_from(f.i64("token_ttl_seconds")?)
            .map_err(|_| StoreError::OutOfRange("token_ttl_seconds"))?,
        token_id: f.opt_text("token_id")?,
        created_at: f.i64("created_at")?,
    })
}

/// The columns [`workflow`] reads.
const WORKFLOW_COLUMNS: &str = "id, node_id, state, step, token_id, created_at";

impl Tx {
    /// Looks up a workflow.
    pub async fn workflow(&mut self, id: &str) -> Result<Option<WorkflowRow>, StoreError> {
        let sql = format!("SELECT {WORKFLOW_COLUMNS} FROM workflows WHERE id = $1");
        let row = self.fetch_optional(sqlx::query(&sql).bind(id)).await?;
        row.as_ref().map(workflow).transpose()
    }

    /// At most `limit` workflows after `after`, oldest first: one page.
    pub async fn list_workflows(
        &mut self,
        after: &Cursor,
        limit: u32,
    ) -> Result<Vec<WorkflowRow>, StoreError> {
        let sql = format!(
            "SELECT {WORKFLOW_COLUMNS} FROM workflows \
             WHERE created_at > $1 OR (created_at = $1 AND id > $2) \
             ORDER BY created_at, id LIMIT $3"
        );
        let q = sqlx::query(&sql)
            .bind(after.created_at)
            .bind(after.id.as_str())
            .bind(i64::from(limit));
        let rows = self.fetch_all(q).await?;
        rows.iter().map(workflow).collect()
    }

    /// The running workflows of a node.
    pub async fn running_workflows(
        &mut self,
        node_id: &str,
    ) -> Result<Vec<WorkflowRow>, StoreError> {
        let sql = format!(
            "SELECT {WORKFLOW_COLUMNS} FROM workflows WHERE node_id = $1 AND state = $2 \
             ORDER BY created_at, id"
        );
        let q = sqlx::query(&sql).bind(node_id).bind(WORKFLOW_RUNNING);
        let rows = self.fetch_all(q).await?;
        rows.iter().map(workflow).collect()
    }

    /// Moves a running workflow to `state` (a final one); whether it was running. A finished
    /// workflow never runs again, so its token no longer resolves to its node.
    pub async fn finish_workflow(&mut self, id: &str, state: &str) -> Result<bool, StoreError> {
        let q = sqlx::query("UPDATE workflows SET state = $2 WHERE id = $1 AND state = $3")
            .bind(id)
            .bind(state)
            .bind(WORKFLOW_RUNNING);
        Ok(self.execute(q).await? == 1)
    }

    /// Records a new discovery workflow.
    pub async fn insert_discovery_workflow(
        &mut self,
        w: &DiscoveryWorkflowRow,
    ) -> Result<(), StoreError> {
        let q = sqlx::query(
            "INSERT INTO discovery_workflows (id, tenant_id, site_id, mac, product_uuid, state, \
             token_ttl_seconds, token_id, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(&w.id)
        .bind(&w.tenant_id)
        .bind(&w.site_id)
        .bind(&w.mac)
        .bind(&w.product_uuid)
        .bind(&w.state)
        .bind(i64::from(w.token_ttl_seconds))
        .bind(&w.token_id)
        .bind(w.created_at);
        self.execute(q).await.map(drop)
    }

    /// Looks up a discovery workflow and locks its row until this transaction ends (`FOR
    /// UPDATE` on Postgres; SQLite's `BEGIN IMMEDIATE` already excludes other writers).
    pub async fn lock_discovery_workflow(
        &mut self,
        id: &str,
    ) -> Result<Option<DiscoveryWorkflowRow>, StoreError> {
        let sql = self.pick(
            "SELECT id, tenant_id, site_id, mac, product_uuid, state, token_ttl_seconds, \
             token_id, created_at FROM discovery_workflows WHERE id = $1",
            "SELECT id, tenant_id, site_id, mac, product_uuid, state, token_ttl_seconds, \
             token_id, created_at FROM discovery_workflows WHERE id = $1 FOR UPDATE",
        );
        let row = self.fetch_optional(sqlx::query(sql).bind(id)).await?;
        row.as_ref().map(discovery_workflow).transpose()
    }

    /// The running discovery workflows for `mac` at `site_id`, oldest first.
    pub async fn running_discovery_workflows(
        &mut self,
        site_id: &str,
        mac: &str,
    ) -> Result<Vec<DiscoveryWorkflowRow>, StoreError> {
        let sql = format!(
            "SELECT {DISCOVERY_COLUMNS} FROM discovery_workflows \
             WHERE site_id = $1 AND mac = $2 AND state = $3 ORDER BY created_at, id"
        );
        let q = sqlx::query(&sql)
            .bind(site_id)
            .bind(mac)
            .bind(WORKFLOW_RUNNING);
        let rows = self.fetch_all(q).await?;
        rows.iter().map(discovery_workflow).collect()
    }

    /// At most `limit` discovery workflows after `after`, oldest first: one page.
    pub async fn list_discovery_workflows(
        &mut self,
        after: &Cursor,
        limit: u32,
    ) -> Result<Vec<DiscoveryWorkflowRow>, StoreError> {
        let sql = format!(
            "SELECT {DISCOVERY_COLUMNS} FROM discovery_workflows \
             WHERE created_at > $1 OR (created_at = $1 AND id > $2) \
             ORDER BY created_at, id LIMIT $3"
        );
        let q = sqlx::query(&sql)
            .bind(after.created_at)
            .bind(after.id.as_str())
            .bind(i64::from(limit));
        let rows = self.fetch_all(q).await?;
        rows.iter().map(discovery_workflow).collect()
    }

    /// Records the token a running discovery workflow minted; whether it was running.
    pub async fn set_discovery_workflow_token(
        &mut self,
        id: &str,
        token_id: &str,
    ) -> Result<bool, StoreError> {
        let q = sqlx::query(
            "UPDATE discovery_workflows SET token_id = $2 WHERE id = $1 AND state = $3",
        )
        .bind(id)
        .bind(token_id)
        .bind(WORKFLOW_RUNNING);
        Ok(self.execute(q).await? == 1)
    }

    /// Moves a running discovery workflow to `state`; whether it was running.
    pub async fn finish_discovery_workflow(
        &mut self,
        id: &str,
        state: &str,
    ) -> Result<bool, StoreError> {
        let q =
            sqlx::query("UPDATE discovery_workflows SET state = $2 WHERE id = $1 AND state = $3")
                .bind(id)
                .bind(state)
                .bind(WORKFLOW_RUNNING);
        Ok(self.execute(q).await? == 1)
    }

    /// At most `limit` of a node's inventories recorded before `before` (start with
    /// [`Cursor::end`]), newest first: one page.
    pub async fn inventories(
        &mut self,
        node_id: &str,
        before: &Cursor,
        limit: u32,
    ) -> Result<Vec<InventoryRow>, StoreError> {
        let q = sqlx::query(
            "SELECT id, node_id, product_uuid, macs, recorded_at FROM inventories \
             WHERE node_id = $1 AND (recorded_at < $2 OR (recorded_at = $2 AND id < $3)) \
             ORDER BY recorded_at DESC, id DESC LIMIT $4",
        )
        .bind(node_id)
        .bind(before.created_at)
        .bind(before.id.as_str())
        .bind(i64::from(limit));
        let rows = self.fetch_all(q).await?;
        rows.iter().map(inventory).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::{NewNode, NodeRole, UseOutcome, testing};
    use super::*;

    fn new_node(id: &str) -> NewNode {
        NewNode {
            id: id.into(),
            tenant_id: "root".into(),
            pool_id: None,
            site_id: None,
            role: NodeRole::Node,
            identity_generation: 1,
            hardware_key: None,
            created_at: 1,
        }
    }

    fn wf(id: &str, at: i64) -> WorkflowRow {
        WorkflowRow {
            id: id.into(),
            node_id: "node_1".into(),
            state: WORKFLOW_RUNNING.into(),
            step: USERDATA_RENDER.into(),
            token_id: Some(format!("tok_{id}")),
            created_at: at,
        }
    }

    #[tokio::test]
    async fn workflows_are_listed_and_finish_once() {
        for t in testing::all().await {
            let mut tx = t.db.begin().await.unwrap();
            tx.insert_node(&new_node("node_1")).await.unwrap();
            tx.insert_workflow(&wf("wf2", 2)).await.unwrap();
            tx.insert_workflow(&wf("wf1", 1)).await.unwrap();
            assert_eq!(
                tx.list_workflows(&Cursor::start(), 10).await.unwrap(),
                [wf("wf1", 1), wf("wf2", 2)]
            );
            // A page at a time.
            assert_eq!(
                tx.list_workflows(&Cursor::start(), 1).await.unwrap(),
                [wf("wf1", 1)]
            );
            let after_first = Cursor {
                created_at: 1,
                id: "wf1".into(),
            };
            assert_eq!(
                tx.list_workflows(&after_first, 10).await.unwrap(),
                [wf("wf2", 2)]
            );
            assert_eq!(tx.workflow("wf2").await.unwrap(), Some(wf("wf2", 2)));
            assert_eq!(tx.workflow("wf3").await.unwrap(), None);
            assert_eq!(tx.running_workflows("node_1").await.unwrap().len(), 2);

            assert!(tx.finish_workflow("wf1", WORKFLOW_SUCCEEDED).await.unwrap());
            // Finished: it never moves again.
            assert!(!tx.finish_workflow("wf1", WORKFLOW_CANCELLED).await.unwrap());
            assert!(!tx.finish_workflow("wf3", WORKFLOW_FAILED).await.unwrap());
            assert_eq!(
                tx.workflow("wf1").await.unwrap().unwrap().state,
                WORKFLOW_SUCCEEDED
            );
            assert_eq!(
                tx.running_workflows("node_1").await.unwrap(),
                [wf("wf2", 2)]
            );

            tx.insert_inventory(&InventoryRow {
                id: "inv_a".into(),
                node_id: "node_1".into(),
                product_uuid: None,
                macs: vec![],
                recorded_at: 5,
            })
            .await
            .unwrap();
            tx.insert_inventory(&InventoryRow {
                id: "inv_b".into(),
                node_id: "node_1".into(),
                product_uuid: Some("u".into()),
                macs: vec!["aa:bb:cc:dd:ee:ff".into()],
                recorded_at: 6,
            })
            .await
            .unwrap();
            let ids: Vec<_> = tx
                .inventories("node_1", &Cursor::end(), 10)
                .await
                .unwrap()
                .into_iter()
                .map(|i| i.id)
                .collect();
            assert_eq!(ids, ["inv_b", "inv_a"]);
            let before_newest = Cursor {
                created_at: 6,
                id: "inv_b".into(),
            };
            let older = tx.inventories("node_1", &before_newest, 10).await.unwrap();
            assert_eq!(older.len(), 1);
            assert_eq!(older[0].id, "inv_a");
            tx.commit().await.unwrap();
        }
    }

    /// prune_uses deletes expired records only, at most `batch` per call, and a pruned
    /// subject may be recorded again.
    #[tokio::test]
    async fn prune_uses_deletes_expired_records_in_batches() {
        for t in testing::all().await {
            let mut tx = t.db.begin().await.unwrap();
            for i in 0..7 {
                let subject = format!("old:{i}");
                assert_eq!(
                    tx.record_use("x", &subject, 100 + i, 0).await.unwrap(),
                    UseOutcome::Recorded
                );
            }
            for i in 0..3 {
                tx.record_use("x", &format!("live:{i}"), 10_000, 0)
                    .await
                    .unwrap();
            }
            // At 106 every old record has expired (expires_at <= now).
            assert_eq!(tx.prune_uses(106, 5).await.unwrap(), 5);
            assert_eq!(tx.prune_uses(106, 5).await.unwrap(), 2);
            assert_eq!(tx.prune_uses(106, 5).await.unwrap(), 0);
            // The live ones are still there: each is still a replay.
            for i in 0..3 {
                assert_eq!(
                    tx.record_use("x", &format!("live:{i}"), 20_000, 106)
                        .await
                        .unwrap(),
                    UseOutcome::Reused
                );
            }
            // A pruned subject is gone, so it records afresh.
            assert_eq!(
                tx.record_use("x", "old:0", 20_000, 106).await.unwrap(),
                UseOutcome::Recorded
            );
            // Expiry is inclusive: a record expiring at `now` goes.
            assert_eq!(tx.prune_uses(10_000, 100).await.unwrap(), 3);
            tx.commit().await.unwrap();
        }
    }
}
