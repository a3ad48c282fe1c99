//! The tpm attestor with the SDK test kit (an in-memory transaction, software cryptography and
//! TPM checks that are `gatehouse-tpm`'s own) and a software TPM (P-256 AK and node key from
//! RustCrypto, structures marshalled per Part 2): both rounds, every placement and every
//! reason code.

use base64::Engine as _;
use gatehouse_proto::tpm::{
    PcrValue, TpmAnswer, TpmCertifiedKey, TpmChallenge, TpmEnrollment, TpmEvidence, TpmQuote,
    ak_statement, quote_nonce_input,
};
use gatehouse_sdk::{
    Attestor, Deferral, HardwareClaims, JoinRequest, JoinRole, Node, NodeKeyAttestation,
    OpenedToken, Outcome, TimestampMs, TpmCredential, Tx as _, reason,
};
use gatehouse_sdk_test::{Kit, SoftTpm};
use gatehouse_tpm::marshal::{
    AK_ATTRIBUTES, NODE_KEY_ATTRIBUTES, certify_attest, ecc_p256_public, ecc_p384_ek_public,
    ecdsa_sha256_signature, quote_attest, rsa_ek_public,
};
use gatehouse_tpm::{HashAlg, attr};
use p256::ecdsa::signature::Signer as _;
use p256::ecdsa::{Signature, SigningKey};
use p256::pkcs8::EncodePublicKey as _;
use sha2::Digest as _;

use super::*;

const NOW: TimestampMs = 1_790_000_000_000;

fn sha256(data: &[u8]) -> Vec<u8> {
    sha2::Sha256::digest(data).to_vec()
}

/// The kit's manufacturer root, which the configuration trusts.
fn root_der() -> Vec<u8> {
    SoftTpm::manufacturer_root().unwrap()
}

thread_local! {
    /// The CSR every request carries.
    static CSR_SHA256: Vec<u8> = sha256(b"the CSR");
}

/// The machine: an EK, an AK and a node key in a software TPM.
struct Machine {
    ek_public: Vec<u8>,
    ak: SigningKey,
    ak_public: Vec<u8>,
    node_key: SigningKey,
    node_public: Vec<u8>,
    pcrs: Vec<PcrValue>,
}

fn p256_public(key: &SigningKey, attributes: u32, scheme: bool) -> Vec<u8> {
    let point = key.verifying_key().to_encoded_point(false);
    ecc_p256_public(attributes, scheme, point.x().unwrap(), point.y().unwrap())
}

fn tpm_sign(key: &SigningKey, message: &[u8]) -> Vec<u8> {
    let sig: Signature = key.sign(message);
    ecdsa_sha256_signature(&sig.to_bytes())
}

impl Machine {
    fn new() -> Self {
        let ak = SigningKey::from_slice(&[1; 32]).unwrap();
        let node_key = SigningKey::from_slice(&[2; 32]).unwrap();
        Machine {
            ek_public: rsa_ek_public(&[0xc1; 256]),
            ak_public: p256_public(&ak, AK_ATTRIBUTES, true),
            ak,
            node_public: p256_public(&node_key, NODE_KEY_ATTRIBUTES, false),
            node_key,
            pcrs: [0u8, 7]
                .iter()
                .map(|i| PcrValue {
                    hash_alg: 0x000b,
                    index: *i,
                    digest: vec![*i + 1; 32],
                })
                .collect(),
        }
    }

    fn ek_sha256(&self) -> String {
        hex::encode(sha256(&self.ek_public))
    }

    fn ak_statement(&self) -> String {
        let name = gatehouse_tpm::Public::parse(&self.ak_public).unwrap().name;
        ak_statement(&name).unwrap()
    }

    fn enrollment(&self) -> TpmEnrollment {
        TpmEnrollment {
            v: 1,
            ek_public: self.ek_public.clone(),
            ek_certificate: SoftTpm::endorse(&self.ek_public).unwrap(),
            ek_chain: vec![],
            ak_public: self.ak_public.clone(),
        }
    }

    /// The answer to `challenge` with the activated `secret`: quote, certify the node key.
    fn answer(&self, challenge: &TpmChallenge, secret: Vec<u8>) -> TpmAnswer {
        let csr_sha256 = CSR_SHA256.with(Clone::clone);
        let nonce = sha256(&quote_nonce_input(&secret, &csr_sha256));
        self.answer_with(challenge, secret, &nonce, &csr_sha256)
    }

