//! `gatehouse attestors check` and `gatehouse attestors try`: what an attestor's author runs
//! before an operator drops the component into `attestors_dir`.
//!
//! Both load the component exactly as the host does (the same engine settings, WIT version
//! check, `describe`, pin-free `configure` with the given configuration) into a runtime of
//! their own over a scratch SQLite database in a temporary directory, so nothing they do
//! touches a real host.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};
use sha2::{Digest as _, Sha256};

use super::admin;
use crate::imports::{BackendError, ConsumeOutcome, Session, Staged, TxBackend, UseOutcome};
use crate::pki::Pki;
use crate::runtime::bindings::transaction::{
    Inventory, JoinRequestRow, Lease, Node, NodeCert, Token, Workflow,
};
use crate::runtime::bindings::types::{
    self as wit, HardwareClaims, JoinRole, OpenedToken, Outcome,
};
use crate::runtime::{AttestorSettings, AttestorSummary, Fault, Runtime, RuntimeConfig, Source};
use crate::store::Db;

#[derive(Debug, Subcommand)]
pub(super) enum Command {
    #[command(flatten)]
    Admin(admin::AttestorsCommand),
    /// Loads a component as the host would (WIT version, describe, configure) and runs a
    /// conformance pass on fuzzed evidence: every call must end in a well-formed outcome within
    /// the deadline and the memory cap. Exits non-zero on any failure.
    Check(CheckArgs),
    /// Runs one round of a component on the given evidence against a scratch database and
    /// prints its outcome and every transaction call it made.
    Try(TryArgs),
}

