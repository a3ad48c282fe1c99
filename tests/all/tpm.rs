//! The tpm attestor end to end against swtpm (libtpms, a full TPM 2.0) with an EK certificate
//! from a local CA: two-round joins whose node key is made and certified in the TPM, renewals
//! that must prove the next key with the same AK, every reason code produced by tampering with
//! a real TPM's answer, and the recovery paths (TPM2_Clear, a new TPM).

use std::time::{Duration, Instant};

use gatehouse_agent::tpm::swtpm::{LocalCa, Swtpm};
use gatehouse_agent::tpm::{
    EkSelection, EkTemplate, OddKey, Tpm, TpmNodeKey, TpmProducer, tpm_name,
};
use gatehouse_agent::{
    Action, EvidenceProducer, JoinClient, JoinError, JoinOptions, Joined, Lifecycle, NodeKey,
    ProducerError, RenewClient, RenewError, RenewPolicy, TPM_CLEARED_HINT, doctor, join,
    load_identity_with, write_identity,
};
use gatehouse_proto::tpm::{TpmAnswer, TpmEvidence, ak_statement};
use gatehouse_proto::{Challenge, Role};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

use crate::common::{Backend, HostOptions, TestHost, backends};

/// A machine: a manufactured swtpm and a connection to it.
struct Machine {
    _swtpm: Swtpm,
    tpm: Tpm,
    /// The EK the agent proves.
    ek: EkSelection,
    /// The public area of that EK.
    ek_public: Vec<u8>,
    ek_sha256: String,
}

impl Machine {
    fn new(ca: &LocalCa) -> Self {
        Self::proving(ca, EkSelection::Auto)
    }

