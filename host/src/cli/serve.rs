//! `gatehouse serve`.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;

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
    let running = app::start(&config).await?;
    println!("gatehouse listening on https://{}", running.server.addr);
    shutdown_signal().await;
    tracing::info!("shutting down");
    running.shutdown().await;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
