//! The `gatehouse-agent` binary: `gatehouse-agent join …` and `gatehouse-agent run …`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use gatehouse_agent::{
    CloudIidProducer, EvidenceProducer, JOIN_TOKEN, JoinClient, JoinOptions, Lifecycle, NodeKey,
    RenewPolicy, TokenProducer, apply_reset, ensure_no_identity, join, plan_reset, write_identity,
};
use gatehouse_proto::cloud_iid::{CLOUD_IID, Provider};
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
    /// Joins with a join token and writes node.key, node.crt and identity.json (with --reset,
    /// after moving an earlier identity aside).
    Join(JoinArgs),
    /// Keeps the identity in --dir alive: renews before the certificate runs out and, when it
    /// ran out anyway, re-joins as the same node with x509pop. Runs until SIGINT or SIGTERM.
    Run(RunArgs),
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// The host's URL, e.g. https://gatehouse.example:8443.
    #[arg(long)]
    server: String,
    /// The join trust file (JSON: pinned TLS CA, node CA, join signing and encryption keys).
    #[arg(long, value_name = "FILE")]
    ca: PathBuf,
    /// The identity directory `join --out` wrote.
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
    /// Renew once less than this fraction of the certificate's lifetime is left (a decimal or
    /// a ratio such as 1/3).
    #[arg(long, value_name = "FRACTION", default_value = "1/3", value_parser = parse_fraction)]
    renew_when_left: f64,
    /// The wait after a first failed attempt; it doubles with each further failure.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    backoff_min: Duration,
    /// The longest wait between two attempts.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = parse_duration)]
    backoff_max: Duration,
    /// A MAC address to claim in an x509pop re-join (repeatable).
    #[arg(long = "mac", value_name = "MAC", value_parser = parse_mac)]
    macs: Vec<String>,
    /// The SMBIOS product UUID to claim in an x509pop re-join.
    #[arg(long, value_name = "UUID", value_parser = parse_uuid)]
    product_uuid: Option<String>,
}

/// A fraction in (0, 1], written `0.5` or `1/3`.
fn parse_fraction(s: &str) -> Result<f64, String> {
    let bad = || format!("{s} is not a fraction in (0, 1] like 0.5 or 1/3");
    let value = match s.split_once('/') {
        Some((n, d)) => {
            let (n, d): (f64, f64) = (
                n.trim().parse().map_err(|_| bad())?,
                d.trim().parse().map_err(|_| bad())?,
            );
            n / d
        }
        None => s.trim().parse().map_err(|_| bad())?,
    };
    if value > 0.0 && value <= 1.0 {
        Ok(value)
    } else {
        Err(bad())
    }
}

/// A duration such as `30s`, `10m`, `200ms` or `1h 30m`.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| format!("{s}: {e}"))?;
    if d.is_zero() {
        return Err(format!("{s}: must be longer than zero"));
    }
    Ok(d)
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
    #[arg(long, value_name = "FILE", required_unless_present = "document_file")]
    token_file: Option<PathBuf>,
    /// Join with no token, on the identity document the cloud signed (attestor cloud-iid):
    /// cloud-iid evidence JSON, or what the metadata service returned (see --provider).
    #[arg(long, value_name = "FILE", conflicts_with = "token_file")]
    document_file: Option<PathBuf>,
    /// Whose document --document-file holds: aws (the identity document; its /pkcs7 text in
    /// --signature-file), gcp or oidc (the token), azure (the attested document response).
    #[arg(long, value_name = "PROVIDER", requires = "document_file", value_parser = parse_provider)]
    provider: Option<Provider>,
    /// AWS: the /latest/dynamic/instance-identity/pkcs7 text.
    #[arg(long, value_name = "FILE", requires = "document_file")]
    signature_file: Option<PathBuf>,
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
    /// First move the identity in --out aside (each file to <name>.reset-<UTC time>, nothing
    /// deleted), then join as a new machine. Without --yes, only lists what it would move and
    /// exits 2.
    #[arg(long)]
    reset: bool,
    /// Confirms --reset.
    #[arg(long, requires = "reset")]
    yes: bool,
}