    /// A machine whose agent proves the EK `ek` selects. swtpm_setup makes the RSA-2048 (or,
    /// for an RSA-3072 EK, the RSA-3072) and the P-384 EK certificates; for a P-256 EK the
    /// certificate is provisioned here, as a manufacturer does.
    fn proving(ca: &LocalCa, ek: EkSelection) -> Self {
        let rsa_bits = match ek {
            EkSelection::Template(EkTemplate::Rsa3072) => 3072,
            _ => 2048,
        };
        let swtpm = Swtpm::start_with_rsa_bits(ca, rsa_bits).unwrap();
        if ek == EkSelection::Template(EkTemplate::EccP256) {
            swtpm.provision_ecc_p256_ek(ca).unwrap();
        }
        let tpm = swtpm.open().unwrap();
        let (enrollment, _) = tpm.enrollment_with(ek).unwrap();
        Self {
            _swtpm: swtpm,
            tpm,
            ek,
            ek_sha256: hex(&Sha256::digest(&enrollment.ek_public)),
            ek_public: enrollment.ek_public,
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The attestor's config: `ca`'s root, the machines in the allow list, `enrollment`.
fn config(ca: &LocalCa, allowed: &[&Machine], enrollment: &str) -> Value {
    let allow: Vec<Value> = allowed
        .iter()
        .map(|m| json!({ "ekSha256": m.ek_sha256, "tenantId": "root" }))
        .collect();
    json!({
        "ekRoots": [ca.root_pem().unwrap()],
        "allow": allow,
        "enrollment": enrollment,
    })
}

async fn host(backend: Backend, config: Value) -> TestHost {
    TestHost::start_with(HostOptions {
        attestor_config: vec![("tpm".into(), config)],
        // Round 2 verifies a quote and a certification natively, and round 1 MakeCredential.
        call_timeout_ms: 5_000,
        ..HostOptions::new(backend)
    })
    .await
}

fn options() -> JoinOptions {
    JoinOptions {
        max_retry_after: Duration::from_millis(100),
        ..JoinOptions::default()
    }
}

/// A tpm join with a new node key in `m`'s TPM, through `wrap` (the plain producer, or one
/// that tampers with its answer).
async fn join_with(
    host: &TestHost,
    ca: &LocalCa,
    m: &Machine,
    wrap: impl FnOnce(TpmProducer, &TpmNodeKey) -> Box<dyn EvidenceProducer>,
) -> Result<(Joined, NodeKey), JoinError> {
    let client = JoinClient::new(&host.url(), &host.trust)?;
    let node_key = TpmNodeKey::generate(&m.tpm).unwrap();
    let producer = TpmProducer::new(m.tpm.clone(), Some(node_key.clone()))
        .with_ek_chain(vec![ca.intermediate_der().unwrap()])
        .with_ek(m.ek);
    let mut producer = wrap(producer, &node_key);
    let key = NodeKey::Tpm(node_key);
    let joined = join(
        &client,
        &host.trust,
        producer.as_mut(),
        None,
        &key,
        &options(),
    )
    .await?;
    Ok((joined, key))
}

async fn join_tpm(
    host: &TestHost,
    ca: &LocalCa,
    m: &Machine,
) -> Result<(Joined, NodeKey), JoinError> {
    join_with(host, ca, m, |p, _| Box::new(p)).await
}

/// Changes a real answer before it is sent.
type Tamper = Box<dyn FnMut(&mut TpmProducer, &Challenge, &[u8], &mut TpmAnswer) + Send>;

struct Tampering {
    inner: TpmProducer,
    tamper: Tamper,
}

impl EvidenceProducer for Tampering {
    fn attestor(&self) -> &str {
        self.inner.attestor()
    }
    fn role(&self) -> Role {
        self.inner.role()
    }
    fn evidence(&mut self, csr: &[u8]) -> Result<Vec<u8>, ProducerError> {
        self.inner.evidence(csr)
    }
    fn answer(&mut self, c: &Challenge, csr: &[u8]) -> Result<Vec<u8>, ProducerError> {
        let mut a = answer_of(&self.inner.answer(c, csr)?);
        (self.tamper)(&mut self.inner, c, csr, &mut a);
        Ok(serde_json::to_vec(&TpmEvidence::Answer(a)).unwrap())
    }
}

fn answer_of(bytes: &[u8]) -> TpmAnswer {
    match serde_json::from_slice(bytes).unwrap() {
        TpmEvidence::Answer(a) => a,
        TpmEvidence::Enroll(_) => panic!("an answer"),
    }
}

/// The same answer for another CSR: a real quote and certification over other nonces.
fn answer_for_other_csr(inner: &mut TpmProducer, c: &Challenge) -> TpmAnswer {
    answer_of(&inner.answer(c, b"another CSR").unwrap())
}

fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

/// The URI SANs of a certificate, in order.
fn uris(der: &[u8]) -> Vec<String> {
    let (_, cert) = X509Certificate::from_der(der).unwrap();
    cert.subject_alternative_name()
        .unwrap()
        .map(|san| {
            san.value
                .general_names
                .iter()
                .filter_map(|n| match n {
                    GeneralName::URI(u) => Some((*u).to_owned()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default()
}

async fn admin(
    host: &TestHost,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut req = host
        .http()
        .request(method, format!("{}{path}", host.url()))
        .bearer_auth(&host.admin_key);
    if let Some(body) = body {
        req = req.json(&body);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn generation(host: &TestHost, node: &str) -> Value {
    let (status, shown) = admin(host, Method::GET, &format!("/v1/admin/nodes/{node}"), None).await;
    assert_eq!(status, StatusCode::OK, "{shown}");
    shown["identityGeneration"].clone()
}

async fn renew_refusals(host: &TestHost) -> Vec<Option<String>> {
    host.events()
        .await
        .into_iter()
        .filter(|e| e.kind == "security.renew.refused")
        .map(|e| e.reason)
        .collect()
}

async fn a_certified_join_renews_only_with_key_attestation(backend: Backend) {
    let ca = LocalCa::new().unwrap();
    let m = Machine::new(&ca);
    let host = host(backend, config(&ca, &[&m], "refuse")).await;
    let (joined, key) = join_tpm(&host, &ca, &m).await.unwrap();
    assert_eq!((joined.rounds, joined.attestor.as_str()), (2, "tpm"));
    // The certificate: the SPIFFE ID, then the AK statement.
    let ak = m.tpm.ak_public().unwrap();
    let statement = ak_statement(&tpm_name(&ak)).unwrap();
    assert_eq!(
        uris(&joined.chain[0]),
        [joined.spiffe_id.clone(), statement.clone()]
    );
    let audits = host.audits().await;
    assert!(
        audits.iter().any(|a| a.node_key.as_deref() == Some("tpm")),
        "{backend:?}: {audits:?}"
    );

    // On disk, node.key holds only the record the TPM derives the key from.
    let dir = tempfile::tempdir().unwrap();
    write_identity(dir.path(), &key, &joined).unwrap();
    let record = std::fs::read_to_string(dir.path().join("node.key")).unwrap();
    assert!(
        record.starts_with("-----BEGIN BCD TPM NODE KEY-----"),
        "{record}"
    );
    let loaded = load_identity_with(dir.path(), Some(&m.tpm)).unwrap();
    assert!(loaded.key.in_tpm());
    assert!(doctor(dir.path(), Some(&m.tpm)).iter().all(|c| c.ok));

    // A renewal without the key attestation is refused (mTLS signed in the TPM works: the
    // host gets as far as the statement).
    let next = NodeKey::generate_in(&m.tpm).unwrap();
    let client = RenewClient::new(&host.url(), &host.trust, &loaded.key, &loaded.chain).unwrap();
    let err = client
        .renew(&host.trust, &joined.node_id, &next)
        .await
        .unwrap_err();
    assert!(matches!(err, RenewError::Denied), "{backend:?}: {err}");
    assert_eq!(renew_refusals(&host).await.len(), 1, "{backend:?}");

    // The agent's renewal: the next key made in the TPM and certified by the same AK.
    let lifecycle = Lifecycle::new(
        &host.url(),
        host.trust.clone(),
        dir.path().to_owned(),
        RenewPolicy::default(),
    )
    .with_tpm(m.tpm.clone());
    let renewed = lifecycle.attempt(Action::Renew, loaded).await.unwrap();
    assert_eq!(renewed.node_id, joined.node_id);
    let after = load_identity_with(dir.path(), Some(&m.tpm)).unwrap();
    assert!(after.key.in_tpm());
    assert_ne!(after.key.spki_der(), key.spki_der());
    assert_eq!(
        uris(&after.chain[0]),
        [joined.spiffe_id.clone(), statement.clone()]
    );
    assert_eq!(
        renew_refusals(&host).await.len(),
        1,
        "{backend:?}: no new refusal"
    );

    // And again from the renewed certificate.
    let again = lifecycle.attempt(Action::Renew, after).await.unwrap();
    assert_eq!(again.node_id, joined.node_id);

    // Another TPM's AK never renews this certificate: the agent refuses to send.
    let other = Machine::new(&ca);
    let loaded = load_identity_with(dir.path(), Some(&m.tpm)).unwrap();
    let stranger = Lifecycle::new(
        &host.url(),
        host.trust.clone(),
        dir.path().to_owned(),
        RenewPolicy::default(),
    )
    .with_tpm(other.tpm.clone());
    let err = stranger.attempt(Action::Renew, loaded).await.unwrap_err();
    assert!(err.to_string().contains("another TPM"), "{err}");
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpm_join_is_certified_and_renews_only_with_key_attestation() {
    for backend in backends() {
        a_certified_join_renews_only_with_key_attestation(backend).await;
    }
}

/// The ECC EKs (P-256, template L-2, and P-384, H-3) and the RSA-3072 EK (H-6) each join end
/// to end: the host's MakeCredential (ECDH and KDFe for ECC, OAEP-SHA-384 for RSA-3072,
/// SHA-384 and AES-256 for the high range) is undone by swtpm's TPM2_ActivateCredential, the
/// EK certificate verifies against the local CA, and the node is bound to that EK.
async fn every_ek_template_joins(backend: Backend, ca: &LocalCa, machines: &[Machine]) {
    let refs: Vec<&Machine> = machines.iter().collect();
    let host = host(backend, config(ca, &refs, "refuse")).await;
    let mut nodes = Vec::new();
    for m in machines {
        let (joined, _) = join_tpm(&host, ca, m)
            .await
            .unwrap_or_else(|e| panic!("{backend:?} {:?}: {e}", m.ek));
        assert_eq!(joined.rounds, 2, "{backend:?} {:?}", m.ek);
        nodes.push(joined.node_id);
    }
    nodes.dedup();
    assert_eq!(nodes.len(), machines.len(), "{backend:?}: one node per EK");
    let audits = host.audits().await;
    for m in machines {
        let subject = format!("ek:{}", m.ek_sha256);
        assert!(
            audits
                .iter()
                .any(|a| a.subject.as_deref() == Some(subject.as_str())),
            "{backend:?} {:?}: no admission for {subject}",
            m.ek
        );
    }
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpm_ecc_and_high_range_eks_join_end_to_end() {
    let ca = LocalCa::new().unwrap();
    let machines: Vec<Machine> = [
        EkTemplate::EccP256,
        EkTemplate::EccP384,
        EkTemplate::Rsa3072,
    ]
    .into_iter()
    .map(|t| Machine::proving(&ca, EkSelection::Template(t)))
    .collect();
    // What each EK is: its key and nameAlg, as the profile's template says.
    let kinds: Vec<(String, u16)> = machines
        .iter()
        .map(|m| {
            let p = gatehouse_tpm::Public::parse(&m.ek_public).unwrap();
            let key = match p.key {
                gatehouse_tpm::PublicKey::Rsa { modulus, .. } => {
                    format!("rsa{}", modulus.len() * 8)
                }
                gatehouse_tpm::PublicKey::Ecc { curve, .. } => format!("{curve:?}"),
                other => format!("{other:?}"),
            };
            (key, p.name_alg.id())
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("P256".to_owned(), 0x000b),
            ("P384".to_owned(), 0x000c),
            ("rsa3072".to_owned(), 0x000c)
        ]
    );
    // With every certificate present, auto keeps proving the RSA-2048 EK.
    let (auto, template) = machines[0].tpm.enrollment_with(EkSelection::Auto).unwrap();
    assert_eq!(template, EkTemplate::Rsa2048);
    assert_ne!(auto.ek_public, machines[0].ek_public);
    for backend in backends() {
        every_ek_template_joins(backend, &ca, &machines).await;
    }
}

/// Every tampering of a real answer, and the reason it must be refused with.
fn tamperings(m: &Machine) -> Vec<(&'static str, Tamper)> {
    let odd = |odd: OddKey| -> Tamper {
        let tpm = m.tpm.clone();
        Box::new(move |_, _, csr, a| {
            a.node_key = Some(tpm.certify_odd_key(odd, sha256(csr)).unwrap());
        })
    };
    vec![
        ("bad-secret", Box::new(|_, _, _, a| a.secret[0] ^= 1)),
        (
            "quote-signature",
            Box::new(|_, _, _, a| {
                let last = a.quote.attest.len() - 1;
                a.quote.attest[last] ^= 1;
            }),
        ),
        (
            "pcr-mismatch",
            Box::new(|_, _, _, a| a.quote.pcrs[0].digest[0] ^= 1),
        ),
        (
            "quote-nonce",
            Box::new(|p, c, _, a| a.quote = answer_for_other_csr(p, c).quote),
        ),
        (
            "node-key-malformed",
            Box::new(|_, _, _, a| {
                a.node_key.as_mut().unwrap().public.truncate(10);
            }),
        ),
        (
            "node-key-signature",
            Box::new(|_, _, _, a| {
                let info = &mut a.node_key.as_mut().unwrap().certify_info;
                let last = info.len() - 1;
                info[last] ^= 1;
            }),
        ),
        (
            "node-key-nonce",
            Box::new(|p, c, _, a| a.node_key = answer_for_other_csr(p, c).node_key),
        ),
        (
            "node-key-name",
            Box::new({
                let tpm = m.tpm.clone();
                move |_, _, _, a| {
                    let other = TpmNodeKey::generate(&tpm).unwrap();
                    a.node_key.as_mut().unwrap().public = other.public_area().to_vec();
                }
            }),
        ),
        ("node-key-attributes", odd(OddKey::Decrypt)),
        ("node-key-attributes", odd(OddKey::NotFixedTpm)),
        (
            "node-key-not-certified",
            Box::new(|_, _, _, a| a.node_key = None),
        ),
    ]
}

async fn each_tampered_answer_is_refused(backend: Backend) {
    let ca = LocalCa::new().unwrap();
    let m = Machine::new(&ca);
    let host = host(backend, config(&ca, &[&m], "refuse")).await;
    let mut expected = Vec::new();
    for (reason, tamper) in tamperings(&m) {
        let result = join_with(&host, &ca, &m, |inner, _| {
            Box::new(Tampering { inner, tamper })
        })
        .await;
        assert!(
            matches!(result, Err(JoinError::Denied)),
            "{backend:?} {reason}: {result:?}"
        );
        expected.push(reason.to_owned());
        assert_eq!(host.refusal_reasons().await, expected, "{backend:?}");
    }
    // A real certification of another key than the CSR's.
    let result = join_with(&host, &ca, &m, |_, _| {
        let other = TpmNodeKey::generate(&m.tpm).unwrap();
        Box::new(
            TpmProducer::new(m.tpm.clone(), Some(other))
                .with_ek_chain(vec![ca.intermediate_der().unwrap()]),
        )
    })
    .await;
    assert!(
        matches!(result, Err(JoinError::Denied)),
        "{backend:?}: {result:?}"
    );
    expected.push("node-key-not-csr".into());
    assert_eq!(host.refusal_reasons().await, expected, "{backend:?}");
    // Nothing was admitted: the untampered answer still joins as a new node.
    let (joined, _) = join_tpm(&host, &ca, &m).await.unwrap();
    assert!(joined.node_id.starts_with("node_"));
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpm_each_tampered_answer_is_refused_with_its_reason() {
    for backend in backends() {
        each_tampered_answer_is_refused(backend).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpm_an_ek_certificate_from_an_unknown_ca_is_refused() {
    for backend in backends() {
        let (ca, rogue_ca) = (LocalCa::new().unwrap(), LocalCa::new().unwrap());
        let known = Machine::new(&ca);
        let rogue = Machine::new(&rogue_ca);
        let host = host(backend, config(&ca, &[&known, &rogue], "refuse")).await;
        let result = join_tpm(&host, &rogue_ca, &rogue).await;
        assert!(
            matches!(result, Err(JoinError::Denied)),
            "{backend:?}: {result:?}"
        );
        assert_eq!(
            host.refusal_reasons().await,
            ["ek-untrusted"],
            "{backend:?}"
        );
        // An EK unknown to the allow list, from the right CA, with enrollment refused.
        let stranger = Machine::new(&ca);
        let result = join_tpm(&host, &ca, &stranger).await;
        assert!(
            matches!(result, Err(JoinError::Denied)),
            "{backend:?}: {result:?}"
        );
        assert_eq!(
            host.refusal_reasons().await,
            ["ek-untrusted", "unknown-ek"],
            "{backend:?}"
        );
        host.stop().await;
    }
}

/// Waits until `n` join requests are pending; their ids.
async fn pending_requests(host: &TestHost, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, list) = admin(
            host,
            Method::GET,
            "/v1/admin/join-requests?state=pending",
            None,
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{list}");
        let ids: Vec<String> = list
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_owned())
            .collect();
        if ids.len() >= n {
            return ids;
        }
        assert!(
            Instant::now() < deadline,
            "{} join requests pending",
            ids.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn approve(host: &TestHost, id: &str) {
    let (status, body) = admin(
        host,
        Method::POST,
        &format!("/v1/admin/join-requests/{id}/approve"),
        Some(json!({ "tenantId": "root" })),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

fn spawn_join(
    host: &TestHost,
    ca: &LocalCa,
    m: &Machine,
) -> tokio::task::JoinHandle<Result<Joined, JoinError>> {
    let (url, trust) = (host.url(), host.trust.clone());
    let tpm = m.tpm.clone();
    let chain = vec![ca.intermediate_der().unwrap()];
    tokio::spawn(async move {
        let client = JoinClient::new(&url, &trust)?;
        let node_key = TpmNodeKey::generate(&tpm).unwrap();
        let mut producer = TpmProducer::new(tpm, Some(node_key.clone())).with_ek_chain(chain);
        let key = NodeKey::Tpm(node_key);
        join(&client, &trust, &mut producer, None, &key, &options()).await
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpm_an_ek_bound_to_another_node_is_refused() {
    for backend in backends() {
        let ca = LocalCa::new().unwrap();
        let m = Machine::new(&ca);
        let host = host(backend, config(&ca, &[], "approval")).await;
        // The same TPM asks twice (two CSRs); an operator approves both requests.
        let first = spawn_join(&host, &ca, &m);
        pending_requests(&host, 1).await;
        let second = spawn_join(&host, &ca, &m);
        let ids = pending_requests(&host, 2).await;
        approve(&host, &ids[0]).await;
        approve(&host, &ids[1]).await;
        let (a, b) = (first.await.unwrap(), second.await.unwrap());
        // One is admitted and binds the EK; the other may never admit a second node.
        let admitted: Vec<&Joined> = [&a, &b]
            .into_iter()
            .filter_map(|r| r.as_ref().ok())
            .collect();
        assert_eq!(admitted.len(), 1, "{backend:?}: {a:?} {b:?}");
        assert!(
            [&a, &b].iter().any(|r| matches!(r, Err(JoinError::Denied))),
            "{backend:?}"
        );
        assert_eq!(
            host.refusal_reasons().await,
            ["bound-elsewhere"],
            "{backend:?}"
        );
        // The bound EK reclaims its node.
        let (again, _) = join_tpm(&host, &ca, &m).await.unwrap();
        assert_eq!(again.node_id, admitted[0].node_id);
        host.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpm_after_tpm2_clear_the_same_ek_reclaims_the_node() {
    for backend in backends() {
        let ca = LocalCa::new().unwrap();
        let m = Machine::new(&ca);
        let host = host(backend, config(&ca, &[&m], "refuse")).await;
        let (joined, key) = join_tpm(&host, &ca, &m).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        write_identity(dir.path(), &key, &joined).unwrap();
        assert_eq!(generation(&host, &joined.node_id).await, 1);

        m.tpm.clear().unwrap();
        // The owner seed changed: node.key derives another key, and the agent says why.
        let err = load_identity_with(dir.path(), Some(&m.tpm)).unwrap_err();
        assert!(err.to_string().contains(TPM_CLEARED_HINT), "{err}");
        let checks = doctor(dir.path(), Some(&m.tpm));
        assert!(
            checks
                .iter()
                .any(|c| !c.ok && c.detail.contains("was the TPM cleared?")),
            "{checks:?}"
        );
        // The EK survived: the join reclaims the same node with a new generation.
        let (rejoined, _) = join_tpm(&host, &ca, &m).await.unwrap();
        assert_eq!(rejoined.node_id, joined.node_id, "{backend:?}");
        assert_eq!(generation(&host, &joined.node_id).await, 2, "{backend:?}");
        let ak = m.tpm.ak_public().unwrap();
        assert_eq!(
            uris(&rejoined.chain[0])[1],
            ak_statement(&tpm_name(&ak)).unwrap()
        );
        host.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpm_a_new_ek_is_enrolled_only_by_an_operator_after_the_old_node_is_deleted() {
    for backend in backends() {
        let ca = LocalCa::new().unwrap();
        let old = Machine::new(&ca);
        let host = host(backend, config(&ca, &[&old], "approval")).await;
        let (joined, _) = join_tpm(&host, &ca, &old).await.unwrap();
        // The board is replaced: a new TPM, a new EK. It is not admitted on its own: it waits
        // for an operator.
        let new = Machine::new(&ca);
        let task = spawn_join(&host, &ca, &new);
        let ids = pending_requests(&host, 1).await;
        assert!(!task.is_finished());
        // The operator deletes the old node (freeing its EK binding), then approves.
        let (status, done) = admin(
            &host,
            Method::DELETE,
            &format!("/v1/admin/nodes/{}", joined.node_id),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{done}");
        assert_eq!(
            done["bindingsFreed"],
            json!([{ "kind": "tpm-ek", "value": old.ek_sha256 }]),
            "{backend:?}"
        );
        approve(&host, &ids[0]).await;
        let admitted = task.await.unwrap().unwrap();
        assert_ne!(admitted.node_id, joined.node_id, "{backend:?}: a new node");
        host.stop().await;
    }
}

/// A node key in the TPM authenticates the renewal's TLS handshake (TPM2_Sign through the
/// rustls signer), and its next key is made in the TPM too: here for a certificate without an
/// AK statement (a token-joined node whose key moved into the TPM), on any host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpm_node_key_signs_the_renewal_handshake() {
    for backend in backends() {
        let ca = LocalCa::new().unwrap();
        let m = Machine::new(&ca);
        let host = TestHost::start(backend).await;
        let token = host.create_token("node", 1).await;
        let client = JoinClient::new(&host.url(), &host.trust).unwrap();
        let file_key = NodeKey::generate().unwrap();
        let joined = join(
            &client,
            &host.trust,
            &mut gatehouse_agent::TokenProducer::new(Role::Node),
            Some(&token),
            &file_key,
            &JoinOptions::default(),
        )
        .await
        .unwrap();
        // The node's current certificate, for a key in the TPM.
        let key = NodeKey::generate_in(&m.tpm).unwrap();
        let now = host.now().await;
        let leaf = host
            .issue_cert(
                &joined.node_id,
                &key.spki_der(),
                gatehouse::store::NodeRole::Node,
                1,
                now - 60_000,
                now + 3_600_000,
            )
            .await;
        let chain = vec![leaf, joined.chain[1].clone()];
        let next = NodeKey::generate_in(&m.tpm).unwrap();
        let renewed = RenewClient::new(&host.url(), &host.trust, &key, &chain)
            .unwrap()
            .renew(&host.trust, &joined.node_id, &next)
            .await
            .unwrap();
        assert_eq!(renewed.node_id, joined.node_id, "{backend:?}");
        let (_, cert) = X509Certificate::from_der(&renewed.chain[0]).unwrap();
        assert_eq!(cert.public_key().raw, next.spki_der().as_slice());
        // A key that is not the leaf's is refused before anything is sent.
        assert!(RenewClient::new(&host.url(), &host.trust, &next, &chain).is_err());
        host.stop().await;
    }
}

/// The CSR and the answer of the last challenge a join answered, as an eavesdropper on the
/// wire (or a compromised proxy) would capture round 2.
type Captured = std::sync::Arc<std::sync::Mutex<Option<(Vec<u8>, TpmAnswer)>>>;

fn capturing(
    captured: Captured,
) -> impl FnOnce(TpmProducer, &TpmNodeKey) -> Box<dyn EvidenceProducer> {
    move |inner: TpmProducer, _: &TpmNodeKey| -> Box<dyn EvidenceProducer> {
        Box::new(Tampering {
            inner,
            tamper: Box::new(move |_, _, csr, a| {
                *captured.lock().unwrap() = Some((csr.to_vec(), a.clone()));
            }),
        })
    }
}

/// Sends a captured round-2 request again, byte for byte: whether the host admitted it.
async fn replay(host: &TestHost, csr: &[u8], answer: &TpmAnswer) -> Result<bool, JoinError> {
    let client = JoinClient::new(&host.url(), &host.trust)?;
    let request = gatehouse_proto::JoinRequest {
        attestor: "tpm".into(),
        role: Role::Node,
        sealed_token: None,
        attestation: serde_json::to_vec(&TpmEvidence::Answer(answer.clone())).unwrap(),
        csr: csr.to_vec(),
        claims: gatehouse_proto::Claims::default(),
        round: 2,
    };
    let response = client.send(&request).await?;
    let body: gatehouse_proto::JoinResponseBody = serde_json::from_slice(&response.body).unwrap();
    Ok(!body.node_id.is_empty())
}

async fn a_replayed_answer_is_refused(backend: Backend) {
    let ca = LocalCa::new().unwrap();
    let m = Machine::new(&ca);
    let host = host(backend, config(&ca, &[&m], "refuse")).await;
    let captured = Captured::default();
    let (joined, key) = join_with(&host, &ca, &m, capturing(captured.clone()))
        .await
        .unwrap();
    let (csr, answer) = captured.lock().unwrap().clone().unwrap();
    let before = host.events().await.len();
    let ledger_before = host.audits().await.len();

    // The captured round 2, replayed with the same CSR while the challenge state lives: it
    // would re-key the node to the same key and revoke the certificate just issued.
    let replayed = replay(&host, &csr, &answer).await;
    assert!(
        matches!(replayed, Err(JoinError::Denied)),
        "{backend:?}: {replayed:?}"
    );
    assert_eq!(
        host.refusal_reasons().await.last().map(String::as_str),
        Some("challenge-replayed"),
        "{backend:?}"
    );
    // Nothing but the refusal was written: the node keeps its generation and its live
    // certificate, which still renews.
    assert_eq!(generation(&host, &joined.node_id).await, json!(1));
    let events = host.events().await;
    assert_eq!(events.len(), before + 1, "{backend:?}: {events:?}");
    assert_eq!(host.audits().await.len(), ledger_before + 1);
    let (status, shown) = admin(
        &host,
        Method::GET,
        &format!("/v1/admin/nodes/{}", joined.node_id),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(shown["certificates"].as_array().unwrap().len(), 1);
    assert_eq!(shown["certificates"][0]["revoked"], Value::Null, "{shown}");

    let dir = tempfile::tempdir().unwrap();
    write_identity(dir.path(), &key, &joined).unwrap();
    let loaded = load_identity_with(dir.path(), Some(&m.tpm)).unwrap();
    let lifecycle = Lifecycle::new(
        &host.url(),
        host.trust.clone(),
        dir.path().to_owned(),
        RenewPolicy::default(),
    )
    .with_tpm(m.tpm.clone());
    let renewed = lifecycle.attempt(Action::Renew, loaded).await.unwrap();
    assert_eq!(renewed.node_id, joined.node_id);

    // The machine itself re-joins with a new challenge (a reboot): that is not a replay.
    let (again, _) = join_tpm(&host, &ca, &m).await.unwrap();
    assert_eq!(again.node_id, joined.node_id);
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpm_a_replayed_round_two_is_refused_and_the_certificate_stays_live() {
    for backend in backends() {
        a_replayed_answer_is_refused(backend).await;
    }
}

/// Rule 7: an operator's approval belongs to the TPM whose EK the operator saw. Whoever
/// replays the captured round 2 (the same CSR) after the approval gets only a fresh challenge
/// sealed to that EK, never the admission; the machine itself answers it and joins once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpm_an_approval_is_taken_only_by_the_approved_ek() {
    for backend in backends() {
        let ca = LocalCa::new().unwrap();
        let m = Machine::new(&ca);
        let host = host(backend, config(&ca, &[], "approval")).await;
        let captured = Captured::default();
        let (url, trust, tpm) = (host.url(), host.trust.clone(), m.tpm.clone());
        let chain = vec![ca.intermediate_der().unwrap()];
        let wrap = capturing(captured.clone());
        let task = tokio::spawn(async move {
            let client = JoinClient::new(&url, &trust)?;
            let node_key = TpmNodeKey::generate(&tpm).unwrap();
            let producer = TpmProducer::new(tpm, Some(node_key.clone())).with_ek_chain(chain);
            let mut producer = wrap(producer, &node_key);
            let key = NodeKey::Tpm(node_key);
            let options = JoinOptions {
                max_retry_after: Duration::from_secs(2),
                ..JoinOptions::default()
            };
            join(&client, &trust, producer.as_mut(), None, &key, &options).await
        });
        let ids = pending_requests(&host, 1).await;
        let (_, shown) = admin(
            &host,
            Method::GET,
            &format!("/v1/admin/join-requests/{}", ids[0]),
            None,
        )
        .await;
        assert!(
            shown.to_string().contains(&m.ek_sha256),
            "the operator sees the EK: {shown}"
        );
        let (csr, answer) = captured.lock().unwrap().clone().unwrap();
        approve(&host, &ids[0]).await;
        // The captured round 2 replayed right after the approval: a challenge, no admission.
        // (If the machine's own next round got there first, the replay reads used.)
        let replayed = replay(&host, &csr, &answer).await;
        assert!(
            matches!(replayed, Ok(false) | Err(JoinError::Denied)),
            "{backend:?}: a replay took the approval: {replayed:?}"
        );
        let joined = task.await.unwrap().unwrap();
        assert_eq!(joined.attestor, "tpm");
        let (status, node) = admin(
            &host,
            Method::GET,
            &format!("/v1/admin/nodes/{}", joined.node_id),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            node["bindings"],
            json!([{ "kind": "tpm-ek", "value": m.ek_sha256 }])
        );
        // Used once: the replay now reads used.
        assert!(matches!(
            replay(&host, &csr, &answer).await,
            Err(JoinError::Denied)
        ));
        assert_eq!(
            host.refusal_reasons().await.last().map(String::as_str),
            Some("join-request-used")
        );
        host.stop().await;
    }
}

/// A token join on a machine with a TPM makes the node key there (the seed's "every new node
/// key is made in the TPM when there is one"); the same join without a TPM, or with one that
/// cannot hold the key, makes a file key; doctor reports which (a file key on a host with a
/// TPM is a warning), and the next renewal moves a file key into the TPM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpm_a_token_join_makes_the_node_key_in_the_tpm_when_there_is_one() {
    let ca = LocalCa::new().unwrap();
    let m = Machine::new(&ca);
    let host = TestHost::start(Backend::Sqlite).await;
    let (url, trust) = (host.url(), host.trust.clone());
    let token_join = |key: NodeKey| {
        let (url, trust, host) = (url.clone(), trust.clone(), &host);
        async move {
            let token = host.create_token("node", 1).await;
            let joined = join(
                &JoinClient::new(&url, &trust).unwrap(),
                &trust,
                &mut gatehouse_agent::TokenProducer::new(Role::Node),
                Some(&token),
                &key,
                &options(),
            )
            .await
            .unwrap();
            (key, joined)
        }
    };

    // With the TPM: the key is in it, node.key holds only its record.
    let with = tempfile::tempdir().unwrap();
    let (key, joined) = token_join(NodeKey::generate_for_host(Some(&m.tpm)).unwrap()).await;
    assert!(key.in_tpm());
    write_identity(with.path(), &key, &joined).unwrap();
    let status = gatehouse_agent::status(with.path(), 0).unwrap();
    assert_eq!(status.node_key, gatehouse_agent::KeyPlace::Tpm);
    assert_eq!(status.ak_statement, None, "a token join proves no AK");
    let checks = doctor(with.path(), Some(&m.tpm));
    assert!(checks.iter().all(|c| c.ok && !c.warn), "{checks:?}");
    assert!(
        checks[0]
            .to_string()
            .starts_with("ok   node key: in the TPM"),
        "{}",
        checks[0]
    );

    // Without a TPM: a file key; doctor with the TPM present warns, and says why.
    let without = tempfile::tempdir().unwrap();
    let (key, joined) = token_join(NodeKey::generate_for_host(None).unwrap()).await;
    assert!(!key.in_tpm());
    write_identity(without.path(), &key, &joined).unwrap();
    assert_eq!(
        gatehouse_agent::status(without.path(), 0).unwrap().node_key,
        gatehouse_agent::KeyPlace::File
    );
    let checks = doctor(without.path(), Some(&m.tpm));
    assert!(
        checks.iter().all(|c| c.ok),
        "a warning does not fail: {checks:?}"
    );
    assert!(checks[0].warn, "{checks:?}");
    assert!(
        checks[0].to_string().starts_with("warn node key: a file")
            && checks[0]
                .detail
                .contains("the next renewal moves it into the TPM"),
        "{}",
        checks[0]
    );
    if !gatehouse_agent::host_has_tpm() {
        let checks = doctor(without.path(), None);
        assert!(!checks[0].warn, "no TPM on this host: {checks:?}");
        assert!(
            checks[0].detail.contains("this host has no TPM"),
            "{}",
            checks[0]
        );
    }

    // The next renewal with the TPM moves the file key into it.
    let lifecycle = Lifecycle::new(
        &url,
        trust.clone(),
        without.path().into(),
        RenewPolicy::default(),
    )
    .with_tpm(m.tpm.clone());
    let current = load_identity_with(without.path(), Some(&m.tpm)).unwrap();
    lifecycle.attempt(Action::Renew, current).await.unwrap();
    assert_eq!(
        gatehouse_agent::status(without.path(), 0).unwrap().node_key,
        gatehouse_agent::KeyPlace::Tpm
    );
    let checks = doctor(without.path(), Some(&m.tpm));
    assert!(checks.iter().all(|c| c.ok && !c.warn), "{checks:?}");

    // A TPM that cannot hold the key (here: gone) leaves a file key, with a warning logged.
    let gone = Machine::new(&ca);
    let tpm = gone.tpm.clone();
    drop(gone);
    let key = NodeKey::generate_for_host(Some(&tpm)).unwrap();
    assert!(!key.in_tpm());
    host.stop().await;
}

/// The unprivileged agent renews a certified tpm join's certificate through
/// `gatehouse-agent helper` (which alone opens the TPM): the identity loads, doctor passes and
/// the renewal's next key is derived and certified by the AK in the helper, every answer
/// checked by the agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpm_the_unprivileged_agent_renews_through_the_helper() {
    let ca = LocalCa::new().unwrap();
    let m = Machine::new(&ca);
    let host = host(Backend::Sqlite, config(&ca, &[&m], "refuse")).await;
    // The join runs as root, on the TPM itself.
    let (joined, key) = join_tpm(&host, &ca, &m).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_identity(dir.path(), &key, &joined).unwrap();

    let socket = dir.path().join("helper.sock");
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    let helper = tokio::spawn(gatehouse_agent::tpm::helper::serve(listener, m.tpm.clone()));
    let through = Tpm::through_helper(&socket);
    let loaded = load_identity_with(dir.path(), Some(&through)).unwrap();
    assert!(loaded.key.in_tpm());
    let checks = doctor(dir.path(), Some(&through));
    assert!(checks.iter().all(|c| c.ok && !c.warn), "{checks:?}");
    let lifecycle = Lifecycle::new(
        &host.url(),
        host.trust.clone(),
        dir.path().to_owned(),
        RenewPolicy::default(),
    )
    .with_tpm(through.clone());
    let renewed = lifecycle.attempt(Action::Renew, loaded).await.unwrap();
    assert_eq!(renewed.node_id, joined.node_id);
    let after = load_identity_with(dir.path(), Some(&m.tpm)).unwrap();
    assert!(after.key.in_tpm());
    assert_ne!(after.key.spki_der(), key.spki_der());
    assert!(renew_refusals(&host).await.is_empty());
    helper.abort();
    host.stop().await;
}
