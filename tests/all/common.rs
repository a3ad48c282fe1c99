//! Shared harness: a real host (dev PKI, TLS on loopback, SQLite or a fresh PostgreSQL
//! database) and helpers to create tokens and read its events and audit rows.

use std::path::PathBuf;
use std::time::Duration;

use gatehouse::app::{self, Running};
use gatehouse::config::Config;
use gatehouse::ops::types::CreatedToken;
use gatehouse::pki::IssueRequest;
use gatehouse::store::{
    AuditRow, EventRow, NewNodeCert, NewToken, NodeRole, TokenExpect, TokenRole,
};
use gatehouse_proto::{JoinTrust, TokenString};
use sha2::{Digest, Sha256};

/// Which database a test host runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// SQLite always; PostgreSQL too when DATABASE_URL is set (CI sets it).
pub fn backends() -> Vec<Backend> {
    let mut b = vec![Backend::Sqlite];
    if std::env::var("DATABASE_URL").is_ok_and(|u| !u.is_empty()) {
        b.push(Backend::Postgres);
    }
    b
}

/// How to start a test host.
#[derive(Debug, Clone)]
pub struct HostOptions {
    pub backend: Backend,
    /// Component files to put in `attestors_dir`.
    pub attestors: Vec<PathBuf>,
    /// The guest deadline.
    pub call_timeout_ms: u64,
    /// Reuse this PostgreSQL database URL (a second replica) instead of creating one.
    pub database_url: Option<String>,
    /// Reuse this data dir's PKI (a second replica).
    pub share_pki_with: Option<PathBuf>,
    /// Run in this data dir (kept after the host stops, so a restart finds its SQLite database,
    /// PKI and admin key again) instead of a fresh temporary one.
    pub data_dir: Option<PathBuf>,
    /// Listen here instead of on a free port (a restart on the same address).
    pub listen: Option<String>,
    /// Lifetime of issued node certificates.
    pub cert_ttl_seconds: Option<u32>,
    /// `[attestors.<id>] config` tables, as JSON objects.
    pub attestor_config: Vec<(String, serde_json::Value)>,
    /// `[audit.sink]`.
    pub audit_sink: Option<gatehouse::config::SinkSection>,
    /// `[attestors.<id>] reclaim` grants.
    pub reclaim_grants: Vec<(String, bool)>,
    /// `[limits]`; when absent, the defaults without the join rate limit (the suite joins in
    /// bursts from one address) and without the per-node issuance interval (the suite renews
    /// one node back to back).
    pub limits: Option<gatehouse::config::LimitsSection>,
    /// `[join] renewal_grace_seconds`.
    pub renewal_grace_seconds: Option<u32>,
    /// `[observability] metrics_listen`.
    pub metrics_listen: Option<String>,
    /// Shadows: `[attestors.<id>] shadow_of = <of>` (and `file`, a component path).
    pub shadows: Vec<(String, String, Option<PathBuf>)>,
    /// `[runtime] attestors_poll_ms`, when not the default.
    pub attestors_poll_ms: Option<u64>,
    /// `[attestors.<id>.fetch."<key>"]`: (id, dotted key, source).
    pub fetch: Vec<(String, String, gatehouse::config::FetchSource)>,
}

impl HostOptions {
    pub fn new(backend: Backend) -> Self {
        Self {
            backend,
            attestors: vec![],
            call_timeout_ms: 250,
            database_url: None,
            share_pki_with: None,
            data_dir: None,
            listen: None,
            cert_ttl_seconds: None,
            attestor_config: vec![],
            audit_sink: None,
            reclaim_grants: vec![],
            limits: None,
            renewal_grace_seconds: None,
            metrics_listen: None,
            shadows: vec![],
            attestors_poll_ms: None,
            fetch: vec![],
        }
    }
}

/// How a `gatehouse` command ended.
#[derive(Debug)]
pub enum Exit {
    Ok,
    /// A destructive command without --yes (the binary exits 2).
    NotConfirmed,
    Failed(String),
}

impl Exit {
    /// What the command printed, or the error it ended with.
    pub fn output(self, out: String) -> Result<String, String> {
        match self {
            Exit::Ok => Ok(out),
            Exit::NotConfirmed => Err(gatehouse::cli::NotConfirmed.to_string()),
            Exit::Failed(e) => Err(e),
        }
    }
}

