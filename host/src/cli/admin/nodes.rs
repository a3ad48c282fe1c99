//! `gatehouse nodes list|show|cordon|uncordon|retire|delete|revoke-identity|revoke-cert`
//! (and `inventory`, `inventories`, in [`super::provisioning`]).

use std::io::Write;

use anyhow::bail;
use clap::{Args, Subcommand};
use serde::Serialize;

use super::client::{Client, NO_QUERY};
use super::output::{OutputArgs, Table, cell, count, escape, time, write_fields, write_json};
use super::provisioning;
use crate::cli::AdminConnection;
use crate::ops::Id;
use crate::ops::types::{
    CertRevoked, Cordoned, Deleted, IdentityRevoked, Node, NodeDetail, Retired,
};

#[derive(Debug, Subcommand)]
pub(in crate::cli) enum NodesCommand {
    /// Lists nodes (not deleted ones).
    List(ListArgs),
    /// Shows a node, its certificates and its bindings (a deleted one too).
    Show(NodeArgs),
    /// Cordons a node.
    Cordon(NodeArgs),
    /// Lifts a node's cordon.
    Uncordon(NodeArgs),
    /// Retires a node: it never joins or renews again and its certificates are revoked.
    Retire(DestructiveArgs),
    /// Deletes a node: retires it, revokes its certificates, frees its hardware bindings and
    /// key (the machine can then join as a new node) and hides it from `nodes list`.
    Delete(DestructiveArgs),
    /// Revokes a node's identity: raises its identity generation and revokes its
    /// certificates; it joins again only with a token that re-keys it (`--expect-node`).
    RevokeIdentity(DestructiveArgs),
    /// Revokes one certificate of a node.
    RevokeCert(RevokeCertArgs),
    /// Records an inventory of a node (its product UUID and MACs); the newest is what a
    /// provisioned join is checked against.
    Inventory(provisioning::InventoryArgs),
    /// Lists a node's inventories, newest first.
    Inventories(NodeArgs),
}

#[derive(Debug, Args)]
pub(in crate::cli) struct ListArgs {
    #[command(flatten)]
    pub(super) output: OutputArgs,
    #[command(flatten)]
    pub(super) conn: AdminConnection,
}

#[derive(Debug, Args)]
pub(in crate::cli) struct NodeArgs {
    /// The node id.
    pub(super) id: Id,
    #[command(flatten)]
    pub(super) output: OutputArgs,
    #[command(flatten)]
    pub(super) conn: AdminConnection,
}

#[derive(Debug, Args)]
pub(in crate::cli) struct DestructiveArgs {
    /// The node id.
    id: Id,
    /// Do it. Without --yes, print what would change and exit 2.
    #[arg(long)]
    yes: bool,
    // `-o json`: the API's answer (or, without --yes, the plan as JSON).
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    conn: AdminConnection,
}

#[derive(Debug, Args)]
pub(in crate::cli) struct RevokeCertArgs {
    /// The node id.
    id: Id,
    /// The certificate's serial number (hex, as `nodes show` prints it).
    serial: String,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    conn: AdminConnection,
}

/// A destructive node action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Destructive {
    Retire,
    Delete,
    RevokeIdentity,
}

impl Destructive {
    fn name(self) -> &'static str {
        match self {
            Destructive::Retire => "retire",
            Destructive::Delete => "delete",
            Destructive::RevokeIdentity => "revoke-identity",
        }
    }
}

/// The certificate serial of an argument: hex, so it cannot change the request's path.
fn serial(v: &str) -> anyhow::Result<&str> {
    if !v.is_empty() && v.len() <= 40 && v.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(v)
    } else {
        bail!("serial `{}` is not a certificate serial (hex)", escape(v))
    }
}

