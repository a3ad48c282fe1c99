//! Assembling a running host from its configuration: the one path `gatehouse serve`, the
//! tests and the benchmark all start a host by.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::api::{self, AppState, ServerHandle};
use crate::config::Config;
use crate::join::JoinService;
use crate::join::sink::{RefusalSink, SinkError, SinkWorker};
use crate::pki::{LivePki, Pki};
use crate::runtime::Runtime;
use crate::store::Db;

mod admin_keys;
pub mod fetch;
mod reload;
pub use admin_keys::{AdminKeys, previous_file_text, previous_path};
pub use reload::AttestorWatch;

include!(concat!(env!("OUT_DIR"), "/builtin_attestors.rs"));

/// The built-in attestor components embedded in this binary: `(crate name, wasm bytes)`.
pub fn builtin_attestors() -> &'static [(&'static str, &'static [u8])] {
    BUILTIN_ATTESTORS
}

/// Why the host could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// A file the configuration names could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What the filesystem said.
        source: std::io::Error,
    },
    /// No secret for the PKI bundle.
    #[error("no PKI secret: set GATEHOUSE_SECRET or secret_file")]
    NoSecret,
    /// The PKI bundle does not load.
    #[error("PKI bundle {path}: {source}")]
    Pki {
        /// The bundle.
        path: PathBuf,
        /// Why.
        source: crate::pki::PkiError,
    },
    /// The database is unusable.
    #[error("database: {0}")]
    Store(#[from] crate::store::StoreError),
    /// The attestors do not load.
    #[error("attestors: {0}")]
    Runtime(#[from] crate::runtime::RuntimeError),
    /// The TLS files do not load.
    #[error("TLS: {0}")]
    Tls(String),
    /// The refusal sink cannot be set up (`[audit.sink]`).
    #[error("audit sink: {0}")]
    Sink(#[from] SinkError),
    /// The admin key is too short to resist guessing (an empty file would let
    /// `Authorization: Bearer ` with nothing after it through).
    #[error(
        "admin key {path} has {len} bytes; it needs at least {MIN_ADMIN_KEY_BYTES} (`serve --dev` writes one)"
    )]
    WeakAdminKey {
        /// The key file.
        path: PathBuf,
        /// Its length after trimming whitespace.
        len: usize,
    },
    /// The data directory or a file in it cannot be made private to the host's user.
    #[error("data directory {path}: {source}")]
    DataDir {
        /// The directory or file.
        path: PathBuf,
        /// What the filesystem said.
        source: std::io::Error,
    },
    /// Another host holds this data directory's SQLite database.
    #[error("data directory {0} is in use by another gatehouse host (its lock is held)")]
    Locked(PathBuf),
    /// A fetched configuration value has neither a kept copy nor an answer
    /// (`[attestors.<id>.fetch]`), or its client cannot be set up.
    #[error("fetched configuration: {0}")]
    Fetch(String),
    /// The listen address cannot be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
}

/// Fewest bytes an admin key may have (after trimming surrounding whitespace): 32 random
/// bytes' worth of characters, so the key cannot be guessed or be empty.
pub const MIN_ADMIN_KEY_BYTES: usize = 32;

/// The SHA-256 of the admin key in `path` (trimmed), which the API compares in constant time;
/// refuses a key shorter than [`MIN_ADMIN_KEY_BYTES`].
pub fn load_admin_key(path: &Path) -> Result<[u8; 32], StartError> {
    let bytes = read(path)?;
    let key = bytes.trim_ascii();
    if key.len() < MIN_ADMIN_KEY_BYTES {
        return Err(StartError::WeakAdminKey {
            path: path.to_owned(),
            len: key.len(),
        });
    }
    Ok(Sha256::digest(key).into())
}

fn read(path: &Path) -> Result<Vec<u8>, StartError> {
    std::fs::read(path).map_err(|source| StartError::Read {
        path: path.to_owned(),
        source,
    })
}

