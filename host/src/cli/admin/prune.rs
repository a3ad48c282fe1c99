//! `gatehouse prune tokens|events|audits --older-than DUR` and `prune uses` (also spelled
//! `prune-uses`): clients of the admin API's prune routes, which delete a batch per request,
//! each its own short transaction on the host, until a batch comes back short.

use std::io::Write;

use clap::{Args, Subcommand};
use serde::Serialize;
use serde_json::json;

use super::client::Client;
use super::output::OutputArgs;
use crate::cli::AdminConnection;
use crate::ops::types::{PruneByAge, PruneUses, Pruned};

#[derive(Debug, Subcommand)]
pub(in crate::cli) enum PruneCommand {
    /// Deletes tokens created before the age that can admit no one any more (spent, revoked
    /// or expired). A token with a use left that is live is never deleted.
    Tokens(PruneByAgeArgs),
    /// Deletes events older than the age, oldest first.
    Events(PruneByAgeArgs),
    /// Deletes audit records older than the age, oldest first.
    Audits(PruneByAgeArgs),
    /// Deletes expired single-use evidence records.
    Uses(PruneUsesArgs),
}

#[derive(Debug, Args)]
pub(in crate::cli) struct PruneByAgeArgs {
    /// How old a row must be to go (e.g. 30d, 12h), by the database's clock.
    #[arg(long)]
    older_than: humantime::Duration,
    /// Rows deleted per transaction (1 to 100000).
    #[arg(long, default_value_t = 5000)]
    batch: u32,
    // `-o json`: print `{"deleted": N}` instead of a sentence.
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    conn: AdminConnection,
}

#[derive(Debug, Args)]
pub(in crate::cli) struct PruneUsesArgs {
    /// Records deleted per transaction (1 to 100000).
    #[arg(long, default_value_t = 5000)]
    batch: u32,
    // `-o json`: print `{"deleted": N}` instead of a sentence.
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    conn: AdminConnection,
}

/// `prune <what> ...`.
pub(in crate::cli) async fn prune(
    command: PruneCommand,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<()> {
    let (a, path, what) = match command {
        PruneCommand::Uses(a) => return prune_uses(a, out).await,
        PruneCommand::Tokens(a) => (a, "/v1/admin/tokens/prune", "dead tokens"),
        PruneCommand::Events(a) => (a, "/v1/admin/events/prune", "events"),
        PruneCommand::Audits(a) => (a, "/v1/admin/audits/prune", "audit records"),
    };
    let client = Client::new(&a.conn)?;
    let body = PruneByAge {
        older_than_seconds: a.older_than.as_secs(),
        batch: Some(a.batch),
    };
    let total = in_batches(&client, path, &body, a.batch).await?;
    if a.output.json() {
        writeln!(out, "{}", json!({ "deleted": total }))?;
    } else {
        writeln!(out, "pruned {total} {what} older than {}", a.older_than)?;
    }
    Ok(())
}

/// `prune-uses [--batch N]` (and `prune uses`): deletes expired single-use records.
pub(in crate::cli) async fn prune_uses(
    a: PruneUsesArgs,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<()> {
    let client = Client::new(&a.conn)?;
    let body = PruneUses {
        batch: Some(a.batch),
    };
    let total = in_batches(&client, "/v1/admin/attestation-uses/prune", &body, a.batch).await?;
    if a.output.json() {
        writeln!(out, "{}", json!({ "deleted": total }))?;
    } else {
        writeln!(out, "pruned {total} expired single-use records")?;
    }
    Ok(())
}

/// Posts `body` to `path` until a batch comes back short; how many rows went in all.
async fn in_batches<B: Serialize>(
    client: &Client,
    path: &str,
    body: &B,
    batch: u32,
) -> anyhow::Result<u64> {
    if batch == 0 {
        anyhow::bail!("--batch must be at least 1");
    }
    let mut total = 0u64;
    loop {
        let answer: Pruned = client.post(path, body).await?;
        total += answer.deleted;
        if answer.deleted < u64::from(batch) {
            return Ok(total);
        }
    }
}