pub(in crate::cli) async fn nodes(
    command: NodesCommand,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<()> {
    match command {
        NodesCommand::List(a) => {
            let list: Vec<Node> = Client::new(&a.conn)?
                .list("/v1/admin/nodes", &NO_QUERY)
                .await?;
            a.output.print(out, &list[..], write_node_table)?;
        }
        NodesCommand::Show(a) => {
            let node: NodeDetail = Client::new(&a.conn)?
                .get(&format!("/v1/admin/nodes/{}", a.id))
                .await?;
            a.output.print(out, &node, write_node)?;
        }
        NodesCommand::Cordon(a) => cordon(out, a, true).await?,
        NodesCommand::Uncordon(a) => cordon(out, a, false).await?,
        NodesCommand::Retire(a) => destructive(out, a, Destructive::Retire).await?,
        NodesCommand::Delete(a) => destructive(out, a, Destructive::Delete).await?,
        NodesCommand::RevokeIdentity(a) => destructive(out, a, Destructive::RevokeIdentity).await?,
        NodesCommand::Inventory(a) => provisioning::inventory(a, out).await?,
        NodesCommand::Inventories(a) => provisioning::inventories(a, out).await?,
        NodesCommand::RevokeCert(a) => {
            let id = &a.id;
            let serial = serial(&a.serial)?;
            let answer: CertRevoked = Client::new(&a.conn)?
                .post_empty(&format!("/v1/admin/nodes/{id}/certs/{serial}/revoke"))
                .await?;
            if a.output.json() {
                write_json(out, &answer)?;
            } else if answer.changed {
                writeln!(
                    out,
                    "certificate {} of {id} revoked",
                    escape(&answer.serial)
                )?;
            } else {
                writeln!(
                    out,
                    "certificate {} of {id} was revoked already ({})",
                    escape(&answer.serial),
                    answer.revoked
                )?;
            }
        }
    }
    Ok(())
}

async fn cordon(out: &mut (dyn Write + Send), a: NodeArgs, on: bool) -> anyhow::Result<()> {
    let id = &a.id;
    let verb = if on { "cordon" } else { "uncordon" };
    let answer: Cordoned = Client::new(&a.conn)?
        .post_empty(&format!("/v1/admin/nodes/{id}/{verb}"))
        .await?;
    if a.output.json() {
        write_json(out, &answer)?;
    } else {
        let state = if on { "cordoned" } else { "uncordoned" };
        if answer.changed {
            writeln!(out, "{id} {state}")?;
        } else {
            writeln!(out, "{id} was {state} already")?;
        }
    }
    Ok(())
}

/// Retire, delete or revoke-identity: without `--yes`, reads the node, prints what would
/// change and returns [`crate::cli::NotConfirmed`] having changed nothing.
async fn destructive(
    out: &mut (dyn Write + Send),
    a: DestructiveArgs,
    action: Destructive,
) -> anyhow::Result<()> {
    let id = &a.id;
    let client = Client::new(&a.conn)?;
    if !a.yes {
        let node: NodeDetail = client.get(&format!("/v1/admin/nodes/{id}")).await?;
        let plan = plan(action, &node)?;
        if a.output.json() {
            write_json(out, &plan.json)?;
            eprintln!("nothing changed: pass --yes to {} {id}", action.name());
        } else {
            out.write_all(plan.text.as_bytes())?;
        }
        out.flush()?;
        return Err(crate::cli::NotConfirmed.into());
    }
    let json = a.output.json();
    match action {
        Destructive::Retire => {
            let r: Retired = client
                .post_empty(&format!("/v1/admin/nodes/{id}/retire"))
                .await?;
            if json {
                write_json(out, &r)?;
            } else if !r.changed {
                writeln!(out, "{id} was retired already")?;
            } else {
                writeln!(
                    out,
                    "{id} retired: {} revoked",
                    count(r.certificates_revoked, "certificate")
                )?;
            }
        }
        Destructive::Delete => {
            let d: Deleted = client
                .call::<(), _>(
                    reqwest::Method::DELETE,
                    &format!("/v1/admin/nodes/{id}"),
                    None,
                )
                .await?;
            if json {
                write_json(out, &d)?;
            } else {
                let key = if d.hardware_key_freed {
                    ", hardware key freed"
                } else {
                    ""
                };
                writeln!(
                    out,
                    "{id} deleted: {} revoked, {} freed{key}",
                    count(d.certificates_revoked, "certificate"),
                    count(d.bindings_freed.len() as u64, "binding")
                )?;
            }
        }
        Destructive::RevokeIdentity => {
            let r: IdentityRevoked = client
                .post_empty(&format!("/v1/admin/nodes/{id}/revoke-identity"))
                .await?;
            if json {
                write_json(out, &r)?;
            } else {
                writeln!(
                    out,
                    "{id} identity revoked: generation {} -> {}, {} revoked",
                    r.previous_generation,
                    r.generation,
                    count(r.certificates_revoked, "certificate")
                )?;
            }
        }
    }
    Ok(())
}

/// What a destructive action would do to a node.
#[derive(Debug)]
struct Plan {
    text: String,
    json: PlanJson,
}

/// The plan as `-o json` prints it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct PlanJson {
    dry_run: bool,
    action: &'static str,
    id: String,
    certificates_to_revoke: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bindings_to_free: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    hardware_key_to_free: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    generation: Option<u32>,
}

