//! Hostile and broken components: every fixture in tests/fixtures has a test here
//! (`foreach_fixture!` makes a missing one a compile error).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use gatehouse_agent::{
    EvidenceProducer, JoinClient, JoinError, JoinOptions, NodeKey, ProducerError, TokenProducer,
    join,
};
use gatehouse_proto::{Challenge, Role, TokenString};

use crate::common::{Backend, HostOptions, TestHost};

/// Evidence for a named attestor: the sealed token and nothing else.
pub(crate) struct Named(pub(crate) &'static str);

impl EvidenceProducer for Named {
    fn attestor(&self) -> &str {
        self.0
    }
    fn role(&self) -> Role {
        Role::Node
    }
    fn evidence(&mut self, _: &[u8]) -> Result<Vec<u8>, ProducerError> {
        Ok(vec![])
    }
    fn answer(&mut self, _: &Challenge, _: &[u8]) -> Result<Vec<u8>, ProducerError> {
        Err(ProducerError::NoChallenges {
            attestor: self.0.into(),
        })
    }
}

async fn host_with(fixture: &str) -> TestHost {
    TestHost::start_with(HostOptions {
        attestors: vec![PathBuf::from(fixture)],
        ..HostOptions::new(Backend::Sqlite)
    })
    .await
}

pub(crate) async fn join_with(
    host: &TestHost,
    producer: &mut dyn EvidenceProducer,
    token: &TokenString,
) -> Result<gatehouse_agent::Joined, JoinError> {
    let client = JoinClient::new(&host.url(), &host.trust)?;
    join(
        &client,
        &host.trust,
        producer,
        Some(token),
        &NodeKey::generate()?,
        &JoinOptions::default(),
    )
    .await
}

pub(crate) async fn uses_left(host: &TestHost, token: &TokenString) -> u32 {
    let mut tx = host.running.db.begin().await.unwrap();
    let left = tx.lock_token(&token.id).await.unwrap().unwrap().uses_left;
    tx.commit().await.unwrap();
    left
}

/// The fixture's join is refused `reason` quickly, spends nothing, and the host still admits a
/// normal join afterwards.
async fn faults(fixture: &str, id: &'static str, reason: &str) {
    let host = host_with(fixture).await;
    let token = host.create_token("node", 1).await;
    let started = Instant::now();
    let result = join_with(&host, &mut Named(id), &token).await;
    let took = started.elapsed();
    assert!(
        matches!(result, Err(JoinError::Denied)),
        "{id}: {:?}",
        result.map(|j| j.node_id)
    );
    assert!(
        took < Duration::from_secs(5),
        "{id}: the refusal took {took:?}"
    );
    assert_eq!(
        host.refusal_reasons().await,
        vec![reason.to_owned()],
        "{id}"
    );
    assert_eq!(
        uses_left(&host, &token).await,
        1,
        "{id}: a refused join spent a use"
    );
    let joined = join_with(&host, &mut TokenProducer::new(Role::Node), &token).await;
    assert!(
        joined.is_ok(),
        "{id}: the host stopped serving: {:?}",
        joined.err()
    );
    host.stop().await;
}

mod fixtures {
    use super::*;

    /// Defers for operator approval (tests/all/approval.rs).
    pub(super) use crate::approval::pending_until_approved_through_the_cli_then_admitted_once as approval;
    /// Challenges, then admits on the answer (tests/all/challenge.rs).
    pub(super) use crate::challenge::challenge_two_rounds_spend_the_token_only_on_the_final_one as challenge;
    /// JoinService's rules against hostile attestors (tests/all/policy.rs).
    pub(super) use crate::policy::{
        admit_by_token_id, downgrade_reclaim, foreign_binding_kind, reclaim_any_node,
        replay_approval, spend_then_defer,
    };
    /// Writes past the per-call limits in every deferred round (tests/all/transactions.rs).
    pub(super) use crate::transactions::transactions_kv_writes_past_the_limits_are_refused_in_every_round_and_leave_nothing as kv_flood;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    pub(super) async fn loop_forever() {
        faults(
            gatehouse_test_artifacts::LOOP_FOREVER,
            "loop-forever",
            "attestor-fault",
        )
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    pub(super) async fn alloc_forever() {
        faults(
            gatehouse_test_artifacts::ALLOC_FOREVER,
            "alloc-forever",
            "attestor-fault",
        )
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    pub(super) async fn panic() {
        faults(gatehouse_test_artifacts::PANIC, "panic", "attestor-fault").await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    pub(super) async fn malformed_result() {
        faults(
            gatehouse_test_artifacts::MALFORMED_RESULT,
            "malformed-result",
            "attestor-fault",
        )
        .await;
    }

    /// It validly spends the token but admits into another tenant: JoinService's own checks
    /// refuse it, and the rollback gives the use back.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    pub(super) async fn other_tenant() {
        faults(
            gatehouse_test_artifacts::OTHER_TENANT,
            "other-tenant",
            "tenant-mismatch",
        )
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    pub(super) async fn join_token_replacement() {
        let host = host_with(gatehouse_test_artifacts::JOIN_TOKEN_REPLACEMENT).await;
        let token = host.create_token("node", 1).await;
        join_with(&host, &mut TokenProducer::new(Role::Node), &token)
            .await
            .unwrap();
        let admitted: Vec<_> = host
            .audits()
            .await
            .into_iter()
            .filter(|a| a.result.as_str() == "admitted")
            .collect();
        assert_eq!(admitted.len(), 1);
        assert_eq!(
            admitted[0].subject.as_deref(),
            Some(format!("replacement:{}", token.id).as_str()),
            "the built-in answered"
        );
        let list: serde_json::Value = host
            .http()
            .get(format!("{}/v1/admin/attestors", host.url()))
            .bearer_auth(&host.admin_key)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let jt = list
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["id"] == "join-token")
            .unwrap();
        assert_eq!(jt["version"], "0.0.1-replacement");
        assert_eq!(jt["source"]["kind"], "file");
        host.stop().await;
    }

    /// A prepared configuration (WIT 0.2.1's `prepared`): `verify` starts from what
    /// `configure` kept, may not keep anything itself (which would carry state from one join
    /// to the next), the 1 MiB limit holds, and after a reload that changes the configuration
    /// `verify` starts from the new configuration's form, never the old one's.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    pub(super) async fn prepared() {
        const ID: &str = "prepared";
        let host = TestHost::start_with(HostOptions {
            attestors: vec![PathBuf::from(gatehouse_test_artifacts::PREPARED)],
            attestor_config: vec![(ID.into(), serde_json::json!({ "n": 1 }))],
            ..HostOptions::new(Backend::Sqlite)
        })
        .await;
        let token = host.create_token("node", 2).await;
        let refused = join_with(&host, &mut Named(ID), &token).await;
        assert!(matches!(refused, Err(JoinError::Denied)), "{refused:?}");

        let mut config = host.config.clone();
        let table: toml::Table = serde_json::from_value(serde_json::json!({ "n": 2 })).unwrap();
        config.attestors.entry(ID.into()).or_default().config = Some(table);
        let reload = host.running.attestors.reload_with(config.runtime()).await;
        assert_eq!(reload.changes.len(), 1, "{:?}", reload.changes);
        assert_eq!(reload.changes[0].kind.event_kind(), "attestor.replaced");
        let refused = join_with(&host, &mut Named(ID), &token).await;
        assert!(matches!(refused, Err(JoinError::Denied)), "{refused:?}");

        assert_eq!(host.refusal_reasons().await, ["prepared-1", "prepared-2"]);
        assert_eq!(uses_left(&host, &token).await, 2, "a refusal spent a use");
        host.stop().await;
    }

    /// No call sees what an earlier call left in its linear memory (data segment, zeroed
    /// statics, heap), however the pooling allocator resets the slot it reuses: the pages it
    /// keeps resident between calls are reset too.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    pub(super) async fn remember() {
        const ID: &str = "remember";
        let host = TestHost::start_with(HostOptions {
            attestors: vec![PathBuf::from(gatehouse_test_artifacts::REMEMBER)],
            ..HostOptions::new(Backend::Sqlite)
        })
        .await;
        let token = host.create_token("node", 1).await;
        for _ in 0..6 {
            let refused = join_with(&host, &mut Named(ID), &token).await;
            assert!(matches!(refused, Err(JoinError::Denied)), "{refused:?}");
        }
        assert_eq!(host.refusal_reasons().await, ["fresh"; 6]);
        assert_eq!(uses_left(&host, &token).await, 1, "a refusal spent a use");
        host.stop().await;
    }

    /// Starts a host with the component at `path` beside the built-ins: it must refuse to
    /// start, with an error that names the file. The error.
    async fn refused_at_load(path: &str) -> String {
        let opts = HostOptions {
            attestors: vec![PathBuf::from(path)],
            ..HostOptions::new(Backend::Sqlite)
        };
        let err = match TestHost::try_start_with(opts).await {
            Ok(_) => panic!("{path} must not load"),
            Err(e) => e,
        };
        let file = PathBuf::from(path);
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        assert!(err.contains(&name), "{err}");
        err
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    pub(super) async fn wit_major() {
        let err = refused_at_load(gatehouse_test_artifacts::WIT_MAJOR).await;
        assert!(
            err.contains("better-compute:attestor@1.0.0")
                && err.contains("better-compute:attestor@0.2.1"),
            "{err}"
        );
    }

    /// The host calls `verify` by index without checking its type again
    /// (`host/src/runtime/pre.rs`), so a component whose `verify` has another signature, at the
    /// host's WIT version and with every name the host looks up, must be refused at load.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    pub(super) async fn verify_mistyped() {
        let err = refused_at_load(gatehouse_test_artifacts::VERIFY_MISTYPED).await;
        assert!(err.contains("type mismatch"), "{err}");
    }
}

macro_rules! tested {
    ($fixture:ident) => {
        #[allow(unused_imports)]
        use fixtures::$fixture as _;
    };
}
gatehouse_test_artifacts::foreach_fixture!(tested);
