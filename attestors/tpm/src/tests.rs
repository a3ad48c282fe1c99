//! The tpm attestor against an in-memory transaction, a software TPM (P-256 AK and node key
//! from RustCrypto, structures marshalled per Part 2) and a fake host whose `tpm_*` functions
//! are `gatehouse-tpm`'s own checks: both rounds, every placement and every reason code.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;

use base64::Engine as _;
use gatehouse_proto::tpm::{
    PcrValue, TpmAnswer, TpmCertifiedKey, TpmChallenge, TpmEnrollment, TpmEvidence, TpmQuote,
    ak_statement, quote_nonce_input,
};
use gatehouse_sdk::{
    Attestor, Context, Crypto, CryptoError, Deferral, HardwareClaims, Inventory, JoinRequest,
    JoinRequestRow, JoinRequestState, JoinRole, Lease, Node, NodeCert, NodeKeyAttestation,
    OpenedToken, Outcome, SignatureScheme, TimestampMs, Token, TpmCredential, TpmError,
    TpmPcrValue, TpmPublicInfo, Tx, TxError, UseError, VerifiedChain, Workflow, reason,
};
use gatehouse_tpm::marshal::{
    AK_ATTRIBUTES, NODE_KEY_ATTRIBUTES, certify_attest, ecc_p256_public, ecc_p384_ek_public,
    ecdsa_sha256_signature, quote_attest, rsa_ek_public,
};
use gatehouse_tpm::{HashAlg, RustCryptoVerifier, attr};
use p256::ecdsa::signature::Signer as _;
use p256::ecdsa::{Signature, SigningKey};
use p256::pkcs8::EncodePublicKey as _;
use sha2::Digest as _;

use super::*;

const NOW: TimestampMs = 1_790_000_000_000;
const EK_CERT: &[u8] = b"the EK certificate";
const ROOT_DER: &[u8] = b"the manufacturer root";

fn sha256(data: &[u8]) -> Vec<u8> {
    sha2::Sha256::digest(data).to_vec()
}

/// The `nodes`, `node_bindings`, `join_requests` and key/value tables of one transaction.
#[derive(Default)]
struct FakeTx {
    now: Cell<TimestampMs>,
    nodes: RefCell<HashMap<String, Node>>,
    bindings: RefCell<HashMap<(String, String), String>>,
    requests: RefCell<HashMap<String, JoinRequestRow>>,
    /// Details each request was opened with.
    details: RefCell<HashMap<String, String>>,
    kv: RefCell<HashMap<String, Vec<u8>>>,
    /// The single-use ledger: subject to expiry.
    uses: RefCell<HashMap<String, TimestampMs>>,
}

impl FakeTx {
    fn new() -> Self {
        let tx = FakeTx::default();
        tx.now.set(NOW);
        tx
    }
}

