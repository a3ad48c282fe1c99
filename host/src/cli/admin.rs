//! Admin commands: a small HTTPS client of the admin API.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::AdminConnection;

mod provisioning;
mod prune;
mod tenants;
pub(super) use provisioning::{WorkflowsCommand, workflows};
pub(super) use prune::{PruneCommand, PruneUsesArgs, prune, prune_uses};
pub(super) use tenants::{TenantsCommand, tenants};

#[derive(Debug, Subcommand)]
pub(super) enum TokenCommand {
    /// Creates a token and prints it (shown once).
    Create(CreateTokenArgs),
    /// Lists tokens (never their secrets).
    List(ConnArgs),
    /// Revokes a token (prints the host's JSON answer).
    Revoke {
        /// The token id.
        id: String,
        /// Accepted for symmetry: the answer is JSON either way.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        conn: AdminConnection,
    },
}

#[derive(Debug, Args)]
pub(super) struct ConnArgs {
    /// Print the host's JSON (`token list` prints JSON either way).
    #[arg(long)]
    json: bool,
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
pub(super) struct ListArgs {
    /// Print the API's JSON answer.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: AdminConnection,
}

#[derive(Debug, Args)]
pub(super) struct NodeArgs {
    /// The node id.
    id: String,
    /// Print the API's JSON answer.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: AdminConnection,
}

#[derive(Debug, Args)]
pub(super) struct DestructiveArgs {
    /// The node id.
    id: String,
    /// Do it. Without --yes, print what would change and exit 2.
    #[arg(long)]
    yes: bool,
    /// Print the API's JSON answer (or, without --yes, the plan as JSON).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: AdminConnection,
}

#[derive(Debug, Args)]
pub(super) struct RevokeCertArgs {
    /// The node id.
    id: String,
    /// The certificate's serial number (hex, as `nodes show` prints it).
    serial: String,
    /// Print the API's JSON answer.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: AdminConnection,
}

#[derive(Debug, Subcommand)]
pub(super) enum AttestorsCommand {
    /// Lists the loaded attestors: id, version, source, sha256.
    List(ConnArgs),
}

#[derive(Debug, Args)]
pub(super) struct AuditsArgs {
    /// Accepted for symmetry: audit records print as JSON lines either way.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: AdminConnection,
}

#[derive(Debug, Args)]
pub(super) struct EventsArgs {
    /// Keep printing new events as they happen.
    #[arg(long)]
    follow: bool,
    /// Start after this event id.
    #[arg(long, default_value_t = 0)]
    after: i64,
    /// Accepted for symmetry: events print as JSON lines either way.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: AdminConnection,
}

struct Client {
    http: reqwest::Client,
    base: String,
    key: String,
    /// The `--ca` file, named in a trust failure.
    ca: PathBuf,
    page_size: u32,
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
        // reqwest is built without a crypto provider, so that aws-lc-rs is the one TLS stack
        // (its default features would link ring too): make aws-lc-rs the process default.
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let http = reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(load_ca(&ca_path)?)
            .timeout(Duration::from_secs(30))
            .build()?;
        Ok(Self {
            http,
            base,
            key,
            ca: ca_path,
            page_size: conn.page_size,
        })
    }

    /// A request that got no answer: a TLS trust failure (the host's certificate is not from
    /// `--ca`) says so, rather than reading as an unreachable host.
    fn send_error(&self, e: reqwest::Error, path: &str) -> anyhow::Error {
        if gatehouse_agent::is_tls_trust_error(&e) {
            anyhow::anyhow!(
                "TLS trust failure calling {}{path}: the host's certificate is not trusted by \
                 --ca {}: {}",
                self.base,
                self.ca.display(),
                gatehouse_agent::error_line(&e)
            )
        } else {
            anyhow::anyhow!(
                "cannot reach the host at {}{path}: {}",
                self.base,
                gatehouse_agent::error_line(&e)
            )
        }
    }

