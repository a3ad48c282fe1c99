//! `gatehouse join-requests list|show|approve|deny`.

use std::io::Write;

use clap::{Args, Subcommand};

use super::client::Client;
use super::output::{OutputArgs, Table, cell, escape, time, write_fields, write_json};
use crate::cli::AdminConnection;
use crate::ops::Id;
use crate::ops::types::{Approve, JoinRequest, JoinRequestQuery};

#[derive(Debug, Subcommand)]
pub(in crate::cli) enum JoinRequestsCommand {
    /// Lists join requests waiting for an operator (or all of them, newest first).
    List(JoinRequestListArgs),
    /// Shows a join request and what the attestor saw.
    Show(JoinRequestArgs),
    /// Approves a request: the machine's next round with the same CSR is admitted, once,
    /// into the tenant, pool and site given.
    Approve(ApproveArgs),
    /// Denies a request: the machine's next round is refused.
    Deny(JoinRequestArgs),
}

#[derive(Debug, Args)]
pub(in crate::cli) struct JoinRequestListArgs {
    /// Which requests: pending, approved, denied, expired, used or all.
    #[arg(long, default_value = "pending", value_parser = ["pending", "approved", "denied", "expired", "used", "all"])]
    state: String,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    conn: AdminConnection,
}

#[derive(Debug, Args)]
pub(in crate::cli) struct JoinRequestArgs {
    /// The join request id (`jr_...`).
    id: Id,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    conn: AdminConnection,
}

#[derive(Debug, Args)]
pub(in crate::cli) struct ApproveArgs {
    /// The join request id (`jr_...`).
    id: Id,
    /// The tenant the machine joins.
    #[arg(long, default_value = "root")]
    tenant: Id,
    /// The pool it joins (one of the tenant's).
    #[arg(long)]
    pool: Option<Id>,
    /// The site it belongs to.
    #[arg(long)]
    site: Option<Id>,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    conn: AdminConnection,
}

