//! `gatehouse serve`.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;
use tokio::signal::unix::SignalKind;

use crate::app;
use crate::config::Config;

#[derive(Debug, Args)]
pub(super) struct ServeArgs {
    /// The configuration file.
    #[arg(long, required_unless_present = "dev", conflicts_with = "dev")]
    config: Option<PathBuf>,
    /// Create whatever is missing (PKI, SQLite, admin key, TLS) under --data-dir and serve it.
    #[arg(long, requires = "data_dir")]
    dev: bool,
    /// With --dev: where to keep everything.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// With --dev: the listen address.
    #[arg(long, default_value = "127.0.0.1:8443")]
    listen: String,
}

pub(super) async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let config_path = match (args.config, args.data_dir) {
        (Some(path), _) => path,
        (None, Some(dir)) => {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            let dir = dir
                .canonicalize()
                .with_context(|| format!("resolving {}", dir.display()))?;
            let files = app::dev::prepare(&dir, &args.listen)?;
            for path in &files.created {
                println!("created {}", path.display());
            }
            println!("configuration: {}", files.config.display());
            println!("join trust (agents' --ca): {}", files.join_trust.display());
            println!("admin key: {}", files.admin_key.display());
            println!("database: {}", dir.join("gatehouse.db").display());
            files.config
        }
        (None, None) => anyhow::bail!("--config or --dev --data-dir is required"),
    };
    let config = Config::load(&config_path)?;
    // Before the host starts: a SIGHUP during start-up must not kill it either.
    let mut hangup = signal(SignalKind::hangup())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut running = app::start(&config).await?;
    println!("gatehouse listening on https://{}", running.server.addr);
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
            _ = hangup.recv() => {
                tracing::info!(config = %config_path.display(), "SIGHUP: reloading the configuration");
                match Config::load(&config_path) {
                    Ok(config) => {
                        running.reload(config).await;
                    }
                    Err(e) => tracing::error!(error = %e, "SIGHUP: the configuration does not load; nothing changed"),
                }
            }
        }
    }
    tracing::info!("shutting down");
    running.shutdown().await;
    Ok(())
}

fn signal(kind: SignalKind) -> anyhow::Result<tokio::signal::unix::Signal> {
    tokio::signal::unix::signal(kind).context("installing a signal handler")
}
