//! `POST /v1/renew` over mTLS: a live certificate of the current generation renews, keeping
//! its node id, role and statements; every other leaf is refused with its own reason in
//! `security.renew.refused`, and the client sees only ACCESS_DENIED ("Renew refused").

use std::sync::Arc;

use gatehouse::store::{NodeRole, Revocation};
use gatehouse_agent::{
    JoinClient, JoinOptions, NodeKey, TokenProducer, Verified, build_csr, join, verify_response,
};
use gatehouse_proto::{JoinResponse, RenewRequest, Role};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use sha2::{Digest, Sha256};

use crate::common::{Backend, TestHost, backends};

/// A joined node as the agent holds it.
struct Held {
    node_id: String,
    key: NodeKey,
    chain: Vec<Vec<u8>>,
}

async fn join_node(host: &TestHost) -> Held {
    let (key, joined) = host.join_node().await;
    Held {
        node_id: joined.node_id,
        key,
        chain: joined.chain,
    }
}

fn key_pem(key: &NodeKey) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("node.key");
    key.save(&path).unwrap();
    std::fs::read_to_string(path).unwrap()
}

/// An HTTPS client presenting `chain` with `key`, or no client certificate at all.
fn client(host: &TestHost, identity: Option<(&[Vec<u8>], &NodeKey)>) -> reqwest::Client {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(host.trust.tls_ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let config = match identity {
        Some((chain, key)) => builder
            .with_client_auth_cert(
                chain
                    .iter()
                    .map(|c| CertificateDer::from(c.clone()))
                    .collect(),
                PrivateKeyDer::from_pem_slice(key_pem(key).as_bytes()).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    reqwest::Client::builder()
        .use_preconfigured_tls(config)
        .build()
        .unwrap()
}

/// Renews with a fresh key; the new key and the verified answer, or the refusal's status and
/// message.
async fn renew(
    host: &TestHost,
    identity: Option<(&[Vec<u8>], &NodeKey)>,
    csr_key: &NodeKey,
) -> Result<gatehouse_agent::Verified, (u16, String)> {
    let csr = build_csr(csr_key).unwrap();
    let resp = client(host, identity)
        .post(format!("{}/v1/renew", host.url()))
        .json(&RenewRequest {
            csr: csr.clone(),
            key_attestation: None,
        })
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    if status != 200 {
        return Err((status, text));
    }
    let response: JoinResponse = serde_json::from_str(&text).unwrap();
    let csr_sha256: [u8; 32] = Sha256::digest(&csr).into();
    Ok(verify_response(&host.trust, &response, &csr_sha256, &csr_key.spki_der()).unwrap())
}

fn issued(v: Verified) -> (String, Vec<Vec<u8>>) {
    match v {
        Verified::Joined { node_id, chain, .. } => (node_id, chain),
        other => panic!("a renewal answered {other:?}"),
    }
}

#[track_caller]
fn assert_denied(r: Result<Verified, (u16, String)>) {
    match r {
        Err((403, body)) => {
            let err: gatehouse_proto::ApiError = serde_json::from_str(&body).unwrap();
            assert_eq!(err.code, "ACCESS_DENIED");
            assert_eq!(err.message, "Renew refused");
        }
        other => panic!("expected ACCESS_DENIED, got {other:?}"),
    }
}

/// The renew refusals, in order: (reason, node id).
async fn renew_refusals(host: &TestHost) -> Vec<(String, Option<String>)> {
    host.events()
        .await
        .into_iter()
        .filter(|e| e.kind == "security.renew.refused")
        .map(|e| (e.reason.unwrap_or_default(), e.node_id))
        .collect()
}

async fn renews_keeping_identity(backend: Backend) {
    let host = TestHost::start(backend).await;
    let node = join_node(&host).await;
    let next = NodeKey::generate().unwrap();
    let (node_id, chain) = issued(
        renew(&host, Some((&node.chain, &node.key)), &next)
            .await
            .unwrap(),
    );
    assert_eq!(node_id, node.node_id);
    assert_ne!(chain[0], node.chain[0]);
    // The renewed certificate renews in turn, with its own key.
    let (again, _) = issued(
        renew(&host, Some((&chain, &next)), &NodeKey::generate().unwrap())
            .await
            .unwrap(),
    );
    assert_eq!(again, node.node_id);

    let mut tx = host.running.db.begin().await.unwrap();
    let certs = tx.node_certs(&node.node_id).await.unwrap();
    let n = tx.node(&node.node_id).await.unwrap().unwrap();
    tx.commit().await.unwrap();
    assert_eq!(certs.len(), 3);
    assert!(certs.iter().all(|c| c.generation == n.identity_generation
        && c.role == NodeRole::Node
        && c.revoked.is_none()));
    let renewed = host
        .events()
        .await
        .into_iter()
        .filter(|e| e.kind == "node.renewed")
        .count();
    assert_eq!(renewed, 2);
    let audits = host.audits().await;
    assert_eq!(
        audits.iter().filter(|a| a.attestor == "renew").count(),
        2,
        "one audit row per renewal"
    );
    host.stop().await;
}

async fn keeps_statements_the_csr_omits(backend: Backend) {
    let host = TestHost::start(backend).await;
    let node = join_node(&host).await;
    let now = host.now().await;
    let statement = "urn:bc:test:kept".to_owned();
    let leaf = host
        .issue_cert_with_statements(
            &node.node_id,
            &node.key.spki_der(),
            NodeRole::Node,
            1,
            now - 60_000,
            now + 3_600_000,
            std::slice::from_ref(&statement),
        )
        .await;
    let chain = vec![leaf, host.running.pki.get().node_ca_der().to_vec()];
    // build_csr asks for no SAN at all.
    let (_, renewed) = issued(
        renew(
            &host,
            Some((&chain, &node.key)),
            &NodeKey::generate().unwrap(),
        )
        .await
        .unwrap(),
    );
    let mut tx = host.running.db.begin().await.unwrap();
    let row = tx.node_cert_by_der(&renewed[0]).await.unwrap().unwrap();
    tx.commit().await.unwrap();
    assert_eq!(row.statements, vec![statement.clone()]);
    let (_, cert) = x509_parser::parse_x509_certificate(&renewed[0]).unwrap();
    let uris: Vec<String> = cert
        .subject_alternative_name()
        .unwrap()
        .unwrap()
        .value
        .general_names
        .iter()
        .filter_map(|n| match n {
            x509_parser::extensions::GeneralName::URI(u) => Some((*u).to_owned()),
            _ => None,
        })
        .collect();
    assert_eq!(
        uris,
        vec![
            format!("spiffe://gatehouse.dev/node/{}", node.node_id),
            statement
        ]
    );
    host.stop().await;
}

async fn refuses_each_leaf_that_may_not_renew(backend: Backend) {
    let host = TestHost::start(backend).await;
    let node = join_node(&host).await;
    let now = host.now().await;
    let fresh = || NodeKey::generate().unwrap();
    let ca = host.running.pki.get().node_ca_der().to_vec();
    let spki = node.key.spki_der();
    // A certificate of the node's key, as the host records its own.
    let issue = async |generation: u32, not_before: i64, not_after: i64| {
        host.issue_cert(
            &node.node_id,
            &spki,
            NodeRole::Node,
            generation,
            not_before,
            not_after,
        )
        .await
    };
    let mut expected = vec![];

    // No client certificate.
    assert_denied(renew(&host, None, &fresh()).await);
    expected.push(("no-client-certificate".to_owned(), None));

    // A certificate this host never issued (self-signed, same node id).
    let stranger = NodeKey::generate().unwrap();
    let forged = {
        let params = rcgen::CertificateParams::new(vec![]).unwrap();
        let pair = rcgen::KeyPair::from_pem(&key_pem(&stranger)).unwrap();
        params.self_signed(&pair).unwrap().der().to_vec()
    };
    assert_denied(renew(&host, Some((&[forged], &stranger)), &fresh()).await);
    expected.push(("unknown-certificate".to_owned(), None));

    // Expired an hour ago: renewal refuses expired certificates (x509pop re-joins them).
    let expired = issue(1, now - 2 * 3_600_000, now - 3_600_000).await;
    assert_denied(renew(&host, Some((&[expired, ca.clone()], &node.key)), &fresh()).await);
    expected.push(("expired".to_owned(), Some(node.node_id.clone())));

    // One certificate revoked by an operator.
    let single = issue(1, now - 60_000, now + 3_600_000).await;
    {
        let mut tx = host.running.db.begin().await.unwrap();
        let row = tx.node_cert_by_der(&single).await.unwrap().unwrap();
        assert!(
            tx.revoke_node_cert(&node.node_id, &row.serial)
                .await
                .unwrap()
        );
        tx.commit().await.unwrap();
    }
    assert_denied(renew(&host, Some((&[single, ca.clone()], &node.key)), &fresh()).await);
    expected.push(("revoked".to_owned(), Some(node.node_id.clone())));

    // Revoke-identity: every certificate the node held is refused.
    {
        let mut tx = host.running.db.begin().await.unwrap();
        let at = tx.now().await.unwrap();
        assert_eq!(
            tx.revoke_identity(&node.node_id, at).await.unwrap(),
            Some(2)
        );
        tx.commit().await.unwrap();
    }
    assert_denied(renew(&host, Some((&node.chain, &node.key)), &fresh()).await);
    expected.push(("identity-revoked".to_owned(), Some(node.node_id.clone())));

    // A certificate of the current generation issued after that renews; after a reclaim
    // moved the node on, it is of an older generation.
    let current = issue(2, now - 60_000, now + 3_600_000).await;
    let current_chain = vec![current, ca.clone()];
    issued(
        renew(&host, Some((&current_chain, &node.key)), &fresh())
            .await
            .unwrap(),
    );
    let reclaim = host
        .create_token_with(serde_json::json!({
            "role": "node", "uses": 1, "ttlSeconds": 3600, "expect": { "nodeId": node.node_id },
        }))
        .await;
    let reclaimed = join(
        &JoinClient::new(&host.url(), &host.trust).unwrap(),
        &host.trust,
        &mut TokenProducer::new(Role::Node),
        Some(&reclaim),
        &fresh(),
        &JoinOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(reclaimed.node_id, node.node_id);
    assert_denied(renew(&host, Some((&current_chain, &node.key)), &fresh()).await);
    expected.push(("old-generation".to_owned(), Some(node.node_id.clone())));

    // A retired node renews nothing.
    let other = join_node(&host).await;
    {
        let mut tx = host.running.db.begin().await.unwrap();
        let at = tx.now().await.unwrap();
        assert!(tx.retire_node(&other.node_id, at).await.unwrap());
        tx.commit().await.unwrap();
    }
    assert_denied(renew(&host, Some((&other.chain, &other.key)), &fresh()).await);
    expected.push(("retired".to_owned(), Some(other.node_id.clone())));

    assert_eq!(renew_refusals(&host).await, expected);
    // Refusals are attributed to the node's owner.
    let owners: Vec<Option<String>> = host
        .events()
        .await
        .into_iter()
        .filter(|e| e.kind == "security.renew.refused" && e.node_id.is_some())
        .map(|e| e.tenant_id)
        .collect();
    assert!(
        owners.iter().all(|t| t.as_deref() == Some("root")),
        "{owners:?}"
    );
    {
        let mut tx = host.running.db.begin().await.unwrap();
        let certs = tx.node_certs(&node.node_id).await.unwrap();
        tx.commit().await.unwrap();
        assert!(
            certs
                .iter()
                .filter(|c| c.generation < 3)
                .all(|c| c.revoked.is_some())
        );
        assert!(
            certs
                .iter()
                .any(|c| c.revoked == Some(Revocation::IdentityRevoked))
        );
    }
    host.stop().await;
}

#[tokio::test]
async fn renewal_keeps_node_role_and_generation() {
    for backend in backends() {
        renews_keeping_identity(backend).await;
    }
}

#[tokio::test]
async fn renewal_keeps_statements_the_csr_omits() {
    for backend in backends() {
        keeps_statements_the_csr_omits(backend).await;
    }
}

#[tokio::test]
async fn renewal_refuses_each_leaf_with_its_reason() {
    for backend in backends() {
        refuses_each_leaf_that_may_not_renew(backend).await;
    }
}
