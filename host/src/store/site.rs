//! What site agents write and the discovery attestor reads: the lease protocol with epochs,
//! a node's live certificates by key, and inventories by MAC.
//!
//! A lease (`site:<id>:boot`) is held by one node until it lapses. Its epoch is a fence: it
//! rises every time the lease changes hands (and when a holder takes it again after letting
//! it lapse), never goes back, and a row is never deleted (a release only ends the lease's
//! time), so a statement signed under an old epoch stays refused forever. Each operation is
//! one conditional statement, so two site nodes racing for the same lease on any number of
//! host replicas cannot both win: on PostgreSQL the upsert takes the row lock and re-checks
//! its condition against the committed row; SQLite serialises writers.

use sqlx::any::AnyRow;

use super::decode::Fields;
use super::{InventoryRow, LeaseRow, NodeCertRow, StoreError, Tx};

/// What a lease operation found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseOutcome {
    /// The caller holds the lease, as the row says.
    Held(LeaseRow),
    /// The caller does not hold it (any more): another node holds it, the epoch is not the
    /// caller's, or it lapsed. The row as it is, if there is one.
    Lost(Option<LeaseRow>),
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

fn epoch(e: u64) -> Result<i64, StoreError> {
    i64::try_from(e).map_err(|_| StoreError::OutOfRange("lease epoch"))
}

impl Tx {
    /// Reads lease `name` and locks its row until this transaction ends (`FOR UPDATE` on
    /// Postgres; SQLite's `BEGIN IMMEDIATE` already excludes other writers), so a decision
    /// that depends on who holds it cannot be overtaken by a change of hands.
    pub async fn lock_lease(&mut self, name: &str) -> Result<Option<LeaseRow>, StoreError> {
        let sql = self.pick(
            "SELECT name, holder, epoch, expires_at FROM leases WHERE name = $1",
            "SELECT name, holder, epoch, expires_at FROM leases WHERE name = $1 FOR UPDATE",
        );
        let row = self.fetch_optional(sqlx::query(sql).bind(name)).await?;
        row.as_ref().map(lease).transpose()
    }

    /// Takes lease `name` for `holder` until `expires_at`, if it is free (absent, or lapsed
    /// by `now`) or already `holder`'s. A change of hands, or a holder taking a lapsed lease
    /// again, raises the epoch by one; a live holder acquiring again keeps its epoch and
    /// extends the lease.
    pub async fn acquire_lease(
        &mut self,
        name: &str,
        holder: &str,
        expires_at: i64,
        now: i64,
    ) -> Result<LeaseOutcome, StoreError> {
        let q = sqlx::query(
            "INSERT INTO leases (name, holder, epoch, expires_at) VALUES ($1, $2, 1, $3) \
             ON CONFLICT (name) DO UPDATE SET \
             epoch = CASE WHEN leases.holder = excluded.holder AND leases.expires_at > $4 \
                     THEN leases.epoch ELSE leases.epoch + 1 END, \
             holder = excluded.holder, expires_at = excluded.expires_at \
             WHERE leases.expires_at <= $4 OR leases.holder = excluded.holder \
             RETURNING name, holder, epoch, expires_at",
        )
        .bind(name)
        .bind(holder)
        .bind(expires_at)
        .bind(now);
        match self.fetch_optional(q).await? {
            Some(row) => Ok(LeaseOutcome::Held(lease(&row)?)),
            None => Ok(LeaseOutcome::Lost(self.lease(name).await?)),
        }
    }

    /// Extends lease `name` to `expires_at` if `holder` holds it at `epoch` and it has not
    /// lapsed by `now` (a lapsed lease is taken again with [`Tx::acquire_lease`], under a new
    /// epoch).
    pub async fn renew_lease(
        &mut self,
        name: &str,
        holder: &str,
        lease_epoch: u64,
        expires_at: i64,
        now: i64,
    ) -> Result<LeaseOutcome, StoreError> {
        let q = sqlx::query(
            "UPDATE leases SET expires_at = $4 \
             WHERE name = $1 AND holder = $2 AND epoch = $3 AND expires_at > $5 \
             RETURNING name, holder, epoch, expires_at",
        )
        .bind(name)
        .bind(holder)
        .bind(epoch(lease_epoch)?)
        .bind(expires_at)
        .bind(now);
        match self.fetch_optional(q).await? {
            Some(row) => Ok(LeaseOutcome::Held(lease(&row)?)),
            None => Ok(LeaseOutcome::Lost(self.lease(name).await?)),
        }
    }