/// What `check` and `try` share: the component and how to load it.
#[derive(Debug, Args)]
struct Component {
    /// The component (`.wasm`).
    file: PathBuf,
    /// The attestor's configuration: a TOML table (as under `[attestors.<id>.config]`) or a
    /// JSON object.
    #[arg(long)]
    config: Option<PathBuf>,
    /// The guest deadline of one call, in ms (the host's default).
    #[arg(long, default_value_t = 250)]
    call_timeout_ms: u64,
    /// The memory cap of one instance, in MiB (the host's default).
    #[arg(long, default_value_t = 64)]
    memory_limit_mib: usize,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(super) struct CheckArgs {
    #[command(flatten)]
    component: Component,
    /// Evidence to mutate (bit flips, truncations, insertions, splices) besides random bytes.
    #[arg(long)]
    evidence: Option<PathBuf>,
    /// How many fuzzed cases to run (the fixed cases run besides).
    #[arg(long, default_value_t = 200)]
    cases: u32,
    /// The random seed (a report names it, so a failure can be run again).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write the evidence of every failed case into this directory (one file per case), for
    /// `gatehouse attestors try --evidence`.
    #[arg(long)]
    save_failures: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(super) struct TryArgs {
    #[command(flatten)]
    component: Component,
    /// The evidence (the join request's attestation bytes).
    #[arg(long)]
    evidence: PathBuf,
    /// The round number.
    #[arg(long, default_value_t = 1)]
    round: u8,
    /// The role the machine asks for: node, site or ramdisk.
    #[arg(long, default_value = "node")]
    role: String,
}

/// Runs the command; `check` and `try` write their report to `out`.
pub(super) async fn run(
    command: Command,
    out: &mut (dyn std::io::Write + Send),
) -> anyhow::Result<()> {
    match command {
        Command::Admin(command) => admin::attestors(command, out).await,
        Command::Check(args) => check(args, out).await,
        Command::Try(args) => try_one(args, out).await,
    }
}

/// A runtime holding only the component, over a scratch database.
struct Scratch {
    _dir: tempfile::TempDir,
    db: Db,
    pki: Arc<Pki>,
    runtime: Runtime<Traced<Staged>>,
    summary: AttestorSummary,
    csr: crate::pki::VerifiedCsr,
}

/// A load step's result, for the report.
#[derive(Debug, serde::Serialize)]
struct Step {
    step: &'static str,
    ok: bool,
    detail: String,
}

/// Loads the component as the host would; the steps it passed, and the loaded runtime unless
/// a step failed.
async fn load(c: &Component) -> anyhow::Result<(Vec<Step>, Option<Scratch>)> {
    let wasm = std::fs::read(&c.file).with_context(|| format!("reading {}", c.file.display()))?;
    let config = match &c.config {
        Some(path) => attestor_config(path)?,
        None => serde_json::Value::Null,
    };
    let dir = tempfile::tempdir().context("creating a scratch directory")?;
    let attestors = dir.path().join("attestors");
    std::fs::create_dir(&attestors).context("creating a scratch directory")?;
    let db = Db::connect(&crate::store::sqlite_url(&dir.path().join("scratch.db"))?).await?;
    db.migrate().await?;
    let pki = Arc::new(Pki::generate("check.invalid")?);
    let mut runtime_config = RuntimeConfig {
        call_timeout: Duration::from_millis(c.call_timeout_ms),
        memory_limit: c.memory_limit_mib << 20,
        max_concurrent_calls: 4,
        // Compiled once: the load below deserializes what the inspection compiled.
        cache_dir: Some(dir.path().join("cache")),
        ..RuntimeConfig::default()
    };
    let runtime: Runtime<Traced<Staged>> = Runtime::load(&runtime_config, &[]).await?;
    let mut steps = Vec::new();
    let summary = match runtime.inspect(Source::File(c.file.clone()), &wasm).await {
        Ok(summary) => summary,
        Err(e) => {
            steps.push(Step {
                step: "load (compile, WIT version, link, describe)",
                ok: false,
                detail: e.to_string(),
            });
            return Ok((steps, None));
        }
    };
    steps.push(Step {
        step: "load (compile, WIT version, link, describe)",
        ok: true,
        detail: format!(
            "id {}, version {}, {} round(s), sha256 {}",
            summary.id, summary.version, summary.rounds, summary.sha256
        ),
    });
    let name = c
        .file
        .file_name()
        .map_or_else(|| "component.wasm".into(), |n| n.to_os_string());
    std::fs::copy(&c.file, attestors.join(&name)).context("copying the component")?;
    runtime_config.attestors_dir = Some(attestors);
    runtime_config.attestors.insert(
        summary.id.clone(),
        AttestorSettings {
            config,
            ..AttestorSettings::default()
        },
    );
    let reload = runtime.reload(&runtime_config).await;
    if let Some(failed) = reload
        .changes
        .iter()
        .find(|c| c.kind == crate::runtime::ChangeKind::LoadFailed)
    {
        steps.push(Step {
            step: "configure",
            ok: false,
            detail: failed.reason.clone().unwrap_or_default(),
        });
        return Ok((steps, None));
    }
    steps.push(Step {
        step: "configure",
        ok: true,
        detail: "accepted its configuration".into(),
    });
    let key = gatehouse_agent::NodeKey::generate()?;
    let csr = crate::pki::verify_csr(&gatehouse_agent::build_csr(&key)?)?;
    Ok((
        steps,
        Some(Scratch {
            _dir: dir,
            db,
            pki,
            runtime,
            summary,
            csr,
        }),
    ))
}

/// The attestor's configuration from a TOML table or a JSON object.
fn attestor_config(path: &Path) -> anyhow::Result<serde_json::Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    if let Ok(json) = serde_json::from_str::<serde_json::Value>(&text) {
        return Ok(json);
    }
    let table: toml::Table = toml::from_str(&text)
        .with_context(|| format!("{}: neither JSON nor TOML", path.display()))?;
    Ok(serde_json::to_value(table)?)
}

impl Scratch {
    /// One call of the component on `evidence`: its result, its transaction calls, its time.
    async fn call(&self, case: &Case) -> Called {
        let trace = Arc::new(Mutex::new(Vec::new()));
        let id = self.summary.id.clone();
        let session = Session::new(
            id.clone(),
            Traced {
                inner: Staged::new(self.db.clone(), id.clone()),
                calls: trace.clone(),
            },
            self.pki.clone(),
            self.csr.sha256.to_vec(),
        );
        let request = wit::JoinRequest {
            attestor: id.clone(),
            role: case.role,
            attestation: case.evidence.clone(),
            token: case.token.clone(),
            csr_der: self.csr.der.clone(),
            csr_sha256: self.csr.sha256.to_vec(),
            csr_spki_sha256: self.csr.spki_sha256.to_vec(),
            claims: HardwareClaims {
                macs: vec!["02:00:00:00:00:01".into()],
                product_uuid: None,
            },
            round: case.round,
        };
        let call = self.runtime.verify(&id, session, &Arc::new(request)).await;
        let calls = trace.lock().unwrap_or_else(PoisonError::into_inner).clone();
        Called {
            result: call.result,
            calls,
            elapsed: call.elapsed,
        }
    }
}

struct Called {
    result: Result<Outcome, Fault>,
    calls: Vec<String>,
    elapsed: Duration,
}

/// One conformance case.
struct Case {
    name: String,
    evidence: Vec<u8>,
    token: Option<OpenedToken>,
    role: JoinRole,
    round: u8,
}

/// The fixed cases, then `n` random or mutated ones.
fn cases(seed: u64, n: u32, rounds: u8, sample: Option<&[u8]>) -> Vec<Case> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut fixed: Vec<(String, Vec<u8>)> = vec![
        ("empty".into(), vec![]),
        ("one-zero-byte".into(), vec![0]),
        ("json-empty-object".into(), b"{}".to_vec()),
        ("json-null".into(), b"null".to_vec()),
        ("json-truncated".into(), b"{\"a\":".to_vec()),
        ("json-deep-nesting".into(), vec![b'['; 64 * 1024]),
        (
            "der-huge-length".into(),
            vec![0x30, 0x84, 0xff, 0xff, 0xff, 0xff],
        ),
        ("not-utf8".into(), vec![0xff, 0xfe, 0xc0, 0x80]),
        // Just under the host's default request body limit, after base64.
        ("huge-random".into(), random_bytes(&mut rng, 190 * 1024)),
        ("huge-zeros".into(), vec![0; 190 * 1024]),
    ];
    if let Some(sample) = sample {
        fixed.insert(0, ("sample".into(), sample.to_vec()));
    }
    let mut out = Vec::new();
    let roles = [JoinRole::Node, JoinRole::Site, JoinRole::Ramdisk];
    let total = fixed.len() + n as usize;
    for i in 0..total {
        let (name, evidence) = match fixed.get(i) {
            Some((name, evidence)) => (name.clone(), evidence.clone()),
            None => match sample {
                Some(sample) if rng.random_bool(0.5) => {
                    (format!("mutated-{i}"), mutate(&mut rng, sample))
                }
                _ => {
                    let len = [0, 1, 8, 32, 100, 512, 4096, 65536][rng.random_range(0..8)];
                    (format!("random-{i}"), random_bytes(&mut rng, len))
                }
            },
        };
        let token = (i % 2 == 1).then(|| OpenedToken {
            id: format!("tok_check{:012x}", rng.random::<u64>() & 0xffff_ffff_ffff),
            secret: random_bytes(&mut rng, 32),
        });
        out.push(Case {
            name,
            evidence,
            token,
            role: roles[i % roles.len()],
            round: (i % usize::from(rounds.max(1))) as u8 + 1,
        });
    }
    out
}