/// A new machine (a fresh node key) joins the host at `url` as a node with `token`, as
/// `gatehouse-agent join` does (its join loop, `trust` pinned): its key and the host's answer.
pub async fn token_join(
    url: &str,
    trust: &JoinTrust,
    token: &TokenString,
) -> Result<(gatehouse_agent::NodeKey, gatehouse_agent::Joined), gatehouse_agent::JoinError> {
    use gatehouse_agent::{JoinClient, JoinOptions, NodeKey, TokenProducer, join};
    let key = NodeKey::generate()?;
    let joined = join(
        &JoinClient::new(url, trust)?,
        trust,
        &mut TokenProducer::new(gatehouse_proto::Role::Node),
        Some(token),
        &key,
        &JoinOptions::default(),
    )
    .await?;
    Ok((key, joined))
}

/// An HTTPS client trusting only `tls_ca_pem`.
pub fn https_client(tls_ca_pem: &str) -> reqwest::Client {
    // reqwest is built without a crypto provider, so that aws-lc-rs is the one TLS stack
    // (its default features would link ring too): make aws-lc-rs the process default.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let ca = must(reqwest::Certificate::from_pem(tls_ca_pem.as_bytes()), "CA");
    must(
        reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(ca)
            .timeout(Duration::from_secs(30))
            .build(),
        "client",
    )
}

/// GETs `url` (with `key` as a bearer token, if any): the status and the body's text.
pub async fn get_text(http: &reqwest::Client, url: &str, key: Option<&str>) -> (u16, String) {
    let mut req = http.get(url);
    if let Some(key) = key {
        req = req.bearer_auth(key);
    }
    let resp = req.send().await.unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

/// A running host in a temporary directory.
pub struct TestHost {
    /// Kept so the directory lives as long as the host.
    _dir: tempfile::TempDir,
    pub running: Running,
    pub trust: JoinTrust,
    pub admin_key: String,
    /// The database URL the host runs on.
    pub database_url: String,
    /// The host's data directory (its `attestors/` is the attestors directory).
    pub data: PathBuf,
    /// The configuration it started with: what a SIGHUP reads again, unchanged.
    pub config: Config,
    created_database: Option<String>,
}

#[track_caller]
fn must<T, E: std::fmt::Display>(r: Result<T, E>, what: &str) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("{what}: {e}"),
    }
}

/// A fresh PostgreSQL database from DATABASE_URL (for a host, or for replicas to share);
/// returns (url, name).
pub async fn fresh_postgres() -> (String, String) {
    use sqlx::Connection as _;
    let admin = must(std::env::var("DATABASE_URL"), "DATABASE_URL");
    let name = format!("gh_test_{:016x}", rand::random::<u64>());
    let mut conn = must(
        sqlx::PgConnection::connect(&admin).await,
        "connecting to DATABASE_URL",
    );
    must(
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await,
        "CREATE DATABASE",
    );
    let _ = conn.close().await;
    let base = admin
        .rsplit_once('/')
        .map_or(admin.as_str(), |(b, _)| b)
        .to_owned();
    (format!("{base}/{name}"), name)
}

impl TestHost {
    pub async fn start(backend: Backend) -> Self {
        Self::start_with(HostOptions::new(backend)).await
    }

    pub async fn start_with(opts: HostOptions) -> Self {
        match Self::try_start_with(opts).await {
            Ok(host) => host,
            Err(e) => panic!("starting the host: {e}"),
        }
    }

