//! The limits an end-to-end join rate is measured against, each timed alone on this machine:
//!
//! - the crypto a token join cannot skip: on the host, the CSR's signature check, opening the
//!   sealed token (HPKE), signing the certificate and signing the response; on the agent, the
//!   key pair, the CSR, sealing and checking the response. The host's share bounds the host;
//!   both bound this benchmark, whose agents run in the same process on the same cores.
//! - the database: a token join's statements alone (the attestor's read of its token on the
//!   read pool; then, locked, the token again, its spend, database time, the node, its
//!   certificate, the audit row and the event with the commit), from 16 tasks at once.
//!
//! And one figure of the machine that is not a limit but moves every database one: how long
//! the disk takes to make a small write durable, which every commit waits for (SQLite's
//! `synchronous = FULL`, PostgreSQL's WAL flush), however many commits a flush carries.

use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use sha2::{Digest, Sha256};

use gatehouse::pki::{IssueRequest, Pki, new_serial, verify_csr};
use gatehouse::store::{
    Admission, AuditResult, Db, NewAudit, NewEvent, NewNodeCert, NewToken, NodeRole, TokenExpect,
    TokenRole, new_id,
};

/// Microseconds of CPU one join's crypto takes, measured one operation after another.
pub(super) struct Crypto {
    pub host_us: f64,
    pub agent_us: f64,
    /// The joins a second `cores` cores could make if a join (host and agent, both on this
    /// machine) cost only its crypto.
    pub limit_joins_per_s: f64,
}

/// Times the join's crypto `iterations` times; the mean of each side.
pub(super) fn crypto(iterations: usize, cores: usize) -> anyhow::Result<Crypto> {
    let pki = Pki::generate("bench.invalid")?;
    let trust = pki.join_trust("", 1_800_000_000_000);
    let token = gatehouse_proto::TokenString {
        id: "tok_bench".into(),
        secret: vec![7; 32],
    };
    let (mut host, mut agent) = (Duration::ZERO, Duration::ZERO);
    for _ in 0..iterations {
        let started = Instant::now();
        let key = gatehouse_agent::NodeKey::generate()?;
        let csr = gatehouse_agent::build_csr(&key)?;
        let csr_sha256: [u8; 32] = Sha256::digest(&csr).into();
        let sealed =
            gatehouse_proto::seal_token(&pki.join_encryption_public(), &token, &csr_sha256)?;
        agent += started.elapsed();

        let started = Instant::now();
        let verified = verify_csr(&csr)?;
        pki.open_token(&sealed, &verified.sha256, 1_800_000_000_000)?;
        let issued = pki.issue_node_cert(&IssueRequest {
            node_id: "node_bench",
            role: "node",
            spki_der: &verified.spki_der,
            statements: &[],
            not_before_ms: 1_800_000_000_000,
            not_after_ms: 1_800_086_400_000,
        })?;
        let response = pki.sign_response(
            gatehouse_proto::JoinResponseBody {
                v: 1,
                csr_sha256: hex::encode(verified.sha256),
                node_id: "node_bench".into(),
                chain: vec![issued.der, pki.node_ca_der().to_vec()],
                deferral: None,
                trust: None,
            },
            1_800_000_000_000,
        )?;
        host += started.elapsed();

        let started = Instant::now();
        gatehouse_agent::verify_response(&trust, &response, &csr_sha256, &key.spki_der())?;
        agent += started.elapsed();
    }
    let per = |d: Duration| d.as_secs_f64() * 1e6 / iterations.max(1) as f64;
    let (host_us, agent_us) = (per(host), per(agent));
    Ok(Crypto {
        host_us,
        agent_us,
        limit_joins_per_s: cores as f64 * 1e6 / (host_us + agent_us),
    })
}

/// Token joins' statements alone, `joins` of them from `tasks` tasks at once: joins per
/// second of wall time.
pub(super) async fn database(db: &Db, joins: usize, tasks: usize) -> anyhow::Result<f64> {
    let prefix = format!("{:08x}", rand::random::<u32>());
    let mut tx = db.begin().await?;
    let now = tx.now().await?;
    for i in 0..joins {
        tx.insert_token(&NewToken {
            id: format!("tok_db{prefix}{i:08}"),
            role: TokenRole::Node,
            secret_sha256: [0; 32],
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
    }
    tx.commit().await?;

    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let started = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..tasks {
        let (db, next, prefix) = (db.clone(), next.clone(), prefix.clone());
        set.spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= joins {
                    return Ok::<(), anyhow::Error>(());
                }
                one_join(&db, &format!("tok_db{prefix}{i:08}")).await?;
            }
        });
    }
    while let Some(done) = set.join_next().await {
        done.context("a database task panicked")??;
    }
    Ok(joins as f64 / started.elapsed().as_secs_f64())
}

