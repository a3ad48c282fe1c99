//! The `gatehouse-agent` binary: `gatehouse-agent join …`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use gatehouse_agent::{
    JOIN_TOKEN, JoinClient, JoinOptions, NodeKey, TokenProducer, ensure_no_identity, join,
    write_identity,
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
    /// Joins with a join token and writes node.key, node.crt and identity.json.
    Join(JoinArgs),
}

#[derive(Debug, clap::Args)]
struct JoinArgs {
    /// The host's URL, e.g. https://gatehouse.example:8443.
    #[arg(long)]
    server: String,
    /// The join trust file (JSON: pinned TLS CA, node CA, join signing and encryption keys).
    #[arg(long, value_name = "FILE")]
    ca: PathBuf,
    /// The file holding the join token (gh1.<id>.<secret>).
    #[arg(long, value_name = "FILE")]
    token_file: PathBuf,
    /// The directory to write the identity to; it must not hold one yet.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// The attestor that decides; it must admit on the sealed token alone.
    #[arg(long, value_name = "ID", default_value = JOIN_TOKEN)]
    attestor: String,
    /// The role to join as.
    #[arg(long, default_value = "node", value_parser = parse_role)]
    role: Role,
    /// A MAC address to claim, e.g. 52:54:00:12:34:56 (repeatable).
    #[arg(long = "mac", value_name = "MAC", value_parser = parse_mac)]
    macs: Vec<String>,
    /// The SMBIOS product UUID to claim.
    #[arg(long, value_name = "UUID", value_parser = parse_uuid)]
    product_uuid: Option<String>,
}

fn parse_role(s: &str) -> Result<Role, String> {
    match s {
        "node" => Ok(Role::Node),
        "site" => Ok(Role::Site),
        other => Err(format!("a token join is as node or site, not {other}")),
    }
}

/// Six hex octets separated by `:` or `-`, as the host expects them: lowercase with colons.
fn parse_mac(s: &str) -> Result<String, String> {
    let octets: Vec<&str> = s.split([':', '-']).collect();
    if octets.len() != 6
        || !octets
            .iter()
            .all(|o| o.len() == 2 && o.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        return Err(format!("{s} is not a MAC address like 52:54:00:12:34:56"));
    }
    Ok(octets.join(":").to_ascii_lowercase())
}

/// A UUID in its 8-4-4-4-12 hex form, lowercased.
fn parse_uuid(s: &str) -> Result<String, String> {
    let groups: Vec<&str> = s.split('-').collect();
    let lens: Vec<usize> = groups.iter().map(|g| g.len()).collect();
    if lens != [8, 4, 4, 4, 12] || !s.bytes().all(|b| b == b'-' || b.is_ascii_hexdigit()) {
        return Err(format!("{s} is not a UUID"));
    }
    Ok(s.to_ascii_lowercase())
}

/// How a run failed: the exit code tells a bad invocation from a failed join.
enum Failure {
    /// The command line or the files it names are unusable (exit 2).
    Usage(anyhow::Error),
    /// The join failed or was refused (exit 1).
    Join(anyhow::Error),
}

fn usage<E: Into<anyhow::Error>>(e: E) -> Failure {
    Failure::Usage(e.into())
}

fn read(path: &Path) -> Result<String, Failure> {
    std::fs::read_to_string(path)
        .with_context(|| path.display().to_string())
        .map_err(usage)
}

async fn run(args: JoinArgs) -> Result<(), Failure> {
    let trust: JoinTrust = serde_json::from_str(&read(&args.ca)?)
        .with_context(|| format!("{}: not a join trust file", args.ca.display()))
        .map_err(usage)?;
    let token = TokenString::parse(&read(&args.token_file)?)
        .with_context(|| args.token_file.display().to_string())
        .map_err(usage)?;
    // Before the join: a refused write must not follow a spent token.
    ensure_no_identity(&args.out).map_err(usage)?;
    let client = JoinClient::new(&args.server, &trust).map_err(usage)?;
    let key = NodeKey::generate().map_err(|e| Failure::Join(e.into()))?;
    let options = JoinOptions {
        claims: Claims {
            macs: args.macs,
            product_uuid: args.product_uuid,
        },
        ..JoinOptions::default()
    };
    let mut producer = TokenProducer::for_attestor(&args.attestor, args.role);
    let joined = join(&client, &trust, &mut producer, Some(&token), &key, &options)
        .await
        .map_err(|e| Failure::Join(e.into()))?;
    let identity = write_identity(&args.out, &key, &joined)
        .context("joined, but the identity could not be written")
        .map_err(Failure::Join)?;
    println!("node id: {}", identity.node_id);
    println!("SPIFFE ID: {}", identity.spiffe_id);
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let Command::Join(args) = Cli::parse().command;
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Join(e)) => {
            eprintln!("gatehouse-agent: {e:#}");
            ExitCode::from(1)
        }
        Err(Failure::Usage(e)) => {
            eprintln!("gatehouse-agent: {e:#}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn parses_a_join() {
        let cli = Cli::try_parse_from([
            "gatehouse-agent",
            "join",
            "--server",
            "https://h:8443",
            "--ca",
            "trust.json",
            "--token-file",
            "t",
            "--out",
            "d",
            "--role",
            "site",
            "--mac",
            "52-54-00-AB-CD-EF",
            "--mac",
            "52:54:00:00:00:01",
            "--product-uuid",
            "4C4C4544-0000-1000-8000-000000000000",
        ])
        .unwrap();
        let Command::Join(args) = cli.command;
        assert_eq!(args.attestor, "join-token");
        assert_eq!(args.role, Role::Site);
        assert_eq!(args.macs, ["52:54:00:ab:cd:ef", "52:54:00:00:00:01"]);
        assert_eq!(
            args.product_uuid.as_deref(),
            Some("4c4c4544-0000-1000-8000-000000000000")
        );
    }

    #[test]
    fn usage_errors() {
        let base = [
            "gatehouse-agent",
            "join",
            "--server",
            "https://h",
            "--ca",
            "c",
            "--out",
            "d",
        ];
        let err = Cli::try_parse_from(base).unwrap_err();
        assert_eq!(err.exit_code(), 2, "missing --token-file");
        for (flag, value) in [
            ("--role", "ramdisk"),
            ("--mac", "52:54:00"),
            ("--product-uuid", "x"),
        ] {
            let args = base
                .iter()
                .copied()
                .chain(["--token-file", "t", flag, value]);
            let err = Cli::try_parse_from(args).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{flag} {value}");
        }
        assert_eq!(
            parse_mac("zz:54:00:00:00:01").unwrap_err(),
            "zz:54:00:00:00:01 is not a MAC address like 52:54:00:12:34:56"
        );
        assert!(parse_uuid("4c4c4544-0000-1000-8000-00000000000g").is_err());
    }
}