    /// Starts a host, or says why it would not start.
    pub async fn try_start_with(opts: HostOptions) -> Result<Self, String> {
        let dir = must(tempfile::tempdir(), "tempdir");
        let data = opts
            .data_dir
            .clone()
            .unwrap_or_else(|| dir.path().join("data"));
        std::fs::create_dir_all(&data).unwrap_or_else(|e| panic!("mkdir: {e}"));
        if let Some(other) = &opts.share_pki_with {
            for f in ["secret", "pki.json"] {
                must(
                    std::fs::copy(other.join(f), data.join(f)),
                    "copying the PKI",
                );
            }
        }
        let listen = opts.listen.as_deref().unwrap_or("127.0.0.1:0");
        let files = must(app::dev::prepare(&data, listen), "dev prepare");
        let mut config = must(Config::load(&files.config), "config");
        config.listen = listen.to_owned();
        if let Some(ttl) = opts.cert_ttl_seconds {
            config.join.cert_ttl_seconds = ttl;
        }
        for (id, table) in &opts.attestor_config {
            let table: toml::Table = must(serde_json::from_value(table.clone()), "attestor config");
            config.attestors.entry(id.clone()).or_default().config = Some(table);
        }
        for (id, of, file) in &opts.shadows {
            let section = config.attestors.entry(id.clone()).or_default();
            section.shadow_of = Some(of.clone());
            section.file = file.clone();
        }
        for (id, key, source) in &opts.fetch {
            let section = config.attestors.entry(id.clone()).or_default();
            section.fetch.insert(key.clone(), source.clone());
        }
        if let Some(ms) = opts.attestors_poll_ms {
            config.runtime.attestors_poll_ms = ms;
        }
        for (id, granted) in &opts.reclaim_grants {
            config.attestors.entry(id.clone()).or_default().reclaim = Some(*granted);
        }
        config.audit.sink = opts.audit_sink.clone();
        config.limits = opts
            .limits
            .clone()
            .unwrap_or(gatehouse::config::LimitsSection {
                join_rate_per_second: 0.0,
                node_issue_interval_seconds: 0,
                ..Default::default()
            });
        if let Some(grace) = opts.renewal_grace_seconds {
            config.join.renewal_grace_seconds = grace;
        }
        config.observability.metrics_listen = opts.metrics_listen.clone();
        let (database_url, created_database): (String, Option<String>) =
            match (opts.backend, opts.database_url) {
                (Backend::Postgres, Some(url)) => (url, None),
                (Backend::Postgres, None) => {
                    let (url, name) = fresh_postgres().await;
                    (url, Some(name))
                }
                (Backend::Sqlite, _) => (must(config.database_url(), "database URL"), None),
            };
        config.database_url = Some(database_url.clone());
        config.runtime.call_timeout_ms = opts.call_timeout_ms;
        if !opts.attestors.is_empty() {
            let adir = data.join("attestors");
            must(std::fs::create_dir_all(&adir), "mkdir attestors");
            for path in &opts.attestors {
                let name = path.file_name().unwrap_or_default();
                must(std::fs::copy(path, adir.join(name)), "copying a component");
            }
            config.runtime.attestors_dir = Some(adir);
        }
        let running = app::start(&config).await.map_err(|e| e.to_string())?;
        let trust: JoinTrust = must(
            serde_json::from_str(&must(std::fs::read_to_string(&files.join_trust), "trust")),
            "trust json",
        );
        let admin_key = must(std::fs::read_to_string(&files.admin_key), "admin key")
            .trim()
            .to_owned();
        Ok(Self {
            _dir: dir,
            running,
            trust,
            admin_key,
            database_url,
            data,
            config,
            created_database,
        })
    }

    /// The host's base URL.
    pub fn url(&self) -> String {
        format!("https://localhost:{}", self.running.server.addr.port())
    }

    /// An HTTPS client trusting the host's TLS CA.
    pub fn http(&self) -> reqwest::Client {
        https_client(&self.trust.tls_ca_pem)
    }

    /// Creates a token through the admin API.
    pub async fn create_token(&self, role: &str, uses: u32) -> TokenString {
        self.create_token_with(
            serde_json::json!({ "role": role, "uses": uses, "ttlSeconds": 3600 }),
        )
        .await
    }

    /// Creates a token through the admin API with a whole request body (raw JSON, so tests
    /// can send what the shared type would refuse to build).
    pub async fn create_token_with(&self, body: serde_json::Value) -> TokenString {
        let (status, created) = self
            .admin_call::<_, CreatedToken>(
                &self.admin_key,
                reqwest::Method::POST,
                "/v1/admin/tokens",
                Some(&body),
            )
            .await;
        let created = created.unwrap_or_else(|| panic!("token creation failed: {status}"));
        must(TokenString::parse(&created.token), "token text")
    }

    /// Calls the admin API as the holder of `key`: the status and, on success, the answer
    /// read as the shared type `T` (the one the server writes and the CLI reads).
    pub async fn admin_call<B: serde::Serialize + ?Sized, T: serde::de::DeserializeOwned>(
        &self,
        key: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<&B>,
    ) -> (reqwest::StatusCode, Option<T>) {
        let mut req = self
            .http()
            .request(method, format!("{}{path}", self.url()))
            .bearer_auth(key);
        if let Some(body) = body {
            req = req.json(body);
        }
        let resp = must(req.send().await, path);
        let status = resp.status();
        if !status.is_success() {
            return (status, None);
        }
        (status, Some(must(resp.json().await, path)))
    }

