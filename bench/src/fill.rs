//! `bench --nodes N`: the rows a busy deployment already holds, written once per backend into
//! a template every run then starts from, so that joins and lookups are measured against large
//! tables rather than empty ones.
//!
//! Each filled node has a live certificate and a binding, and for each there is a spent
//! token: the four tables a token join and a renewal look rows up in. The rows are written
//! through the host's own store (the statements production runs, not a copy of its SQL), in
//! transactions of [`BATCH`] rows from [`WRITERS`] tasks. The scale test (`tests/all/scale.rs`)
//! fills its database with it too.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::Context as _;

use gatehouse::pki::{IssueRequest, Pki};
use gatehouse::store::{
    Db, NewNode, NewNodeCert, NewToken, NodeRole, TokenExpect, TokenRole, new_id,
};

/// Rows per transaction.
const BATCH: usize = 2_000;

/// Tasks writing batches at once (SQLite serialises them on its one writer).
const WRITERS: usize = 4;

/// Filled rows kept as the [`Sample`] to look up, spread evenly over the fill.
pub const SAMPLES: usize = 1_000;

/// The binding kind of every filled node.
pub const BINDING_KIND: &str = "fill";

/// One filled node's keys: what a renewal, an operator or an attestor finds its rows by.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Its id.
    pub node_id: String,
    /// Its certificate, exactly as issued (a renewal finds the row by these bytes).
    pub cert_der: Vec<u8>,
    /// The id of its spent token.
    pub token_id: String,
    /// Its binding's value, of kind [`BINDING_KIND`].
    pub binding: String,
}

/// Writes `nodes` nodes, each with a certificate, a binding and a spent token, into `db`;
/// returns about [`SAMPLES`] of them, spread evenly from the first written to the last.
///
/// Node ids, token ids and serials are made by the host's own makers ([`new_id`] and the
/// issuer's serials): they start with the time they were made, so a filled fleet's rows sort
/// as a fleet's do, oldest first, and the benchmark's new rows land after them. (Before
/// 2026-12-05 the fill made sequential ids in one narrow range, which made a large database
/// look cheaper than it was; from then until the host's keys became time-ordered, random ones
/// as the host made them.)
///
/// The certificates are real ones, each for the same node key, issued by a CA made for the
/// fill: since migration 9 a presented certificate is found by the serial its DER names, so a
/// lookup by DER needs DER that parses. (Until 2026-12-07 the fill wrote 600 bytes of stand-in
/// DER, which no lookup could find.) Issued outside the transactions, so SQLite's writer is not
/// held while they are signed.
pub async fn fill(db: &Db, nodes: usize) -> anyhow::Result<Vec<Sample>> {
    let issuer = Arc::new(Issuer::new()?);
    let now = db.read().await?.now().await?;
    let next = Arc::new(AtomicUsize::new(0));
    let stride = nodes.div_ceil(SAMPLES).max(1);
    let mut writers = tokio::task::JoinSet::new();
    for _ in 0..WRITERS {
        let (db, next, issuer) = (db.clone(), next.clone(), issuer.clone());
        writers.spawn(async move {
            let mut kept = Vec::new();
            loop {
                let start = next.fetch_add(BATCH, Ordering::Relaxed);
                if start >= nodes {
                    return anyhow::Ok(kept);
                }
                let rows = start..(start + BATCH).min(nodes);
                kept.extend(batch(&db, &issuer, rows, now, stride).await?);
            }
        });
    }
    let mut sample = Vec::new();
    while let Some(done) = writers.join_next().await {
        sample.extend(done.context("a fill task panicked")??);
    }
    sample.sort_by_key(|(i, _)| *i);
    Ok(sample.into_iter().map(|(_, s)| s).collect())
}

/// The fill's CA and the one node key every filled certificate is for.
struct Issuer {
    pki: Pki,
    spki_der: Vec<u8>,
}

impl Issuer {
    fn new() -> anyhow::Result<Self> {
        Ok(Self {
            pki: Pki::generate("fill.invalid")?,
            spki_der: gatehouse_agent::NodeKey::generate()?.spki_der(),
        })
    }
}

/// One filled node's rows.
struct Row {
    node: NewNode,
    cert: NewNodeCert,
    binding: String,
    token: NewToken,
}

/// One transaction's rows; returns those of them kept as samples (every `stride`-th), with
/// their index.
async fn batch(
    db: &Db,
    issuer: &Issuer,
    rows: std::ops::Range<usize>,
    now: i64,
    stride: usize,
) -> anyhow::Result<Vec<(usize, Sample)>> {
    let rows = rows
        .map(|i| Ok((i, row(issuer, i, now)?)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut tx = db.begin().await?;
    for (_, r) in &rows {
        tx.insert_node(&r.node).await?;
        tx.insert_node_cert(&r.cert).await?;
        tx.bind(BINDING_KIND, &r.binding, &r.node.id).await?;
        tx.insert_token(&r.token).await?;
    }
    tx.commit().await?;
    Ok(rows
        .into_iter()
        .filter(|(i, _)| i % stride == 0)
        .map(|(i, r)| {
            let sample = Sample {
                node_id: r.node.id,
                cert_der: r.cert.der,
                token_id: r.token.id,
                binding: r.binding,
            };
            (i, sample)
        })
        .collect())
}

/// Filled node `i`'s rows, its certificate issued.
fn row(issuer: &Issuer, i: usize, now: i64) -> anyhow::Result<Row> {
    let node_id = new_id("node_");
    let issued = issuer.pki.issue_node_cert(&IssueRequest {
        node_id: &node_id,
        role: NodeRole::Node.as_str(),
        spki_der: &issuer.spki_der,
        statements: &[],
        not_before_ms: now - 60_000,
        not_after_ms: now + 86_400_000,
    })?;
    Ok(Row {
        node: root_node(node_id.clone(), now),
        cert: NewNodeCert {
            serial: issued.serial_hex,
            node_id,
            der: issued.der,
            generation: 1,
            role: NodeRole::Node,
            not_before: issued.not_before_ms,
            not_after: issued.not_after_ms,
            statements: vec![],
            created_at: now,
        },
        binding: format!("value-{i:08}"),
        token: NewToken {
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
        },
    })
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
