//! `gatehouse events [--follow]` and `gatehouse audits`: the host's logs. With `-o json` each
//! prints one JSON object a line (a stream `--follow` can keep appending to, and `jq` reads
//! line by line); the default is one aligned line per record.

use std::io::Write;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;

use super::client::{Client, NO_QUERY};
use super::output::{OutputArgs, Table, cell, escape, time};
use crate::cli::AdminConnection;
use crate::ops::Id;
use crate::ops::types::{Audit, AuditQuery, Event};
use crate::store::AuditResult;

#[derive(Debug, Args)]
pub(in crate::cli) struct EventsArgs {
    /// Keep printing new events as they happen.
    #[arg(long)]
    follow: bool,
    /// Start after this event id.
    #[arg(long, default_value_t = 0)]
    after: i64,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    conn: AdminConnection,
}

#[derive(Debug, Args)]
pub(in crate::cli) struct AuditsArgs {
    /// Only rounds about this node.
    #[arg(long)]
    node: Option<Id>,
    /// Only rounds of this attestor.
    #[arg(long)]
    attestor: Option<Id>,
    /// Only rounds that ended so: admitted, deferred, refused, shadow-admitted,
    /// shadow-deferred or shadow-refused.
    #[arg(long)]
    outcome: Option<AuditResult>,
    /// Only rounds of the last DURATION (e.g. 1h, 7d), by this machine's clock.
    #[arg(long, value_name = "DURATION")]
    since: Option<humantime::Duration>,
    /// Print at most this many records (the oldest that match).
    #[arg(long)]
    limit: Option<usize>,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    conn: AdminConnection,
}

/// How often `--follow` asks for new events when it has seen them all.
const FOLLOW_POLL: Duration = Duration::from_millis(500);
/// The longest `--follow` waits before asking again after a failed request.
const FOLLOW_MAX_BACKOFF: Duration = Duration::from_secs(10);