    /// Every row of a paged list (`GET path`), a page of `--page-size` rows per request
    /// following the host's `x-next-cursor`: each page is one short transaction on the host.
    async fn list(&self, path: &str) -> anyhow::Result<Value> {
        let mut rows = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let mut req = self
                .http
                .get(format!("{}{path}", self.base))
                .bearer_auth(&self.key)
                .query(&[("limit", self.page_size.to_string())]);
            if let Some(after) = &after {
                req = req.query(&[("after", after)]);
            }
            let resp = req.send().await.map_err(|e| self.send_error(e, path))?;
            let status = resp.status();
            let next = resp
                .headers()
                .get("x-next-cursor")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let value: Value = resp.json().await.unwrap_or(Value::Null);
            if !status.is_success() {
                bail!(
                    "{status}: {} {}",
                    escape(value["code"].as_str().unwrap_or("")),
                    escape(value["message"].as_str().unwrap_or(""))
                );
            }
            let Value::Array(page) = value else {
                bail!("the host's answer to {path} is not a list");
            };
            rows.extend(page);
            match next {
                Some(next) if after.as_deref() != Some(next.as_str()) => after = Some(next),
                _ => return Ok(Value::Array(rows)),
            }
        }
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
        let resp = req.send().await.map_err(|e| self.send_error(e, path))?;
        let status = resp.status();
        let value: Value = resp.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            bail!(
                "{status}: {} {}",
                escape(value["code"].as_str().unwrap_or("")),
                escape(value["message"].as_str().unwrap_or(""))
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
                println!("{}", escape(created["token"].as_str().unwrap_or_default()));
                // On stderr, so `TOKEN=$(gatehouse token create …)` still captures the token
                // alone.
                if let Some(command) = agent_command(&client.base, &a.role) {
                    eprintln!("{command}");
                }
            }
        }
        TokenCommand::List(a) => print(&Client::new(&a.conn)?.list("/v1/admin/tokens").await?),
        TokenCommand::Revoke { id, conn, .. } => print(
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

/// The command that joins a machine with a token of `role` just printed, for the operator to
/// copy: the token goes into a file (never the command line, which other users can read).
/// Provisioned and discovery tokens are not joined with by hand (user data, a boot server).
fn agent_command(server: &str, role: &str) -> Option<String> {
    let join_role = match role {
        "node" => "",
        "site" => " --role site",
        _ => return None,
    };
    Some(format!(
        "join a machine with it (the token in a file readable only by root, join-trust.json from \
         `gatehouse pki trust`):\n  gatehouse-agent join --server {} --ca join-trust.json \
         --token-file TOKEN-FILE --out /var/lib/gatehouse-agent{join_role}",
        escape(server)
    ))
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

    fn request(self, id: &str) -> (reqwest::Method, String) {
        match self {
            Destructive::Retire => (
                reqwest::Method::POST,
                format!("/v1/admin/nodes/{id}/retire"),
            ),
            Destructive::Delete => (reqwest::Method::DELETE, format!("/v1/admin/nodes/{id}")),
            Destructive::RevokeIdentity => (
                reqwest::Method::POST,
                format!("/v1/admin/nodes/{id}/revoke-identity"),
            ),
        }
    }
}

/// A path segment as the admin API takes ids and serials: anything else is refused here,
/// before it could change the request's path.
fn segment<'a>(what: &str, v: &'a str) -> anyhow::Result<&'a str> {
    if !v.is_empty()
        && v.len() <= 128
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        Ok(v)
    } else {
        bail!("{what} `{v}` is not an id")
    }
}