    /// Revokes a token through the admin API.
    pub async fn revoke_token(&self, id: &str) {
        let resp = must(
            self.http()
                .post(format!("{}/v1/admin/tokens/{id}/revoke", self.url()))
                .bearer_auth(&self.admin_key)
                .send()
                .await,
            "POST /v1/admin/tokens/{id}/revoke",
        );
        assert!(resp.status().is_success(), "revoke: {}", resp.status());
    }

    /// Inserts a token row directly (for states the API cannot make, such as already expired).
    pub async fn insert_token(
        &self,
        role: TokenRole,
        uses: u32,
        expires_in_ms: i64,
        expect: TokenExpect,
    ) -> TokenString {
        let secret: [u8; 32] = rand::random();
        let token = TokenString {
            id: format!("tok_test{:012x}", rand::random::<u64>() & 0xffff_ffff_ffff),
            secret: secret.to_vec(),
        };
        let mut tx = must(self.running.db.begin().await, "begin");
        let now = must(tx.now().await, "now");
        must(
            tx.insert_token(&NewToken {
                id: token.id.clone(),
                role,
                secret_sha256: Sha256::digest(secret).into(),
                tenant_id: "root".into(),
                pool_id: None,
                site_id: None,
                expires_at: now + expires_in_ms,
                uses,
                expect,
                reclaim: false,
                created_at: now,
            })
            .await,
            "insert token",
        );
        must(tx.commit().await, "commit");
        token
    }

    /// Issues a certificate for an existing node with any validity (for example one that
    /// expired an hour ago) and records it as the host would: the state a node that was offline
    /// comes back in. Returns the DER.
    pub async fn issue_cert(
        &self,
        node_id: &str,
        spki_der: &[u8],
        role: NodeRole,
        generation: u32,
        not_before_ms: i64,
        not_after_ms: i64,
    ) -> Vec<u8> {
        self.issue_cert_with_statements(
            node_id,
            spki_der,
            role,
            generation,
            not_before_ms,
            not_after_ms,
            &[],
        )
        .await
    }

    /// [`TestHost::issue_cert`] with `urn:bc:` statements after the SPIFFE ID.
    #[allow(clippy::too_many_arguments)]
    pub async fn issue_cert_with_statements(
        &self,
        node_id: &str,
        spki_der: &[u8],
        role: NodeRole,
        generation: u32,
        not_before_ms: i64,
        not_after_ms: i64,
        statements: &[String],
    ) -> Vec<u8> {
        let issued = must(
            self.running.pki.get().issue_node_cert(&IssueRequest {
                node_id,
                role: role.as_str(),
                spki_der,
                statements,
                not_before_ms,
                not_after_ms,
            }),
            "issue",
        );
        let mut tx = must(self.running.db.begin().await, "begin");
        let now = must(tx.now().await, "now");
        must(
            tx.insert_node_cert(&NewNodeCert {
                serial: issued.serial_hex,
                node_id: node_id.to_owned(),
                der: issued.der.clone(),
                generation,
                role,
                not_before: issued.not_before_ms,
                not_after: issued.not_after_ms,
                statements: statements.to_vec(),
                created_at: now,
            })
            .await,
            "insert cert",
        );
        must(tx.commit().await, "commit");
        issued.der
    }

    /// Runs `gatehouse <args>` against this host as the binary would (with `--server`, `--ca`
    /// and `--admin-key-file`, the files written into `dir`): how it ended and what it printed.
    pub async fn cli(&self, dir: &std::path::Path, args: &[&str]) -> (Exit, String) {
        use gatehouse::cli::{Cli, NotConfirmed, execute};
        let ca = dir.join("ca.pem");
        let key = dir.join("admin.key");
        must(std::fs::write(&ca, &self.trust.tls_ca_pem), "ca.pem");
        must(std::fs::write(&key, &self.admin_key), "admin.key");
        let url = self.url();
        let (ca, key) = (ca.display().to_string(), key.display().to_string());
        let mut argv = vec!["gatehouse"];
        argv.extend_from_slice(args);
        argv.extend_from_slice(&["--server", &url, "--ca", &ca, "--admin-key-file", &key]);
        let parsed = must(Cli::try_parse_args(argv.iter().copied()), "CLI arguments");
        let mut out = Vec::new();
        let exit = match execute(parsed, &mut out).await {
            Ok(()) => Exit::Ok,
            Err(e) if e.downcast_ref::<NotConfirmed>().is_some() => Exit::NotConfirmed,
            Err(e) => Exit::Failed(format!("{e:#}")),
        };
        (exit, must(String::from_utf8(out), "CLI output"))
    }

