//! x509pop against an in-memory transaction and a real ES256 verifier: every reason, in
//! order, the configuration, and a pinned test vector.

use gatehouse_proto::x509pop::{X509popEvidence, signing_input};
use gatehouse_sdk::{
    AttestationResult, Attestor, Crypto as _, CryptoError, HardwareClaims, JoinRequest, JoinRole,
    Node, NodeCert, NodeKeyAttestation, OpenedToken, Outcome, Revocation, SignatureScheme,
    TimestampMs, reason, refuse,
};
use gatehouse_sdk_test::{Clock, Kit, Op, SoftCrypto};
use p256::ecdsa::signature::Signer as _;
use p256::ecdsa::{Signature, SigningKey};
use p256::pkcs8::EncodePublicKey as _;
use sha2::Digest as _;

use super::*;

const NOW: TimestampMs = 1_790_000_000_000;
const HOUR: i64 = 3_600_000;
const NODE: &str = "node_abc";
const LEAF: &[u8] = b"the leaf's DER";
const ISSUER: &[u8] = b"the node CA's DER";
const CSR_SHA256: [u8; 32] = [0x11; 32];

/// RFC 6979 A.2.5's P-256 private key: a fixed key, so signatures (RFC 6979 nonces) are fixed.
const SCALAR: &str = "c9afa9d845ba75166b5c215767b1d6934e50c3db36e89b127b8a622b120f6721";

fn fixed_key() -> SigningKey {
    SigningKey::from_slice(&hex::decode(SCALAR).unwrap()).unwrap()
}

fn other_key() -> SigningKey {
    SigningKey::from_slice(&[0x42; 32]).unwrap()
}

fn spki(key: &SigningKey) -> Vec<u8> {
    key.verifying_key()
        .to_public_key_der()
        .unwrap()
        .as_bytes()
        .to_vec()
}

fn sign(key: &SigningKey, message: &[u8]) -> Vec<u8> {
    let signature: Signature = key.sign(message);
    signature.to_bytes().to_vec()
}

/// A live node `node_abc` at generation 3 holding [`LEAF`], which expired an hour ago.
fn setup() -> Kit {
    let kit = Kit::new("x509pop");
    kit.tx.set_now(NOW);
    kit.tx.insert_node(node());
    kit.tx.insert_cert(LEAF, cert());
    kit
}

/// The software cryptography the kit gives the attestor.
fn crypto() -> SoftCrypto {
    SoftCrypto::new("x509pop", Clock::new(NOW))
}

/// Edits of the rows [`setup`] made.
trait Rows {
    fn edit_cert(&self, f: impl FnOnce(&mut NodeCert));
    fn edit_node(&self, f: impl FnOnce(&mut Node));
    fn uses(&self) -> Vec<(String, TimestampMs)>;
}

impl Rows for Kit {
    fn edit_cert(&self, f: impl FnOnce(&mut NodeCert)) {
        self.tx.update_cert(LEAF, f);
    }
    fn edit_node(&self, f: impl FnOnce(&mut Node)) {
        self.tx.update_node(NODE, f);
    }
    fn uses(&self) -> Vec<(String, TimestampMs)> {
        self.tx.uses()
    }
}

fn node() -> Node {
    Node {
        id: NODE.into(),
        tenant_id: "ten_1".into(),
        pool_id: Some("pool_1".into()),
        site_id: Some("site_1".into()),
        role: JoinRole::Node,
        retired: false,
        identity_generation: 3,
    }
}

fn cert() -> NodeCert {
    NodeCert {
        node_id: NODE.into(),
        serial: "0a1b2c".into(),
        generation: 3,
        not_before: NOW - 25 * HOUR,
        not_after: NOW - HOUR,
        revoked: None,
        role: "node".into(),
        spki: spki(&fixed_key()),
        statements: Vec::new(),
    }
}

/// The proof a node makes: its claims and its signature.
#[derive(Clone)]
struct Proof {
    node_id: String,
    chain: Vec<Vec<u8>>,
    client_time: i64,
    sig: Vec<u8>,
}

