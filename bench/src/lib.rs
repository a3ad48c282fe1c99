//! `gatehouse-bench` (also run as `gatehouse bench`): measured figures, one JSON line.
//!
//! A crate of its own so the production `gatehouse` binary links neither the guest crates the
//! benchmark calls natively (join-token, bench-tpm-verify), nor the SDK's test kit, nor the
//! benchmark's component; it reaches the host through the `gatehouse` library as the
//! integration tests do.
//!
//! - `token_joins_per_s_sqlite` / `_postgres`: end to end over HTTPS on loopback, `--agents`
//!   agents at once, each with its own single-use token (agent key generation, CSR, sealing and
//!   response verification included, on the same machine).
//!   `token_joins_per_s_sqlite_prepared` / `_postgres_prepared`: the same with each join's
//!   request made before the clock and its response checked after it ([`Requests::Prepared`]),
//!   so the agents' crypto does not share the cores with the host while it is timed; likewise
//!   `shared_64_prepared` beside `shared_64`.
//! - `joins_<backend>`: the same at 1, 16 and 64 agents on distinct tokens and at 64 on one
//!   shared many-use token, each with p50/p99 latency and the process's CPU per join, and the
//!   limits they are measured against ([`limits`]): the crypto a join needs and the
//!   database's statements alone. Beside the process's CPU, the whole machine's
//!   (`machine_cpu_ms_per_join`, and `machine_busy`, the share of its cores busy) and a
//!   PostgreSQL server's on this machine (`db_server_cpu_ms_per_join`): see [`cpu`]. And
//!   `calls_on_own_thread`: the share of the run's join-token calls that paid for the hand-off
//!   to the attestor's own thread (`gatehouse::runtime` moves only calls that kept the CPU).
//! - `attestor_call_us_wasm` / `_native` and `wasm_over_native`, and where the component
//!   call's time goes (`attestor_call_us_wasm_breakdown`): see [`attestor_call`].
//!   `slot_reset_in_place` says whether this kernel let the pooling allocator reset a reused
//!   slot's written pages in place ([`gatehouse::runtime::resets_in_place`]); the component
//!   calls cost about twice as much where it did not.
//! - `tpm_verify_us_native` / `_wasm`: see [`tpm_verify`].
//! - `cloud_iid_call_us_wasm`, and what its prepared configuration saves a join
//!   (`cloud_iid_configure_us_native` vs `cloud_iid_from_prepared_us_native`): see
//!   [`cloud_iid`].
//!
//! - `joins_<backend>.lookups_per_s`: the host's hot reads of a node's rows (its certificate by
//!   the DER presented, the node, its certificates, its token, its binding, the CRL) alone, each
//!   of a filled row, 8 at once: see [`lookups`].
//! - `joins_<backend>.renew_16`: renewals a second and their p50/p99, end to end over mTLS
//!   from 16 agents, each renewal a node's first: see [`renewals`].
//!
//! With `--nodes N`, every run of a backend starts from a copy of one database already holding
//! N nodes, certificates, bindings and tokens ([`fill`]); without, the lookups are of
//! [`fill::SAMPLES`] rows written for them.

mod attestor_call;
mod cloud_iid;
mod cpu;
mod crowd;
pub mod fill;
mod limits;
mod lookups;
mod memory;
mod renewals;
mod tpm_verify;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use sha2::{Digest, Sha256};

use gatehouse::app;
use gatehouse::config::Config;
use gatehouse::store::{NewToken, TokenExpect, TokenRole};

include!(concat!(env!("OUT_DIR"), "/bench_components.rs"));

/// Components only the benchmark loads (never built into the host): `(crate name, wasm
/// bytes)`.
fn components() -> &'static [(&'static str, &'static [u8])] {
    BENCH_COMPONENTS
}

/// Measures joins and attestor calls; prints one JSON line.
#[derive(Debug, Parser)]
#[command(name = "gatehouse-bench", version, about)]
pub struct BenchArgs {
    /// Print one JSON line (the only output format; kept for scripts that pass it).
    #[arg(long)]
    json: bool,
    /// Joins per database.
    #[arg(long, default_value_t = 2000)]
    joins: usize,
    /// Agents joining at once.
    #[arg(long, default_value_t = 32)]
    agents: usize,
    /// Attestor calls measured (median reported).
    #[arg(long, default_value_t = 5000)]
    calls: usize,
    /// Nodes (each with a certificate, a binding and a spent token) already in every run's
    /// database: joins measured against tables of that size rather than empty ones.
    #[arg(long, default_value_t = 0)]
    nodes: usize,
    /// PostgreSQL's write pool of every host, as the host's `database_connections` sets it
    /// (and of the database limit's store); the host's default when absent.
    #[arg(
        long,
        value_parser = clap::value_parser!(u32)
            .range(1..=i64::from(gatehouse::store::MAX_POSTGRES_CONNECTIONS))
    )]
    postgres_connections: Option<u32>,
}

