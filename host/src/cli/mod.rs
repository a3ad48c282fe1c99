//! The `gatehouse` command line.

mod admin;
mod attestors;
mod bench;
mod pki_init;
mod pki_rotate;
mod pki_trust;
mod serve;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Gatehouse: a WebAssembly-pluggable attestation host.
#[derive(Debug, Parser)]
#[command(name = "gatehouse", version, about)]
pub struct Cli {
    /// How the log (stderr) is written: `text` for people (coloured only on a terminal) or
    /// `json`, one object a line, for a log collector.
    #[arg(long, global = true, value_enum, env = "GATEHOUSE_LOG_FORMAT", default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Lines for people; ANSI colours only when stderr is a terminal.
    Text,
    /// One JSON object a line.
    Json,
}

/// An error and its causes as one line, each cause once (see
/// [`gatehouse_agent::error_line`]): what the binary prints when a command fails.
pub fn report(error: &anyhow::Error) -> String {
    gatehouse_agent::error_line(error.as_ref())
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Runs the host.
    Serve(serve::ServeArgs),
    /// PKI bundle management.
    Pki {
        #[command(subcommand)]
        command: PkiCommand,
    },
    /// Join tokens (through the admin API).
    Token {
        #[command(subcommand)]
        command: admin::TokenCommand,
    },
    /// Nodes (through the admin API).
    Nodes {
        #[command(subcommand)]
        command: admin::NodesCommand,
    },
    /// Named admin identities: each operator's own admin key (through the admin API).
    Admins {
        #[command(subcommand)]
        command: admin::AdminsCommand,
    },
    /// Tenants (through the admin API).
    Tenants {
        #[command(subcommand)]
        command: admin::TenantsCommand,
    },
    /// Pools and their join policy (through the admin API).
    Pools {
        #[command(subcommand)]
        command: admin::PoolsCommand,
    },
    /// Join requests waiting for an operator's approval (through the admin API).
    JoinRequests {
        #[command(subcommand)]
        command: admin::JoinRequestsCommand,
    },
    /// Provisioning workflows (through the admin API).
    Workflows {
        #[command(subcommand)]
        command: admin::WorkflowsCommand,
    },
    /// Deletes expired single-use evidence records (through the admin API), in batches; the
    /// same as `prune uses`.
    PruneUses(admin::PruneUsesArgs),
    /// Deletes what is no longer needed by age: dead tokens, old events and audit records
    /// (through the admin API), in batches of short transactions.
    Prune {
        #[command(subcommand)]
        command: admin::PruneCommand,
    },
    /// Prints events, who did it included (through the admin API).
    Events(admin::EventsArgs),
    /// Lists the audit records of join rounds, filtered by node, attestor, outcome and age
    /// (through the admin API).
    Audits(admin::AuditsArgs),
    /// Attestors: list what a host runs (through the admin API); check or try a component
    /// before deploying it.
    Attestors {
        #[command(subcommand)]
        command: attestors::Command,
    },
    /// Measures joins and attestor calls; prints one JSON line. Runs `gatehouse-bench`, a
    /// binary of its own (beside this one, or on PATH), with the arguments given.
    #[command(disable_help_flag = true)]
    Bench(bench::BenchArgs),
}

#[derive(Debug, Subcommand)]
enum PkiCommand {
    /// Writes a new PKI bundle (node CA, join signing key, join encryption key, challenge key)
    /// encrypted under a secret.
    Init(pki_init::InitArgs),
    /// Writes the join trust file agents pin (`gatehouse-agent --ca`): the trust domain, the
    /// node CA, the join signing and encryption keys (the bundle's public parts) and the API's
    /// TLS CA.
    Trust(pki_trust::TrustArgs),
    /// Replaces the node CA, the join signing key, the join encryption key or the admin key,
    /// keeping the replaced one working for an overlap window (`--overlap`).
    Rotate(pki_rotate::RotateArgs),
}

/// How admin commands reach the host.
#[derive(Debug, Clone, Args)]
pub(crate) struct AdminConnection {
    /// The host's base URL (default: from --data-dir's configuration).
    #[arg(long, env = "GATEHOUSE_SERVER")]
    server: Option<String>,
    /// The TLS CA (PEM) or a join trust file (default: <data-dir>/tls/ca.pem).
    #[arg(long, env = "GATEHOUSE_CA")]
    ca: Option<PathBuf>,
    /// The admin key file (default: <data-dir>/admin.key).
    #[arg(long, env = "GATEHOUSE_ADMIN_KEY_FILE")]
    admin_key_file: Option<PathBuf>,
    /// A `serve --dev` data directory to take all three from.
    #[arg(long, env = "GATEHOUSE_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Rows a list command asks for per request (1 to 1000); it follows the host's cursor
    /// until the list ends, each page one short transaction on the host.
    #[arg(long, env = "GATEHOUSE_PAGE_SIZE", default_value_t = 1000,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    page_size: u32,
}

impl Cli {
    /// `--log-format`.
    pub fn log_format(&self) -> LogFormat {
        self.log_format
    }

    /// Parses a command line whose first item is the program name, as the binary does.
    pub fn try_parse_args<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        <Self as clap::Parser>::try_parse_from(args)
    }
}

/// A destructive command ran without `--yes`: it printed what it would do and changed
/// nothing. The binary exits 2 on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not confirmed: nothing changed (pass --yes)")]
pub struct NotConfirmed;

/// Runs the command, printing to stdout. A destructive command without `--yes` returns
/// [`NotConfirmed`] once its plan is printed; the binary exits 2 on it.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout();
    execute(cli, &mut stdout).await
}

/// Runs the command, writing its output to `out` (`serve` and `bench` print to stdout).
/// Returns [`NotConfirmed`] for a destructive command without `--yes`.
pub async fn execute(cli: Cli, out: &mut (dyn std::io::Write + Send)) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => serve::run(args).await,
        Command::Pki {
            command: PkiCommand::Init(args),
        } => pki_init::run(args),
        Command::Pki {
            command: PkiCommand::Trust(args),
        } => pki_trust::run(args, out),
        Command::Pki {
            command: PkiCommand::Rotate(args),
        } => pki_rotate::run(args, out),
        Command::Token { command } => admin::token(command, out).await,
        Command::Admins { command } => admin::admins(command, out).await,
        Command::Nodes { command } => admin::nodes(command, out).await,
        Command::Tenants { command } => admin::tenants(command, out).await,
        Command::Pools { command } => admin::pools(command, out).await,
        Command::JoinRequests { command } => admin::join_requests(command, out).await,
        Command::Workflows { command } => admin::workflows(command, out).await,
        Command::PruneUses(args) => admin::prune_uses(args, out).await,
        Command::Prune { command } => admin::prune(command, out).await,
        Command::Events(args) => admin::events(args, out).await,
        Command::Audits(args) => admin::audits(args, out).await,
        Command::Attestors { command } => attestors::run(command, out).await,
        Command::Bench(args) => Ok(bench::run(args).await?),
    }
}
