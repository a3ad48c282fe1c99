//! A host in a process of its own, for the tests that must see what only a whole process
//! shows: its resident memory (`soak`), its log (`scale`'s SQLite half) or its signals
//! (`reload`'s SIGHUP).
//!
//! The test binary re-runs itself with `process::host_process`, an ignored test that serves
//! only when [`HOST_DIR`] names its data directory, and runs `gatehouse serve --dev` there (or
//! `gatehouse serve --config` when [`HOST_CONFIG`] names a configuration) as the binary does:
//! the binary's allocator setting and, when asked, its JSON log on stderr.

use std::io::{BufRead as _, BufReader};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gatehouse_proto::JoinTrust;

/// The variable naming the child's data directory.
const HOST_DIR: &str = "GATEHOUSE_TEST_HOST_DIR";

/// The variable naming the configuration the child serves with `serve --config`, if any.
const HOST_CONFIG: &str = "GATEHOUSE_TEST_HOST_CONFIG";

/// Not a test: the child's host. Serves until SIGTERM when [`HOST_DIR`] is set
/// ([`HostProcess::start`] sets it), and returns at once otherwise.
#[test]
#[ignore = "a host process, started by `HostProcess::start` (soak, scale, reload)"]
fn host_process() {
    let Some(dir) = std::env::var_os(HOST_DIR) else {
        return;
    };
    let dir = dir.to_string_lossy().into_owned();
    // As the `gatehouse` binary's `main` does.
    gatehouse::allocator::return_freed_memory_at_once();
    if std::env::var_os(gatehouse::logging::ENV).is_some() {
        gatehouse::logging::init(gatehouse::cli::LogFormat::Json);
    }
    let serve = |args: &[&str]| {
        let cli = gatehouse::cli::Cli::try_parse_args(args).unwrap();
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime
            .block_on(gatehouse::cli::run(cli))
            .expect("the child host serves");
    };
    if let Some(config) = std::env::var_os(HOST_CONFIG) {
        return serve(&["gatehouse", "serve", "--config", &config.to_string_lossy()]);
    }
    // `serve --dev` defaults, except the per-node issuance interval: the soak's renewer renews
    // one node five times a second and `scale` renews right after joining, which the default
    // (one certificate per node per 30 s) would answer 429 (tests/all/ops.rs shows that
    // throttle).
    let files = gatehouse::app::dev::prepare(Path::new(&dir), "127.0.0.1:0").unwrap();
    let config = std::fs::read_to_string(&files.config).unwrap();
    if !config.contains("[limits]") {
        std::fs::write(
            &files.config,
            format!("{config}\n[limits]\nnode_issue_interval_seconds = 0\n"),
        )
        .unwrap();
    }
    serve(&[
        "gatehouse",
        "serve",
        "--dev",
        "--data-dir",
        &dir,
        "--listen",
        "127.0.0.1:0",
    ]);
}

/// The child host, killed if the test ends early.
pub struct HostProcess {
    child: Child,
    /// Where it listens, and its URL (by the name its TLS certificate carries).
    pub addr: std::net::SocketAddr,
    pub url: String,
    pub trust: JoinTrust,
    pub admin_key: String,
    pub data: PathBuf,
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl HostProcess {
    /// Starts a host on `data` (created if missing) and waits until it listens. Blocks: call
    /// it from `spawn_blocking` in an async test.
    pub fn start(data: PathBuf) -> Self {
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .env_remove(gatehouse::logging::ENV)
            .stderr(Stdio::null());
        Self::spawn(data, command)
    }

    /// As [`HostProcess::start`], serving `gatehouse serve --config config`, a configuration
    /// whose data directory is `data` (as `gatehouse serve --dev` writes it). Its stderr is the
    /// test's.
    pub fn start_with_config(data: PathBuf, config: &Path) -> Self {
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .env_remove(gatehouse::logging::ENV)
            .env(HOST_CONFIG, config)
            .stderr(Stdio::inherit());
        Self::spawn(data, command)
    }

    /// As [`HostProcess::start`], with the host's log as JSON lines, filtered by `filter`
    /// (`GATEHOUSE_LOG`'s syntax), in the file `log`.
    pub fn start_logging(data: PathBuf, filter: &str, log: &Path) -> Self {
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .env(gatehouse::logging::ENV, filter)
            .stderr(std::fs::File::create(log).unwrap());
        Self::spawn(data, command)
    }

    fn spawn(data: PathBuf, mut command: Command) -> Self {
        let mut child = command
            .args([
                "process::host_process",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(HOST_DIR, &data)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let addr = loop {
            let line = lines
                .next()
                .expect("the host process printed its address")
                .unwrap();
            // Possibly after libtest's `test … ` on the same line.
            if let Some((_, addr)) = line.split_once("gatehouse listening on https://") {
                break addr.trim().to_owned();
            }
        };
        // Keep draining what it prints, so it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        let addr: std::net::SocketAddr = addr.parse().unwrap();
        let trust: JoinTrust =
            serde_json::from_str(&std::fs::read_to_string(data.join("join-trust.json")).unwrap())
                .unwrap();
        let admin_key = std::fs::read_to_string(data.join("admin.key"))
            .unwrap()
            .trim()
            .to_owned();
        Self {
            child,
            addr,
            url: format!("https://localhost:{}", addr.port()),
            trust,
            admin_key,
            data,
        }
    }

    /// Resident memory of the host process, in KiB.
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }

    /// An HTTPS client trusting the host's CA, from `source` (any 127/8 address).
    pub fn http(&self, source: IpAddr) -> reqwest::Client {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(
                reqwest::Certificate::from_pem(self.trust.tls_ca_pem.as_bytes()).unwrap(),
            )
            .local_address(source)
            .resolve("localhost", self.addr)
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap()
    }

    /// A one-use node token, through the admin API, with `http` ([`HostProcess::http`]).
    pub async fn create_token(&self, http: &reqwest::Client) -> gatehouse_proto::TokenString {
        let created: serde_json::Value = http
            .post(format!("{}/v1/admin/tokens", self.url))
            .bearer_auth(&self.admin_key)
            .json(&serde_json::json!({ "role": "node", "uses": 1, "ttlSeconds": 3600 }))
            .send()
            .await
            .unwrap()
            .error_for_status()
            .unwrap()
            .json()
            .await
            .unwrap();
        gatehouse_proto::TokenString::parse(created["token"].as_str().unwrap()).unwrap()
    }

    /// Sends it the signal `name` (`HUP`, `TERM`), as `kill` does.
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{name}");
    }

    /// Stops it as an operator would (SIGTERM) and waits for it to exit.
    pub fn stop(mut self) -> std::process::ExitStatus {
        self.signal("TERM");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the host did not stop on SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