/// Runs every measurement and prints the JSON line on stdout.
pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    let _ = args.json;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let calls = attestor_call::measure(args.calls).await?;
    let tpm = tpm_verify::measure(args.calls.min(2000)).await?;
    let cloud = cloud_iid::measure(args.calls.min(2000)).await?;
    let crypto = limits::crypto(args.calls.min(2000), cores)?;
    // Timed where the SQLite runs keep their databases (each run's temporary directory).
    let flush_us = limits::disk_flush_us(&std::env::temp_dir(), 200)?;
    // One compiled-component cache for every host the benchmark starts: the first compiles
    // the built-in attestors, the rest load them (a profile put a quarter of a run's CPU in
    // Cranelift compiling the same components again in each of a dozen start-ups, none of it
    // timed).
    let compiled = tempfile::tempdir().context("a directory for compiled components")?;
    let hosts = Hosts::new(compiled.path(), args.postgres_connections);
    let sqlite = backend_figures(&Backend::Sqlite, &args, &crypto, &hosts)
        .await
        .context("SQLite join benchmark")?;
    let postgres = match std::env::var("DATABASE_URL") {
        Ok(admin_url) if !admin_url.is_empty() => Some(
            backend_figures(&Backend::Postgres { admin_url }, &args, &crypto, &hosts)
                .await
                .context("PostgreSQL join benchmark")?,
        ),
        _ => None,
    };
    let line = serde_json::json!({
        "token_joins_per_s_sqlite": round1(sqlite.headline),
        "token_joins_per_s_postgres": postgres.as_ref().map(|p| round1(p.headline)),
        "token_joins_per_s_sqlite_prepared": round1(sqlite.headline_prepared),
        "token_joins_per_s_postgres_prepared":
            postgres.as_ref().map(|p| round1(p.headline_prepared)),
        "joins_sqlite": sqlite.detail,
        "joins_postgres": postgres.map(|p| p.detail),
        "crypto_host_us_per_join": round1(crypto.host_us),
        "crypto_agent_us_per_join": round1(crypto.agent_us),
        "crypto_limit_joins_per_s": round1(crypto.limit_joins_per_s),
        "disk_flush_us": round1(flush_us),
        "attestor_call_us_wasm": round1(calls.wasm_us),
        "attestor_call_us_native": round1(calls.native_us),
        "attestor_call_us_wasm_breakdown": {
            "queued": round1(calls.wasm_queued_us),
            "instantiate": round1(calls.wasm_instantiate_us),
            "verify": round1(calls.wasm_verify_us),
            "rest": round1(calls.wasm_rest_us),
        },
        "wasm_over_native": (calls.wasm_us / calls.native_us * 100.0).round() / 100.0,
        "slot_reset_in_place": gatehouse::runtime::resets_in_place(),
        "tpm_verify_us_native": round1(tpm.native_us),
        "tpm_verify_us_wasm": round1(tpm.wasm_us),
        "cloud_iid_call_us_wasm": round1(cloud.call_wasm_us),
        "cloud_iid_configure_us_native": round1(cloud.configure_native_us),
        "cloud_iid_from_prepared_us_native": round1(cloud.from_prepared_native_us),
        "cloud_iid_prepared_bytes": cloud.prepared_bytes,
        "joins": args.joins,
        "agents": args.agents,
        "calls": args.calls,
        "nodes": args.nodes,
        "postgres_connections": hosts.postgres_connections,
        "cores": cores,
    });
    println!("{line}");
    Ok(())
}

/// One backend's figures: the headline rate at `--agents`, the same with the agents'
/// requests prepared ([`Requests::Prepared`]), and the detail object.
struct BackendFigures {
    headline: f64,
    headline_prepared: f64,
    detail: serde_json::Value,
}

/// Where a run's host keeps its data. Every run gets a database of its own, so none sees
/// another's rows: the token ids are fixed, and tables grown by earlier runs would slow later
/// ones.
#[derive(Debug, Clone)]
enum Backend {
    /// A SQLite file in the run's temporary directory.
    Sqlite,
    /// A new database on the PostgreSQL server `DATABASE_URL` names, dropped after the run.
    Postgres { admin_url: String },
}

/// What every run's database of a backend starts as.
enum Template {
    /// Empty but for the schema.
    Empty,
    /// A copy of this filled SQLite file (in `_dir`, removed with it).
    Sqlite {
        path: std::path::PathBuf,
        _dir: tempfile::TempDir,
    },
    /// A clone (`CREATE DATABASE … TEMPLATE`) of this filled PostgreSQL database.
    Postgres {
        name: String,
        /// `STRATEGY FILE_COPY` for the clones (PostgreSQL 15 and later; before 15 a clone
        /// was always a file copy). The default since 15, `WAL_LOG`, writes the whole template
        /// through the write-ahead log and leaves its pages dirty in shared buffers, to be
        /// written out during the run that follows: 151 MB of WAL and a 0.15–0.18 s checkpoint
        /// for a 157 MB database on this machine, against 18 kB and 0.04 s copied as files
        /// (which checkpoints before it returns), as SQLite's copy is synced before its run.
        file_copy: bool,
    },
}

