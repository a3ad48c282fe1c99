//! `bench --nodes N`: the rows a busy deployment already holds, written once per backend into
//! a template every run then starts from, so that joins are measured against large tables
//! rather than empty ones.
//!
//! Each filled node has a live certificate and a binding, and for each there is a spent
//! token: the four tables a token join and a renewal look rows up in. The rows are written
//! through the host's own store (the statements production runs, not a copy of its SQL), in
//! transactions of [`BATCH`] rows from [`WRITERS`] tasks. The scale test (`tests/all/scale.rs`)
//! fills its database with it too.

use anyhow::Context as _;

use gatehouse::pki::new_serial;
use gatehouse::store::{
    Db, NewNode, NewNodeCert, NewToken, NodeRole, TokenExpect, TokenRole, new_id,
};

/// Rows per transaction.
const BATCH: usize = 2_000;

/// Tasks writing batches at once (SQLite serialises them on its one writer).
const WRITERS: usize = 4;

/// Writes `nodes` nodes, each with a certificate, a binding and a spent token, into `db`.
///
/// Node ids, token ids and serials are made by the host's own makers ([`new_id`],
/// [`new_serial`]): they start with the time they were made, so a filled fleet's rows sort as
/// a fleet's do, oldest first, and the benchmark's new rows land after them. (Before
/// 2026-12-05 the fill made sequential ids in one narrow range, which made a large database
/// look cheaper than it was; from then until the host's keys became time-ordered, random ones
/// as the host made them.)
pub async fn fill(db: &Db, nodes: usize) -> anyhow::Result<()> {
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut writers = tokio::task::JoinSet::new();
    for _ in 0..WRITERS {
        let (db, next) = (db.clone(), next.clone());
        writers.spawn(async move {
            loop {
                let start = next.fetch_add(BATCH, std::sync::atomic::Ordering::Relaxed);
                if start >= nodes {
                    return anyhow::Ok(());
                }
                batch(&db, start..(start + BATCH).min(nodes)).await?;
            }
        });
    }
    while let Some(done) = writers.join_next().await {
        done.context("a fill task panicked")??;
    }
    Ok(())
}

/// One transaction's rows.
async fn batch(db: &Db, rows: std::ops::Range<usize>) -> anyhow::Result<()> {
    let mut tx = db.begin().await?;
    let now = tx.now().await?;
    for i in rows {
        let node_id = new_id("node_");
        tx.insert_node(&root_node(node_id.clone(), now)).await?;
        // A certificate's size, not a certificate: since migration 9 a certificate is found by
        // the serial its DER names, so no lookup finds these rows by their DER (no join or
        // renewal measured presents one); the serial is the row's key.
        let mut der = format!("fill {i:08}").into_bytes();
        der.resize(600, 0x30);
        tx.insert_node_cert(&NewNodeCert {
            serial: new_serial()?.1,
            node_id: node_id.clone(),
            der,
            generation: 1,
            role: NodeRole::Node,
            not_before: now - 60_000,
            not_after: now + 86_400_000,
            statements: vec![],
            created_at: now,
        })
        .await?;
        tx.bind("fill", &format!("value-{i:08}"), &node_id).await?;
        tx.insert_token(&NewToken {
            id: new_id("tok_"),
            role: TokenRole::Node,
            secret_sha256: [0; 32],
            tenant_id: "root".into(),
            pool_id: None,
            site_id: None,
            expires_at: now + 3_600_000,
            uses: 0,
            expect: TokenExpect::default(),
            reclaim: false,
            created_at: now,
        })
        .await?;
    }
    tx.commit().await?;
    Ok(())
}

/// A node of the root tenant in no pool or site, as a token join of the benchmark makes it.
pub(crate) fn root_node(id: String, created_at: i64) -> NewNode {
    NewNode {
        id,
        tenant_id: "root".into(),
        pool_id: None,
        site_id: None,
        role: NodeRole::Node,
        identity_generation: 1,
        hardware_key: None,
        created_at,
    }
}
