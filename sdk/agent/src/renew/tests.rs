//! The renewal's verification, and RenewClient against a local TLS server that asks for a
//! client certificate.

use gatehouse_proto::{Challenge, Deferral, JoinResponse};

use super::*;
use crate::testutil::{
    Pki, Served, csr_key, deferred_body, joined_body, proof, serve_https, tls_ca,
};

fn respond_for(pki: &Pki, csr: &[u8], next: &NodeKey, node_id: &str) -> JoinResponse {
    let leaf = pki.node_leaf(next.key_pair(), node_id);
    pki.respond(&joined_body(&sha256(csr), node_id, vec![leaf]))
}

#[test]
fn admits_only_a_verified_answer_for_the_same_node() {
    let pki = Pki::new();
    let next = NodeKey::generate().unwrap();
    let csr = build_csr(&next).unwrap();
    let good = respond_for(&pki, &csr, &next, "node_a");
    let joined = admit(&pki.trust, &good, &csr, &next, "node_a").unwrap();
    assert_eq!(joined.node_id, "node_a");
    assert_eq!(joined.spiffe_id, "spiffe://td.test/node/node_a");
    assert_eq!(joined.attestor, "");

    let err = admit(&pki.trust, &good, &csr, &next, "node_b").unwrap_err();
    assert_eq!(
        err.to_string(),
        "the renewed certificate names node node_a, not node_b"
    );

    // For the current key (or any other) rather than the next one.
    let other = NodeKey::generate().unwrap();
    let err = admit(&pki.trust, &good, &csr, &other, "node_a").unwrap_err();
    assert!(
        matches!(
            err,
            RenewError::Exchange(JoinError::Response(ResponseError::NotOurKey))
        ),
        "{err}"
    );
    let other_csr = build_csr(&next).unwrap();
    let err = admit(&pki.trust, &good, &other_csr, &next, "node_a").unwrap_err();
    assert!(
        matches!(
            err,
            RenewError::Exchange(JoinError::Response(ResponseError::OtherRequest))
        ),
        "{err}"
    );

    let challenge = Deferral::Challenge(Challenge {
        attestor: "tpm".into(),
        payload: vec![1],
        not_after: i64::MAX,
    });
    let deferred = pki.respond(&deferred_body(&sha256(&csr), challenge));
    let err = admit(&pki.trust, &deferred, &csr, &next, "node_a").unwrap_err();
    assert!(matches!(err, RenewError::Deferred), "{err}");
}

#[test]
fn errors_display() {
    assert_eq!(
        RenewError::Denied.to_string(),
        "renewal refused: ACCESS_DENIED"
    );
    assert!(matches!(
        RenewError::from(JoinError::Denied),
        RenewError::Denied
    ));
    assert_eq!(
        RenewError::from(JoinError::TooLarge).to_string(),
        "the host's response is larger than 1048576 bytes"
    );
    assert_eq!(
        RenewError::Deferred.to_string(),
        "the host deferred a renewal"
    );
}

struct Node {
    pki: Pki,
    key: NodeKey,
    chain: Vec<Vec<u8>>,
}

fn node(tls_ca_pem: &str) -> Node {
    let mut pki = Pki::new();
    pki.trust.tls_ca_pem = tls_ca_pem.to_owned();
    let key = NodeKey::generate().unwrap();
    let chain = vec![pki.node_leaf(key.key_pair(), "node_a"), pki.ca_der()];
    Node { pki, key, chain }
}

fn body_of(served: &Served) -> RenewRequest {
    let text = String::from_utf8(served.request.clone()).unwrap();
    assert!(text.starts_with("POST /v1/renew HTTP/1.1\r\n"), "{text}");
    serde_json::from_str(&text[text.find("\r\n\r\n").unwrap() + 4..]).unwrap()
}

#[tokio::test]
async fn presents_the_current_chain_and_proves_its_key() {
    let ca = tls_ca();
    let n = node(&ca.pem);
    let next = NodeKey::generate().unwrap();
    // The server answers before it sees the CSR, so it answers for a CSR made here, which
    // the client must then refuse as another request's answer: the server's view is what this
    // test checks; the verification is checked above.
    let canned = respond_for(&n.pki, &build_csr(&next).unwrap(), &next, "node_a");
    let (url, server) = serve_https(
        &ca,
        Some(proof()),
        "200 OK",
        serde_json::to_vec(&canned).unwrap(),
    )
    .await;
    let client = RenewClient::new(&url, &n.pki.trust, &n.key, &n.chain).unwrap();
    let err = client
        .renew(&n.pki.trust, "node_a", &next)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            RenewError::Exchange(JoinError::Response(ResponseError::OtherRequest))
        ),
        "{err}"
    );
    let served = server.await.unwrap();
    assert_eq!(served.peer, n.chain, "leaf and node CA, leaf first");
    let sent = body_of(&served);
    assert_eq!(
        csr_key(&sent.csr).0,
        next.spki_der(),
        "the CSR is the next key's"
    );
}

#[tokio::test]
async fn a_refusal_is_a_denial() {
    let ca = tls_ca();
    let n = node(&ca.pem);
    let body = br#"{"code":"ACCESS_DENIED","message":"Renew refused"}"#.to_vec();
    let (url, _server) = serve_https(&ca, Some(proof()), "403 Forbidden", body).await;
    let client = RenewClient::new(&url, &n.pki.trust, &n.key, &n.chain).unwrap();
    let next = NodeKey::generate().unwrap();
    let err = client
        .renew(&n.pki.trust, "node_a", &next)
        .await
        .unwrap_err();
    assert!(matches!(err, RenewError::Denied), "{err}");
}

#[test]
fn a_key_that_is_not_the_leafs_is_refused_at_setup() {
    let n = node(&tls_ca().pem);
    let stranger = NodeKey::generate().unwrap();
    match RenewClient::new("https://localhost:1", &n.pki.trust, &stranger, &n.chain) {
        Err(JoinError::Setup(m)) => assert!(m.starts_with("client certificate: "), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(RenewClient::new("http://h:1", &n.pki.trust, &n.key, &n.chain).is_err());
}
