//! The host's configuration file (TOML).
//!
//! ```toml
//! data_dir = "/var/lib/gatehouse"
//! listen = "0.0.0.0:8443"
//! # database_url = "postgres://gatehouse@db/gatehouse"   # default: SQLite under data_dir
//! # database_connections = 10      # PostgreSQL only: the write pool, per replica
//! pki_bundle = "pki.json"          # relative paths are under data_dir
//! secret_file = "secret"           # or GATEHOUSE_SECRET
//! admin_key_file = "admin.key"
//! # log_level = "info,gatehouse=debug"   # tracing filter; GATEHOUSE_LOG wins when set
//!
//! [tls]
//! cert = "tls/server.pem"
//! key = "tls/server.key"
//!
//! [runtime]
//! call_timeout_ms = 250
//! memory_limit_mib = 64
//! max_calls_per_attestor = 4       # past it a join waits (2 s at most), then attestor-busy
//! attestors_dir = "attestors"
//! attestors_poll_ms = 1000         # look for added/replaced/removed files; 0: only on SIGHUP
//!
//! [attestors.join-token]
//! sha256 = "…"                     # optional pin
//! # reclaim = true                 # may re-key nodes without a token (see JoinService)
//! [attestors.join-token.config]    # handed to the attestor as JSON
//!
//! [attestors.cloud-iid.fetch."providers.gcp.jwks"]   # a value the host keeps fresh
//! url = "https://www.googleapis.com/oauth2/v3/certs"
//! every_seconds = 3600             # fetched at start, then this often, never during a join
//! # ca_file = "internal-ca.pem"   # trust only this CA; format = "text" for PEM
//!
//! [attestors.join-token-next]      # a candidate run beside join-token, never acting
//! shadow_of = "join-token"
//! file = "join-token-2.wasm"       # under attestors_dir; not loaded as a live attestor
//!
//! [limits]                         # what one client may hold (defaults shown)
//! max_connections = 1024
//! max_connections_per_source = 64  # an IPv6 /64 counts as one source
//! handshake_timeout_ms = 10000
//! header_timeout_ms = 10000
//! request_timeout_ms = 30000
//! idle_timeout_ms = 60000
//! max_body_bytes = 262144
//! shutdown_grace_ms = 10000
//! join_rate_per_second = 20        # per source address; 0: unlimited
//! join_burst = 100
//! node_issue_interval_seconds = 30 # least time between two certificates of one node
//!
//! [join]
//! cert_ttl_seconds = 86400
//! renewal_grace_seconds = 900      # the certificates a renewal replaced stay live this long
//!
//! [trust]
//! refresh_seconds = 600            # CRL nextUpdate, SPIFFE bundle refresh hint
//!
//! [observability]
//! # metrics_listen = "127.0.0.1:9090"   # plain HTTP: /metrics, /healthz, /readyz
//!
//! [audit.sink]                     # optional: a copy of every refusal (see join::sink)
//! kind = "webhook"                 # POST one JSON object per refusal
//! url = "https://hooks.example.com/gatehouse"
//! timeout_ms = 2000
//! # ca_file = "hooks-ca.pem"       # trust only this CA
//! # or: kind = "jsonl", path = "refusals.jsonl"
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::join::sink::SinkConfig;
use crate::runtime::{AttestorSettings, RuntimeConfig};

/// Why the configuration could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What the filesystem said.
        source: std::io::Error,
    },
    /// The file is not valid TOML of the expected shape.
    #[error("{path}: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong, with its location.
        source: toml::de::Error,
    },
    /// A value is out of range.
    #[error("{0}")]
    Invalid(String),
}

/// The configuration as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where the host keeps its files; relative paths below are under it.
    pub data_dir: PathBuf,
    /// The API's listen address.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// The database; SQLite at `<data_dir>/gatehouse.db` when absent.
    #[serde(default)]
    pub database_url: Option<String>,
    /// PostgreSQL's write pool, connections per replica (1 to 100; 10 when absent). Not for
    /// SQLite, which has one writer.
    #[serde(default)]
    pub database_connections: Option<u32>,
    /// The PKI bundle `gatehouse pki init` wrote.
    #[serde(default = "default_bundle")]
    pub pki_bundle: PathBuf,
    /// The file holding the bundle's secret (GATEHOUSE_SECRET takes precedence).
    #[serde(default)]
    pub secret_file: Option<PathBuf>,
    /// The file holding the bootstrap admin key: the admin API's bearer for the identity
    /// `admin` (named identities, `gatehouse admins add`, are in the database).
    #[serde(default = "default_admin_key")]
    pub admin_key_file: PathBuf,
    /// The API's TLS certificate and key.
    pub tls: TlsConfig,
    /// The log filter (`info`, `warn,gatehouse=debug`, …), applied at start and on SIGHUP
    /// unless the `GATEHOUSE_LOG` environment variable set one.
    #[serde(default)]
    pub log_level: Option<String>,
    /// Attestor runtime limits.
    #[serde(default)]
    pub runtime: RuntimeSection,
    /// Join policy.
    #[serde(default)]
    pub join: JoinSection,
    /// Per-attestor settings by id.
    #[serde(default)]
    pub attestors: BTreeMap<String, AttestorSection>,
    /// The audit trail's settings.
    #[serde(default)]
    pub audit: AuditSection,
    /// Connection limits, timeouts and rates.
    #[serde(default)]
    pub limits: LimitsSection,
    /// What the host publishes for relying parties: the CRL and the SPIFFE bundle.
    #[serde(default)]
    pub trust: TrustSection,
    /// Health, readiness and metrics.
    #[serde(default)]
    pub observability: ObservabilitySection,
}