impl Proof {
    /// A correct proof by `key` for `csr_sha256` at `client_time`.
    fn by(key: &SigningKey, csr_sha256: &[u8; 32], client_time: i64) -> Self {
        let input = signing_input(csr_sha256, NODE, client_time).unwrap();
        Proof {
            node_id: NODE.into(),
            chain: vec![LEAF.to_vec(), ISSUER.to_vec()],
            client_time,
            sig: sign(key, &input),
        }
    }

    fn good() -> Self {
        Proof::by(&fixed_key(), &CSR_SHA256, NOW)
    }

    fn bytes(&self) -> Vec<u8> {
        serde_json::to_vec(&X509popEvidence {
            v: 1,
            node_id: self.node_id.clone(),
            chain: self.chain.clone(),
            client_time: self.client_time,
            sig: self.sig.clone(),
        })
        .unwrap()
    }

    fn request(&self, role: JoinRole) -> JoinRequest {
        request(role, self.bytes())
    }
}

fn request(role: JoinRole, attestation: Vec<u8>) -> JoinRequest {
    JoinRequest {
        attestor: "x509pop".into(),
        role,
        attestation,
        token: None,
        csr_der: vec![0x30],
        csr_sha256: CSR_SHA256.to_vec(),
        csr_spki_sha256: vec![1; 32],
        claims: HardwareClaims {
            macs: Vec::new(),
            product_uuid: None,
        },
        round: 1,
    }
}

/// One round, with the host's transaction semantics (the kit's): what a refused round
/// recorded in the ledger is rolled back.
fn verify_with(config: &str, tx: &Kit, request: &JoinRequest) -> Outcome {
    let attestor = X509pop::configure(config).unwrap();
    tx.round(&attestor, request)
}

fn verify(tx: &Kit, request: &JoinRequest) -> Outcome {
    verify_with("{}", tx, request)
}

/// The refusal of a check after the node was found: it names the node and its tenant.
fn about_node(code: &str) -> Outcome {
    refuse(code).node(NODE).tenant("ten_1").into()
}

/// Asserts `outcome` is `expected` and that nothing was recorded in the ledger.
#[track_caller]
fn assert_refused(tx: &Kit, request: &JoinRequest, expected: Outcome) {
    assert_eq!(verify(tx, request), expected);
    assert!(tx.uses().is_empty(), "a refusal recorded a use");
}

#[track_caller]
fn assert_admitted(outcome: Outcome) -> AttestationResult {
    match outcome {
        Outcome::Admitted(result) => result,
        other => panic!("expected an admission, got {other:?}"),
    }
}

#[test]
fn an_expired_certificate_within_grace_rejoins_as_its_node() {
    let tx = setup();
    let proof = Proof::good();
    let outcome = verify(&tx, &proof.request(JoinRole::Node));
    assert_eq!(
        outcome,
        Outcome::Admitted(AttestationResult {
            node_id: Some(NODE.into()),
            tenant_id: Some("ten_1".into()),
            pool_id: Some("pool_1".into()),
            site_id: Some("site_1".into()),
            token_id: None,
            bindings: Vec::new(),
            node_key: NodeKeyAttestation::Unattested,
            node_key_uri: None,
            cert_ttl_seconds: None,
            allowed_kinds: None,
            subject: Some("x509pop:0a1b2c".into()),
        })
    );
    let input = signing_input(&CSR_SHA256, NODE, NOW).unwrap();
    let subject = format!("x509pop:{}", hex::encode(sha2::Sha256::digest(&input)));
    assert_eq!(
        tx.uses(),
        vec![(subject, NOW + DEFAULT_WINDOW_MS as i64 + 1)]
    );
}

#[test]
fn a_certificate_still_valid_rejoins_too() {
    let tx = setup();
    tx.edit_cert(|c| c.not_after = NOW + HOUR);
    assert_admitted(verify(&tx, &Proof::good().request(JoinRole::Node)));
}

