//! Admin commands: a small HTTPS client of the admin API.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::AdminConnection;

#[derive(Debug, Subcommand)]
pub(super) enum TokenCommand {
    /// Creates a token and prints it (shown once).
    Create(CreateTokenArgs),
    /// Lists tokens (never their secrets).
    List(ConnArgs),
    /// Revokes a token.
    Revoke {
        /// The token id.
        id: String,
        #[command(flatten)]
        conn: AdminConnection,
    },
}

#[derive(Debug, Args)]
pub(super) struct ConnArgs {
    #[command(flatten)]
    conn: AdminConnection,
}

#[derive(Debug, Args)]
pub(super) struct CreateTokenArgs {
    /// node, site, provisioned or discovery.
    #[arg(long)]
    role: String,
    /// How many joins it admits.
    #[arg(long, default_value_t = 1)]
    uses: u32,
    /// How long it is valid (e.g. 1h, 30m, 7d).
    #[arg(long, default_value = "1h")]
    ttl: humantime::Duration,
    /// The tenant machines join.
    #[arg(long, default_value = "root")]
    tenant: String,
    /// The pool machines join.
    #[arg(long)]
    pool: Option<String>,
    /// The site machines belong to.
    #[arg(long)]
    site: Option<String>,
    /// Bind the token to a product UUID.
    #[arg(long)]
    expect_product_uuid: Option<String>,
    /// Bind the token to a MAC.
    #[arg(long)]
    expect_mac: Option<String>,
    /// Bind the token to re-keying this node.
    #[arg(long)]
    expect_node: Option<String>,
    /// Allow re-keying a node that already exists for the machine.
    #[arg(long)]
    reclaim: bool,
    /// Print the whole JSON answer instead of the token alone.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: AdminConnection,
}

#[derive(Debug, Subcommand)]
pub(super) enum NodesCommand {
    /// Lists nodes.
    List(ConnArgs),
}

#[derive(Debug, Subcommand)]
pub(super) enum AttestorsCommand {
    /// Lists the loaded attestors: id, version, source, sha256.
    List(ConnArgs),
}

#[derive(Debug, Args)]
pub(super) struct EventsArgs {
    /// Keep printing new events as they happen.
    #[arg(long)]
    follow: bool,
    /// Start after this event id.
    #[arg(long, default_value_t = 0)]
    after: i64,
    #[command(flatten)]
    conn: AdminConnection,
}

struct Client {
    http: reqwest::Client,
    base: String,
    key: String,
}

impl Client {
    fn new(conn: &AdminConnection) -> anyhow::Result<Self> {
        let dir = conn.data_dir.as_deref();
        let base = match (&conn.server, dir) {
            (Some(s), _) => s.trim_end_matches('/').to_owned(),
            (None, Some(dir)) => format!("https://{}", dev_listen(dir)?),
            (None, None) => bail!("pass --server (or --data-dir of a dev host)"),
        };
        let ca_path = conn
            .ca
            .clone()
            .or_else(|| dir.map(|d| d.join("tls/ca.pem")))
            .context("pass --ca (or --data-dir)")?;
        let key_path = conn
            .admin_key_file
            .clone()
            .or_else(|| dir.map(|d| d.join("admin.key")))
            .context("pass --admin-key-file (or --data-dir)")?;
        let key = std::fs::read_to_string(&key_path)
            .with_context(|| format!("reading {}", key_path.display()))?
            .trim()
            .to_owned();
        let http = reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(load_ca(&ca_path)?)
            .timeout(Duration::from_secs(30))
            .build()?;
        Ok(Self { http, base, key })
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.key);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req
            .send()
            .await
            .with_context(|| format!("calling {}{path}", self.base))?;
        let status = resp.status();
        let value: Value = resp.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            bail!(
                "{status}: {} {}",
                value["code"].as_str().unwrap_or(""),
                value["message"].as_str().unwrap_or("")
            );
        }
        Ok(value)
    }
}

/// The listen address in a dev data directory's configuration.
fn dev_listen(dir: &Path) -> anyhow::Result<String> {
    let config = crate::config::Config::load(&dir.join("gatehouse.toml"))?;
    Ok(config.listen.replace("0.0.0.0", "127.0.0.1"))
}

/// A CA from a PEM file or a join trust file.
fn load_ca(path: &PathBuf) -> anyhow::Result<reqwest::Certificate> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let pem = if text.trim_start().starts_with('{') {
        serde_json::from_str::<gatehouse_proto::JoinTrust>(&text)
            .context("parsing the join trust file")?
            .tls_ca_pem
    } else {
        text
    };
    Ok(reqwest::Certificate::from_pem(pem.as_bytes())?)
}

fn print(value: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_default()
    );
}

pub(super) async fn token(command: TokenCommand) -> anyhow::Result<()> {
    match command {
        TokenCommand::Create(a) => {
            let client = Client::new(&a.conn)?;
            let body = json!({
                "role": a.role,
                "uses": a.uses,
                "ttlSeconds": a.ttl.as_secs(),
                "tenantId": a.tenant,
                "poolId": a.pool,
                "siteId": a.site,
                "expect": { "productUuid": a.expect_product_uuid, "mac": a.expect_mac, "nodeId": a.expect_node },
                "reclaim": a.reclaim,
            });
            let created = client
                .call(reqwest::Method::POST, "/v1/admin/tokens", Some(body))
                .await?;
            if a.json {
                print(&created);
            } else {
                println!("{}", created["token"].as_str().unwrap_or_default());
            }
        }
        TokenCommand::List(a) => print(
            &Client::new(&a.conn)?
                .call(reqwest::Method::GET, "/v1/admin/tokens", None)
                .await?,
        ),
        TokenCommand::Revoke { id, conn } => print(
            &Client::new(&conn)?
                .call(
                    reqwest::Method::POST,
                    &format!("/v1/admin/tokens/{id}/revoke"),
                    None,
                )
                .await?,
        ),
    }
    Ok(())
}

pub(super) async fn nodes(command: NodesCommand) -> anyhow::Result<()> {
    let NodesCommand::List(a) = command;
    print(
        &Client::new(&a.conn)?
            .call(reqwest::Method::GET, "/v1/admin/nodes", None)
            .await?,
    );
    Ok(())
}

pub(super) async fn attestors(command: AttestorsCommand) -> anyhow::Result<()> {
    let AttestorsCommand::List(a) = command;
    let list = Client::new(&a.conn)?
        .call(reqwest::Method::GET, "/v1/admin/attestors", None)
        .await?;
    for a in list.as_array().into_iter().flatten() {
        let source = match a["source"]["kind"].as_str() {
            Some("file") => format!("file {}", a["source"]["path"].as_str().unwrap_or("")),
            _ => "built-in".to_owned(),
        };
        println!(
            "{:<16} {:<20} {:<48} {}",
            a["id"].as_str().unwrap_or(""),
            a["version"].as_str().unwrap_or(""),
            source,
            a["sha256"].as_str().unwrap_or("")
        );
    }
    Ok(())
}

pub(super) async fn events(args: EventsArgs) -> anyhow::Result<()> {
    let client = Client::new(&args.conn)?;
    let mut after = args.after;
    loop {
        let page = client
            .call(
                reqwest::Method::GET,
                &format!("/v1/admin/events?after={after}&limit=500"),
                None,
            )
            .await?;
        let events = page.as_array().cloned().unwrap_or_default();
        for e in &events {
            println!("{}", serde_json::to_string(e).unwrap_or_default());
            after = after.max(e["id"].as_i64().unwrap_or(after));
        }
        if !args.follow {
            return Ok(());
        }
        if events.is_empty() {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}