/// `[trust]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrustSection {
    /// How often relying parties should fetch the CRL and the SPIFFE bundle again, in seconds:
    /// the CRL's nextUpdate is this long after its thisUpdate, and the bundle's
    /// `spiffe_refresh_hint`. 60 to 604800.
    pub refresh_seconds: u32,
}

impl Default for TrustSection {
    fn default() -> Self {
        Self {
            refresh_seconds: 600,
        }
    }
}

/// `[observability]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ObservabilitySection {
    /// A second, plain-HTTP listener serving only `/metrics`, `/healthz` and `/readyz`, without
    /// the admin key (for a scraper on a private network or loopback). Without it `/metrics`
    /// is served on the API's address and needs the admin key.
    pub metrics_listen: Option<String>,
}

/// `[limits]`: see [`crate::api::Limits`] for what each bounds.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsSection {
    /// Connections open at once.
    pub max_connections: usize,
    /// Connections open at once from one source address.
    pub max_connections_per_source: usize,
    /// The TLS handshake's deadline, in ms.
    pub handshake_timeout_ms: u64,
    /// An HTTP/1 request head's deadline, in ms.
    pub header_timeout_ms: u64,
    /// A request's deadline (body and handler), in ms.
    pub request_timeout_ms: u64,
    /// A connection with no request in flight this long is closed, in ms.
    pub idle_timeout_ms: u64,
    /// Largest request body, in bytes.
    pub max_body_bytes: usize,
    /// How long shutdown waits for in-flight requests, in ms.
    pub shutdown_grace_ms: u64,
    /// Join rounds per second per source address (0: unlimited).
    pub join_rate_per_second: f64,
    /// The most join rounds a quiet source may send at once.
    pub join_burst: u32,
    /// The least time between two certificates issued to one node, in seconds (0: no limit):
    /// a renewal (or a re-join of the node) sooner is refused `rate-limited`, 429.
    pub node_issue_interval_seconds: u32,
}

impl Default for LimitsSection {
    fn default() -> Self {
        let d = crate::api::Limits::default();
        let rate = d.join_rate.unwrap_or(crate::api::limits::Rate {
            per_second: 0.0,
            burst: 0,
        });
        Self {
            max_connections: d.max_connections,
            max_connections_per_source: d.max_connections_per_source,
            handshake_timeout_ms: millis(d.handshake_timeout),
            header_timeout_ms: millis(d.header_timeout),
            request_timeout_ms: millis(d.request_timeout),
            idle_timeout_ms: millis(d.idle_timeout),
            max_body_bytes: d.max_body,
            shutdown_grace_ms: millis(d.shutdown_grace),
            join_rate_per_second: rate.per_second,
            join_burst: rate.burst,
            node_issue_interval_seconds: u32::try_from(
                crate::join::DEFAULT_NODE_ISSUE_INTERVAL_MS / 1000,
            )
            .unwrap_or(30),
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl LimitsSection {
    fn validate(&self) -> Result<(), ConfigError> {
        let bad = |what: &str| Err(ConfigError::Invalid(format!("limits.{what}")));
        if !(1..=1_000_000).contains(&self.max_connections) {
            return bad("max_connections must be 1 to 1000000");
        }
        if !(1..=self.max_connections).contains(&self.max_connections_per_source) {
            return bad("max_connections_per_source must be 1 to max_connections");
        }
        for (name, ms) in [
            ("handshake_timeout_ms", self.handshake_timeout_ms),
            ("header_timeout_ms", self.header_timeout_ms),
            ("request_timeout_ms", self.request_timeout_ms),
            ("idle_timeout_ms", self.idle_timeout_ms),
            ("shutdown_grace_ms", self.shutdown_grace_ms),
        ] {
            if !(1..=3_600_000).contains(&ms) {
                return bad(&format!("{name} must be 1 to 3600000"));
            }
        }
        if !(1024..=64 << 20).contains(&self.max_body_bytes) {
            return bad("max_body_bytes must be 1024 to 67108864");
        }
        if !(self.join_rate_per_second.is_finite()
            && (0.0..=1e6).contains(&self.join_rate_per_second))
        {
            return bad("join_rate_per_second must be 0 to 1000000");
        }
        if self.join_rate_per_second > 0.0 && self.join_burst == 0 {
            return bad("join_burst must be at least 1");
        }
        if self.node_issue_interval_seconds > 86_400 {
            return bad("node_issue_interval_seconds must be 0 to 86400");
        }
        Ok(())
    }

    /// The server's limits.
    pub fn limits(&self) -> crate::api::Limits {
        crate::api::Limits {
            max_connections: self.max_connections,
            max_connections_per_source: self.max_connections_per_source,
            handshake_timeout: Duration::from_millis(self.handshake_timeout_ms),
            header_timeout: Duration::from_millis(self.header_timeout_ms),
            request_timeout: Duration::from_millis(self.request_timeout_ms),
            idle_timeout: Duration::from_millis(self.idle_timeout_ms),
            max_body: self.max_body_bytes,
            shutdown_grace: Duration::from_millis(self.shutdown_grace_ms),
            join_rate: (self.join_rate_per_second > 0.0).then_some(crate::api::limits::Rate {
                per_second: self.join_rate_per_second,
                burst: self.join_burst,
            }),
        }
    }
}

/// `[audit]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditSection {
    /// Where refusals are copied to, besides the database.
    #[serde(default)]
    pub sink: Option<SinkSection>,
}

/// `[audit.sink]`: `kind = "webhook"` or `kind = "jsonl"`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum SinkSection {
    /// POST each refusal as JSON.
    Webhook {
        /// `https://…`, or `http://` to a loopback address.
        url: String,
        /// Limit of one delivery, in ms (1 to 60000; default 2000).
        #[serde(default = "default_sink_timeout_ms")]
        timeout_ms: u64,
        /// A PEM file of the only CAs to trust (default: the system's CA bundle).
        #[serde(default)]
        ca_file: Option<PathBuf>,
    },
    /// Append each refusal as one JSON line.
    Jsonl {
        /// The file (created with mode 0600).
        path: PathBuf,
    },
}

fn default_sink_timeout_ms() -> u64 {
    2000
}

/// `[tls]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM certificate chain, leaf first.
    pub cert: PathBuf,
    /// PEM private key.
    pub key: PathBuf,
    /// PEM: the CA certificate(s) agents pin for the API's TLS (`tlsCaPem` of the join trust
    /// that `GET /v1/trust` serves and `gatehouse pki trust` writes). Default: the last
    /// certificate of `cert`, which is the issuing CA when `cert` holds the whole chain.
    #[serde(default)]
    pub ca: Option<PathBuf>,
}