    /// Ends `holder`'s lease `name` at `epoch` now: anyone may take it at once, under the
    /// next epoch. The row stays, so the epoch never goes back.
    pub async fn release_lease(
        &mut self,
        name: &str,
        holder: &str,
        lease_epoch: u64,
        now: i64,
    ) -> Result<LeaseOutcome, StoreError> {
        let q = sqlx::query(
            "UPDATE leases SET expires_at = $4 \
             WHERE name = $1 AND holder = $2 AND epoch = $3 AND expires_at > $4 \
             RETURNING name, holder, epoch, expires_at",
        )
        .bind(name)
        .bind(holder)
        .bind(epoch(lease_epoch)?)
        .bind(now);
        match self.fetch_optional(q).await? {
            Some(row) => Ok(LeaseOutcome::Held(lease(&row)?)),
            None => Ok(LeaseOutcome::Lost(self.lease(name).await?)),
        }
    }

    /// A node's certificates that are neither revoked, superseded by a renewal nor expired at
    /// `now`, newest first (at most 64: a node renews a few times a day).
    pub async fn live_node_certs(
        &mut self,
        node_id: &str,
        now: i64,
    ) -> Result<Vec<NodeCertRow>, StoreError> {
        let sql = "SELECT serial, node_id, der, generation, role, not_before, not_after, \
                   revoked_reason, statements, created_at FROM node_certs \
                   WHERE node_id = $1 AND revoked = 0 AND not_after > $2 \
                   AND (superseded_at IS NULL OR superseded_at > $2) \
                   ORDER BY created_at DESC, serial LIMIT 64";
        let rows = self
            .fetch_all(sqlx::query(sql).bind(node_id).bind(now))
            .await?;
        rows.iter().map(super::nodes::cert).collect()
    }