#[test]
fn the_chain_may_be_the_leaf_alone() {
    let tx = setup();
    let mut proof = Proof::good();
    proof.chain.truncate(1);
    assert_admitted(verify(&tx, &proof.request(JoinRole::Node)));
}

#[test]
fn a_site_certificate_rejoins_as_site() {
    let tx = setup();
    tx.edit_cert(|c| c.role = "site".into());
    tx.edit_node(|n| n.role = JoinRole::Site);
    assert_admitted(verify(&tx, &Proof::good().request(JoinRole::Site)));
}

#[test]
fn a_node_tenant_certificate_rejoins_as_node() {
    let tx = setup();
    tx.edit_cert(|c| c.role = "node-tenant".into());
    let result = assert_admitted(verify(&tx, &Proof::good().request(JoinRole::Node)));
    assert_eq!(result.node_id.as_deref(), Some(NODE));
}

#[test]
fn a_node_without_pool_or_site_keeps_none() {
    let tx = setup();
    tx.edit_node(|n| {
        n.pool_id = None;
        n.site_id = None;
    });
    let result = assert_admitted(verify(&tx, &Proof::good().request(JoinRole::Node)));
    assert_eq!((result.pool_id, result.site_id), (None, None));
}

#[test]
fn malformed_evidence_is_refused() {
    let tx = setup();
    let good = Proof::good();
    let mut cases: Vec<Vec<u8>> = vec![
        Vec::new(),
        b"{".to_vec(),
        b"\xff\xfe".to_vec(),
        b"[]".to_vec(),
        br#"{"v":1}"#.to_vec(),
    ];
    let mut json: serde_json::Value = serde_json::from_slice(&good.bytes()).unwrap();
    for (field, value) in [
        ("v", serde_json::json!(2)),
        ("v", serde_json::json!(0)),
        ("v", serde_json::json!(256)),
        ("v", serde_json::json!(-1)),
        ("chain", serde_json::json!([])),
        ("chain", serde_json::json!(["AQ", "AQ", "AQ", "AQ", "AQ"])),
        ("chain", serde_json::json!(["AQ", ""])),
        ("chain", serde_json::json!(["AQ=="])),
        ("chain", serde_json::json!("AQ")),
        (
            "sig",
            serde_json::json!(gatehouse_sdk::b64url::encode(&[1; 63])),
        ),
        (
            "sig",
            serde_json::json!(gatehouse_sdk::b64url::encode(&[1; 65])),
        ),
        ("sig", serde_json::json!("")),
        ("nodeId", serde_json::json!("")),
        ("nodeId", serde_json::json!("node abc")),
        ("nodeId", serde_json::json!("node/abc")),
        ("nodeId", serde_json::json!("nöde")),
        ("nodeId", serde_json::json!("n".repeat(MAX_NODE_ID_LEN + 1))),
        ("nodeId", serde_json::json!(5)),
        ("clientTime", serde_json::json!("1790000000000")),
        ("clientTime", serde_json::json!(1.5)),
        ("extra", serde_json::json!(true)),
    ] {
        let saved = json.clone();
        json[field] = value;
        cases.push(serde_json::to_vec(&json).unwrap());
        json = saved;
    }
    let oversized = format!(
        "{}{}",
        String::from_utf8(good.bytes()).unwrap(),
        " ".repeat(gatehouse_sdk::evidence::MAX_JSON_BYTES)
    );
    cases.push(oversized.into_bytes());
    for attestation in cases {
        let shown = String::from_utf8_lossy(&attestation)
            .chars()
            .take(120)
            .collect::<String>();
        assert_eq!(
            verify(&tx, &request(JoinRole::Node, attestation)),
            refuse(BAD_EVIDENCE).into(),
            "{shown}"
        );
    }
    assert!(tx.uses().is_empty());
}

