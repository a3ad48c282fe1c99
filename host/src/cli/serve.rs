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
    /// With --dev: the listen address, on every run (default: the dev configuration's,
    /// 127.0.0.1:8443 when it is first written).
    #[arg(long, requires = "dev")]
    listen: Option<String>,
}

/// The address `serve --dev` writes into a new dev configuration without `--listen`.
const DEV_LISTEN: &str = "127.0.0.1:8443";

pub(super) async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let (config, source) = load(args)?;
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
                tracing::info!(config = %source.path.display(), "SIGHUP: reloading the configuration");
                match source.read() {
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

/// Where the served configuration comes from, read at start and again on SIGHUP.
struct ConfigSource {
    path: PathBuf,
    /// `--dev --listen`: wins over the file's address on every read.
    listen: Option<String>,
}

impl ConfigSource {
    fn read(&self) -> anyhow::Result<Config> {
        let mut config = Config::load(&self.path)?;
        // The configuration file of an existing dev directory names the address of its first
        // run; --listen given now wins.
        if let Some(listen) = &self.listen {
            config.listen = listen.clone();
        }
        Ok(config)
    }
}

/// The configuration to serve: the file `--config` names, or with `--dev` the data
/// directory's (made first where missing), listening on `--listen` when given.
fn load(args: ServeArgs) -> anyhow::Result<(Config, ConfigSource)> {
    let config_path = match (args.config, args.data_dir) {
        (Some(path), _) => path,
        (None, Some(dir)) => {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            let dir = dir
                .canonicalize()
                .with_context(|| format!("resolving {}", dir.display()))?;
            let files = app::dev::prepare(&dir, args.listen.as_deref().unwrap_or(DEV_LISTEN))?;
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
    let source = ConfigSource {
        path: config_path,
        listen: args.listen,
    };
    Ok((source.read()?, source))
}

fn signal(kind: SignalKind) -> anyhow::Result<tokio::signal::unix::Signal> {
    tokio::signal::unix::signal(kind).context("installing a signal handler")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn dev(dir: &std::path::Path, listen: Option<&str>) -> ServeArgs {
        ServeArgs {
            config: None,
            dev: true,
            data_dir: Some(dir.to_owned()),
            listen: listen.map(str::to_owned),
        }
    }

    #[test]
    fn dev_honours_listen_on_every_run() {
        let dir = tempfile::tempdir().unwrap();
        let first = load(dev(dir.path(), Some("127.0.0.1:18443"))).unwrap().0;
        assert_eq!(first.listen, "127.0.0.1:18443");
        // The directory exists now; a later --listen still wins over the file.
        let second = load(dev(dir.path(), Some("127.0.0.1:28443"))).unwrap().0;
        assert_eq!(second.listen, "127.0.0.1:28443");
        // Without --listen, the file's (written by the first run).
        let third = load(dev(dir.path(), None)).unwrap().0;
        assert_eq!(third.listen, "127.0.0.1:18443");
        // A fresh directory without --listen gets the default.
        let other = tempfile::tempdir().unwrap();
        assert_eq!(load(dev(other.path(), None)).unwrap().0.listen, DEV_LISTEN);
    }
}