/// The bundle's secret: GATEHOUSE_SECRET, else the secret file.
pub fn load_secret(config: &Config) -> Result<Vec<u8>, StartError> {
    if let Ok(secret) = std::env::var("GATEHOUSE_SECRET")
        && !secret.is_empty()
    {
        return Ok(secret.into_bytes());
    }
    let path = config
        .secret_file
        .as_deref()
        .map(|p| config.path(p))
        .ok_or(StartError::NoSecret)?;
    let mut secret = read(&path)?;
    while secret.last().is_some_and(|b| b.is_ascii_whitespace()) {
        secret.pop();
    }
    Ok(secret)
}

/// A running host.
pub struct Running {
    /// The API server.
    pub server: ServerHandle,
    /// The database (tests inspect it).
    pub db: Db,
    /// The host's PKI, replaced on SIGHUP by a rotation of its bundle.
    pub pki: LivePki,
    /// JoinService.
    pub join: Arc<JoinService>,
    /// The refusal sink's delivery task, when `[audit.sink]` is configured.
    pub sink: Option<SinkWorker>,
    /// The plain-HTTP metrics listener, when `[observability] metrics_listen` is configured.
    pub observability: Option<ObservabilityServer>,
    /// The task that settles superseded certificates.
    sweeper: tokio::task::JoinHandle<()>,
    /// Reloads the attestors (on a change in `attestors_dir`, and on SIGHUP).
    pub attestors: Arc<AttestorWatch>,
    /// The API's TLS certificate, replaced on SIGHUP.
    tls: Arc<api::TlsCertificate>,
    /// The admin keys, read again on SIGHUP (a rotation's new key).
    admin_keys: Arc<AdminKeys>,
    /// The configuration the host started with: what differs from it in a reloaded file and
    /// cannot be applied is reported as needing a restart.
    started: Config,
    /// The poll of `attestors_dir`, stopped on shutdown.
    watcher: Option<tokio::task::JoinHandle<()>>,
    /// The refreshes of fetched configuration values, stopped on shutdown.
    refreshers: Vec<tokio::task::JoinHandle<()>>,
    /// The data directory's lock, held while the host runs on SQLite.
    _lock: Option<std::fs::File>,
}

/// What a reload (SIGHUP) did.
#[derive(Debug, Default)]
pub struct Reloaded {
    /// What changed among the attestors.
    pub attestors: crate::runtime::Reload,
    /// Whether the refusal sink was replaced (or removed).
    pub sink_replaced: bool,
    /// Whether the TLS certificate was loaded again.
    pub tls_reloaded: bool,
    /// Whether the log level was set.
    pub log_level_set: bool,
    /// Whether the admin keys were read again.
    pub admin_keys_reloaded: bool,
    /// The rotation count of the PKI bundle put in place, when the file held a later
    /// rotation (`gatehouse pki rotate`) than the one loaded.
    pub pki_rotated: Option<u64>,
    /// What could not be applied, and why.
    pub errors: Vec<String>,
    /// Settings that changed but take effect only after a restart.
    pub needs_restart: Vec<String>,
}

/// How long [`Running::shutdown`] lets the refusal sink deliver what is still queued.
pub const SINK_DRAIN_DEADLINE: Duration = Duration::from_secs(5);

impl Running {
    /// Stops the API (open connections finish their requests), lets the refusal sink deliver
    /// what is queued for at most [`SINK_DRAIN_DEADLINE`], and closes the database.
    pub async fn shutdown(self) {
        if let Some(watcher) = &self.watcher {
            watcher.abort();
        }
        for refresher in &self.refreshers {
            refresher.abort();
        }
        self.server.shutdown().await;
        if let Some(observability) = self.observability {
            observability.shutdown().await;
        }
        self.sweeper.abort();
        if let Some(sink) = self.sink {
            sink.shutdown(SINK_DRAIN_DEADLINE).await;
        }
        self.db.close().await;
    }
}