impl Backend {
    /// A template holding `nodes` filled nodes ([`fill`]) and a sample of them to look up, or
    /// [`Template::Empty`] and no sample for none.
    async fn template(&self, nodes: usize) -> anyhow::Result<(Template, Vec<fill::Sample>)> {
        if nodes == 0 {
            return Ok((Template::Empty, Vec::new()));
        }
        let filled = async |url: &str| {
            let db = gatehouse::store::Db::connect(url).await?;
            db.migrate().await?;
            let result = fill::fill(&db, nodes).await;
            db.close().await;
            result
        };
        match self {
            Backend::Sqlite => {
                let dir = tempfile::tempdir()?;
                let path = dir.path().join("template.db");
                let sample = filled(&gatehouse::store::sqlite_url(&path)?).await?;
                Ok((Template::Sqlite { path, _dir: dir }, sample))
            }
            Backend::Postgres { admin_url } => {
                use sqlx::Connection as _;
                let name = format!("gh_bench_tmpl_{:016x}", rand::random::<u64>());
                let mut admin = sqlx::PgConnection::connect(admin_url).await?;
                // Asked before the database exists, so a failure leaves nothing to drop.
                let version: i32 =
                    sqlx::query_scalar("SELECT current_setting('server_version_num')::int")
                        .fetch_one(&mut admin)
                        .await?;
                sqlx::query(&format!("CREATE DATABASE {name}"))
                    .execute(&mut admin)
                    .await?;
                let url = postgres_url(admin_url, &name);
                let template = Template::Postgres {
                    name,
                    file_copy: version >= 150_000,
                };
                let result = async {
                    let sample = filled(&url).await?;
                    // Statistics, as a database this size would have: the clones copy them.
                    analyze(&url).await?;
                    anyhow::Ok(sample)
                }
                .await;
                match result {
                    Ok(sample) => Ok((template, sample)),
                    Err(e) => {
                        self.drop_template(template).await;
                        Err(e)
                    }
                }
            }
        }
    }

    /// Removes a PostgreSQL template (a SQLite one goes with its directory).
    async fn drop_template(&self, template: Template) {
        use sqlx::Connection as _;
        let (Backend::Postgres { admin_url }, Template::Postgres { name, .. }) = (self, template)
        else {
            return;
        };
        let dropped = async {
            let mut admin = sqlx::PgConnection::connect(admin_url).await?;
            sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .execute(&mut admin)
                .await?;
            anyhow::Ok(())
        };
        if let Err(e) = dropped.await {
            eprintln!("bench: could not drop the template database {name}: {e}");
        }
    }

    /// Runs `run` with a fresh database made from `template`: its URL, or `None` for an empty
    /// SQLite file in the run's own directory.
    async fn fresh<T>(
        &self,
        template: &Template,
        run: impl AsyncFnOnce(Option<String>) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        use sqlx::Connection as _;
        let admin_url = match (self, template) {
            (Backend::Sqlite, Template::Sqlite { path, .. }) => {
                let dir = tempfile::tempdir()?;
                let copy = dir.path().join("run.db");
                std::fs::copy(path, &copy).context("copying the filled template")?;
                // On disk before the run, as a deployment's long-written database file is: else
                // the kernel writes the copy's dirty pages back during the run, and the WAL's
                // first `fsync`s (ext4 commits the copy's newly allocated blocks with them) wait
                // for it, a stall that at 100,000 nodes set the shared-token p99.
                std::fs::File::open(&copy)
                    .and_then(|f| f.sync_all())
                    .context("syncing the copy of the filled template")?;
                return run(Some(gatehouse::store::sqlite_url(&copy)?)).await;
            }
            (Backend::Sqlite, _) => return run(None).await,
            (Backend::Postgres { admin_url }, _) => admin_url,
        };
        let name = format!("gh_bench_{:016x}", rand::random::<u64>());
        let mut admin = sqlx::PgConnection::connect(admin_url)
            .await
            .context("connecting to DATABASE_URL")?;
        let from = match template {
            Template::Postgres { name, file_copy } => {
                let strategy = if *file_copy {
                    " STRATEGY FILE_COPY"
                } else {
                    ""
                };
                format!(" TEMPLATE {name}{strategy}")
            }
            _ => String::new(),
        };
        sqlx::query(&format!("CREATE DATABASE {name}{from}"))
            .execute(&mut admin)
            .await?;
        let result = run(Some(postgres_url(admin_url, &name))).await;
        if let Err(e) = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .execute(&mut admin)
            .await
        {
            eprintln!("bench: could not drop the database {name}: {e}");
        }
        result
    }
}

/// Gathers the planner's statistics of the PostgreSQL database at `url` (`ANALYZE`), as
/// autovacuum keeps them in a deployment's database.
async fn analyze(url: &str) -> anyhow::Result<()> {
    use sqlx::Connection as _;
    let mut conn = sqlx::PgConnection::connect(url).await?;
    sqlx::query("ANALYZE").execute(&mut conn).await?;
    conn.close().await?;
    Ok(())
}

/// The URL of database `name` on the server `admin_url` names.
fn postgres_url(admin_url: &str, name: &str) -> String {
    let base = admin_url
        .rsplit_once('/')
        .map_or(admin_url, |(base, _)| base);
    format!("{base}/{name}")
}

/// Every end-to-end run on one backend, and its database limit.
async fn backend_figures(
    backend: &Backend,
    args: &BenchArgs,
    crypto: &limits::Crypto,
    hosts: &Hosts<'_>,
) -> anyhow::Result<BackendFigures> {
    let (template, sample) = backend
        .template(args.nodes)
        .await
        .with_context(|| format!("filling a template with {} nodes", args.nodes))?;
    let figures = runs(backend, (&template, &sample), args, crypto, hosts).await;
    backend.drop_template(template).await;
    figures
}

