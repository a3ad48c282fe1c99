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

use gatehouse::store::{Db, NewNode, NewNodeCert, NewToken, NodeRole, TokenExpect, TokenRole};

/// Rows per transaction.
const BATCH: usize = 2_000;

/// Tasks writing batches at once (SQLite serialises them on its one writer).
const WRITERS: usize = 4;

/// Writes `nodes` nodes, each with a certificate, a binding and a spent token, into `db`.
///
/// Node ids, token ids and serials are random like those the host makes, so they are spread
/// over the whole of each index, as a fleet's are, and the benchmark's own new rows land among
/// them. Sequential ids (as before 2026-12-05) sorted in one narrow range that new rows never
/// touched, which made a large database look cheaper than it is: with 100,000 rows, the
/// database limit was about a fifth higher than with random ones.
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
        let node_id = format!("node_{}", random_base32());
        tx.insert_node(&root_node(node_id.clone(), now)).await?;
        // A certificate's size; unique, as rows are by their DER's hash.
        let mut der = format!("fill {i:08}").into_bytes();
        der.resize(600, 0x30);
        tx.insert_node_cert(&NewNodeCert {
            // 16 bytes, positive, top byte's next bit set: as `pki::issue` makes them.
            serial: format!("{:032x}", (rand::random::<u128>() >> 2) | (1 << 126)),
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
            id: format!("tok_{}", random_base32()),
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

/// 26 characters of lowercase base32 (130 random bits), as the host's ids have after their
/// prefix (the host's maker is crate-private, and a fill needs only the same spread).
fn random_base32() -> String {
    const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    let bytes: [u8; 26] = rand::random();
    bytes
        .iter()
        .map(|b| ALPHABET[usize::from(b & 31)] as char)
        .collect()
}
