//! The `gatehouse-agent` binary: `gatehouse-agent join …`, `run …`, `site …` and `ramdisk …`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use gatehouse_agent::{
    CloudIidProducer, DEFAULT_TCTI, DiscoveryProducer, ExternalProducer, HostTpm as Tpm,
    JOIN_TOKEN, JoinClient, JoinOptions, Joined, KeyPlace, Lifecycle, NoTpmSupport, NodeKey,
    RenewPolicy, SiteLoop, TPM, TPM_SUPPORT, TokenProducer, apply_reset, ensure_no_identity, join,
    load_identity_with, local_claims, plan_reset, read_cmdline, write_identity,
};
use gatehouse_proto::cloud_iid::{CLOUD_IID, Provider};
use gatehouse_proto::{Claims, JoinTrust, Role, TokenString};

/// `--version`: the version and whether this build has TPM support, which the install script
/// reads to refuse a tpm join with a build that cannot make one.
#[cfg(feature = "tpm")]
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (with TPM support)");
#[cfg(not(feature = "tpm"))]
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (without TPM support)");

/// The machine side of Gatehouse.
#[derive(Debug, Parser)]
#[command(name = "gatehouse-agent", version = VERSION, about)]
struct Cli {
    /// How the log (stderr) is written: `text` (coloured only on a terminal) or `json`, one
    /// object a line.
    #[arg(long, global = true, value_enum, env = "GATEHOUSE_AGENT_LOG_FORMAT", default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    /// Lines for people; ANSI colours only when stderr is a terminal.
    Text,
    /// One JSON object a line.
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Joins with a join token (or, with --attestor tpm, with the TPM) and writes node.key,
    /// node.crt and identity.json (with --reset, after moving an earlier identity aside).
    Join(JoinArgs),
    /// Keeps the identity in --dir alive: renews before the certificate runs out and, when it
    /// ran out anyway, re-joins as the same node with x509pop. Runs until SIGINT or SIGTERM.
    Run(RunArgs),
    /// Site agent: holds the site's boot lease with the site node identity in --dir and
    /// renders every boot entry of --boots into --out as `bc.token=… bc.assertion=…`. Runs
    /// until SIGINT or SIGTERM, then releases the lease.
    Site(SiteArgs),
    /// Commissioning ramdisk: reads bc.token and bc.assertion from the kernel command line
    /// and joins with attestor discovery as ramdisk, writing the identity to --out.
    Ramdisk(RamdiskArgs),
    /// Reports where the node key lives (TPM or file), whether it loads and is the key the
    /// node certificate certifies, and whether the TPM holds the attestation key the
    /// certificate names. Exits 1 when a check fails.
    Doctor(DoctorArgs),
    /// Prints the identity line: node, role, certificate expiry, node key in the TPM or a
    /// file, the AK statement (`--json`: one JSON object). Reads the files only; exits 1 when
    /// there is no identity.
    Status(StatusArgs),
    /// The TPM helper (as root): holds the TPM connection and offers an unprivileged agent
    /// only AK, node key derive, certify and sign over a local Unix socket. Runs until SIGINT
    /// or SIGTERM.
    Helper(HelperArgs),
    /// Writes a shell script that installs or upgrades the agent on a machine: the binary, the
    /// trust file, the systemd units (agent, TPM helper), the join, and a (re)start of the
    /// units.
    InstallScript(InstallScriptArgs),
}