fn random_bytes(rng: &mut StdRng, len: usize) -> Vec<u8> {
    let mut bytes = vec![0; len];
    rng.fill(&mut bytes[..]);
    bytes
}

/// `sample` changed the ways parsers break on: flipped bits, cut short, bytes inserted, a
/// piece repeated, a length field maxed out.
fn mutate(rng: &mut StdRng, sample: &[u8]) -> Vec<u8> {
    let mut bytes = sample.to_vec();
    for _ in 0..rng.random_range(1..4) {
        let len = bytes.len();
        match rng.random_range(0..5) {
            0 if len > 0 => {
                let at = rng.random_range(0..len);
                bytes[at] ^= 1 << rng.random_range(0..8);
            }
            1 if len > 0 => bytes.truncate(rng.random_range(0..len)),
            2 => {
                let at = rng.random_range(0..=len);
                let n = rng.random_range(1..64);
                let extra = random_bytes(rng, n);
                bytes.splice(at..at, extra);
            }
            3 if len > 0 => {
                let from = rng.random_range(0..len);
                let to = rng.random_range(from..=len.min(from + 4096));
                let piece = bytes[from..to].to_vec();
                bytes.splice(from..from, piece);
            }
            _ if len > 0 => {
                let at = rng.random_range(0..len);
                bytes[at] = 0xff;
            }
            _ => bytes.push(rng.random()),
        }
    }
    bytes
}