impl Running {
    /// Applies a configuration read again (SIGHUP): the attestors and their settings, the
    /// refusal sink, the TLS certificate (read again even when its paths are unchanged, so a
    /// renewed certificate is picked up), the admin keys (a `pki rotate admin-key`) and the
    /// log level. Every other setting that differs
    /// from what the host started with is logged, and reported, as needing a restart. What
    /// fails to apply leaves the current one in place and is logged.
    pub async fn reload(&mut self, config: Config) -> Reloaded {
        let mut done = Reloaded {
            attestors: self.attestors.reload_with(config.runtime()).await,
            ..Reloaded::default()
        };
        done.needs_restart
            .append(&mut done.attestors.needs_restart.clone());

        // Started again whenever one is configured, so a SIGHUP also reopens a rotated JSONL
        // file; the old worker delivers what it has queued first.
        if config.audit.sink.is_some() || self.sink.is_some() {
            match config
                .audit_sink()
                .map(|c| RefusalSink::start(&c))
                .transpose()
            {
                Ok(started) => {
                    let (sink, worker) = started.unzip();
                    self.join.set_sink(sink);
                    if let Some(old) = std::mem::replace(&mut self.sink, worker) {
                        old.shutdown(SINK_DRAIN_DEADLINE).await;
                    }
                    done.sink_replaced = true;
                }
                Err(e) => done.errors.push(format!("audit sink: {e}")),
            }
        }

        match (
            read(&config.path(&config.tls.cert)),
            read(&config.path(&config.tls.key)),
        ) {
            (Ok(cert), Ok(key)) => match self.tls.replace(&cert, &key) {
                Ok(()) => done.tls_reloaded = true,
                Err(e) => done.errors.push(format!("TLS: {e}")),
            },
            (Err(e), _) | (_, Err(e)) => done.errors.push(format!("TLS: {e}")),
        }

        // From the file the host started with: a new `admin_key_file` path needs a restart.
        match self
            .admin_keys
            .reload(&self.started.path(&self.started.admin_key_file))
        {
            Ok(()) => done.admin_keys_reloaded = true,
            Err(e) => done.errors.push(format!("admin key: {e}")),
        }

        // From the file the host started with, as the admin keys: a new path needs a restart.
        match self.reload_pki() {
            Ok(rotated) => done.pki_rotated = rotated,
            Err(e) => done.errors.push(format!("pki_bundle: {e}")),
        }

        if let Some(level) = &config.log_level {
            match crate::logging::set_filter(level) {
                Ok(()) => done.log_level_set = true,
                Err(e) => done.errors.push(format!("log_level: {e}")),
            }
        }

        let started = &self.started;
        for (changed, what) in [
            (config.listen != started.listen, "listen"),
            (config.database_url != started.database_url, "database_url"),
            (
                config.database_connections != started.database_connections,
                "database_connections",
            ),
            (config.data_dir != started.data_dir, "data_dir"),
            (config.pki_bundle != started.pki_bundle, "pki_bundle"),
            (config.secret_file != started.secret_file, "secret_file"),
            (
                config.admin_key_file != started.admin_key_file,
                "admin_key_file",
            ),
            (
                config.join.cert_ttl_seconds != started.join.cert_ttl_seconds,
                "join.cert_ttl_seconds",
            ),
            (
                config.reclaim_grants() != started.reclaim_grants(),
                "attestors.<id>.reclaim",
            ),
            (
                format!("{:?}", config.limits) != format!("{:?}", started.limits),
                "[limits]",
            ),
            (
                config.runtime.attestors_poll_ms != started.runtime.attestors_poll_ms,
                "runtime.attestors_poll_ms",
            ),
            (
                config
                    .attestors
                    .iter()
                    .map(|(id, s)| (id, &s.fetch))
                    .filter(|(_, f)| !f.is_empty())
                    .collect::<Vec<_>>()
                    != started
                        .attestors
                        .iter()
                        .map(|(id, s)| (id, &s.fetch))
                        .filter(|(_, f)| !f.is_empty())
                        .collect::<Vec<_>>(),
                "attestors.<id>.fetch",
            ),
        ] {
            if changed {
                done.needs_restart.push(what.to_owned());
            }
        }
        for what in &done.needs_restart {
            tracing::warn!(setting = %what, "changed in the configuration; takes effect only after a restart");
        }
        for error in &done.errors {
            tracing::error!(%error, "not reloaded; the current setting stays");
        }
        tracing::info!(
            attestor_changes = done.attestors.changes.len(),
            sink_replaced = done.sink_replaced,
            tls_reloaded = done.tls_reloaded,
            log_level_set = done.log_level_set,
            admin_keys_reloaded = done.admin_keys_reloaded,
            pki_rotated = ?done.pki_rotated,
            "configuration reloaded"
        );
        done
    }