impl Tx for FakeTx {
    fn now(&self) -> TimestampMs {
        self.now.get()
    }
    fn lock_token(&self, _: &str) -> Result<Option<Token>, TxError> {
        unimplemented!("tpm locks no token")
    }
    fn consume_token(&self, _: &str) -> Result<u32, TxError> {
        unimplemented!("tpm spends no token")
    }
    fn node(&self, id: &str) -> Result<Option<Node>, TxError> {
        Ok(self.nodes.borrow().get(id).cloned())
    }
    fn node_cert(&self, _: &[u8]) -> Result<Option<NodeCert>, TxError> {
        unimplemented!("tpm reads no certificate")
    }
    fn bound_node(&self, kind: &str, value: &str) -> Result<Option<String>, TxError> {
        Ok(self
            .bindings
            .borrow()
            .get(&(kind.to_owned(), value.to_owned()))
            .cloned())
    }
    fn lease(&self, _: &str) -> Result<Option<Lease>, TxError> {
        unimplemented!()
    }
    fn newest_inventory(&self, _: &str) -> Result<Option<Inventory>, TxError> {
        unimplemented!()
    }
    fn token_workflow(&self, _: &str) -> Result<Option<Workflow>, TxError> {
        unimplemented!()
    }
    fn record_use(&self, subject: &str, expires_at: TimestampMs) -> Result<(), UseError> {
        let mut uses = self.uses.borrow_mut();
        if uses
            .get(subject)
            .is_some_and(|until| *until > self.now.get())
        {
            return Err(UseError::Reused);
        }
        uses.insert(subject.to_owned(), expires_at);
        Ok(())
    }
    fn open_join_request(&self, subject: &str, details: &str) -> Result<JoinRequestRow, TxError> {
        let mut requests = self.requests.borrow_mut();
        let id = format!("jr_{}", requests.len() + 1);
        let row = JoinRequestRow {
            id: id.clone(),
            subject: subject.to_owned(),
            csr_sha256: CSR_SHA256.with(Clone::clone),
            state: JoinRequestState::Pending,
            tenant_id: None,
            pool_id: None,
            site_id: None,
        };
        self.details
            .borrow_mut()
            .insert(id.clone(), details.to_owned());
        requests.insert(id, row.clone());
        Ok(row)
    }
    fn join_request(&self, id: &str) -> Result<Option<JoinRequestRow>, TxError> {
        Ok(self.requests.borrow().get(id).cloned())
    }
    fn consume_join_request(&self, id: &str) -> Result<(), TxError> {
        let mut requests = self.requests.borrow_mut();
        let row = requests
            .get_mut(id)
            .ok_or_else(|| TxError::Invalid("no such request".into()))?;
        if row.state != JoinRequestState::Approved {
            return Err(TxError::Invalid("not approved".into()));
        }
        row.state = JoinRequestState::Used;
        Ok(())
    }
    fn kv_get(&self, key: &str) -> Result<Option<Vec<u8>>, TxError> {
        Ok(self.kv.borrow().get(key).cloned())
    }
    fn kv_put(&self, key: &str, value: &[u8]) -> Result<(), TxError> {
        self.kv.borrow_mut().insert(key.to_owned(), value.to_vec());
        Ok(())
    }
    fn kv_delete(&self, key: &str) -> Result<(), TxError> {
        self.kv.borrow_mut().remove(key);
        Ok(())
    }
}

thread_local! {
    /// The CSR the fake transaction opens join requests for.
    static CSR_SHA256: Vec<u8> = sha256(b"the CSR");
}

/// The host: SHA-256, sealing that checks binding and expiry, and the `tpm_*` functions as
/// `gatehouse-tpm` computes them (RustCrypto verifier). MakeCredential records the secret and
/// "encrypts" it by XOR, so the test's software TPM can activate it; the EK chain is trusted
/// when the certificate and a root are the test's.
#[derive(Default)]
struct FakeCrypto {
    now: Cell<TimestampMs>,
    secret: RefCell<Vec<u8>>,
}

fn info(p: gatehouse_tpm::Public) -> TpmPublicInfo {
    TpmPublicInfo {
        name: p.name,
        name_alg: p.name_alg.id(),
        object_attributes: p.attributes,
        spki: p.spki,
    }
}

fn wit(e: gatehouse_tpm::TpmError) -> TpmError {
    use gatehouse_tpm::TpmError as E;
    match e {
        E::BadSignature => TpmError::BadSignature,
        E::WrongType => TpmError::WrongType,
        E::WrongNonce => TpmError::WrongNonce,
        E::PcrMismatch => TpmError::PcrMismatch,
        E::WrongName => TpmError::WrongName,
        E::Attributes(a) => TpmError::Attributes(a.into()),
        E::Unsupported(a) => TpmError::Unsupported(a.into()),
        other => TpmError::Malformed(other.to_string()),
    }
}

