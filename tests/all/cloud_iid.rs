//! cloud-iid end to end, with documents signed by test keys standing in for each provider
//! (AWS PKCS#7, GCP JWT, Azure attested data, OIDC): each instance admitted once through the
//! built-in component and refused the second time, and each refusal (too old, an unknown
//! account, `alg: none`, HS256 keyed with the public key, a kid not configured) reaching the
//! agent as ACCESS_DENIED with its reason in `security.join.refused`, having recorded nothing.

use std::sync::OnceLock;

use gatehouse_agent::{
    CloudIidProducer, JoinClient, JoinError, JoinOptions, Joined, NodeKey, join,
};
use gatehouse_attestor_cloud_iid::mint::{self, Providers, Sign};
use gatehouse_proto::Role;
use gatehouse_proto::cloud_iid::{CLOUD_IID, CloudIidEvidence, Provider};
use serde_json::json;

use crate::common::{Backend, HostOptions, TestHost, backends};

const MINUTE: i64 = 60_000;

/// One set of stand-in provider keys for the whole suite (RSA key generation is slow).
pub(crate) fn keys() -> &'static Providers {
    static KEYS: OnceLock<Providers> = OnceLock::new();
    KEYS.get_or_init(Providers::new)
}

/// A host whose cloud-iid trusts the stand-ins and admits `acct-<provider>` into `root`.
async fn host(backend: Backend) -> TestHost {
    let mut config = keys().config(10 * 60_000);
    config["resolve"] = json!(
        Provider::ALL
            .iter()
            .map(|p| json!({ "provider": p.as_str(), "account": format!("acct-{p}"), "tenantId": "root" }))
            .collect::<Vec<_>>()
    );
    TestHost::start_with(HostOptions {
        attestor_config: vec![(CLOUD_IID.into(), config)],
        ..HostOptions::new(backend)
    })
    .await
}

/// Joins `host` with `evidence` through the agent's join loop, as a node, with no token.
pub(crate) async fn cloud_join(
    host: &TestHost,
    evidence: CloudIidEvidence,
) -> Result<Joined, JoinError> {
    let client = JoinClient::new(&host.url(), &host.trust)?;
    let key = NodeKey::generate()?;
    let mut producer = CloudIidProducer::new(CLOUD_IID, Role::Node, evidence);
    join(
        &client,
        &host.trust,
        &mut producer,
        None,
        &key,
        &JoinOptions::default(),
    )
    .await
}

/// Asserts `evidence` is refused as ACCESS_DENIED, with `reason` in the newest
/// `security.join.refused` event, attributed to cloud-iid.
async fn refused(host: &TestHost, evidence: CloudIidEvidence, reason: &str, what: &str) {
    match cloud_join(host, evidence).await {
        Err(JoinError::Denied) => {}
        other => panic!("{what}: expected ACCESS_DENIED, got {other:?}"),
    }
    let event = host
        .events()
        .await
        .into_iter()
        .rev()
        .find(|e| e.kind == "security.join.refused")
        .unwrap_or_else(|| panic!("{what}: no security.join.refused event"));
    assert_eq!(event.reason.as_deref(), Some(reason), "{what}");
    assert_eq!(event.attestor.as_deref(), Some(CLOUD_IID), "{what}");
}

