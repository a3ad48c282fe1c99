//! The store against real databases: SQLite always, Postgres when `DATABASE_URL` is set.
//! Each test runs its body on every backend, each on a fresh database.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sqlx::Row;

use super::testing::{self, TestDb};
use super::*;

fn token(id: &str, uses: u32) -> NewToken {
    NewToken {
        id: id.into(),
        role: TokenRole::Provisioned,
        secret_sha256: [7; 32],
        tenant_id: "root".into(),
        pool_id: None,
        site_id: Some("site-a".into()),
        expires_at: i64::MAX,
        uses,
        expect: TokenExpect {
            product_uuid: Some("uuid-1".into()),
            mac: None,
            node_id: None,
        },
        reclaim: true,
        created_at: 1_000,
    }
}

fn new_node(id: &str) -> NewNode {
    NewNode {
        id: id.into(),
        tenant_id: "root".into(),
        pool_id: None,
        site_id: None,
        role: NodeRole::Node,
        identity_generation: 1,
        hardware_key: None,
        created_at: 2_000,
    }
}

async fn seed_token(db: &Db, id: &str, uses: u32) {
    let mut tx = db.begin().await.unwrap();
    tx.insert_token(&token(id, uses)).await.unwrap();
    tx.commit().await.unwrap();
}

async fn uses_left(db: &Db, id: &str) -> u32 {
    let mut tx = db.begin().await.unwrap();
    let left = tx.lock_token(id).await.unwrap().unwrap().uses_left;
    tx.rollback().await.unwrap();
    left
}

/// Waits until no connection to this test's database is idle inside a transaction (an
/// abandoned transaction is rolled back by a task), failing after a few seconds. Asks from a
/// connection of its own: one from the pool could be the very connection left behind.
async fn assert_no_idle_transaction(t: &TestDb) {
    if t.db.backend() != Backend::Postgres {
        return;
    }
    let idle = "SELECT COUNT(*) AS n FROM pg_stat_activity WHERE datname = current_database() \
                AND state IN ('idle in transaction', 'idle in transaction (aborted)')";
    assert!(
        testing::postgres_counts_none(&t.url, idle, None).await,
        "a connection was left idle in a transaction"
    );
}

#[tokio::test]
async fn migrations_apply_twice_idempotently() {
    for t in testing::all().await {
        t.db.migrate().await.unwrap();
        t.db.migrate().await.unwrap();
        let mut conn = t.db.connections().acquire().await.unwrap();
        let applied = sqlx::query("SELECT COUNT(*) AS n FROM _sqlx_migrations")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        assert_eq!(applied.get::<i64, _>("n"), 9, "{:?}", t.db.backend());
        let roots = sqlx::query("SELECT COUNT(*) AS n FROM tenants WHERE id = 'root'")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        assert_eq!(roots.get::<i64, _>("n"), 1);
        drop(conn);
        // A second pool on the same database migrates as a restarted replica would.
        let again = Db::connect(&t.url).await.unwrap();
        again.migrate().await.unwrap();
        again.close().await;
    }
}

#[tokio::test]
async fn sqlite_connections_get_their_settings() {
    let t = testing::sqlite().await;
    let mut conn = t.db.connections().acquire().await.unwrap();
    let mode = sqlx::query("PRAGMA journal_mode")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert_eq!(mode.get::<String, _>(0), "wal");
    // synchronous FULL (2): a commit is on disk before a join is answered. temp_store MEMORY
    // (2): a commit batch's statement journal never goes to a temporary file.
    for (pragma, expected) in [
        ("foreign_keys", 1),
        ("busy_timeout", 5000),
        ("synchronous", 2),
        ("temp_store", 2),
        // Only a backstop: the checkpointer copies the WAL (the next test).
        ("wal_autocheckpoint", checkpoint::writer_backstop_pages!()),
    ] {
        let row = sqlx::query(&format!("PRAGMA {pragma}"))
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        assert_eq!(row.get::<i64, _>(0), expected, "PRAGMA {pragma}");
    }
}

/// The length of the file at `path` once it is at least `at_least`, or after `wait`.
async fn settled_len(path: &std::path::Path, at_least: u64, wait: Duration) -> u64 {
    let len = || std::fs::metadata(path).map_or(0, |m| m.len());
    let deadline = tokio::time::Instant::now() + wait;
    while len() < at_least && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    len()
}

#[tokio::test]
async fn sqlite_wal_reaches_the_database_file_beside_the_writer() {
    let t = testing::sqlite().await;
    let file = t.sqlite_file().unwrap();
    let before = std::fs::metadata(&file).unwrap().len();
    // 64 values of 16 KiB: some 256 pages, far below the write connection's own
    // checkpoint, so only the checkpointer can move them into the file while every
    // connection stays open.
    let value = vec![0x5a; 16 * 1024];
    for i in 0..64 {
        let mut tx = t.db.begin().await.unwrap();
        tx.kv_put("a", &format!("k{i}"), &value).await.unwrap();
        tx.commit().await.unwrap();
    }
    let grown = before + 64 * 16 * 1024;
    let after = settled_len(&file, grown, Duration::from_secs(10)).await;
    assert!(after >= grown, "{before} -> {after} bytes, wanted {grown}");
    // And nothing was lost on the way: the read pool sees the first and the last value.
    let mut read = t.db.read().await.unwrap();
    for i in [0, 63] {
        assert_eq!(
            read.kv_get("a", &format!("k{i}")).await.unwrap(),
            Some(value.clone())
        );
    }
}

/// How many of this process's file descriptors are open on `path`.
fn descriptors_on(path: &std::path::Path) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter(|target| target == path)
        .count()
}

#[tokio::test]
async fn closing_a_sqlite_db_closes_the_checkpointers_connection_too() {
    let t = testing::sqlite().await;
    let mut tx = t.db.begin().await.unwrap();
    tx.kv_put("a", "k", b"v").await.unwrap();
    tx.commit().await.unwrap();
    let file = std::fs::canonicalize(t.sqlite_file().unwrap()).unwrap();
    // The write connection's and the checkpointer's, at least.
    assert!(descriptors_on(&file) >= 2);
    t.db.close().await;
    assert_eq!(descriptors_on(&file), 0, "a connection is still open");
}

#[tokio::test]
async fn now_is_close_to_the_system_clock() {
    for t in testing::all().await {
        let mut tx = t.db.begin().await.unwrap();
        let system = i64::try_from(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_millis(),
        )
        .unwrap();
        let first = tx.now().await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        let second = tx.now().await.unwrap();
        tx.commit().await.unwrap();
        assert!(
            (first - system).abs() < 2_000,
            "{:?}: db {first} vs system {system}",
            t.db.backend()
        );
        // Real time, not the transaction's start time.
        assert!(
            second >= first + 15,
            "{:?}: {first} then {second}",
            t.db.backend()
        );
    }
}

#[tokio::test]
async fn tokens_round_trip_and_spend() {
    for t in testing::all().await {
        seed_token(&t.db, "tok_a", 2).await;
        let mut tx = t.db.begin().await.unwrap();
        let row = tx.lock_token("tok_a").await.unwrap().unwrap();
        assert_eq!(
            row,
            TokenRow {
                id: "tok_a".into(),
                role: TokenRole::Provisioned,
                secret_sha256: [7; 32],
                tenant_id: "root".into(),
                pool_id: None,
                site_id: Some("site-a".into()),
                expires_at: i64::MAX,
                revoked: false,
                uses_total: 2,
                uses_left: 2,
                expect: TokenExpect {
                    product_uuid: Some("uuid-1".into()),
                    mac: None,
                    node_id: None
                },
                reclaim: true,
                created_at: 1_000,
            }
        );
        assert!(tx.lock_token("tok_missing").await.unwrap().is_none());
        assert_eq!(tx.consume_token("tok_a").await.unwrap(), 1);
        assert_eq!(tx.consume_token("tok_a").await.unwrap(), 0);
        assert!(matches!(
            tx.consume_token("tok_a").await,
            Err(StoreError::NoUsesLeft)
        ));
        assert!(matches!(
            tx.consume_token("tok_missing").await,
            Err(StoreError::NoUsesLeft)
        ));
        // NoUsesLeft is an outcome, not a failed statement: the transaction still commits.
        assert!(tx.revoke_token("tok_a").await.unwrap());
        assert!(tx.revoke_token("tok_a").await.unwrap());
        assert!(!tx.revoke_token("tok_missing").await.unwrap());
        tx.commit().await.unwrap();

        let mut tx = t.db.begin().await.unwrap();
        tx.insert_token(&NewToken {
            created_at: 500,
            ..token("tok_b", 1)
        })
        .await
        .unwrap();
        let list = tx.list_tokens().await.unwrap();
        assert_eq!(
            list.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
            ["tok_b", "tok_a"]
        );
        assert!(list[1].revoked && list[1].uses_left == 0);
        tx.commit().await.unwrap();
    }
}