    /// A new machine (a fresh node key) joins as a node with `token`, as `gatehouse-agent
    /// join` does: its key and the host's answer.
    pub async fn join_node_with(
        &self,
        token: &TokenString,
    ) -> Result<(gatehouse_agent::NodeKey, gatehouse_agent::Joined), gatehouse_agent::JoinError>
    {
        token_join(&self.url(), &self.trust, token).await
    }

    /// A new machine joins as a node with a fresh single-use token; panics unless admitted.
    pub async fn join_node(&self) -> (gatehouse_agent::NodeKey, gatehouse_agent::Joined) {
        let token = self.create_token("node", 1).await;
        must(self.join_node_with(&token).await, "token join")
    }

    /// What SIGHUP does, with the configuration unchanged (files it names may have been).
    pub async fn sighup(&mut self) -> app::Reloaded {
        self.running.reload(self.config.clone()).await
    }

    /// Database time.
    pub async fn now(&self) -> i64 {
        let mut tx = must(self.running.db.begin().await, "begin");
        let now = must(tx.now().await, "now");
        must(tx.commit().await, "commit");
        now
    }

    pub async fn events(&self) -> Vec<EventRow> {
        let mut tx = must(self.running.db.begin().await, "begin");
        let rows = must(tx.list_events(0, 10_000).await, "events");
        must(tx.commit().await, "commit");
        rows
    }

    /// Waits until the event feed (`GET /v1/admin/events`) shows every event committed so
    /// far. On PostgreSQL the feed holds back events newer than the oldest transaction open
    /// anywhere in the cluster, so that it never skips one that commits late; with tests
    /// running side by side, another test's open transaction can hold it back for a while.
    pub async fn event_feed_settled(&self) {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let mut tx = must(self.running.db.begin().await, "begin");
            let all = must(tx.list_events(0, 10_000).await, "events").len();
            let fed = must(tx.event_feed(0, 10_000).await, "event feed").len();
            must(tx.commit().await, "commit");
            if fed == all {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the event feed still holds back {} of {all} events after 60 s",
                all - fed
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn audits(&self) -> Vec<AuditRow> {
        let mut tx = must(self.running.db.begin().await, "begin");
        let rows = must(tx.list_audits(0, 10_000).await, "audits");
        must(tx.commit().await, "commit");
        rows
    }

    /// One attestor's value of a metric (`name{attestor="…"}`) on the admin API's `/metrics`;
    /// 0 while the attestor has none.
    pub async fn attestor_metric(&self, name: &str, attestor: &str) -> u64 {
        let url = format!("{}/metrics", self.url());
        let (status, text) = get_text(&self.http(), &url, Some(&self.admin_key)).await;
        assert_eq!(status, 200, "{text}");
        let prefix = format!("{name}{{attestor=\"{attestor}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .map_or(0, |n| n.trim().parse().unwrap())
    }

    /// Refusal reasons recorded in events, in order.
    pub async fn refusal_reasons(&self) -> Vec<String> {
        self.events()
            .await
            .into_iter()
            .filter(|e| e.kind == "security.join.refused")
            .filter_map(|e| e.reason)
            .collect()
    }

    /// Stops the host and drops its PostgreSQL database, if it made one.
    pub async fn stop(self) {
        let TestHost {
            running,
            created_database,
            ..
        } = self;
        running.shutdown().await;
        if let Some(name) = created_database {
            drop_postgres(&name).await;
        }
    }
}

/// Drops a database [`fresh_postgres`] made; best effort, as cleanup.
pub async fn drop_postgres(name: &str) {
    use sqlx::Connection as _;
    if let Ok(admin) = std::env::var("DATABASE_URL")
        && let Ok(mut conn) = sqlx::PgConnection::connect(&admin).await
    {
        let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .execute(&mut conn)
            .await;
        let _ = conn.close().await;
    }
}

/// How many backends of the database wait on a lock now.
pub async fn lock_waiting(conn: &mut sqlx::PgConnection) -> i64 {
    let (waiting,): (i64,) = sqlx::query_as(
        "SELECT count(*) FROM pg_stat_activity \
         WHERE datname = current_database() AND wait_event_type = 'Lock'",
    )
    .fetch_one(conn)
    .await
    .unwrap();
    waiting
}

/// Waits until `n` backends of the database wait on a lock.
pub async fn lock_waiters(conn: &mut sqlx::PgConnection, n: i64) {
    for _ in 0..400 {
        if lock_waiting(conn).await >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{n} joins never waited on a lock");
}