pub(super) async fn nodes(
    command: NodesCommand,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<()> {
    match command {
        NodesCommand::List(a) => {
            let list = Client::new(&a.conn)?.list("/v1/admin/nodes").await?;
            if a.json {
                write_json(out, &list)?;
            } else {
                write_node_table(out, &list)?;
            }
        }
        NodesCommand::Show(a) => {
            let id = segment("node id", &a.id)?;
            let node = Client::new(&a.conn)?
                .call(reqwest::Method::GET, &format!("/v1/admin/nodes/{id}"), None)
                .await?;
            if a.json {
                write_json(out, &node)?;
            } else {
                write_node(out, &node)?;
            }
        }
        NodesCommand::Cordon(a) => cordon(out, a, true).await?,
        NodesCommand::Uncordon(a) => cordon(out, a, false).await?,
        NodesCommand::Retire(a) => destructive(out, a, Destructive::Retire).await?,
        NodesCommand::Delete(a) => destructive(out, a, Destructive::Delete).await?,
        NodesCommand::RevokeIdentity(a) => destructive(out, a, Destructive::RevokeIdentity).await?,
        NodesCommand::Inventory(a) => provisioning::inventory(a, out).await?,
        NodesCommand::Inventories(a) => provisioning::inventories(a, out).await?,
        NodesCommand::RevokeCert(a) => {
            let id = segment("node id", &a.id)?;
            let serial = segment("serial", &a.serial)?;
            let answer = Client::new(&a.conn)?
                .call(
                    reqwest::Method::POST,
                    &format!("/v1/admin/nodes/{id}/certs/{serial}/revoke"),
                    None,
                )
                .await?;
            if a.json {
                write_json(out, &answer)?;
            } else if answer["changed"].as_bool() == Some(true) {
                writeln!(
                    out,
                    "certificate {} of {id} revoked",
                    text(&answer["serial"])
                )?;
            } else {
                writeln!(
                    out,
                    "certificate {} of {id} was revoked already ({})",
                    text(&answer["serial"]),
                    text(&answer["revoked"])
                )?;
            }
        }
    }
    Ok(())
}

async fn cordon(out: &mut (dyn Write + Send), a: NodeArgs, on: bool) -> anyhow::Result<()> {
    let id = segment("node id", &a.id)?;
    let verb = if on { "cordon" } else { "uncordon" };
    let answer = Client::new(&a.conn)?
        .call(
            reqwest::Method::POST,
            &format!("/v1/admin/nodes/{id}/{verb}"),
            None,
        )
        .await?;
    if a.json {
        write_json(out, &answer)?;
    } else {
        let state = if on { "cordoned" } else { "uncordoned" };
        if answer["changed"].as_bool() == Some(true) {
            writeln!(out, "{id} {state}")?;
        } else {
            writeln!(out, "{id} was {state} already")?;
        }
    }
    Ok(())
}

/// Retire, delete or revoke-identity: without `--yes`, reads the node, prints what would
/// change and returns [`super::NotConfirmed`] having changed nothing.
async fn destructive(
    out: &mut (dyn Write + Send),
    a: DestructiveArgs,
    action: Destructive,
) -> anyhow::Result<()> {
    let id = segment("node id", &a.id)?;
    let client = Client::new(&a.conn)?;
    if !a.yes {
        let node = client
            .call(reqwest::Method::GET, &format!("/v1/admin/nodes/{id}"), None)
            .await?;
        let plan = plan(action, &node)?;
        if a.json {
            write_json(out, &plan.json)?;
            eprintln!("nothing changed: pass --yes to {} {id}", action.name());
        } else {
            out.write_all(plan.text.as_bytes())?;
        }
        out.flush()?;
        return Err(super::NotConfirmed.into());
    }
    let (method, path) = action.request(id);
    let answer = client.call(method, &path, None).await?;
    if a.json {
        write_json(out, &answer)?;
        return Ok(());
    }
    let revoked = count(
        answer["certificatesRevoked"].as_u64().unwrap_or(0),
        "certificate",
    );
    match action {
        Destructive::Retire if answer["changed"].as_bool() == Some(false) => {
            writeln!(out, "{id} was retired already")?
        }
        Destructive::Retire => writeln!(out, "{id} retired: {revoked} revoked")?,
        Destructive::Delete => {
            let freed = answer["bindingsFreed"].as_array().map_or(0, Vec::len);
            let key = if answer["hardwareKeyFreed"].as_bool() == Some(true) {
                ", hardware key freed"
            } else {
                ""
            };
            writeln!(
                out,
                "{id} deleted: {revoked} revoked, {} freed{key}",
                count(freed as u64, "binding")
            )?
        }
        Destructive::RevokeIdentity => writeln!(
            out,
            "{id} identity revoked: generation {} -> {}, {revoked} revoked",
            answer["previousGeneration"], answer["generation"]
        )?,
    }
    Ok(())
}

/// What a destructive action would do to a node, as `nodes show --json` described it.
#[derive(Debug)]
struct Plan {
    text: String,
    json: Value,
}

fn plan(action: Destructive, node: &Value) -> anyhow::Result<Plan> {
    use std::fmt::Write as _;
    let id = text(&node["id"]);
    if !node["deletedAt"].is_null() {
        bail!("{id} is deleted: nothing left to {}", action.name());
    }
    let live: Vec<String> = node["certificates"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["revoked"].is_null())
        .filter_map(|c| c["serial"].as_str().map(escape))
        .collect();
    let bindings: Vec<String> = node["bindings"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|b| format!("{}={}", text(&b["kind"]), text(&b["value"])))
        .collect();
    let retired = node["retired"].as_bool() == Some(true);
    let generation = node["identityGeneration"].as_u64().unwrap_or(0);
    let serials = if live.is_empty() {
        String::new()
    } else {
        format!(": {}", live.join(", "))
    };
    let mut t = String::new();
    let about = format!(
        "node {id} (tenant {}, role {}, generation {generation})",
        text(&node["tenantId"]),
        text(&node["role"])
    );
    let mut json = json!({
        "dryRun": true,
        "action": action.name(),
        "id": id,
        "certificatesToRevoke": live,
    });
    match action {
        Destructive::Retire if retired => {
            let _ = writeln!(t, "{about} is retired already: nothing would change");
        }
        Destructive::Retire => {
            let _ = writeln!(t, "would retire {about}:");
            let _ = writeln!(
                t,
                "  revoke {}{serials}",
                count(live.len() as u64, "live certificate")
            );
            let _ = writeln!(t, "  it never joins or renews again (it stays listed)");
        }
        Destructive::Delete => {
            let _ = writeln!(t, "would delete {about}:");
            let _ = writeln!(
                t,
                "  revoke {}{serials}",
                count(live.len() as u64, "live certificate")
            );
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
            if let Some(key) = node["hardwareKey"].as_str().map(escape) {
                let _ = writeln!(t, "  free its hardware key {key}");
            }
            let _ = writeln!(
                t,
                "  hide it from `nodes list` (`nodes show {id}` still shows it)"
            );
            json["bindingsToFree"] = json!(bindings);
            json["hardwareKeyToFree"] = node["hardwareKey"].clone();
        }
        Destructive::RevokeIdentity if retired => {
            bail!("{id} is retired: it has no identity left to revoke");
        }
        Destructive::RevokeIdentity => {
            let _ = writeln!(t, "would revoke the identity of {about}:");
            let _ = writeln!(t, "  raise its identity generation to {}", generation + 1);
            let _ = writeln!(
                t,
                "  revoke {}{serials}",
                count(live.len() as u64, "live certificate")
            );
            let _ = writeln!(
                t,
                "  it joins again only with a token that re-keys it \
                 (`token create --expect-node {id}`)"
            );
            json["generation"] = json!(generation + 1);
        }
    }
    let _ = writeln!(t, "nothing changed: pass --yes to {} {id}", action.name());
    Ok(Plan { text: t, json })
}

/// `n things`, singular for one.
fn count(n: u64, thing: &str) -> String {
    if n == 1 {
        format!("1 {thing}")
    } else {
        format!("{n} {thing}s")
    }
}

/// A JSON string's text for a terminal, `-` for null or anything else: whatever a machine,
/// an attestor or the host supplied, with control characters escaped (see [`escape`]).
fn text(v: &Value) -> String {
    escape(v.as_str().unwrap_or("-"))
}

/// `s` with every character that could steer a terminal or hide text (C0 and C1 controls, DEL,
/// bidirectional overrides) written as `\u{..}`, and `\` doubled so the escapes are
/// unambiguous.
pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        let steers = c.is_control()
            || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        if c == '\\' {
            out.push_str("\\\\");
        } else if steers {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

/// A database time (ms since the Unix epoch) as RFC 3339, or `-`.
fn time(v: &Value) -> String {
    match v.as_i64().and_then(|ms| u64::try_from(ms).ok()) {
        Some(ms) => {
            humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_millis(ms))
                .to_string()
        }
        None => "-".to_owned(),
    }
}

/// `active`, or the node's flags (`retired`, `cordoned`, `deleted`).
fn node_state(n: &Value) -> String {
    let mut flags = Vec::new();
    if !n["deletedAt"].is_null() {
        flags.push("deleted");
    } else if n["retired"].as_bool() == Some(true) {
        flags.push("retired");
    }
    if n["cordoned"].as_bool() == Some(true) {
        flags.push("cordoned");
    }
    if flags.is_empty() {
        "active".to_owned()
    } else {
        flags.join(",")
    }
}

fn write_json(out: &mut (dyn Write + Send), value: &Value) -> anyhow::Result<()> {
    writeln!(out, "{}", serde_json::to_string_pretty(value)?)?;
    Ok(())
}

fn write_node_table(out: &mut (dyn Write + Send), list: &Value) -> anyhow::Result<()> {
    writeln!(
        out,
        "{:<28} {:<12} {:<12} {:<12} {:>4}  {:<16} CREATED",
        "ID", "TENANT", "POOL", "ROLE", "GEN", "STATE"
    )?;
    for n in list.as_array().into_iter().flatten() {
        writeln!(
            out,
            "{:<28} {:<12} {:<12} {:<12} {:>4}  {:<16} {}",
            text(&n["id"]),
            text(&n["tenantId"]),
            text(&n["poolId"]),
            text(&n["role"]),
            n["identityGeneration"],
            node_state(n),
            time(&n["createdAt"])
        )?;
    }
    Ok(())
}

fn write_node(out: &mut (dyn Write + Send), n: &Value) -> anyhow::Result<()> {
    for (label, value) in [
        ("node", text(&n["id"]).to_owned()),
        ("tenant", text(&n["tenantId"]).to_owned()),
        ("pool", text(&n["poolId"]).to_owned()),
        ("site", text(&n["siteId"]).to_owned()),
        ("role", text(&n["role"]).to_owned()),
        ("state", node_state(n)),
        ("generation", n["identityGeneration"].to_string()),
        ("hardware key", text(&n["hardwareKey"]).to_owned()),
        ("created", time(&n["createdAt"])),
        ("updated", time(&n["updatedAt"])),
    ] {
        writeln!(out, "{label:<13} {value}")?;
    }
    if !n["deletedAt"].is_null() {
        writeln!(out, "{:<13} {}", "deleted", time(&n["deletedAt"]))?;
    }
    let bindings = n["bindings"].as_array().cloned().unwrap_or_default();
    if bindings.is_empty() {
        writeln!(out, "{:<13} -", "bindings")?;
    }
    for (i, b) in bindings.iter().enumerate() {
        let label = if i == 0 { "bindings" } else { "" };
        writeln!(
            out,
            "{label:<13} {} {}",
            text(&b["kind"]),
            text(&b["value"])
        )?;
    }
    let certs = n["certificates"].as_array().cloned().unwrap_or_default();
    writeln!(out, "certificates  {} (newest first)", certs.len())?;
    if !certs.is_empty() {
        writeln!(
            out,
            "  {:<40} {:>4}  {:<12} {:<20} {:<20} STATUS",
            "SERIAL", "GEN", "ROLE", "NOT BEFORE", "NOT AFTER"
        )?;
    }
    for c in &certs {
        let status = match c["revoked"].as_str() {
            Some(reason) => format!("revoked ({})", escape(reason)),
            None => "live".to_owned(),
        };
        writeln!(
            out,
            "  {:<40} {:>4}  {:<12} {:<20} {:<20} {status}",
            text(&c["serial"]),
            c["generation"],
            text(&c["role"]),
            time(&c["notBefore"]),
            time(&c["notAfter"])
        )?;
        for s in c["statements"].as_array().into_iter().flatten() {
            writeln!(out, "    {}", text(s))?;
        }
    }
    Ok(())
}

#[derive(Debug, Subcommand)]
pub(super) enum PoolsCommand {
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
pub(super) struct CreatePoolArgs {
    /// The pool id.
    id: String,
    /// Its tenant.
    #[arg(long, default_value = "root")]
    tenant: String,
    /// The only attestors that may admit a machine into it (1 to 16 ids, comma-separated);
    /// without it, every attestor may.
    #[arg(long, value_delimiter = ',')]
    join_attestors: Option<Vec<String>>,
    /// Who owns it (a lessee).
    #[arg(long)]
    owner: Option<String>,
    /// Print the API's JSON answer.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: AdminConnection,
}

#[derive(Debug, Args)]
pub(super) struct ShowPoolArgs {
    /// `TENANT/ID`.
    pool: String,
    /// Print the API's JSON answer.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: AdminConnection,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("policy").required(true).args(["join_attestors", "any_attestor"])))]
pub(super) struct UpdatePoolArgs {
    /// The pool id.
    id: String,
    /// Its tenant.
    #[arg(long, default_value = "root")]
    tenant: String,
    /// The only attestors that may admit a machine into it (1 to 16 ids, comma-separated).
    #[arg(long, value_delimiter = ',')]
    join_attestors: Option<Vec<String>>,
    /// Let every attestor admit machines into it (lifts --join-attestors).
    #[arg(long)]
    any_attestor: bool,
    /// Print the API's JSON answer.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: AdminConnection,
}

/// The policy body of a pool command: `{"joinAttestors": [...]}`, or `{}` for any attestor.
fn pool_policy(join_attestors: Option<&[String]>) -> Value {
    match join_attestors {
        Some(ids) => json!({ "joinAttestors": ids }),
        None => json!({}),
    }
}

/// How a pool's policy reads: the attestors it lists, or `any attestor`.
fn pool_attestors(pool: &Value) -> String {
    match pool["policy"]["joinAttestors"].as_array() {
        Some(ids) => ids.iter().map(text).collect::<Vec<_>>().join(","),
        None => "any attestor".to_owned(),
    }
}

pub(super) async fn pools(
    command: PoolsCommand,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<()> {
    match command {
        PoolsCommand::Create(a) => {
            let body = json!({
                "tenantId": a.tenant,
                "id": a.id,
                "policy": pool_policy(a.join_attestors.as_deref()),
                "owner": a.owner,
            });
            let pool = Client::new(&a.conn)?
                .call(reqwest::Method::POST, "/v1/admin/pools", Some(body))
                .await?;
            if a.json {
                write_json(out, &pool)?;
            } else {
                writeln!(
                    out,
                    "pool {}/{} created: join attestors {}",
                    text(&pool["tenantId"]),
                    text(&pool["id"]),
                    pool_attestors(&pool)
                )?;
            }
        }
        PoolsCommand::List(a) => {
            let list = Client::new(&a.conn)?.list("/v1/admin/pools").await?;
            if a.json {
                write_json(out, &list)?;
            } else {
                write_pool_table(out, &list)?;
            }
        }
        PoolsCommand::Show(a) => {
            let Some((tenant, id)) = a.pool.split_once('/') else {
                bail!("name the pool as TENANT/ID (e.g. root/{})", a.pool);
            };
            let tenant = segment("tenant", tenant)?;
            let id = segment("pool id", id)?;
            let pool = Client::new(&a.conn)?
                .call(
                    reqwest::Method::GET,
                    &format!("/v1/admin/pools/{tenant}/{id}"),
                    None,
                )
                .await?;
            if a.json {
                write_json(out, &pool)?;
            } else {
                for (label, value) in [
                    ("pool", text(&pool["id"]).to_owned()),
                    ("tenant", text(&pool["tenantId"]).to_owned()),
                    ("owner", text(&pool["owner"]).to_owned()),
                    ("join attestors", pool_attestors(&pool)),
                ] {
                    writeln!(out, "{label:<15} {value}")?;
                }
            }
        }
        PoolsCommand::Update(a) => {
            let tenant = segment("tenant", &a.tenant)?;
            let id = segment("pool id", &a.id)?;
            let ids = a.join_attestors.as_deref().filter(|_| !a.any_attestor);
            let body = json!({ "policy": pool_policy(ids) });
            let pool = Client::new(&a.conn)?
                .call(
                    reqwest::Method::PUT,
                    &format!("/v1/admin/pools/{tenant}/{id}"),
                    Some(body),
                )
                .await?;
            if a.json {
                write_json(out, &pool)?;
            } else if pool["changed"].as_bool() == Some(true) {
                writeln!(
                    out,
                    "pool {tenant}/{id} updated: join attestors {}",
                    pool_attestors(&pool)
                )?;
            } else {
                writeln!(
                    out,
                    "pool {tenant}/{id} unchanged: join attestors {}",
                    pool_attestors(&pool)
                )?;
            }
        }
    }
    Ok(())
}

fn write_pool_table(out: &mut (dyn Write + Send), list: &Value) -> anyhow::Result<()> {
    writeln!(
        out,
        "{:<12} {:<28} {:<16} JOIN ATTESTORS",
        "TENANT", "ID", "OWNER"
    )?;
    for p in list.as_array().into_iter().flatten() {
        writeln!(
            out,
            "{:<12} {:<28} {:<16} {}",
            text(&p["tenantId"]),
            text(&p["id"]),
            text(&p["owner"]),
            pool_attestors(p)
        )?;
    }
    Ok(())
}

pub(super) async fn attestors(command: AttestorsCommand) -> anyhow::Result<()> {
    let AttestorsCommand::List(a) = command;
    let list = Client::new(&a.conn)?
        .call(reqwest::Method::GET, "/v1/admin/attestors", None)
        .await?;
    if a.json {
        print(&list);
        return Ok(());
    }
    for a in list.as_array().into_iter().flatten() {
        let source = match a["source"]["kind"].as_str() {
            Some("file") => format!(
                "file {}",
                escape(a["source"]["path"].as_str().unwrap_or(""))
            ),
            _ => "built-in".to_owned(),
        };
        println!(
            "{:<16} {:<20} {:<48} {}",
            escape(a["id"].as_str().unwrap_or("")),
            escape(a["version"].as_str().unwrap_or("")),
            source,
            escape(a["sha256"].as_str().unwrap_or(""))
        );
    }
    Ok(())
}

/// How often `--follow` asks for new events when it has seen them all.
const FOLLOW_POLL: Duration = Duration::from_millis(500);
/// The longest `--follow` waits before asking again after a failed request.
const FOLLOW_MAX_BACKOFF: Duration = Duration::from_secs(10);

/// `gatehouse events [--follow]`: one JSON object a line, in the API's feed order (which, on
/// Postgres, is commit order rather than id order: see `Tx::event_feed`). The cursor is the
/// id of the last event printed, which is what the API continues from; it never skips an
/// event that commits late, and never prints one twice. `--follow` keeps polling until
/// interrupted (Ctrl-C or SIGTERM ends it with status 0), and rides out a host restart by
/// retrying with backoff.
pub(super) async fn events(args: EventsArgs) -> anyhow::Result<()> {
    let client = Client::new(&args.conn)?;
    let mut after = args.after;
    if !args.follow {
        loop {
            let events = events_page(&client, after).await?;
            print_events(&events, &mut after)?;
            if events.len() < client.page_size as usize {
                return Ok(());
            }
        }
    }
    tokio::select! {
        done = follow(&client, after) => done,
        () = interrupted() => Ok(()),
    }
}

/// Prints events as they are written, until stdout closes.
async fn follow(client: &Client, mut after: i64) -> anyhow::Result<()> {
    let mut backoff = FOLLOW_POLL;
    loop {
        match events_page(client, after).await {
            Ok(events) => {
                backoff = FOLLOW_POLL;
                // A closed stdout (`| head`) ends the command.
                print_events(&events, &mut after)?;
                if events.len() < client.page_size as usize {
                    tokio::time::sleep(FOLLOW_POLL).await;
                }
            }
            Err(e) => {
                eprintln!(
                    "gatehouse events: {e:#}; retrying in {:.1}s",
                    backoff.as_secs_f32()
                );
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(FOLLOW_MAX_BACKOFF);
            }
        }
    }
}

/// One page of events after the event `after`.
async fn events_page(client: &Client, after: i64) -> anyhow::Result<Vec<Value>> {
    let page = client
        .call(
            reqwest::Method::GET,
            &format!("/v1/admin/events?after={after}&limit={}", client.page_size),
            None,
        )
        .await?;
    Ok(page.as_array().cloned().unwrap_or_default())
}

/// Prints events as JSON lines and moves `after` to the last one.
fn print_events(events: &[Value], after: &mut i64) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    for e in events {
        writeln!(out, "{}", serde_json::to_string(e)?)?;
        // Feed order, not id order: the cursor is the last event's id, not the largest.
        if let Some(id) = e["id"].as_i64() {
            *after = id;
        }
    }
    out.flush()?;
    Ok(())
}

/// `gatehouse audits`: every audit record, oldest first, one JSON object a line, read a page
/// at a time.
pub(super) async fn audits(args: AuditsArgs, out: &mut (dyn Write + Send)) -> anyhow::Result<()> {
    let list = Client::new(&args.conn)?.list("/v1/admin/audits").await?;
    for a in list.as_array().into_iter().flatten() {
        writeln!(out, "{}", serde_json::to_string(a)?)?;
    }
    Ok(())
}

/// Ctrl-C, or SIGTERM on Unix.
async fn interrupted() {
    #[cfg(unix)]
    if let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        return;
    }
    let _ = tokio::signal::ctrl_c().await;
}

#[derive(Debug, Subcommand)]
pub(super) enum JoinRequestsCommand {
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
pub(super) struct JoinRequestListArgs {
    /// Which requests: pending, approved, denied, expired, used or all.
    #[arg(long, default_value = "pending", value_parser = ["pending", "approved", "denied", "expired", "used", "all"])]
    state: String,
    /// Print the API's JSON answer.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: AdminConnection,
}

#[derive(Debug, Args)]
pub(super) struct JoinRequestArgs {
    /// The join request id (`jr_...`).
    id: String,
    /// Print the API's JSON answer.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: AdminConnection,
}

#[derive(Debug, Args)]
pub(super) struct ApproveArgs {
    /// The join request id (`jr_...`).
    id: String,
    /// The tenant the machine joins.
    #[arg(long, default_value = "root")]
    tenant: String,
    /// The pool it joins (one of the tenant's).
    #[arg(long)]
    pool: Option<String>,
    /// The site it belongs to.
    #[arg(long)]
    site: Option<String>,
    /// Print the API's JSON answer.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: AdminConnection,
}

pub(super) async fn join_requests(
    command: JoinRequestsCommand,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<()> {
    match command {
        JoinRequestsCommand::List(a) => {
            let list = Client::new(&a.conn)?
                .list(&format!("/v1/admin/join-requests?state={}", a.state))
                .await?;
            if a.json {
                write_json(out, &list)?;
            } else {
                write_join_request_table(out, &list)?;
            }
        }
        JoinRequestsCommand::Show(a) => {
            let id = segment("join request id", &a.id)?;
            let request = Client::new(&a.conn)?
                .call(
                    reqwest::Method::GET,
                    &format!("/v1/admin/join-requests/{id}"),
                    None,
                )
                .await?;
            if a.json {
                write_json(out, &request)?;
            } else {
                write_join_request(out, &request)?;
            }
        }
        JoinRequestsCommand::Approve(a) => {
            let id = segment("join request id", &a.id)?;
            let body = json!({ "tenantId": a.tenant, "poolId": a.pool, "siteId": a.site });
            let decided = Client::new(&a.conn)?
                .call(
                    reqwest::Method::POST,
                    &format!("/v1/admin/join-requests/{id}/approve"),
                    Some(body),
                )
                .await?;
            if a.json {
                write_json(out, &decided)?;
            } else {
                writeln!(
                    out,
                    "approved {id} ({} {}): tenant {}, pool {}, site {}",
                    text(&decided["attestor"]),
                    text(&decided["subject"]),
                    text(&decided["tenantId"]),
                    text(&decided["poolId"]),
                    text(&decided["siteId"])
                )?;
            }
        }
        JoinRequestsCommand::Deny(a) => {
            let id = segment("join request id", &a.id)?;
            let decided = Client::new(&a.conn)?
                .call(
                    reqwest::Method::POST,
                    &format!("/v1/admin/join-requests/{id}/deny"),
                    None,
                )
                .await?;
            if a.json {
                write_json(out, &decided)?;
            } else {
                writeln!(
                    out,
                    "denied {id} ({} {})",
                    text(&decided["attestor"]),
                    text(&decided["subject"])
                )?;
            }
        }
    }
    Ok(())
}

fn write_join_request_table(out: &mut (dyn Write + Send), list: &Value) -> anyhow::Result<()> {
    writeln!(
        out,
        "{:<35} {:<14} {:<44} {:<8} {:<20} EXPIRES",
        "ID", "ATTESTOR", "SUBJECT", "STATE", "CREATED"
    )?;
    for r in list.as_array().into_iter().flatten() {
        writeln!(
            out,
            "{:<35} {:<14} {:<44} {:<8} {:<20} {}",
            text(&r["id"]),
            text(&r["attestor"]),
            text(&r["subject"]),
            text(&r["state"]),
            time(&r["createdAt"]),
            time(&r["expiresAt"])
        )?;
    }
    Ok(())
}

fn write_join_request(out: &mut (dyn Write + Send), r: &Value) -> anyhow::Result<()> {
    for (label, value) in [
        ("request", text(&r["id"]).to_owned()),
        ("attestor", text(&r["attestor"]).to_owned()),
        ("subject", text(&r["subject"]).to_owned()),
        ("state", text(&r["state"]).to_owned()),
        ("csr sha256", text(&r["csrSha256"]).to_owned()),
        ("tenant", text(&r["tenantId"]).to_owned()),
        ("pool", text(&r["poolId"]).to_owned()),
        ("site", text(&r["siteId"]).to_owned()),
        ("created", time(&r["createdAt"])),
        ("decided", time(&r["decidedAt"])),
        ("expires", time(&r["expiresAt"])),
    ] {
        writeln!(out, "{label:<11} {value}")?;
    }
    writeln!(out, "details")?;
    for line in serde_json::to_string_pretty(&r["details"])?.lines() {
        writeln!(out, "  {line}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};

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
                nodes_command(&[verb, "node_1", "--yes", "--json"])
            else {
                panic!("{verb}");
            };
            assert!(a.yes && a.json);
        }
        match nodes_command(&["revoke-cert", "node_1", "0a1b"]) {
            NodesCommand::RevokeCert(a) => {
                assert_eq!((a.id, a.serial), ("node_1".into(), "0a1b".into()))
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            nodes_command(&["cordon", "n"]),
            NodesCommand::Cordon(_)
        ));
        assert!(matches!(
            nodes_command(&["uncordon", "n"]),
            NodesCommand::Uncordon(_)
        ));
        assert!(matches!(
            nodes_command(&["show", "n"]),
            NodesCommand::Show(_)
        ));
        assert!(matches!(nodes_command(&["list"]), NodesCommand::List(_)));
        // A node id is required; revoke-cert needs a serial.
        assert!(Cli::try_parse_args(["gatehouse", "nodes", "delete"]).is_err());
        assert!(Cli::try_parse_args(["gatehouse", "nodes", "revoke-cert", "n"]).is_err());
    }

    fn shown() -> Value {
        json!({
            "id": "node_1",
            "tenantId": "root",
            "poolId": null,
            "siteId": null,
            "role": "node",
            "retired": false,
            "cordoned": true,
            "identityGeneration": 2,
            "hardwareKey": "uuid-1",
            "createdAt": 1_700_000_000_000_i64,
            "updatedAt": 1_700_000_000_000_i64,
            "deletedAt": null,
            "certificates": [
                { "serial": "0b", "generation": 2, "role": "node", "notBefore": 1, "notAfter": 2,
                  "revoked": null, "statements": [], "createdAt": 2 },
                { "serial": "0a", "generation": 1, "role": "node", "notBefore": 1, "notAfter": 2,
                  "revoked": "superseded", "statements": [], "createdAt": 1 }
            ],
            "bindings": [ { "kind": "tpm-ek-sha256", "value": "ab" } ]
        })
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
        assert_eq!(p.json["certificatesToRevoke"], json!(["0b"]));
        assert_eq!(p.json["bindingsToFree"], json!(["tpm-ek-sha256=ab"]));
        assert_eq!(p.json["dryRun"], true);

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
        assert_eq!(p.json["generation"], 3);

        let p = plan(Destructive::Retire, &shown()).unwrap();
        assert!(p.text.starts_with("would retire node node_1"), "{}", p.text);

        let mut retired = shown();
        retired["retired"] = json!(true);
        let p = plan(Destructive::Retire, &retired).unwrap();
        assert!(
            p.text.contains("is retired already: nothing would change"),
            "{}",
            p.text
        );
        assert!(plan(Destructive::RevokeIdentity, &retired).is_err());

        let mut deleted = shown();
        deleted["deletedAt"] = json!(5);
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
        write_node_table(&mut out, &json!([shown()])).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().count(), 2);
        assert!(
            text.lines().nth(1).unwrap().starts_with("node_1 "),
            "{text}"
        );
    }

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
                assert_eq!((a.state.as_str(), a.json), ("pending", false))
            }
            other => panic!("{other:?}"),
        }
        match parse(&["list", "--state", "all", "--json"]) {
            Some(JoinRequestsCommand::List(a)) => {
                assert_eq!((a.state.as_str(), a.json), ("all", true))
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
        assert!(matches!(
            parse(&["show", "jr_1"]),
            Some(JoinRequestsCommand::Show(_))
        ));
        assert!(parse(&["approve"]).is_none());
    }

    #[test]
    fn join_requests_are_readable() {
        let r = json!({
            "id": "jr_1", "attestor": "approval", "subject": "uuid:u-1",
            "details": { "productUuid": "u-1" }, "csrSha256": "ab", "state": "pending",
            "tenantId": null, "poolId": null, "siteId": null,
            "createdAt": 1_700_000_000_000_i64, "decidedAt": null, "expiresAt": 1_700_086_400_000_i64
        });
        let mut out = Vec::new();
        write_join_request(&mut out, &r).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("subject     uuid:u-1\n"), "{text}");
        assert!(text.contains("decided     -\n"), "{text}");
        assert!(text.contains("  \"productUuid\": \"u-1\""), "{text}");
        let mut out = Vec::new();
        write_join_request_table(&mut out, &json!([r])).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.lines().nth(1).unwrap().starts_with("jr_1 "), "{text}");
    }

    #[test]
    fn ids_cannot_change_the_request_path() {
        assert!(segment("node id", "node_1").is_ok());
        for bad in ["", "../tokens", "a/b", "a?b", "a b", "a#"] {
            assert!(segment("node id", bad).is_err(), "{bad:?}");
        }
    }
}