/// [`backend_figures`]' runs, each on a database made from `template`, each host started as
/// `hosts` says; the lookups of `sample`, rows of the template.
async fn runs(
    backend: &Backend,
    (template, sample): (&Template, &[fill::Sample]),
    args: &BenchArgs,
    crypto: &limits::Crypto,
    hosts: &Hosts<'_>,
) -> anyhow::Result<BackendFigures> {
    let headline = |requests| {
        backend.fresh(template, async move |url| {
            let shape = Shape {
                agents: args.agents,
                tokens: Tokens::Distinct,
                placed: Agents::Beside,
                requests,
            };
            joins_per_second(url, args.joins, shape, hosts).await
        })
    };
    let live = headline(Requests::Live).await?;
    let prepared = headline(Requests::Prepared)
        .await
        .context("the headline run with prepared requests")?;
    let mut runs = serde_json::Map::new();
    let beside = |agents, tokens, requests| Shape {
        agents,
        tokens,
        placed: Agents::Beside,
        requests,
    };
    for (name, shape) in [
        ("distinct_1", beside(1, Tokens::Distinct, Requests::Live)),
        ("distinct_16", beside(16, Tokens::Distinct, Requests::Live)),
        ("distinct_64", beside(64, Tokens::Distinct, Requests::Live)),
        ("shared_64", beside(64, Tokens::Shared, Requests::Live)),
        (
            "shared_64_prepared",
            beside(64, Tokens::Shared, Requests::Prepared),
        ),
        (
            "distinct_16_agents_apart",
            Shape {
                placed: Agents::Apart,
                ..beside(16, Tokens::Distinct, Requests::Live)
            },
        ),
    ] {
        let run = backend
            .fresh(template, async |url| {
                joins_per_second(url, args.joins, shape, hosts).await
            })
            .await
            .with_context(|| format!("the {name} run"))?;
        runs.insert(name.into(), run.json(crypto));
    }
    runs.insert("prepared".into(), prepared.json(crypto));
    let db_limit = backend
        .fresh(template, async |url| {
            on_store(url, hosts, async |db| {
                limits::database(db, args.joins, 16).await
            })
            .await
        })
        .await
        .context("the database limit")?;
    runs.insert("db_limit_joins_per_s".into(), round1(db_limit).into());
    let lookups = backend
        .fresh(template, async |url| {
            // PostgreSQL plans with the statistics it has, and a filled template has them
            // (`ANALYZE`, as autovacuum keeps a deployment's): with a histogram to consult, the
            // CRL's read took 122–128 µs a statement under `pgbench` against 76 µs without one
            // (2026-12-07), so rows of the run's own are analysed too, or an empty database
            // would look faster for a reason no deployment has.
            let postgres = url
                .clone()
                .filter(|_| matches!(backend, Backend::Postgres { .. }));
            on_store(url, hosts, async |db| {
                // With nothing filled, rows of the run's own to look up: an empty database's
                // figure is of [`fill::SAMPLES`] rows.
                if sample.is_empty() {
                    let own = fill::fill(db, fill::SAMPLES).await?;
                    if let Some(url) = &postgres {
                        analyze(url).await?;
                    }
                    return lookups::measure(db, &own).await;
                }
                lookups::measure(db, sample).await
            })
            .await
        })
        .await
        .context("the lookups")?;
    runs.insert("lookups_per_s".into(), lookups.json());
    let renewals = backend
        .fresh(template, async |url| {
            renewals::measure(url, args.joins, hosts).await
        })
        .await
        .context("the renewals")?;
    runs.insert("renew_16".into(), renewals.json());
    let fraction = |v: &serde_json::Value| v["joins_per_s"].as_f64().unwrap_or(0.0);
    let best = runs.get("distinct_16").map(fraction).unwrap_or(0.0);
    runs.insert(
        "distinct_16_over_limit".into(),
        round2(best / crypto.limit_joins_per_s.min(db_limit)).into(),
    );
    // Over the limit of joins whose crypto and statements take turns on the same cores (each
    // costs its share of a second, 1/crypto + 1/db), as the host, the agents and the database
    // do on a machine that runs them all: issue 14's "crypto+DB limit" read as a sum. The
    // lower of the two, above, is the limit if they never waited on each other.
    runs.insert(
        "distinct_16_over_combined_limit".into(),
        round2(best * (1.0 / crypto.limit_joins_per_s + 1.0 / db_limit)).into(),
    );
    Ok(BackendFigures {
        headline: live.joins_per_s,
        headline_prepared: prepared.joins_per_s,
        detail: runs.into(),
    })
}

/// Runs `run` on the host's store over the database at `url` (migrated, with the write pool
/// `hosts` gives a host), or over a SQLite file of its own for `None`: the benchmark's runs
/// that time the store without a host.
async fn on_store<T>(
    url: Option<String>,
    hosts: &Hosts<'_>,
    run: impl AsyncFnOnce(&gatehouse::store::Db) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let dir = tempfile::tempdir()?;
    let url = match url {
        Some(url) => url,
        None => gatehouse::store::sqlite_url(&dir.path().join("store.db"))?,
    };
    let db = gatehouse::store::Db::connect_with(&url, hosts.postgres_connections).await?;
    db.migrate().await?;
    let result = run(&db).await;
    db.close().await;
    result
}