#[derive(Debug, clap::Args)]
struct InstallScriptArgs {
    /// The host's URL the machines join.
    #[arg(long)]
    server: String,
    /// The join trust file, embedded in the script.
    #[arg(long, value_name = "FILE")]
    ca: PathBuf,
    /// The attestor: `tpm` (no token is read; the script fails early without a TPM device),
    /// or one that admits on a token, user data or a cloud document.
    #[arg(long, value_name = "ID")]
    attestor: Option<String>,
    /// Join with the provisioned token in the user data at this path on the machine.
    #[arg(long, value_name = "FILE")]
    userdata: Option<String>,
    /// Join with the cloud identity document at this path on the machine.
    #[arg(long, value_name = "FILE", conflicts_with = "userdata")]
    document_file: Option<String>,
    /// The document's provider (aws, gcp, azure, oidc).
    #[arg(long, requires = "document_file", value_parser = parse_provider)]
    provider: Option<Provider>,
    /// AWS: the pkcs7 signature file on the machine.
    #[arg(long, value_name = "FILE", requires = "document_file")]
    signature_file: Option<String>,
    /// Where the script fetches the binary (https) when GATEHOUSE_AGENT_BIN is not set.
    #[arg(long, value_name = "URL")]
    binary_url: Option<String>,
    /// The unprivileged user the agent runs as.
    #[arg(long, default_value = "gatehouse-agent")]
    user: String,
    /// Write the script here (mode 0755) instead of standard output.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

fn run_install_script(args: InstallScriptArgs) -> Result<(), Failure> {
    use gatehouse_agent::install_script::{InstallJoin, InstallOptions, render};
    let trust_json = read(&args.ca)?;
    read_trust(&args.ca)?;
    let is_tpm = args.attestor.as_deref() == Some(TPM);
    let join = match (&args.userdata, &args.document_file, is_tpm) {
        (None, None, true) => InstallJoin::Tpm,
        (_, _, true) => {
            return Err(usage(anyhow::anyhow!(
                "--attestor tpm reads no token, user data or document"
            )));
        }
        (Some(path), None, false) => InstallJoin::Userdata(path.clone()),
        (None, Some(document), false) => InstallJoin::Document {
            document: document.clone(),
            provider: args.provider.map(|p| p.as_str().to_owned()),
            signature: args.signature_file.clone(),
        },
        (None, None, false) => InstallJoin::Token,
        (Some(_), Some(_), false) => {
            return Err(usage(anyhow::anyhow!(
                "--userdata and --document-file exclude each other"
            )));
        }
    };
    let script = render(&InstallOptions {
        server: args.server,
        trust_json,
        join,
        attestor: args.attestor,
        binary_url: args.binary_url,
        user: args.user,
    });
    match &args.out {
        Some(path) => {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::write(path, &script)
                .and_then(|()| {
                    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
                })
                .with_context(|| path.display().to_string())
                .map_err(Failure::Join)?;
        }
        None => print!("{script}"),
    }
    Ok(())
}

#[derive(Debug, clap::Args)]
struct HelperArgs {
    /// The socket to listen on (created mode 0660: give the agent's group access to it, e.g.
    /// with the unit's Group=).
    #[arg(long, value_name = "PATH", default_value = gatehouse_agent::DEFAULT_SOCKET)]
    socket: PathBuf,
    /// The TPM's TCTI.
    #[arg(long, value_name = "TCTI", default_value = DEFAULT_TCTI)]
    tpm: String,
}

#[derive(Debug, clap::Args)]
struct StatusArgs {
    /// The identity directory.
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
    /// Print JSON: nodeId, role, spiffeId, serial, notAfter (ms), expired, nodeKey (tpm or
    /// file), akStatement, attestor.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct DoctorArgs {
    /// The identity directory.
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
    /// The TPM's TCTI (default: device:/dev/tpmrm0 when the node key is in the TPM, the
    /// certificate names an AK or the device exists).
    #[arg(long, value_name = "TCTI", conflicts_with = "helper")]
    tpm: Option<String>,
    /// Reach the TPM through `gatehouse-agent helper` on this socket, as the unprivileged
    /// agent does; the check then fails when this user can open the TPM device itself.
    #[arg(long, value_name = "SOCKET")]
    helper: Option<PathBuf>,
    /// The host's URL: also check the certificate against the host's CRL (signed by the
    /// pinned node CA), so a revoked or superseded certificate fails.
    #[arg(long, requires = "ca")]
    server: Option<String>,
    /// The join trust file, with --server.
    #[arg(long, value_name = "FILE", requires = "server")]
    ca: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct SiteArgs {
    /// The host's URL, e.g. https://gatehouse.example:8443.
    #[arg(long)]
    server: String,
    /// The join trust file.
    #[arg(long, value_name = "FILE")]
    ca: PathBuf,
    /// The site node's identity directory (`join --role site --out`).
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
    /// The site this node serves.
    #[arg(long, value_name = "SITE")]
    site: String,
    /// The boot entries: a JSON array of {mac, workflowId?, productUuid?, ip?, notAfter (ms)}.
    #[arg(long, value_name = "FILE")]
    boots: PathBuf,
    /// Where to write each boot's kernel command line parameters (<mac>.cmdline).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// The boot lease's time to live (5s to 10m); renewed every third of it.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    lease_ttl: Duration,
}

#[derive(Debug, clap::Args)]
struct RamdiskArgs {
    /// The host's URL, e.g. https://gatehouse.example:8443.
    #[arg(long)]
    server: String,
    /// The join trust file.
    #[arg(long, value_name = "FILE")]
    ca: PathBuf,
    /// The directory to write the identity to; it must not hold one yet.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// The kernel command line to read bc.token and bc.assertion from.
    #[arg(long, value_name = "FILE", default_value = "/proc/cmdline")]
    cmdline: PathBuf,
    /// A MAC address to claim (repeatable); default: every interface's under /sys/class/net.
    #[arg(long = "mac", value_name = "MAC", value_parser = parse_mac)]
    macs: Vec<String>,
    /// The SMBIOS product UUID to claim; default: /sys/class/dmi/id/product_uuid.
    #[arg(long, value_name = "UUID", value_parser = parse_uuid)]
    product_uuid: Option<String>,
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
    /// The TPM's TCTI, e.g. device:/dev/tpmrm0 or swtpm:host=127.0.0.1,port=2321 (default:
    /// device:/dev/tpmrm0 when the node key is in the TPM, the certificate names an AK, or the
    /// device exists: the next renewal then moves a file key into the TPM). `none`: no TPM.
    #[arg(long, value_name = "TCTI", conflicts_with = "helper")]
    tpm: Option<String>,
    /// Run unprivileged: never open the TPM, reach it through `gatehouse-agent helper` on
    /// this socket (node keys derived, certified and used there, every answer checked).
    #[arg(long, value_name = "SOCKET")]
    helper: Option<PathBuf>,
    /// The wait after a failed attempt is shortened by a random part of up to this fraction
    /// of it, so that a fleet does not retry in step.
    #[arg(long, value_name = "FRACTION", default_value = "0.5", value_parser = parse_jitter)]
    jitter: f64,
    /// How long after its expiry the certificate may still re-join with x509pop (the host's
    /// grace); past it the loop stops with the recovery command.
    #[arg(long, value_name = "DURATION", default_value = "7d", value_parser = parse_duration)]
    rejoin_grace: Duration,
    /// Never renew sooner than this after the certificate was issued (unless it would expire
    /// first), whatever --renew-when-left says: a host issuing very short certificates cannot
    /// make the agent renew in a loop.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    min_interval: Duration,
}

/// A jitter fraction in [0, 1).
fn parse_jitter(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if (0.0..1.0).contains(&v) => Ok(v),
        _ => Err(format!("{s} is not a fraction in [0, 1) like 0.5")),
    }
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
    /// The file holding the join token (gh1.<id>.<secret>); one of --token-file, --userdata
    /// or --document-file is required, except with --attestor tpm, which reads no token
    /// (giving one with it is a usage error).
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Instead of --token-file: the user data a provisioning workflow rendered (for example
    /// /var/lib/cloud/instance/user-data.txt); the one join token in it is used.
    #[arg(long, value_name = "FILE", conflicts_with = "token_file")]
    userdata: Option<PathBuf>,
    /// Join with no token, on the identity document the cloud signed (attestor cloud-iid):
    /// cloud-iid evidence JSON, or what the metadata service returned (see --provider).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["token_file", "userdata"])]
    document_file: Option<PathBuf>,
    /// Whose document --document-file holds: aws (the identity document; its /rsa2048 text in
    /// --signature-file), gcp or oidc (the token), azure (the attested document response).
    #[arg(long, value_name = "PROVIDER", requires = "document_file", value_parser = parse_provider)]
    provider: Option<Provider>,
    /// AWS: the /latest/dynamic/instance-identity/rsa2048 text (PKCS#7, SHA-256 with
    /// RSA-2048), or /signature where the host enables it. Not /pkcs7: DSA with SHA-1, which
    /// the host refuses (legacy-algorithm).
    #[arg(long, value_name = "FILE", requires = "document_file")]
    signature_file: Option<PathBuf>,
    /// The directory to write the identity to; it must not hold one yet.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// The attestor that decides: one that admits on the sealed token alone, `tpm` (the TPM is
    /// the credential; the node key is made in the TPM), or any attestor, a third party's
    /// included, with --evidence-file and --producer.
    #[arg(long, value_name = "ID", default_value = JOIN_TOKEN)]
    attestor: String,
    /// The first round's evidence for --attestor, sent as is (at most 256 KiB): what that
    /// attestor's documentation says to send. With --token-file too, the sealed token goes
    /// along.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["document_file", "userdata"])]
    evidence_file: Option<PathBuf>,
    /// The command that answers --attestor's challenges, run through /bin/sh -c: the
    /// challenge's payload on stdin, the next round's evidence on stdout (README: "Evidence
    /// producers").
    #[arg(long, value_name = "COMMAND", conflicts_with = "document_file")]
    producer: Option<String>,
    /// The TPM's TCTI (device:/dev/tpmrm0 on a host, swtpm:host=127.0.0.1,port=N for a
    /// software TPM): the node key is made there for every join. Default: device:/dev/tpmrm0
    /// when it exists (always with --attestor tpm), else a file key. `none`: a file key.
    #[arg(long, value_name = "TCTI")]
    tpm: Option<String>,
    /// With --attestor tpm: intermediate CA certificates (PEM) between the EK certificate and
    /// the attestor's ekRoots, sent with the EK certificate.
    #[arg(long, value_name = "FILE")]
    ek_chain: Option<PathBuf>,
    /// With --attestor tpm: the endorsement key to prove, a TCG EK profile template: rsa2048,
    /// ecc-p256, rsa3072 or ecc-p384. `auto` takes the first of those, in that order, whose
    /// EK certificate the TPM holds in NV. ecc-p256 is much faster than rsa2048 on a discrete
    /// TPM; the EK proven is the machine's identity, so keep the choice across re-joins.
    #[arg(long, value_name = "TEMPLATE", default_value = "auto", value_parser = parse_ek)]
    ek: String,
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

/// `--ek`: checked where the TPM code is built in; a build without it refuses every tpm join.
fn parse_ek(s: &str) -> Result<String, String> {
    #[cfg(feature = "tpm")]
    s.parse::<gatehouse_agent::tpm::EkSelection>()?;
    Ok(s.to_owned())
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

/// How a run failed: the exit code tells a bad invocation, a refusal, an unreachable host and
/// a host that is not the pinned one apart (README: exit codes).
#[derive(Debug)]
enum Failure {
    /// The command line or the files it names are unusable (exit 2).
    Usage(anyhow::Error),
    /// The join failed for another reason (a TPM error, an identity that could not be
    /// written), or the renewal loop could not go on (exit 1).
    Join(anyhow::Error),
    /// The host refused: a join answered ACCESS_DENIED, or `run` found that the certificate
    /// can no longer renew or re-join (exit 3).
    Refused(anyhow::Error),
    /// The host could not be reached, timed out or failed (HTTP 5xx) (exit 4).
    Unreachable(anyhow::Error),
    /// The host is not the one the trust file pins: its TLS certificate is not from the
    /// pinned CA, or its answer is not signed by the pinned key or does not verify (exit 5).
    Trust(anyhow::Error),
    /// `--reset` without `--yes`: nothing was done (exit 2).
    Unconfirmed,
    /// `doctor` found a failing check (exit 1); the checks were printed.
    Checks,
}

impl Failure {
    /// The error, for the failures that carry one.
    fn error(&self) -> Option<&anyhow::Error> {
        match self {
            Failure::Join(e)
            | Failure::Usage(e)
            | Failure::Refused(e)
            | Failure::Unreachable(e)
            | Failure::Trust(e) => Some(e),
            Failure::Unconfirmed | Failure::Checks => None,
        }
    }

    fn exit_code(&self) -> u8 {
        match self {
            Failure::Join(_) | Failure::Checks => 1,
            Failure::Usage(_) | Failure::Unconfirmed => 2,
            Failure::Refused(_) => 3,
            Failure::Unreachable(_) => 4,
            Failure::Trust(_) => 5,
        }
    }
}

/// The failure (and exit code) of a failed join or renewal exchange.
fn join_failure(e: gatehouse_agent::JoinError) -> Failure {
    use gatehouse_agent::JoinError;
    match &e {
        JoinError::Denied => Failure::Refused(e.into()),
        JoinError::Untrusted(_) => Failure::Trust(e.into()),
        JoinError::Transport(_) => Failure::Unreachable(e.into()),
        JoinError::Host { status, .. } if *status >= 500 => Failure::Unreachable(e.into()),
        JoinError::Response(_) => Failure::Trust(e.into()),
        _ => Failure::Join(e.into()),
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

/// What a join proves itself with.
enum Credential {
    /// A join token (from --token-file or the user data).
    Token(TokenString),
    /// The identity document a cloud signed (cloud-iid), no token.
    Document(gatehouse_proto::cloud_iid::CloudIidEvidence),
    /// The TPM.
    Tpm,
    /// Evidence from outside the agent (--evidence-file, --producer), for any attestor, with
    /// the token when one was given.
    External {
        /// The first round's evidence.
        evidence: Vec<u8>,
        /// The token sent along, if any.
        token: Option<TokenString>,
    },
}

/// The credential `args` ask for: `--attestor tpm` reads no token and refuses one;
/// `--document-file` joins on a cloud document; every other join needs `--token-file` or
/// `--userdata`.
fn credential(args: &JoinArgs) -> Result<Credential, Failure> {
    if args.attestor == TPM {
        if args.token_file.is_some() || args.userdata.is_some() || args.document_file.is_some() {
            return Err(usage(anyhow::anyhow!(
                "--token-file with --attestor tpm: the TPM is the credential, no token is read"
            )));
        }
        if args.tpm.as_deref() == Some("none") {
            return Err(usage(anyhow::anyhow!(
                "--tpm none with --attestor tpm: the TPM is the credential"
            )));
        }
        return Ok(Credential::Tpm);
    }
    if args.evidence_file.is_some() || args.producer.is_some() {
        if args.attestor == JOIN_TOKEN {
            return Err(usage(anyhow::anyhow!(
                "--evidence-file and --producer are for another attestor: name it with --attestor"
            )));
        }
        let evidence = match &args.evidence_file {
            Some(file) => {
                let bytes = std::fs::read(file)
                    .with_context(|| file.display().to_string())
                    .map_err(usage)?;
                if bytes.len() > gatehouse_agent::MAX_ANSWER {
                    return Err(usage(anyhow::anyhow!(
                        "{}: evidence is at most {} bytes",
                        file.display(),
                        gatehouse_agent::MAX_ANSWER
                    )));
                }
                bytes
            }
            None => Vec::new(),
        };
        let token = match &args.token_file {
            Some(file) => Some(
                TokenString::parse(&read(file)?)
                    .with_context(|| file.display().to_string())
                    .map_err(usage)?,
            ),
            None => None,
        };
        return Ok(Credential::External { evidence, token });
    }
    if let Some(document) = &args.document_file {
        let evidence =
            CloudIidProducer::from_files(document, args.provider, args.signature_file.as_deref())
                .map_err(usage)?;
        return Ok(Credential::Document(evidence));
    }
    match (&args.token_file, &args.userdata) {
        (Some(file), _) => Ok(Credential::Token(
            TokenString::parse(&read(file)?)
                .with_context(|| file.display().to_string())
                .map_err(usage)?,
        )),
        (None, Some(userdata)) => Ok(Credential::Token(
            gatehouse_proto::userdata::token_from_userdata(&read(userdata)?)
                .with_context(|| userdata.display().to_string())
                .map_err(usage)?,
        )),
        (None, None) => Err(usage(anyhow::anyhow!(
            "--token-file (or --userdata, or --document-file) is required, except with \
             --attestor tpm"
        ))),
    }
}

/// The certificates (DER) in a PEM file.
fn read_pem_chain(path: &Path) -> Result<Vec<Vec<u8>>, Failure> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject as _;
    CertificateDer::pem_slice_iter(read(path)?.as_bytes())
        .map(|c| c.map(|c| c.to_vec()))
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("{}: not PEM certificates", path.display()))
        .map_err(usage)
}

/// Refuses, in a build without TPM support, a command line that asks for the TPM (`what`
/// names the option): a usage error (exit 2), before anything is read or moved.
fn refuse_without_tpm_support(asks_for_tpm: bool, what: &'static str) -> Result<(), Failure> {
    if asks_for_tpm && !TPM_SUPPORT {
        return Err(usage(NoTpmSupport(what)));
    }
    Ok(())
}

/// Whether a `--tpm` value names a TPM (anything but `none`).
fn names_a_tpm(tcti: Option<&str>) -> bool {
    tcti.is_some_and(|t| t != "none")
}

/// Opens the TPM at `tcti`; a TPM that cannot be opened is [`Failure::Join`].
#[cfg(feature = "tpm")]
fn open_tpm(tcti: &str) -> Result<Tpm, Failure> {
    Tpm::open(tcti).map_err(|e| Failure::Join(e.into()))
}

/// A build without TPM support opens none: [`NoTpmSupport`], a usage error.
#[cfg(not(feature = "tpm"))]
fn open_tpm(_tcti: &str) -> Result<Tpm, Failure> {
    Err(usage(NoTpmSupport("a TPM")))
}

/// The TPM reached through the helper at `socket`.
#[cfg(feature = "tpm")]
fn through_helper(socket: &Path) -> Result<Tpm, Failure> {
    Ok(Tpm::through_helper(socket))
}

/// A build without TPM support has no helper client: [`NoTpmSupport`], a usage error.
#[cfg(not(feature = "tpm"))]
fn through_helper(_socket: &Path) -> Result<Tpm, Failure> {
    Err(usage(NoTpmSupport("--helper")))
}

/// The TPM a new node key is made in: the one `--tpm` names (`none`: no TPM), else the
/// host's when its device exists, else none. A TPM that cannot be opened (a build without TPM
/// support opens none) is logged and the key made a file, except with `required` (a tpm join:
/// the TPM is the credential).
fn node_key_tpm(tcti: Option<&str>, required: bool) -> Result<Option<Tpm>, Failure> {
    let tcti = match tcti {
        Some("none") => return Ok(None),
        Some(t) => t,
        None if required || gatehouse_agent::host_has_tpm() => DEFAULT_TCTI,
        None => return Ok(None),
    };
    match open_tpm(tcti) {
        Ok(tpm) => Ok(Some(tpm)),
        Err(e) if required => Err(e),
        Err(e) => {
            let error = e.error().map(|e| format!("{e:#}")).unwrap_or_default();
            tracing::warn!(
                tcti,
                error,
                "cannot open the TPM; the node key will be a file"
            );
            Ok(None)
        }
    }
}

/// A tpm join with `tpm`: the node key is made in the TPM; if it cannot be, the join stops
/// rather than fall back to a file.
#[cfg(feature = "tpm")]
async fn tpm_join(
    client: &JoinClient,
    trust: &JoinTrust,
    tpm: Tpm,
    ek: &str,
    ek_chain: Vec<Vec<u8>>,
    options: &JoinOptions,
) -> Result<(NodeKey, Joined), Failure> {
    use gatehouse_agent::tpm::{EkSelection, TpmNodeKey, TpmProducer};
    let ek: EkSelection = ek.parse().map_err(|e: String| usage(anyhow::anyhow!(e)))?;
    // The node key is made in the TPM; if it cannot be, the join stops rather than fall back
    // to a file.
    let node_key = TpmNodeKey::generate(&tpm).map_err(|e| Failure::Join(e.into()))?;
    let mut producer = TpmProducer::new(tpm, Some(node_key.clone()))
        .with_ek_chain(ek_chain)
        .with_ek(ek);
    let key = NodeKey::Tpm(node_key);
    let joined = join(client, trust, &mut producer, None, &key, options)
        .await
        .map_err(join_failure)?;
    Ok((key, joined))
}

/// A build without TPM support has no TPM to join with (`tpm` has no value).
#[cfg(not(feature = "tpm"))]
async fn tpm_join(
    _client: &JoinClient,
    _trust: &JoinTrust,
    tpm: Tpm,
    _ek: &str,
    _ek_chain: Vec<Vec<u8>>,
    _options: &JoinOptions,
) -> Result<(NodeKey, Joined), Failure> {
    match tpm {}
}

/// What `join` finds in its directory before it joins.
enum Existing {
    /// Nothing (or nothing after a reset): join.
    Nothing,
    /// An identity that loads: the machine already joined as this node.
    Joined(String),
    /// Identity files that no longer load (why): they are moved aside, then the join runs.
    Broken(String),
}

/// Looks at the identity in `dir`: whether the machine already joined, or what is there no
/// longer loads. A node key in the TPM is derived in the TPM `tcti` names (or the host's);
/// a TPM that cannot be opened stops the join, since the identity might still be good.
fn existing_identity(dir: &Path, tcti: Option<&str>) -> Result<Existing, Failure> {
    if ensure_no_identity(dir).is_ok() {
        return Ok(Existing::Nothing);
    }
    let tpm = identity_tpm(dir, tcti.filter(|t| *t != "none"))?;
    match load_identity_with(dir, tpm.as_ref()) {
        Ok(loaded) => Ok(Existing::Joined(loaded.identity.node_id)),
        Err(e) => Ok(Existing::Broken(e.to_string())),
    }
}

async fn run_join(args: JoinArgs) -> Result<(), Failure> {
    refuse_without_tpm_support(args.attestor == TPM, "--attestor tpm")?;
    refuse_without_tpm_support(names_a_tpm(args.tpm.as_deref()), "--tpm")?;
    let trust = read_trust(&args.ca)?;
    let client = JoinClient::new(&args.server, &trust).map_err(usage)?;
    // With --reset the credential is read first, so that a reset happens only once the
    // invocation is known to be usable (a reset is not undone when the join fails; a later
    // plain join joins). Without, only once the machine is known not to have joined: an
    // upgrade run of the install script has no token left to read.
    let mut credential_read = if args.reset {
        Some(credential(&args)?)
    } else {
        None
    };
    if args.reset {
        reset(
            &args.out,
            args.yes,
            SystemTime::now(),
            &mut std::io::stdout(),
        )?;
    }
    // Before the join, and before any credential is used: a machine that already joined
    // answers so (the install script runs this on every upgrade), and a refused write must
    // not follow a spent token.
    match existing_identity(&args.out, args.tpm.as_deref())? {
        Existing::Nothing => {}
        Existing::Joined(node_id) => {
            println!("already joined as {node_id}");
            return Ok(());
        }
        Existing::Broken(why) => {
            tracing::warn!(dir = %args.out.display(), reason = %why,
                "the identity no longer loads; moving it aside and joining again");
            reset(&args.out, true, SystemTime::now(), &mut std::io::stdout())?;
        }
    }
    ensure_no_identity(&args.out).map_err(usage)?;
    let credential = match credential_read.take() {
        Some(c) => c,
        None => credential(&args)?,
    };
    let ek_chain = args
        .ek_chain
        .as_deref()
        .map(read_pem_chain)
        .transpose()?
        .unwrap_or_default();
    let options = JoinOptions {
        claims: Claims {
            macs: args.macs,
            product_uuid: args.product_uuid,
        },
        ..JoinOptions::default()
    };
    let is_tpm = matches!(credential, Credential::Tpm);
    let tpm = node_key_tpm(args.tpm.as_deref(), is_tpm)?;
    let (key, joined) = match (credential, tpm) {
        (Credential::Tpm, Some(tpm)) => {
            tpm_join(&client, &trust, tpm, &args.ek, ek_chain, &options).await?
        }
        (Credential::Tpm, None) => {
            return Err(usage(anyhow::anyhow!("--attestor tpm needs a TPM")));
        }
        (Credential::Token(token), tpm) => {
            let key =
                NodeKey::generate_for_host(tpm.as_ref()).map_err(|e| Failure::Join(e.into()))?;
            let mut producer = TokenProducer::for_attestor(&args.attestor, args.role);
            let joined = join(&client, &trust, &mut producer, Some(&token), &key, &options)
                .await
                .map_err(join_failure)?;
            (key, joined)
        }
        (Credential::External { evidence, token }, tpm) => {
            let key =
                NodeKey::generate_for_host(tpm.as_ref()).map_err(|e| Failure::Join(e.into()))?;
            let mut producer =
                ExternalProducer::new(&args.attestor, args.role, evidence, args.producer.clone());
            let joined = join(
                &client,
                &trust,
                &mut producer,
                token.as_ref(),
                &key,
                &options,
            )
            .await
            .map_err(join_failure)?;
            (key, joined)
        }
        (Credential::Document(evidence), tpm) => {
            let key =
                NodeKey::generate_for_host(tpm.as_ref()).map_err(|e| Failure::Join(e.into()))?;
            // The default attestor takes tokens; a document is cloud-iid's.
            let attestor = if args.attestor == JOIN_TOKEN {
                CLOUD_IID
            } else {
                args.attestor.as_str()
            };
            let mut producer = CloudIidProducer::new(attestor, args.role, evidence);
            let joined = join(&client, &trust, &mut producer, None, &key, &options)
                .await
                .map_err(join_failure)?;
            (key, joined)
        }
    };
    let identity = write_identity(&args.out, &key, &joined)
        .context("joined, but the identity could not be written")
        .map_err(Failure::Join)?;
    if let Some(updated) = &joined.trust {
        // The host's keys were rotated: `run` pins what it vouched for (the directory exists
        // now). Were this lost, the next renewal inside the window brings them again.
        gatehouse_agent::save_trust(&args.out, updated)
            .context("joined, but the host's rotated keys could not be stored")
            .map_err(Failure::Join)?;
    }
    println!("node id: {}", identity.node_id);
    println!("SPIFFE ID: {}", identity.spiffe_id);
    println!(
        "node key: {}",
        if key.in_tpm() { "in the TPM" } else { "a file" }
    );
    Ok(())
}

/// A build without TPM support has no helper to run.
#[cfg(not(feature = "tpm"))]
async fn run_helper(_args: HelperArgs) -> Result<(), Failure> {
    Err(usage(NoTpmSupport("gatehouse-agent helper")))
}

#[cfg(feature = "tpm")]
async fn run_helper(args: HelperArgs) -> Result<(), Failure> {
    use std::os::unix::fs::PermissionsExt as _;
    let tpm = open_tpm(&args.tpm)?;
    match std::fs::remove_file(&args.socket) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(usage(
                anyhow::Error::from(e).context(args.socket.display().to_string()),
            ));
        }
    }
    let listener = tokio::net::UnixListener::bind(&args.socket)
        .with_context(|| args.socket.display().to_string())
        .map_err(usage)?;
    std::fs::set_permissions(&args.socket, std::fs::Permissions::from_mode(0o660))
        .with_context(|| args.socket.display().to_string())
        .map_err(Failure::Join)?;
    tracing::info!(socket = %args.socket.display(), tcti = %args.tpm, "serving the TPM");
    tokio::select! {
        r = gatehouse_agent::tpm::helper::serve(listener, tpm) => {
            r.context("the helper's socket failed").map_err(Failure::Join)?;
        }
        () = shutdown() => {}
    }
    let _ = std::fs::remove_file(&args.socket);
    tracing::info!("stopped");
    Ok(())
}

/// `at` in ms since the Unix epoch (0 before it).
fn unix_ms(at: SystemTime) -> i64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn run_status(args: StatusArgs) -> Result<(), Failure> {
    let now = unix_ms(SystemTime::now());
    let status = gatehouse_agent::status(&args.dir, now).map_err(|e| Failure::Join(e.into()))?;
    if args.json {
        let text = serde_json::to_string(&status).map_err(|e| Failure::Join(e.into()))?;
        println!("{text}");
    } else {
        println!("{}", status.line(now));
    }
    Ok(())
}

async fn run_site(args: SiteArgs) -> Result<(), Failure> {
    let trust = read_trust(&args.ca)?;
    // Fail early on a directory without an identity, and on an unusable server URL.
    gatehouse_agent::load_identity(&args.dir).map_err(usage)?;
    JoinClient::new(&args.server, &trust).map_err(usage)?;
    let site = SiteLoop {
        server: args.server,
        trust,
        dir: args.dir,
        site_id: args.site,
        boots: args.boots,
        out: args.out,
        lease_ttl: args.lease_ttl,
    };
    site.run(shutdown())
        .await
        .map_err(|e| Failure::Join(e.into()))?;
    tracing::info!("stopped");
    Ok(())
}

async fn run_ramdisk(args: RamdiskArgs) -> Result<(), Failure> {
    let trust = read_trust(&args.ca)?;
    let creds = read_cmdline(&read(&args.cmdline)?)
        .with_context(|| args.cmdline.display().to_string())
        .map_err(usage)?;
    let client = JoinClient::new(&args.server, &trust).map_err(usage)?;
    ensure_no_identity(&args.out).map_err(usage)?;
    let local = local_claims(Path::new("/sys"));
    let claims = Claims {
        macs: if args.macs.is_empty() {
            local.macs
        } else {
            args.macs
        },
        product_uuid: args.product_uuid.or(local.product_uuid),
    };
    // A ramdisk's key too lives in the TPM when the machine has one.
    let tpm = node_key_tpm(None, false)?;
    let key = NodeKey::generate_for_host(tpm.as_ref()).map_err(|e| Failure::Join(e.into()))?;
    let options = JoinOptions {
        claims,
        ..JoinOptions::default()
    };
    let mut producer = DiscoveryProducer::new(&creds.assertion);
    let joined = join(
        &client,
        &trust,
        &mut producer,
        Some(&creds.token),
        &key,
        &options,
    )
    .await
    .map_err(join_failure)?;
    let identity = write_identity(&args.out, &key, &joined)
        .context("joined, but the identity could not be written")
        .map_err(Failure::Join)?;
    if let Some(updated) = &joined.trust {
        // The host's keys were rotated: `run` pins what it vouched for (the directory exists
        // now). Were this lost, the next renewal inside the window brings them again.
        gatehouse_agent::save_trust(&args.out, updated)
            .context("joined, but the host's rotated keys could not be stored")
            .map_err(Failure::Join)?;
    }
    println!("node id: {}", identity.node_id);
    println!("SPIFFE ID: {}", identity.spiffe_id);
    if key.in_tpm() {
        println!("node key: in the TPM");
    }
    Ok(())
}

/// The TPM a command on `dir` needs: the one `--tpm` names (`none`: no TPM), else the host's
/// TPM when the node key is in the TPM or the certificate names an AK (failing when it cannot
/// be opened), else the host's TPM when its device exists (logged and left out when it cannot
/// be opened: a file key renews without it); none otherwise.
fn identity_tpm(dir: &Path, tcti: Option<&str>) -> Result<Option<Tpm>, Failure> {
    let needs = || {
        let key_in_tpm = std::fs::read_to_string(dir.join(gatehouse_agent::KEY_FILE))
            .is_ok_and(|t| KeyPlace::of_file_text(&t) == KeyPlace::Tpm);
        let names_ak = std::fs::read(dir.join(gatehouse_agent::CERT_FILE))
            .ok()
            .and_then(|pem| {
                use rustls::pki_types::CertificateDer;
                use rustls::pki_types::pem::PemObject as _;
                CertificateDer::pem_slice_iter(&pem).next()?.ok()
            })
            .is_some_and(|leaf| gatehouse_agent::ak_name(&leaf).is_some());
        key_in_tpm || names_ak
    };
    let tcti = match tcti {
        Some("none") => return Ok(None),
        Some(t) => t,
        None if needs() => DEFAULT_TCTI,
        None => return node_key_tpm(None, false),
    };
    open_tpm(tcti).map(Some)
}

async fn run_doctor(args: DoctorArgs) -> Result<(), Failure> {
    refuse_without_tpm_support(args.helper.is_some(), "--helper")?;
    refuse_without_tpm_support(names_a_tpm(args.tpm.as_deref()), "--tpm")?;
    let mut failed = false;
    let tpm = if let Some(socket) = &args.helper {
        let tpm = through_helper(socket)?;
        let device = Path::new(gatehouse_agent::TPM_DEVICE);
        if gatehouse_agent::can_open_device(device) {
            println!(
                "FAIL tpm: this user can open {} itself; under the helper the agent's user must \
                 not (take it out of the tss group, run it as its own user)",
                device.display()
            );
            failed = true;
        } else {
            println!(
                "ok   tpm: reached through the helper at {}; this user cannot open {}",
                socket.display(),
                device.display()
            );
        }
        Ok(Some(tpm))
    } else {
        identity_tpm(&args.dir, args.tpm.as_deref())
    };
    let tpm = match tpm {
        Ok(tpm) => tpm,
        Err(Failure::Join(e) | Failure::Usage(e)) => {
            println!("FAIL tpm: {e:#}");
            failed = true;
            None
        }
        Err(other) => return Err(other),
    };
    let mut checks = gatehouse_agent::doctor(&args.dir, tpm.as_ref());
    match (&args.server, &args.ca) {
        (Some(server), Some(ca)) => {
            // The CRL is the host's current node CA's: after a rotation, the pinned keys.
            let trust = gatehouse_agent::pinned_trust(&args.dir, read_trust(ca)?).map_err(usage)?;
            if let Ok(loaded) = load_identity_with(&args.dir, tpm.as_ref()) {
                let crl = gatehouse_agent::fetch_crl(server, &trust).await;
                checks.push(gatehouse_agent::revocation_check(
                    &loaded.cert.serial,
                    crl,
                    &trust,
                    unix_ms(SystemTime::now()),
                ));
            }
        }
        _ => checks.push(gatehouse_agent::Check {
            name: "revocation",
            ok: true,
            warn: true,
            detail: "not checked: pass --server and --ca to check the host's CRL".into(),
        }),
    }
    for check in &checks {
        println!("{check}");
    }
    if !failed && checks.iter().all(|c| c.ok) {
        Ok(())
    } else {
        Err(Failure::Checks)
    }
}

async fn run_lifecycle(args: RunArgs) -> Result<(), Failure> {
    refuse_without_tpm_support(args.helper.is_some(), "--helper")?;
    refuse_without_tpm_support(names_a_tpm(args.tpm.as_deref()), "--tpm")?;
    // The keys the host last vouched for, when they are newer than the trust file's.
    let trust = gatehouse_agent::pinned_trust(&args.dir, read_trust(&args.ca)?).map_err(usage)?;
    let policy = RenewPolicy {
        renew_when_left: args.renew_when_left,
        backoff_min: args.backoff_min,
        backoff_max: args.backoff_max,
        jitter: args.jitter,
        rejoin_grace: args.rejoin_grace,
        min_interval: args.min_interval,
    };
    policy.validate().map_err(usage)?;
    let tpm = match &args.helper {
        Some(socket) => Some(through_helper(socket)?),
        None => identity_tpm(&args.dir, args.tpm.as_deref())?,
    };
    // Fail early on a directory without an identity, and on an unusable server URL.
    let loaded = load_identity_with(&args.dir, tpm.as_ref()).map_err(usage)?;
    JoinClient::new(&args.server, &trust).map_err(usage)?;
    tracing::info!(
        node_id = %loaded.identity.node_id,
        serial = %loaded.cert.serial,
        dir = %args.dir.display(),
        "keeping the node certificate renewed"
    );
    let lifecycle = Lifecycle::new(&args.server, trust, args.dir, policy)
        .with_trust_file(args.ca.clone())
        .with_join_options(JoinOptions {
            claims: Claims {
                macs: args.macs,
                product_uuid: args.product_uuid,
            },
            ..JoinOptions::default()
        });
    let lifecycle = match tpm {
        #[cfg(feature = "tpm")]
        Some(tpm) => lifecycle.with_tpm(tpm),
        #[cfg(not(feature = "tpm"))]
        Some(tpm) => match tpm {},
        None => lifecycle,
    };
    lifecycle.run(shutdown()).await.map_err(|e| match e {
        e @ gatehouse_agent::LifecycleError::CannotRejoin { .. } => Failure::Refused(e.into()),
        e => Failure::Join(e.into()),
    })?;
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
    use std::io::IsTerminal as _;
    let cli = Cli::parse();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("GATEHOUSE_AGENT_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
    }
    let result = match cli.command {
        Command::Join(args) => run_join(args).await,
        Command::Run(args) => run_lifecycle(args).await,
        Command::Site(args) => run_site(args).await,
        Command::Ramdisk(args) => run_ramdisk(args).await,
        Command::Doctor(args) => run_doctor(args).await,
        Command::Status(args) => run_status(args),
        Command::Helper(args) => run_helper(args).await,
        Command::InstallScript(args) => run_install_script(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            match failure.error() {
                Some(e) => eprintln!(
                    "gatehouse-agent: {}",
                    gatehouse_agent::error_line(e.as_ref())
                ),
                None if matches!(failure, Failure::Unconfirmed) => eprintln!(
                    "gatehouse-agent: --reset moved nothing; run again with --reset --yes to move \
                     these aside and join"
                ),
                None => {}
            }
            ExitCode::from(failure.exit_code())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn the_version_names_the_build_as_the_install_script_reads_it() {
        let version = Cli::command().render_version();
        assert_eq!(
            version.contains(gatehouse_agent::install_script::TPM_BUILD_MARK),
            TPM_SUPPORT,
            "{version}"
        );
    }

    #[test]
    fn evidence_and_producer_are_for_a_named_attestor() {
        let dir = tempfile::tempdir().unwrap();
        let evidence = dir.path().join("evidence.json");
        std::fs::write(&evidence, b"{\"hostKey\":\"k\"}").unwrap();
        let parse = |extra: &[&str]| {
            let mut argv = vec![
                "gatehouse-agent",
                "join",
                "--server",
                "https://h:8443",
                "--ca",
                "trust.json",
                "--out",
                "d",
                "--evidence-file",
                evidence.to_str().unwrap(),
            ];
            argv.extend_from_slice(extra);
            let Command::Join(args) = Cli::try_parse_from(argv).unwrap().command else {
                panic!("not a join")
            };
            args
        };
        // Without --attestor, the evidence would go to join-token: a usage error.
        let Err(Failure::Usage(e)) = credential(&parse(&[])) else {
            panic!("--evidence-file without --attestor must be a usage error")
        };
        assert!(e.to_string().contains("--attestor"), "{e}");
        let args = parse(&["--attestor", "ssh-host-key", "--producer", "answer --x"]);
        assert_eq!(args.producer.as_deref(), Some("answer --x"));
        let Ok(Credential::External { evidence, token }) = credential(&args) else {
            panic!("an external credential")
        };
        assert_eq!(evidence, b"{\"hostKey\":\"k\"}");
        assert!(token.is_none());
        // --document-file is cloud-iid's own evidence: not both.
        let argv = [
            "gatehouse-agent",
            "join",
            "--server",
            "https://h:8443",
            "--ca",
            "t",
            "--out",
            "d",
            "--attestor",
            "x",
            "--producer",
            "p",
            "--document-file",
            "doc",
        ];
        assert!(Cli::try_parse_from(argv).is_err());
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
    fn a_tpm_join_reads_no_token() {
        let base = [
            "gatehouse-agent",
            "join",
            "--server",
            "https://h",
            "--ca",
            "c",
            "--out",
            "d",
            "--attestor",
            "tpm",
        ];
        let cli = Cli::try_parse_from(base).unwrap();
        let Command::Join(args) = cli.command else {
            panic!("a join")
        };
        assert_eq!(args.tpm, None);
        assert!(matches!(credential(&args), Ok(Credential::Tpm)));
        let cli = Cli::try_parse_from(base.iter().copied().chain([
            "--token-file",
            "t",
            "--tpm",
            "swtpm:port=2321",
        ]))
        .unwrap();
        let Command::Join(args) = cli.command else {
            panic!("a join")
        };
        assert_eq!(args.tpm.as_deref(), Some("swtpm:port=2321"));
        let failure = credential(&args).err().unwrap();
        assert_eq!(failure.exit_code(), 2, "a token with --attestor tpm");
        let cli =
            Cli::try_parse_from(["gatehouse-agent", "doctor", "--dir", "d", "--tpm", "swtpm:"])
                .unwrap();
        assert!(matches!(
            cli.command,
            Command::Doctor(DoctorArgs { tpm: Some(_), .. })
        ));
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
        let cli = Cli::try_parse_from(base).unwrap();
        let Command::Join(args) = cli.command else {
            panic!("a join")
        };
        let failure = credential(&args).err().unwrap();
        assert_eq!(failure.exit_code(), 2, "missing --token-file");
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
    fn a_provisioned_join_reads_its_token_from_the_user_data() {
        let dir = tempfile::tempdir().unwrap();
        let token = TokenString {
            id: "tok_p".into(),
            secret: vec![3; 32],
        };
        let rendered = gatehouse_proto::userdata::render(&gatehouse_proto::userdata::Userdata {
            workflow_id: "wf_1",
            node_id: "node_1",
            token: &token.to_text(),
            server_url: "https://h:8443",
        })
        .unwrap();
        let path = dir.path().join("user-data");
        std::fs::write(&path, rendered).unwrap();
        let path = path.display().to_string();
        let base = [
            "gatehouse-agent",
            "join",
            "--server",
            "https://h",
            "--ca",
            "c",
            "--out",
            "d",
            "--attestor",
            "provisioned",
        ];
        let cli = Cli::try_parse_from(base.iter().copied().chain(["--userdata", &path])).unwrap();
        let Command::Join(args) = cli.command else {
            panic!("a join")
        };
        assert_eq!(args.attestor, "provisioned");
        let Ok(Credential::Token(read)) = credential(&args) else {
            panic!("no token read from the user data")
        };
        assert_eq!(read, token);
        let both = base
            .iter()
            .copied()
            .chain(["--userdata", &path, "--token-file", "t"]);
        assert_eq!(Cli::try_parse_from(both).unwrap_err().exit_code(), 2);
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
                jitter: args.jitter,
                rejoin_grace: args.rejoin_grace,
                min_interval: args.min_interval,
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
    fn exit_codes_tell_refused_unreachable_and_trust_apart() {
        use gatehouse_agent::{JoinError, ResponseError};
        assert_eq!(join_failure(JoinError::Denied).exit_code(), 3);
        let host = |status| JoinError::Host {
            status,
            code: String::new(),
            message: String::new(),
        };
        assert_eq!(join_failure(host(503)).exit_code(), 4);
        assert_eq!(join_failure(host(400)).exit_code(), 1);
        assert_eq!(
            join_failure(JoinError::Response(ResponseError::BadSignature)).exit_code(),
            5
        );
        assert_eq!(join_failure(JoinError::TooManyChallenges).exit_code(), 1);
        let cert = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let io = std::io::Error::other(cert);
        assert!(gatehouse_agent::is_tls_trust_error(&io));
        assert!(!gatehouse_agent::is_tls_trust_error(
            &std::io::Error::other("connection refused")
        ));
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