/// `[runtime]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RuntimeSection {
    /// Guest execution deadline per call, in ms.
    pub call_timeout_ms: u64,
    /// Linear memory cap per instance, in MiB.
    pub memory_limit_mib: usize,
    /// Attestor calls at once.
    pub max_concurrent_calls: u32,
    /// Calls of one attestor at once; a join past it waits at most 2 s (behind at most 64
    /// others) for a call to end, then is refused `attestor-busy`.
    pub max_calls_per_attestor: u32,
    /// `.wasm` attestors to add or replace built-ins with.
    pub attestors_dir: Option<PathBuf>,
    /// Compiled-component cache (default `<data_dir>/cache`).
    pub cache_dir: Option<PathBuf>,
    /// How often the host looks at `attestors_dir` for added, replaced and removed files, in
    /// ms (0: only on SIGHUP).
    pub attestors_poll_ms: u64,
}

impl Default for RuntimeSection {
    fn default() -> Self {
        Self {
            call_timeout_ms: 250,
            memory_limit_mib: 64,
            max_concurrent_calls: 64,
            max_calls_per_attestor: crate::runtime::DEFAULT_CALLS_PER_ATTESTOR,
            attestors_dir: None,
            cache_dir: None,
            attestors_poll_ms: 1000,
        }
    }
}

/// `[join]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JoinSection {
    /// Lifetime of node and site certificates, in seconds (at most 24 h).
    pub cert_ttl_seconds: u32,
    /// How long the certificates a renewal replaced stay live after it, in seconds (0 to
    /// 3600): a connection authenticated with the old one is not cut at once.
    pub renewal_grace_seconds: u32,
}

impl Default for JoinSection {
    fn default() -> Self {
        Self {
            cert_ttl_seconds: 24 * 3600,
            renewal_grace_seconds: u32::try_from(crate::join::DEFAULT_RENEWAL_GRACE_MS / 1000)
                .unwrap_or(900),
        }
    }
}

/// `[attestors.<id>]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttestorSection {
    /// Load only a component with this SHA-256.
    #[serde(default)]
    pub sha256: Option<String>,
    /// The attestor's own configuration.
    #[serde(default)]
    pub config: Option<toml::Table>,
    /// Whether a join through this attestor may re-key an existing node without a token that
    /// allows it and without owning one of the node's bindings. The built-ins x509pop,
    /// provisioned and tpm have it unless this says `false`; any other attestor (a dropped-in
    /// component, or a file replacing a built-in) only when this says `true`.
    #[serde(default)]
    pub reclaim: Option<bool>,
    /// Run this attestor as a shadow beside the live attestor named here: on the same
    /// requests, with its writes never applied, its verdict recorded in the audit and never
    /// acted on. A join request cannot name a shadow.
    #[serde(default)]
    pub shadow_of: Option<String>,
    /// A shadow's component file (relative: under `attestors_dir`), loaded under this id
    /// whatever id it describes itself by, and not as a live attestor.
    #[serde(default)]
    pub file: Option<PathBuf>,
    /// Configuration keys whose value is read from files when the host starts: each key
    /// names a file (the value is a one-string array of its text) or a directory (one string
    /// per file in it, by name, dot files skipped), e.g. `ekRoots = "/etc/gatehouse/tpm-roots"`
    /// for a vendor trust bundle. A key may not also be in `config`.
    #[serde(default)]
    pub files: BTreeMap<String, PathBuf>,
    /// Configuration values the host fetches and keeps fresh, by the dotted path of the key
    /// each fills in `config` (e.g. `"providers.gcp.jwks"` = Google's JWKS): fetched at start
    /// and then every `every_seconds`, never during a join (see `app::fetch`). A key may not
    /// also be in `config` or `files`.
    #[serde(default)]
    pub fetch: BTreeMap<String, FetchSource>,
}