/// What one failed case was.
#[derive(Debug, serde::Serialize)]
struct Failure {
    case: String,
    round: u8,
    role: String,
    token: bool,
    evidence_bytes: usize,
    evidence_sha256: String,
    fault: String,
    saved_as: Option<PathBuf>,
}

/// What `check` reports.
#[derive(Debug, serde::Serialize)]
struct Report {
    file: PathBuf,
    attestor: Option<AttestorSummary>,
    load: Vec<Step>,
    seed: u64,
    cases: usize,
    refused: usize,
    deferred: usize,
    admitted: usize,
    refusal_codes: std::collections::BTreeMap<String, usize>,
    slowest_call_ms: f64,
    call_timeout_ms: u64,
    failures: Vec<Failure>,
    /// Admissions of fuzzed evidence: not a fault, but worth a look.
    warnings: Vec<String>,
    /// The pass stopped early after this many failures.
    stopped_early: bool,
    passed: bool,
}

/// After this many failures the pass stops (a component that spins to its deadline on every
/// case would otherwise take minutes to say so).
const MAX_FAILURES: usize = 10;

async fn check(args: CheckArgs, out: &mut (dyn std::io::Write + Send)) -> anyhow::Result<()> {
    let c = &args.component;
    let sample = match &args.evidence {
        Some(path) => {
            Some(std::fs::read(path).with_context(|| format!("reading {}", path.display()))?)
        }
        None => None,
    };
    let (steps, scratch) = load(c).await?;
    let mut report = Report {
        file: c.file.clone(),
        attestor: scratch.as_ref().map(|s| s.summary.clone()),
        load: steps,
        seed: args.seed,
        cases: 0,
        refused: 0,
        deferred: 0,
        admitted: 0,
        refusal_codes: Default::default(),
        slowest_call_ms: 0.0,
        call_timeout_ms: c.call_timeout_ms,
        failures: Vec::new(),
        warnings: Vec::new(),
        stopped_early: false,
        passed: false,
    };
    if let Some(scratch) = &scratch {
        if let Some(dir) = &args.save_failures {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let all = cases(
            args.seed,
            args.cases,
            scratch.summary.rounds,
            sample.as_deref(),
        );
        for case in &all {
            if report.failures.len() >= MAX_FAILURES {
                report.stopped_early = true;
                break;
            }
            let called = scratch.call(case).await;
            report.cases += 1;
            let ms = called.elapsed.as_secs_f64() * 1e3;
            report.slowest_call_ms = report.slowest_call_ms.max(ms);
            match called.result {
                Ok(Outcome::Refused(r)) => {
                    report.refused += 1;
                    *report.refusal_codes.entry(r.reason).or_default() += 1;
                }
                Ok(Outcome::Deferred(_)) => report.deferred += 1,
                Ok(Outcome::Admitted(_)) => {
                    report.admitted += 1;
                    report.warnings.push(format!(
                        "case {} (round {}, {} bytes) was admitted: fuzzed evidence should not prove anything",
                        case.name,
                        case.round,
                        case.evidence.len()
                    ));
                }
                Err(fault) => {
                    let sha = hex::encode(Sha256::digest(&case.evidence));
                    let saved_as = match &args.save_failures {
                        Some(dir) => {
                            let path = dir.join(format!("{}.bin", case.name));
                            std::fs::write(&path, &case.evidence)
                                .with_context(|| format!("writing {}", path.display()))?;
                            Some(path)
                        }
                        None => None,
                    };
                    report.failures.push(Failure {
                        case: case.name.clone(),
                        round: case.round,
                        role: format!("{:?}", case.role).to_lowercase(),
                        token: case.token.is_some(),
                        evidence_bytes: case.evidence.len(),
                        evidence_sha256: sha,
                        fault: fault.to_string(),
                        saved_as,
                    });
                }
            }
        }
        scratch.db.close().await;
    }
    report.passed = report.load.iter().all(|s| s.ok) && report.failures.is_empty();
    if c.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        write!(out, "{}", text_report(&report))?;
    }
    if !report.passed {
        bail!(
            "{} does not pass: {}",
            c.file.display(),
            match report.load.iter().find(|s| !s.ok) {
                Some(step) => format!("{} failed", step.step),
                None => format!("{} fuzzed case(s) faulted", report.failures.len()),
            }
        );
    }
    Ok(())
}