    fn answer_with(
        &self,
        challenge: &TpmChallenge,
        secret: Vec<u8>,
        quote_nonce: &[u8],
        certify_nonce: &[u8],
    ) -> TpmAnswer {
        let values: Vec<gatehouse_tpm::PcrValue> = self
            .pcrs
            .iter()
            .map(|p| gatehouse_tpm::PcrValue {
                hash_alg: p.hash_alg,
                index: p.index,
                digest: p.digest.clone(),
            })
            .collect();
        let digest = gatehouse_tpm::pcr_digest(HashAlg::Sha256, &values).unwrap();
        let indexes: Vec<u8> = self.pcrs.iter().map(|p| p.index).collect();
        let attest = quote_attest(quote_nonce, &indexes, &digest);
        let name = gatehouse_tpm::Public::parse(&self.node_public)
            .unwrap()
            .name;
        let certify_info = certify_attest(certify_nonce, &name);
        TpmAnswer {
            v: 1,
            state: challenge.state.clone(),
            secret,
            quote: TpmQuote {
                signature: tpm_sign(&self.ak, &attest),
                attest,
                pcrs: self.pcrs.clone(),
            },
            node_key: Some(TpmCertifiedKey {
                public: self.node_public.clone(),
                signature: tpm_sign(&self.ak, &certify_info),
                certify_info,
            }),
        }
    }

    fn csr_spki_sha256(&self) -> Vec<u8> {
        sha256(
            self.node_key
                .verifying_key()
                .to_public_key_der()
                .unwrap()
                .as_bytes(),
        )
    }
}

fn request(machine: &Machine, evidence: &TpmEvidence, round: u8) -> JoinRequest {
    JoinRequest {
        attestor: "tpm".into(),
        role: JoinRole::Node,
        attestation: serde_json::to_vec(evidence).unwrap(),
        token: None,
        csr_der: b"the CSR".to_vec(),
        csr_sha256: CSR_SHA256.with(Clone::clone),
        csr_spki_sha256: machine.csr_spki_sha256(),
        claims: HardwareClaims {
            macs: vec![],
            product_uuid: None,
        },
        round,
    }
}

