//! Provisioning commands: `nodes inventory` and `workflows start|list|show|complete|cancel`,
//! clients of the admin API's provisioning routes.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Args, Subcommand};

use super::client::{Client, NO_QUERY};
use super::nodes::NodeArgs;
use super::output::{OutputArgs, Table, cell, escape, time, write_fields, write_json};
use crate::cli::AdminConnection;
use crate::ops::Id;
use crate::ops::types::{
    FinishedWorkflow, Inventory, RecordInventory, StartDiscovery, StartProvisioning, StartWorkflow,
    StartedWorkflow, Workflow, WorkflowDetail,
};

#[derive(Debug, Args)]
pub(in crate::cli) struct InventoryArgs {
    /// The node id.
    id: Id,
    /// The SMBIOS product UUID the node's hardware reports.
    #[arg(long, value_name = "UUID")]
    product_uuid: Option<String>,
    /// A MAC address of the node (repeatable).
    #[arg(long = "mac", value_name = "MAC")]
    macs: Vec<String>,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    conn: AdminConnection,
}

#[derive(Debug, Subcommand)]
pub(in crate::cli) enum WorkflowsCommand {
    /// Starts provisioning a node: its userdata.render step mints a single-use provisioned
    /// token and renders the user data (printed to stdout, or written to --userdata-out).
    Start(StartArgs),
    /// Lists workflows, oldest first.
    List(ListArgs),
    /// Shows a workflow and where its token stands.
    Show(WorkflowArgs),
    /// Marks a running workflow succeeded (its token, if unspent, is revoked).
    Complete(WorkflowArgs),
    /// Cancels a running workflow (its token, if unspent, is revoked).
    Cancel(WorkflowArgs),
}