async fn admits_once(backend: Backend) {
    let host = host(backend).await;
    for p in Provider::ALL {
        let account = format!("acct-{p}");
        let evidence = keys().evidence(p, &account, "inst-1", host.now().await - MINUTE);
        let joined = cloud_join(&host, evidence.clone())
            .await
            .unwrap_or_else(|e| panic!("{backend:?} {p}: {e}"));
        assert_eq!(joined.attestor, CLOUD_IID, "{p}");
        let audit = host.audits().await.pop().unwrap();
        assert_eq!(audit.attestor, CLOUD_IID);
        assert_eq!(
            audit.subject.as_deref(),
            Some(format!("cloud:{p}:{account}:inst-1").as_str()),
            "{backend:?} {p}"
        );
        assert_eq!(audit.node_id.as_deref(), Some(joined.node_id.as_str()));
        let mut tx = host.running.db.begin().await.unwrap();
        let node = tx.node(&joined.node_id).await.unwrap().unwrap();
        tx.commit().await.unwrap();
        assert_eq!(node.tenant_id, "root");

        // The same document again, and a fresh one of the same instance: refused, ever.
        refused(&host, evidence, "instance-reused", &format!("{p} replayed")).await;
        let fresh = keys().evidence(p, &account, "inst-1", host.now().await);
        refused(&host, fresh, "instance-reused", &format!("{p} fresh")).await;
    }
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloud_iid_each_provider_admits_an_instance_once() {
    for backend in backends() {
        admits_once(backend).await;
    }
}

async fn refusals(backend: Backend) {
    let host = host(backend).await;
    let k = keys();
    let now = host.now().await;
    for p in Provider::ALL {
        let account = format!("acct-{p}");
        let old = k.evidence(p, &account, "inst-old", now - 11 * MINUTE);
        refused(&host, old, "too-old", &format!("{p} too old")).await;
        let stranger = k.evidence(p, "someone-else", "inst-1", now);
        refused(&host, stranger, "unknown-instance", &format!("{p} unknown")).await;
    }

    let claims = mint::gcp_claims(mint::AUDIENCE, "acct-gcp", "inst-attack", now);
    let gcp = |document: String| CloudIidEvidence {
        provider: Provider::Gcp,
        document,
        signature: None,
    };
    refused(
        &host,
        gcp(mint::jwt(&claims, Some("gcp-1"), Sign::None)),
        "bad-algorithm",
        "alg none",
    )
    .await;
    refused(
        &host,
        gcp(mint::jwt(
            &claims,
            Some("gcp-1"),
            Sign::Hs256(&mint::rsa_spki(&k.gcp_key)),
        )),
        "bad-algorithm",
        "HS256 keyed with the public key",
    )
    .await;
    refused(
        &host,
        gcp(mint::jwt(
            &claims,
            Some("not-configured"),
            Sign::Rs256(&k.gcp_key),
        )),
        "unknown-key",
        "a kid not configured",
    )
    .await;
    let oidc = mint::jwt(
        &Providers::oidc_claims("acct-oidc", "inst-attack", now),
        Some("oidc-ec"),
        Sign::None,
    );
    refused(
        &host,
        CloudIidEvidence {
            provider: Provider::Oidc,
            document: oidc,
            signature: None,
        },
        "bad-algorithm",
        "oidc alg none",
    )
    .await;

    // No refusal recorded a use: the instances refused above still join, once.
    for p in Provider::ALL {
        let account = format!("acct-{p}");
        let fresh = k.evidence(p, &account, "inst-old", host.now().await);
        cloud_join(&host, fresh)
            .await
            .unwrap_or_else(|e| panic!("{backend:?} {p} after its refusal: {e}"));
    }
    cloud_join(&host, k.gcp("acct-gcp", "inst-attack", host.now().await))
        .await
        .unwrap();
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloud_iid_each_refusal_reaches_the_agent_as_access_denied_with_its_reason() {
    for backend in backends() {
        refusals(backend).await;
    }
}

/// The agent's side: the files a machine saved from AWS's metadata service (the document and
/// its /pkcs7 text) become evidence the host admits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloud_iid_the_agent_joins_from_metadata_files() {
    let host = host(Backend::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let aws = keys().aws("acct-aws", "i-files", host.now().await);
    let document = dir.path().join("document");
    let pkcs7 = dir.path().join("pkcs7");
    std::fs::write(&document, &aws.document).unwrap();
    std::fs::write(&pkcs7, format!("{}\n", aws.signature.unwrap())).unwrap();
    let evidence =
        CloudIidProducer::from_files(&document, Some(Provider::Aws), Some(&pkcs7)).unwrap();
    let joined = cloud_join(&host, evidence).await.unwrap();
    let audit = host.audits().await.pop().unwrap();
    assert_eq!(audit.subject.as_deref(), Some("cloud:aws:acct-aws:i-files"));
    assert_eq!(audit.node_id, Some(joined.node_id));
    host.stop().await;
}
