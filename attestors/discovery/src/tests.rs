//! discovery against an in-memory transaction and a real ES256 verifier: the admission, every
//! reason, approval of unknown machines, and the configuration.

use gatehouse_proto::discovery::{DISCOVERY_SCHEMA, DiscoveryAssertion, SignedDiscoveryAssertion};
use gatehouse_sdk::{
    AttestationResult, Attestor, Deferral, HardwareClaims, Inventory, JoinRequest, JoinRole, Lease,
    Node, NodeCert, NodeKeyAttestation, OpenedToken, Outcome, TimestampMs, Token, TokenExpect,
    TokenRole, reason, refuse,
};
use gatehouse_sdk_test::Kit;
use p256::ecdsa::signature::Signer as _;
use p256::ecdsa::{Signature, SigningKey};
use p256::pkcs8::EncodePublicKey as _;
use sha2::Digest as _;

use super::*;

const NOW: TimestampMs = 1_790_000_000_000;
const MIN: i64 = 60_000;
const SITE: &str = "fra1";
const SIGNER: &str = "node_site";
const TOKEN: &str = "tok_disc";
const SECRET: &[u8] = b"the token's secret";
const MAC: &str = "52:54:00:ab:cd:ef";
const UUID: &str = "4c4c4544-0042-3510-8052-b4c04f4e4d32";
const CSR_SHA256: [u8; 32] = [0x22; 32];
const LEASE: &str = "site:fra1:boot";

fn site_key() -> SigningKey {
    SigningKey::from_slice(&[0x42; 32]).unwrap()
}

fn other_key() -> SigningKey {
    SigningKey::from_slice(&[0x43; 32]).unwrap()
}

fn spki(key: &SigningKey) -> Vec<u8> {
    key.verifying_key()
        .to_public_key_der()
        .unwrap()
        .as_bytes()
        .to_vec()
}

fn kid(key: &SigningKey) -> String {
    hex::encode(sha2::Sha256::digest(spki(key)))
}

/// A live site node `node_site` of site `fra1` holding the boot lease at epoch 4, with a live
/// certificate for [`site_key`], and a fresh discovery token for the site and MAC.
fn setup() -> Kit {
    let kit = Kit::new("discovery");
    kit.tx.set_now(NOW);
    kit.tx.insert_token(Token {
        id: TOKEN.into(),
        role: TokenRole::Discovery,
        secret_sha256: sha2::Sha256::digest(SECRET).to_vec(),
        tenant_id: "ten_1".into(),
        pool_id: Some("pool_1".into()),
        site_id: Some(SITE.into()),
        expires_at: NOW + 60 * MIN,
        revoked: false,
        uses_left: 1,
        expect: TokenExpect {
            product_uuid: None,
            mac: Some(MAC.into()),
            node_id: None,
        },
        reclaim: false,
    });
    kit.tx.insert_lease(Lease {
        name: LEASE.into(),
        holder: SIGNER.into(),
        epoch: 4,
        expires_at: NOW + MIN,
    });
    kit.tx.insert_node(Node {
        id: SIGNER.into(),
        tenant_id: "ten_1".into(),
        pool_id: None,
        site_id: Some(SITE.into()),
        role: JoinRole::Site,
        retired: false,
        identity_generation: 2,
    });
    add_cert(&kit, &site_key(), |_| {});
    kit
}

/// Adds (or replaces, by serial) a certificate of the signer for `key`.
fn add_cert(kit: &Kit, key: &SigningKey, edit: impl FnOnce(&mut NodeCert)) {
    let mut cert = NodeCert {
        node_id: SIGNER.into(),
        serial: "0a".into(),
        generation: 2,
        not_before: NOW - 60 * MIN,
        not_after: NOW + 23 * 60 * MIN,
        revoked: None,
        role: "site".into(),
        spki: spki(key),
        statements: vec![],
    };
    edit(&mut cert);
    // The serial stands for the DER: discovery finds certificates by key, never by DER.
    let der = cert.serial.clone().into_bytes();
    kit.tx.remove_cert(&der);
    kit.tx.insert_cert(&der, cert);
}

fn edit_signer(kit: &Kit, f: impl FnOnce(&mut Node)) {
    kit.tx.update_node(SIGNER, f);
}

