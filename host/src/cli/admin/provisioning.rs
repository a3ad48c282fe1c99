//! Provisioning commands: `nodes inventory` and `workflows start|list|show|complete|cancel`,
//! clients of the admin API's provisioning routes.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::{Client, segment, text, time, write_json};
use crate::cli::AdminConnection;

#[derive(Debug, Args)]
pub(in crate::cli) struct InventoryArgs {
    /// The node id.
    id: String,
    /// The SMBIOS product UUID the node's hardware reports.
    #[arg(long, value_name = "UUID")]
    product_uuid: Option<String>,
    /// A MAC address of the node (repeatable).
    #[arg(long = "mac", value_name = "MAC")]
    macs: Vec<String>,
    /// Print the API's JSON answer.
    #[arg(long)]
    json: bool,
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
    node: Option<String>,
    /// A discovery workflow instead: the MAC of the machine that may boot the discovery
    /// ramdisk at --site; the site's boot server fetches its token while it holds the lease.
    #[arg(long, requires = "site")]
    mac: Option<String>,
    /// The site of a discovery workflow.
    #[arg(long, requires = "mac")]
    site: Option<String>,
    /// The machine's product UUID (a discovery workflow).
    #[arg(long, requires = "mac")]
    product_uuid: Option<String>,
    /// The tenant the ramdisk joins (a discovery workflow).
    #[arg(long, requires = "mac", default_value = "root")]
    tenant: String,
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
    /// Print the API's JSON answer (the workflow, the token and the user data).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: AdminConnection,
}

#[derive(Debug, Args)]
pub(in crate::cli) struct ListArgs {
    /// Print the API's JSON answer.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: AdminConnection,
}

#[derive(Debug, Args)]
pub(in crate::cli) struct WorkflowArgs {
    /// The workflow id.
    id: String,
    /// Print the API's JSON answer.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: AdminConnection,
}

