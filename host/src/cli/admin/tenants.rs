//! `gatehouse tenants create ID | list`.

use std::io::Write;

use clap::{Args, Subcommand};

use super::client::{Client, NO_QUERY};
use super::output::{OutputArgs, Table, escape, write_json};
use crate::cli::AdminConnection;
use crate::ops::Id;
use crate::ops::types::{CreateTenant, Tenant};

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
    id: Id,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    conn: AdminConnection,
}

#[derive(Debug, Args)]
pub(in crate::cli) struct ListTenantsArgs {
    #[command(flatten)]
    output: OutputArgs,
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
            let created: Tenant = Client::new(&a.conn)?
                .post("/v1/admin/tenants", &CreateTenant { id: a.id })
                .await?;
            if a.output.json() {
                write_json(out, &created)?;
            } else {
                writeln!(out, "tenant {} created", escape(&created.id))?;
            }
        }
        TenantsCommand::List(a) => {
            let list: Vec<Tenant> = Client::new(&a.conn)?
                .list("/v1/admin/tenants", &NO_QUERY)
                .await?;
            if a.output.json() {
                write_json(out, &list)?;
            } else {
                let mut t = Table::new(&["ID"]);
                for tenant in &list {
                    t.row(vec![escape(&tenant.id)]);
                }
                t.write(out)?;
            }
        }
    }
    Ok(())
}