/// One token join's statements, as JoinService runs them: the attestor's read of its token,
/// then the locked phase (the token judged as read, its spend proving it unchanged) as one
/// query: on PostgreSQL one statement committed on its own, on SQLite a batch member's
/// savepoint to its release, then the wait for its batch's commit.
async fn one_join(db: &Db, token: &str) -> anyhow::Result<()> {
    let mut read = db.read().await?;
    let Some(seen) = read.read_token(token).await? else {
        anyhow::bail!("token {token} is gone");
    };
    let _ = read.now().await?;
    drop(read);
    let mut tx = db.begin().await?;
    let now = tx.now().await?;
    // Keys made as the host makes them, so they land in the indexes where the host's do.
    let node = new_id("node_");
    // A certificate's size, distinct per join; the serial is the row's key.
    let serial = new_serial()?.1;
    let mut der = serial.clone().into_bytes();
    der.resize(600, 0x30);
    let new_node = super::fill::root_node(node.clone(), now);
    let cert = NewNodeCert {
        serial,
        node_id: node.clone(),
        der,
        generation: 1,
        role: NodeRole::Node,
        not_before: now,
        not_after: now + 86_400_000,
        statements: vec![],
        created_at: now,
    };
    let audit = NewAudit {
        at: now,
        attestor: "join-token".into(),
        round: 1,
        result: AuditResult::Admitted,
        reason: None,
        node_id: Some(node.clone()),
        token_id: Some(token.to_owned()),
        subject: None,
        node_key: Some("unattested".into()),
        csr_sha256: Some([1; 32]),
        client_addr: None,
    };
    let event = NewEvent {
        at: now,
        kind: "node.joined".into(),
        tenant_id: Some("root".into()),
        node_id: Some(node),
        attestor: Some("join-token".into()),
        reason: None,
        token_id: Some(token.to_owned()),
        payload: serde_json::json!({ "attestor": "join-token" }),
    };
    // On PostgreSQL a reading of the server's clock answers for a second; when it had to be
    // read again, `now` was this transaction's first statement, and JoinService writes the
    // admission as statements of an open transaction instead (`imports::staged`), as here.
    if !tx.admits_in_one_statement() {
        tx.insert_node_with_cert(&new_node, &cert).await?;
        tx.spend_token_recording(token, &audit, &event).await?;
        return Ok(tx.commit().await?);
    }
    let admitted = tx
        .admit_in_one_statement(&(&seen).into(), &new_node, &cert, &audit, &event)
        .await?;
    anyhow::ensure!(admitted == Admission::Committed, "{token}: {admitted:?}");
    Ok(())
}

/// The median time, in microseconds, of overwriting 4 KiB of a file in `dir` and
/// `fdatasync`-ing it, `count` times: what one commit waits for on this disk (the file is
/// written whole first, as PostgreSQL's WAL segments and a reused SQLite WAL are, so no flush
/// also carries a change of size; `pg_test_fsync`'s "fdatasync" line measures the same). It
/// moves from hour to hour on a shared VM (84 µs one day, 171–192 µs another), so each run
/// records its own beside the join rates.
pub(super) fn disk_flush_us(dir: &Path, count: usize) -> anyhow::Result<f64> {
    use std::os::unix::fs::FileExt as _;
    const BLOCK: usize = 4096;
    let mut file = tempfile::tempfile_in(dir)
        .with_context(|| format!("a file to flush in {}", dir.display()))?;
    file.write_all(&vec![0; BLOCK * count])?;
    file.sync_all()?;
    let block = [0x5a_u8; BLOCK];
    let mut samples = Vec::with_capacity(count);
    for i in 0..count {
        let started = Instant::now();
        file.write_all_at(&block, (i * BLOCK) as u64)?;
        file.sync_data()?;
        samples.push(started.elapsed());
    }
    Ok(super::median(samples))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flush_is_timed_in_the_directory_given_and_leaves_nothing_there() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let us = disk_flush_us(dir.path(), 5).expect("flushes in a writable directory");
        assert!(us > 0.0 && us.is_finite(), "{us}");
        let left = std::fs::read_dir(dir.path()).expect("readable").count();
        assert_eq!(left, 0, "the flushed file is removed");

        let gone = dir.path().join("missing");
        let error = disk_flush_us(&gone, 5).expect_err("no such directory");
        assert!(format!("{error:#}").contains("missing"), "{error:#}");
    }
}