fn text_report(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "component {}", r.file.display());
    for step in &r.load {
        let mark = if step.ok { "ok  " } else { "FAIL" };
        let _ = writeln!(out, "  {mark} {}: {}", step.step, step.detail);
    }
    if r.cases > 0 {
        let _ = writeln!(
            out,
            "  conformance (seed {}): {} case(s): {} refused, {} deferred, {} admitted, {} faulted{}",
            r.seed,
            r.cases,
            r.refused,
            r.deferred,
            r.admitted,
            r.failures.len(),
            if r.stopped_early {
                " (stopped early)"
            } else {
                ""
            }
        );
        let _ = writeln!(
            out,
            "  slowest call {:.1} ms of a {} ms deadline",
            r.slowest_call_ms, r.call_timeout_ms
        );
        if !r.refusal_codes.is_empty() {
            let codes: Vec<_> = r
                .refusal_codes
                .iter()
                .map(|(code, n)| format!("{code} ({n})"))
                .collect();
            let _ = writeln!(out, "  refusal codes: {}", codes.join(", "));
        }
    }
    for w in &r.warnings {
        let _ = writeln!(out, "  warn {w}");
    }
    for f in &r.failures {
        let _ = writeln!(
            out,
            "  FAIL case {} (round {}, role {}, {} token, {} bytes of evidence, sha256 {}): {}",
            f.case,
            f.round,
            f.role,
            if f.token { "a" } else { "no" },
            f.evidence_bytes,
            f.evidence_sha256,
            f.fault
        );
        if let Some(path) = &f.saved_as {
            let _ = writeln!(
                out,
                "       again: gatehouse attestors try {} --evidence {} --round {}",
                r.file.display(),
                path.display(),
                f.round
            );
        }
    }
    let _ = writeln!(out, "{}", if r.passed { "PASS" } else { "FAIL" });
    out
}