/// A first join round for `attestor` as the call benchmarks hand it to a component: the
/// evidence, no token, a stand-in CSR of 300 bytes with hash `csr_sha256`.
fn join_request(
    attestor: &str,
    attestation: Vec<u8>,
    csr_sha256: Vec<u8>,
) -> gatehouse::runtime::bindings::types::JoinRequest {
    use gatehouse::runtime::bindings::types as wit;
    wit::JoinRequest {
        attestor: attestor.into(),
        role: wit::JoinRole::Node,
        attestation,
        token: None,
        csr_der: vec![0x30; 300],
        csr_sha256,
        csr_spki_sha256: vec![2; 32],
        claims: wit::HardwareClaims {
            macs: vec![],
            product_uuid: None,
        },
        round: 1,
    }
}

/// The median of `samples`, in microseconds.
fn median(mut samples: Vec<Duration>) -> f64 {
    samples.sort();
    samples
        .get(samples.len() / 2)
        .map_or(0.0, |d| d.as_secs_f64() * 1e6)
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

fn round1(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

/// Whether each agent spends its own single-use token or all share one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tokens {
    Distinct,
    Shared,
}

/// Where the agents run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Agents {
    /// On the host's own runtime, sharing its worker threads (the end-to-end figures since the
    /// first benchmark: the fewest threads on a machine with few cores).
    Beside,
    /// On a runtime of their own, threads named [`AGENT_THREADS`], so the host's CPU can be
    /// told from theirs. About a fifth slower end to end on 2 cores (more threads, more
    /// switches between them), so it is one extra run, not the way of every run.
    Apart,
}

/// What an agent holds before its join's clock starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Requests {
    /// Its token only: each join makes a fresh key, its CSR and the sealed token, sends them
    /// and checks the signed response inside the timed window, as an agent joining does (every
    /// run since the first benchmark). On this machine the agents' crypto shares the host's
    /// two cores and costs about 1.5 times the host's.
    Live,
    /// Each join's request (its key, CSR and sealed token) made before the clock starts, and
    /// its response checked after the clock stops, as a load driver prepares its requests:
    /// what remains of the agents in the window is their HTTPS and JSON. The host's rate
    /// without its load's crypto on the same cores; every response is still checked, and a
    /// run with one that fails the agent's checks fails.
    Prepared,
}

/// The agents of one run: how many, on which tokens, on which threads, holding what.
#[derive(Debug, Clone, Copy)]
struct Shape {
    agents: usize,
    tokens: Tokens,
    placed: Agents,
    requests: Requests,
}

/// A join's request made ahead of its run's clock ([`Requests::Prepared`]), and what the
/// agent checks its response against.
struct Prepared {
    round: gatehouse_agent::FirstRound,
    spki: Vec<u8>,
}

impl Prepared {
    /// A token join's first round as [`gatehouse_agent::join`] makes it
    /// ([`gatehouse_agent::first_round`]): a fresh node key, its CSR, and `token` sealed to the
    /// host for that CSR.
    fn new(
        trust: &gatehouse_proto::JoinTrust,
        token: &gatehouse_proto::TokenString,
    ) -> anyhow::Result<Self> {
        let key = gatehouse_agent::NodeKey::generate()?;
        let round = gatehouse_agent::first_round(
            trust,
            &mut gatehouse_agent::TokenProducer::new(gatehouse_proto::Role::Node),
            Some(token),
            &key,
            &gatehouse_agent::JoinOptions::default(),
        )?;
        Ok(Self {
            round,
            spki: key.spki_der(),
        })
    }

    /// The agent's checks of the host's answer: signed by a pinned key, for this CSR, a
    /// certificate for this key, and a join, not a deferral.
    fn check(
        &self,
        trust: &gatehouse_proto::JoinTrust,
        response: &gatehouse_proto::JoinResponse,
    ) -> anyhow::Result<()> {
        let csr_sha256 = &self.round.csr_sha256;
        match gatehouse_agent::verify_response(trust, response, csr_sha256, &self.spki)? {
            gatehouse_agent::Verified::Joined { .. } => Ok(()),
            _ => anyhow::bail!("a prepared token join was deferred, not admitted"),
        }
    }
}

/// One join an agent makes in the timed window.
enum Join {
    /// The whole join ([`Requests::Live`]).
    Live(gatehouse_proto::TokenString),
    /// Sent only; the response is kept for [`Prepared::check`] after the clock stops.
    Prepared(Box<Prepared>),
}

/// One end-to-end run.
struct Run {
    joins_per_s: f64,
    p50: Duration,
    p99: Duration,
    /// The process's CPU time (host and agents) per join.
    cpu_per_join: Duration,
    /// The host's part of it, when the agents ran apart: the process's less the agents'
    /// threads'.
    host_cpu_per_join: Option<Duration>,
    /// The PostgreSQL server's CPU per join, when it runs on this machine.
    server_cpu_per_join: Option<Duration>,
    /// SQLite's CPU per join, on SQLite: its connections' worker threads', where sqlx runs every
    /// statement, checkpoints too. Part of the process's (and the host's) figure, as the
    /// server's is not on PostgreSQL; so the host's less this compares with PostgreSQL's host.
    engine_cpu_per_join: Option<Duration>,
    /// The whole machine's busy CPU per join (everything on it, the kernel's loopback too).
    machine_cpu_per_join: Option<Duration>,
    /// The share of all the machine's CPUs busy during the run.
    machine_busy: Option<f64>,
    /// The share of the run's join-token calls that ran on the attestor's own thread rather
    /// than their join's (`gatehouse_attestor_calls_on_own_thread_total`): near zero unless
    /// honest calls are taken for spinning ones and pay for the hand-off.
    calls_on_own_thread: f64,
}

