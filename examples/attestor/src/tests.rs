//! The attestor natively, with the SDK test kit: no host, no database, no wasm. The machine's
//! host key is an Ed25519 key the test holds; the kit's software crypto verifies its
//! signatures, seals the challenge's state and keeps database time.

use base64::Engine as _;
use ed25519_dalek::Signer as _;
use gatehouse_sdk::{Attestor, Deferral, Outcome, reason, refuse};
use gatehouse_sdk_test::{JoinRequestExt as _, Kit, Op, join_request};
use sha2::Digest as _;

use super::*;

/// A machine: its host key.
struct Machine(ed25519_dalek::SigningKey);

impl Machine {
    fn new(seed: u8) -> Self {
        Machine(ed25519_dalek::SigningKey::from_bytes(&[seed; 32]))
    }

    fn host_key(&self) -> HostKey {
        HostKey {
            key: self.0.verifying_key().to_bytes(),
        }
    }

    /// The `.pub` line.
    fn line(&self) -> String {
        let blob = base64::engine::general_purpose::STANDARD.encode(self.host_key().blob());
        format!("ssh-ed25519 {blob} root@machine")
    }

    fn enrollment(&self) -> Vec<u8> {
        serde_json::to_vec(&Enrollment {
            host_key: self.line(),
        })
        .unwrap()
    }

    /// What `ssh-keygen -Y sign -n <namespace>` prints for `message` (SHA-512).
    fn sign(&self, namespace: &str, message: &[u8]) -> String {
        let mut sig = SshSig {
            public_key: self.host_key().blob(),
            namespace: namespace.as_bytes().to_vec(),
            reserved: Vec::new(),
            hash_algorithm: b"sha512".to_vec(),
            signature: [0; 64],
        };
        let signed = sig.signed_data(&sha2::Sha512::digest(message));
        sig.signature = self.0.sign(&signed).to_bytes();
        sig.to_armored()
    }

    /// The producer's answer to `payload`.
    fn answer(&self, payload: &Payload) -> Vec<u8> {
        let message = b64url::decode(&payload.message).unwrap();
        serde_json::to_vec(&Answer {
            state: payload.state.clone(),
            signature: self.sign(&payload.namespace, &message),
        })
        .unwrap()
    }
}

fn attestor(allowed: &[&Machine]) -> SshHostKey {
    let keys: Vec<String> = allowed.iter().map(|m| m.line()).collect();
    let config = serde_json::json!({ "tenant": "acme", "pool": "edge", "host_keys": keys });
    SshHostKey::configure(&config.to_string()).unwrap()
}

/// Round 1 for `machine`: the challenge's payload.
fn challenge(kit: &Kit, attestor: &SshHostKey, machine: &Machine) -> Payload {
    let request = join_request(ID).with_evidence(machine.enrollment(), 1);
    match kit.round(attestor, &request) {
        Outcome::Deferred(Deferral::Challenge(c)) => {
            assert_eq!(c.not_after, kit.tx.now() + i64::from(DEFAULT_TTL_MS));
            serde_json::from_slice(&c.payload).unwrap()
        }
        other => panic!("expected a challenge, got {other:?}"),
    }
}

fn answer(kit: &Kit, attestor: &SshHostKey, answer: Vec<u8>) -> Outcome {
    kit.round(attestor, &join_request(ID).with_evidence(answer, 2))
}

fn refused(code: &str) -> Outcome {
    refuse(code).into()
}

#[test]
fn an_allowed_host_key_joins_once() {
    let machine = Machine::new(1);
    let attestor = attestor(&[&machine]);
    let kit = Kit::new(ID);
    let payload = challenge(&kit, &attestor, &machine);
    assert_eq!(payload.namespace, NAMESPACE);
    assert!(kit.tx.uses().is_empty(), "a challenge records nothing");

    let proof = machine.answer(&payload);
    let Outcome::Admitted(result) = answer(&kit, &attestor, proof.clone()) else {
        panic!("the signed answer was not admitted")
    };
    let fingerprint = gatehouse_sdk::hex::encode(&sha2::Sha256::digest(machine.host_key().blob()));
    assert_eq!(result.tenant_id.as_deref(), Some("acme"));
    assert_eq!(result.pool_id.as_deref(), Some("edge"));
    assert_eq!(result.node_id, None, "a new machine is a new node");
    assert_eq!(result.bindings[0].kind, BINDING);
    assert_eq!(result.bindings[0].value, fingerprint);
    assert_eq!(kit.tx.uses().len(), 1);
    // The same answer again is a replay.
    assert_eq!(answer(&kit, &attestor, proof), refused(CHALLENGE_REPLAYED));
}

#[test]
fn a_bound_host_key_rekeys_its_node() {
    let machine = Machine::new(1);
    let attestor = attestor(&[&machine]);
    let kit = Kit::new(ID);
    let fingerprint = gatehouse_sdk::hex::encode(&sha2::Sha256::digest(machine.host_key().blob()));
    kit.tx.bind(BINDING, &fingerprint, "node_7");
    let payload = challenge(&kit, &attestor, &machine);
    let Outcome::Admitted(result) = answer(&kit, &attestor, machine.answer(&payload)) else {
        panic!()
    };
    assert_eq!(result.node_id.as_deref(), Some("node_7"));
}