fn plan(action: Destructive, detail: &NodeDetail) -> anyhow::Result<Plan> {
    use std::fmt::Write as _;
    let node = &detail.node;
    let id = escape(&node.id);
    if node.deleted_at.is_some() {
        bail!("{id} is deleted: nothing left to {}", action.name());
    }
    let live: Vec<String> = detail
        .certificates
        .iter()
        .filter(|c| c.revoked.is_none())
        .map(|c| escape(&c.serial))
        .collect();
    let bindings: Vec<String> = detail
        .bindings
        .iter()
        .map(|b| format!("{}={}", escape(&b.kind), escape(&b.value)))
        .collect();
    let generation = node.identity_generation;
    let serials = if live.is_empty() {
        String::new()
    } else {
        format!(": {}", live.join(", "))
    };
    let mut t = String::new();
    let about = format!(
        "node {id} (tenant {}, role {}, generation {generation})",
        escape(&node.tenant_id),
        node.role
    );
    let mut json = PlanJson {
        dry_run: true,
        action: action.name(),
        id: id.clone(),
        certificates_to_revoke: live.clone(),
        bindings_to_free: None,
        hardware_key_to_free: None,
        generation: None,
    };
    let revoke_line = format!(
        "  revoke {}{serials}",
        count(live.len() as u64, "live certificate")
    );
    match action {
        Destructive::Retire if node.retired => {
            let _ = writeln!(t, "{about} is retired already: nothing would change");
        }
        Destructive::Retire => {
            let _ = writeln!(t, "would retire {about}:");
            let _ = writeln!(t, "{revoke_line}");
            let _ = writeln!(t, "  it never joins or renews again (it stays listed)");
        }
        Destructive::Delete => {
            let _ = writeln!(t, "would delete {about}:");
            let _ = writeln!(t, "{revoke_line}");
            let listed = if bindings.is_empty() {
                String::new()
            } else {
                format!(": {}", bindings.join(", "))
            };
            let _ = writeln!(
                t,
                "  free {}{listed}",
                count(bindings.len() as u64, "binding")
            );
            if let Some(key) = &node.hardware_key {
                let _ = writeln!(t, "  free its hardware key {}", escape(key));
            }
            let _ = writeln!(
                t,
                "  hide it from `nodes list` (`nodes show {id}` still shows it)"
            );
            json.bindings_to_free = Some(bindings);
            json.hardware_key_to_free = Some(node.hardware_key.clone());
        }
        Destructive::RevokeIdentity if node.retired => {
            bail!("{id} is retired: it has no identity left to revoke");
        }
        Destructive::RevokeIdentity => {
            let _ = writeln!(t, "would revoke the identity of {about}:");
            let _ = writeln!(t, "  raise its identity generation to {}", generation + 1);
            let _ = writeln!(t, "{revoke_line}");
            let _ = writeln!(
                t,
                "  it joins again only with a token that re-keys it \
                 (`token create --expect-node {id}`)"
            );
            json.generation = Some(generation + 1);
        }
    }
    let _ = writeln!(t, "nothing changed: pass --yes to {} {id}", action.name());
    Ok(Plan { text: t, json })
}

/// `active`, or the node's flags (`retired`, `cordoned`, `deleted`).
fn node_state(n: &Node) -> String {
    let mut flags = Vec::new();
    if n.deleted_at.is_some() {
        flags.push("deleted");
    } else if n.retired {
        flags.push("retired");
    }
    if n.cordoned {
        flags.push("cordoned");
    }
    if flags.is_empty() {
        "active".to_owned()
    } else {
        flags.join(",")
    }
}