impl Run {
    /// The run's figures. Beside each CPU time per join that crypto bounds, the same over that
    /// crypto timed in this run (`…_over_crypto`): how many times the join's necessary crypto
    /// the CPU spent. This machine's speed swings by up to twice from hour to hour, the crypto
    /// with it, so these ratios compare runs of different hours where the times cannot.
    fn json(&self, crypto: &limits::Crypto) -> serde_json::Value {
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        let mut run = serde_json::json!({
            "joins_per_s": round1(self.joins_per_s),
            "p50_ms": round1(self.p50.as_secs_f64() * 1e3),
            "p99_ms": round1(self.p99.as_secs_f64() * 1e3),
            "process_cpu_ms_per_join": round2(self.cpu_per_join.as_secs_f64() * 1e3),
            "process_cpu_over_crypto": round2(
                us(self.cpu_per_join) / (crypto.host_us + crypto.agent_us)
            ),
            "over_crypto_limit": round2(self.joins_per_s / crypto.limit_joins_per_s),
        });
        let ms = |d: Duration| serde_json::Value::from(round2(d.as_secs_f64() * 1e3));
        if let Some(host) = self.host_cpu_per_join {
            run["host_cpu_ms_per_join"] = ms(host);
            run["host_cpu_over_crypto"] = round2(us(host) / crypto.host_us).into();
        }
        if let Some(server) = self.server_cpu_per_join {
            run["db_server_cpu_ms_per_join"] = ms(server);
        }
        if let Some(engine) = self.engine_cpu_per_join {
            run["db_engine_cpu_ms_per_join"] = ms(engine);
        }
        if let Some(machine) = self.machine_cpu_per_join {
            run["machine_cpu_ms_per_join"] = ms(machine);
        }
        if let Some(busy) = self.machine_busy {
            run["machine_busy"] = round2(busy).into();
        }
        run["calls_on_own_thread"] = round2(self.calls_on_own_thread).into();
        run
    }
}

/// The name of the benchmark's agent threads (Linux keeps 15 bytes of it).
const AGENT_THREADS: &str = "bench-agent";

/// What Linux keeps of the name of sqlx's SQLite connection threads (`sqlx-sqlite-worker-N`):
/// each SQLite connection's statements run on one, the host's reads, writes and checkpoints.
const SQLITE_THREADS: &str = "sqlx-sqlite-wor";

/// What every host the benchmark starts shares.
#[derive(Debug, Clone, Copy)]
struct Hosts<'a> {
    /// The compiled-component cache: the first host compiles the built-in attestors, the rest
    /// load them.
    compiled: &'a Path,
    /// The write pool a PostgreSQL host or store of the run gets.
    postgres_connections: u32,
}

impl<'a> Hosts<'a> {
    /// Hosts caching their compiled components in `compiled`, with a PostgreSQL write pool of
    /// `postgres_connections` (`--postgres-connections`) or the host's default.
    fn new(compiled: &'a Path, postgres_connections: Option<u32>) -> Self {
        Self {
            compiled,
            postgres_connections: postgres_connections
                .unwrap_or(gatehouse::store::DEFAULT_POSTGRES_CONNECTIONS),
        }
    }
}

/// A dev host started for one run, and what its agents need to reach it.
struct Host {
    running: app::Running,
    /// The trust an agent pins (the host's join key and CAs).
    trust: gatehouse_proto::JoinTrust,
    /// Its API's HTTPS URL.
    url: String,
    /// Whether its PostgreSQL server runs on this machine, so its processes' CPU is the run's.
    server_here: bool,
    /// Whether its database is SQLite, whose threads are the process's.
    sqlite: bool,
    /// Its configuration and data (removed with it).
    _dir: tempfile::TempDir,
}

impl Host {
    /// Starts a dev host (SQLite, or `database_url`) as `hosts` says, configured as every
    /// run's and then as `configure` says.
    async fn start(
        database_url: Option<String>,
        hosts: &Hosts<'_>,
        configure: impl FnOnce(&mut Config),
    ) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let files = app::dev::prepare(dir.path(), "127.0.0.1:0")?;
        let mut config = Config::load(&files.config)?;
        // The server's processes are read only where the URL names this machine: another
        // server's name there would count a local one that took no part.
        let server_here = database_url.as_deref().is_some_and(on_this_machine);
        use gatehouse::store::Backend as Store;
        let postgres = database_url
            .as_deref()
            .and_then(|u| Store::from_url(u).ok())
            == Some(Store::Postgres);
        if postgres {
            config.database_connections = Some(hosts.postgres_connections);
        }
        config.database_url = database_url;
        config.runtime.cache_dir = Some(hosts.compiled.to_owned());
        // Every agent joins from loopback, one source: its join rate and connection limits
        // would measure themselves (64 agents at the default 64 connections per source lost a
        // handshake now and then when a connection closed and reopened at once).
        config.limits.join_rate_per_second = 0.0;
        config.limits.max_connections_per_source = config.limits.max_connections;
        configure(&mut config);
        let running = app::start(&config).await?;
        let trust = serde_json::from_str(&std::fs::read_to_string(&files.join_trust)?)?;
        let url = format!("https://localhost:{}", running.server.addr.port());
        Ok(Self {
            running,
            trust,
            url,
            server_here,
            sqlite: !postgres,
            _dir: dir,
        })
    }

    /// Mints `count` node tokens of `uses` uses each, valid for an hour.
    async fn mint(
        &self,
        count: usize,
        uses: u32,
    ) -> anyhow::Result<Vec<gatehouse_proto::TokenString>> {
        let mut tokens = Vec::with_capacity(count);
        let mut tx = self.running.db.begin().await?;
        let now = tx.now().await?;
        for i in 0..count {
            let secret: [u8; 32] = rand::random();
            let id = format!("tok_bench{i:08}");
            tx.insert_token(&NewToken {
                id: id.clone(),
                role: TokenRole::Node,
                secret_sha256: Sha256::digest(secret).into(),
                tenant_id: "root".into(),
                pool_id: None,
                site_id: None,
                expires_at: now + 3_600_000,
                uses,
                expect: TokenExpect::default(),
                reclaim: false,
                created_at: now,
            })
            .await?;
            tokens.push(gatehouse_proto::TokenString {
                id,
                secret: secret.to_vec(),
            });
        }
        tx.commit().await?;
        Ok(tokens)
    }
}

