//! Nodes: list, show, and the operator's actions on one (cordon, retire, delete, revoke its
//! identity or one certificate, record its inventory).
//!
//! Every action locks the node's row first ([`Tx::lock_node`]), so what it reports (the
//! certificates it revoked, the bindings it freed) is what it changed, and commits with the
//! event saying what the operator did (`node.cordoned`, `node.deleted`, ...). An action that
//! would change nothing (cordoning a cordoned node) answers `changed: false` and writes no
//! event.

use serde_json::{Value, json};

use super::types::{
    Binding, CertRevoked, Certificate, Cordoned, Deleted, IdentityRevoked, Inventory, Node,
    NodeDetail, RecordInventory, Retired,
};
use super::{Actor, Id, OpsError, Page, PageRequest, event, record};
use crate::store::{Cursor, Db, InventoryRow, NodeRow, Revocation, Tx};

/// Most MACs one inventory records (as many as a join may claim).
pub const MAX_MACS: usize = 64;

/// A node row as the API shows it.
pub(crate) fn view(n: NodeRow) -> Node {
    Node {
        id: n.id,
        tenant_id: n.tenant_id,
        pool_id: n.pool_id,
        site_id: n.site_id,
        role: n.role,
        retired: n.retired,
        cordoned: n.cordoned,
        identity_generation: n.identity_generation,
        hardware_key: n.hardware_key,
        created_at: n.created_at,
        updated_at: n.updated_at,
        deleted_at: n.deleted_at,
    }
}

/// Nodes that are not deleted, oldest first, a page at a time.
pub async fn list(db: &Db, page: &PageRequest) -> Result<Page<Node>, OpsError> {
    let (after, limit) = page.resolve::<Cursor>()?;
    let after = after.unwrap_or_else(Cursor::start);
    let mut tx = db.begin().await?;
    let rows = tx.list_nodes_page(&after, limit).await?;
    tx.commit().await?;
    let rows: Vec<Node> = rows.into_iter().map(view).collect();
    Ok(Page::new(rows, limit, |n: &Node| Cursor {
        created_at: n.created_at,
        id: n.id.clone(),
    }))
}

