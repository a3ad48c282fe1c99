//! The agent's side of trust: a response it cannot verify is never used, and a sealed token
//! opens only for the CSR it was sealed for.

use gatehouse_agent::{
    JoinClient, JoinError, JoinOptions, NodeKey, ResponseError, TokenProducer, build_csr, join,
    verify_response,
};
use gatehouse_proto::{JoinRequest, Role, seal_token};

use crate::common::{Backend, TestHost};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tampered_or_wrongly_signed_response_is_refused() {
    let host = TestHost::start(Backend::Sqlite).await;
    let token = host.create_token("node", 2).await;
    let key = NodeKey::generate().unwrap();
    let csr = build_csr(&key).unwrap();
    let csr_sha256: [u8; 32] =
        sha2::Digest::finalize(<sha2::Sha256 as sha2::Digest>::new_with_prefix(&csr)).into();
    let client = JoinClient::new(&host.url(), &host.trust).unwrap();
    let request = JoinRequest {
        attestor: String::new(),
        role: Role::Node,
        sealed_token: Some(
            seal_token(&host.trust.join_encryption_key, &token, &csr_sha256).unwrap(),
        ),
        attestation: vec![],
        csr,
        claims: Default::default(),
        round: 1,
    };
    let response = client.send(&request).await.unwrap();
    let spki = key.spki_der();
    verify_response(&host.trust, &response, &csr_sha256, &spki)
        .expect("the genuine response verifies");

    let mut tampered = response.clone();
    let at = tampered.body.len() / 2;
    tampered.body[at] ^= 0x01;
    assert_eq!(
        verify_response(&host.trust, &tampered, &csr_sha256, &spki),
        Err(ResponseError::BadSignature)
    );

    // An agent that pinned another host's key refuses this host's (validly signed) answer.
    let other = TestHost::start(Backend::Sqlite).await;
    let mut wrong_pin = host.trust.clone();
    wrong_pin.join_signing_key = other.trust.join_signing_key.clone();
    assert_eq!(
        verify_response(&wrong_pin, &response, &csr_sha256, &spki),
        Err(ResponseError::WrongKey)
    );

    // The full join loop against a host whose signing key is not the pinned one fails closed.
    let mut client_trust = other.trust.clone();
    client_trust.tls_ca_pem = host.trust.tls_ca_pem.clone();
    client_trust.join_encryption_key = host.trust.join_encryption_key.clone();
    let err = join(
        &client,
        &client_trust,
        &mut TokenProducer::new(Role::Node),
        Some(&token),
        &NodeKey::generate().unwrap(),
        &JoinOptions::default(),
    )
    .await
    .expect_err("must not join");
    assert!(
        matches!(err, JoinError::Response(ResponseError::WrongKey)),
        "{err}"
    );
    other.stop().await;
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sealed_token_opens_only_for_its_own_csr() {
    let host = TestHost::start(Backend::Sqlite).await;
    let token = host.create_token("node", 1).await;
    let key = NodeKey::generate().unwrap();
    let csr = build_csr(&key).unwrap();
    let client = JoinClient::new(&host.url(), &host.trust).unwrap();
    // Sealed for another CSR (a replayed sealed token).
    let sealed = seal_token(&host.trust.join_encryption_key, &token, &[9; 32]).unwrap();
    let request = JoinRequest {
        attestor: String::new(),
        role: Role::Node,
        sealed_token: Some(sealed),
        attestation: vec![],
        csr,
        claims: Default::default(),
        round: 1,
    };
    assert!(matches!(
        client.send(&request).await,
        Err(JoinError::Denied)
    ));
    assert_eq!(
        host.refusal_reasons().await,
        vec!["token-unsealable".to_owned()]
    );
    // Nothing was spent or issued: the token's one use still admits a machine, the only node.
    let mut tx = host.running.db.begin().await.unwrap();
    assert!(tx.list_nodes().await.unwrap().is_empty());
    assert_eq!(
        tx.lock_token(&token.id).await.unwrap().unwrap().uses_left,
        1
    );
    tx.commit().await.unwrap();
    host.join_node_with(&token).await.unwrap();
    let mut tx = host.running.db.begin().await.unwrap();
    assert_eq!(tx.list_nodes().await.unwrap().len(), 1);
    tx.commit().await.unwrap();
    host.stop().await;
}
