//! `gatehouse bench --json`: measured figures, one JSON line.
//!
//! - `token_joins_per_s_sqlite` / `_postgres`: end to end over HTTPS on loopback, many agents
//!   at once, each with its own single-use token (agent key generation, CSR, sealing and
//!   response verification included, on the same machine).
//! - `attestor_call_us_wasm` / `_native` and `wasm_over_native`: see [`attestor_call`].
//! - `tpm_verify_us_native` / `_wasm`: see [`tpm_verify`].

mod attestor_call;
mod memory;
mod tpm_verify;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Args;
use sha2::{Digest, Sha256};

use crate::app;
use crate::config::Config;
use crate::store::{NewToken, TokenExpect, TokenRole};

/// `gatehouse bench`.
#[derive(Debug, Args)]
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
}

pub(super) async fn run(args: BenchArgs) -> anyhow::Result<()> {
    let _ = args.json;
    let calls = attestor_call::measure(args.calls).await?;
    let tpm = tpm_verify::measure(args.calls.min(2000)).await?;
    let sqlite = joins_per_second(None, args.joins, args.agents)
        .await
        .context("SQLite join benchmark")?;
    let postgres = match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => Some(
            postgres_joins(&url, args.joins, args.agents)
                .await
                .context("PostgreSQL join benchmark")?,
        ),
        _ => None,
    };
    let line = serde_json::json!({
        "token_joins_per_s_sqlite": round1(sqlite),
        "token_joins_per_s_postgres": postgres.map(round1),
        "attestor_call_us_wasm": round1(calls.wasm_us),
        "attestor_call_us_native": round1(calls.native_us),
        "wasm_over_native": (calls.wasm_us / calls.native_us * 100.0).round() / 100.0,
        "tpm_verify_us_native": round1(tpm.native_us),
        "tpm_verify_us_wasm": round1(tpm.wasm_us),
        "joins": args.joins,
        "agents": args.agents,
        "calls": args.calls,
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
    });
    println!("{line}");
    Ok(())
}

fn round1(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

/// A fresh PostgreSQL database for one run, dropped afterwards.
async fn postgres_joins(admin_url: &str, joins: usize, agents: usize) -> anyhow::Result<f64> {
    use sqlx::Connection as _;
    let name = format!("gh_bench_{:016x}", rand::random::<u64>());
    let mut admin = sqlx::PgConnection::connect(admin_url).await?;
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut admin)
        .await?;
    let base = admin_url.rsplit_once('/').map_or(admin_url, |(b, _)| b);
    let result = joins_per_second(Some(format!("{base}/{name}")), joins, agents).await;
    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .execute(&mut admin)
        .await;
    result
}

/// Starts a dev host (SQLite, or `database_url`), mints `joins` single-use tokens and lets
/// `agents` concurrent agents spend them; joins per second of wall time.
async fn joins_per_second(
    database_url: Option<String>,
    joins: usize,
    agents: usize,
) -> anyhow::Result<f64> {
    let dir = tempfile::tempdir()?;
    let files = app::dev::prepare(dir.path(), "127.0.0.1:0")?;
    let mut config = Config::load(&files.config)?;
    config.database_url = database_url;
    // Every agent joins from loopback: the per-source join rate would measure itself.
    config.limits.join_rate_per_second = 0.0;
    let running = app::start(&config).await?;
    let trust: gatehouse_proto::JoinTrust =
        serde_json::from_str(&std::fs::read_to_string(&files.join_trust)?)?;
    let url = format!("https://localhost:{}", running.server.addr.port());

    let mut tokens = Vec::with_capacity(joins);
    let mut tx = running.db.begin().await?;
    let now = tx.now().await?;
    for i in 0..joins {
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
            uses: 1,
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

    let client = gatehouse_agent::JoinClient::new(&url, &trust)?;
    let queue = Arc::new(std::sync::Mutex::new(tokens));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..agents {
        let (client, trust, queue) = (client.clone(), trust.clone(), queue.clone());
        tasks.spawn(async move {
            let mut done = 0usize;
            loop {
                let Some(token) = queue.lock().ok().and_then(|mut q| q.pop()) else {
                    return Ok::<usize, anyhow::Error>(done);
                };
                let key = gatehouse_agent::NodeKey::generate()?;
                let mut producer = gatehouse_agent::TokenProducer::new(gatehouse_proto::Role::Node);
                gatehouse_agent::join(
                    &client,
                    &trust,
                    &mut producer,
                    Some(&token),
                    &key,
                    &gatehouse_agent::JoinOptions::default(),
                )
                .await?;
                done += 1;
            }
        });
    }
    let mut joined = 0;
    while let Some(result) = tasks.join_next().await {
        joined += result.context("an agent task panicked")??;
    }
    let elapsed = started.elapsed().max(Duration::from_millis(1));
    anyhow::ensure!(joined == joins, "only {joined} of {joins} joins succeeded");
    running.server.shutdown().await;
    running.db.close().await;
    Ok(joined as f64 / elapsed.as_secs_f64())
}