/// A node (also a deleted one, so operators see what happened to it), its certificates newest
/// first and its bindings.
pub async fn show(db: &Db, id: &Id) -> Result<NodeDetail, OpsError> {
    let mut tx = db.begin().await?;
    let Some(node) = tx.node(id).await? else {
        tx.rollback().await?;
        return Err(OpsError::NotFound);
    };
    let certificates = tx
        .node_certs(id)
        .await?
        .into_iter()
        .map(|c| Certificate {
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
    let bindings = bindings(&mut tx, id).await?;
    tx.commit().await?;
    Ok(NodeDetail {
        node: view(node),
        certificates,
        bindings,
    })
}

async fn bindings(tx: &mut Tx, id: &str) -> Result<Vec<Binding>, OpsError> {
    Ok(tx
        .node_bindings(id)
        .await?
        .into_iter()
        .map(|(kind, value)| Binding { kind, value })
        .collect())
}

/// What every action on a node starts with: a transaction holding the live (not deleted)
/// node's row locked; [`OpsError::NotFound`] otherwise.
pub(crate) async fn begin_node_action(db: &Db, id: &str) -> Result<(Tx, NodeRow), OpsError> {
    let mut tx = db.begin().await?;
    match tx.lock_node(id).await?.filter(|n| n.deleted_at.is_none()) {
        Some(node) => Ok((tx, node)),
        None => {
            tx.rollback().await?;
            Err(OpsError::NotFound)
        }
    }
}

/// Appends the event of an operator's action on `node`.
pub(crate) async fn node_event(
    tx: &mut Tx,
    actor: &Actor,
    kind: &str,
    node: &NodeRow,
    at: i64,
    payload: Value,
) -> Result<(), OpsError> {
    let mut e = event(at, kind, payload);
    e.tenant_id = Some(node.tenant_id.clone());
    e.node_id = Some(node.id.clone());
    record(tx, actor, &e).await?;
    Ok(())
}

/// How many of a node's certificates are live (not revoked).
async fn live_certs(tx: &mut Tx, node_id: &str) -> Result<u64, OpsError> {
    let certs = tx.node_certs(node_id).await?;
    Ok(certs.iter().filter(|c| c.revoked.is_none()).count() as u64)
}

/// Cordons (or uncordons) a node.
pub async fn set_cordon(
    db: &Db,
    actor: &Actor,
    id: &Id,
    cordoned: bool,
) -> Result<Cordoned, OpsError> {
    let (mut tx, node) = begin_node_action(db, id).await?;
    let changed = node.cordoned != cordoned;
    if changed {
        let at = tx.now().await?;
        if !tx.set_cordoned(id, cordoned, at).await? {
            return Err(OpsError::NotFound);
        }
        let kind = if cordoned {
            "node.cordoned"
        } else {
            "node.uncordoned"
        };
        node_event(
            &mut tx,
            actor,
            kind,
            &node,
            at,
            json!({ "cordoned": cordoned }),
        )
        .await?;
    }
    tx.commit().await?;
    if changed {
        tracing::info!(node_id = %id, cordoned, %actor, "node cordon changed");
    }
    Ok(Cordoned {
        id: id.to_string(),
        cordoned,
        changed,
    })
}

/// Retires a node: it never joins or renews again; its certificates are revoked
/// (`node-removed`). It stays listed.
pub async fn retire(db: &Db, actor: &Actor, id: &Id) -> Result<Retired, OpsError> {
    let (mut tx, node) = begin_node_action(db, id).await?;
    let mut revoked = 0;
    let changed = !node.retired;
    if changed {
        revoked = live_certs(&mut tx, id).await?;
        let at = tx.now().await?;
        if !tx.retire_node(id, at).await? {
            return Err(OpsError::NotFound);
        }
        node_event(
            &mut tx,
            actor,
            "node.retired",
            &node,
            at,
            json!({ "certificatesRevoked": revoked }),
        )
        .await?;
    }
    tx.commit().await?;
    if changed {
        tracing::info!(node_id = %id, certificates_revoked = revoked, %actor, "node retired");
    }
    Ok(Retired {
        id: id.to_string(),
        retired: true,
        changed,
        certificates_revoked: revoked,
    })
}

/// Deletes a node: retires it, revokes its certificates, frees its bindings and hardware key
/// (so the machine can join again as a new node) and hides it from the list; [`show`] still
/// shows it, with `deletedAt`.
pub async fn delete(db: &Db, actor: &Actor, id: &Id) -> Result<Deleted, OpsError> {
    let (mut tx, node) = begin_node_action(db, id).await?;
    let revoked = live_certs(&mut tx, id).await?;
    let bindings = bindings(&mut tx, id).await?;
    let at = tx.now().await?;
    if !tx.delete_node(id, at).await? {
        return Err(OpsError::NotFound);
    }
    let hardware_key_freed = node.hardware_key.is_some();
    node_event(
        &mut tx,
        actor,
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
        %actor,
        "node deleted"
    );
    Ok(Deleted {
        id: id.to_string(),
        deleted_at: at,
        certificates_revoked: revoked,
        bindings_freed: bindings,
        hardware_key_freed,
    })
}

/// Raises the node's identity generation and revokes every certificate it holds
/// (`identity-revoked`); the machine joins again only with a token that re-keys it
/// (`expect.nodeId`, or `reclaim`) or an attestor that proves it afresh.
pub async fn revoke_identity(db: &Db, actor: &Actor, id: &Id) -> Result<IdentityRevoked, OpsError> {
    let (mut tx, node) = begin_node_action(db, id).await?;
    if node.retired {
        tx.rollback().await?;
        return Err(OpsError::invalid(
            "the node is retired: it has no identity left to revoke",
        ));
    }
    let revoked = live_certs(&mut tx, id).await?;
    let at = tx.now().await?;
    let Some(generation) = tx.revoke_identity(id, at).await? else {
        return Err(OpsError::NotFound);
    };
    let previous = node.identity_generation;
    node_event(
        &mut tx,
        actor,
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
    tracing::info!(node_id = %id, generation, certificates_revoked = revoked, %actor, "node identity revoked");
    Ok(IdentityRevoked {
        id: id.to_string(),
        previous_generation: previous,
        generation,
        certificates_revoked: revoked,
    })
}

/// The certificate serial of a path (hex, up to 20 bytes as X.509 allows), lowercased.
pub fn serial(serial: &str) -> Result<String, OpsError> {
    if !serial.is_empty() && serial.len() <= 40 && serial.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(serial.to_ascii_lowercase())
    } else {
        Err(OpsError::invalid(
            "the serial is not a certificate serial (hex)",
        ))
    }
}

/// Revokes one certificate of the node (`operator`); [`OpsError::NotFound`] if the node has
/// no certificate of that serial.
pub async fn revoke_cert(
    db: &Db,
    actor: &Actor,
    id: &Id,
    serial_text: &str,
) -> Result<CertRevoked, OpsError> {
    let serial = serial(serial_text)?;
    let (mut tx, node) = begin_node_action(db, id).await?;
    let Some(cert) = tx
        .node_certs(id)
        .await?
        .into_iter()
        .find(|c| c.serial == serial)
    else {
        tx.rollback().await?;
        return Err(OpsError::NotFound);
    };
    let changed = cert.revoked.is_none();
    let reason = cert.revoked.unwrap_or(Revocation::Operator);
    if changed {
        let at = tx.now().await?;
        if !tx.revoke_node_cert(id, &serial).await? {
            return Err(OpsError::NotFound);
        }
        node_event(
            &mut tx,
            actor,
            "node.cert-revoked",
            &node,
            at,
            json!({ "serial": serial, "generation": cert.generation }),
        )
        .await?;
    }
    tx.commit().await?;
    if changed {
        tracing::info!(node_id = %id, %serial, %actor, "node certificate revoked");
    }
    Ok(CertRevoked {
        id: id.to_string(),
        serial,
        revoked: reason,
        changed,
    })
}

fn inventory_view(i: InventoryRow) -> Inventory {
    Inventory {
        id: i.id,
        node_id: i.node_id,
        product_uuid: i.product_uuid,
        macs: i.macs,
        recorded_at: i.recorded_at,
    }
}

/// Records what the node's hardware is (the newest inventory is what a provisioned join's
/// product UUID is checked against).
pub async fn record_inventory(
    db: &Db,
    actor: &Actor,
    id: &Id,
    req: RecordInventory,
) -> Result<Inventory, OpsError> {
    let product_uuid = req
        .product_uuid
        .as_deref()
        .map(super::product_uuid)
        .transpose()?;
    if req.macs.len() > MAX_MACS {
        return Err(OpsError::invalid(format!("at most {MAX_MACS} MACs")));
    }
    let mut macs = req
        .macs
        .iter()
        .map(|m| super::mac(m))
        .collect::<Result<Vec<_>, _>>()?;
    macs.dedup();
    let (mut tx, node) = begin_node_action(db, id).await?;
    let at = tx.now().await?;
    let row = InventoryRow {
        id: crate::store::new_id("inv_"),
        node_id: node.id.clone(),
        product_uuid,
        macs,
        recorded_at: at,
    };
    tx.insert_inventory(&row).await?;
    node_event(
        &mut tx,
        actor,
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
    tracing::info!(node_id = %node.id, inventory_id = %row.id, %actor, "inventory recorded");
    Ok(inventory_view(row))
}

/// A node's inventories, newest first, a page at a time.
pub async fn inventories(
    db: &Db,
    id: &Id,
    page: &PageRequest,
) -> Result<Page<Inventory>, OpsError> {
    let (before, limit) = page.resolve::<Cursor>()?;
    let before = before.unwrap_or_else(Cursor::end);
    let (mut tx, _node) = begin_node_action(db, id).await?;
    let rows = tx.inventories(id, &before, limit).await?;
    tx.commit().await?;
    let rows: Vec<Inventory> = rows.into_iter().map(inventory_view).collect();
    Ok(Page::new(rows, limit, |i: &Inventory| Cursor {
        created_at: i.recorded_at,
        id: i.id.clone(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serials_are_hex_lowercased() {
        assert_eq!(serial("0A1b").unwrap(), "0a1b");
        for bad in ["", "xyz", "0a/1", &"a".repeat(41)] {
            assert!(serial(bad).is_err(), "{bad:?}");
        }
    }
}