    /// Reads the PKI bundle again and puts it in place if it is a later rotation of the one
    /// loaded: its rotation count then.
    fn reload_pki(&self) -> Result<Option<u64>, String> {
        let next = load_pki(&self.started).map_err(|e| e.to_string())?;
        let rotated = self.pki.replace(next).map_err(|e| e.to_string())?;
        if let Some(sequence) = rotated {
            tracing::info!(rotation = sequence, "rotated PKI bundle in place");
        }
        Ok(rotated)
    }
}

/// The PKI bundle `config` names, opened with its secret (at start, and again on SIGHUP).
fn load_pki(config: &Config) -> Result<Pki, StartError> {
    let secret = load_secret(config)?;
    let path = config.path(&config.pki_bundle);
    let bundle = String::from_utf8_lossy(&read(&path)?).into_owned();
    Pki::from_bundle(&bundle, &secret).map_err(|source| StartError::Pki { path, source })
}

/// Starts a host: database (migrated), PKI, attestors, API.
pub async fn start(config: &Config) -> Result<Running, StartError> {
    let database_url = config.database_url()?;
    let sqlite = crate::store::Backend::from_url(&database_url)? == crate::store::Backend::Sqlite;
    let lock = data_dir::secure(&config.data_dir, sqlite)?;
    let pki = LivePki::new(load_pki(config)?);
    let admin_keys = Arc::new(AdminKeys::load(&config.path(&config.admin_key_file))?);

    let db = Db::connect_with(&database_url, config.database_connections()).await?;
    db.migrate().await?;
    if let Some(level) = &config.log_level
        && let Err(e) = crate::logging::set_filter(level)
    {
        tracing::warn!(error = %e, "log_level not applied");
    }
    let fetches = fetch::Fetch::all(config).map_err(|e| StartError::Fetch(e.to_string()))?;
    let fetched = Arc::new(
        fetch::Fetched::prime(&fetches)
            .await
            .map_err(StartError::Fetch)?,
    );
    let mut runtime_config = config.runtime();
    fetched.apply(&mut runtime_config);
    let runtime = Arc::new(Runtime::load(&runtime_config, builtin_attestors()).await?);
    let mut join = JoinService::new(db.clone(), runtime, pki.clone(), config.join_settings());
    let mut sink = None;
    if let Some(sink_config) = config.audit_sink() {
        let (refusals, worker) = RefusalSink::start(&sink_config)?;
        join = join.with_sink(refusals);
        sink = Some(worker);
    }
    let join = Arc::new(join);

    let tls_cert = read(&config.path(&config.tls.cert))?;
    let (tls, tls_certificate) = api::tls_config(
        &tls_cert,
        &read(&config.path(&config.tls.key))?,
        pki.get().node_ca_der(),
    )
    .map_err(|e| StartError::Tls(e.to_string()))?;
    let tls_ca_pem = tls_ca_pem(config, &tls_cert)?;
    let published = Arc::new(api::publish::Published::new(
        tls_ca_pem,
        Duration::from_secs(u64::from(config.trust.refresh_seconds)),
    ));
    let listener = tokio::net::TcpListener::bind(&config.listen)
        .await
        .map_err(|source| StartError::Listen {
            addr: config.listen.clone(),
            source,
        })?;
    let limits = config.limits.limits();
    let router = api::router(
        AppState {
            join: join.clone(),
            db: db.clone(),
            admin_keys: admin_keys.clone(),
            pki: pki.clone(),
            published,
        },
        &limits,
    );
    let server =
        api::serve(listener, tls, router, limits).map_err(|source| StartError::Listen {
            addr: config.listen.clone(),
            source,
        })?;
    let observability = match &config.observability.metrics_listen {
        Some(addr) => Some(
            ObservabilityServer::start(
                addr,
                api::publish::observability_router(db.clone(), join.clone()),
            )
            .await?,
        ),
        None => None,
    };
    let sweeper = tokio::spawn(sweep_superseded(db.clone()));
    tracing::info!(addr = %server.addr, trust_domain = %pki.get().trust_domain(), "gatehouse serving");
    let attestors = AttestorWatch::new(join.clone(), db.clone(), config.runtime(), fetched.clone());
    let refreshers = fetch::refresh(fetches, fetched, attestors.clone(), db.clone());
    let watcher = (config.runtime.attestors_poll_ms > 0).then(|| {
        tokio::spawn(
            attestors
                .clone()
                .watch(Duration::from_millis(config.runtime.attestors_poll_ms)),
        )
    });
    Ok(Running {
        server,
        db,
        pki,
        join,
        sink,
        observability,
        sweeper,
        attestors,
        tls: tls_certificate,
        admin_keys,
        started: config.clone(),
        watcher,
        refreshers,
        _lock: lock,
    })
}

