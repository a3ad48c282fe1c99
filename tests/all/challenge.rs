//! Stateless challenges (the `challenge` fixture, tests/fixtures/challenge): a join answers a
//! challenge in a second round with the same CSR and spends its token only then; a wrong
//! answer, an answer for another CSR, a replayed state and a late answer are each refused with
//! their own reason and spend nothing; every round leaves one audit row and its event; and a
//! second replica sharing the PostgreSQL database and the PKI finishes a challenge the first
//! issued, since no row holds it. SQLite and PostgreSQL.

use std::path::PathBuf;
use std::time::Duration;

use gatehouse::store::AuditResult;
use gatehouse_agent::{
    EvidenceProducer, JoinClient, JoinError, JoinOptions, NodeKey, ProducerError, Verified,
    build_csr, join, verify_response,
};
use gatehouse_proto::{Challenge, JoinRequest, Role, TokenString, b64, seal_token};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::common::{Backend, HostOptions, TestHost, backends, drop_postgres, fresh_postgres};

/// The fixture's id.
const ATTESTOR: &str = "challenge";

/// The agent side of the fixture: no evidence in round 1; the answer
/// `{"state", "answer": b64url(sha256(nonce || sha256(csr)))}` to its challenge.
struct ChallengeAnswerer;

impl EvidenceProducer for ChallengeAnswerer {
    fn attestor(&self) -> &str {
        ATTESTOR
    }
    fn role(&self) -> Role {
        Role::Node
    }
    fn evidence(&mut self, _: &[u8]) -> Result<Vec<u8>, ProducerError> {
        Ok(vec![])
    }
    fn answer(&mut self, challenge: &Challenge, csr_der: &[u8]) -> Result<Vec<u8>, ProducerError> {
        let payload: Value = serde_json::from_slice(&challenge.payload)
            .map_err(|e| ProducerError::Failed(format!("challenge payload: {e}")))?;
        let field = |name: &str| {
            payload[name]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| ProducerError::Failed(format!("challenge payload without {name}")))
        };
        let nonce = b64::decode(&field("nonce")?)
            .map_err(|e| ProducerError::Failed(format!("challenge nonce: {e}")))?;
        Ok(answer_bytes(&field("state")?, &nonce, &sha256(csr_der)))
    }
}

/// The answer JSON for `state` and `nonce`, bound to the CSR whose hash is `csr_sha256`.
fn answer_bytes(state: &str, nonce: &[u8], csr_sha256: &[u8]) -> Vec<u8> {
    let mut input = nonce.to_vec();
    input.extend_from_slice(csr_sha256);
    json!({ "state": state, "answer": b64::encode(sha256(&input)) })
        .to_string()
        .into_bytes()
}

fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

/// A host running the fixture, with its `[attestors.challenge]` config if any.
async fn host(backend: Backend, config: Option<Value>) -> TestHost {
    TestHost::start_with(HostOptions {
        attestors: vec![PathBuf::from(gatehouse_test_artifacts::CHALLENGE)],
        attestor_config: config
            .map(|c| vec![(ATTESTOR.to_owned(), c)])
            .unwrap_or_default(),
        ..HostOptions::new(backend)
    })
    .await
}

/// One machine's join, sent round by round.
struct Machine {
    key: NodeKey,
    csr: Vec<u8>,
    csr_sha256: [u8; 32],
    request: JoinRequest,
}

impl Machine {
    /// A fresh key and CSR, and round 1 with `token` sealed for that CSR.
    fn new(host: &TestHost, token: &TokenString) -> Self {
        let key = NodeKey::generate().unwrap();
        let csr = build_csr(&key).unwrap();
        let csr_sha256 = sha256(&csr);
        let request = JoinRequest {
            attestor: ATTESTOR.into(),
            role: Role::Node,
            sealed_token: Some(
                seal_token(&host.trust.join_encryption_key, token, &csr_sha256).unwrap(),
            ),
            attestation: vec![],
            csr: csr.clone(),
            claims: Default::default(),
            round: 1,
        };
        Self {
            key,
            csr,
            csr_sha256,
            request,
        }
    }

    /// Sends the current round to `host` and verifies the answer.
    async fn send(&self, host: &TestHost) -> Result<Verified, JoinError> {
        let client = JoinClient::new(&host.url(), &host.trust).unwrap();
        let response = client.send(&self.request).await?;
        Ok(verify_response(
            &host.trust,
            &response,
            &self.csr_sha256,
            &self.key.spki_der(),
        )
        .unwrap())
    }

    /// Sends round 1 to `host`: the challenge it answers with.
    async fn challenged(&self, host: &TestHost) -> Challenge {
        match self.send(host).await.unwrap() {
            Verified::Challenge(c) => c,
            other => panic!("round 1 was not a challenge: {other:?}"),
        }
    }

    /// Makes the next request round 2 with `attestation`.
    fn answering(&mut self, attestation: Vec<u8>) {
        self.request.attestation = attestation;
        self.request.round = 2;
    }
}