fn config(extra: &str) -> Tpm {
    let root = base64::engine::general_purpose::STANDARD.encode(root_der());
    let sep = if extra.is_empty() { "" } else { "," };
    Tpm::configure(&format!(r#"{{"ekRoots":["{root}"]{sep}{extra}}}"#)).unwrap()
}

fn allow(machine: &Machine) -> String {
    format!(
        r#""allow":[{{"ekSha256":"{}","tenantId":"acme","poolId":"gpu"}}]"#,
        machine.ek_sha256()
    )
}

struct Run {
    kit: Kit,
}

impl Run {
    fn new() -> Self {
        let kit = Kit::new("tpm");
        kit.tx.set_now(NOW);
        Run { kit }
    }

    fn verify(&self, attestor: &Tpm, request: &JoinRequest) -> Outcome {
        self.kit.tx.set_csr_sha256(&request.csr_sha256);
        gatehouse_sdk_test::declared::<Tpm, _>(&self.kit.cx(), |cx| attestor.verify(cx, request))
    }

    /// What `machine`'s TPM recovers from `challenge`'s credential.
    fn secret(&self, machine: &Machine, challenge: &TpmChallenge) -> Vec<u8> {
        let credential = TpmCredential {
            credential_blob: challenge.credential_blob.clone(),
            encrypted_secret: challenge.encrypted_secret.clone(),
        };
        self.kit
            .tpm
            .activate(&credential, &machine.ek_public, &machine_ak_name(machine))
            .expect("the credential is for this machine's EK and AK")
    }

    /// `machine`'s answer to `challenge`.
    fn answer(&self, machine: &Machine, challenge: &TpmChallenge) -> TpmAnswer {
        machine.answer(challenge, self.secret(machine, challenge))
    }

    /// Round 1, returning the challenge.
    fn challenge(&self, attestor: &Tpm, machine: &Machine) -> TpmChallenge {
        let outcome = self.verify(
            attestor,
            &request(machine, &TpmEvidence::Enroll(machine.enrollment()), 1),
        );
        let Outcome::Deferred(Deferral::Challenge(c)) = outcome else {
            panic!("expected a challenge, got {outcome:?}")
        };
        assert_eq!(c.not_after, NOW + CHALLENGE_TTL_MS);
        serde_json::from_slice(&c.payload).unwrap()
    }

    fn round2(&self, attestor: &Tpm, machine: &Machine, answer: TpmAnswer) -> Outcome {
        self.verify(attestor, &request(machine, &TpmEvidence::Answer(answer), 2))
    }
}

fn refused(outcome: Outcome) -> String {
    match outcome {
        Outcome::Refused(r) => r.reason,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn an_allowed_ek_joins_with_a_certified_node_key() {
    let machine = Machine::new();
    let attestor = config(&allow(&machine));
    let run = Run::new();
    let challenge = run.challenge(&attestor, &machine);
    assert_eq!(run.secret(&machine, &challenge).len(), 32);
    let outcome = run.round2(&attestor, &machine, run.answer(&machine, &challenge));
    let Outcome::Admitted(result) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(result.node_id, None);
    assert_eq!(result.tenant_id.as_deref(), Some("acme"));
    assert_eq!(result.pool_id.as_deref(), Some("gpu"));
    assert_eq!(result.node_key, NodeKeyAttestation::Tpm);
    assert_eq!(result.node_key_uri, Some(machine.ak_statement()));
    assert_eq!(
        result.bindings,
        vec![gatehouse_sdk::Binding {
            kind: "tpm-ek".into(),
            value: machine.ek_sha256()
        }]
    );
    assert_eq!(result.subject, Some(format!("ek:{}", machine.ek_sha256())));
    // Round 1 wrote nothing.
    assert!(run.kit.tx.kv_entries().is_empty());
    assert!(run.kit.tx.join_requests().is_empty());
}

#[test]
fn a_bound_ek_reclaims_its_node() {
    let machine = Machine::new();
    let attestor = config("");
    let run = Run::new();
    run.kit.tx.bind("tpm-ek", &machine.ek_sha256(), "node_7");
    run.kit.tx.insert_node(Node {
        id: "node_7".into(),
        tenant_id: "acme".into(),
        pool_id: Some("p".into()),
        site_id: None,
        role: JoinRole::Node,
        retired: false,
        identity_generation: 2,
    });
    let challenge = run.challenge(&attestor, &machine);
    let Outcome::Admitted(result) =
        run.round2(&attestor, &machine, run.answer(&machine, &challenge))
    else {
        panic!()
    };
    assert_eq!(result.node_id.as_deref(), Some("node_7"));
    assert_eq!(result.tenant_id.as_deref(), Some("acme"));
    assert_eq!(result.pool_id.as_deref(), Some("p"));
}

#[test]
fn an_unknown_ek_waits_for_an_operator_and_is_admitted_once() {
    let machine = Machine::new();
    let attestor = config("");
    let run = Run::new();
    let challenge = run.challenge(&attestor, &machine);
    let answer = run.answer(&machine, &challenge);
    let outcome = run.round2(&attestor, &machine, answer.clone());
    let Outcome::Deferred(Deferral::Approval(approval)) = outcome else {
        panic!("{outcome:?}")
    };
    let row = run
        .kit
        .tx
        .join_request(&approval.request_id)
        .unwrap()
        .unwrap();
    assert_eq!(row.subject, format!("ek:{}", machine.ek_sha256()));
    let details = run
        .kit
        .tx
        .join_request_details(&approval.request_id)
        .unwrap();
    assert!(details.contains("\"nodeKey\":\"tpm\""), "{details}");
    assert!(details.contains(&format!("\"ekSha256\":\"{}\"", machine.ek_sha256())));
    // Pending: deferred again, even after the challenge expired; nothing recorded.
    run.kit.tx.set_now(NOW + CHALLENGE_TTL_MS + 1);
    assert!(matches!(
        run.round2(&attestor, &machine, answer.clone()),
        Outcome::Deferred(Deferral::Approval(_))
    ));
    assert!(run.kit.tx.uses().is_empty());
    // Approved into a placement.
    run.kit
        .tx
        .approve(&approval.request_id, "acme", None, Some("lab"));
    // The approval is not the CSR's to take: the answer sent while waiting (or a captured
    // one) is answered with a fresh challenge for the approved EK, not an admission.
    let Outcome::Deferred(Deferral::Challenge(c)) = run.round2(&attestor, &machine, answer.clone())
    else {
        panic!("the approved round must challenge the EK again")
    };
    let fresh: TpmChallenge = serde_json::from_slice(&c.payload).unwrap();
    assert_eq!(run.secret(&machine, &fresh).len(), 32, "for this EK and AK");
    assert!(run.kit.tx.uses().is_empty());
    // Someone without the TPM cannot activate it.
    let mut forged = run.answer(&machine, &fresh);
    forged.secret = vec![0; 32];
    assert_eq!(
        refused(run.round2(&attestor, &machine, forged)),
        reason::BAD_SECRET
    );
    let fresh_answer = run.answer(&machine, &fresh);
    let Outcome::Admitted(result) = run.round2(&attestor, &machine, fresh_answer.clone()) else {
        panic!()
    };
    assert_eq!(result.tenant_id.as_deref(), Some("acme"));
    assert_eq!(result.site_id.as_deref(), Some("lab"));
    assert_eq!(result.node_key_uri, Some(machine.ak_statement()));
    assert_eq!(result.bindings[0].value, machine.ek_sha256());
    assert_eq!(run.kit.tx.uses().len(), 1);
    // Once.
    assert_eq!(
        refused(run.round2(&attestor, &machine, fresh_answer)),
        JOIN_REQUEST_USED
    );
    assert_eq!(
        refused(run.round2(&attestor, &machine, answer)),
        JOIN_REQUEST_USED
    );
}

/// The AK's TPM name.
fn machine_ak_name(machine: &Machine) -> Vec<u8> {
    gatehouse_tpm::Public::parse(&machine.ak_public)
        .unwrap()
        .name
}

#[test]
fn a_round_two_answer_admits_once() {
    let machine = Machine::new();
    let attestor = config(&allow(&machine));
    let run = Run::new();
    let challenge = run.challenge(&attestor, &machine);
    let answer = run.answer(&machine, &challenge);
    assert!(matches!(
        run.round2(&attestor, &machine, answer.clone()),
        Outcome::Admitted(_)
    ));
    let secret = run.secret(&machine, &challenge);
    assert_eq!(
        run.kit.tx.uses(),
        [(
            format!("challenge:{}", hex::encode(sha256(&secret))),
            NOW + CHALLENGE_TTL_MS
        )]
    );
    // The same answer with the same CSR, replayed while the state lives.
    assert_eq!(
        refused(run.round2(&attestor, &machine, answer.clone())),
        CHALLENGE_REPLAYED
    );
    // A new challenge answers again (a reboot re-joins).
    let again = run.challenge(&attestor, &machine);
    assert!(matches!(
        run.round2(&attestor, &machine, run.answer(&machine, &again)),
        Outcome::Admitted(_)
    ));
}

#[test]
fn a_denied_request_refuses() {
    let machine = Machine::new();
    let attestor = config("");
    let run = Run::new();
    let challenge = run.challenge(&attestor, &machine);
    let answer = run.answer(&machine, &challenge);
    let Outcome::Deferred(Deferral::Approval(approval)) =
        run.round2(&attestor, &machine, answer.clone())
    else {
        panic!()
    };
    run.kit.tx.deny(&approval.request_id);
    assert_eq!(
        refused(run.round2(&attestor, &machine, answer)),
        JOIN_REQUEST_DENIED
    );
}

#[test]
fn enrollment_refuse_refuses_an_unknown_ek() {
    let machine = Machine::new();
    let attestor = config(r#""enrollment":"refuse""#);
    let run = Run::new();
    let challenge = run.challenge(&attestor, &machine);
    assert_eq!(
        refused(run.round2(&attestor, &machine, run.answer(&machine, &challenge))),
        UNKNOWN_EK
    );
}

#[test]
fn a_high_range_ecc_p384_ek_joins_and_is_keyed_by_its_sha256() {
    // Template H-3: nameAlg SHA-384, so its name is not 000b ‖ sha256(public).
    let mut machine = Machine::new();
    machine.ek_public = ecc_p384_ek_public(&[0x11; 48], &[0x12; 48]);
    let attestor = config(&allow(&machine));
    let run = Run::new();
    let challenge = run.challenge(&attestor, &machine);
    let outcome = run.round2(&attestor, &machine, run.answer(&machine, &challenge));
    let Outcome::Admitted(result) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(
        result.bindings[0].value,
        hex::encode(sha2::Sha256::digest(&machine.ek_public))
    );
    // TPM2B-wrapped, the same EK would have a second hash: refused.
    let mut e = machine.enrollment();
    let mut wrapped = u16::try_from(e.ek_public.len())
        .unwrap()
        .to_be_bytes()
        .to_vec();
    wrapped.extend(&e.ek_public);
    e.ek_public = wrapped;
    assert_eq!(
        refused(run.verify(&attestor, &request(&machine, &TpmEvidence::Enroll(e), 1))),
        EK_MALFORMED
    );
}

#[test]
fn round_one_refusals() {
    let machine = Machine::new();
    let attestor = config(&allow(&machine));
    let run = Run::new();
    let enroll = |edit: &dyn Fn(&mut TpmEnrollment)| {
        let mut e = machine.enrollment();
        edit(&mut e);
        refused(run.verify(&attestor, &request(&machine, &TpmEvidence::Enroll(e), 1)))
    };
    assert_eq!(
        enroll(&|e| e.ek_certificate = b"another".to_vec()),
        EK_UNTRUSTED
    );
    assert_eq!(enroll(&|e| e.ek_public.push(0)), EK_MALFORMED);
    // TPM2B-wrapped: the same EK would have two hashes.
    assert_eq!(
        enroll(&|e| {
            let mut w = (e.ek_public.len() as u16).to_be_bytes().to_vec();
            w.extend(&e.ek_public);
            e.ek_public = w;
        }),
        EK_MALFORMED
    );
    assert_eq!(
        enroll(&|e| e.ak_public = p256_public(&machine.ak, AK_ATTRIBUTES | attr::DECRYPT, true)),
        super::AK_ATTRIBUTES
    );
    assert_eq!(
        enroll(&|e| e.ak_public = p256_public(&machine.ak, AK_ATTRIBUTES & !attr::FIXED_TPM, true)),
        super::AK_ATTRIBUTES
    );
    assert_eq!(enroll(&|e| e.ak_public = vec![1, 2, 3]), AK_MALFORMED);
    assert_eq!(enroll(&|e| e.v = 2), reason::MALFORMED_EVIDENCE);
    // Another root configured: untrusted.
    let other = Tpm::configure(r#"{"ekRoots":["b3RoZXI="]}"#).unwrap();
    assert_eq!(
        refused(run.verify(
            &other,
            &request(&machine, &TpmEvidence::Enroll(machine.enrollment()), 1)
        )),
        EK_UNTRUSTED
    );
    // A token, a ramdisk, garbage.
    let mut with_token = request(&machine, &TpmEvidence::Enroll(machine.enrollment()), 1);
    with_token.token = Some(OpenedToken {
        id: "t".into(),
        secret: vec![1],
    });
    assert_eq!(
        refused(run.verify(&attestor, &with_token)),
        UNEXPECTED_TOKEN
    );
    let mut ramdisk = request(&machine, &TpmEvidence::Enroll(machine.enrollment()), 1);
    ramdisk.role = JoinRole::Ramdisk;
    assert_eq!(refused(run.verify(&attestor, &ramdisk)), reason::WRONG_ROLE);
    let mut garbage = request(&machine, &TpmEvidence::Enroll(machine.enrollment()), 1);
    garbage.attestation = b"{".to_vec();
    assert_eq!(
        refused(run.verify(&attestor, &garbage)),
        reason::MALFORMED_EVIDENCE
    );
}

#[test]
fn round_two_refusals_each_with_its_reason() {
    let machine = Machine::new();
    let attestor = config(&allow(&machine));
    let run = Run::new();
    let challenge = run.challenge(&attestor, &machine);
    let good = run.answer(&machine, &challenge);
    let csr = CSR_SHA256.with(Clone::clone);
    let nonce = sha256(&quote_nonce_input(&good.secret, &csr));
    let check = |answer: TpmAnswer, expected: &str| {
        assert_eq!(refused(run.round2(&attestor, &machine, answer)), expected);
    };

    // The wrong secret.
    let mut wrong = good.clone();
    wrong.secret[0] ^= 1;
    check(wrong, reason::BAD_SECRET);
    // State from elsewhere, or tampered.
    let mut state = good.clone();
    state.state = b"junk".to_vec();
    check(state, CHALLENGE_STATE);
    // A flipped quote byte (the clock: still parses).
    let mut flipped = good.clone();
    flipped.quote.attest[4 + 2 + 2 + 4 + 2 + 32 + 3] ^= 1;
    check(flipped, QUOTE_SIGNATURE);
    // A quote over another nonce.
    check(
        machine.answer_with(&challenge, good.secret.clone(), &[0; 32], &csr),
        QUOTE_NONCE,
    );
    // A PCR value not matching the digest, and one the quote does not cover.
    let mut pcr = good.clone();
    pcr.quote.pcrs[1].digest[0] ^= 1;
    check(pcr, PCR_MISMATCH);
    let mut extra = good.clone();
    extra.quote.pcrs.push(PcrValue {
        hash_alg: 0x000b,
        index: 9,
        digest: vec![0; 32],
    });
    check(extra, PCR_MISMATCH);
    // The node key: signature, nonce, name, attributes, not the CSR's, absent, malformed.
    let mut sig = good.clone();
    let nk = sig.node_key.as_mut().unwrap();
    nk.signature = tpm_sign(&SigningKey::from_slice(&[9; 32]).unwrap(), &nk.certify_info);
    check(sig, reason::NODE_KEY_SIGNATURE);
    check(
        machine.answer_with(&challenge, good.secret.clone(), &nonce, &[0; 32]),
        reason::NODE_KEY_NONCE,
    );
    let mut name = good.clone();
    name.node_key.as_mut().unwrap().public = p256_public(
        &SigningKey::from_slice(&[5; 32]).unwrap(),
        NODE_KEY_ATTRIBUTES,
        false,
    );
    check(name, reason::NODE_KEY_NAME);
    for attributes in [
        NODE_KEY_ATTRIBUTES | attr::DECRYPT,
        NODE_KEY_ATTRIBUTES & !attr::FIXED_TPM,
    ] {
        let public = p256_public(&machine.node_key, attributes, false);
        let name = gatehouse_tpm::Public::parse(&public).unwrap().name;
        let info = certify_attest(&csr, &name);
        let mut answer = good.clone();
        answer.node_key = Some(TpmCertifiedKey {
            public,
            signature: tpm_sign(&machine.ak, &info),
            certify_info: info,
        });
        check(answer, reason::NODE_KEY_ATTRIBUTES);
    }
    // Another key than the CSR's, properly certified.
    let other = SigningKey::from_slice(&[6; 32]).unwrap();
    let public = p256_public(&other, NODE_KEY_ATTRIBUTES, false);
    let info = certify_attest(&csr, &gatehouse_tpm::Public::parse(&public).unwrap().name);
    let mut not_csr = good.clone();
    not_csr.node_key = Some(TpmCertifiedKey {
        public,
        signature: tpm_sign(&machine.ak, &info),
        certify_info: info,
    });
    check(not_csr, reason::NODE_KEY_NOT_CSR);
    let mut absent = good.clone();
    absent.node_key = None;
    check(absent, reason::NODE_KEY_NOT_CERTIFIED);
    let mut malformed = good.clone();
    malformed
        .node_key
        .as_mut()
        .unwrap()
        .certify_info
        .truncate(10);
    check(malformed, reason::NODE_KEY_MALFORMED);

    // Expired: the same good answer after the challenge's not-after.
    run.kit.tx.set_now(NOW + CHALLENGE_TTL_MS + 1);
    check(good.clone(), CHALLENGE_EXPIRED);
    // And the good answer, in time, is admitted (nothing above changed the state).
    run.kit.tx.set_now(NOW + 1);
    assert!(matches!(
        run.round2(&attestor, &machine, good),
        Outcome::Admitted(_)
    ));
}

#[test]
fn an_answer_for_another_csr_does_not_open() {
    let machine = Machine::new();
    let attestor = config(&allow(&machine));
    let run = Run::new();
    let challenge = run.challenge(&attestor, &machine);
    let mut req = request(
        &machine,
        &TpmEvidence::Answer(run.answer(&machine, &challenge)),
        2,
    );
    req.csr_sha256 = sha256(b"another CSR");
    assert_eq!(refused(run.verify(&attestor, &req)), CHALLENGE_STATE);
}

#[test]
fn pcr_policy_and_uncertified_keys() {
    let machine = Machine::new();
    let run = Run::new();
    let good_policy = format!(
        r#"{},"pcrPolicy":[{{"hashAlg":"sha256","index":7,"digest":"{}"}}]"#,
        allow(&machine),
        hex::encode([8u8; 32])
    );
    let attestor = config(&good_policy);
    let challenge = run.challenge(&attestor, &machine);
    assert!(matches!(
        run.round2(&attestor, &machine, run.answer(&machine, &challenge)),
        Outcome::Admitted(_)
    ));
    for bad in [
        format!(
            r#""hashAlg":"sha256","index":7,"digest":"{}""#,
            hex::encode([9u8; 32])
        ),
        // A PCR the quote does not cover.
        format!(
            r#""hashAlg":"sha256","index":3,"digest":"{}""#,
            hex::encode([4u8; 32])
        ),
    ] {
        let attestor = config(&format!(r#"{},"pcrPolicy":[{{{bad}}}]"#, allow(&machine)));
        let challenge = run.challenge(&attestor, &machine);
        assert_eq!(
            refused(run.round2(&attestor, &machine, run.answer(&machine, &challenge))),
            PCR_POLICY
        );
    }
    // nodeKey any: an uncertified key joins unattested, with no statement.
    let attestor = config(&format!(r#"{},"nodeKey":"any""#, allow(&machine)));
    let challenge = run.challenge(&attestor, &machine);
    let mut answer = run.answer(&machine, &challenge);
    answer.node_key = None;
    let Outcome::Admitted(result) = run.round2(&attestor, &machine, answer) else {
        panic!()
    };
    assert_eq!(result.node_key, NodeKeyAttestation::Unattested);
    assert_eq!(result.node_key_uri, None);
}

#[test]
fn configuration_is_strict() {
    let root = base64::engine::general_purpose::STANDARD.encode(root_der());
    let pem = format!(
        "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
        root
    );
    let parsed = Tpm::configure(&serde_json::json!({ "ekRoots": [pem] }).to_string()).unwrap();
    assert_eq!(parsed.config.ek_roots, vec![root_der()]);
    assert_eq!(parsed.config.node_key, NodeKeyMode::Certified);
    assert_eq!(parsed.config.enrollment, EnrollmentMode::Approval);
    // Unconfigured, it loads and trusts no EK.
    let unconfigured = Tpm::configure("{}").unwrap();
    assert!(unconfigured.config.ek_roots.is_empty());
    let machine = Machine::new();
    let run = Run::new();
    assert_eq!(
        refused(run.verify(
            &unconfigured,
            &request(&machine, &TpmEvidence::Enroll(machine.enrollment()), 1)
        )),
        EK_UNTRUSTED
    );
    for bad in [
        "[]".to_owned(),
        r#"{"ekRoots":["%%%"]}"#.to_owned(),
        format!(r#"{{"ekRoots":["{root}"],"extra":1}}"#),
        format!(r#"{{"ekRoots":["{root}"],"nodeKey":"maybe"}}"#),
        format!(r#"{{"ekRoots":["{root}"],"enrollment":"open"}}"#),
        format!(r#"{{"ekRoots":["{root}"],"allow":[{{"ekSha256":"AB","tenantId":"t"}}]}}"#),
        format!(
            r#"{{"ekRoots":["{root}"],"pcrPolicy":[{{"hashAlg":"md5","index":1,"digest":"00"}}]}}"#
        ),
        format!(
            r#"{{"ekRoots":["{root}"],"pcrPolicy":[{{"hashAlg":"sha256","index":1,"digest":"00"}}]}}"#
        ),
    ] {
        assert!(Tpm::configure(&bad).is_err(), "{bad}");
    }
}