    /// The newest inventory of any node that lists `mac` (lowercase, colon-separated), if
    /// any. Anything that is not such a MAC finds nothing (so it can carry no `LIKE`
    /// wildcard).
    pub async fn inventory_by_mac(
        &mut self,
        mac: &str,
    ) -> Result<Option<InventoryRow>, StoreError> {
        if !gatehouse_proto::discovery::is_mac(mac) {
            return Ok(None);
        }
        // `macs` is a JSON array of strings; a MAC's quoted form occurs in it only as one
        // whole element.
        let q = sqlx::query(
            "SELECT id, node_id, product_uuid, macs, recorded_at FROM inventories \
             WHERE macs LIKE $1 ORDER BY recorded_at DESC, id DESC LIMIT 1",
        )
        .bind(format!("%\"{mac}\"%"));
        let row = self.fetch_optional(q).await?;
        row.as_ref().map(super::reads::inventory).transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing;
    use super::*;

    const NAME: &str = "site:fra1:boot";

    fn held(o: LeaseOutcome) -> LeaseRow {
        match o {
            LeaseOutcome::Held(row) => row,
            LeaseOutcome::Lost(row) => panic!("lost: {row:?}"),
        }
    }

    #[tokio::test]
    async fn leases_change_hands_under_rising_epochs() {
        for t in testing::all().await {
            let mut tx = t.db.begin().await.unwrap();
            // Free: the first holder gets epoch 1.
            let a = held(tx.acquire_lease(NAME, "node_a", 1_000, 0).await.unwrap());
            assert_eq!(
                (a.holder.as_str(), a.epoch, a.expires_at),
                ("node_a", 1, 1_000)
            );
            // The holder acquiring again keeps its epoch and extends.
            let a = held(tx.acquire_lease(NAME, "node_a", 1_500, 500).await.unwrap());
            assert_eq!((a.epoch, a.expires_at), (1, 1_500));
            // Another node cannot take a live lease.
            assert_eq!(
                tx.acquire_lease(NAME, "node_b", 2_000, 600).await.unwrap(),
                LeaseOutcome::Lost(Some(a.clone()))
            );
            // Renew only by the holder at its epoch, before it lapses.
            let a = held(tx.renew_lease(NAME, "node_a", 1, 2_000, 700).await.unwrap());
            assert_eq!(a.expires_at, 2_000);
            assert!(matches!(
                tx.renew_lease(NAME, "node_b", 1, 3_000, 700).await.unwrap(),
                LeaseOutcome::Lost(Some(_))
            ));
            assert!(matches!(
                tx.renew_lease(NAME, "node_a", 2, 3_000, 700).await.unwrap(),
                LeaseOutcome::Lost(Some(_))
            ));
            // Lapsed: the holder cannot renew, another node takes it under epoch 2.
            assert!(matches!(
                tx.renew_lease(NAME, "node_a", 1, 3_000, 2_000)
                    .await
                    .unwrap(),
                LeaseOutcome::Lost(Some(_))
            ));
            let b = held(
                tx.acquire_lease(NAME, "node_b", 3_000, 2_000)
                    .await
                    .unwrap(),
            );
            assert_eq!((b.holder.as_str(), b.epoch), ("node_b", 2));
            // The old holder's release changes nothing; the holder's ends the lease now.
            assert!(matches!(
                tx.release_lease(NAME, "node_a", 1, 2_100).await.unwrap(),
                LeaseOutcome::Lost(Some(_))
            ));
            let b = held(tx.release_lease(NAME, "node_b", 2, 2_100).await.unwrap());
            assert_eq!(b.expires_at, 2_100);
            // Released: taken at once, and even the same node gets a new epoch.
            let b = held(
                tx.acquire_lease(NAME, "node_b", 4_000, 2_100)
                    .await
                    .unwrap(),
            );
            assert_eq!(b.epoch, 3);
            let a = held(
                tx.acquire_lease(NAME, "node_a", 9_000, 4_000)
                    .await
                    .unwrap(),
            );
            assert_eq!(a.epoch, 4);
            assert_eq!(tx.lease(NAME).await.unwrap(), Some(a));
            // Another lease is independent.
            let other = held(
                tx.acquire_lease("site:ams1:boot", "node_b", 9, 0)
                    .await
                    .unwrap(),
            );
            assert_eq!(other.epoch, 1);
            tx.commit().await.unwrap();
        }
    }

    /// Two site nodes race for a free lease in concurrent transactions: exactly one wins.
    #[tokio::test]
    async fn two_acquirers_one_wins() {
        for t in testing::all().await {
            for round in 0..5 {
                let name = format!("site:race{round}:boot");
                let race = |holder: &'static str| {
                    let db = t.db.clone();
                    let name = name.clone();
                    tokio::spawn(async move {
                        let mut tx = db.begin().await.unwrap();
                        let now = tx.now().await.unwrap();
                        let outcome = tx
                            .acquire_lease(&name, holder, now + 60_000, now)
                            .await
                            .unwrap();
                        tx.commit().await.unwrap();
                        outcome
                    })
                };
                let (a, b) = (race("node_a"), race("node_b"));
                let outcomes = [a.await.unwrap(), b.await.unwrap()];
                let winners: Vec<&LeaseRow> = outcomes
                    .iter()
                    .filter_map(|o| match o {
                        LeaseOutcome::Held(row) => Some(row),
                        LeaseOutcome::Lost(_) => None,
                    })
                    .collect();
                assert_eq!(winners.len(), 1, "{outcomes:?}");
                assert_eq!(winners[0].epoch, 1);
                let mut tx = t.db.begin().await.unwrap();
                assert_eq!(tx.lease(&name).await.unwrap().as_ref(), Some(winners[0]));
                tx.commit().await.unwrap();
            }
        }
    }

    #[tokio::test]
    async fn inventories_by_mac() {
        for t in testing::all().await {
            let mut tx = t.db.begin().await.unwrap();
            tx.insert_node(&crate::store::NewNode {
                id: "node_m".into(),
                tenant_id: "root".into(),
                pool_id: None,
                site_id: None,
                role: crate::store::NodeRole::Node,
                identity_generation: 1,
                hardware_key: None,
                created_at: 0,
            })
            .await
            .unwrap();
            for (id, at, macs) in [
                ("inv_1", 1, vec!["52:54:00:00:00:01".to_owned()]),
                (
                    "inv_2",
                    2,
                    vec![
                        "52:54:00:00:00:02".to_owned(),
                        "52:54:00:00:00:01".to_owned(),
                    ],
                ),
            ] {
                tx.insert_inventory(&InventoryRow {
                    id: id.into(),
                    node_id: "node_m".into(),
                    product_uuid: None,
                    macs,
                    recorded_at: at,
                })
                .await
                .unwrap();
            }
            let found = tx.inventory_by_mac("52:54:00:00:00:01").await.unwrap();
            assert_eq!(found.map(|i| i.id), Some("inv_2".to_owned()));
            assert_eq!(
                tx.inventory_by_mac("52:54:00:00:00:03").await.unwrap(),
                None
            );
            assert_eq!(
                tx.inventory_by_mac("52:54:00:00:00:0_").await.unwrap(),
                None
            );
            assert_eq!(tx.inventory_by_mac("%").await.unwrap(), None);
            tx.commit().await.unwrap();
        }
    }
}