#[test]
fn an_unknown_key_is_refused_at_once() {
    let allowed = Machine::new(1);
    let stranger = Machine::new(2);
    let kit = Kit::new(ID);
    let request = join_request(ID).with_evidence(stranger.enrollment(), 1);
    assert_eq!(
        kit.round(&attestor(&[&allowed]), &request),
        refused(UNKNOWN_HOST_KEY)
    );
}

#[test]
fn only_the_host_key_can_answer() {
    let machine = Machine::new(1);
    let thief = Machine::new(2);
    let attestor = attestor(&[&machine, &thief]);
    let kit = Kit::new(ID);
    let payload = challenge(&kit, &attestor, &machine);
    // Another allowed key's signature over the same message: not the challenged key.
    assert_eq!(
        answer(&kit, &attestor, thief.answer(&payload)),
        refused(BAD_SIGNATURE)
    );
    // The right key in another namespace, or over another message.
    let message = b64url::decode(&payload.message).unwrap();
    for signature in [
        machine.sign("file", &message),
        machine.sign(NAMESPACE, b"something else"),
        "not a signature".to_owned(),
    ] {
        let evidence = serde_json::to_vec(&Answer {
            state: payload.state.clone(),
            signature,
        })
        .unwrap();
        assert_eq!(answer(&kit, &attestor, evidence), refused(BAD_SIGNATURE));
    }
    assert!(kit.tx.uses().is_empty(), "a refusal recorded nothing");
    // And the genuine answer still works.
    assert!(matches!(
        answer(&kit, &attestor, machine.answer(&payload)),
        Outcome::Admitted(_)
    ));
}

#[test]
fn the_answer_is_bound_to_the_csr_and_the_time() {
    let machine = Machine::new(1);
    let attestor = attestor(&[&machine]);
    let kit = Kit::new(ID);
    let payload = challenge(&kit, &attestor, &machine);
    let proof = machine.answer(&payload);
    // Sent with another CSR: the state does not open.
    let other_csr = join_request(ID)
        .with_csr(b"another node key")
        .with_evidence(proof.clone(), 2);
    assert_eq!(kit.round(&attestor, &other_csr), refused(CHALLENGE_STATE));
    // Too late.
    kit.tx.advance(i64::from(DEFAULT_TTL_MS) + 1);
    assert_eq!(answer(&kit, &attestor, proof), refused(CHALLENGE_EXPIRED));
}

#[test]
fn a_key_removed_between_rounds_is_refused() {
    let machine = Machine::new(1);
    let other = Machine::new(3);
    let kit = Kit::new(ID);
    let payload = challenge(&kit, &attestor(&[&machine]), &machine);
    assert_eq!(
        answer(&kit, &attestor(&[&other]), machine.answer(&payload)),
        refused(UNKNOWN_HOST_KEY)
    );
}

#[test]
fn a_storage_failure_refuses() {
    let machine = Machine::new(1);
    let attestor = attestor(&[&machine]);
    let kit = Kit::new(ID);
    let payload = challenge(&kit, &attestor, &machine);
    kit.tx.fail(Op::RecordUse);
    assert_eq!(
        answer(&kit, &attestor, machine.answer(&payload)),
        refused(reason::STORAGE)
    );
}

#[test]
fn malformed_evidence_is_refused() {
    let machine = Machine::new(1);
    let attestor = attestor(&[&machine]);
    let kit = Kit::new(ID);
    for (round, evidence) in [
        (1, b"".to_vec()),
        (1, b"{\"hostKey\":\"ssh-rsa AAAA\"}".to_vec()),
        (2, b"{}".to_vec()),
    ] {
        let request = join_request(ID).with_evidence(evidence, round);
        assert_eq!(
            kit.round(&attestor, &request),
            refused(reason::MALFORMED_EVIDENCE)
        );
    }
    let garbled = serde_json::to_vec(&Answer {
        state: "AAAA".into(),
        signature: String::new(),
    })
    .unwrap();
    assert_eq!(answer(&kit, &attestor, garbled), refused(CHALLENGE_STATE));
}

#[test]
fn configuration_is_checked_at_load() {
    let machine = Machine::new(1);
    assert!(SshHostKey::configure(r#"{"tenant":"acme","host_keys":[]}"#).is_err());
    assert!(SshHostKey::configure(r#"{"tenant":"acme","host_keys":["ssh-rsa AAAA"]}"#).is_err());
    let line = machine.line();
    let config = serde_json::json!({"tenant": "acme", "host_keys": [line], "extra": 1});
    assert!(SshHostKey::configure(&config.to_string()).is_err());
    let config = serde_json::json!({"tenant": "acme", "host_keys": [line], "challenge_ttl_ms": 0});
    assert!(SshHostKey::configure(&config.to_string()).is_err());
    assert_eq!(SshHostKey::info().rounds, 2);
}

#[test]
fn ssh_formats_round_trip_and_reject_garbage() {
    let machine = Machine::new(1);
    assert_eq!(
        HostKey::parse_line(&machine.line()),
        Some(machine.host_key())
    );
    let armored = machine.sign(NAMESPACE, b"m");
    let parsed = SshSig::parse_armored(&armored).unwrap();
    assert_eq!(parsed.public_key, machine.host_key().blob());
    let bytes = parsed.to_bytes();
    for cut in 0..bytes.len() {
        assert!(SshSig::parse(&bytes[..cut]).is_none(), "cut at {cut}");
    }
    assert!(HostKey::from_blob(&[0, 0, 0, 11]).is_none());
    assert!(HostKey::parse_line(&"x".repeat(5000)).is_none());
}