/// `gatehouse events [--follow]`, in the API's feed order (which, on Postgres, is commit order
/// rather than id order: see `Tx::event_feed`). The cursor is the id of the last event
/// printed, which is what the API continues from; it never skips an event that commits late,
/// and never prints one twice. `--follow` keeps polling until interrupted (Ctrl-C or SIGTERM
/// ends it with status 0), and rides out a host restart by retrying with backoff.
pub(in crate::cli) async fn events(
    args: EventsArgs,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<()> {
    let client = Client::new(&args.conn)?;
    let json = args.output.json();
    let mut after = args.after;
    if !json {
        writeln!(out, "{}", event_line(None))?;
    }
    if !args.follow {
        loop {
            let events = events_page(&client, after).await?;
            print_events(out, json, &events, &mut after)?;
            if events.len() < client.page_size as usize {
                return Ok(());
            }
        }
    }
    tokio::select! {
        done = follow(&client, out, json, after) => done,
        () = interrupted() => Ok(()),
    }
}

/// Prints events as they are written, until stdout closes.
async fn follow(
    client: &Client,
    out: &mut (dyn Write + Send),
    json: bool,
    mut after: i64,
) -> anyhow::Result<()> {
    let mut backoff = FOLLOW_POLL;
    loop {
        match events_page(client, after).await {
            Ok(events) => {
                backoff = FOLLOW_POLL;
                // A closed stdout (`| head`) ends the command.
                print_events(out, json, &events, &mut after)?;
                if events.len() < client.page_size as usize {
                    tokio::time::sleep(FOLLOW_POLL).await;
                }
            }
            Err(e) => {
                eprintln!(
                    "gatehouse events: {e:#}; retrying in {:.1}s",
                    backoff.as_secs_f32()
                );
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(FOLLOW_MAX_BACKOFF);
            }
        }
    }
}

/// One page of events after the event `after`.
async fn events_page(client: &Client, after: i64) -> anyhow::Result<Vec<Event>> {
    let after = after.to_string();
    let (events, _) = client
        .page("/v1/admin/events", &NO_QUERY, Some(&after))
        .await?;
    Ok(events)
}

/// An event as one line of fixed-width columns (a followed feed cannot align to rows it has
/// not seen yet); the header line for `None`.
fn event_line(e: Option<&Event>) -> String {
    let Some(e) = e else {
        return format!(
            "{:<8} {:<20} {:<28} {:<12} {:<28} {:<16} REASON",
            "ID", "AT", "KIND", "ACTOR", "NODE", "ATTESTOR"
        );
    };
    format!(
        "{:<8} {:<20} {:<28} {:<12} {:<28} {:<16} {}",
        e.id,
        time(Some(e.at)),
        escape(&e.kind),
        cell(e.actor.as_deref()),
        cell(e.node_id.as_deref()),
        cell(e.attestor.as_deref()),
        cell(e.reason.as_deref())
    )
}

/// Prints events and moves `after` to the last one.
fn print_events(
    out: &mut (dyn Write + Send),
    json: bool,
    events: &[Event],
    after: &mut i64,
) -> anyhow::Result<()> {
    for e in events {
        if json {
            writeln!(out, "{}", serde_json::to_string(e)?)?;
        } else {
            writeln!(out, "{}", event_line(Some(e)))?;
        }
        // Feed order, not id order: the cursor is the last event's id, not the largest.
        *after = e.id;
    }
    out.flush()?;
    Ok(())
}

/// `gatehouse audits [--node N] [--attestor A] [--outcome O] [--since D] [--limit N]`: the
/// audit records of join rounds that match, oldest first, read a page at a time (the host
/// filters, so only matching rows cross the network).
pub(in crate::cli) async fn audits(
    args: AuditsArgs,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<()> {
    let since = match args.since {
        Some(d) => {
            let ago = std::time::SystemTime::now()
                .checked_sub(*d)
                .context("--since reaches before the Unix epoch")?;
            let ms = ago
                .duration_since(std::time::UNIX_EPOCH)
                .context("--since reaches before the Unix epoch")?
                .as_millis();
            Some(i64::try_from(ms).context("--since is out of range")?)
        }
        None => None,
    };
    let query = AuditQuery {
        node_id: args.node,
        attestor: args.attestor,
        result: args.outcome,
        since,
        after: None,
        limit: None,
    };
    let client = Client::new(&args.conn)?;
    let mut audits: Vec<Audit> = Vec::new();
    let mut after: Option<String> = None;
    let wanted = args.limit.unwrap_or(usize::MAX);
    while audits.len() < wanted {
        let (page, next): (Vec<Audit>, _) = client
            .page("/v1/admin/audits", &query, after.as_deref())
            .await?;
        audits.extend(page);
        match next {
            Some(next) if after.as_deref() != Some(next.as_str()) => after = Some(next),
            _ => break,
        }
    }
    audits.truncate(wanted);
    if args.output.json() {
        for a in &audits {
            writeln!(out, "{}", serde_json::to_string(a)?)?;
        }
        return Ok(());
    }
    let mut t = Table::new(&[
        "ID", "AT", "ATTESTOR", "ROUND", "RESULT", "REASON", "NODE", "SUBJECT", "CLIENT",
    ]);
    for a in &audits {
        t.row(vec![
            a.id.to_string(),
            time(Some(a.at)),
            escape(&a.attestor),
            a.round.to_string(),
            a.result.to_string(),
            cell(a.reason.as_deref()),
            cell(a.node_id.as_deref()),
            cell(a.subject.as_deref()),
            cell(a.client_addr.as_deref()),
        ]);
    }
    t.write(out)
}

/// Ctrl-C, or SIGTERM on Unix.
async fn interrupted() {
    #[cfg(unix)]
    if let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        return;
    }
    let _ = tokio::signal::ctrl_c().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};

    #[test]
    fn audit_filters_parse_into_the_shared_query() {
        let cli = Cli::try_parse_args([
            "gatehouse",
            "audits",
            "--node",
            "node_1",
            "--attestor",
            "tpm",
            "--outcome",
            "refused",
            "--since",
            "1h",
            "--limit",
            "5",
            "-o",
            "json",
            "--server",
            "https://h",
        ])
        .unwrap();
        let Command::Audits(a) = cli.command else {
            panic!("not audits");
        };
        assert_eq!(a.node.as_deref(), Some("node_1"));
        assert_eq!(a.outcome, Some(AuditResult::Refused));
        assert_eq!((a.limit, a.output.json()), (Some(5), true));
        assert!(
            Cli::try_parse_args(["gatehouse", "audits", "--outcome", "won"]).is_err(),
            "outcomes are the audit results"
        );
    }

    #[test]
    fn event_lines_name_the_actor() {
        let e = Event {
            id: 7,
            at: 1_700_000_000_000,
            kind: "node.cordoned".into(),
            tenant_id: Some("root".into()),
            node_id: Some("node_1".into()),
            attestor: None,
            reason: None,
            token_id: None,
            actor: Some("alice".into()),
            payload: serde_json::json!({}),
        };
        let line = event_line(Some(&e));
        assert!(line.starts_with("7 "), "{line}");
        assert!(line.contains(" alice "), "{line}");
        assert!(event_line(None).starts_with("ID "));
    }
}