async fn try_one(args: TryArgs, out: &mut (dyn std::io::Write + Send)) -> anyhow::Result<()> {
    let c = &args.component;
    let evidence = std::fs::read(&args.evidence)
        .with_context(|| format!("reading {}", args.evidence.display()))?;
    let role = match args.role.as_str() {
        "node" => JoinRole::Node,
        "site" => JoinRole::Site,
        "ramdisk" => JoinRole::Ramdisk,
        other => bail!("--role must be node, site or ramdisk, not {other:?}"),
    };
    let (steps, scratch) = load(c).await?;
    let Some(scratch) = scratch else {
        for step in steps.iter().filter(|s| !s.ok) {
            writeln!(out, "{}: {}", step.step, step.detail)?;
        }
        bail!("{} does not load", c.file.display());
    };
    let called = scratch
        .call(&Case {
            name: "try".into(),
            evidence,
            token: None,
            role,
            round: args.round,
        })
        .await;
    scratch.db.close().await;
    let outcome = match &called.result {
        Ok(Outcome::Admitted(r)) => serde_json::json!({
            "admitted": {
                "nodeId": r.node_id, "tenantId": r.tenant_id, "poolId": r.pool_id,
                "siteId": r.site_id, "tokenId": r.token_id, "subject": r.subject,
                "nodeKeyUri": r.node_key_uri, "certTtlSeconds": r.cert_ttl_seconds,
                "bindings": r.bindings.iter().map(|b| format!("{}={}", b.kind, b.value)).collect::<Vec<_>>(),
            }
        }),
        Ok(Outcome::Deferred(d)) => serde_json::json!({ "deferred": format!("{d:?}") }),
        Ok(Outcome::Refused(r)) => serde_json::json!({
            "refused": { "reason": r.reason, "tokenId": r.token_id, "nodeId": r.node_id }
        }),
        Err(fault) => serde_json::json!({ "fault": fault.to_string() }),
    };
    if c.json {
        let json = serde_json::json!({
            "attestor": scratch.summary,
            "outcome": outcome,
            "transactionCalls": called.calls,
            "callMs": called.elapsed.as_secs_f64() * 1e3,
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&json)?)?;
    } else {
        writeln!(
            out,
            "attestor {} {} (sha256 {})",
            scratch.summary.id, scratch.summary.version, scratch.summary.sha256
        )?;
        writeln!(out, "transaction calls ({}):", called.calls.len())?;
        for call in &called.calls {
            writeln!(out, "  {call}")?;
        }
        writeln!(out, "outcome: {outcome}")?;
        writeln!(
            out,
            "call took {:.2} ms, on a scratch database: nothing was applied, and JoinService's own \
             policy (token bindings, placement, issuance) runs only in a host",
            called.elapsed.as_secs_f64() * 1e3
        )?;
    }
    Ok(())
}

/// A [`TxBackend`] that writes down every call and its result, for `try` to print.
pub(crate) struct Traced<B> {
    inner: B,
    calls: Arc<Mutex<Vec<String>>>,
}

/// Longest rendering of one call's arguments or result.
const MAX_TRACE: usize = 300;

impl<B> Traced<B> {
    fn note(&self, op: &str, args: String, result: &dyn std::fmt::Debug) {
        let mut result = format!("{result:?}");
        if result.len() > MAX_TRACE {
            let cut = (0..=MAX_TRACE)
                .rev()
                .find(|&i| result.is_char_boundary(i))
                .unwrap_or(0);
            result.truncate(cut);
            result.push('…');
        }
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(format!("{op}({args}) -> {result}"));
    }
}

/// Hex of at most the first 32 bytes, for arguments that are bytes.
fn short_hex(bytes: &[u8]) -> String {
    let head = hex::encode(&bytes[..bytes.len().min(32)]);
    if bytes.len() > 32 {
        format!("{head}… ({} bytes)", bytes.len())
    } else {
        head
    }
}

