//! The `gatehouse-agent` binary.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use gatehouse_agent::{
    JoinClient, JoinError, JoinOptions, NodeKey, TokenProducer, join, write_identity,
};
use gatehouse_proto::{Claims, JoinTrust, Role, TokenString};

/// The machine side of Gatehouse.
#[derive(Debug, Parser)]
#[command(name = "gatehouse-agent", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Joins the control plane and writes node.key, node.crt and identity.json.
    Join {
        /// The host's URL, e.g. https://gatehouse.example:8443.
        #[arg(long)]
        server: String,
        /// The join trust file (pinned TLS CA, node CA, join signing and encryption keys).
        #[arg(long)]
        ca: PathBuf,
        /// The file holding the join token.
        #[arg(long)]
        token_file: PathBuf,
        /// Where to write the identity.
        #[arg(long)]
        out: PathBuf,
        /// The role to join as.
        #[arg(long, default_value = "node", value_parser = parse_role)]
        role: Role,
        /// A MAC address to claim (repeatable).
        #[arg(long = "mac")]
        macs: Vec<String>,
        /// The product UUID to claim.
        #[arg(long)]
        product_uuid: Option<String>,
    },
}

fn parse_role(s: &str) -> Result<Role, String> {
    match s {
        "node" => Ok(Role::Node),
        "site" => Ok(Role::Site),
        other => Err(format!("a token join is as node or site, not {other}")),
    }
}

async fn run(cli: Cli) -> Result<(), anyhow::Error> {
    let Command::Join {
        server,
        ca,
        token_file,
        out,
        role,
        macs,
        product_uuid,
    } = cli.command;
    let trust: JoinTrust = serde_json::from_str(
        &std::fs::read_to_string(&ca).map_err(|e| anyhow::anyhow!("{}: {e}", ca.display()))?,
    )
    .map_err(|e| anyhow::anyhow!("{}: not a join trust file: {e}", ca.display()))?;
    let token_text = std::fs::read_to_string(&token_file)
        .map_err(|e| anyhow::anyhow!("{}: {e}", token_file.display()))?;
    let token = TokenString::parse(&token_text)
        .map_err(|e| anyhow::anyhow!("{}: {e}", token_file.display()))?;
    if out.join("identity.json").exists() {
        anyhow::bail!("{} already holds an identity", out.display());
    }
    let key = NodeKey::generate()?;
    let client = JoinClient::new(&server, &trust)?;
    let options = JoinOptions {
        claims: Claims { macs, product_uuid },
        ..JoinOptions::default()
    };
    let joined = join(
        &client,
        &trust,
        &mut TokenProducer::new(role),
        Some(&token),
        &key,
        &options,
    )
    .await?;
    let identity = write_identity(&out, &key, &joined, &trust.trust_domain)?;
    println!("joined as {}", identity.node_id);
    println!("SPIFFE ID: {}", identity.spiffe_id);
    println!("identity written to {}", out.display());
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(Cli::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if matches!(e.downcast_ref::<JoinError>(), Some(JoinError::Denied)) {
                eprintln!("gatehouse-agent: join refused: ACCESS_DENIED");
            } else {
                eprintln!("gatehouse-agent: {e:#}");
            }
            ExitCode::FAILURE
        }
    }
}