#[test]
fn bounds_admit_what_they_should() {
    // Four certificates and a node id of the longest length parse.
    let tx = setup();
    let long_id = "n".repeat(MAX_NODE_ID_LEN);
    tx.edit_cert(|c| c.node_id = long_id.clone());
    tx.tx.insert_node(Node {
        id: long_id.clone(),
        ..node()
    });
    let input = signing_input(&CSR_SHA256, &long_id, NOW).unwrap();
    let proof = Proof {
        node_id: long_id.clone(),
        chain: vec![
            LEAF.to_vec(),
            ISSUER.to_vec(),
            ISSUER.to_vec(),
            ISSUER.to_vec(),
        ],
        client_time: NOW,
        sig: sign(&fixed_key(), &input),
    };
    let result = assert_admitted(verify(&tx, &proof.request(JoinRole::Node)));
    assert_eq!(result.node_id, Some(long_id));
}

#[test]
fn a_ramdisk_never_rejoins() {
    let tx = setup();
    assert_refused(
        &tx,
        &Proof::good().request(JoinRole::Ramdisk),
        refuse(reason::WRONG_ROLE).into(),
    );
}

#[test]
fn a_request_with_a_token_is_refused() {
    let tx = setup();
    let mut request = Proof::good().request(JoinRole::Node);
    request.token = Some(OpenedToken {
        id: "tok_1".into(),
        secret: vec![1; 32],
    });
    assert_refused(&tx, &request, refuse(BAD_EVIDENCE).into());
}

#[test]
fn a_certificate_this_host_did_not_issue_is_refused() {
    let tx = setup();
    let mut proof = Proof::good();
    proof.chain[0] = b"some other DER".to_vec();
    assert_refused(
        &tx,
        &proof.request(JoinRole::Node),
        refuse(UNKNOWN_CERTIFICATE).into(),
    );
    // Byte for byte: one more byte is another certificate.
    let mut longer = LEAF.to_vec();
    longer.push(0);
    proof.chain[0] = longer;
    assert_refused(
        &tx,
        &proof.request(JoinRole::Node),
        refuse(UNKNOWN_CERTIFICATE).into(),
    );
}

#[test]
fn another_nodes_certificate_is_refused() {
    let tx = setup();
    tx.edit_cert(|c| c.node_id = "node_other".into());
    // The proof claims node_abc with node_other's certificate.
    assert_refused(
        &tx,
        &Proof::good().request(JoinRole::Node),
        refuse(WRONG_NODE).node("node_other").into(),
    );
}

#[test]
fn a_missing_node_is_refused() {
    let tx = setup();
    tx.tx.remove_node(NODE);
    assert_refused(
        &tx,
        &Proof::good().request(JoinRole::Node),
        refuse(UNKNOWN_NODE).node(NODE).into(),
    );
}

#[test]
fn a_retired_node_is_refused() {
    let tx = setup();
    tx.edit_node(|n| n.retired = true);
    tx.edit_cert(|c| c.revoked = Some(Revocation::NodeRemoved));
    assert_refused(
        &tx,
        &Proof::good().request(JoinRole::Node),
        about_node(RETIRED),
    );
}

#[test]
fn each_revocation_has_its_reason() {
    let cases = [
        (Some(Revocation::IdentityRevoked), 3, IDENTITY_REVOKED),
        // A revoke-identity raised the generation too: still identity-revoked.
        (Some(Revocation::IdentityRevoked), 2, IDENTITY_REVOKED),
        (Some(Revocation::Superseded), 3, OLD_GENERATION),
        (Some(Revocation::Superseded), 2, OLD_GENERATION),
        // An older generation not (yet) marked revoked.
        (None, 2, OLD_GENERATION),
        // A generation from the future is not the current one either.
        (None, 4, OLD_GENERATION),
        (Some(Revocation::Operator), 2, OLD_GENERATION),
        (Some(Revocation::Operator), 3, reason::REVOKED),
        (Some(Revocation::NodeRemoved), 3, reason::REVOKED),
    ];
    for (revoked, generation, code) in cases {
        let tx = setup();
        tx.edit_cert(|c| {
            c.revoked = revoked;
            c.generation = generation;
        });
        assert_eq!(
            verify(&tx, &Proof::good().request(JoinRole::Node)),
            about_node(code),
            "{revoked:?} at generation {generation}"
        );
        assert!(tx.uses().is_empty());
    }
}

