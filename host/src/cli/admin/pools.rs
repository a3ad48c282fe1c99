//! `gatehouse pools create|list|show|update`.

use std::io::Write;

use anyhow::Context as _;
use clap::{Args, Subcommand};

use super::client::{Client, NO_QUERY};
use super::output::{OutputArgs, Table, cell, escape, write_fields, write_json};
use crate::cli::AdminConnection;
use crate::ops::Id;
use crate::ops::types::{CreatePool, Pool, PoolPolicy, UpdatePool, UpdatedPool};

#[derive(Debug, Subcommand)]
pub(in crate::cli) enum PoolsCommand {
    /// Creates a pool; with --join-attestors only those attestors admit machines into it.
    Create(CreatePoolArgs),
    /// Lists pools and their join policy.
    List(ListArgs),
    /// Shows a pool (`TENANT/ID`).
    Show(ShowPoolArgs),
    /// Replaces a pool's join policy as a whole.
    Update(UpdatePoolArgs),
}

#[derive(Debug, Args)]
pub(in crate::cli) struct ListArgs {
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    conn: AdminConnection,
}

#[derive(Debug, Args)]
pub(in crate::cli) struct CreatePoolArgs {
    /// The pool id.
    id: Id,
    /// Its tenant.
    #[arg(long, default_value = "root")]
    tenant: Id,
    /// The only attestors that may admit a machine into it (1 to 16 ids, comma-separated);
    /// without it, every attestor may.
    #[arg(long, value_delimiter = ',')]
    join_attestors: Option<Vec<String>>,
    /// Who owns it (a lessee).
    #[arg(long)]
    owner: Option<Id>,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    conn: AdminConnection,
}

#[derive(Debug, Args)]
pub(in crate::cli) struct ShowPoolArgs {
    /// `TENANT/ID`.
    pool: String,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    conn: AdminConnection,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("policy").required(true).args(["join_attestors", "any_attestor"])))]
pub(in crate::cli) struct UpdatePoolArgs {
    /// The pool id.
    id: Id,
    /// Its tenant.
    #[arg(long, default_value = "root")]
    tenant: Id,
    /// The only attestors that may admit a machine into it (1 to 16 ids, comma-separated).
    #[arg(long, value_delimiter = ',')]
    join_attestors: Option<Vec<String>>,
    /// Let every attestor admit machines into it (lifts --join-attestors).
    #[arg(long)]
    any_attestor: bool,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    conn: AdminConnection,
}

/// How a pool's policy reads: the attestors it lists, or `any attestor`.
fn pool_attestors(policy: &PoolPolicy) -> String {
    match &policy.join_attestors {
        Some(ids) => ids.iter().map(|s| escape(s)).collect::<Vec<_>>().join(","),
        None => "any attestor".to_owned(),
    }
}

/// `TENANT/ID`, both ids.
fn pool_name(name: &str) -> anyhow::Result<(Id, Id)> {
    let (tenant, id) = name
        .split_once('/')
        .with_context(|| format!("name the pool as TENANT/ID (e.g. root/{})", escape(name)))?;
    let tenant = Id::new(tenant).with_context(|| format!("tenant `{}`", escape(tenant)))?;
    let id = Id::new(id).with_context(|| format!("pool id `{}`", escape(id)))?;
    Ok((tenant, id))
}