/// `[attestors.<id>.fetch."<dotted.key>"]`: where a configuration value comes from.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FetchSource {
    /// `https://` (or `http://` to a loopback address); redirects are not followed.
    pub url: String,
    /// How often to fetch again, in seconds (1 to 86400).
    #[serde(default = "default_fetch_every")]
    pub every_seconds: u64,
    /// Trust only this CA file's certificates (PEM) instead of the system's bundle.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// What the body is: JSON (the value is the parsed document) or text (a string).
    #[serde(default)]
    pub format: FetchFormat,
}

/// How a fetched body becomes a configuration value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FetchFormat {
    /// A JSON document, inserted as JSON (a JWKS).
    #[default]
    Json,
    /// UTF-8 text, inserted as one string (PEM certificates).
    Text,
}

fn default_fetch_every() -> u64 {
    3600
}

/// Most fetched values one attestor may have.
const MAX_FETCHES: usize = 16;

/// The segments of a fetched value's dotted key (`providers.gcp.jwks`): 1 to 8 segments of
/// ASCII letters, digits, `-` and `_`.
pub fn fetch_key_path(key: &str) -> Option<Vec<&str>> {
    let parts: Vec<&str> = key.split('.').collect();
    let valid = |p: &&str| {
        !p.is_empty()
            && p.len() <= 64
            && p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    (parts.len() <= 8 && parts.iter().all(valid)).then_some(parts)
}

/// Whether `table` leaves room for a value at `path`: every table on the way is a table or
/// absent, and the key itself is absent.
fn fetch_key_free(table: Option<&toml::Table>, path: &[&str]) -> bool {
    let Some(table) = table else { return true };
    match path {
        [] => true,
        [last] => !table.contains_key(*last),
        [first, rest @ ..] => match table.get(*first) {
            None => true,
            Some(toml::Value::Table(inner)) => fetch_key_free(Some(inner), rest),
            Some(_) => false,
        },
    }
}

impl Config {
    /// The operator's reclaim grants (`[attestors.<id>] reclaim`), by attestor id.
    pub fn reclaim_grants(&self) -> BTreeMap<String, bool> {
        self.attestors
            .iter()
            .filter_map(|(id, section)| section.reclaim.map(|r| (id.clone(), r)))
            .collect()
    }
}

/// Most files one `[attestors.<id>.files]` directory may hold.
const MAX_CONFIG_FILES: usize = 4096;
/// Most bytes all of one attestor's `files` may hold.
const MAX_CONFIG_FILE_BYTES: u64 = 64 << 20;

/// The text of `path` (a file: one string; a directory: one per file, sorted by name), with
/// `budget` bytes left of [`MAX_CONFIG_FILE_BYTES`].
fn read_config_values(path: &Path, budget: &mut u64) -> Result<Vec<String>, String> {
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    let files = if meta.is_dir() {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(path).map_err(|e| e.to_string())? {
            let entry = entry.map_err(|e| e.to_string())?;
            let hidden = entry.file_name().to_string_lossy().starts_with('.');
            if !hidden && entry.file_type().map_err(|e| e.to_string())?.is_file() {
                files.push(entry.path());
            }
            if files.len() > MAX_CONFIG_FILES {
                return Err(format!("more than {MAX_CONFIG_FILES} files"));
            }
        }
        files.sort();
        files
    } else {
        vec![path.to_owned()]
    };
    files
        .iter()
        .map(|file| {
            let len = std::fs::metadata(file).map_err(|e| e.to_string())?.len();
            *budget = budget
                .checked_sub(len)
                .ok_or_else(|| format!("more than {MAX_CONFIG_FILE_BYTES} bytes in all"))?;
            let bytes = std::fs::read(file).map_err(|e| format!("{}: {e}", file.display()))?;
            String::from_utf8(bytes).map_err(|_| {
                format!(
                    "{}: not UTF-8 text (convert DER with `openssl x509 -inform DER`)",
                    file.display()
                )
            })
        })
        .collect()
}

fn default_listen() -> String {
    "127.0.0.1:8443".into()
}
fn default_bundle() -> PathBuf {
    "pki.json".into()
}
fn default_admin_key() -> PathBuf {
    "admin.key".into()
}

impl Config {
    /// Reads and checks a configuration file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let mut config: Config = toml::from_str(&text).map_err(|source| ConfigError::Parse {
            path: path.to_owned(),
            source,
        })?;
        config.validate()?;
        config.read_files()?;
        config.check_fetch_keys()?;
        Ok(config)
    }

    /// Reads every `[attestors.<id>.files]` entry into that attestor's configuration.
    fn read_files(&mut self) -> Result<(), ConfigError> {
        let data_dir = self.data_dir.clone();
        for (id, section) in &mut self.attestors {
            let mut budget = MAX_CONFIG_FILE_BYTES;
            for (key, path) in std::mem::take(&mut section.files) {
                let path = if path.is_absolute() {
                    path
                } else {
                    data_dir.join(path)
                };
                let invalid = |why: String| {
                    ConfigError::Invalid(format!(
                        "attestors.{id}.files.{key} ({}): {why}",
                        path.display()
                    ))
                };
                let values = read_config_values(&path, &mut budget).map_err(invalid)?;
                let table = section.config.get_or_insert_with(toml::Table::new);
                if table.contains_key(&key) {
                    return Err(invalid(format!(
                        "{key} is also set in attestors.{id}.config"
                    )));
                }
                let values = values.into_iter().map(toml::Value::String).collect();
                table.insert(key, toml::Value::Array(values));
            }
        }
        Ok(())
    }

    /// Every fetched key names a place in its attestor's configuration that nothing else
    /// fills (checked after `files` are read in).
    fn check_fetch_keys(&self) -> Result<(), ConfigError> {
        for (id, section) in &self.attestors {
            for key in section.fetch.keys() {
                let path = fetch_key_path(key).unwrap_or_default();
                if !fetch_key_free(section.config.as_ref(), &path) {
                    return Err(ConfigError::Invalid(format!(
                        "attestors.{id}.fetch.\"{key}\": the key is already set in attestors.{id}.config (or files), or a value on its path is not a table"
                    )));
                }
            }
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), ConfigError> {
        self.limits.validate()?;
        if let Some(n) = self.database_connections {
            let max = crate::store::MAX_POSTGRES_CONNECTIONS;
            if !(1..=max).contains(&n) {
                return Err(ConfigError::Invalid(format!(
                    "database_connections must be 1 to {max}"
                )));
            }
            let sqlite = self.database_url.as_deref().is_none_or(|url| {
                crate::store::Backend::from_url(url).ok() == Some(crate::store::Backend::Sqlite)
            });
            if sqlite {
                return Err(ConfigError::Invalid(
                    "database_connections sizes a PostgreSQL write pool; SQLite has one writer (set database_url to a postgres:// URL, or remove it)".into(),
                ));
            }
        }
        let r = &self.runtime;
        if !(1..=60_000).contains(&r.call_timeout_ms) {
            return Err(ConfigError::Invalid(
                "runtime.call_timeout_ms must be 1 to 60000".into(),
            ));
        }
        if !(1..=4096).contains(&r.memory_limit_mib) {
            return Err(ConfigError::Invalid(
                "runtime.memory_limit_mib must be 1 to 4096".into(),
            ));
        }
        if !(1..=4096).contains(&r.max_concurrent_calls) {
            return Err(ConfigError::Invalid(
                "runtime.max_concurrent_calls must be 1 to 4096".into(),
            ));
        }
        if !(1..=r.max_concurrent_calls).contains(&r.max_calls_per_attestor) {
            return Err(ConfigError::Invalid(
                "runtime.max_calls_per_attestor must be 1 to runtime.max_concurrent_calls".into(),
            ));
        }
        if !(60..=24 * 3600).contains(&self.join.cert_ttl_seconds) {
            return Err(ConfigError::Invalid(
                "join.cert_ttl_seconds must be 60 to 86400".into(),
            ));
        }
        if self.join.renewal_grace_seconds > 3600 {
            return Err(ConfigError::Invalid(
                "join.renewal_grace_seconds must be 0 to 3600".into(),
            ));
        }
        if !(60..=7 * 86_400).contains(&self.trust.refresh_seconds) {
            return Err(ConfigError::Invalid(
                "trust.refresh_seconds must be 60 to 604800".into(),
            ));
        }
        if let Some(SinkSection::Webhook { timeout_ms, .. }) = &self.audit.sink
            && !(1..=60_000).contains(timeout_ms)
        {
            return Err(ConfigError::Invalid(
                "audit.sink.timeout_ms must be 1 to 60000".into(),
            ));
        }
        if self.runtime.attestors_poll_ms != 0
            && !(100..=3_600_000).contains(&self.runtime.attestors_poll_ms)
        {
            return Err(ConfigError::Invalid(
                "runtime.attestors_poll_ms must be 0 (only on SIGHUP) or 100 to 3600000".into(),
            ));
        }
        for (id, section) in &self.attestors {
            if section.file.is_some() && section.shadow_of.is_none() {
                return Err(ConfigError::Invalid(format!(
                    "attestors.{id}.file is only for a shadow (set attestors.{id}.shadow_of)"
                )));
            }
            if let Some(of) = &section.shadow_of {
                let shadowed = self.attestors.get(of);
                if of == id
                    || !crate::join::request::valid_attestor_id(of)
                    || shadowed.is_some_and(|s| s.shadow_of.is_some())
                {
                    return Err(ConfigError::Invalid(format!(
                        "attestors.{id}.shadow_of must name another, live attestor"
                    )));
                }
            }
            if !section.fetch.is_empty() && !crate::join::request::valid_attestor_id(id) {
                return Err(ConfigError::Invalid(format!(
                    "attestors.{id}.fetch: {id:?} is not an attestor id (its copies are kept under data_dir/fetched/<id>)"
                )));
            }
            if section.fetch.len() > MAX_FETCHES {
                return Err(ConfigError::Invalid(format!(
                    "attestors.{id}.fetch: at most {MAX_FETCHES} values"
                )));
            }
            for (key, source) in &section.fetch {
                let invalid = |why: String| {
                    ConfigError::Invalid(format!("attestors.{id}.fetch.\"{key}\": {why}"))
                };
                if fetch_key_path(key).is_none() {
                    return Err(invalid(
                        "the key is 1 to 8 dot-separated names of letters, digits, - and _".into(),
                    ));
                }
                crate::outbound::check_url(&source.url).map_err(|e| invalid(e.to_string()))?;
                if !(1..=86_400).contains(&source.every_seconds) {
                    return Err(invalid("every_seconds must be 1 to 86400".into()));
                }
            }
            if let Some(pin) = &section.sha256
                && (pin.len() != 64 || !pin.bytes().all(|b| b.is_ascii_hexdigit()))
            {
                return Err(ConfigError::Invalid(format!(
                    "attestors.{id}.sha256 is not 64 hex digits"
                )));
            }
        }
        Ok(())
    }

    /// A path from the file, resolved under `data_dir` when relative.
    pub fn path(&self, p: &Path) -> PathBuf {
        if p.is_absolute() {
            p.to_owned()
        } else {
            self.data_dir.join(p)
        }
    }

    /// The database URL: the configured one, or SQLite under `data_dir`.
    pub fn database_url(&self) -> Result<String, crate::store::StoreError> {
        match &self.database_url {
            Some(url) => Ok(url.clone()),
            None => crate::store::sqlite_url(&self.data_dir.join("gatehouse.db")),
        }
    }

    /// PostgreSQL's write pool per replica: `database_connections`, or the store's default.
    pub fn database_connections(&self) -> u32 {
        self.database_connections
            .unwrap_or(crate::store::DEFAULT_POSTGRES_CONNECTIONS)
    }

    /// JoinService's settings.
    pub fn join_settings(&self) -> crate::join::JoinSettings {
        crate::join::JoinSettings {
            cert_ttl_seconds: self.join.cert_ttl_seconds,
            reclaim_grants: self.reclaim_grants(),
            renewal_grace_ms: i64::from(self.join.renewal_grace_seconds) * 1000,
            node_issue_interval_ms: i64::from(self.limits.node_issue_interval_seconds) * 1000,
        }
    }

    /// The refusal sink's settings, paths resolved, if one is configured.
    pub fn audit_sink(&self) -> Option<SinkConfig> {
        Some(match self.audit.sink.as_ref()? {
            SinkSection::Webhook {
                url,
                timeout_ms,
                ca_file,
            } => SinkConfig::Webhook {
                url: url.clone(),
                timeout: Duration::from_millis(*timeout_ms),
                ca_file: ca_file.as_deref().map(|p| self.path(p)),
            },
            SinkSection::Jsonl { path } => SinkConfig::Jsonl {
                path: self.path(path),
            },
        })
    }

    /// The runtime's settings.
    pub fn runtime(&self) -> RuntimeConfig {
        let r = &self.runtime;
        RuntimeConfig {
            call_timeout: Duration::from_millis(r.call_timeout_ms),
            memory_limit: r.memory_limit_mib << 20,
            max_concurrent_calls: r.max_concurrent_calls,
            max_calls_per_attestor: r.max_calls_per_attestor,
            cache_dir: Some(self.path(r.cache_dir.as_deref().unwrap_or(Path::new("cache")))),
            attestors_dir: r.attestors_dir.as_deref().map(|d| self.path(d)),
            attestors: self
                .attestors
                .iter()
                .map(|(id, s)| {
                    let config = match &s.config {
                        Some(table) => {
                            serde_json::to_value(table).unwrap_or(serde_json::Value::Null)
                        }
                        None => serde_json::Value::Null,
                    };
                    (
                        id.clone(),
                        AttestorSettings {
                            sha256: s.sha256.clone(),
                            config,
                            shadow_of: s.shadow_of.clone(),
                            file: s.file.as_deref().map(|f| match &r.attestors_dir {
                                Some(dir) if f.is_relative() => self.path(dir).join(f),
                                _ => self.path(f),
                            }),
                        },
                    )
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, String> {
        let c: Config = toml::from_str(text).map_err(|e| e.to_string())?;
        c.validate().map_err(|e| e.to_string())?;
        Ok(c)
    }

    const BASE: &str = "data_dir = \"/d\"\n[tls]\ncert = \"c.pem\"\nkey = \"/k.pem\"\n";

    #[test]
    fn fetched_values_are_checked_when_the_file_loads() {
        let fetch = |extra: &str| {
            parse(&format!(
                "{BASE}[attestors.cloud-iid.fetch.\"providers.gcp.jwks\"]\n{extra}"
            ))
        };
        let c = fetch("url = \"https://www.googleapis.com/oauth2/v3/certs\"\n").unwrap();
        let source = &c.attestors["cloud-iid"].fetch["providers.gcp.jwks"];
        assert_eq!(source.every_seconds, 3600);
        assert_eq!(source.format, FetchFormat::Json);
        assert!(fetch("url = \"http://127.0.0.1:9/jwks\"\nformat = \"text\"\n").is_ok());
        for (extra, why) in [
            ("url = \"http://keys.example.com/\"\n", "loopback"),
            ("url = \"https://k/\"\nevery_seconds = 0\n", "every_seconds"),
            (
                "url = \"https://k/\"\nevery_seconds = 86401\n",
                "every_seconds",
            ),
            ("url = \"https://k/\"\nformat = \"xml\"\n", "format"),
            ("url = \"https://k/\"\nheaders = 1\n", "headers"),
        ] {
            let e = fetch(extra).unwrap_err();
            assert!(e.contains(why), "{extra}: {e}");
        }
        for key in ["", "a..b", "a.b c", "../x", "a.b.c.d.e.f.g.h.i"] {
            let e = parse(&format!(
                "{BASE}[attestors.x.fetch.\"{key}\"]\nurl = \"https://k/\"\n"
            ))
            .unwrap_err();
            assert!(e.contains("dot-separated"), "{key:?}: {e}");
        }
    }

    #[test]
    fn a_fetched_key_may_not_be_set_another_way() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.toml");
        let load = |attestor: &str| {
            let text = format!(
                "data_dir = \"{}\"\n[tls]\ncert = \"c.pem\"\nkey = \"k.pem\"\n{attestor}[attestors.a.fetch.\"providers.gcp.jwks\"]\nurl = \"https://k/\"\n",
                dir.path().display()
            );
            std::fs::write(&path, text).unwrap();
            Config::load(&path).map_err(|e| e.to_string())
        };
        assert!(load("").is_ok());
        assert!(load("[attestors.a.config.providers.gcp]\naudience = \"x\"\n").is_ok());
        for clash in [
            "[attestors.a.config.providers.gcp]\njwks = \"{}\"\n",
            "[attestors.a.config]\nproviders = \"not a table\"\n",
            "[attestors.a.config.providers]\ngcp = 1\n",
        ] {
            let e = load(clash).unwrap_err();
            assert!(e.contains("already set"), "{clash}: {e}");
        }
        std::fs::write(dir.path().join("jwks.json"), "{}").unwrap();
        let e = load("[attestors.a.files]\nproviders = \"jwks.json\"\n").unwrap_err();
        assert!(e.contains("already set"), "{e}");
    }

    /// The production example the README points at loads, with the settings it documents.
    #[test]
    fn the_packaged_example_configuration_loads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/gatehouse.toml");
        let c = Config::load(&path).unwrap();
        assert_eq!(
            c.observability.metrics_listen.as_deref(),
            Some("127.0.0.1:9090")
        );
        assert_eq!(
            c.tls.ca.as_deref(),
            Some(Path::new("/etc/gatehouse/tls/ca.pem"))
        );
        let settings = c.join_settings();
        assert_eq!(settings.renewal_grace_ms, 900_000);
        assert_eq!(settings.node_issue_interval_ms, 30_000);
        assert_eq!(c.trust.refresh_seconds, 600);
    }

    #[test]
    fn renewal_and_trust_settings_are_bounded() {
        let with = |extra: &str| parse(&format!("{BASE}{extra}"));
        assert!(with("[join]\nrenewal_grace_seconds = 3601\n").is_err());
        assert!(with("[limits]\nnode_issue_interval_seconds = 86401\n").is_err());
        assert!(with("[trust]\nrefresh_seconds = 59\n").is_err());
        let c = with("[limits]\nnode_issue_interval_seconds = 0\n").unwrap();
        assert_eq!(c.join_settings().node_issue_interval_ms, 0);
        // The defaults.
        let c = parse(BASE).unwrap();
        assert_eq!(
            c.join_settings().node_issue_interval_ms,
            crate::join::DEFAULT_NODE_ISSUE_INTERVAL_MS
        );
        assert_eq!(c.trust.refresh_seconds, 600);
        assert!(c.observability.metrics_listen.is_none());
    }

    #[test]
    fn defaults_and_paths() {
        let c = parse(BASE).unwrap();
        assert_eq!(c.listen, "127.0.0.1:8443");
        assert_eq!(c.path(&c.tls.cert), PathBuf::from("/d/c.pem"));
        assert_eq!(c.path(&c.tls.key), PathBuf::from("/k.pem"));
        assert_eq!(c.database_url().unwrap(), "sqlite:/d/gatehouse.db?mode=rwc");
        let c =
            parse("data_dir = \"/d?x%y\"\n[tls]\ncert = \"c.pem\"\nkey = \"/k.pem\"\n").unwrap();
        assert_eq!(
            c.database_url().unwrap(),
            "sqlite:/d%3Fx%25y/gatehouse.db?mode=rwc"
        );
        let r = c.runtime();
        assert_eq!(r.call_timeout, Duration::from_millis(250));
        assert_eq!(r.memory_limit, 64 << 20);
    }

    /// The write pool's size is PostgreSQL's alone and bounded; absent, the store's default.
    #[test]
    fn database_connections_are_for_postgres_and_bounded() {
        let with = |top: &str| parse(&format!("{top}\n{BASE}"));
        let pg = "database_url = \"postgres://gatehouse@db/gatehouse\"";
        assert_eq!(
            with(pg).unwrap().database_connections(),
            crate::store::DEFAULT_POSTGRES_CONNECTIONS
        );
        let c = with(&format!("{pg}\ndatabase_connections = 4")).unwrap();
        assert_eq!(c.database_connections(), 4);
        for n in [0, 101] {
            let refused = with(&format!("{pg}\ndatabase_connections = {n}")).unwrap_err();
            assert!(
                refused.contains("database_connections must be 1 to 100"),
                "{refused}"
            );
        }
        // SQLite, named or by default, has one writer: a pool size there is a mistake.
        for top in [
            "database_connections = 4".to_owned(),
            "database_url = \"sqlite:/d/g.db?mode=rwc\"\ndatabase_connections = 4".to_owned(),
        ] {
            let refused = with(&top).unwrap_err();
            assert!(refused.contains("SQLite has one writer"), "{refused}");
        }
    }

    #[test]
    fn attestor_config_becomes_json() {
        let c = parse(&format!("{BASE}[attestors.x509pop.config]\ngraceMs = 5\n")).unwrap();
        assert_eq!(c.runtime().attestors["x509pop"].config["graceMs"], 5);
    }

    #[test]
    fn refuses_bad_values() {
        assert!(
            parse(&format!("{BASE}[runtime]\ncall_timeout_ms = 0\n"))
                .unwrap_err()
                .contains("call_timeout_ms")
        );
        assert!(
            parse(&format!("{BASE}[attestors.a]\nsha256 = \"xyz\"\n"))
                .unwrap_err()
                .contains("64 hex")
        );
        assert!(parse(&format!("{BASE}bogus = 1\n")).is_err());
    }

    #[test]
    fn shadows_and_the_poll() {
        let c = parse(&format!(
            "{BASE}[runtime]\nattestors_dir = \"a\"\n[attestors.next]\nshadow_of = \"join-token\"\nfile = \"jt2.wasm\"\n"
        ))
        .unwrap();
        let next = &c.runtime().attestors["next"];
        assert_eq!(next.shadow_of.as_deref(), Some("join-token"));
        assert_eq!(next.file.as_deref(), Some(Path::new("/d/a/jt2.wasm")));
        assert_eq!(c.runtime.attestors_poll_ms, 1000);
        for (bad, says) in [
            ("[attestors.x]\nfile = \"x.wasm\"\n", "only for a shadow"),
            (
                "[attestors.x]\nshadow_of = \"x\"\n",
                "another, live attestor",
            ),
            (
                "[attestors.x]\nshadow_of = \"y\"\n[attestors.y]\nshadow_of = \"join-token\"\n",
                "another, live attestor",
            ),
            (
                "[attestors.x]\nshadow_of = \"Not An Id\"\n",
                "another, live attestor",
            ),
            ("[runtime]\nattestors_poll_ms = 5\n", "attestors_poll_ms"),
        ] {
            let e = parse(&format!("{BASE}{bad}")).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        assert!(parse(&format!("{BASE}[runtime]\nattestors_poll_ms = 0\n")).is_ok());
        assert!(parse(&format!("log_level = \"warn\"\n{BASE}")).is_ok());
    }

    #[test]
    fn audit_sinks() {
        let c = parse(BASE).unwrap();
        assert_eq!(c.audit_sink(), None);
        let c = parse(&format!(
            "{BASE}[audit.sink]\nkind = \"webhook\"\nurl = \"https://h/x\"\nca_file = \"ca.pem\"\n"
        ))
        .unwrap();
        assert_eq!(
            c.audit_sink(),
            Some(SinkConfig::Webhook {
                url: "https://h/x".into(),
                timeout: Duration::from_millis(2000),
                ca_file: Some(PathBuf::from("/d/ca.pem")),
            })
        );
        let c = parse(&format!(
            "{BASE}[audit.sink]\nkind = \"jsonl\"\npath = \"r.jsonl\"\n"
        ))
        .unwrap();
        assert_eq!(
            c.audit_sink(),
            Some(SinkConfig::Jsonl {
                path: PathBuf::from("/d/r.jsonl")
            })
        );
        for bad in [
            "kind = \"webhook\"\nurl = \"https://h\"\ntimeout_ms = 0\n",
            "kind = \"jsonl\"\npath = \"r\"\nurl = \"https://h\"\n",
            "kind = \"syslog\"\n",
            "kind = \"jsonl\"\n",
        ] {
            assert!(
                parse(&format!("{BASE}[audit.sink]\n{bad}")).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn attestor_config_values_from_a_file_or_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        let roots = dir.path().join("roots");
        std::fs::create_dir(&roots).unwrap();
        std::fs::write(roots.join("b.pem"), "# second\nB").unwrap();
        std::fs::write(roots.join("a.pem"), "A").unwrap();
        std::fs::write(roots.join(".hidden"), "x").unwrap();
        std::fs::write(dir.path().join("one.pem"), "ONE").unwrap();
        let config = dir.path().join("gatehouse.toml");
        let write = |extra: &str| {
            std::fs::write(
                &config,
                format!(
                    "data_dir = {:?}\n[tls]\ncert = \"c\"\nkey = \"k\"\n{extra}",
                    dir.path()
                ),
            )
            .unwrap();
        };
        write("[attestors.tpm.files]\nekRoots = \"roots\"\nother = \"one.pem\"\n");
        let c = Config::load(&config).unwrap();
        let tpm = &c.runtime().attestors["tpm"].config;
        assert_eq!(tpm["ekRoots"], serde_json::json!(["A", "# second\nB"]));
        assert_eq!(tpm["other"], serde_json::json!(["ONE"]));
        // A key both inline and from a file, a missing path, binary content: refused, naming it.
        write("[attestors.tpm.config]\nekRoots = []\n[attestors.tpm.files]\nekRoots = \"roots\"\n");
        assert!(
            Config::load(&config)
                .unwrap_err()
                .to_string()
                .contains("also set")
        );
        write("[attestors.tpm.files]\nekRoots = \"nowhere\"\n");
        assert!(
            Config::load(&config)
                .unwrap_err()
                .to_string()
                .contains("attestors.tpm.files.ekRoots")
        );
        std::fs::write(roots.join("c.der"), [0x30, 0x82, 0xff, 0xfe]).unwrap();
        write("[attestors.tpm.files]\nekRoots = \"roots\"\n");
        assert!(
            Config::load(&config)
                .unwrap_err()
                .to_string()
                .contains("not UTF-8")
        );
    }
}