#[test]
fn the_certificate_admits_only_its_own_role() {
    let cases = [
        ("node", JoinRole::Node, true),
        ("node", JoinRole::Site, false),
        ("node-tenant", JoinRole::Node, true),
        ("node-tenant", JoinRole::Site, false),
        ("site", JoinRole::Site, true),
        ("site", JoinRole::Node, false),
        ("ramdisk", JoinRole::Node, false),
        ("ramdisk", JoinRole::Site, false),
        ("", JoinRole::Node, false),
    ];
    for (cert_role, join_role, admitted) in cases {
        let tx = setup();
        tx.edit_cert(|c| c.role = cert_role.into());
        let outcome = verify(&tx, &Proof::good().request(join_role));
        if admitted {
            assert_admitted(outcome);
        } else {
            assert_eq!(
                outcome,
                about_node(reason::WRONG_ROLE),
                "{cert_role} as {join_role:?}"
            );
            assert!(tx.uses().is_empty());
        }
    }
}

#[test]
fn grace_ends_exactly_grace_ms_after_expiry() {
    let grace = DEFAULT_GRACE_MS as i64;
    let tx = setup();
    tx.edit_cert(|c| c.not_after = NOW - grace);
    assert_admitted(verify(&tx, &Proof::good().request(JoinRole::Node)));

    let tx = setup();
    tx.edit_cert(|c| c.not_after = NOW - grace - 1);
    assert_refused(
        &tx,
        &Proof::good().request(JoinRole::Node),
        about_node(EXPIRED_PAST_GRACE),
    );

    // Eight days ago is past the default week.
    let tx = setup();
    tx.edit_cert(|c| c.not_after = NOW - 8 * 24 * HOUR);
    assert_refused(
        &tx,
        &Proof::good().request(JoinRole::Node),
        about_node(EXPIRED_PAST_GRACE),
    );
}