impl Crypto for FakeCrypto {
    fn sha256(&self, data: &[u8]) -> Vec<u8> {
        sha256(data)
    }
    fn verify_signature(
        &self,
        _: SignatureScheme,
        _: &[u8],
        _: &[u8],
        _: &[u8],
    ) -> Result<(), CryptoError> {
        unimplemented!("tpm verifies through the tpm functions")
    }
    fn verify_chain(
        &self,
        _: &[Vec<u8>],
        _: &[Vec<u8>],
        _: TimestampMs,
    ) -> Result<VerifiedChain, CryptoError> {
        unimplemented!("tpm verifies the EK through tpm_verify_ek")
    }
    fn seal_state(&self, plaintext: &[u8], binding: &[u8]) -> Vec<u8> {
        self.seal_state_until(plaintext, binding, i64::MAX)
    }
    fn seal_state_until(
        &self,
        plaintext: &[u8],
        binding: &[u8],
        not_after: TimestampMs,
    ) -> Vec<u8> {
        let sealed = serde_json::json!({
            "p": hex::encode(plaintext),
            "b": hex::encode(binding),
            "n": not_after,
        });
        sealed.to_string().into_bytes()
    }
    fn open_state(&self, sealed: &[u8], binding: &[u8]) -> Result<Vec<u8>, CryptoError> {
        let v: serde_json::Value =
            serde_json::from_slice(sealed).map_err(|_| CryptoError::Unsealable)?;
        if v["b"] != hex::encode(binding) {
            return Err(CryptoError::Unsealable);
        }
        if v["n"].as_i64().unwrap() < self.now.get() {
            return Err(CryptoError::Expired);
        }
        Ok(hex::decode(v["p"].as_str().unwrap()).unwrap())
    }
    fn tpm_parse_public(&self, public: &[u8]) -> Result<TpmPublicInfo, TpmError> {
        gatehouse_tpm::Public::parse(public).map(info).map_err(wit)
    }
    fn tpm_check_ak(&self, public: &[u8]) -> Result<TpmPublicInfo, TpmError> {
        gatehouse_tpm::check_ak(public).map(info).map_err(wit)
    }
    fn tpm_make_credential(
        &self,
        ek_public: &[u8],
        ak_name: &[u8],
        secret: &[u8],
    ) -> Result<TpmCredential, TpmError> {
        gatehouse_tpm::Public::parse(ek_public).map_err(wit)?;
        *self.secret.borrow_mut() = secret.to_vec();
        Ok(TpmCredential {
            credential_blob: secret.iter().map(|b| b ^ 0xaa).collect(),
            encrypted_secret: ak_name.to_vec(),
        })
    }
    fn tpm_verify_quote(
        &self,
        ak_public: &[u8],
        quote: &[u8],
        signature: &[u8],
        pcrs: &[TpmPcrValue],
        nonce: &[u8],
    ) -> Result<Vec<TpmPcrValue>, TpmError> {
        let pcrs: Vec<gatehouse_tpm::PcrValue> = pcrs
            .iter()
            .map(|p| gatehouse_tpm::PcrValue {
                hash_alg: p.hash_alg,
                index: p.index,
                digest: p.digest.clone(),
            })
            .collect();
        gatehouse_tpm::verify_quote(
            &RustCryptoVerifier,
            ak_public,
            quote,
            signature,
            &pcrs,
            nonce,
        )
        .map(|v| {
            v.into_iter()
                .map(|p| TpmPcrValue {
                    hash_alg: p.hash_alg,
                    index: p.index,
                    digest: p.digest,
                })
                .collect()
        })
        .map_err(wit)
    }
    fn tpm_verify_certify(
        &self,
        ak_public: &[u8],
        certify_info: &[u8],
        signature: &[u8],
        key_public: &[u8],
        nonce: &[u8],
    ) -> Result<TpmPublicInfo, TpmError> {
        gatehouse_tpm::verify_certify(
            &RustCryptoVerifier,
            ak_public,
            certify_info,
            signature,
            key_public,
            nonce,
        )
        .map(info)
        .map_err(wit)
    }
    fn tpm_verify_ek(
        &self,
        ek_public: &[u8],
        ek_certificate: &[u8],
        _: &[Vec<u8>],
        roots: &[Vec<u8>],
        _: TimestampMs,
    ) -> Result<TpmPublicInfo, TpmError> {
        let ek = gatehouse_tpm::Public::parse(ek_public).map_err(wit)?;
        if ek_certificate != EK_CERT || !roots.iter().any(|r| r == ROOT_DER) {
            return Err(TpmError::Untrusted("not the test's chain".into()));
        }
        Ok(info(ek))
    }
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
            ek_certificate: EK_CERT.to_vec(),
            ek_chain: vec![],
            ak_public: self.ak_public.clone(),
        }
    }

    /// The answer to `challenge`: activate (undo the fake's XOR), quote, certify the node key.
    fn answer(&self, challenge: &TpmChallenge) -> TpmAnswer {
        let secret: Vec<u8> = challenge.credential_blob.iter().map(|b| b ^ 0xaa).collect();
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
    let root = base64::engine::general_purpose::STANDARD.encode(ROOT_DER);
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
    tx: FakeTx,
    crypto: FakeCrypto,
}