/// How often the host turns certificates whose supersession grace is over into revoked rows.
/// The CRL and renewals look at the grace themselves; this keeps the rows (what `nodes show`
/// and attestors read) in step within this long.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(30);

/// Settles superseded certificates every [`SWEEP_INTERVAL`]; a failure is logged and retried
/// at the next tick (every replica runs it; the update is idempotent).
async fn sweep_superseded(db: Db) {
    // The first sweep one interval after the start, not during it.
    let mut tick =
        tokio::time::interval_at(tokio::time::Instant::now() + SWEEP_INTERVAL, SWEEP_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let settled = async {
            let mut tx = db.begin().await?;
            let n = tx.settle_superseded(None).await?;
            tx.commit().await?;
            Ok::<u64, crate::store::StoreError>(n)
        }
        .await;
        match settled {
            Ok(0) => {}
            Ok(n) => tracing::debug!(certificates = n, "superseded certificates revoked"),
            Err(e) => tracing::warn!(error = %e, "could not settle superseded certificates"),
        }
    }
}

/// The API's TLS CA that agents pin: `[tls] ca`, else the last certificate of `[tls] cert`.
fn tls_ca_pem(config: &Config, cert_chain_pem: &[u8]) -> Result<String, StartError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject as _;
    if let Some(ca) = &config.tls.ca {
        let text = String::from_utf8(read(&config.path(ca))?)
            .map_err(|_| StartError::Tls(format!("{} is not PEM text", ca.display())))?;
        let certs = CertificateDer::pem_slice_iter(text.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| StartError::Tls(format!("{}: {e}", ca.display())))?;
        if certs.is_empty() {
            return Err(StartError::Tls(format!(
                "{} holds no certificate",
                ca.display()
            )));
        }
        return Ok(text);
    }
    let last = CertificateDer::pem_slice_iter(cert_chain_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| StartError::Tls(format!("TLS certificate chain: {e}")))?
        .pop()
        .ok_or_else(|| StartError::Tls("the TLS certificate file holds no certificate".into()))?;
    Ok(crate::pki::pem_block("CERTIFICATE", &last))
}

