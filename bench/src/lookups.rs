//! The host's hot reads alone, against whatever the run's database holds: what a renewal, an
//! operator and an attestor look a node's rows up by. Issue 14 asks that lookups stay flat from
//! an empty database to a million nodes; the scale test proves each is planned as an index
//! lookup on both backends, and this says how many a second the database serves at the size
//! `--nodes` filled.
//!
//! Each lookup is of a filled row ([`fill::Sample`]), on the host's read pool ([`Db::read`],
//! one statement a lookup, as the host reads outside a write), and must find that row: a lookup
//! that finds nothing or another row fails the run, so a fast figure cannot come from a miss.
//!
//! A rate from [`TASKS`] tasks at once, not one lookup's latency: timed one after another on
//! this VM, a lookup's time was mostly its two threads waking each other (7–14 µs a lookup
//! while the cores were busy from the fill before it, 56–73 µs once they idled between
//! lookups, in one run of the same rows), which says nothing about the tables.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::Context as _;
use gatehouse::store::{Db, Tx};
use rand::seq::SliceRandom as _;

use crate::fill::{self, Sample};

/// Each sample is looked up this many times by each kind of lookup, in a random order.
const ROUNDS: usize = 3;

/// Tasks looking up at once, each on a connection of the host's read pool (which has 8).
const TASKS: usize = 8;

/// What a lookup finds a filled node's rows by.
#[derive(Debug, Clone, Copy)]
enum Lookup {
    /// A certificate by the DER a client presents (a renewal's, a site agent's first read).
    Cert,
    /// A node by its id (the renewal's node, an operator's `GET /v1/nodes/{id}`).
    Node,
    /// A node's certificates (an operator's view of a node; a reclaim's).
    NodeCerts,
    /// A token by its id (the attestor's read at every token join).
    Token,
    /// The node a hardware identity is bound to (a binding attestor's read).
    Binding,
    /// The certificates the CRL lists (none are revoked in a fill: the read, not the list).
    Crl,
}

impl Lookup {
    const ALL: [Lookup; 6] = [
        Lookup::Cert,
        Lookup::Node,
        Lookup::NodeCerts,
        Lookup::Token,
        Lookup::Binding,
        Lookup::Crl,
    ];

    /// Its name in the benchmark's JSON.
    fn name(self) -> &'static str {
        match self {
            Lookup::Cert => "cert",
            Lookup::Node => "node",
            Lookup::NodeCerts => "node_certs",
            Lookup::Token => "token",
            Lookup::Binding => "binding",
            Lookup::Crl => "crl",
        }
    }

    /// Looks `s`'s rows up; an error unless it found them.
    async fn run(self, tx: &mut Tx, s: &Sample, now: i64) -> anyhow::Result<()> {
        let node = &s.node_id;
        let found = match self {
            Lookup::Cert => tx.node_cert_by_der(&s.cert_der).await?.map(|c| c.node_id),
            Lookup::Node => tx.node(node).await?.map(|n| n.id),
            Lookup::NodeCerts => tx.node_certs(node).await?.pop().map(|c| c.node_id),
            Lookup::Token => tx.read_token(&s.token_id).await?.map(|_| node.clone()),
            Lookup::Binding => tx.bound_node(fill::BINDING_KIND, &s.binding).await?,
            Lookup::Crl => {
                let listed = tx.revoked_node_certs(now).await?.len();
                anyhow::ensure!(listed == 0, "the CRL lists {listed} filled certificates");
                Some(node.clone())
            }
        };
        anyhow::ensure!(
            found.as_deref() == Some(node.as_str()),
            "the {} lookup of node {node} found {found:?}",
            self.name()
        );
        Ok(())
    }
}

/// Lookups a second of each kind, in [`Lookup::ALL`]'s order.
pub(super) struct Lookups([f64; Lookup::ALL.len()]);

impl Lookups {
    pub(super) fn json(&self) -> serde_json::Value {
        let each = Lookup::ALL.iter().zip(self.0);
        each.map(|(l, rate)| (l.name().to_owned(), super::round1(rate).into()))
            .collect::<serde_json::Map<_, _>>()
            .into()
    }
}

/// Looks every one of `sample`'s rows up [`ROUNDS`] times by each kind of lookup, one kind
/// after another, from [`TASKS`] tasks at once: each kind's lookups a second.
pub(super) async fn measure(db: &Db, sample: &[Sample]) -> anyhow::Result<Lookups> {
    anyhow::ensure!(!sample.is_empty(), "no filled rows to look up");
    let now = db.read().await?.now().await?;
    // Copied once for the tasks; each kind's order is of indexes into it.
    let sample: Arc<[Sample]> = sample.into();
    let mut rates = [0.0; Lookup::ALL.len()];
    for (lookup, rate) in Lookup::ALL.into_iter().zip(&mut rates) {
        let mut order: Vec<usize> = (0..ROUNDS).flat_map(|_| 0..sample.len()).collect();
        order.shuffle(&mut rand::rng());
        let order: Arc<[usize]> = order.into();
        let next = Arc::new(AtomicUsize::new(0));
        let started = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..TASKS {
            let (db, sample, order, next) =
                (db.clone(), sample.clone(), order.clone(), next.clone());
            tasks.spawn(async move {
                let mut tx = db.read().await?;
                while let Some(&i) = order.get(next.fetch_add(1, Ordering::Relaxed)) {
                    lookup.run(&mut tx, &sample[i], now).await?;
                }
                anyhow::Ok(())
            });
        }
        while let Some(done) = tasks.join_next().await {
            done.context("a lookup task panicked")??;
        }
        *rate = order.len() as f64 / started.elapsed().as_secs_f64();
    }
    Ok(Lookups(rates))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind of lookup finds the filled rows; a certificate the fill did not write (one
    /// byte of a filled one changed) is not found, and the run fails rather than time a miss.
    #[tokio::test]
    async fn lookups_find_every_filled_row_and_fail_on_a_miss() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let db = Db::connect(&gatehouse::store::sqlite_url(&dir.path().join("l.db"))?).await?;
        db.migrate().await?;
        let sample = fill::fill(&db, 30).await?;
        anyhow::ensure!(sample.len() == 30, "{} samples of 30 rows", sample.len());
        let rates = measure(&db, &sample).await?;
        anyhow::ensure!(rates.0.iter().all(|rate| *rate > 0.0), "{}", rates.json());

        let mut forged = sample[7].clone();
        let last = forged.cert_der.len() - 1;
        forged.cert_der[last] ^= 1;
        let error = measure(&db, &[forged]).await.err().expect("a miss fails");
        anyhow::ensure!(
            format!("{error:#}").contains("the cert lookup of node"),
            "{error:#}"
        );
        db.close().await;
        Ok(())
    }
}