/// Starts a dev host ([`Host::start`]), mints `joins` single-use tokens (or one token of
/// `joins` uses) and lets `shape.agents` concurrent agents, placed and holding their requests
/// as `shape` says, spend them.
///
/// Each agent first joins once untimed, on a token of its own (or a use of the shared one), and
/// the clock starts when all have: the figures are the steady state of agents that keep their
/// connections open, as issue 14's targets are stated, without the run's start (the agents' TLS
/// handshakes, the first use of each instance slot and database page), which in a run of a
/// couple of thousand joins weighs a few per cent and varies from run to run.
async fn joins_per_second(
    database_url: Option<String>,
    joins: usize,
    shape: Shape,
    hosts: &Hosts<'_>,
) -> anyhow::Result<Run> {
    let Shape {
        agents,
        tokens: shared,
        placed,
        requests,
    } = shape;
    let host = Host::start(database_url, hosts, |_| {}).await?;
    // Shared, so an agent's item copies no more than a pointer before its clock starts.
    let trust = Arc::new(host.trust.clone());

    // The agents' warm-up joins spend tokens too.
    let spent = joins + agents;
    let distinct = if shared == Tokens::Shared { 1 } else { spent };
    let minted = host
        .mint(
            distinct,
            u32::try_from(spent / distinct).unwrap_or(u32::MAX),
        )
        .await?;
    let mut tokens: Vec<_> = (0..spent).map(|i| minted[i % distinct].clone()).collect();
    let warm_up: Vec<_> = tokens.split_off(joins);
    // Made here, before the agents start: about 0.2 ms of crypto a join, untimed.
    let timed: Vec<Join> = match requests {
        Requests::Live => tokens.into_iter().map(Join::Live).collect(),
        Requests::Prepared => tokens
            .iter()
            .map(|token| Ok(Join::Prepared(Box::new(Prepared::new(&trust, token)?))))
            .collect::<anyhow::Result<_>>()?,
    };

    let client = gatehouse_agent::JoinClient::new(&host.url, &trust)?;
    let agent_threads = match placed {
        Agents::Beside => None,
        Agents::Apart => Some(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(std::thread::available_parallelism().map_or(1, |n| n.get()))
                .thread_name(AGENT_THREADS)
                .enable_all()
                .build()?,
        ),
    };
    let spawn_on = agent_threads
        .as_ref()
        .map_or_else(tokio::runtime::Handle::current, |r| r.handle().clone());
    let agent = {
        let (client, trust) = (Arc::new(client), trust.clone());
        move |join| {
            let (client, trust) = (client.clone(), trust.clone());
            async move {
                match join {
                    Join::Live(token) => {
                        agent_join(&client, &trust, &token).await?;
                        Ok(None)
                    }
                    Join::Prepared(prepared) => {
                        let response = client.send(&prepared.round.request).await?;
                        Ok(Some((prepared, response)))
                    }
                }
            }
        }
    };
    let warm_up = warm_up.into_iter().map(Join::Live).collect();
    let warmed = crowd::warm_up(&spawn_on, warm_up, timed, agent).await;
    let server_now = || {
        host.server_here
            .then(|| cpu::processes("postgres"))
            .flatten()
    };
    let (cpu_before, agents_before) = (cpu::process(), cpu::threads(AGENT_THREADS));
    let engine_before = cpu::threads(SQLITE_THREADS);
    let (server_before, machine_before) = (server_now(), cpu::machine());
    let calls_before = JoinTokenCalls::of(&host.running);
    let crowd = warmed.finish().await;
    let calls = JoinTokenCalls::of(&host.running).since(calls_before);
    let cpu = cpu::process().saturating_sub(cpu_before);
    let agents_cpu = cpu::threads(AGENT_THREADS).saturating_sub(agents_before);
    // Threads that end within the run take their CPU with them: none does, since the host
    // keeps its SQLite connections until it stops (after this reading) unless one fails.
    let engine_cpu = cpu::threads(SQLITE_THREADS).saturating_sub(engine_before);
    let server_cpu = server_before
        .zip(server_now())
        .map(|(before, after)| after.saturating_sub(before));
    let machine = machine_before
        .zip(cpu::machine())
        .map(|(before, after)| (after.busy.saturating_sub(before.busy), after.cpus));
    // Dropping a runtime blocks, which async code must not; so before any early return.
    let host_cpu = agent_threads.map(|threads| {
        threads.shutdown_background();
        cpu.saturating_sub(agents_cpu)
    });
    let crowd = crowd?;
    for (prepared, response) in crowd.outputs.iter().flatten() {
        prepared
            .check(&trust, response)
            .context("a prepared join's response")?;
    }
    let joined = crowd.outputs.len();
    anyhow::ensure!(joined == joins, "only {joined} of {joins} joins succeeded");
    // The whole host (its certificate sweeper too), not only the API and the database.
    host.running.shutdown().await;
    let (elapsed, at) = (crowd.elapsed, |q| crowd.latency(q));
    let per_join = u32::try_from(joined.max(1)).unwrap_or(u32::MAX);
    Ok(Run {
        joins_per_s: joined as f64 / elapsed.as_secs_f64(),
        p50: at(0.50),
        p99: at(0.99),
        cpu_per_join: cpu / per_join,
        host_cpu_per_join: host_cpu.map(|host| host / per_join),
        server_cpu_per_join: server_cpu.map(|server| server / per_join),
        engine_cpu_per_join: host.sqlite.then(|| engine_cpu / per_join),
        machine_cpu_per_join: machine.map(|(busy, _)| busy / per_join),
        machine_busy: machine
            .map(|(busy, cpus)| busy.as_secs_f64() / (elapsed.as_secs_f64() * f64::from(cpus))),
        calls_on_own_thread: calls.on_own_thread as f64 / calls.all.max(1) as f64,
    })
}