pub(in crate::cli) async fn join_requests(
    command: JoinRequestsCommand,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<()> {
    match command {
        JoinRequestsCommand::List(a) => {
            let query = JoinRequestQuery {
                state: Some(a.state),
                after: None,
                limit: None,
            };
            let list: Vec<JoinRequest> = Client::new(&a.conn)?
                .list("/v1/admin/join-requests", &query)
                .await?;
            a.output.print(out, &list[..], write_join_request_table)?;
        }
        JoinRequestsCommand::Show(a) => {
            let request: JoinRequest = Client::new(&a.conn)?
                .get(&format!("/v1/admin/join-requests/{}", a.id))
                .await?;
            a.output.print(out, &request, write_join_request)?;
        }
        JoinRequestsCommand::Approve(a) => {
            let req = Approve {
                tenant_id: a.tenant,
                pool_id: a.pool,
                site_id: a.site,
            };
            let id = &a.id;
            let decided: JoinRequest = Client::new(&a.conn)?
                .post(&format!("/v1/admin/join-requests/{id}/approve"), &req)
                .await?;
            if a.output.json() {
                write_json(out, &decided)?;
            } else {
                writeln!(
                    out,
                    "approved {id} ({} {}): tenant {}, pool {}, site {}",
                    escape(&decided.attestor),
                    escape(&decided.subject),
                    cell(decided.tenant_id.as_deref()),
                    cell(decided.pool_id.as_deref()),
                    cell(decided.site_id.as_deref())
                )?;
            }
        }
        JoinRequestsCommand::Deny(a) => {
            let id = &a.id;
            let decided: JoinRequest = Client::new(&a.conn)?
                .post_empty(&format!("/v1/admin/join-requests/{id}/deny"))
                .await?;
            if a.output.json() {
                write_json(out, &decided)?;
            } else {
                writeln!(
                    out,
                    "denied {id} ({} {})",
                    escape(&decided.attestor),
                    escape(&decided.subject)
                )?;
            }
        }
    }
    Ok(())
}

fn write_join_request_table(
    out: &mut (dyn Write + Send),
    list: &[JoinRequest],
) -> anyhow::Result<()> {
    let mut t = Table::new(&["ID", "ATTESTOR", "SUBJECT", "STATE", "CREATED", "EXPIRES"]);
    for r in list {
        t.row(vec![
            escape(&r.id),
            escape(&r.attestor),
            escape(&r.subject),
            r.state.to_string(),
            time(Some(r.created_at)),
            time(Some(r.expires_at)),
        ]);
    }
    t.write(out)
}

fn write_join_request(out: &mut (dyn Write + Send), r: &JoinRequest) -> anyhow::Result<()> {
    write_fields(
        out,
        &[
            ("request", escape(&r.id)),
            ("attestor", escape(&r.attestor)),
            ("subject", escape(&r.subject)),
            ("state", r.state.to_string()),
            ("csr sha256", escape(&r.csr_sha256)),
            ("tenant", cell(r.tenant_id.as_deref())),
            ("pool", cell(r.pool_id.as_deref())),
            ("site", cell(r.site_id.as_deref())),
            ("created", time(Some(r.created_at))),
            ("decided", time(r.decided_at)),
            ("expires", time(Some(r.expires_at))),
        ],
    )?;
    writeln!(out, "details")?;
    // What an attestor saw comes from the machine: escaped like every other cell.
    for line in serde_json::to_string_pretty(&r.details)?.lines() {
        writeln!(out, "  {}", escape(line))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use crate::store::JoinRequestState;

    #[test]
    fn join_request_commands_parse() {
        let parse = |args: &[&str]| {
            let cli = Cli::try_parse_args(
                ["gatehouse", "join-requests"]
                    .iter()
                    .chain(args)
                    .chain(&["--server", "https://h"]),
            );
            match cli.map(|c| c.command) {
                Ok(Command::JoinRequests { command }) => Some(command),
                _ => None,
            }
        };
        match parse(&["list"]) {
            Some(JoinRequestsCommand::List(a)) => {
                assert_eq!((a.state.as_str(), a.output.json()), ("pending", false))
            }
            other => panic!("{other:?}"),
        }
        match parse(&["list", "--state", "all", "-o", "json"]) {
            Some(JoinRequestsCommand::List(a)) => {
                assert_eq!((a.state.as_str(), a.output.json()), ("all", true))
            }
            other => panic!("{other:?}"),
        }
        assert!(parse(&["list", "--state", "open"]).is_none());
        match parse(&["approve", "jr_1", "--pool", "p", "--site", "s"]) {
            Some(JoinRequestsCommand::Approve(a)) => assert_eq!(
                (
                    a.id.as_str(),
                    a.tenant.as_str(),
                    a.pool.as_deref(),
                    a.site.as_deref()
                ),
                ("jr_1", "root", Some("p"), Some("s"))
            ),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse(&["deny", "jr_1"]),
            Some(JoinRequestsCommand::Deny(_))
        ));
        assert!(parse(&["approve"]).is_none());
        assert!(parse(&["show", "jr/1"]).is_none());
    }

    #[test]
    fn join_requests_are_readable() {
        let r = JoinRequest {
            id: "jr_1".into(),
            attestor: "approval".into(),
            subject: "uuid:u-1".into(),
            details: serde_json::json!({ "productUuid": "u-1" }),
            csr_sha256: "ab".into(),
            state: JoinRequestState::Pending,
            tenant_id: None,
            pool_id: None,
            site_id: None,
            created_at: 1_700_000_000_000,
            decided_at: None,
            expires_at: 1_700_086_400_000,
        };
        let mut out = Vec::new();
        write_join_request(&mut out, &r).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("subject     uuid:u-1\n"), "{text}");
        assert!(text.contains("decided     -\n"), "{text}");
        assert!(text.contains("  \"productUuid\": \"u-1\""), "{text}");
        let mut out = Vec::new();
        write_join_request_table(&mut out, &[r]).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.lines().nth(1).unwrap().starts_with("jr_1 "), "{text}");
    }
}
