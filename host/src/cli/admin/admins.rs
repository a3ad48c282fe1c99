//! `gatehouse admins add|list|revoke`: named admin identities.

use std::io::Write;

use clap::{Args, Subcommand};

use super::client::{Client, NO_QUERY};
use super::output::{OutputArgs, Table, cell, escape, time, write_json};
use crate::cli::AdminConnection;
use crate::ops::Id;
use crate::ops::types::{Admin, CreateAdmin, CreatedAdmin, RevokedAdmin};

#[derive(Debug, Subcommand)]
pub(in crate::cli) enum AdminsCommand {
    /// Makes a named admin identity and prints its key, once (the host keeps only a hash).
    Add(AdminArgs),
    /// Lists admin identities (revoked ones too), never their keys.
    List(ListArgs),
    /// Revokes an identity: its key is refused from the next request on.
    Revoke(AdminArgs),
}

#[derive(Debug, Args)]
pub(in crate::cli) struct AdminArgs {
    /// The identity's name (1 to 128 of `[A-Za-z0-9._-]`): what events name as the actor.
    name: Id,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    conn: AdminConnection,
}

#[derive(Debug, Args)]
pub(in crate::cli) struct ListArgs {
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    conn: AdminConnection,
}

pub(in crate::cli) async fn admins(
    command: AdminsCommand,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<()> {
    match command {
        AdminsCommand::Add(a) => {
            let created: CreatedAdmin = Client::new(&a.conn)?
                .post("/v1/admin/admins", &CreateAdmin { name: a.name })
                .await?;
            if a.output.json() {
                write_json(out, &created)?;
            } else {
                // The key alone on stdout (`gatehouse admins add bob > bob.key`); what it is
                // on stderr.
                writeln!(out, "{}", escape(&created.key))?;
                eprintln!(
                    "admin {} added: the key above is shown once; give it to them as their \
                     --admin-key-file (0600)",
                    escape(&created.name)
                );
            }
        }
        AdminsCommand::List(a) => {
            let list: Vec<Admin> = Client::new(&a.conn)?
                .list("/v1/admin/admins", &NO_QUERY)
                .await?;
            if a.output.json() {
                write_json(out, &list)?;
            } else {
                let mut t = Table::new(&["NAME", "CREATED", "BY", "REVOKED", "BY"]);
                for admin in &list {
                    t.row(vec![
                        escape(&admin.name),
                        time(Some(admin.created_at)),
                        escape(&admin.created_by),
                        time(admin.revoked_at),
                        cell(admin.revoked_by.as_deref()),
                    ]);
                }
                t.write(out)?;
            }
        }
        AdminsCommand::Revoke(a) => {
            let revoked: RevokedAdmin = Client::new(&a.conn)?
                .post_empty(&format!("/v1/admin/admins/{}/revoke", a.name))
                .await?;
            if a.output.json() {
                write_json(out, &revoked)?;
            } else if revoked.changed {
                writeln!(out, "admin {} revoked", escape(&revoked.name))?;
            } else {
                writeln!(out, "admin {} was revoked already", escape(&revoked.name))?;
            }
        }
    }
    Ok(())
}
