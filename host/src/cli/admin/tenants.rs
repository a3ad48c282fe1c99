//! `gatehouse tenants create ID | list`: clients of `/v1/admin/tenants`.

use std::io::Write;

use clap::{Args, Subcommand};
use serde_json::json;

use super::{Client, escape, write_json};
use crate::cli::AdminConnection;

#[derive(Debug, Subcommand)]
pub(in crate::cli) enum TenantsCommand {
    /// Creates a tenant (only `root` exists at first): pools, tokens and attestors may then
    /// name it.
    Create(CreateTenantArgs),
    /// Lists tenants by id.
    List(ListTenantsArgs),
}

#[derive(Debug, Args)]
pub(in crate::cli) struct CreateTenantArgs {
    /// The tenant id: 1 to 128 of `[A-Za-z0-9._-]`.
    id: String,
    /// Print the API's JSON answer.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: AdminConnection,
}

#[derive(Debug, Args)]
pub(in crate::cli) struct ListTenantsArgs {
    /// Print the API's JSON answer (an array of `{id}`) instead of one id a line.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: AdminConnection,
}

/// `tenants <command>`.
pub(in crate::cli) async fn tenants(
    command: TenantsCommand,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<()> {
    match command {
        TenantsCommand::Create(a) => {
            let created = Client::new(&a.conn)?
                .call(
                    reqwest::Method::POST,
                    "/v1/admin/tenants",
                    Some(json!({ "id": a.id })),
                )
                .await?;
            if a.json {
                write_json(out, &created)?;
            } else {
                writeln!(
                    out,
                    "tenant {} created",
                    escape(created["id"].as_str().unwrap_or_default())
                )?;
            }
        }
        TenantsCommand::List(a) => {
            let list = Client::new(&a.conn)?.list("/v1/admin/tenants").await?;
            if a.json {
                write_json(out, &list)?;
            } else {
                for t in list.as_array().into_iter().flatten() {
                    writeln!(out, "{}", escape(t["id"].as_str().unwrap_or_default()))?;
                }
            }
        }
    }
    Ok(())
}