fn assertion() -> DiscoveryAssertion {
    DiscoveryAssertion {
        schema: DISCOVERY_SCHEMA.into(),
        site_id: SITE.into(),
        node_id: SIGNER.into(),
        kid: kid(&site_key()),
        lease_epoch: 4,
        mac: MAC.into(),
        ip: Some("10.0.0.7".into()),
        product_uuid: Some(UUID.into()),
        workflow_id: Some("wf_1".into()),
        issued_at: NOW - MIN,
        not_after: NOW + 10 * MIN,
    }
}

fn signed_by(key: &SigningKey, a: &DiscoveryAssertion) -> Vec<u8> {
    SignedDiscoveryAssertion::sign(a, |m| {
        let s: Signature = key.sign(m);
        Ok::<_, ()>(s.to_bytes().to_vec())
    })
    .unwrap()
    .to_text()
    .into_bytes()
}

fn request(attestation: Vec<u8>) -> JoinRequest {
    JoinRequest {
        attestor: "discovery".into(),
        role: JoinRole::Ramdisk,
        attestation,
        token: Some(OpenedToken {
            id: TOKEN.into(),
            secret: SECRET.to_vec(),
        }),
        csr_der: vec![0x30],
        csr_sha256: CSR_SHA256.to_vec(),
        csr_spki_sha256: vec![1; 32],
        claims: HardwareClaims {
            macs: vec!["52:54:00:00:00:01".into(), MAC.into()],
            product_uuid: Some(UUID.into()),
        },
        round: 1,
    }
}

fn good() -> JoinRequest {
    request(signed_by(&site_key(), &assertion()))
}

/// One round with the host's transaction semantics (the kit's): a round that does not admit
/// rolls back what it recorded and spent (a deferral commits only the join request and the kv
/// entry).
fn verify_with(config: &str, tx: &Kit, request: &JoinRequest) -> Outcome {
    let attestor = Discovery::configure(config).unwrap();
    tx.round(&attestor, request)
}

fn verify(tx: &Kit, request: &JoinRequest) -> Outcome {
    verify_with("{}", tx, request)
}

fn refused(code: &str) -> Outcome {
    refuse(code).token(TOKEN).tenant("ten_1").into()
}

#[track_caller]
fn admitted(outcome: Outcome) -> AttestationResult {
    match outcome {
        Outcome::Admitted(result) => result,
        other => panic!("expected an admission, got {other:?}"),
    }
}

#[test]
fn a_vouched_ramdisk_is_admitted_once_with_the_commissioning_kinds() {
    let tx = setup();
    let result = admitted(verify(&tx, &good()));
    assert_eq!(
        result,
        AttestationResult {
            node_id: None,
            tenant_id: Some("ten_1".into()),
            pool_id: Some("pool_1".into()),
            site_id: Some(SITE.into()),
            token_id: Some(TOKEN.into()),
            bindings: vec![],
            node_key: NodeKeyAttestation::Unattested,
            node_key_uri: None,
            cert_ttl_seconds: Some(7200),
            allowed_kinds: Some(
                [
                    "inventory.refresh",
                    "logs.collect",
                    "diag.*",
                    "disk.wipe",
                    "deploy.*",
                    "boot.kexec"
                ]
                .map(String::from)
                .to_vec()
            ),
            subject: Some(format!("mac:{MAC}")),
        }
    );
    assert_eq!(tx.tx.spent(TOKEN), 1);
    // The ledger holds the assertion until it would be stale anyway (issued + 15 min is
    // later than notAfter here).
    let uses = tx.tx.uses();
    assert_eq!(uses.len(), 1);
    assert!(uses[0].0.starts_with("discovery:"));
    assert_eq!(uses[0].1, NOW + 10 * MIN);

    // The same assertion with a fresh token: one join per assertion.
    tx.tx.update_token(TOKEN, |t| t.uses_left = 1);
    assert_eq!(verify(&tx, &good()), refused(reason::ASSERTION_REUSED));
    // A re-encoded signature of the same input is the same assertion.
    let text = String::from_utf8(good().attestation).unwrap();
    let mut signed = SignedDiscoveryAssertion::parse(&text).unwrap();
    let sig = Signature::from_slice(&signed.signature).unwrap();
    let (r, s) = sig.split_scalars();
    let negated = Signature::from_scalars(r, -s).unwrap();
    assert_ne!(negated.to_bytes().to_vec(), signed.signature);
    signed.signature = negated.to_bytes().to_vec();
    assert_eq!(
        verify(&tx, &request(signed.to_text().into_bytes())),
        refused(reason::ASSERTION_REUSED)
    );
}