fn write_node_table(out: &mut (dyn Write + Send), list: &[Node]) -> anyhow::Result<()> {
    let mut t = Table::new(&["ID", "TENANT", "POOL", "ROLE", "GEN", "STATE", "CREATED"]);
    for n in list {
        t.row(vec![
            escape(&n.id),
            escape(&n.tenant_id),
            cell(n.pool_id.as_deref()),
            n.role.to_string(),
            n.identity_generation.to_string(),
            node_state(n),
            time(Some(n.created_at)),
        ]);
    }
    t.write(out)
}

fn write_node(out: &mut (dyn Write + Send), detail: &NodeDetail) -> anyhow::Result<()> {
    let n = &detail.node;
    let mut fields = vec![
        ("node", escape(&n.id)),
        ("tenant", escape(&n.tenant_id)),
        ("pool", cell(n.pool_id.as_deref())),
        ("site", cell(n.site_id.as_deref())),
        ("role", n.role.to_string()),
        ("state", node_state(n)),
        ("generation", n.identity_generation.to_string()),
        ("hardware key", cell(n.hardware_key.as_deref())),
        ("created", time(Some(n.created_at))),
        ("updated", time(Some(n.updated_at))),
    ];
    if n.deleted_at.is_some() {
        fields.push(("deleted", time(n.deleted_at)));
    }
    if detail.bindings.is_empty() {
        fields.push(("bindings", "-".to_owned()));
    }
    for (i, b) in detail.bindings.iter().enumerate() {
        let label = if i == 0 { "bindings" } else { "" };
        fields.push((label, format!("{} {}", escape(&b.kind), escape(&b.value))));
    }
    fields.push((
        "certificates",
        format!("{} (newest first)", detail.certificates.len()),
    ));
    write_fields(out, &fields)?;
    if detail.certificates.is_empty() {
        return Ok(());
    }
    let mut t = Table::new(&[
        "  SERIAL",
        "GEN",
        "ROLE",
        "NOT BEFORE",
        "NOT AFTER",
        "STATUS",
    ]);
    for c in &detail.certificates {
        let status = match c.revoked {
            Some(reason) => format!("revoked ({reason})"),
            None => "live".to_owned(),
        };
        t.row(vec![
            format!("  {}", escape(&c.serial)),
            c.generation.to_string(),
            c.role.to_string(),
            time(Some(c.not_before)),
            time(Some(c.not_after)),
            status,
        ]);
        for s in &c.statements {
            t.row(vec![format!("    {}", escape(s))]);
        }
    }
    t.write(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use crate::ops::types::{Binding, Certificate};
    use crate::store::{NodeRole, Revocation};

    fn nodes_command(args: &[&str]) -> NodesCommand {
        let cli = Cli::try_parse_args(
            ["gatehouse", "nodes"]
                .iter()
                .chain(args)
                .chain(&["--server", "https://h"]),
        )
        .unwrap();
        match cli.command {
            Command::Nodes { command } => command,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn destructive_commands_default_to_a_dry_run() {
        for (verb, action) in [
            ("retire", Destructive::Retire),
            ("delete", Destructive::Delete),
            ("revoke-identity", Destructive::RevokeIdentity),
        ] {
            let (NodesCommand::Retire(a)
            | NodesCommand::Delete(a)
            | NodesCommand::RevokeIdentity(a)) = nodes_command(&[verb, "node_1"])
            else {
                panic!("{verb}");
            };
            assert!(!a.yes, "{verb} without --yes");
            assert_eq!((a.id.as_str(), action.name()), ("node_1", verb));
            let (NodesCommand::Retire(a)
            | NodesCommand::Delete(a)
            | NodesCommand::RevokeIdentity(a)) =
                nodes_command(&[verb, "node_1", "--yes", "-o", "json"])
            else {
                panic!("{verb}");
            };
            assert!(a.yes && a.output.json());
        }
        match nodes_command(&["revoke-cert", "node_1", "0a1b"]) {
            NodesCommand::RevokeCert(a) => {
                assert_eq!((a.id.as_str(), a.serial.as_str()), ("node_1", "0a1b"))
            }
            other => panic!("{other:?}"),
        }
        assert!(
            matches!(nodes_command(&["list", "--json"]), NodesCommand::List(a) if a.output.json())
        );
        // A node id is required, and must be an id; revoke-cert needs a serial.
        assert!(Cli::try_parse_args(["gatehouse", "nodes", "delete"]).is_err());
        assert!(Cli::try_parse_args(["gatehouse", "nodes", "show", "../tokens"]).is_err());
        assert!(Cli::try_parse_args(["gatehouse", "nodes", "revoke-cert", "n"]).is_err());
        assert!(serial("0a/../x").is_err());
    }

    fn shown() -> NodeDetail {
        NodeDetail {
            node: Node {
                id: "node_1".into(),
                tenant_id: "root".into(),
                pool_id: None,
                site_id: None,
                role: NodeRole::Node,
                retired: false,
                cordoned: true,
                identity_generation: 2,
                hardware_key: Some("uuid-1".into()),
                created_at: 1_700_000_000_000,
                updated_at: 1_700_000_000_000,
                deleted_at: None,
            },
            certificates: vec![
                Certificate {
                    serial: "0b".into(),
                    generation: 2,
                    role: NodeRole::Node,
                    not_before: 1,
                    not_after: 2,
                    revoked: None,
                    statements: vec![],
                    created_at: 2,
                },
                Certificate {
                    serial: "0a".into(),
                    generation: 1,
                    role: NodeRole::Node,
                    not_before: 1,
                    not_after: 2,
                    revoked: Some(Revocation::Superseded),
                    statements: vec![],
                    created_at: 1,
                },
            ],
            bindings: vec![Binding {
                kind: "tpm-ek-sha256".into(),
                value: "ab".into(),
            }],
        }
    }

    #[test]
    fn plans_say_what_would_change() {
        let p = plan(Destructive::Delete, &shown()).unwrap();
        assert_eq!(
            p.text,
            "would delete node node_1 (tenant root, role node, generation 2):\n\
             \x20 revoke 1 live certificate: 0b\n\
             \x20 free 1 binding: tpm-ek-sha256=ab\n\
             \x20 free its hardware key uuid-1\n\
             \x20 hide it from `nodes list` (`nodes show node_1` still shows it)\n\
             nothing changed: pass --yes to delete node_1\n"
        );
        let json = serde_json::to_value(&p.json).unwrap();
        assert_eq!(json["certificatesToRevoke"], serde_json::json!(["0b"]));
        assert_eq!(
            json["bindingsToFree"],
            serde_json::json!(["tpm-ek-sha256=ab"])
        );
        assert_eq!(json["dryRun"], true);

        let p = plan(Destructive::RevokeIdentity, &shown()).unwrap();
        assert!(
            p.text.contains("raise its identity generation to 3"),
            "{}",
            p.text
        );
        assert!(
            p.text.contains("revoke 1 live certificate: 0b"),
            "{}",
            p.text
        );
        assert_eq!(p.json.generation, Some(3));

        let mut retired = shown();
        retired.node.retired = true;
        let p = plan(Destructive::Retire, &retired).unwrap();
        assert!(
            p.text.contains("is retired already: nothing would change"),
            "{}",
            p.text
        );
        assert!(plan(Destructive::RevokeIdentity, &retired).is_err());

        let mut deleted = shown();
        deleted.node.deleted_at = Some(5);
        let err = plan(Destructive::Delete, &deleted).unwrap_err();
        assert_eq!(err.to_string(), "node_1 is deleted: nothing left to delete");
    }

    #[test]
    fn node_output_is_readable() {
        let mut out = Vec::new();
        write_node(&mut out, &shown()).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("state         cordoned\n"), "{text}");
        assert!(text.contains("bindings      tpm-ek-sha256 ab\n"), "{text}");
        assert!(text.contains("revoked (superseded)"), "{text}");
        assert!(
            text.contains("created       2023-11-14T22:13:20Z\n"),
            "{text}"
        );
        let mut out = Vec::new();
        write_node_table(&mut out, &[shown().node]).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().count(), 2);
        assert!(
            text.lines().nth(1).unwrap().starts_with("node_1 "),
            "{text}"
        );
    }
}