impl Run {
    fn new() -> Self {
        let crypto = FakeCrypto::default();
        crypto.now.set(NOW);
        Run {
            tx: FakeTx::new(),
            crypto,
        }
    }

    fn verify(&self, attestor: &Tpm, request: &JoinRequest) -> Outcome {
        let cx = Context {
            tx: &self.tx,
            crypto: &self.crypto,
        };
        attestor.verify(&cx, request)
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
    assert_eq!(run.crypto.secret.borrow().len(), 32);
    let outcome = run.round2(&attestor, &machine, machine.answer(&challenge));
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
    assert!(run.tx.kv.borrow().is_empty());
    assert!(run.tx.requests.borrow().is_empty());
}

#[test]
fn a_bound_ek_reclaims_its_node() {
    let machine = Machine::new();
    let attestor = config("");
    let run = Run::new();
    run.tx
        .bindings
        .borrow_mut()
        .insert(("tpm-ek".into(), machine.ek_sha256()), "node_7".into());
    run.tx.nodes.borrow_mut().insert(
        "node_7".into(),
        Node {
            id: "node_7".into(),
            tenant_id: "acme".into(),
            pool_id: Some("p".into()),
            site_id: None,
            role: JoinRole::Node,
            retired: false,
            identity_generation: 2,
        },
    );
    let challenge = run.challenge(&attestor, &machine);
    let Outcome::Admitted(result) = run.round2(&attestor, &machine, machine.answer(&challenge))
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
    let answer = machine.answer(&challenge);
    let outcome = run.round2(&attestor, &machine, answer.clone());
    let Outcome::Deferred(Deferral::Approval(approval)) = outcome else {
        panic!("{outcome:?}")
    };
    let row = run.tx.requests.borrow()[&approval.request_id].clone();
    assert_eq!(row.subject, format!("ek:{}", machine.ek_sha256()));
    let details = run.tx.details.borrow()[&approval.request_id].clone();
    assert!(details.contains("\"nodeKey\":\"tpm\""), "{details}");
    assert!(details.contains(&format!("\"ekSha256\":\"{}\"", machine.ek_sha256())));
    // Pending: deferred again, even after the challenge expired; nothing recorded.
    run.crypto.now.set(NOW + CHALLENGE_TTL_MS + 1);
    run.tx.now.set(NOW + CHALLENGE_TTL_MS + 1);
    assert!(matches!(
        run.round2(&attestor, &machine, answer.clone()),
        Outcome::Deferred(Deferral::Approval(_))
    ));
    assert!(run.tx.uses.borrow().is_empty());
    // Approved into a placement.
    {
        let mut requests = run.tx.requests.borrow_mut();
        let row = requests.get_mut(&approval.request_id).unwrap();
        row.state = JoinRequestState::Approved;
        row.tenant_id = Some("acme".into());
        row.site_id = Some("lab".into());
    }
    // The approval is not the CSR's to take: the answer sent while waiting (or a captured
    // one) is answered with a fresh challenge for the approved EK, not an admission.
    let Outcome::Deferred(Deferral::Challenge(c)) = run.round2(&attestor, &machine, answer.clone())
    else {
        panic!("the approved round must challenge the EK again")
    };
    let fresh: TpmChallenge = serde_json::from_slice(&c.payload).unwrap();
    assert_eq!(fresh.encrypted_secret, machine_ak_name(&machine));
    assert!(run.tx.uses.borrow().is_empty());
    // Someone without the TPM cannot activate it.
    let mut forged = machine.answer(&fresh);
    forged.secret = vec![0; 32];
    assert_eq!(
        refused(run.round2(&attestor, &machine, forged)),
        reason::BAD_SECRET
    );
    let fresh_answer = machine.answer(&fresh);
    let Outcome::Admitted(result) = run.round2(&attestor, &machine, fresh_answer.clone()) else {
        panic!()
    };
    assert_eq!(result.tenant_id.as_deref(), Some("acme"));
    assert_eq!(result.site_id.as_deref(), Some("lab"));
    assert_eq!(result.node_key_uri, Some(machine.ak_statement()));
    assert_eq!(result.bindings[0].value, machine.ek_sha256());
    assert_eq!(run.tx.uses.borrow().len(), 1);
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

/// The AK's TPM name (the fake's MakeCredential puts it in `encrypted_secret`).
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
    let answer = machine.answer(&challenge);
    assert!(matches!(
        run.round2(&attestor, &machine, answer.clone()),
        Outcome::Admitted(_)
    ));
    let ledger: Vec<String> = run.tx.uses.borrow().keys().cloned().collect();
    let secret: Vec<u8> = challenge.credential_blob.iter().map(|b| b ^ 0xaa).collect();
    assert_eq!(
        ledger,
        [format!("challenge:{}", hex::encode(sha256(&secret)))]
    );
    assert_eq!(run.tx.uses.borrow()[&ledger[0]], NOW + CHALLENGE_TTL_MS);
    // The same answer with the same CSR, replayed while the state lives.
    assert_eq!(
        refused(run.round2(&attestor, &machine, answer.clone())),
        CHALLENGE_REPLAYED
    );
    // A new challenge answers again (a reboot re-joins).
    let again = run.challenge(&attestor, &machine);
    assert!(matches!(
        run.round2(&attestor, &machine, machine.answer(&again)),
        Outcome::Admitted(_)
    ));
}

#[test]
fn a_denied_request_refuses() {
    let machine = Machine::new();
    let attestor = config("");
    let run = Run::new();
    let challenge = run.challenge(&attestor, &machine);
    let answer = machine.answer(&challenge);
    let Outcome::Deferred(Deferral::Approval(approval)) =
        run.round2(&attestor, &machine, answer.clone())
    else {
        panic!()
    };
    run.tx
        .requests
        .borrow_mut()
        .get_mut(&approval.request_id)
        .unwrap()
        .state = JoinRequestState::Denied;
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
        refused(run.round2(&attestor, &machine, machine.answer(&challenge))),
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
    let outcome = run.round2(&attestor, &machine, machine.answer(&challenge));
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
    let good = machine.answer(&challenge);
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
    run.crypto.now.set(NOW + CHALLENGE_TTL_MS + 1);
    check(good.clone(), CHALLENGE_EXPIRED);
    // And the good answer, in time, is admitted (nothing above changed the state).
    run.crypto.now.set(NOW + 1);
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
        &TpmEvidence::Answer(machine.answer(&challenge)),
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
        run.round2(&attestor, &machine, machine.answer(&challenge)),
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
            refused(run.round2(&attestor, &machine, machine.answer(&challenge))),
            PCR_POLICY
        );
    }
    // nodeKey any: an uncertified key joins unattested, with no statement.
    let attestor = config(&format!(r#"{},"nodeKey":"any""#, allow(&machine)));
    let challenge = run.challenge(&attestor, &machine);
    let mut answer = machine.answer(&challenge);
    answer.node_key = None;
    let Outcome::Admitted(result) = run.round2(&attestor, &machine, answer) else {
        panic!()
    };
    assert_eq!(result.node_key, NodeKeyAttestation::Unattested);
    assert_eq!(result.node_key_uri, None);
}

#[test]
fn configuration_is_strict() {
    let root = base64::engine::general_purpose::STANDARD.encode(ROOT_DER);
    let pem = format!(
        "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
        root
    );
    let parsed = Tpm::configure(&serde_json::json!({ "ekRoots": [pem] }).to_string()).unwrap();
    assert_eq!(parsed.config.ek_roots, vec![ROOT_DER.to_vec()]);
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