#[test]
fn the_token_is_checked_first() {
    let tx = setup();
    let mut r = good();
    r.token = None;
    assert_eq!(verify(&tx, &r), refuse(reason::NO_TOKEN).into());
    let mut r = good();
    r.token.as_mut().unwrap().secret = b"another secret".to_vec();
    assert_eq!(verify(&tx, &r), refused(reason::BAD_SECRET));
    r.token.as_mut().unwrap().id = "tok_other".into();
    assert_eq!(
        verify(&tx, &r),
        refuse(reason::UNKNOWN_TOKEN).token("tok_other").into()
    );
    tx.tx.update_token(TOKEN, |t| t.revoked = true);
    assert_eq!(verify(&tx, &good()), refused(reason::REVOKED));
    tx.tx.update_token(TOKEN, |t| t.revoked = false);
    tx.tx.update_token(TOKEN, |t| t.expires_at = NOW);
    assert_eq!(verify(&tx, &good()), refused(reason::EXPIRED));
    tx.tx.update_token(TOKEN, |t| t.expires_at = NOW + MIN);
    tx.tx.update_token(TOKEN, |t| t.uses_left = 0);
    assert_eq!(verify(&tx, &good()), refused(reason::NO_USES_LEFT));
    tx.tx.update_token(TOKEN, |t| t.uses_left = 2);
    assert_eq!(verify(&tx, &good()), refused(reason::NOT_SINGLE_USE));
    tx.tx.update_token(TOKEN, |t| t.uses_left = 1);
    tx.tx.update_token(TOKEN, |t| t.role = TokenRole::Node);
    assert_eq!(verify(&tx, &good()), refused(reason::WRONG_ROLE));
    tx.tx.update_token(TOKEN, |t| t.role = TokenRole::Discovery);
    let mut r = good();
    r.role = JoinRole::Node;
    assert_eq!(verify(&tx, &r), refused(reason::WRONG_ROLE));
    assert_eq!(tx.tx.spent(TOKEN), 0);
}