/// The plain-HTTP listener of `[observability] metrics_listen`.
pub struct ObservabilityServer {
    /// The address it listens on.
    pub addr: std::net::SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl ObservabilityServer {
    async fn start(addr: &str, router: axum::Router) -> Result<Self, StartError> {
        let listen_err = |source| StartError::Listen {
            addr: addr.to_owned(),
            source,
        };
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(listen_err)?;
        let local = listener.local_addr().map_err(listen_err)?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let served = axum::serve(listener, router)
                .with_graceful_shutdown(async move {
                    let _ = stopped.await;
                })
                .await;
            if let Err(e) = served {
                tracing::error!(error = %e, "the metrics listener failed");
            }
        });
        tracing::info!(addr = %local, "serving /metrics, /healthz and /readyz over plain HTTP");
        Ok(Self {
            addr: local,
            stop,
            task,
        })
    }

    async fn shutdown(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

/// The data directory: private to the host's user, and held by one host at a time.
pub mod data_dir {
    use std::fs;
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    use std::path::Path;

    use super::StartError;

    /// The lock file a host on SQLite holds for as long as it runs.
    pub const LOCK_FILE: &str = "gatehouse.lock";
    /// The SQLite database file and the files SQLite keeps beside it.
    const SQLITE_FILES: [&str; 3] = ["gatehouse.db", "gatehouse.db-wal", "gatehouse.db-shm"];
    /// How deep [`secure`] looks for files to make private (`tls/`, `attestors/`, `cache/`).
    const DEPTH: usize = 3;

    /// Creates `dir` if missing; makes it 0700 and every file under it 0600 (directories
    /// 0700), logging what it had to tighten; creates the SQLite database 0600 if it is
    /// missing, so that SQLite creates its WAL and shared-memory files 0600 too (it gives them
    /// the database's mode); and, on SQLite, takes the directory's lock, refusing to start
    /// when another host holds it.
    pub fn secure(dir: &Path, sqlite: bool) -> Result<Option<fs::File>, StartError> {
        let err = |path: &Path| {
            let path = path.to_owned();
            move |source| StartError::DataDir { path, source }
        };
        fs::create_dir_all(dir).map_err(err(dir))?;
        tighten(dir, DEPTH)?;
        if !sqlite {
            return Ok(None);
        }
        let lock_path = dir.join(LOCK_FILE);
        let lock = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&lock_path)
            .map_err(err(&lock_path))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => return Err(StartError::Locked(dir.to_owned())),
            Err(fs::TryLockError::Error(e)) => return Err(err(&lock_path)(e)),
        }
        let db = dir.join(SQLITE_FILES[0]);
        fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&db)
            .map_err(err(&db))?;
        for name in SQLITE_FILES {
            let path = dir.join(name);
            if path.exists() {
                private(&path, 0o600)?;
            }
        }
        Ok(Some(lock))
    }

    /// Makes `dir` 0700 and what is under it private, `depth` levels down.
    fn tighten(dir: &Path, depth: usize) -> Result<(), StartError> {
        private(dir, 0o700)?;
        if depth == 0 {
            return Ok(());
        }
        let entries = fs::read_dir(dir).map_err(|source| StartError::DataDir {
            path: dir.to_owned(),
            source,
        })?;
        for entry in entries.flatten() {
            let path = entry.path();
            // Never follow a symbolic link out of the directory.
            match entry.file_type() {
                Ok(t) if t.is_dir() => tighten(&path, depth - 1)?,
                Ok(t) if t.is_file() => private(&path, 0o600)?,
                _ => {}
            }
        }
        Ok(())
    }

    /// Sets `path`'s mode to `mode` when it grants anything to group or others.
    fn private(path: &Path, mode: u32) -> Result<(), StartError> {
        let err = |source| StartError::DataDir {
            path: path.to_owned(),
            source,
        };
        let meta = fs::metadata(path).map_err(err)?;
        let current = meta.permissions().mode() & 0o777;
        if current & 0o077 != 0 {
            tracing::warn!(path = %path.display(), mode = format!("{current:o}"), "made private to the host's user");
            fs::set_permissions(
                path,
                fs::Permissions::from_mode(current & 0o700 | mode & 0o700),
            )
            .map_err(err)?;
        }
        Ok(())
    }
}

/// `serve --dev`: creates whatever is missing under a data directory.
pub mod dev {
    use std::fs;
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    use std::path::{Path, PathBuf};

    use crate::pki::{Pki, dev_tls};

    /// The dev trust domain.
    pub const TRUST_DOMAIN: &str = "gatehouse.dev";

    /// What `prepare` made or found.
    #[derive(Debug)]
    pub struct DevFiles {
        /// The configuration file it wrote.
        pub config: PathBuf,
        /// The join trust file agents pin (`gatehouse-agent join --ca`).
        pub join_trust: PathBuf,
        /// The admin key file.
        pub admin_key: PathBuf,
        /// Files created this time (empty when everything existed).
        pub created: Vec<PathBuf>,
    }

    /// Why the dev files could not be made.
    #[derive(Debug, thiserror::Error)]
    #[non_exhaustive]
    pub enum DevError {
        /// The filesystem refused.
        #[error("{path}: {source}")]
        Io {
            /// Which file.
            path: PathBuf,
            /// Why.
            source: std::io::Error,
        },
        /// Key generation or a bundle failed.
        #[error("{0}")]
        Pki(#[from] crate::pki::PkiError),
    }

    fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), DevError> {
        let io = |source| DevError::Io {
            path: path.to_owned(),
            source,
        };
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(path)
            .map_err(io)?;
        f.write_all(bytes).map_err(io)
    }