pub(in crate::cli) async fn pools(
    command: PoolsCommand,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<()> {
    match command {
        PoolsCommand::Create(a) => {
            let req = CreatePool {
                tenant_id: a.tenant,
                id: a.id,
                policy: PoolPolicy {
                    join_attestors: a.join_attestors,
                },
                owner: a.owner,
            };
            let pool: Pool = Client::new(&a.conn)?.post("/v1/admin/pools", &req).await?;
            if a.output.json() {
                write_json(out, &pool)?;
            } else {
                writeln!(
                    out,
                    "pool {}/{} created: join attestors {}",
                    escape(&pool.tenant_id),
                    escape(&pool.id),
                    pool_attestors(&pool.policy)
                )?;
            }
        }
        PoolsCommand::List(a) => {
            let list: Vec<Pool> = Client::new(&a.conn)?
                .list("/v1/admin/pools", &NO_QUERY)
                .await?;
            a.output.print(out, &list[..], write_pool_table)?;
        }
        PoolsCommand::Show(a) => {
            let (tenant, id) = pool_name(&a.pool)?;
            let pool: Pool = Client::new(&a.conn)?
                .get(&format!("/v1/admin/pools/{tenant}/{id}"))
                .await?;
            if a.output.json() {
                write_json(out, &pool)?;
            } else {
                write_fields(
                    out,
                    &[
                        ("pool", escape(&pool.id)),
                        ("tenant", escape(&pool.tenant_id)),
                        ("owner", cell(pool.owner.as_deref())),
                        ("join attestors", pool_attestors(&pool.policy)),
                    ],
                )?;
            }
        }
        PoolsCommand::Update(a) => {
            let (tenant, id) = (&a.tenant, &a.id);
            let req = UpdatePool {
                policy: PoolPolicy {
                    join_attestors: a.join_attestors.clone().filter(|_| !a.any_attestor),
                },
            };
            let updated: UpdatedPool = Client::new(&a.conn)?
                .call(
                    reqwest::Method::PUT,
                    &format!("/v1/admin/pools/{tenant}/{id}"),
                    Some(&req),
                )
                .await?;
            if a.output.json() {
                write_json(out, &updated)?;
            } else {
                let verb = if updated.changed {
                    "updated"
                } else {
                    "unchanged"
                };
                writeln!(
                    out,
                    "pool {tenant}/{id} {verb}: join attestors {}",
                    pool_attestors(&updated.pool.policy)
                )?;
            }
        }
    }
    Ok(())
}

fn write_pool_table(out: &mut (dyn Write + Send), list: &[Pool]) -> anyhow::Result<()> {
    let mut t = Table::new(&["TENANT", "ID", "OWNER", "JOIN ATTESTORS"]);
    for p in list {
        t.row(vec![
            escape(&p.tenant_id),
            escape(&p.id),
            cell(p.owner.as_deref()),
            pool_attestors(&p.policy),
        ]);
    }
    t.write(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};

    fn pools_command(args: &[&str]) -> Result<PoolsCommand, clap::Error> {
        let cli = Cli::try_parse_args(
            ["gatehouse", "pools"]
                .iter()
                .chain(args)
                .chain(&["--server", "https://h"]),
        )?;
        match cli.command {
            Command::Pools { command } => Ok(command),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn pool_commands_parse() {
        match pools_command(&["create", "gpu", "--join-attestors", "tpm,x509pop"]).unwrap() {
            PoolsCommand::Create(a) => {
                assert_eq!((a.id.as_str(), a.tenant.as_str()), ("gpu", "root"));
                assert_eq!(a.join_attestors.unwrap(), ["tpm", "x509pop"]);
            }
            other => panic!("{other:?}"),
        }
        match pools_command(&["update", "gpu", "--tenant", "t1", "--any-attestor"]).unwrap() {
            PoolsCommand::Update(a) => {
                assert!(a.any_attestor && a.join_attestors.is_none());
                assert_eq!(a.tenant, "t1");
            }
            other => panic!("{other:?}"),
        }
        // An update says what the policy becomes: one of the two, never neither or both.
        assert!(pools_command(&["update", "gpu"]).is_err());
        assert!(
            pools_command(&["update", "gpu", "--any-attestor", "--join-attestors", "tpm"]).is_err()
        );
        assert!(pools_command(&["create", "a/b"]).is_err());
        assert!(matches!(
            pools_command(&["list", "-o", "json"]).unwrap(),
            PoolsCommand::List(_)
        ));
        assert_eq!(pool_name("root/gpu").unwrap().1, "gpu");
        assert!(pool_name("gpu").is_err() && pool_name("root/../x").is_err());
    }

    #[test]
    fn pool_output_is_readable() {
        let list = vec![
            Pool {
                tenant_id: "root".into(),
                id: "gpu".into(),
                owner: Some("lessee-1".into()),
                policy: PoolPolicy {
                    join_attestors: Some(vec!["tpm".into(), "x509pop".into()]),
                },
            },
            Pool {
                tenant_id: "root".into(),
                id: "cpu".into(),
                owner: None,
                policy: PoolPolicy::default(),
            },
        ];
        let mut out = Vec::new();
        write_pool_table(&mut out, &list).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[1].starts_with("root") && lines[1].ends_with(" tpm,x509pop"));
        assert!(lines[2].ends_with(" any attestor"), "{text}");
    }
}
