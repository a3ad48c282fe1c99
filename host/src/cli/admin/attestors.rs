//! `gatehouse attestors list`: what a host runs.

use std::io::Write;

use clap::{Args, Subcommand};

use super::client::Client;
use super::output::{OutputArgs, Table, cell, escape, write_json};
use crate::cli::AdminConnection;
use crate::ops::types::{Attestor, AttestorSource};

#[derive(Debug, Subcommand)]
pub(in crate::cli) enum AttestorsCommand {
    /// Lists the loaded attestors: id, version, source, sha256.
    List(ListArgs),
}

#[derive(Debug, Args)]
pub(in crate::cli) struct ListArgs {
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    conn: AdminConnection,
}

pub(in crate::cli) async fn attestors(
    command: AttestorsCommand,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<()> {
    let AttestorsCommand::List(a) = command;
    let list: Vec<Attestor> = Client::new(&a.conn)?.get("/v1/admin/attestors").await?;
    if a.output.json() {
        return write_json(out, &list);
    }
    let mut t = Table::new(&["ID", "VERSION", "SOURCE", "SHADOW OF", "SHA256"]);
    for a in &list {
        let source = match &a.source {
            AttestorSource::File(path) => format!("file {}", escape(path)),
            AttestorSource::BuiltIn => "built-in".to_owned(),
        };
        t.row(vec![
            escape(&a.id),
            escape(&a.version),
            source,
            cell(a.shadow_of.as_deref()),
            escape(&a.sha256),
        ]);
    }
    t.write(out)
}