/// `nodes inventory ID [--product-uuid U] [--mac M]...`.
pub(in crate::cli) async fn inventory(
    a: InventoryArgs,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<()> {
    let id = segment("node id", &a.id)?;
    let body = json!({ "productUuid": a.product_uuid, "macs": a.macs });
    let row = Client::new(&a.conn)?
        .call(
            reqwest::Method::POST,
            &format!("/v1/admin/nodes/{id}/inventories"),
            Some(body),
        )
        .await?;
    if a.json {
        write_json(out, &row)?;
    } else {
        let macs: Vec<String> = row["macs"]
            .as_array()
            .into_iter()
            .flatten()
            .map(text)
            .collect();
        writeln!(
            out,
            "inventory {} recorded for {id}: product uuid {}, macs {}",
            text(&row["id"]),
            text(&row["productUuid"]),
            if macs.is_empty() {
                "-".to_owned()
            } else {
                macs.join(",")
            }
        )?;
    }
    Ok(())
}

/// `nodes inventories ID`: a node's inventories, newest first, read a page at a time.
pub(in crate::cli) async fn inventories(
    a: super::NodeArgs,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<()> {
    let id = segment("node id", &a.id)?;
    let list = Client::new(&a.conn)?
        .list(&format!("/v1/admin/nodes/{id}/inventories"))
        .await?;
    if a.json {
        return write_json(out, &list);
    }
    writeln!(
        out,
        "{:<36} {:<20} {:<36} MACS",
        "ID", "RECORDED", "PRODUCT UUID"
    )?;
    for row in list.as_array().into_iter().flatten() {
        let macs: Vec<String> = row["macs"]
            .as_array()
            .into_iter()
            .flatten()
            .map(text)
            .collect();
        writeln!(
            out,
            "{:<36} {:<20} {:<36} {}",
            text(&row["id"]),
            time(&row["recordedAt"]),
            text(&row["productUuid"]),
            if macs.is_empty() {
                "-".to_owned()
            } else {
                macs.join(",")
            }
        )?;
    }
    Ok(())
}

pub(in crate::cli) async fn workflows(
    command: WorkflowsCommand,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<()> {
    match command {
        WorkflowsCommand::Start(a) => start(a, out).await?,
        WorkflowsCommand::List(a) => {
            let list = Client::new(&a.conn)?.list("/v1/admin/workflows").await?;
            if a.json {
                write_json(out, &list)?;
            } else {
                writeln!(
                    out,
                    "{:<30} {:<30} {:<10} {:<16} {:<30} CREATED",
                    "ID", "NODE", "STATE", "STEP", "TOKEN"
                )?;
                for w in list.as_array().into_iter().flatten() {
                    writeln!(
                        out,
                        "{:<30} {:<30} {:<10} {:<16} {:<30} {}",
                        text(&w["id"]),
                        text(&w["nodeId"]),
                        text(&w["state"]),
                        text(&w["step"]),
                        text(&w["tokenId"]),
                        time(&w["createdAt"])
                    )?;
                }
            }
        }
        WorkflowsCommand::Show(a) => {
            let id = segment("workflow id", &a.id)?;
            let w = Client::new(&a.conn)?
                .call(
                    reqwest::Method::GET,
                    &format!("/v1/admin/workflows/{id}"),
                    None,
                )
                .await?;
            if a.json {
                write_json(out, &w)?;
            } else {
                write_workflow(out, &w)?;
            }
        }
        WorkflowsCommand::Complete(a) => finish(a, "complete", out).await?,
        WorkflowsCommand::Cancel(a) => finish(a, "cancel", out).await?,
    }
    Ok(())
}

async fn start(a: StartArgs, out: &mut (dyn Write + Send)) -> anyhow::Result<()> {
    if a.mac.is_some() || a.node.is_none() {
        return start_discovery(a, out).await;
    }
    let node = segment("node id", a.node.as_deref().unwrap_or_default())?;
    let client = Client::new(&a.conn)?;
    let server_url = a.server_url.clone().unwrap_or_else(|| client.base.clone());
    let ttl = a.token_ttl.map_or(24 * 3600, |t| t.as_secs());
    let body = json!({
        "nodeId": node,
        "serverUrl": server_url,
        "tokenTtlSeconds": ttl,
    });
    let started = client
        .call(reqwest::Method::POST, "/v1/admin/workflows", Some(body))
        .await?;
    if let Some(path) = &a.userdata_out {
        write_private(path, started["userData"].as_str().unwrap_or_default())?;
    }
    if a.json {
        write_json(out, &started)?;
        return Ok(());
    }
    let summary = format!(
        "workflow {} started for {node}: step {}, token {} (single use, expires {})",
        text(&started["workflow"]["id"]),
        text(&started["workflow"]["step"]),
        text(&started["tokenId"]),
        time(&started["tokenExpiresAt"])
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
            write!(out, "{}", started["userData"].as_str().unwrap_or_default())?;
        }
    }
    Ok(())
}

/// `workflows start --mac M --site S`: a discovery workflow.
async fn start_discovery(a: StartArgs, out: &mut (dyn Write + Send)) -> anyhow::Result<()> {
    let mut body = json!({
        "kind": "discovery",
        "mac": a.mac,
        "siteId": a.site,
        "tenantId": a.tenant,
    });
    if let Some(uuid) = &a.product_uuid {
        body["productUuid"] = json!(uuid);
    }
    if let Some(ttl) = a.token_ttl {
        body["tokenTtlSeconds"] = json!(ttl.as_secs());
    }
    let started = Client::new(&a.conn)?
        .call(reqwest::Method::POST, "/v1/admin/workflows", Some(body))
        .await?;
    if a.json {
        write_json(out, &started)?;
    } else {
        writeln!(
            out,
            "discovery workflow {} started for {} at site {}: its boot server fetches the token while it holds the boot lease",
            text(&started["id"]),
            text(&started["mac"]),
            text(&started["siteId"])
        )?;
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
    let id = segment("workflow id", &a.id)?;
    let answer = Client::new(&a.conn)?
        .call(
            reqwest::Method::POST,
            &format!("/v1/admin/workflows/{id}/{verb}"),
            None,
        )
        .await?;
    if a.json {
        write_json(out, &answer)?;
    } else {
        let revoked = if answer["tokenRevoked"].as_bool() == Some(true) {
            ", its unspent token revoked"
        } else {
            ""
        };
        writeln!(out, "workflow {id} {}{revoked}", text(&answer["state"]))?;
    }
    Ok(())
}

fn write_workflow(out: &mut (dyn Write + Send), w: &Value) -> anyhow::Result<()> {
    let token = &w["token"];
    let token_state = if token.is_null() {
        "-".to_owned()
    } else if token["revoked"].as_bool() == Some(true) {
        format!("{} revoked", text(&token["id"]))
    } else {
        format!(
            "{} ({} use left, expires {})",
            text(&token["id"]),
            token["usesLeft"],
            time(&token["expiresAt"])
        )
    };
    for (label, value) in [
        ("workflow", text(&w["id"]).to_owned()),
        ("node", text(&w["nodeId"]).to_owned()),
        ("state", text(&w["state"]).to_owned()),
        ("step", text(&w["step"]).to_owned()),
        ("token", token_state),
        ("created", time(&w["createdAt"])),
    ] {
        writeln!(out, "{label:<9} {value}")?;
    }
    Ok(())
}