impl<B: TxBackend> TxBackend for Traced<B> {
    async fn now(&mut self) -> Result<i64, BackendError> {
        let r = self.inner.now().await;
        self.note("now", String::new(), &r);
        r
    }
    async fn lock_token(&mut self, id: &str) -> Result<Option<Token>, BackendError> {
        let r = self.inner.lock_token(id).await;
        self.note("lock-token", format!("{id:?}"), &r);
        r
    }
    async fn consume_token(&mut self, id: &str) -> Result<ConsumeOutcome, BackendError> {
        let r = self.inner.consume_token(id).await;
        self.note("consume-token", format!("{id:?}"), &r);
        r
    }
    async fn node(&mut self, id: &str) -> Result<Option<Node>, BackendError> {
        let r = self.inner.node(id).await;
        self.note("node", format!("{id:?}"), &r);
        r
    }
    async fn node_cert(&mut self, der: &[u8]) -> Result<Option<NodeCert>, BackendError> {
        let r = self.inner.node_cert(der).await;
        self.note("node-cert", short_hex(der), &r);
        r
    }
    async fn node_cert_for_key(
        &mut self,
        node_id: &str,
        spki_sha256: &[u8],
    ) -> Result<Option<NodeCert>, BackendError> {
        let r = self.inner.node_cert_for_key(node_id, spki_sha256).await;
        self.note(
            "node-cert-for-key",
            format!("{node_id:?}, {}", short_hex(spki_sha256)),
            &r,
        );
        r
    }
    async fn inventory_by_mac(&mut self, mac: &str) -> Result<Option<Inventory>, BackendError> {
        let r = self.inner.inventory_by_mac(mac).await;
        self.note("inventory-by-mac", format!("{mac:?}"), &r);
        r
    }
    async fn bound_node(
        &mut self,
        kind: &str,
        value: &str,
    ) -> Result<Option<String>, BackendError> {
        let r = self.inner.bound_node(kind, value).await;
        self.note("bound-node", format!("{kind:?}, {value:?}"), &r);
        r
    }
    async fn lease(&mut self, name: &str) -> Result<Option<Lease>, BackendError> {
        let r = self.inner.lease(name).await;
        self.note("lease", format!("{name:?}"), &r);
        r
    }
    async fn newest_inventory(&mut self, node_id: &str) -> Result<Option<Inventory>, BackendError> {
        let r = self.inner.newest_inventory(node_id).await;
        self.note("newest-inventory", format!("{node_id:?}"), &r);
        r
    }
    async fn token_workflow(&mut self, token_id: &str) -> Result<Option<Workflow>, BackendError> {
        let r = self.inner.token_workflow(token_id).await;
        self.note("token-workflow", format!("{token_id:?}"), &r);
        r
    }
    async fn record_use(
        &mut self,
        attestor: &str,
        subject: &str,
        expires_at: i64,
    ) -> Result<UseOutcome, BackendError> {
        let r = self.inner.record_use(attestor, subject, expires_at).await;
        self.note("record-use", format!("{subject:?}, {expires_at}"), &r);
        r
    }
    async fn open_join_request(
        &mut self,
        attestor: &str,
        subject: &str,
        csr_sha256: &[u8],
        details: &str,
    ) -> Result<JoinRequestRow, BackendError> {
        let r = self
            .inner
            .open_join_request(attestor, subject, csr_sha256, details)
            .await;
        self.note(
            "open-join-request",
            format!("{subject:?}, {}, {details:?}", short_hex(csr_sha256)),
            &r,
        );
        r
    }
    async fn join_request(
        &mut self,
        attestor: &str,
        id: &str,
    ) -> Result<Option<JoinRequestRow>, BackendError> {
        let r = self.inner.join_request(attestor, id).await;
        self.note("join-request", format!("{id:?}"), &r);
        r
    }
    async fn consume_join_request(
        &mut self,
        attestor: &str,
        id: &str,
    ) -> Result<bool, BackendError> {
        let r = self.inner.consume_join_request(attestor, id).await;
        self.note("consume-join-request", format!("{id:?}"), &r);
        r
    }
    async fn kv_get(&mut self, attestor: &str, key: &str) -> Result<Option<Vec<u8>>, BackendError> {
        let r = self.inner.kv_get(attestor, key).await;
        let shown = r.as_ref().map(|v| v.as_deref().map(short_hex));
        self.note("kv-get", format!("{key:?}"), &shown);
        r
    }
    async fn kv_put(
        &mut self,
        attestor: &str,
        key: &str,
        value: &[u8],
    ) -> Result<(), BackendError> {
        let r = self.inner.kv_put(attestor, key, value).await;
        self.note("kv-put", format!("{key:?}, {}", short_hex(value)), &r);
        r
    }
    async fn kv_delete(&mut self, attestor: &str, key: &str) -> Result<(), BackendError> {
        let r = self.inner.kv_delete(attestor, key).await;
        self.note("kv-delete", format!("{key:?}"), &r);
        r
    }
}