async fn uses_left(host: &TestHost, token: &TokenString) -> u32 {
    let mut tx = host.running.db.begin().await.unwrap();
    let left = tx.lock_token(&token.id).await.unwrap().unwrap().uses_left;
    tx.commit().await.unwrap();
    left
}

/// The audit rows as (round, result, reason), after checking that each has exactly the one
/// event of its result, in the same order.
async fn rounds(host: &TestHost) -> Vec<(u32, AuditResult, Option<String>)> {
    let audits = host.audits().await;
    let kinds: Vec<String> = host
        .events()
        .await
        .into_iter()
        .map(|e| e.kind)
        .filter(|k| ["join.deferred", "node.joined", "security.join.refused"].contains(&k.as_str()))
        .collect();
    let expected: Vec<&str> = audits
        .iter()
        .filter_map(|a| match a.result {
            AuditResult::Deferred => Some("join.deferred"),
            AuditResult::Admitted => Some("node.joined"),
            AuditResult::Refused => Some("security.join.refused"),
            // A shadow's verdict has no event (none runs here).
            AuditResult::ShadowAdmitted
            | AuditResult::ShadowDeferred
            | AuditResult::ShadowRefused => None,
        })
        .collect();
    assert_eq!(kinds, expected, "audits {audits:?}");
    assert!(audits.iter().all(|a| a.attestor == ATTESTOR), "{audits:?}");
    audits
        .into_iter()
        .map(|a| (a.round, a.result, a.reason))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn challenge_two_rounds_spend_the_token_only_on_the_final_one() {
    for backend in backends() {
        let host = host(backend, None).await;

        // Round by round: the challenge spends nothing and commits one deferred round.
        let token = host.create_token("node", 1).await;
        let mut machine = Machine::new(&host, &token);
        let before = host.now().await;
        let challenge = machine.challenged(&host).await;
        assert_eq!(challenge.attestor, ATTESTOR);
        assert!(
            challenge.not_after > before && challenge.not_after <= host.now().await + 120_000,
            "{backend:?}: not-after {} is now + 2 min",
            challenge.not_after
        );
        assert_eq!(uses_left(&host, &token).await, 1, "{backend:?}");
        assert_eq!(
            rounds(&host).await,
            [(1, AuditResult::Deferred, None)],
            "{backend:?}"
        );

        let answer = ChallengeAnswerer.answer(&challenge, &machine.csr).unwrap();
        machine.answering(answer);
        let Verified::Joined { node_id, .. } = machine.send(&host).await.unwrap() else {
            panic!("{backend:?}: the answer did not admit");
        };
        assert!(!node_id.is_empty());
        assert_eq!(uses_left(&host, &token).await, 0, "{backend:?}");
        assert_eq!(
            rounds(&host).await,
            [
                (1, AuditResult::Deferred, None),
                (2, AuditResult::Admitted, None)
            ],
            "{backend:?}"
        );

        // The agent's join loop answers the challenge itself: two rounds.
        let token = host.create_token("node", 1).await;
        let client = JoinClient::new(&host.url(), &host.trust).unwrap();
        let key = NodeKey::generate().unwrap();
        let joined = join(
            &client,
            &host.trust,
            &mut ChallengeAnswerer,
            Some(&token),
            &key,
            &JoinOptions::default(),
        )
        .await
        .unwrap();
        assert_eq!(joined.rounds, 2, "{backend:?}");
        assert_eq!(joined.attestor, ATTESTOR);
        assert_eq!(uses_left(&host, &token).await, 0, "{backend:?}");
        let results: Vec<_> = rounds(&host).await.into_iter().map(|r| r.1).collect();
        assert_eq!(
            results,
            [
                AuditResult::Deferred,
                AuditResult::Admitted,
                AuditResult::Deferred,
                AuditResult::Admitted
            ],
            "{backend:?}"
        );
        assert!(host.refusal_reasons().await.is_empty(), "{backend:?}");
        host.stop().await;
    }
}

/// Sends round 2 and expects ACCESS_DENIED.
async fn denied(host: &TestHost, machine: &Machine) {
    match machine.send(host).await {
        Err(JoinError::Denied) => {}
        other => panic!("the answer was not refused: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn challenge_wrong_other_csr_and_replayed_answers_are_refused() {
    for backend in backends() {
        let host = host(backend, None).await;

        // A wrong answer: the right state, the answer for another nonce.
        let token = host.create_token("node", 1).await;
        let mut machine = Machine::new(&host, &token);
        let challenge = machine.challenged(&host).await;
        let payload: Value = serde_json::from_slice(&challenge.payload).unwrap();
        let state = payload["state"].as_str().unwrap().to_owned();
        machine.answering(answer_bytes(&state, &[0; 32], &machine.csr_sha256));
        denied(&host, &machine).await;
        assert_eq!(uses_left(&host, &token).await, 1, "{backend:?}");

        // An answer for another CSR: state sealed for CSR A, sent with CSR B (and the token
        // sealed for B), the answer computed for B.
        let mut other = Machine::new(&host, &token);
        let nonce = b64::decode(payload["nonce"].as_str().unwrap()).unwrap();
        other.answering(answer_bytes(&state, &nonce, &other.csr_sha256));
        denied(&host, &other).await;
        assert_eq!(uses_left(&host, &token).await, 1, "{backend:?}");

        // A tampered state.
        let mut sealed = b64::decode(&state).unwrap();
        let last = sealed.len() - 1;
        sealed[last] ^= 1;
        machine.answering(answer_bytes(
            &b64::encode(&sealed),
            &nonce,
            &machine.csr_sha256,
        ));
        denied(&host, &machine).await;

        // The right answer admits (the refusals spent nothing); sent again it is a replay,
        // refused as such even though the token has a use left.
        let token = host.create_token("node", 2).await;
        let mut machine = Machine::new(&host, &token);
        let challenge = machine.challenged(&host).await;
        machine.answering(ChallengeAnswerer.answer(&challenge, &machine.csr).unwrap());
        assert!(matches!(
            machine.send(&host).await.unwrap(),
            Verified::Joined { .. }
        ));
        assert_eq!(uses_left(&host, &token).await, 1, "{backend:?}");
        denied(&host, &machine).await;
        assert_eq!(uses_left(&host, &token).await, 1, "{backend:?}");

        assert_eq!(
            host.refusal_reasons().await,
            [
                "challenge-answer",
                "challenge-state",
                "challenge-state",
                "challenge-replayed"
            ],
            "{backend:?}"
        );
        let refused = |reason: &str| (2, AuditResult::Refused, Some(reason.to_owned()));
        assert_eq!(
            rounds(&host).await,
            [
                (1, AuditResult::Deferred, None),
                refused("challenge-answer"),
                refused("challenge-state"),
                refused("challenge-state"),
                (1, AuditResult::Deferred, None),
                (2, AuditResult::Admitted, None),
                refused("challenge-replayed"),
            ],
            "{backend:?}"
        );
        host.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn challenge_a_late_answer_is_refused() {
    for backend in backends() {
        let host = host(backend, Some(json!({ "ttl_ms": 300 }))).await;
        let token = host.create_token("node", 1).await;
        let mut machine = Machine::new(&host, &token);
        let challenge = machine.challenged(&host).await;
        let answer = ChallengeAnswerer.answer(&challenge, &machine.csr).unwrap();
        machine.answering(answer);
        // Past not-after by database time.
        while host.now().await <= challenge.not_after {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        denied(&host, &machine).await;
        assert_eq!(uses_left(&host, &token).await, 1, "{backend:?}");
        assert_eq!(
            host.refusal_reasons().await,
            ["challenge-expired"],
            "{backend:?}"
        );
        assert_eq!(
            rounds(&host).await,
            [
                (1, AuditResult::Deferred, None),
                (2, AuditResult::Refused, Some("challenge-expired".into()))
            ],
            "{backend:?}"
        );
        host.stop().await;
    }
}

/// The challenge is issued by one replica and answered at another: nothing but the sealed
/// state carries it. Needs PostgreSQL (DATABASE_URL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn challenge_a_second_replica_finishes_it() {
    if !backends().contains(&Backend::Postgres) {
        return;
    }
    let (url, name) = fresh_postgres().await;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let replica = |share: bool| HostOptions {
        attestors: vec![PathBuf::from(gatehouse_test_artifacts::CHALLENGE)],
        database_url: Some(url.clone()),
        data_dir: (!share).then(|| data.clone()),
        share_pki_with: share.then(|| data.clone()),
        ..HostOptions::new(Backend::Postgres)
    };
    let first = TestHost::start_with(replica(false)).await;
    let second = TestHost::start_with(replica(true)).await;
    assert_ne!(first.url(), second.url());

    let token = first.create_token("node", 1).await;
    let mut machine = Machine::new(&first, &token);
    let challenge = machine.challenged(&first).await;
    machine.answering(ChallengeAnswerer.answer(&challenge, &machine.csr).unwrap());
    let Verified::Joined { node_id, .. } = machine.send(&second).await.unwrap() else {
        panic!("the second replica did not admit");
    };
    assert_eq!(uses_left(&first, &token).await, 0);
    let mut tx = second.running.db.begin().await.unwrap();
    assert!(tx.node(&node_id).await.unwrap().is_some());
    tx.commit().await.unwrap();
    assert_eq!(
        rounds(&second).await,
        [
            (1, AuditResult::Deferred, None),
            (2, AuditResult::Admitted, None)
        ]
    );
    // Replayed at the first replica: the shared ledger refuses it.
    denied(&first, &machine).await;
    assert_eq!(first.refusal_reasons().await, ["challenge-replayed"]);

    first.stop().await;
    second.stop().await;
    drop_postgres(&name).await;
}