#[test]
fn each_check_refuses_with_its_reason() {
    // (what to change, the reason)
    type Edit = fn(&Kit, &mut DiscoveryAssertion, &mut JoinRequest);
    let cases: &[(&str, Edit, &str)] = &[
        (
            "garbage",
            |_, _, r| r.attestation = b"not an assertion".to_vec(),
            BAD_EVIDENCE,
        ),
        (
            "bad mac",
            |_, a, _| a.mac = "52-54-00-ab-cd-ef".into(),
            BAD_EVIDENCE,
        ),
        ("bad kid", |_, a, _| a.kid = "zz".repeat(32), BAD_EVIDENCE),
        (
            "empty validity",
            |_, a, _| a.not_after = a.issued_at,
            BAD_EVIDENCE,
        ),
        (
            "other site",
            |_, a, _| a.site_id = "ams1".into(),
            SITE_MISMATCH,
        ),
        (
            "token for another site",
            |tx, _, _| tx.tx.update_token(TOKEN, |t| t.site_id = None),
            SITE_MISMATCH,
        ),
        (
            "token for another mac",
            |tx, _, _| {
                tx.tx
                    .update_token(TOKEN, |t| t.expect.mac = Some("52:54:00:00:00:09".into()));
            },
            MAC_MISMATCH,
        ),
        (
            "unknown signer",
            |_, a, _| a.node_id = "node_x".into(),
            UNKNOWN_SIGNER,
        ),
        (
            "signer not a site node",
            |tx, _, _| edit_signer(tx, |n| n.role = JoinRole::Node),
            SIGNER_NOT_SITE,
        ),
        (
            "signer of another site",
            |tx, _, _| edit_signer(tx, |n| n.site_id = Some("ams1".into())),
            SIGNER_NOT_SITE,
        ),
        (
            "signer retired",
            |tx, _, _| edit_signer(tx, |n| n.retired = true),
            SIGNER_RETIRED,
        ),
        ("old epoch", |_, a, _| a.lease_epoch = 3, LEASE_EPOCH),
        (
            "lease moved",
            |tx, _, _| {
                tx.tx.update_lease(LEASE, |l| {
                    l.holder = "node_other".into();
                    l.epoch = 5;
                })
            },
            LEASE_EPOCH,
        ),
        (
            "no lease",
            |tx, _, _| tx.tx.remove_lease(LEASE),
            LEASE_EPOCH,
        ),
        (
            "lease lapsed",
            |tx, _, _| tx.tx.update_lease(LEASE, |l| l.expires_at = NOW),
            LEASE_EXPIRED,
        ),
        (
            "unknown key",
            |_, a, _| a.kid = kid(&other_key()),
            ASSERTION_SIGNATURE,
        ),
        (
            "revoked cert",
            |tx, _, _| {
                add_cert(tx, &site_key(), |c| {
                    c.revoked = Some(gatehouse_sdk::Revocation::Operator)
                })
            },
            ASSERTION_SIGNATURE,
        ),
        (
            "expired cert",
            |tx, _, _| add_cert(tx, &site_key(), |c| c.not_after = NOW),
            ASSERTION_SIGNATURE,
        ),
        (
            "old generation",
            |tx, _, _| add_cert(tx, &site_key(), |c| c.generation = 1),
            ASSERTION_SIGNATURE,
        ),
        (
            "cert of another role",
            |tx, _, _| add_cert(tx, &site_key(), |c| c.role = "node".into()),
            ASSERTION_SIGNATURE,
        ),
        (
            "past notAfter",
            |tx, _, _| {
                tx.tx.set_now(NOW + 10 * MIN);
                tx.tx.update_lease(LEASE, |l| l.expires_at = NOW + 11 * MIN);
            },
            ASSERTION_STALE,
        ),
        (
            "older than maxAgeMs",
            |_, a, _| {
                a.issued_at = NOW - 15 * MIN;
                a.not_after = NOW + 10 * MIN;
            },
            ASSERTION_STALE,
        ),
        (
            "issued in the future",
            |_, a, _| {
                a.issued_at = NOW + 2 * MIN;
                a.not_after = NOW + 10 * MIN;
            },
            CLOCK_SKEW,
        ),
        (
            "mac not claimed",
            |_, _, r| r.claims.macs = vec!["52:54:00:00:00:01".into()],
            MAC_NOT_CLAIMED,
        ),
        (
            "no product uuid",
            |_, _, r| r.claims.product_uuid = None,
            reason::PRODUCT_UUID_MISMATCH,
        ),
        (
            "other product uuid",
            |_, _, r| r.claims.product_uuid = Some("00000000-0000-0000-0000-000000000000".into()),
            reason::PRODUCT_UUID_MISMATCH,
        ),
    ];
    for &(what, edit, code) in cases {
        let tx = setup();
        let mut a = assertion();
        let mut r = good();
        edit(&tx, &mut a, &mut r);
        if r.attestation == good().attestation {
            r.attestation = signed_by(&site_key(), &a);
        }
        assert_eq!(verify(&tx, &r), refused(code), "{what}");
        assert!(tx.tx.uses().is_empty(), "{what}: a refusal recorded a use");
        assert_eq!(tx.tx.spent(TOKEN), 0, "{what}: a refusal spent the token");
    }
}