#[derive(Debug, Args)]
pub(in crate::cli) struct StartArgs {
    /// The node to provision (or, with --mac and --site, none: a discovery workflow).
    #[arg(required_unless_present = "mac", conflicts_with_all = ["mac", "site"])]
    node: Option<Id>,
    /// A discovery workflow instead: the MAC of the machine that may boot the discovery
    /// ramdisk at --site; the site's boot server fetches its token while it holds the lease.
    #[arg(long, requires = "site")]
    mac: Option<String>,
    /// The site of a discovery workflow.
    #[arg(long, requires = "mac")]
    site: Option<Id>,
    /// The machine's product UUID (a discovery workflow).
    #[arg(long, requires = "mac")]
    product_uuid: Option<String>,
    /// The tenant the ramdisk joins (a discovery workflow).
    #[arg(long, requires = "mac", default_value = "root")]
    tenant: Id,
    /// The host's URL as the machine reaches it (default: the --server this command uses).
    #[arg(long, value_name = "URL")]
    server_url: Option<String>,
    /// How long the token is valid (e.g. 24h, 2d; default 24h, and 1h for each token of a
    /// discovery workflow).
    #[arg(long)]
    token_ttl: Option<humantime::Duration>,
    /// Write the user data to this file (0600) and print the workflow instead.
    #[arg(long, value_name = "FILE")]
    userdata_out: Option<PathBuf>,
    // `-o json`: the API's answer (the workflow, the token and the user data).
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

#[derive(Debug, Args)]
pub(in crate::cli) struct WorkflowArgs {
    /// The workflow id.
    id: Id,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    conn: AdminConnection,
}

/// `nodes inventory ID [--product-uuid U] [--mac M]...`.
pub(in crate::cli) async fn inventory(
    a: InventoryArgs,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<()> {
    let id = &a.id;
    let req = RecordInventory {
        product_uuid: a.product_uuid,
        macs: a.macs,
    };
    let row: Inventory = Client::new(&a.conn)?
        .post(&format!("/v1/admin/nodes/{id}/inventories"), &req)
        .await?;
    if a.output.json() {
        write_json(out, &row)?;
    } else {
        writeln!(
            out,
            "inventory {} recorded for {id}: product uuid {}, macs {}",
            escape(&row.id),
            cell(row.product_uuid.as_deref()),
            macs(&row.macs)
        )?;
    }
    Ok(())
}

/// MACs as one cell, `-` for none.
fn macs(macs: &[String]) -> String {
    if macs.is_empty() {
        "-".to_owned()
    } else {
        macs.iter().map(|m| escape(m)).collect::<Vec<_>>().join(",")
    }
}

/// `nodes inventories ID`: a node's inventories, newest first, read a page at a time.
pub(in crate::cli) async fn inventories(
    a: NodeArgs,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<()> {
    let list: Vec<Inventory> = Client::new(&a.conn)?
        .list(&format!("/v1/admin/nodes/{}/inventories", a.id), &NO_QUERY)
        .await?;
    if a.output.json() {
        return write_json(out, &list);
    }
    let mut t = Table::new(&["ID", "RECORDED", "PRODUCT UUID", "MACS"]);
    for row in &list {
        t.row(vec![
            escape(&row.id),
            time(Some(row.recorded_at)),
            cell(row.product_uuid.as_deref()),
            macs(&row.macs),
        ]);
    }
    t.write(out)
}

pub(in crate::cli) async fn workflows(
    command: WorkflowsCommand,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<()> {
    match command {
        WorkflowsCommand::Start(a) => start(a, out).await?,
        WorkflowsCommand::List(a) => {
            let list: Vec<Workflow> = Client::new(&a.conn)?
                .list("/v1/admin/workflows", &NO_QUERY)
                .await?;
            a.output.print(out, &list[..], write_workflow_table)?;
        }
        WorkflowsCommand::Show(a) => {
            let w: WorkflowDetail = Client::new(&a.conn)?
                .get(&format!("/v1/admin/workflows/{}", a.id))
                .await?;
            a.output.print(out, &w, write_workflow)?;
        }
        WorkflowsCommand::Complete(a) => finish(a, "complete", out).await?,
        WorkflowsCommand::Cancel(a) => finish(a, "cancel", out).await?,
    }
    Ok(())
}

fn write_workflow_table(out: &mut (dyn Write + Send), list: &[Workflow]) -> anyhow::Result<()> {
    let mut t = Table::new(&["ID", "KIND", "NODE OR MAC", "STATE", "TOKEN", "CREATED"]);
    for w in list {
        let (kind, target, state, token) = match w {
            Workflow::Provision(w) => ("provision", &w.node_id, &w.state, &w.token_id),
            Workflow::Discovery(w) => ("discovery", &w.mac, &w.state, &w.token_id),
        };
        t.row(vec![
            escape(w.id()),
            kind.to_owned(),
            escape(target),
            escape(state),
            cell(token.as_deref()),
            time(Some(w.created_at())),
        ]);
    }
    t.write(out)
}

async fn start(a: StartArgs, out: &mut (dyn Write + Send)) -> anyhow::Result<()> {
    let client = Client::new(&a.conn)?;
    let req = match (&a.node, &a.mac, &a.site) {
        (Some(node), _, _) => StartWorkflow::Provision(StartProvisioning {
            node_id: node.clone(),
            server_url: a.server_url.clone().unwrap_or_else(|| client.base.clone()),
            token_ttl_seconds: Some(a.token_ttl.map_or(24 * 3600, |t| t.as_secs())),
        }),
        (None, Some(mac), Some(site)) => StartWorkflow::Discovery(StartDiscovery {
            site_id: site.clone(),
            mac: mac.clone(),
            product_uuid: a.product_uuid.clone(),
            tenant_id: a.tenant.clone(),
            token_ttl_seconds: a.token_ttl.map(|t| t.as_secs()),
        }),
        _ => anyhow::bail!("name the node to provision, or --mac and --site"),
    };
    let started: StartedWorkflow = client.post("/v1/admin/workflows", &req).await?;
    let provisioned = match &started {
        StartedWorkflow::Provision(p) => p,
        StartedWorkflow::Discovery(d) => {
            if a.output.json() {
                write_json(out, &started)?;
            } else {
                writeln!(
                    out,
                    "discovery workflow {} started for {} at site {}: its boot server fetches the token while it holds the boot lease",
                    escape(&d.id),
                    escape(&d.mac),
                    escape(&d.site_id)
                )?;
            }
            return Ok(());
        }
    };
    if let Some(path) = &a.userdata_out {
        write_private(path, &provisioned.user_data)?;
    }
    if a.output.json() {
        write_json(out, &started)?;
        return Ok(());
    }
    let summary = format!(
        "workflow {} started for {}: step {}, token {} (single use, expires {})",
        escape(&provisioned.workflow.id),
        escape(&provisioned.workflow.node_id),
        escape(&provisioned.workflow.step),
        escape(&provisioned.token_id),
        time(Some(provisioned.token_expires_at))
    );
    match &a.userdata_out {
        Some(path) => {
            writeln!(out, "{summary}")?;
            writeln!(out, "user data written to {}", path.display())?;
        }
        None => {
            // The user data alone on stdout, so it can be redirected into a file as is (the
            // host renders it; nothing a machine supplied is in it).
            eprintln!("{summary}");
            write!(out, "{}", provisioned.user_data)?;
        }
    }
    Ok(())
}

/// Writes `contents` to a new file only its owner can read: it holds a live token.
fn write_private(path: &std::path::Path, contents: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    file.write_all(contents.as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

async fn finish(a: WorkflowArgs, verb: &str, out: &mut (dyn Write + Send)) -> anyhow::Result<()> {
    let answer: FinishedWorkflow = Client::new(&a.conn)?
        .post_empty(&format!("/v1/admin/workflows/{}/{verb}", a.id))
        .await?;
    if a.output.json() {
        write_json(out, &answer)?;
    } else {
        let revoked = if answer.token_revoked {
            ", its unspent token revoked"
        } else {
            ""
        };
        writeln!(out, "workflow {} {}{revoked}", a.id, escape(&answer.state))?;
    }
    Ok(())
}

fn write_workflow(out: &mut (dyn Write + Send), w: &WorkflowDetail) -> anyhow::Result<()> {
    let token = match &w.token {
        None => "-".to_owned(),
        Some(t) if t.revoked => format!("{} revoked", escape(&t.id)),
        Some(t) => format!(
            "{} ({} use left, expires {})",
            escape(&t.id),
            t.uses_left,
            time(Some(t.expires_at))
        ),
    };
    let mut fields = vec![("workflow", escape(w.workflow.id()))];
    match &w.workflow {
        Workflow::Provision(p) => {
            fields.push(("kind", "provision".to_owned()));
            fields.push(("node", escape(&p.node_id)));
            fields.push(("state", escape(&p.state)));
            fields.push(("step", escape(&p.step)));
        }
        Workflow::Discovery(d) => {
            fields.push(("kind", "discovery".to_owned()));
            fields.push(("site", escape(&d.site_id)));
            fields.push(("mac", escape(&d.mac)));
            fields.push(("tenant", escape(&d.tenant_id)));
            fields.push(("state", escape(&d.state)));
        }
    }
    fields.push(("token", token));
    fields.push(("created", time(Some(w.workflow.created_at()))));
    write_fields(out, &fields)
}