#[cfg(test)]
mod pool_tests {
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
                let ids = a.join_attestors.unwrap();
                assert_eq!(ids, ["tpm", "x509pop"]);
                assert_eq!(
                    pool_policy(Some(&ids)),
                    json!({ "joinAttestors": ["tpm", "x509pop"] })
                );
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
        assert_eq!(pool_policy(None), json!({}));
        // An update says what the policy becomes: one of the two, never neither or both.
        assert!(pools_command(&["update", "gpu"]).is_err());
        assert!(
            pools_command(&["update", "gpu", "--any-attestor", "--join-attestors", "tpm"]).is_err()
        );
        assert!(matches!(
            pools_command(&["show", "root/gpu"]).unwrap(),
            PoolsCommand::Show(_)
        ));
        assert!(matches!(
            pools_command(&["list"]).unwrap(),
            PoolsCommand::List(_)
        ));
    }

    #[test]
    fn pool_output_is_readable() {
        let list = json!([
            { "tenantId": "root", "id": "gpu", "owner": "lessee-1",
              "policy": { "joinAttestors": ["tpm", "x509pop"] } },
            { "tenantId": "root", "id": "cpu", "owner": null, "policy": {} }
        ]);
        let mut out = Vec::new();
        write_pool_table(&mut out, &list).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[1].starts_with("root") && lines[1].ends_with(" tpm,x509pop"));
        assert!(lines[2].ends_with(" any attestor"), "{text}");
    }
}