#[test]
fn signatures_by_anyone_else_or_over_anything_else_are_refused() {
    let tx = setup();
    // Signed by another key, naming the site node's key.
    assert_eq!(
        verify(&tx, &request(signed_by(&other_key(), &assertion()))),
        refused(ASSERTION_SIGNATURE)
    );
    // A payload changed after signing.
    let text = String::from_utf8(good().attestation).unwrap();
    let mut signed = SignedDiscoveryAssertion::parse(&text).unwrap();
    signed.payload = String::from_utf8(signed.payload)
        .unwrap()
        .replace("\"leaseEpoch\":4", "\"leaseEpoch\":4 ")
        .into_bytes();
    assert_eq!(
        verify(&tx, &request(signed.to_text().into_bytes())),
        refused(ASSERTION_SIGNATURE)
    );
    // A signature over the payload without the context string (another statement's format).
    let payload = serde_json::to_vec(&assertion()).unwrap();
    let s: Signature = site_key().sign(&payload);
    let bare = SignedDiscoveryAssertion {
        payload,
        signature: s.to_bytes().to_vec(),
    };
    assert_eq!(
        verify(&tx, &request(bare.to_text().into_bytes())),
        refused(ASSERTION_SIGNATURE)
    );
    // A renewed site node: either live certificate's key vouches.
    add_cert(&tx, &other_key(), |c| c.serial = "0b".into());
    let a = DiscoveryAssertion {
        kid: kid(&other_key()),
        ..assertion()
    };
    admitted(verify(&tx, &request(signed_by(&other_key(), &a))));
}

#[test]
fn unknown_machines_wait_for_an_operator() {
    let config = r#"{"approval":"unknown-machines"}"#;
    let tx = setup();
    // Round 1: no inventory lists the MAC: a join request, nothing spent or recorded.
    let outcome = verify_with(config, &tx, &good());
    let Outcome::Deferred(Deferral::Approval(a)) = outcome else {
        panic!("expected an approval deferral, got {outcome:?}");
    };
    assert_eq!(a.request_id, "jr_1");
    assert_eq!(tx.tx.spent(TOKEN), 0);
    assert!(tx.tx.uses().is_empty());
    // Still pending.
    assert!(matches!(
        verify_with(config, &tx, &good()),
        Outcome::Deferred(_)
    ));
    // Approved: admitted once, the approval spent.
    tx.tx.approve("jr_1", "ten_1", None, None);
    admitted(verify_with(config, &tx, &good()));
    assert_eq!(tx.tx.spent(TOKEN), 1);
    tx.tx.update_token(TOKEN, |t| t.uses_left = 1);
    assert_eq!(
        verify_with(config, &tx, &good()),
        refused(JOIN_REQUEST_USED)
    );

    // Denied.
    let tx = setup();
    verify_with(config, &tx, &good());
    tx.tx.deny("jr_1");
    assert_eq!(
        verify_with(config, &tx, &good()),
        refused(JOIN_REQUEST_DENIED)
    );

    // A machine an inventory lists joins at once.
    let tx = setup();
    tx.tx.insert_inventory(Inventory {
        node_id: "node_m".into(),
        product_uuid: Some(UUID.into()),
        macs: vec![MAC.into()],
        recorded_at: NOW - MIN,
    });
    admitted(verify_with(config, &tx, &good()));
    // Without the policy, nobody waits.
    admitted(verify(&setup(), &good()));
}

#[test]
fn configuration() {
    let d = Discovery::configure(
        r#"{"maxAgeMs":60000,"certTtlSeconds":600,"allowedKinds":["disk.wipe"],"approval":"none"}"#,
    )
    .unwrap();
    assert_eq!(
        d,
        Discovery::new(60_000, 600, vec!["disk.wipe".into()], ApprovalPolicy::None).unwrap()
    );
    for bad in [
        r#"{"maxAgeMs":900001}"#,
        r#"{"maxAgeMs":0}"#,
        r#"{"certTtlSeconds":7201}"#,
        r#"{"certTtlSeconds":59}"#,
        r#"{"allowedKinds":[]}"#,
        r#"{"allowedKinds":["*"]}"#,
        r#"{"allowedKinds":["a","a"]}"#,
        r#"{"approval":"always"}"#,
        r#"{"maxAge":5}"#,
    ] {
        assert!(Discovery::configure(bad).is_err(), "{bad}");
    }
    // A shorter maxAgeMs refuses an assertion its notAfter would still admit.
    let tx = setup();
    assert_eq!(
        verify_with(r#"{"maxAgeMs":30000}"#, &tx, &good()),
        refused(ASSERTION_STALE)
    );
    let result = admitted(verify_with(
        r#"{"certTtlSeconds":900,"allowedKinds":["disk.wipe"]}"#,
        &tx,
        &good(),
    ));
    assert_eq!(result.cert_ttl_seconds, Some(900));
    assert_eq!(result.allowed_kinds, Some(vec!["disk.wipe".to_owned()]));
}