    /// Creates under `dir` whatever is missing (secret, PKI bundle, admin key, TLS material,
    /// configuration, join trust file) and leaves what exists alone.
    pub fn prepare(dir: &Path, listen: &str) -> Result<DevFiles, DevError> {
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| DevError::Io { path, source }
        };
        fs::create_dir_all(dir.join("tls")).map_err(io(dir))?;
        fs::create_dir_all(dir.join("attestors")).map_err(io(dir))?;
        let mut created = Vec::new();
        let secret_path = dir.join("secret");
        if !secret_path.exists() {
            let secret: [u8; 32] = rand::random();
            write_new(
                &secret_path,
                gatehouse_proto::b64::encode(secret).as_bytes(),
                0o600,
            )?;
            created.push(secret_path.clone());
        }
        let secret = fs::read_to_string(&secret_path).map_err(io(&secret_path))?;
        let secret = secret.trim().as_bytes();

        let bundle_path = dir.join("pki.json");
        if !bundle_path.exists() {
            let pki = Pki::generate(TRUST_DOMAIN)?;
            write_new(&bundle_path, pki.to_bundle(secret)?.as_bytes(), 0o600)?;
            created.push(bundle_path.clone());
        }
        let admin_key = dir.join("admin.key");
        if !admin_key.exists() {
            let key: [u8; 32] = rand::random();
            write_new(
                &admin_key,
                gatehouse_proto::b64::encode(key).as_bytes(),
                0o600,
            )?;
            created.push(admin_key.clone());
        }
        let (ca, cert, key) = (
            dir.join("tls/ca.pem"),
            dir.join("tls/server.pem"),
            dir.join("tls/server.key"),
        );
        if !cert.exists() || !key.exists() || !ca.exists() {
            let tls = dev_tls(&["localhost".to_owned(), "127.0.0.1".to_owned()])?;
            for (path, text, mode) in [
                (&ca, &tls.ca_pem, 0o600),
                (&cert, &tls.cert_pem, 0o600),
                (&key, &tls.key_pem, 0o600),
            ] {
                let _ = fs::remove_file(path);
                write_new(path, text.as_bytes(), mode)?;
                created.push(path.clone());
            }
        }
        // Where a third-party attestor is dropped (`<data dir>/attestors/<any name>.wasm`): the
        // dev host loads what is there when it starts.
        let attestors = dir.join("attestors");
        fs::create_dir_all(&attestors).map_err(io(&attestors))?;
        let config = dir.join("gatehouse.toml");
        if !config.exists() {
            let text = format!(
                "# Written by `gatehouse serve --dev`.\ndata_dir = {dir:?}\nlisten = {listen:?}\npki_bundle = \"pki.json\"\nsecret_file = \"secret\"\nadmin_key_file = \"admin.key\"\n\n[tls]\ncert = \"tls/server.pem\"\nkey = \"tls/server.key\"\n# The CA agents pin for TLS, published in /v1/trust.\nca = \"tls/ca.pem\"\n\n# Drop .wasm attestors here: added, replaced and removed files are picked up while serving.\n[runtime]\nattestors_dir = \"attestors\"\n",
                dir = dir.display().to_string(),
            );
            write_new(&config, text.as_bytes(), 0o600)?;
            created.push(config.clone());
        }
        let join_trust = dir.join("join-trust.json");
        if created.iter().any(|p| p == &bundle_path || p == &ca) || !join_trust.exists() {
            let bundle = fs::read_to_string(&bundle_path).map_err(io(&bundle_path))?;
            let pki = Pki::from_bundle(&bundle, secret)?;
            let tls_ca = fs::read_to_string(&ca).map_err(io(&ca))?;
            let text =
                serde_json::to_string_pretty(&pki.join_trust(&tls_ca, crate::wall_clock::now_ms()))
                    .unwrap_or_default();
            let _ = fs::remove_file(&join_trust);
            write_new(&join_trust, text.as_bytes(), 0o600)?;
            created.push(join_trust.clone());
        }
        Ok(DevFiles {
            config,
            join_trust,
            admin_key,
            created,
        })
    }
}
