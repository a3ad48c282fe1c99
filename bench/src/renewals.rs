//! `joins_<backend>.renew_16`: renewals a second, end to end, as nodes renew. A renewal is the
//! write a fleet makes most once it has joined (a million nodes renewing once a day make
//! about twelve a second), and it finds its rows as a join does not: by the certificate the
//! client presents, then the node and the node's certificates, under the node's lock. With
//! `--nodes N` it runs against the filled tables, so issue 14's "joins stay flat" is measured
//! for it too.
//!
//! Each renewal is what an agent does ([`gatehouse_agent::RenewClient`]): a fresh node key and
//! its CSR, a new TLS connection presenting the node's current certificate (a client holds one
//! certificate, so each renewal is a handshake of its own), the host's checks, issue and
//! supersession, and the agent's checks of the answer (signed by the pinned key, bound to the
//! CSR, a leaf for the new key naming the node). A renewal that fails or is refused fails the
//! run, so a refusal is never timed as a renewal.
//!
//! The nodes are joined before the clock, each renews once in the timed window, and each agent
//! first renews a node of its own untimed, as [`super::joins_per_second`]'s agents join once.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use futures::{StreamExt as _, TryStreamExt as _};
use gatehouse_agent::{JoinClient, Joined, NodeKey, RenewClient};
use gatehouse_proto::{JoinTrust, TokenString};
use tokio::runtime::Handle;

use super::{Host, Hosts, agent_join, round1};

/// Agents renewing at once.
pub(super) const AGENTS: usize = 16;

/// A joined node, as its agent holds it.
struct Node {
    key: NodeKey,
    joined: Joined,
}

/// Renewals a second and their latencies.
pub(super) struct Renewals {
    per_s: f64,
    p50: Duration,
    p99: Duration,
}

impl Renewals {
    pub(super) fn json(&self) -> serde_json::Value {
        let ms = |d: Duration| round1(d.as_secs_f64() * 1e3);
        serde_json::json!({
            "renewals_per_s": round1(self.per_s),
            "p50_ms": ms(self.p50),
            "p99_ms": ms(self.p99),
        })
    }
}

/// `renewals` renewals from [`AGENTS`] agents at once, on a dev host over the database at
/// `database_url` (or a SQLite file of its own), each node renewing once.
pub(super) async fn measure(
    database_url: Option<String>,
    renewals: usize,
    hosts: &Hosts<'_>,
) -> anyhow::Result<Renewals> {
    run(database_url, renewals, AGENTS, hosts, 0).await
}

/// [`measure`] with `agents` agents, on a host that issues a node at most one certificate every
/// `issue_interval_seconds`.
async fn run(
    database_url: Option<String>,
    renewals: usize,
    agents: usize,
    hosts: &Hosts<'_>,
    issue_interval_seconds: u32,
) -> anyhow::Result<Renewals> {
    let host = Host::start(database_url, hosts, |config| {
        // Each node renews straight after its join. The interval is a node's guard against
        // renewing in a loop; here every node renews once, so it would only refuse them.
        config.limits.node_issue_interval_seconds = issue_interval_seconds;
    })
    .await?;
    let tokens = host.mint(renewals + agents, 1).await?;
    let mut nodes = join_all(&host, tokens, agents)
        .await
        .context("the renewing nodes' joins")?;
    let warm_up = nodes.split_off(renewals);
    let (url, trust) = (Arc::new(host.url.clone()), Arc::new(host.trust.clone()));
    let agent = move |node| {
        let (url, trust) = (url.clone(), trust.clone());
        async move { renew(&url, &trust, &node).await }
    };
    let crowd = super::crowd::warm_up(&Handle::current(), warm_up, nodes, agent)
        .await
        .finish()
        .await;
    host.running.shutdown().await;
    let crowd = crowd?;
    let renewed = crowd.outputs.len();
    anyhow::ensure!(
        renewed == renewals,
        "only {renewed} of {renewals} renewals succeeded"
    );
    Ok(Renewals {
        per_s: renewed as f64 / crowd.elapsed.as_secs_f64(),
        p50: crowd.latency(0.50),
        p99: crowd.latency(0.99),
    })
}

/// Joins a node on each of `tokens`, `agents` at once.
async fn join_all(
    host: &Host,
    tokens: Vec<TokenString>,
    agents: usize,
) -> anyhow::Result<Vec<Node>> {
    let client = JoinClient::new(&host.url, &host.trust)?;
    let join = async |token: TokenString| {
        let (key, joined) = agent_join(&client, &host.trust, &token).await?;
        anyhow::Ok(Node { key, joined })
    };
    futures::stream::iter(tokens)
        .map(join)
        .buffer_unordered(agents)
        .try_collect()
        .await
}

/// `node`'s renewal, as its agent makes it: a new key, a client presenting the node's
/// certificate, and the answer checked.
async fn renew(url: &str, trust: &JoinTrust, node: &Node) -> anyhow::Result<()> {
    let client = RenewClient::new(url, trust, &node.key, &node.joined.chain)?;
    let next = NodeKey::generate()?;
    client.renew(trust, &node.joined.node_id, &next).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every node renews once through a real host over mTLS, each answer passing the agent's
    /// checks.
    #[tokio::test]
    async fn a_run_renews_every_node_once() -> anyhow::Result<()> {
        let compiled = tempfile::tempdir()?;
        let hosts = Hosts::new(compiled.path(), None);
        let renewals = run(None, 7, 3, &hosts, 0).await?;
        anyhow::ensure!(renewals.per_s > 0.0 && renewals.p99 >= renewals.p50);
        Ok(())
    }

    /// A host that refuses the renewals (each node renews sooner than its issue interval
    /// allows: `rate-limited`) fails the run: a refusal is not timed as a renewal.
    #[tokio::test]
    async fn a_refused_renewal_fails_the_run() -> anyhow::Result<()> {
        let compiled = tempfile::tempdir()?;
        let hosts = Hosts::new(compiled.path(), None);
        let error = run(None, 2, 1, &hosts, 3600)
            .await
            .err()
            .context("renewals the host refused were timed")?;
        anyhow::ensure!(format!("{error:#}").contains("HTTP 429"), "{error:#}");
        Ok(())
    }
}