/// join-token's calls so far, and those of them that ran on its own thread, from the host's
/// metrics (what an operator's scrape reads).
#[derive(Clone, Copy)]
struct JoinTokenCalls {
    all: u64,
    on_own_thread: u64,
}

impl JoinTokenCalls {
    fn of(running: &app::Running) -> Self {
        let text = running.join.metrics().encode(0);
        let count = |name: &str| {
            let prefix = format!("{name}{{attestor=\"join-token\"}} ");
            text.lines()
                .find_map(|line| line.strip_prefix(&prefix)?.parse().ok())
                .unwrap_or(0)
        };
        Self {
            all: count("gatehouse_attestor_call_seconds_count"),
            on_own_thread: count("gatehouse_attestor_calls_on_own_thread_total"),
        }
    }

    fn since(self, before: Self) -> Self {
        Self {
            all: self.all.saturating_sub(before.all),
            on_own_thread: self.on_own_thread.saturating_sub(before.on_own_thread),
        }
    }
}

/// Whether a PostgreSQL URL names this machine: a loopback address, `localhost`, or a Unix
/// socket (no host).
fn on_this_machine(url: &str) -> bool {
    use std::str::FromStr as _;
    sqlx::postgres::PgConnectOptions::from_str(url).is_ok_and(|options| {
        let host = options.get_host();
        host == "localhost"
            || host.starts_with('/')
            || host
                .trim_matches(['[', ']'])
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    })
}

/// One agent's token join: a fresh key, its CSR, the sealed token, the response checked. The
/// node's key and what the host answered.
async fn agent_join(
    client: &gatehouse_agent::JoinClient,
    trust: &gatehouse_proto::JoinTrust,
    token: &gatehouse_proto::TokenString,
) -> anyhow::Result<(gatehouse_agent::NodeKey, gatehouse_agent::Joined)> {
    let key = gatehouse_agent::NodeKey::generate()?;
    let mut producer = gatehouse_agent::TokenProducer::new(gatehouse_proto::Role::Node);
    let joined = gatehouse_agent::join(
        client,
        trust,
        &mut producer,
        Some(token),
        &key,
        &gatehouse_agent::JoinOptions::default(),
    )
    .await?;
    Ok((key, joined))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A prepared run joins through a real host, every response passing the agent's checks
    /// after the clock, on distinct tokens and on one shared token alike; on SQLite its
    /// database's CPU is read apart.
    #[tokio::test]
    async fn a_run_of_prepared_requests_joins_and_checks_every_response() -> anyhow::Result<()> {
        let compiled = tempfile::tempdir()?;
        for tokens in [Tokens::Distinct, Tokens::Shared] {
            let shape = Shape {
                agents: 3,
                tokens,
                placed: Agents::Beside,
                requests: Requests::Prepared,
            };
            let hosts = Hosts::new(compiled.path(), None);
            let run = joins_per_second(None, 7, shape, &hosts).await?;
            anyhow::ensure!(run.joins_per_s > 0.0 && run.p99 >= run.p50, "{tokens:?}");
            // SQLite runs in the process: its threads' CPU is read apart (a run this short
            // may not reach one of /proc's 10 ms ticks, so only that it is read).
            anyhow::ensure!(run.engine_cpu_per_join.is_some(), "{tokens:?}");
        }
        Ok(())
    }

    #[test]
    fn only_a_server_on_this_machine_has_its_processes_read() {
        for url in [
            "postgres://postgres@127.0.0.1:5432/test",
            "postgres://postgres@localhost/test",
            "postgres://postgres@[::1]:5432/test",
            "postgres:///test?host=/var/run/postgresql",
        ] {
            assert!(on_this_machine(url), "{url}");
        }
        for url in [
            "postgres://postgres@db.example:5432/test",
            "postgres://postgres@10.0.0.7/test",
            "not a url",
        ] {
            assert!(!on_this_machine(url), "{url}");
        }
    }
}