#[test]
fn grace_is_configurable() {
    // With no grace, only a certificate that has not expired yet re-joins.
    let tx = setup();
    assert_eq!(
        verify_with(
            r#"{"graceMs":0}"#,
            &tx,
            &Proof::good().request(JoinRole::Node)
        ),
        about_node(EXPIRED_PAST_GRACE)
    );
    tx.edit_cert(|c| c.not_after = NOW);
    assert_admitted(verify_with(
        r#"{"graceMs":0}"#,
        &tx,
        &Proof::good().request(JoinRole::Node),
    ));
    // Thirty days admits one that expired 29 days ago.
    let tx = setup();
    tx.edit_cert(|c| c.not_after = NOW - 29 * 24 * HOUR);
    let config = format!(r#"{{"graceMs":{MAX_GRACE_MS}}}"#);
    assert_admitted(verify_with(
        &config,
        &tx,
        &Proof::good().request(JoinRole::Node),
    ));
}

#[test]
fn client_time_must_be_within_the_window_of_database_time() {
    let window = DEFAULT_WINDOW_MS as i64;
    for (client_time, admitted) in [
        (NOW - window, true),
        (NOW + window, true),
        (NOW - window - 1, false),
        (NOW + window + 1, false),
        (0, false),
        (i64::MIN, false),
        (i64::MAX, false),
    ] {
        let tx = setup();
        let proof = Proof::by(&fixed_key(), &CSR_SHA256, client_time);
        let outcome = verify(&tx, &proof.request(JoinRole::Node));
        if admitted {
            assert_admitted(outcome);
            let expires = tx.uses()[0].1;
            assert_eq!(expires, client_time + window + 1);
            assert!(expires > NOW, "the record outlives the window");
        } else {
            assert_eq!(outcome, about_node(CLOCK_SKEW), "client time {client_time}");
            assert!(tx.uses().is_empty());
        }
    }
}

#[test]
fn the_window_is_configurable() {
    let tx = setup();
    let proof = Proof::by(&fixed_key(), &CSR_SHA256, NOW - 1_001);
    assert_eq!(
        verify_with(r#"{"windowMs":1000}"#, &tx, &proof.request(JoinRole::Node)),
        about_node(CLOCK_SKEW)
    );
    let proof = Proof::by(&fixed_key(), &CSR_SHA256, NOW - 1_000);
    assert_admitted(verify_with(
        r#"{"windowMs":1000}"#,
        &tx,
        &proof.request(JoinRole::Node),
    ));
    assert_eq!(tx.uses()[0].1, NOW + 1);
}

#[test]
fn a_signature_that_does_not_verify_is_refused() {
    let good = Proof::good();
    let mut flipped = good.clone();
    flipped.sig[10] ^= 1;
    let other_csr = Proof::by(&fixed_key(), &[0x22; 32], NOW);
    let other_key = Proof::by(&other_key(), &CSR_SHA256, NOW);
    let mut other_time = good.clone();
    other_time.client_time = NOW - 1;
    let mut zero = good.clone();
    zero.sig = vec![0; 64];
    for (what, proof) in [
        ("a flipped byte", flipped),
        ("a proof for another CSR", other_csr),
        ("another key", other_key),
        ("a client time it does not sign", other_time),
        ("zeros", zero),
    ] {
        let tx = setup();
        assert_eq!(
            verify(&tx, &proof.request(JoinRole::Node)),
            about_node(BAD_SIGNATURE),
            "{what}"
        );
        assert!(tx.uses().is_empty(), "{what}");
    }
}

#[test]
fn a_certificate_key_that_does_not_parse_is_a_bad_signature() {
    let tx = setup();
    tx.edit_cert(|c| c.spki = b"not an spki".to_vec());
    assert_refused(
        &tx,
        &Proof::good().request(JoinRole::Node),
        about_node(BAD_SIGNATURE),
    );
}

#[test]
fn a_proof_admits_once() {
    let tx = setup();
    let request = Proof::good().request(JoinRole::Node);
    assert_admitted(verify(&tx, &request));
    assert_eq!(verify(&tx, &request), about_node(PROOF_REUSED));
    assert_eq!(tx.uses().len(), 1);
}

/// The negation of `s` modulo the group order: ECDSA's `(r, n - s)` verifies wherever
/// `(r, s)` does.
fn malleate(sig: &[u8]) -> Vec<u8> {
    let signature = Signature::from_slice(sig).unwrap();
    let (r, s) = signature.split_scalars();
    let negated = Signature::from_scalars(r, -s).unwrap();
    negated.to_bytes().to_vec()
}

#[test]
fn the_ledger_is_keyed_on_the_signing_input_not_the_signature() {
    let tx = setup();
    let proof = Proof::good();
    let mut twin = proof.clone();
    twin.sig = malleate(&proof.sig);
    assert_ne!(twin.sig, proof.sig);
    // The twin is a valid signature in its own right...
    let input = signing_input(&CSR_SHA256, NODE, NOW).unwrap();
    assert_eq!(
        crypto().verify_signature(
            SignatureScheme::EcdsaP256Sha256Fixed,
            &spki(&fixed_key()),
            &input,
            &twin.sig
        ),
        Ok(())
    );
    // ...but the same proof.
    assert_admitted(verify(&tx, &proof.request(JoinRole::Node)));
    assert_eq!(
        verify(&tx, &twin.request(JoinRole::Node)),
        about_node(PROOF_REUSED)
    );
}

#[test]
fn a_proof_recorded_by_another_replica_is_reused() {
    // The ledger is the database's: a record another host committed refuses the proof here.
    let tx = setup();
    let input = signing_input(&CSR_SHA256, NODE, NOW).unwrap();
    let subject = ledger_subject(&sha2::Sha256::digest(&input));
    tx.tx.insert_use(&subject, NOW + 1);
    assert_eq!(
        verify(&tx, &Proof::good().request(JoinRole::Node)),
        about_node(PROOF_REUSED)
    );
}

#[test]
fn storage_failures_are_refused() {
    let request = Proof::good().request(JoinRole::Node);

    let tx = setup();
    tx.tx.fail(Op::NodeCert);
    assert_refused(&tx, &request, refuse(reason::STORAGE).into());

    let tx = setup();
    tx.tx.fail(Op::Node);
    assert_refused(&tx, &request, refuse(reason::STORAGE).node(NODE).into());

    let tx = setup();
    tx.tx.fail(Op::RecordUse);
    assert_refused(&tx, &request, about_node(reason::STORAGE));
}

#[test]
fn checks_run_in_order() {
    // A certificate that fails every check is refused for the first failing one, and each
    // fix reveals the next.
    let tx = setup();
    tx.edit_node(|n| n.retired = true);
    tx.edit_cert(|c| {
        c.revoked = Some(Revocation::IdentityRevoked);
        c.role = "site".into();
        c.not_after = NOW - 8 * 24 * HOUR;
    });
    let mut proof = Proof::by(&other_key(), &CSR_SHA256, NOW - 2 * HOUR);
    let request = |proof: &Proof| proof.request(JoinRole::Node);

    let mut with_token = request(&proof);
    with_token.token = Some(OpenedToken {
        id: "tok_1".into(),
        secret: vec![1],
    });
    assert_refused(
        &tx,
        &proof.request(JoinRole::Ramdisk),
        refuse(reason::WRONG_ROLE).into(),
    );
    assert_refused(&tx, &with_token, refuse(BAD_EVIDENCE).into());
    proof.node_id = "node_other".into();
    assert_refused(&tx, &request(&proof), refuse(WRONG_NODE).node(NODE).into());
    proof.node_id = NODE.into();
    assert_refused(&tx, &request(&proof), about_node(RETIRED));
    tx.edit_node(|n| n.retired = false);
    // The proof is judged before the certificate.
    assert_refused(&tx, &request(&proof), about_node(CLOCK_SKEW));
    proof.client_time = NOW;
    assert_refused(&tx, &request(&proof), about_node(BAD_SIGNATURE));
    let proof = Proof::good();
    assert_refused(&tx, &request(&proof), about_node(IDENTITY_REVOKED));
    tx.edit_cert(|c| c.revoked = None);
    assert_refused(&tx, &request(&proof), about_node(reason::WRONG_ROLE));
    tx.edit_cert(|c| c.role = "node".into());
    assert_refused(&tx, &request(&proof), about_node(EXPIRED_PAST_GRACE));
    tx.edit_cert(|c| c.not_after = NOW - HOUR);
    tx.edit_cert(|c| c.statements = vec!["urn:bc:tpm-ak:000b:00ff".into()]);
    assert_refused(&tx, &request(&proof), about_node(KEY_ATTESTATION_REQUIRED));
    tx.edit_cert(|c| c.statements = vec![]);
    assert_admitted(verify(&tx, &request(&proof)));
    assert_eq!(verify(&tx, &request(&proof)), about_node(PROOF_REUSED));
}

/// The signing input of `gatehouse_proto::x509pop`'s own vector, signed by RFC 6979's P-256
/// key: the input and the signature are pinned, so a change of either side of the wire
/// format fails here.
#[test]
fn test_vector() {
    let key = fixed_key();
    let input = signing_input(&[0x11; 32], "node_abc", 1_790_000_000_000).unwrap();
    assert_eq!(
        hex::encode(&input),
        concat!(
            "67617465686f7573652f78353039706f702f763100",
            "1111111111111111111111111111111111111111111111111111111111111111",
            "0008",
            "6e6f64655f616263",
            "000001a0c4506c00"
        )
    );
    let sig = sign(&key, &input);
    assert_eq!(hex::encode(&sig), PINNED_SIGNATURE);
    let spki = spki(&key);
    let scheme = SignatureScheme::EcdsaP256Sha256Fixed;
    assert_eq!(
        crypto().verify_signature(scheme, &spki, &input, &sig),
        Ok(())
    );
    for i in 0..input.len() {
        let mut flipped = input.clone();
        flipped[i] ^= 0x01;
        assert_eq!(
            crypto().verify_signature(scheme, &spki, &flipped, &sig),
            Err(CryptoError::BadSignature),
            "input byte {i}"
        );
    }
    for i in 0..sig.len() {
        let mut flipped = sig.clone();
        flipped[i] ^= 0x80;
        assert!(
            crypto()
                .verify_signature(scheme, &spki, &input, &flipped)
                .is_err(),
            "signature byte {i}"
        );
    }
    // And through the attestor: the pinned evidence admits.
    let tx = setup();
    let evidence = format!(
        r#"{{"v":1,"nodeId":"node_abc","chain":["{}"],"clientTime":1790000000000,"sig":"{}"}}"#,
        gatehouse_sdk::b64url::encode(LEAF),
        gatehouse_sdk::b64url::encode(&hex::decode(PINNED_SIGNATURE).unwrap()),
    );
    assert_admitted(verify(&tx, &request(JoinRole::Node, evidence.into_bytes())));
}

/// ES256 by [`SCALAR`] over the test vector's signing input (RFC 6979 nonce), `r || s`.
const PINNED_SIGNATURE: &str = concat!(
    "2a41b20cdd6174639381b86bc3c7b290da7d16f976d80c65f867e3d262fe0376",
    "6c9d815fddc777946050763970c5d4e9fd0e08e42bc7d333144fed5ee2e0d9d6"
);

#[test]
fn describes_itself() {
    let info = X509pop::info();
    assert_eq!(info.id, "x509pop");
    assert_eq!(info.version, env!("CARGO_PKG_VERSION"));
    assert_eq!(info.rounds, 1);
}

#[test]
fn configuration_defaults_and_ranges() {
    assert_eq!(
        X509pop::configure("{}").unwrap(),
        X509pop {
            grace_ms: 604_800_000,
            window_ms: 60_000
        }
    );
    assert_eq!(
        X509pop::configure(r#"{"graceMs":0,"windowMs":1000}"#).unwrap(),
        X509pop {
            grace_ms: 0,
            window_ms: 1_000
        }
    );
    assert_eq!(
        X509pop::configure(r#"{"graceMs":2592000000,"windowMs":600000}"#).unwrap(),
        X509pop {
            grace_ms: 2_592_000_000,
            window_ms: 600_000
        }
    );
    for (config, expected) in [
        (
            r#"{"graceMs":2592000001}"#,
            "graceMs 2592000001 is more than 30 days",
        ),
        (r#"{"windowMs":999}"#, "windowMs 999 is not between 1000"),
        (r#"{"windowMs":0}"#, "windowMs 0 is not between"),
        (r#"{"windowMs":600001}"#, "windowMs 600001 is not between"),
        (r#"{"graceMs":-1}"#, "invalid configuration: invalid value"),
        (r#"{"graceMs":"7d"}"#, "invalid configuration: invalid type"),
        (r#"{"grace_ms":5}"#, "unknown field `grace_ms`"),
        (r#"{"replayCache":10000}"#, "unknown field `replayCache`"),
        ("", "not a JSON object"),
        ("[]", "not a JSON object"),
    ] {
        let error = X509pop::configure(config).unwrap_err();
        assert!(error.contains(expected), "{config}: {error}");
        assert!(error.starts_with("invalid configuration: "), "{error}");
    }
}

/// Every reason is a well-formed, distinct code.
#[test]
fn reason_codes_are_valid() {
    let all = [
        BAD_EVIDENCE,
        UNKNOWN_CERTIFICATE,
        WRONG_NODE,
        UNKNOWN_NODE,
        RETIRED,
        IDENTITY_REVOKED,
        OLD_GENERATION,
        EXPIRED_PAST_GRACE,
        CLOCK_SKEW,
        BAD_SIGNATURE,
        PROOF_REUSED,
        reason::WRONG_ROLE,
        reason::REVOKED,
        reason::STORAGE,
    ];
    for (i, code) in all.iter().enumerate() {
        assert!(reason::is_valid(code), "{code}");
        assert!(!all[..i].contains(code), "{code} twice");
    }
}