fn parse_provider(s: &str) -> Result<Provider, String> {
    Provider::parse(s).ok_or_else(|| format!("{s} is not aws, gcp, azure or oidc"))
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
#[derive(Debug)]
enum Failure {
    /// The command line or the files it names are unusable (exit 2).
    Usage(anyhow::Error),
    /// The join failed or was refused, or the renewal loop could not go on (exit 1).
    Join(anyhow::Error),
    /// `--reset` without `--yes`: nothing was done (exit 2).
    Unconfirmed,
}

impl Failure {
    fn exit_code(&self) -> u8 {
        match self {
            Failure::Join(_) => 1,
            Failure::Usage(_) | Failure::Unconfirmed => 2,
        }
    }
}

fn usage<E: Into<anyhow::Error>>(e: E) -> Failure {
    Failure::Usage(e.into())
}

fn read(path: &Path) -> Result<String, Failure> {
    std::fs::read_to_string(path)
        .with_context(|| path.display().to_string())
        .map_err(usage)
}

fn read_trust(path: &Path) -> Result<JoinTrust, Failure> {
    serde_json::from_str(&read(path)?)
        .with_context(|| format!("{}: not a join trust file", path.display()))
        .map_err(usage)
}

/// `join --reset`: with `yes`, moves the identity files in `dir` aside and says so on `out`;
/// without, lists what it would move and fails [`Failure::Unconfirmed`] having moved nothing.
fn reset(
    dir: &Path,
    yes: bool,
    at: SystemTime,
    out: &mut impl std::io::Write,
) -> Result<(), Failure> {
    let moves = plan_reset(dir, at).map_err(usage)?;
    let io = |e: std::io::Error| Failure::Join(e.into());
    if !yes {
        if moves.is_empty() {
            writeln!(out, "{} holds no identity files", dir.display()).map_err(io)?;
        }
        for m in &moves {
            writeln!(out, "would move {} to {}", m.from.display(), m.to.display()).map_err(io)?;
        }
        return Err(Failure::Unconfirmed);
    }
    apply_reset(&moves)
        .context("moving the identity aside")
        .map_err(Failure::Join)?;
    for m in &moves {
        writeln!(out, "moved {} to {}", m.from.display(), m.to.display()).map_err(io)?;
    }
    Ok(())
}

async fn run_join(args: JoinArgs) -> Result<(), Failure> {
    let trust = read_trust(&args.ca)?;
    // A cloud document joins without a token (`--document-file`); everything else with one.
    let (token, mut producer): (Option<TokenString>, Box<dyn EvidenceProducer>) =
        match (&args.token_file, &args.document_file) {
            (_, Some(document)) => {
                let evidence = CloudIidProducer::from_files(
                    document,
                    args.provider,
                    args.signature_file.as_deref(),
                )
                .map_err(usage)?;
                // The default attestor takes tokens; a document is cloud-iid's.
                let attestor = if args.attestor == JOIN_TOKEN {
                    CLOUD_IID
                } else {
                    args.attestor.as_str()
                };
                (
                    None,
                    Box::new(CloudIidProducer::new(attestor, args.role, evidence)),
                )
            }
            (Some(file), None) => {
                let token = TokenString::parse(&read(file)?)
                    .with_context(|| file.display().to_string())
                    .map_err(usage)?;
                (
                    Some(token),
                    Box::new(TokenProducer::for_attestor(&args.attestor, args.role)),
                )
            }
            (None, None) => {
                return Err(usage(anyhow::anyhow!(
                    "give --token-file or --document-file"
                )));
            }
        };
    let client = JoinClient::new(&args.server, &trust).map_err(usage)?;
    // Only once the invocation is known to be usable: a reset is not undone when the join
    // fails (a later plain join joins).
    if args.reset {
        reset(
            &args.out,
            args.yes,
            SystemTime::now(),
            &mut std::io::stdout(),
        )?;
    }
    // Before the join: a refused write must not follow a spent token.
    ensure_no_identity(&args.out).map_err(usage)?;
    let key = NodeKey::generate().map_err(|e| Failure::Join(e.into()))?;
    let options = JoinOptions {
        claims: Claims {
            macs: args.macs,
            product_uuid: args.product_uuid,
        },
        ..JoinOptions::default()
    };
    let joined = join(
        &client,
        &trust,
        producer.as_mut(),
        token.as_ref(),
        &key,
        &options,
    )
    .await
    .map_err(|e| Failure::Join(e.into()))?;
    let identity = write_identity(&args.out, &key, &joined)
        .context("joined, but the identity could not be written")
        .map_err(Failure::Join)?;
    println!("node id: {}", identity.node_id);
    println!("SPIFFE ID: {}", identity.spiffe_id);
    Ok(())
}

async fn run_lifecycle(args: RunArgs) -> Result<(), Failure> {
    let trust = read_trust(&args.ca)?;
    let policy = RenewPolicy {
        renew_when_left: args.renew_when_left,
        backoff_min: args.backoff_min,
        backoff_max: args.backoff_max,
    };
    policy.validate().map_err(usage)?;
    // Fail early on a directory without an identity, and on an unusable server URL.
    let loaded = gatehouse_agent::load_identity(&args.dir).map_err(usage)?;
    JoinClient::new(&args.server, &trust).map_err(usage)?;
    tracing::info!(
        node_id = %loaded.identity.node_id,
        serial = %loaded.cert.serial,
        dir = %args.dir.display(),
        "keeping the node certificate renewed"
    );
    let lifecycle =
        Lifecycle::new(&args.server, trust, args.dir, policy).with_join_options(JoinOptions {
            claims: Claims {
                macs: args.macs,
                product_uuid: args.product_uuid,
            },
            ..JoinOptions::default()
        });
    lifecycle
        .run(shutdown())
        .await
        .map_err(|e| Failure::Join(e.into()))?;
    tracing::info!("stopped");
    Ok(())
}

/// Completes on SIGINT or SIGTERM.
async fn shutdown() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("GATEHOUSE_AGENT_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let result = match Cli::parse().command {
        Command::Join(args) => run_join(args).await,
        Command::Run(args) => run_lifecycle(args).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            match &failure {
                Failure::Join(e) | Failure::Usage(e) => eprintln!("gatehouse-agent: {e:#}"),
                Failure::Unconfirmed => eprintln!(
                    "gatehouse-agent: --reset moved nothing; run again with --reset --yes to move \
                     these aside and join"
                ),
            }
            ExitCode::from(failure.exit_code())
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
        let Command::Join(args) = cli.command else {
            panic!("a join")
        };
        assert_eq!(args.attestor, "join-token");
        assert!(!args.reset && !args.yes);
        assert_eq!(args.role, Role::Site);
        assert_eq!(args.macs, ["52:54:00:ab:cd:ef", "52:54:00:00:00:01"]);
        assert_eq!(
            args.product_uuid.as_deref(),
            Some("4c4c4544-0000-1000-8000-000000000000")
        );
    }

    #[test]
    fn parses_a_cloud_join() {
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
        let parse = |extra: &[&str]| Cli::try_parse_from(base.iter().chain(extra));
        let cli = parse(&[
            "--attestor",
            "cloud-iid",
            "--document-file",
            "doc.json",
            "--provider",
            "aws",
            "--signature-file",
            "pkcs7",
        ])
        .unwrap();
        let Command::Join(args) = cli.command else {
            panic!("a join")
        };
        assert_eq!(args.token_file, None);
        assert_eq!(args.document_file.as_deref(), Some(Path::new("doc.json")));
        assert_eq!(args.provider, Some(Provider::Aws));
        assert_eq!(args.signature_file.as_deref(), Some(Path::new("pkcs7")));
        for bad in [
            &["--document-file", "d", "--token-file", "t"][..],
            &["--document-file", "d", "--provider", "ibm"],
        ] {
            assert_eq!(parse(bad).unwrap_err().exit_code(), 2, "{bad:?}");
        }
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

    #[test]
    fn parses_a_run_with_its_defaults() {
        let cli = Cli::try_parse_from([
            "gatehouse-agent",
            "run",
            "--server",
            "https://h:8443",
            "--ca",
            "trust.json",
            "--dir",
            "d",
        ])
        .unwrap();
        let Command::Run(args) = cli.command else {
            panic!("a run")
        };
        assert!((args.renew_when_left - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(args.backoff_min, Duration::from_secs(30));
        assert_eq!(args.backoff_max, Duration::from_secs(600));
        assert_eq!(
            RenewPolicy {
                renew_when_left: args.renew_when_left,
                backoff_min: args.backoff_min,
                backoff_max: args.backoff_max,
            },
            RenewPolicy::default()
        );

        let cli = Cli::try_parse_from([
            "gatehouse-agent",
            "run",
            "--server",
            "https://h:8443",
            "--ca",
            "trust.json",
            "--dir",
            "d",
            "--renew-when-left",
            "0.5",
            "--backoff-min",
            "200ms",
            "--backoff-max",
            "1s",
        ])
        .unwrap();
        let Command::Run(args) = cli.command else {
            panic!("a run")
        };
        assert_eq!(args.renew_when_left, 0.5);
        assert_eq!(args.backoff_min, Duration::from_millis(200));
        assert_eq!(args.backoff_max, Duration::from_secs(1));

        for (flag, value) in [
            ("--renew-when-left", "0"),
            ("--renew-when-left", "4/3"),
            ("--renew-when-left", "x"),
            ("--backoff-min", "0s"),
            ("--backoff-max", "soon"),
        ] {
            let err = Cli::try_parse_from([
                "gatehouse-agent",
                "run",
                "--server",
                "https://h",
                "--ca",
                "c",
                "--dir",
                "d",
                flag,
                value,
            ])
            .unwrap_err();
            assert_eq!(err.exit_code(), 2, "{flag} {value}");
        }
        assert_eq!(parse_fraction("1/4"), Ok(0.25));
    }

    #[test]
    fn yes_needs_reset() {
        let base = [
            "gatehouse-agent",
            "join",
            "--server",
            "https://h",
            "--ca",
            "c",
            "--token-file",
            "t",
            "--out",
            "d",
        ];
        let err = Cli::try_parse_from(base.iter().copied().chain(["--yes"])).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        let cli = Cli::try_parse_from(base.iter().copied().chain(["--reset", "--yes"])).unwrap();
        let Command::Join(args) = cli.command else {
            panic!("a join")
        };
        assert!(args.reset && args.yes);
    }

    fn identity_dir() -> tempfile::TempDir {
        let tmp = tempfile::tempdir().unwrap();
        for name in [
            "identity.json",
            "node.key",
            "node.key.next",
            "node.crt",
            "other",
        ] {
            std::fs::write(tmp.path().join(name), name).unwrap();
        }
        tmp
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// 2026-12-02 15:30:00 UTC.
    fn at() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_225_400)
    }

    #[test]
    fn reset_without_yes_lists_and_moves_nothing() {
        let tmp = identity_dir();
        let before = names(tmp.path());
        let mut out = Vec::new();
        let failure = reset(tmp.path(), false, at(), &mut out).unwrap_err();
        assert_eq!(failure.exit_code(), 2);
        assert!(matches!(failure, Failure::Unconfirmed));
        assert_eq!(names(tmp.path()), before, "nothing moved");
        let text = String::from_utf8(out).unwrap();
        let d = tmp.path().display();
        let expected: String = ["identity.json", "node.key", "node.key.next", "node.crt"]
            .iter()
            .map(|n| format!("would move {d}/{n} to {d}/{n}.reset-20261202T153000Z\n"))
            .collect();
        assert_eq!(text, expected);

        let empty = tempfile::tempdir().unwrap();
        let mut out = Vec::new();
        assert_eq!(
            reset(empty.path(), false, at(), &mut out)
                .unwrap_err()
                .exit_code(),
            2
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!("{} holds no identity files\n", empty.path().display())
        );
    }

    #[test]
    fn reset_with_yes_moves_the_identity_aside() {
        let tmp = identity_dir();
        let mut out = Vec::new();
        reset(tmp.path(), true, at(), &mut out).unwrap();
        assert_eq!(
            names(tmp.path()),
            [
                "identity.json.reset-20261202T153000Z",
                "node.crt.reset-20261202T153000Z",
                "node.key.next.reset-20261202T153000Z",
                "node.key.reset-20261202T153000Z",
                "other",
            ]
        );
        // Nothing deleted: each file keeps its bytes under the new name.
        assert_eq!(
            std::fs::read_to_string(tmp.path().join("node.key.reset-20261202T153000Z")).unwrap(),
            "node.key"
        );
        ensure_no_identity(tmp.path()).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().count(), 4);
        assert!(text.starts_with("moved "), "{text}");
    }
}