/// 20 concurrent joins on a 3-use token: exactly 3 spend a use. On SQLite two pools share the
/// file, as two processes would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_is_spent_exactly_its_uses_under_concurrency() {
    for t in testing::all().await {
        seed_token(&t.db, "tok_race", 3).await;
        let second = Db::connect(&t.url).await.unwrap();
        let spent = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for i in 0..20 {
            let db = if i % 2 == 0 {
                t.db.clone()
            } else {
                second.clone()
            };
            let spent = spent.clone();
            tasks.push(tokio::spawn(async move {
                let mut tx = db.begin().await.unwrap();
                let row = tx.lock_token("tok_race").await.unwrap().unwrap();
                // Decide on the locked row, as an attestor would, then spend.
                tokio::time::sleep(Duration::from_millis(2)).await;
                match tx.consume_token("tok_race").await {
                    Ok(left) => {
                        assert_eq!(left + 1, row.uses_left, "the lock saw the latest count");
                        tx.commit().await.unwrap();
                        spent.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(StoreError::NoUsesLeft) => {
                        assert_eq!(row.uses_left, 0);
                        tx.rollback().await.unwrap();
                    }
                    Err(e) => panic!("{e}"),
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(spent.load(Ordering::SeqCst), 3, "{:?}", t.db.backend());
        assert_eq!(uses_left(&t.db, "tok_race").await, 0);
        second.close().await;
        assert_no_idle_transaction(&t).await;
    }
}

#[tokio::test]
async fn a_dropped_transaction_rolls_back_and_releases_its_connection() {
    for t in testing::all().await {
        seed_token(&t.db, "tok_held", 1).await;
        {
            let mut tx = t.db.begin().await.unwrap();
            tx.lock_token("tok_held").await.unwrap().unwrap();
            assert_eq!(tx.consume_token("tok_held").await.unwrap(), 0);
            tx.insert_token(&token("tok_ghost", 1)).await.unwrap();
            // Dropped: neither committed nor rolled back.
        }
        assert_no_idle_transaction(&t).await;
        // The row lock is gone (a reused connection still in the transaction would hold it
        // until lock_timeout) and nothing was written.
        let started = std::time::Instant::now();
        let mut tx = t.db.begin().await.unwrap();
        assert_eq!(
            tx.lock_token("tok_held").await.unwrap().unwrap().uses_left,
            1
        );
        assert!(tx.lock_token("tok_ghost").await.unwrap().is_none());
        tx.commit().await.unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
    }
}

/// A transaction dropped between statements is rolled back on its connection, which then
/// is kept for the next transaction instead of costing a reconnect.
#[tokio::test]
async fn a_dropped_transaction_keeps_its_connection_when_the_rollback_succeeds() {
    for t in testing::all().await {
        let kept = t.db.connections();
        let pool = kept.pool();
        // A dropped transaction's connection comes back asynchronously (after its rollback):
        // wait until every connection is idle, kept or in the pool.
        let settle = || async {
            for _ in 0..200 {
                if kept.idle() + pool.num_idle() == pool.size() as usize {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!("connections did not come back to the pool");
        };
        settle().await;
        let mut tx = t.db.begin().await.unwrap();
        tx.insert_tenant("dropped").await.unwrap();
        let open = pool.size();
        drop(tx);
        settle().await;
        assert_eq!(
            pool.size(),
            open,
            "{:?}: the connection was closed",
            t.db.backend()
        );
        assert_no_idle_transaction(&t).await;
        // And the rollback happened: the tenant can be created again.
        let mut tx = t.db.begin().await.unwrap();
        tx.insert_tenant("dropped").await.unwrap();
        tx.commit().await.unwrap();
    }
}

/// Cancelling a join at any await point (a client hanging up) spends nothing and leaves no
/// connection inside a transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_transactions_spend_nothing() {
    for t in testing::all().await {
        seed_token(&t.db, "tok_cancel", 5).await;
        for step in 0..60u64 {
            let db = t.db.clone();
            let join = async move {
                let mut tx = db.begin().await.unwrap();
                tx.lock_token("tok_cancel").await.unwrap();
                tx.consume_token("tok_cancel").await.unwrap();
                tx.record_use("x", "subject", i64::MAX, 0).await.unwrap();
                // Never commits: stands for a hang-up before the end of the round.
                std::future::pending::<()>().await;
            };
            let outcome = tokio::time::timeout(Duration::from_micros(step * 60), join).await;
            assert!(outcome.is_err());
        }
        assert_no_idle_transaction(&t).await;
        assert_eq!(uses_left(&t.db, "tok_cancel").await, 5);
        let mut tx = t.db.begin().await.unwrap();
        assert_eq!(
            tx.record_use("x", "subject", i64::MAX, 0).await.unwrap(),
            UseOutcome::Recorded
        );
        tx.commit().await.unwrap();
    }
}

#[tokio::test]
async fn a_failed_statement_aborts_the_commit() {
    for t in testing::all().await {
        let mut tx = t.db.begin().await.unwrap();
        tx.insert_tenant("acme").await.unwrap();
        // No such tenant: the foreign key refuses it.
        let err = tx
            .insert_token(&NewToken {
                tenant_id: "nobody".into(),
                ..token("tok_x", 1)
            })
            .await;
        assert!(matches!(err, Err(StoreError::Query(_))), "{err:?}");
        assert!(matches!(tx.commit().await, Err(StoreError::Aborted)));
        assert_no_idle_transaction(&t).await;
        let mut tx = t.db.begin().await.unwrap();
        // The tenant inserted before the failure was rolled back with it.
        tx.insert_tenant("acme").await.unwrap();
        tx.commit().await.unwrap();
    }
}

#[tokio::test]
async fn single_use_evidence_is_recorded_once_until_it_expires() {
    for t in testing::all().await {
        let mut tx = t.db.begin().await.unwrap();
        assert_eq!(
            tx.record_use("tpm", "ek:1", 100, 10).await.unwrap(),
            UseOutcome::Recorded
        );
        assert_eq!(
            tx.record_use("tpm", "ek:1", 100, 10).await.unwrap(),
            UseOutcome::Reused
        );
        // The ledger is per attestor.
        assert_eq!(
            tx.record_use("x509pop", "ek:1", 100, 10).await.unwrap(),
            UseOutcome::Recorded
        );
        tx.commit().await.unwrap();

        let mut tx = t.db.begin().await.unwrap();
        assert_eq!(
            tx.record_use("tpm", "ek:1", 200, 99).await.unwrap(),
            UseOutcome::Reused
        );
        // Expired at 100: recorded anew, with the new expiry.
        assert_eq!(
            tx.record_use("tpm", "ek:1", 300, 100).await.unwrap(),
            UseOutcome::Recorded
        );
        assert_eq!(
            tx.record_use("tpm", "ek:1", 400, 299).await.unwrap(),
            UseOutcome::Reused
        );
        tx.commit().await.unwrap();

        // A rolled-back record is not a use.
        let mut tx = t.db.begin().await.unwrap();
        assert_eq!(
            tx.record_use("tpm", "ek:2", 100, 10).await.unwrap(),
            UseOutcome::Recorded
        );
        tx.rollback().await.unwrap();
        let mut tx = t.db.begin().await.unwrap();
        assert_eq!(
            tx.record_use("tpm", "ek:2", 100, 10).await.unwrap(),
            UseOutcome::Recorded
        );
        tx.commit().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_records_of_one_subject_admit_one() {
    for t in testing::all().await {
        let recorded = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..10 {
            let db = t.db.clone();
            let recorded = recorded.clone();
            tasks.push(tokio::spawn(async move {
                let mut tx = db.begin().await.unwrap();
                let outcome = tx
                    .record_use("cloud-iid", "doc:1", i64::MAX, 0)
                    .await
                    .unwrap();
                // The transaction is still usable after a reuse, also on Postgres.
                tx.now().await.unwrap();
                tx.commit().await.unwrap();
                if outcome == UseOutcome::Recorded {
                    recorded.fetch_add(1, Ordering::SeqCst);
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(recorded.load(Ordering::SeqCst), 1, "{:?}", t.db.backend());
    }
}

#[tokio::test]
async fn expired_uses_are_pruned_in_batches() {
    for t in testing::all().await {
        let mut tx = t.db.begin().await.unwrap();
        for i in 0..5 {
            tx.record_use("a", &format!("old-{i}"), 50, 0)
                .await
                .unwrap();
        }
        tx.record_use("a", "live-1", 500, 0).await.unwrap();
        tx.record_use("b", "live-2", 500, 0).await.unwrap();
        assert_eq!(tx.prune_uses(100, 3).await.unwrap(), 3);
        assert_eq!(tx.prune_uses(100, 3).await.unwrap(), 2);
        assert_eq!(tx.prune_uses(100, 3).await.unwrap(), 0);
        assert_eq!(
            tx.record_use("a", "live-1", 900, 100).await.unwrap(),
            UseOutcome::Reused
        );
        assert_eq!(
            tx.record_use("b", "live-2", 900, 100).await.unwrap(),
            UseOutcome::Reused
        );
        tx.commit().await.unwrap();
    }
}

#[tokio::test]
async fn nodes_and_certificates() {
    for t in testing::all().await {
        let mut tx = t.db.begin().await.unwrap();
        tx.insert_pool(&PoolRow {
            tenant_id: "root".into(),
            id: "gpu".into(),
            join_attestors: None,
            owner: None,
        })
        .await
        .unwrap();
        tx.insert_node(&NewNode {
            pool_id: Some("gpu".into()),
            hardware_key: Some("ak:1".into()),
            ..new_node("node_1")
        })
        .await
        .unwrap();
        tx.insert_node(&NewNode {
            role: NodeRole::NodeTenant,
            created_at: 3_000,
            ..new_node("node_2")
        })
        .await
        .unwrap();
        let node = tx.node("node_1").await.unwrap().unwrap();
        assert_eq!(
            node,
            NodeRow {
                id: "node_1".into(),
                tenant_id: "root".into(),
                pool_id: Some("gpu".into()),
                site_id: None,
                role: NodeRole::Node,
                retired: false,
                cordoned: false,
                identity_generation: 1,
                hardware_key: Some("ak:1".into()),
                created_at: 2_000,
                updated_at: 2_000,
                deleted_at: None,
            }
        );
        assert!(tx.node("node_9").await.unwrap().is_none());
        let nodes = tx.list_nodes().await.unwrap();
        assert_eq!(
            nodes.iter().map(|n| n.role).collect::<Vec<_>>(),
            [NodeRole::Node, NodeRole::NodeTenant]
        );

        assert!(tx.rekey_node("node_1", 2, 4_000).await.unwrap());
        assert!(
            !tx.rekey_node("node_1", 2, 5_000).await.unwrap(),
            "generations only go up"
        );
        assert!(!tx.rekey_node("node_9", 3, 5_000).await.unwrap());
        let node = tx.node("node_1").await.unwrap().unwrap();
        assert_eq!((node.identity_generation, node.updated_at), (2, 4_000));

        let cert = |serial: &str, generation: u32, der: Vec<u8>| NewNodeCert {
            serial: serial.into(),
            node_id: "node_1".into(),
            der,
            generation,
            role: NodeRole::Node,
            not_before: 10,
            not_after: 20,
            statements: vec!["urn:bc:tpm-ak:sha256:ab".into()],
            created_at: 30,
        };
        let (first, second) = (cert_der("01"), cert_der("02"));
        tx.insert_node_cert(&cert("01", 1, first.clone()))
            .await
            .unwrap();
        tx.insert_node_cert(&cert("02", 2, second.clone()))
            .await
            .unwrap();
        let found = tx.node_cert_by_der(&first).await.unwrap().unwrap();
        assert_eq!(
            found,
            NodeCertRow {
                serial: "01".into(),
                node_id: "node_1".into(),
                der: first.clone(),
                generation: 1,
                role: NodeRole::Node,
                not_before: 10,
                not_after: 20,
                revoked: None,
                statements: vec!["urn:bc:tpm-ak:sha256:ab".into()],
                created_at: 30,
            }
        );
        // Found by the serial it names, but only as the very bytes issued: another certificate
        // with the same serial (another key, as a forger would make it), a cut copy, or bytes
        // that are no certificate, are not found.
        for other in [cert_der("01"), first[..first.len() - 1].to_vec(), vec![]] {
            assert!(tx.node_cert_by_der(&other).await.unwrap().is_none());
            assert!(tx.node_cert("01", &other).await.unwrap().is_none());
        }
        // Read again by the serial found, as a renewal does under its lock: the same row, and
        // only under its own serial.
        assert_eq!(tx.node_cert("01", &first).await.unwrap(), Some(found));
        assert!(tx.node_cert("02", &first).await.unwrap().is_none());
        assert_eq!(tx.revoke_node_certs_below("node_1", 2).await.unwrap(), 1);
        assert_eq!(tx.revoke_node_certs_below("node_1", 2).await.unwrap(), 0);
        assert_eq!(
            tx.node_cert_by_der(&first).await.unwrap().unwrap().revoked,
            Some(Revocation::Superseded)
        );
        assert_eq!(
            tx.node_cert_by_der(&second).await.unwrap().unwrap().revoked,
            None
        );
        tx.commit().await.unwrap();
    }
}

/// A certificate with serial `serial` (hex), self-signed by a fresh key: what
/// [`Tx::node_cert_by_der`] finds by the serial it names.
fn cert_der(serial: &str) -> Vec<u8> {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.serial_number = Some(rcgen::SerialNumber::from_slice(
        &hex::decode(serial).unwrap(),
    ));
    params.self_signed(&key).unwrap().der().to_vec()
}

#[tokio::test]
async fn a_hardware_identity_binds_one_node() {
    for t in testing::all().await {
        let mut tx = t.db.begin().await.unwrap();
        tx.insert_node(&new_node("node_1")).await.unwrap();
        tx.insert_node(&new_node("node_2")).await.unwrap();
        assert_eq!(tx.bound_node("tpm-ek-sha256", "ab").await.unwrap(), None);
        tx.bind("tpm-ek-sha256", "ab", "node_1").await.unwrap();
        tx.bind("tpm-ek-sha256", "ab", "node_1").await.unwrap();
        match tx.bind("tpm-ek-sha256", "ab", "node_2").await {
            Err(StoreError::BoundElsewhere(node)) => assert_eq!(node, "node_1"),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            tx.bound_node("tpm-ek-sha256", "ab")
                .await
                .unwrap()
                .as_deref(),
            Some("node_1")
        );
        assert_eq!(tx.bound_node("mac", "ab").await.unwrap(), None);
        tx.commit().await.unwrap();
    }
}

fn cert_of(node_id: &str, serial: &str, generation: u32, created_at: i64) -> NewNodeCert {
    NewNodeCert {
        serial: serial.into(),
        node_id: node_id.into(),
        der: format!("der-{serial}").into_bytes(),
        generation,
        role: NodeRole::Node,
        not_before: 10,
        not_after: 20,
        statements: vec![],
        created_at,
    }
}

/// A joining node's two rows go in together ([`Tx::insert_node_with_cert`]): the
/// certificate's foreign key holds within the one statement, and a certificate that cannot
/// go in leaves no node behind.
#[tokio::test]
async fn a_new_node_goes_in_with_its_first_certificate_or_not_at_all() {
    for t in testing::all().await {
        let b = t.db.backend();
        let mut tx = t.db.begin().await.unwrap();
        tx.insert_node_with_cert(&new_node("node_w"), &cert_of("node_w", "w1", 1, 100))
            .await
            .unwrap();
        tx.commit().await.unwrap();
        let mut tx = t.db.begin().await.unwrap();
        assert!(tx.node("node_w").await.unwrap().is_some(), "{b:?}");
        let certs = tx.node_certs("node_w").await.unwrap();
        assert_eq!(
            certs.iter().map(|c| c.serial.as_str()).collect::<Vec<_>>(),
            ["w1"],
            "{b:?}"
        );
        tx.rollback().await.unwrap();

        // The serial is taken: neither row stays.
        let mut tx = t.db.begin().await.unwrap();
        assert!(
            tx.insert_node_with_cert(&new_node("node_x"), &cert_of("node_x", "w1", 1, 100))
                .await
                .is_err(),
            "{b:?}"
        );
        assert!(
            matches!(tx.commit().await, Err(StoreError::Aborted)),
            "{b:?}"
        );
        let mut tx = t.db.begin().await.unwrap();
        assert!(tx.node("node_x").await.unwrap().is_none(), "{b:?}");
        tx.rollback().await.unwrap();
    }
}

/// Why each of a node's certificates was revoked, by serial (`None`: live).
async fn revocations(tx: &mut Tx, node_id: &str) -> Vec<(String, Option<Revocation>)> {
    tx.node_certs(node_id)
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.serial, c.revoked))
        .collect()
}

#[tokio::test]
async fn cordon_revoke_identity_and_retire() {
    for t in testing::all().await {
        let b = t.db.backend();
        let mut tx = t.db.begin().await.unwrap();
        tx.insert_node(&new_node("node_1")).await.unwrap();
        tx.insert_node(&new_node("node_2")).await.unwrap();
        tx.insert_node_cert(&cert_of("node_1", "a1", 1, 100))
            .await
            .unwrap();
        tx.insert_node_cert(&cert_of("node_1", "a2", 1, 200))
            .await
            .unwrap();
        tx.insert_node_cert(&cert_of("node_2", "b1", 1, 100))
            .await
            .unwrap();

        // Cordon and uncordon; an unknown node is not found.
        assert!(tx.set_cordoned("node_1", true, 5_000).await.unwrap());
        let n = tx.node("node_1").await.unwrap().unwrap();
        assert_eq!((n.cordoned, n.updated_at), (true, 5_000), "{b:?}");
        assert!(tx.set_cordoned("node_1", false, 5_100).await.unwrap());
        assert!(!tx.node("node_1").await.unwrap().unwrap().cordoned);
        assert!(!tx.set_cordoned("node_9", true, 5_100).await.unwrap());

        // One certificate, by an operator: only the node's own, only once.
        assert!(!tx.revoke_node_cert("node_2", "a1").await.unwrap());
        assert!(tx.revoke_node_cert("node_1", "a1").await.unwrap());
        assert!(!tx.revoke_node_cert("node_1", "a1").await.unwrap());
        assert!(!tx.revoke_node_cert("node_1", "zz").await.unwrap());
        assert_eq!(
            revocations(&mut tx, "node_1").await,
            [
                ("a2".to_owned(), None),
                ("a1".to_owned(), Some(Revocation::Operator))
            ],
            "{b:?}: newest first"
        );

        // Revoke-identity raises the generation and revokes what is live; a certificate
        // revoked before keeps its reason. Other nodes are untouched.
        assert_eq!(tx.revoke_identity("node_1", 6_000).await.unwrap(), Some(2));
        let n = tx.node("node_1").await.unwrap().unwrap();
        assert_eq!((n.identity_generation, n.updated_at), (2, 6_000));
        assert_eq!(
            revocations(&mut tx, "node_1").await,
            [
                ("a2".to_owned(), Some(Revocation::IdentityRevoked)),
                ("a1".to_owned(), Some(Revocation::Operator))
            ]
        );
        assert_eq!(
            revocations(&mut tx, "node_2").await,
            [("b1".to_owned(), None)]
        );
        assert_eq!(tx.revoke_identity("node_1", 6_100).await.unwrap(), Some(3));
        assert_eq!(tx.revoke_identity("node_9", 6_100).await.unwrap(), None);

        // Retire revokes the certificates of the current generation as node-removed.
        tx.insert_node_cert(&cert_of("node_1", "a3", 3, 300))
            .await
            .unwrap();
        assert!(tx.retire_node("node_1", 7_000).await.unwrap());
        let n = tx.node("node_1").await.unwrap().unwrap();
        assert_eq!((n.retired, n.updated_at, n.deleted_at), (true, 7_000, None));
        assert_eq!(
            revocations(&mut tx, "node_1").await[0],
            ("a3".to_owned(), Some(Revocation::NodeRemoved))
        );
        assert!(
            !tx.retire_node("node_1", 7_100).await.unwrap(),
            "retired already"
        );
        assert!(!tx.retire_node("node_9", 7_100).await.unwrap());
        assert_eq!(
            tx.revoke_identity("node_1", 7_200).await.unwrap(),
            None,
            "a retired node has no identity to revoke"
        );
        assert!(
            !tx.rekey_node("node_1", 9, 7_300).await.unwrap(),
            "a reclaim does not bring a retired node back"
        );
        assert_eq!(
            tx.node("node_1")
                .await
                .unwrap()
                .unwrap()
                .identity_generation,
            3
        );
        // A retired node is still listed (only deletion hides it).
        assert_eq!(tx.list_nodes().await.unwrap().len(), 2);
        assert_eq!(
            tx.lock_node("node_1").await.unwrap(),
            tx.node("node_1").await.unwrap()
        );
        assert_eq!(tx.lock_node("node_9").await.unwrap(), None);
        tx.commit().await.unwrap();
    }
}

#[tokio::test]
async fn deleting_a_node_frees_its_bindings_and_hides_it() {
    for t in testing::all().await {
        let b = t.db.backend();
        let mut tx = t.db.begin().await.unwrap();
        tx.insert_node(&NewNode {
            hardware_key: Some("uuid-1".into()),
            ..new_node("node_1")
        })
        .await
        .unwrap();
        tx.insert_node(&new_node("node_2")).await.unwrap();
        tx.insert_node(&new_node("node_3")).await.unwrap();
        tx.bind("tpm-ek-sha256", "ab", "node_1").await.unwrap();
        tx.bind("mac", "aa", "node_1").await.unwrap();
        tx.bind("mac", "bb", "node_2").await.unwrap();
        tx.insert_node_cert(&cert_of("node_1", "c1", 1, 100))
            .await
            .unwrap();
        assert!(tx.rekey_node("node_1", 2, 150).await.unwrap());
        assert_eq!(tx.revoke_node_certs_below("node_1", 2).await.unwrap(), 1);
        tx.insert_node_cert(&cert_of("node_1", "c2", 2, 200))
            .await
            .unwrap();
        assert_eq!(
            tx.node_bindings("node_1").await.unwrap(),
            [
                ("mac".to_owned(), "aa".to_owned()),
                ("tpm-ek-sha256".to_owned(), "ab".to_owned())
            ]
        );

        assert!(tx.delete_node("node_1", 8_000).await.unwrap());
        let n = tx.node("node_1").await.unwrap().unwrap();
        assert_eq!(
            (n.retired, n.deleted_at, n.updated_at, n.hardware_key),
            (true, Some(8_000), 8_000, None),
            "{b:?}: the row stays, retired, without its hardware key"
        );
        assert_eq!(
            revocations(&mut tx, "node_1").await,
            [
                ("c2".to_owned(), Some(Revocation::NodeRemoved)),
                ("c1".to_owned(), Some(Revocation::Superseded))
            ]
        );
        assert!(tx.node_bindings("node_1").await.unwrap().is_empty());
        assert_eq!(tx.bound_node("tpm-ek-sha256", "ab").await.unwrap(), None);
        assert_eq!(
            tx.node_bindings("node_2").await.unwrap(),
            [("mac".to_owned(), "bb".to_owned())],
            "other nodes keep theirs"
        );
        assert_eq!(
            tx.list_nodes()
                .await
                .unwrap()
                .into_iter()
                .map(|n| n.id)
                .collect::<Vec<_>>(),
            ["node_2", "node_3"]
        );
        // The freed identity binds another node; the deleted one takes no further action.
        tx.bind("tpm-ek-sha256", "ab", "node_3").await.unwrap();
        assert!(!tx.delete_node("node_1", 8_100).await.unwrap());
        assert!(!tx.set_cordoned("node_1", true, 8_100).await.unwrap());
        assert!(!tx.retire_node("node_1", 8_100).await.unwrap());
        assert_eq!(tx.revoke_identity("node_1", 8_100).await.unwrap(), None);
        assert!(!tx.delete_node("node_9", 8_100).await.unwrap());
        let locked = tx.lock_node("node_1").await.unwrap().unwrap();
        assert_eq!(locked.deleted_at, Some(8_000));
        tx.commit().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_identity_revocations_each_raise_the_generation() {
    for t in testing::all().await {
        let mut tx = t.db.begin().await.unwrap();
        tx.insert_node(&new_node("node_1")).await.unwrap();
        tx.commit().await.unwrap();
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..4 {
            let db = t.db.clone();
            tasks.spawn(async move {
                let mut tx = db.begin().await.unwrap();
                let at = tx.now().await.unwrap();
                let generation = tx.revoke_identity("node_1", at).await.unwrap();
                tx.commit().await.unwrap();
                generation
            });
        }
        let mut generations = Vec::new();
        while let Some(g) = tasks.join_next().await {
            generations.push(g.unwrap());
        }
        generations.sort();
        assert_eq!(
            generations,
            [Some(2), Some(3), Some(4), Some(5)],
            "{:?}",
            t.db.backend()
        );
        assert_no_idle_transaction(&t).await;
    }
}

/// While an operator's transaction holds a node's row, a concurrent transaction cannot add a
/// certificate for it (Postgres; SQLite serialises whole transactions).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_node_takes_no_new_certificate_until_the_lock_ends() {
    let Some(t) = testing::postgres().await else {
        return;
    };
    let mut tx = t.db.begin().await.unwrap();
    tx.insert_node(&new_node("node_1")).await.unwrap();
    tx.commit().await.unwrap();

    let mut operator = t.db.begin().await.unwrap();
    assert!(operator.lock_node("node_1").await.unwrap().is_some());
    let db = t.db.clone();
    let issuer = tokio::spawn(async move {
        let mut tx = db.begin().await.unwrap();
        tx.insert_node_cert(&cert_of("node_1", "c1", 1, 100))
            .await
            .unwrap();
        tx.commit().await.unwrap();
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !issuer.is_finished(),
        "the insert waits for the node's lock"
    );
    assert!(operator.delete_node("node_1", 9_000).await.unwrap());
    assert!(operator.node_certs("node_1").await.unwrap().is_empty());
    operator.commit().await.unwrap();
    issuer.await.unwrap();
    let mut tx = t.db.begin().await.unwrap();
    assert_eq!(tx.node_certs("node_1").await.unwrap().len(), 1);
    tx.commit().await.unwrap();
}

#[tokio::test]
async fn join_requests_open_once_and_admit_once() {
    for t in testing::all().await {
        let mut tx = t.db.begin().await.unwrap();
        let now = tx.now().await.unwrap();
        let later = now + 60_000;
        let opened = tx
            .open_join_request("tpm", "ek:1", &[1; 32], r#"{"ek":"1"}"#, now, later)
            .await
            .unwrap();
        assert!(opened.id.starts_with("jr_"));
        assert_eq!(opened.state, JoinRequestState::Pending);
        assert_eq!(
            (opened.attestor.as_str(), opened.subject.as_str()),
            ("tpm", "ek:1")
        );
        assert_eq!(
            (opened.csr_sha256, opened.details.as_str()),
            ([1; 32], r#"{"ek":"1"}"#)
        );
        assert_eq!(
            (opened.created_at, opened.expires_at, opened.decided_at),
            (now, later, None)
        );

        // A retry finds the same request; another CSR opens another.
        let again = tx
            .open_join_request("tpm", "ek:1", &[1; 32], "{}", now + 5, later)
            .await
            .unwrap();
        assert_eq!(again, opened);
        let other = tx
            .open_join_request("tpm", "ek:1", &[2; 32], "{}", now, later)
            .await
            .unwrap();
        assert_ne!(other.id, opened.id);

        // Scoped to the attestor.
        assert!(
            tx.join_request("x509pop", &opened.id)
                .await
                .unwrap()
                .is_none()
        );
        assert!(
            !tx.consume_join_request("tpm", &opened.id).await.unwrap(),
            "not approved yet"
        );

        let approve = JoinDecision::Approve {
            tenant_id: "root".into(),
            pool_id: None,
            site_id: Some("s".into()),
        };
        assert!(
            tx.decide_join_request(&opened.id, &approve, now + 10)
                .await
                .unwrap()
        );
        assert!(
            !tx.decide_join_request(&opened.id, &JoinDecision::Deny, now + 11)
                .await
                .unwrap()
        );
        let approved = tx.join_request("tpm", &opened.id).await.unwrap().unwrap();
        assert_eq!(approved.state, JoinRequestState::Approved);
        assert_eq!(
            (approved.tenant_id.as_deref(), approved.site_id.as_deref()),
            (Some("root"), Some("s"))
        );
        assert_eq!(approved.decided_at, Some(now + 10));
        // Still the open one for this CSR while approved.
        assert_eq!(
            tx.open_join_request("tpm", "ek:1", &[1; 32], "{}", now, later)
                .await
                .unwrap()
                .id,
            opened.id
        );

        assert!(
            !tx.consume_join_request("x509pop", &opened.id)
                .await
                .unwrap()
        );
        assert!(tx.consume_join_request("tpm", &opened.id).await.unwrap());
        assert!(
            !tx.consume_join_request("tpm", &opened.id).await.unwrap(),
            "admits once"
        );
        // A used approval reads `used`, distinct from one that lapsed (`expired`).
        let used = tx.join_request("tpm", &opened.id).await.unwrap().unwrap();
        assert_eq!(used.state, JoinRequestState::Used);

        assert!(
            tx.decide_join_request(&other.id, &JoinDecision::Deny, now + 10)
                .await
                .unwrap()
        );
        let denied = tx.join_request("tpm", &other.id).await.unwrap().unwrap();
        assert_eq!(
            (denied.state, denied.tenant_id),
            (JoinRequestState::Denied, None)
        );

        let bad = tx
            .open_join_request("tpm", "ek:1", &[3; 32], "not json", now, later)
            .await;
        assert!(
            matches!(bad, Err(StoreError::InvalidJson { .. })),
            "{bad:?}"
        );
        tx.commit().await.unwrap();
    }
}

#[tokio::test]
async fn join_requests_lapse() {
    for t in testing::all().await {
        let mut tx = t.db.begin().await.unwrap();
        let now = tx.now().await.unwrap();
        // Lapsed a second ago by database time.
        let stale = tx
            .open_join_request("tpm", "ek:1", &[1; 32], "{}", now - 10_000, now - 1_000)
            .await
            .unwrap();
        let read = tx.join_request("tpm", &stale.id).await.unwrap().unwrap();
        assert_eq!(read.state, JoinRequestState::Expired);
        let approve = JoinDecision::Approve {
            tenant_id: "root".into(),
            pool_id: None,
            site_id: None,
        };
        assert!(
            !tx.decide_join_request(&stale.id, &approve, now)
                .await
                .unwrap()
        );
        // A new round opens a fresh request.
        let fresh = tx
            .open_join_request("tpm", "ek:1", &[1; 32], "{}", now, now + 60_000)
            .await
            .unwrap();
        assert_ne!(fresh.id, stale.id);
        assert_eq!(fresh.state, JoinRequestState::Pending);

        // Approved, then lapsed before use: cannot be consumed.
        let approved = tx
            .open_join_request("tpm", "ek:2", &[1; 32], "{}", now - 10_000, now + 200)
            .await
            .unwrap();
        assert!(
            tx.decide_join_request(&approved.id, &approve, now - 5_000)
                .await
                .unwrap()
        );
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(!tx.consume_join_request("tpm", &approved.id).await.unwrap());
        assert_eq!(
            tx.join_request("tpm", &approved.id)
                .await
                .unwrap()
                .unwrap()
                .state,
            JoinRequestState::Expired
        );
        tx.commit().await.unwrap();
    }
}

/// Two transactions opening the same request at once end with one request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_join_requests_converge() {
    for t in testing::all().await {
        let mut tasks = Vec::new();
        for _ in 0..6 {
            let db = t.db.clone();
            tasks.push(tokio::spawn(async move {
                let mut tx = db.begin().await.unwrap();
                let now = tx.now().await.unwrap();
                let row = tx
                    .open_join_request("tpm", "ek:9", &[9; 32], "{}", now, now + 60_000)
                    .await
                    .unwrap();
                tx.commit().await.unwrap();
                row.id
            }));
        }
        let mut ids = Vec::new();
        for task in tasks {
            ids.push(task.await.unwrap());
        }
        ids.dedup();
        assert_eq!(ids.len(), 1, "{:?}: {ids:?}", t.db.backend());
    }
}

#[tokio::test]
async fn attestor_kv_is_private_to_each_attestor() {
    for t in testing::all().await {
        let mut tx = t.db.begin().await.unwrap();
        assert_eq!(tx.kv_get("a", "k").await.unwrap(), None);
        tx.kv_put("a", "k", b"one").await.unwrap();
        tx.kv_put("a", "k", b"two").await.unwrap();
        tx.kv_put("b", "k", b"").await.unwrap();
        assert_eq!(
            tx.kv_get("a", "k").await.unwrap().as_deref(),
            Some(&b"two"[..])
        );
        assert_eq!(
            tx.kv_get("b", "k").await.unwrap().as_deref(),
            Some(&b""[..])
        );
        tx.kv_delete("a", "k").await.unwrap();
        tx.kv_delete("a", "missing").await.unwrap();
        assert_eq!(tx.kv_get("a", "k").await.unwrap(), None);
        assert!(tx.kv_get("b", "k").await.unwrap().is_some());
        let big = vec![0u8; KV_VALUE_MAX + 1];
        assert!(matches!(
            tx.kv_put("a", "big", &big).await,
            Err(StoreError::TooLarge { .. })
        ));
        tx.kv_put("a", "max", &big[..KV_VALUE_MAX]).await.unwrap();
        assert_eq!(
            tx.kv_get("a", "max").await.unwrap().map(|v| v.len()),
            Some(KV_VALUE_MAX)
        );
        tx.commit().await.unwrap();
    }
}

#[tokio::test]
async fn events_and_audits_are_read_in_order() {
    for t in testing::all().await {
        let mut tx = t.db.begin().await.unwrap();
        let event = |kind: &str| NewEvent {
            at: 5,
            kind: kind.into(),
            tenant_id: Some("root".into()),
            node_id: None,
            attestor: Some("tpm".into()),
            reason: Some("bound-elsewhere".into()),
            token_id: None,
            payload: serde_json::json!({"round": 1, "macs": ["aa"]}),
        };
        let first = tx
            .insert_event(&event("security.join.refused"))
            .await
            .unwrap();
        let second = tx.insert_event(&event("node.joined")).await.unwrap();
        assert!(second > first);
        let all = tx.list_events(0, 10).await.unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].id, first);
        assert_eq!(all[0].kind, "security.join.refused");
        assert_eq!(
            all[0].payload,
            serde_json::json!({"round": 1, "macs": ["aa"]})
        );
        assert_eq!(all[1].reason.as_deref(), Some("bound-elsewhere"));
        assert_eq!(tx.list_events(first, 10).await.unwrap().len(), 1);
        assert_eq!(tx.list_events(0, 1).await.unwrap()[0].id, first);

        let audit = NewAudit {
            at: 6,
            attestor: "join-token".into(),
            round: 2,
            result: AuditResult::Admitted,
            reason: None,
            node_id: Some("node_1".into()),
            token_id: Some("tok".into()),
            subject: None,
            node_key: Some("unattested".into()),
            csr_sha256: Some([4; 32]),
            client_addr: Some("192.0.2.1:4000".into()),
        };
        let id = tx.insert_audit(&audit).await.unwrap();
        tx.insert_audit(&NewAudit {
            result: AuditResult::Refused,
            csr_sha256: None,
            ..audit.clone()
        })
        .await
        .unwrap();
        let audits = tx.list_audits(0, 10).await.unwrap();
        assert_eq!(
            audits[0],
            AuditRow {
                id,
                at: 6,
                attestor: "join-token".into(),
                round: 2,
                result: AuditResult::Admitted,
                reason: None,
                node_id: Some("node_1".into()),
                token_id: Some("tok".into()),
                subject: None,
                node_key: Some("unattested".into()),
                csr_sha256: Some([4; 32]),
                client_addr: Some("192.0.2.1:4000".into()),
            }
        );
        assert_eq!(
            (audits[1].result, audits[1].csr_sha256),
            (AuditResult::Refused, None)
        );
        tx.commit().await.unwrap();
    }
}

/// A round's audit row and event, as `join::record` writes them.
fn record_rows() -> (NewAudit, NewEvent) {
    let audit = NewAudit {
        at: 7,
        attestor: "join-token".into(),
        round: 1,
        result: AuditResult::Admitted,
        reason: None,
        node_id: Some("node_9".into()),
        token_id: Some("tok_9".into()),
        subject: Some("subject".into()),
        node_key: Some("unattested".into()),
        csr_sha256: Some([9; 32]),
        client_addr: Some("192.0.2.9:4000".into()),
    };
    let event = NewEvent {
        at: 8,
        kind: "node.joined".into(),
        tenant_id: Some("root".into()),
        node_id: Some("node_9".into()),
        attestor: Some("join-token".into()),
        reason: None,
        token_id: Some("tok_9".into()),
        payload: serde_json::json!({"round": 1}),
    };
    (audit, event)
}

#[tokio::test]
async fn a_rounds_audit_and_event_are_written_together() {
    for t in testing::all().await {
        let (audit, event) = record_rows();
        let mut tx = t.db.begin().await.unwrap();
        tx.insert_audit_and_event(&audit, &event).await.unwrap();
        tx.commit().await.unwrap();

        let mut tx = t.db.begin().await.unwrap();
        let audits = tx.list_audits(0, 10).await.unwrap();
        assert_eq!(audits.len(), 1, "{:?}", t.db.backend());
        assert_eq!(
            (
                audits[0].at,
                audits[0].subject.as_deref(),
                audits[0].csr_sha256,
                audits[0].client_addr.as_deref()
            ),
            (7, Some("subject"), Some([9; 32]), Some("192.0.2.9:4000"))
        );
        let events = tx.list_events(0, 10).await.unwrap();
        assert_eq!(events.len(), 1, "{:?}", t.db.backend());
        assert_eq!(
            (
                events[0].at,
                events[0].kind.as_str(),
                events[0].token_id.as_deref(),
                events[0].actor.as_deref(),
                &events[0].payload
            ),
            (
                8,
                "node.joined",
                Some("tok_9"),
                None,
                &serde_json::json!({"round": 1})
            )
        );
        tx.rollback().await.unwrap();
    }
}

/// The last spend of an admitting round carries its record ([`Tx::spend_token_recording`]):
/// written with a use spent, and never without one, whatever the caller does next.
#[tokio::test]
async fn a_record_goes_in_with_its_spend_and_never_without() {
    for t in testing::all().await {
        let backend = t.db.backend();
        let (audit, event) = record_rows();
        seed_token(&t.db, "tok_s", 1).await;
        let mut tx = t.db.begin().await.unwrap();
        let spent = tx
            .spend_token_recording("tok_s", &audit, &event)
            .await
            .unwrap();
        assert_eq!((spent.id.as_str(), spent.uses_left), ("tok_s", 0));
        tx.commit().await.unwrap();
        // No use left, and no such token: nothing is written, even when committed.
        for id in ["tok_s", "tok_none"] {
            let mut tx = t.db.begin().await.unwrap();
            assert!(
                matches!(
                    tx.spend_token_recording(id, &audit, &event).await,
                    Err(StoreError::NoUsesLeft)
                ),
                "{backend:?}: {id}"
            );
            tx.commit().await.unwrap();
        }
        assert_eq!(uses_left(&t.db, "tok_s").await, 0);
        let mut read = t.db.read().await.unwrap();
        let audits = read.list_audits(0, 10).await.unwrap();
        let events = read.list_events(0, 10).await.unwrap();
        assert_eq!((audits.len(), events.len()), (1, 1), "{backend:?}");
        assert_eq!(
            (
                audits[0].at,
                audits[0].csr_sha256,
                audits[0].client_addr.as_deref()
            ),
            (7, Some([9; 32]), Some("192.0.2.9:4000")),
            "{backend:?}"
        );
        assert_eq!(
            (events[0].kind.as_str(), &events[0].payload),
            ("node.joined", &serde_json::json!({"round": 1})),
            "{backend:?}"
        );
    }
}

#[tokio::test]
async fn a_record_commits_with_its_transaction_or_not_at_all() {
    for t in testing::all().await {
        let (audit, event) = record_rows();
        let batches = || t.db.group().map(|g| g.committed());
        let before = batches();
        let mut tx = t.db.begin().await.unwrap();
        tx.insert_tenant("acme").await.unwrap();
        tx.commit_with_audit_and_event(&audit, &event)
            .await
            .unwrap();
        // On SQLite the record's query released the savepoint, and its batch committed.
        assert_eq!(batches(), before.map(|n| n + 1), "{:?}", t.db.backend());
        assert_no_idle_transaction(&t).await;

        // A transaction whose statement failed writes neither its rows nor its record.
        let mut tx = t.db.begin().await.unwrap();
        tx.insert_tenant("umbrella").await.unwrap();
        assert!(tx.insert_tenant("acme").await.is_err(), "acme exists");
        assert!(matches!(
            tx.commit_with_audit_and_event(&audit, &event).await,
            Err(StoreError::Aborted)
        ));
        assert_no_idle_transaction(&t).await;

        let mut tx = t.db.begin().await.unwrap();
        assert_eq!(tx.list_audits(0, 10).await.unwrap().len(), 1);
        assert_eq!(tx.list_events(0, 10).await.unwrap().len(), 1);
        // The first transaction's tenant is there; the second's is not.
        assert!(tx.insert_tenant("acme").await.is_err());
        tx.rollback().await.unwrap();
        let mut tx = t.db.begin().await.unwrap();
        tx.insert_tenant("umbrella").await.unwrap();
        tx.commit().await.unwrap();

        // The record itself failing (its event's table renamed away inside the transaction,
        // so the audit row goes in and the event does not): nothing of the transaction stays,
        // the token's spend included, and on SQLite the savepoint was never released into
        // the batch.
        seed_token(&t.db, "tok_r", 1).await;
        let before = batches();
        let mut tx = t.db.begin().await.unwrap();
        tx.insert_tenant("initech").await.unwrap();
        tx.spend_token("tok_r").await.unwrap();
        tx.execute(sqlx::query("ALTER TABLE events RENAME TO events_gone"))
            .await
            .unwrap();
        assert!(matches!(
            tx.commit_with_audit_and_event(&audit, &event).await,
            Err(StoreError::Query(_))
        ));
        assert_no_idle_transaction(&t).await;
        assert_eq!(batches(), before, "{:?}", t.db.backend());
        assert_eq!(uses_left(&t.db, "tok_r").await, 1, "{:?}", t.db.backend());
        let mut tx = t.db.begin().await.unwrap();
        assert_eq!(tx.list_audits(0, 10).await.unwrap().len(), 1);
        assert_eq!(tx.list_events(0, 10).await.unwrap().len(), 1);
        tx.insert_tenant("initech").await.unwrap();
        tx.commit().await.unwrap();
    }
}

#[tokio::test]
async fn pools_leases_inventories_and_workflows() {
    for t in testing::all().await {
        let mut tx = t.db.begin().await.unwrap();
        tx.insert_tenant("acme").await.unwrap();
        let pool = PoolRow {
            tenant_id: "acme".into(),
            id: "p1".into(),
            join_attestors: Some(vec!["tpm".into(), "x509pop".into()]),
            owner: Some("lessee".into()),
        };
        tx.insert_pool(&pool).await.unwrap();
        tx.insert_pool(&PoolRow {
            id: "p2".into(),
            join_attestors: None,
            owner: None,
            ..pool.clone()
        })
        .await
        .unwrap();
        assert_eq!(tx.pool("acme", "p1").await.unwrap(), Some(pool));
        assert_eq!(
            tx.pool("acme", "p2").await.unwrap().unwrap().join_attestors,
            None
        );
        assert_eq!(tx.pool("root", "p1").await.unwrap(), None);

        let lease = LeaseRow {
            name: "site:a:boot".into(),
            holder: "node_1".into(),
            epoch: 3,
            expires_at: 9,
        };
        tx.put_lease(&lease).await.unwrap();
        let moved = LeaseRow {
            holder: "node_2".into(),
            epoch: 4,
            ..lease.clone()
        };
        tx.put_lease(&moved).await.unwrap();
        assert_eq!(tx.lease("site:a:boot").await.unwrap(), Some(moved));
        assert_eq!(tx.lease("site:b:boot").await.unwrap(), None);
        let huge = LeaseRow {
            epoch: u64::MAX,
            ..lease
        };
        assert!(matches!(
            tx.put_lease(&huge).await,
            Err(StoreError::OutOfRange(_))
        ));

        tx.insert_node(&new_node("node_1")).await.unwrap();
        assert_eq!(tx.newest_inventory("node_1").await.unwrap(), None);
        let inv = |id: &str, at: i64| InventoryRow {
            id: id.into(),
            node_id: "node_1".into(),
            product_uuid: Some(format!("uuid-{id}")),
            macs: vec!["aa:bb:cc:dd:ee:ff".into()],
            recorded_at: at,
        };
        tx.insert_inventory(&inv("i1", 10)).await.unwrap();
        tx.insert_inventory(&inv("i3", 30)).await.unwrap();
        tx.insert_inventory(&inv("i2", 20)).await.unwrap();
        assert_eq!(
            tx.newest_inventory("node_1").await.unwrap(),
            Some(inv("i3", 30))
        );

        let wf = |id: &str, at: i64| WorkflowRow {
            id: id.into(),
            node_id: "node_1".into(),
            state: "running".into(),
            step: "userdata.render".into(),
            token_id: Some("tok_p".into()),
            created_at: at,
        };
        tx.insert_workflow(&wf("wf1", 1)).await.unwrap();
        tx.insert_workflow(&wf("wf2", 2)).await.unwrap();
        assert_eq!(
            tx.token_workflow("tok_p").await.unwrap(),
            Some(wf("wf2", 2))
        );
        assert_eq!(tx.token_workflow("tok_q").await.unwrap(), None);
        tx.commit().await.unwrap();
    }
}

/// A row this host did not write decodes to an error naming it, never a panic.
#[tokio::test]
async fn corrupt_rows_are_errors() {
    for t in testing::all().await {
        sqlx::query(
            "INSERT INTO nodes (id, tenant_id, role, identity_generation, created_at, updated_at) \
             VALUES ('node_bad', 'root', 'emperor', 1, 0, 0), ('node_gen', 'root', 'node', 8589934592, 0, 0)",
        )
        .execute(&mut *t.db.connections().acquire().await.unwrap())
        .await
        .unwrap();
        let mut tx = t.db.begin().await.unwrap();
        match tx.node("node_bad").await {
            Err(StoreError::Corrupt(why)) => {
                assert_eq!(why, "nodes.role: unknown node role `emperor`")
            }
            other => panic!("{other:?}"),
        }
        match tx.node("node_gen").await {
            Err(StoreError::Corrupt(why)) => {
                assert_eq!(why, "nodes.identity_generation: 8589934592 is not a u32")
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(tx.list_nodes().await, Err(StoreError::Corrupt(_))));
        // A decoding error is not a failed statement: the transaction still commits.
        tx.commit().await.unwrap();
    }
}

#[tokio::test]
async fn sqlite_urls_keep_awkward_paths() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a dir#1?").join("gate%house.db");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let url = sqlite_url(&path).unwrap();
    let db = Db::connect(&url).await.unwrap();
    db.migrate().await.unwrap();
    db.close().await;
    assert!(path.exists(), "{url}");
}

#[test]
fn backends_are_named_by_url() {
    assert_eq!(
        Backend::from_url("sqlite:/var/lib/gh.db?mode=rwc").unwrap(),
        Backend::Sqlite
    );
    assert_eq!(
        Backend::from_url("postgres://u@h/db").unwrap(),
        Backend::Postgres
    );
    assert_eq!(
        Backend::from_url("postgresql://u@h/db").unwrap(),
        Backend::Postgres
    );
    match Backend::from_url("mysql://root:hunter2@h/db") {
        Err(StoreError::UnsupportedUrl(shown)) => assert_eq!(shown, "mysql:"),
        other => panic!("{other:?}"),
    }
    assert_eq!(Backend::Postgres.to_string(), "postgres");
}

/// SQLite's group commit: transactions committed at once share one `COMMIT`, each is durable
/// once its `commit` returns (seen from a connection of another pool), and a member that rolls
/// back, explicitly or by being dropped, takes nothing of the others with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_transactions_committed_together_are_each_durable() {
    let t = testing::sqlite().await;
    let before = t.db.group().unwrap().committed();
    let mut tasks = Vec::new();
    for i in 0..24 {
        let db = t.db.clone();
        tasks.push(tokio::spawn(async move {
            let mut tx = db.begin().await.unwrap();
            tx.insert_tenant(&format!("t{i}")).await.unwrap();
            match i % 3 {
                0 => tx.commit().await.unwrap(),
                1 => tx.rollback().await.unwrap(),
                _ => drop(tx),
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let batches = t.db.group().unwrap().committed() - before;
    assert!((1..8).contains(&batches), "8 commits in {batches} batches");
    let other = Db::connect(&t.url).await.unwrap();
    let mut tx = other.begin().await.unwrap();
    for i in 0..24 {
        let exists = tx.tenant_exists(&format!("t{i}")).await.unwrap();
        assert_eq!(exists, i % 3 == 0, "tenant t{i}");
    }
    tx.commit().await.unwrap();
    other.close().await;
}

/// Commits a SQLite transaction that wrote tenant `tenant`, with `second` given the next
/// transaction: it queues for the connection before the first commits, so it runs inside the
/// first's batch, ahead of the batch's flusher. The first's commit, once `second` ended.
async fn commit_before_a_second_member<F>(
    t: &TestDb,
    tenant: &str,
    second: impl FnOnce(Tx) -> F + Send + 'static,
) -> Result<(), StoreError>
where
    F: Future<Output = ()> + Send + 'static,
{
    let mut first = t.db.begin().await.unwrap();
    first.insert_tenant(tenant).await.unwrap();
    let db = t.db.clone();
    let second = tokio::spawn(async move { second(db.begin().await.unwrap()).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let committed = first.commit().await;
    second.await.unwrap();
    committed
}

/// A batch that cannot be kept (here a member ends SQLite's transaction behind the batch's
/// back, so its savepoint cannot be rolled back) fails every member waiting on it: a member
/// that already released is told its writes were lost, and they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_lost_commit_batch_fails_its_waiting_members() {
    let t = testing::sqlite().await;
    let committed = commit_before_a_second_member(&t, "released", |mut tx| async move {
        tx.execute(sqlx::query("ROLLBACK")).await.unwrap();
        drop(tx);
    })
    .await;
    assert!(
        matches!(committed, Err(StoreError::BatchLost(_))),
        "{committed:?}"
    );
    let mut tx = t.db.begin().await.unwrap();
    assert!(!tx.tenant_exists("released").await.unwrap());
    tx.insert_tenant("after").await.unwrap();
    tx.commit().await.unwrap();
    let mut tx = t.db.read().await.unwrap();
    assert!(tx.tenant_exists("after").await.unwrap());
}

/// A batch member dropped after the query releasing its savepoint ran but before it read the
/// answer (its client hung up, its request timed out) leaves the batch whole: the members that
/// released before it commit, and so do its own writes, complete and unanswered (there is no
/// taking them out of the batch without the others'), rather than a rollback of the whole
/// batch failing every member waiting on it. A member dropped before its query ran still
/// rolls back alone, and one whose batch never began ends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_member_dropped_after_its_release_leaves_the_batch_whole() {
    use sqlx::{Connection as _, Executor as _};
    let t = testing::sqlite().await;
    commit_before_a_second_member(&t, "first", |mut tx| async move {
        tx.insert_tenant("second").await.unwrap();
        let mut commit = std::pin::pin!(tx.commit());
        // Sent: SQLite's worker thread runs the release. The future is not polled again until
        // the answer is surely back, and then dropped unread.
        assert!(futures::poll!(commit.as_mut()).is_pending());
        tokio::time::sleep(Duration::from_millis(200)).await;
    })
    .await
    .unwrap();
    let mut tx = t.db.begin().await.unwrap();
    assert!(tx.tenant_exists("first").await.unwrap());
    assert!(tx.tenant_exists("second").await.unwrap());
    tx.insert_tenant("after").await.unwrap();
    tx.commit().await.unwrap();

    // Dropped before its release was sent: its own writes alone are rolled back.
    let mut tx = t.db.begin().await.unwrap();
    tx.insert_tenant("dropped").await.unwrap();
    drop(tx);
    let mut tx = t.db.begin().await.unwrap();
    assert!(!tx.tenant_exists("dropped").await.unwrap());
    tx.commit().await.unwrap();

    // Its savepoint gone because the batch it was to open never began (another process held
    // SQLite's write lock past the busy timeout): the batch it counted as open is ended, so
    // the next member opens a batch of its own instead of taking a savepoint outside any,
    // which its release would commit behind its batch's back.
    let mut holder = sqlx::AnyConnection::connect(&t.url).await.unwrap();
    holder.execute("BEGIN IMMEDIATE").await.unwrap();
    let (audit, event) = record_rows();
    let tx = t.db.begin().await.unwrap();
    assert!(
        tx.commit_with_audit_and_event(&audit, &event)
            .await
            .is_err()
    );
    holder.execute("ROLLBACK").await.unwrap();
    holder.close().await.unwrap();
    let mut tx = t.db.begin().await.unwrap();
    tx.insert_tenant("last").await.unwrap();
    tx.commit().await.unwrap();
    let mut read = t.db.read().await.unwrap();
    assert!(read.tenant_exists("after").await.unwrap());
    assert!(read.tenant_exists("last").await.unwrap());
    assert!(!read.tenant_exists("dropped").await.unwrap());
}

/// On SQLite a transaction's savepoint goes with its first statement, in one round trip. That
/// statement answers as if sent alone (its rows, and its own change count: SQLite reports the
/// change count of an earlier statement for `BEGIN` and `SAVEPOINT`); a transaction that sent
/// nothing has nothing to commit, roll back or wait for; and a first statement that fails
/// rolls back its own savepoint only, not the batch it joined.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_savepoint_goes_with_the_first_statement() {
    let t = testing::sqlite().await;
    let mut tx = t.db.begin().await.unwrap();
    let inserted = tx
        .execute(sqlx::query(
            "INSERT INTO tenants (id) VALUES ('a'), ('b'), ('c'), ('d'), ('e')",
        ))
        .await
        .unwrap();
    assert_eq!(inserted, 5);
    tx.commit().await.unwrap();
    // The batch is committed: this member opens a new one (two statements before its own).
    let mut tx = t.db.begin().await.unwrap();
    let updated = tx
        .execute(sqlx::query("UPDATE tenants SET id = 'a2' WHERE id = 'a'"))
        .await
        .unwrap();
    assert_eq!(updated, 1);
    tx.commit().await.unwrap();
    let mut tx = t.db.begin().await.unwrap();
    let row = tx
        .fetch_one(sqlx::query("SELECT id FROM tenants WHERE id = $1").bind("b"))
        .await
        .unwrap();
    assert_eq!(row.get::<String, _>("id"), "b");
    tx.commit().await.unwrap();
    let mut tx = t.db.begin().await.unwrap();
    let none = tx
        .fetch_one(sqlx::query("SELECT id FROM tenants WHERE id = 'nobody'"))
        .await;
    assert!(matches!(
        none,
        Err(StoreError::Query(sqlx::Error::RowNotFound))
    ));
    assert!(matches!(tx.commit().await, Err(StoreError::Aborted)));

    // Nothing sent: no batch to join, nothing to roll back, the connection as it was.
    let group = t.db.group().unwrap();
    let before = group.committed();
    t.db.begin().await.unwrap().commit().await.unwrap();
    t.db.begin().await.unwrap().rollback().await.unwrap();
    drop(t.db.begin().await.unwrap());
    assert_eq!(group.committed(), before);
    // No transaction was left open on the write connection: another writer gets SQLite's lock.
    let other = Db::connect(&t.url).await.unwrap();
    let mut tx = other.begin().await.unwrap();
    tx.insert_tenant("other").await.unwrap();
    tx.commit().await.unwrap();
    other.close().await;

    // A member queued behind a released one, in its batch, whose first statement fails.
    let mut first = t.db.begin().await.unwrap();
    first.insert_tenant("kept").await.unwrap();
    let db = t.db.clone();
    let second = tokio::spawn(async move {
        let mut tx = db.begin().await.unwrap();
        let duplicate = tx.insert_tenant("b").await;
        assert!(
            matches!(duplicate, Err(StoreError::Query(_))),
            "{duplicate:?}"
        );
        tx.commit().await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    first.commit().await.unwrap();
    assert!(matches!(second.await.unwrap(), Err(StoreError::Aborted)));
    assert_eq!(group.committed(), before + 1);
    let mut tx = t.db.read().await.unwrap();
    for (id, exists) in [("kept", true), ("a", false), ("a2", true), ("e", true)] {
        assert_eq!(tx.tenant_exists(id).await.unwrap(), exists, "{id}");
    }
}

#[tokio::test]
async fn superseded_certificates_count_as_revoked_after_their_grace() {
    for t in testing::all().await {
        let b = t.db.backend();
        let mut tx = t.db.begin().await.unwrap();
        let now = tx.now().await.unwrap();
        tx.insert_node(&new_node("node_1")).await.unwrap();
        let live = |serial: &str, created_at: i64| NewNodeCert {
            not_before: now - 60_000,
            not_after: now + 3_600_000,
            ..cert_of("node_1", serial, 1, created_at)
        };
        for (serial, at) in [("c1", now - 2_000), ("c2", now - 1_000), ("c3", now)] {
            tx.insert_node_cert(&live(serial, at)).await.unwrap();
        }
        assert_eq!(tx.newest_node_cert_at("node_1").await.unwrap(), Some(now));
        assert_eq!(tx.newest_node_cert_at("node_9").await.unwrap(), None);
        assert_eq!(tx.count_live_node_certs("node_1", now).await.unwrap(), 3);

        // c3 replaces the others, their grace already over; a later supersession never moves
        // an earlier one.
        assert_eq!(
            tx.supersede_node_certs("node_1", "c3", now - 1)
                .await
                .unwrap(),
            2
        );
        assert_eq!(
            tx.supersede_node_certs("node_1", "c3", now + 100_000)
                .await
                .unwrap(),
            0
        );
        assert_eq!(tx.count_live_node_certs("node_1", now).await.unwrap(), 1);
        let superseded = vec![
            ("c1".to_owned(), now - 1, Revocation::Superseded),
            ("c2".to_owned(), now - 1, Revocation::Superseded),
        ];
        // The CRL lists them before the sweep and after it alike.
        assert_eq!(
            tx.revoked_node_certs(now).await.unwrap(),
            superseded,
            "{b:?}"
        );
        assert_eq!(tx.settle_superseded(Some("node_1")).await.unwrap(), 2);
        assert_eq!(tx.settle_superseded(None).await.unwrap(), 0, "once");
        assert_eq!(
            revocations(&mut tx, "node_1").await,
            [
                ("c3".to_owned(), None),
                ("c2".to_owned(), Some(Revocation::Superseded)),
                ("c1".to_owned(), Some(Revocation::Superseded)),
            ]
        );
        assert_eq!(tx.revoked_node_certs(now).await.unwrap(), superseded);

        // A grace still running keeps the certificate live until it ends, and the sweep leaves
        // it alone.
        tx.insert_node_cert(&live("c4", now + 1)).await.unwrap();
        assert_eq!(
            tx.supersede_node_certs("node_1", "c4", now + 60_000)
                .await
                .unwrap(),
            1
        );
        assert_eq!(tx.count_live_node_certs("node_1", now).await.unwrap(), 2);
        assert_eq!(
            tx.count_live_node_certs("node_1", now + 60_000)
                .await
                .unwrap(),
            1
        );
        assert_eq!(tx.settle_superseded(None).await.unwrap(), 0);
        assert_eq!(tx.revoked_node_certs(now).await.unwrap(), superseded);

        // An operator's revocation records when it happened (database time).
        assert!(tx.revoke_node_cert("node_1", "c4").await.unwrap());
        let listed = tx.revoked_node_certs(now).await.unwrap();
        let (_, at, why) = listed.iter().find(|(s, _, _)| s == "c4").unwrap();
        assert_eq!(*why, Revocation::Operator);
        assert!(
            (at - now).abs() < 60_000,
            "{b:?}: revoked at {at}, now {now}"
        );
        // Expired certificates are left out of the CRL.
        assert!(
            tx.revoked_node_certs(now + 3_600_000)
                .await
                .unwrap()
                .is_empty()
        );
        tx.commit().await.unwrap();
    }
}

/// A join's token is spent last in its locked phase, and only then locked: what another
/// transaction commits on the token after the round read it again must still stop the spend.
/// A revocation is a conflict (the round runs again), another join's spend of the last use
/// is `no-uses-left`; either way nothing of this round's is spent. Postgres only: on SQLite
/// the locked phase holds the one write lock, so nothing can commit in between.
#[tokio::test]
async fn a_token_changed_before_its_late_spend_is_not_spent() {
    use crate::imports::{Apply, Effects, Settle, Staged, TxBackend};
    let Some(t) = testing::postgres().await else {
        eprintln!("skipped: DATABASE_URL is not set");
        return;
    };
    for (id, meanwhile) in [("tok_revoked", "revoke"), ("tok_taken", "spend")] {
        seed_token(&t.db, id, 1).await;
        // The attestor's call: it reads the token and spends its use (buffered).
        let mut staged = Staged::new(t.db.clone(), "join-token");
        assert!(
            TxBackend::lock_token(&mut staged, id)
                .await
                .unwrap()
                .is_some()
        );
        TxBackend::consume_token(&mut staged, id).await.unwrap();
        // The locked phase reads it again and judges it...
        let mut tx = t.db.begin().await.unwrap();
        let mut effects = Effects::default();
        let spends = staged
            .settle(&mut tx, &mut effects, Apply::Everything)
            .await
            .unwrap();
        // ...and another transaction commits on the token before the spend, unhindered.
        let mut other = t.db.begin().await.unwrap();
        match meanwhile {
            "revoke" => assert!(other.revoke_token(id).await.unwrap()),
            _ => assert_eq!(other.consume_token(id).await.unwrap(), 0),
        }
        other.commit().await.unwrap();
        let (audit, event) = record_rows();
        let outcome = spends.commit(tx, None, &audit, &event).await;
        match (meanwhile, &outcome) {
            ("revoke", Err(Settle::Conflict("a token"))) => {}
            ("spend", Err(Settle::NoUsesLeft(spent))) if spent == id => {}
            _ => panic!("{meanwhile}: {outcome:?}"),
        }
        let left = match meanwhile {
            "revoke" => 1,
            _ => 0,
        };
        assert_eq!(uses_left(&t.db, id).await, left, "{meanwhile}");
        // Nor is the round recorded.
        let mut read = t.db.read().await.unwrap();
        assert!(read.list_audits(0, 10).await.unwrap().is_empty());
        assert!(read.list_events(0, 10).await.unwrap().is_empty());
    }
}

/// Every connection of Postgres' write pool bounds its statements and lock waits for the
/// session, the one the migrations ran on too: they lift the bounds for themselves and set
/// them again before the connection goes back to the pool.
#[tokio::test]
async fn postgres_write_connections_stay_bounded_after_migrating() {
    let Some(t) = testing::postgres().await else {
        eprintln!("skipped: DATABASE_URL is not set");
        return;
    };
    // Again, with nothing to apply: the lifting and setting again still run.
    t.db.migrate().await.unwrap();
    let connections = t.db.connections();
    let mut every = Vec::new();
    for _ in 0..db::DEFAULT_POSTGRES_CONNECTIONS {
        every.push(connections.acquire().await.unwrap());
    }
    for conn in &mut every {
        for (setting, bound) in [
            ("statement_timeout", "5s"),
            ("lock_timeout", "5s"),
            ("idle_in_transaction_session_timeout", "1min"),
        ] {
            let row = sqlx::query(&format!("SHOW {setting}"))
                .fetch_one(&mut **conn)
                .await
                .unwrap();
            assert_eq!(row.get::<String, _>(0), bound, "{setting}");
        }
    }
}

/// A configured write pool holds that many Postgres connections and no more, and a size out of
/// range is refused before anything connects.
#[tokio::test]
async fn postgres_write_pool_has_the_configured_size() {
    for refused in [0, MAX_POSTGRES_CONNECTIONS + 1] {
        let error = Db::connect_with("postgres://nowhere.invalid/x", refused)
            .await
            .unwrap_err();
        assert!(
            matches!(error, StoreError::PoolSize(n) if n == refused),
            "{error:?}"
        );
    }
    let Some(t) = testing::postgres().await else {
        eprintln!("skipped: DATABASE_URL is not set");
        return;
    };
    let db = Db::connect_with(&t.url, 3).await.unwrap();
    let connections = db.connections();
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(connections.acquire().await.unwrap());
    }
    let fourth = tokio::time::timeout(Duration::from_millis(300), connections.acquire()).await;
    assert!(fourth.is_err(), "a fourth connection was handed out");
    drop(held);
    db.close().await;
}

/// [`Tx::admit_in_one_statement`] of a new node `node` with a certificate `serial`, the token
/// `seen` judged with `revoked`, the record of [`record_rows`].
async fn admit_alone(
    tx: Tx,
    seen: &TokenRow,
    revoked: bool,
    node: &str,
    serial: &str,
) -> Result<Admission, StoreError> {
    let (audit, event) = record_rows();
    tx.admit_in_one_statement(
        &JudgedToken {
            revoked,
            ..seen.into()
        },
        &new_node(node),
        &cert_of(node, serial, 1, 100),
        &audit,
        &event,
    )
    .await
}

/// Rows of `node_id`, uses left of `token`, audit rows and events: what an admission wrote.
async fn admission_rows(db: &Db, node_id: &str, token: &str) -> (bool, usize, u32, usize, usize) {
    let mut read = db.read().await.unwrap();
    let node = read.node(node_id).await.unwrap().is_some();
    let certs = read.node_certs(node_id).await.unwrap().len();
    let audits = read.list_audits(0, 100).await.unwrap().len();
    let events = read.list_events(0, 100).await.unwrap().len();
    drop(read);
    (node, certs, uses_left(db, token).await, audits, events)
}

/// A token join's whole write in one query ([`Tx::admit_in_one_statement`]: on Postgres one
/// statement in autocommit, on SQLite a batch member's savepoint to its release): node,
/// certificate, spend, audit row and event all go in, or, when the token is not as judged, has
/// no use left, is gone, or a row cannot go in, none of them; and only while nothing of the
/// transaction was sent.
#[tokio::test]
async fn a_token_join_in_one_statement_writes_all_of_it_or_nothing() {
    let dbs = testing::all().await;
    if dbs.len() == 1 {
        eprintln!("skipped on Postgres: DATABASE_URL is not set");
    }
    for t in dbs {
        let backend = t.db.backend();
        let read = async |id: &str| {
            let mut read = t.db.read().await.unwrap();
            read.read_token(id).await.unwrap().unwrap()
        };
        // An admission's answer (`None`: an error) and then what it wrote.
        let after = async |outcome: Result<Admission, StoreError>,
                           answer: Option<Admission>,
                           node: &str,
                           token: &str,
                           rows: (bool, usize, u32, usize, usize)| {
            match answer {
                Some(answer) => assert_eq!(outcome.unwrap(), answer, "{backend:?}"),
                None => assert!(outcome.is_err(), "{backend:?}"),
            }
            assert_eq!(
                admission_rows(&t.db, node, token).await,
                rows,
                "{backend:?}"
            );
        };
        seed_token(&t.db, "tok_one", 2).await;
        let seen = read("tok_one").await;
        let admit = |node: &'static str, serial: &'static str, revoked: bool| {
            let (db, seen) = (t.db.clone(), seen.clone());
            async move {
                let tx = db.begin().await.unwrap();
                assert!(tx.admits_in_one_statement());
                admit_alone(tx, &seen, revoked, node, serial).await
            }
        };
        let committed = Some(Admission::Committed);
        let outcome = admit("node_a", "s_a", false).await;
        after(outcome, committed, "node_a", "tok_one", (true, 1, 1, 1, 1)).await;

        // A serial taken: the statement fails, and the token keeps its use.
        let outcome = admit("node_b", "s_a", false).await;
        after(outcome, None, "node_b", "tok_one", (false, 0, 1, 1, 1)).await;

        // Judged other than it is (here: revoked, which it is not): changed, nothing written.
        let changed = Some(Admission::Changed);
        let outcome = admit("node_c", "s_c", true).await;
        after(outcome, changed, "node_c", "tok_one", (false, 0, 1, 1, 1)).await;
        // Revoked since it was judged: the same.
        let mut tx = t.db.begin().await.unwrap();
        assert!(tx.revoke_token("tok_one").await.unwrap());
        tx.commit().await.unwrap();
        let outcome = admit("node_d", "s_d", false).await;
        after(outcome, changed, "node_d", "tok_one", (false, 0, 1, 1, 1)).await;

        // No use left: refused as such, nothing written.
        seed_token(&t.db, "tok_spent", 1).await;
        // As read before another join spent its one use.
        let spent = read("tok_spent").await;
        let mut tx = t.db.begin().await.unwrap();
        tx.consume_token("tok_spent").await.unwrap();
        tx.commit().await.unwrap();
        let no_uses_left = Some(Admission::NoUsesLeft);
        let outcome =
            admit_alone(t.db.begin().await.unwrap(), &spent, false, "node_e", "s_e").await;
        after(
            outcome,
            no_uses_left,
            "node_e",
            "tok_spent",
            (false, 0, 0, 1, 1),
        )
        .await;

        // Gone since it was read: no use left, nothing written.
        let gone = TokenRow {
            id: "tok_gone".into(),
            ..spent.clone()
        };
        let outcome = admit_alone(t.db.begin().await.unwrap(), &gone, false, "node_g", "s_g").await;
        after(
            outcome,
            no_uses_left,
            "node_g",
            "tok_spent",
            (false, 0, 0, 1, 1),
        )
        .await;

        // Once a statement of the transaction was sent, never alone: refused, nothing sent.
        let mut tx = t.db.begin().await.unwrap();
        tx.ping().await.unwrap();
        assert!(!tx.admits_in_one_statement());
        let outcome = admit_alone(tx, &spent, false, "node_f", "s_f").await;
        assert!(matches!(outcome, Err(StoreError::Aborted)), "{backend:?}");
        assert_no_idle_transaction(&t).await;

        // Nothing above was left uncommitted in a batch: a last admission commits on its own.
        seed_token(&t.db, "tok_last", 1).await;
        let last = read("tok_last").await;
        let outcome = admit_alone(t.db.begin().await.unwrap(), &last, false, "node_h", "s_h").await;
        after(outcome, committed, "node_h", "tok_last", (true, 1, 0, 2, 2)).await;
    }
}
