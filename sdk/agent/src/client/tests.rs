//! The join loop against a scripted host, and the HTTPS client against a local TLS server.

use std::collections::VecDeque;

use gatehouse_proto::{Challenge, Deferral, Pending, Role};

use super::*;
use crate::producer::TokenProducer;
use crate::testutil::{Pki, deferred_body, joined_body, sha256};

/// What the scripted host answers to one round.
enum Reply {
    Join(&'static str),
    Pending(u32),
    Challenge(&'static str),
    Denied,
    OtherCsr,
}

struct Script<'a> {
    pki: &'a Pki,
    key: &'a NodeKey,
    replies: VecDeque<Reply>,
    seen: Vec<JoinRequest>,
}

impl<'a> Script<'a> {
    fn new(pki: &'a Pki, key: &'a NodeKey, replies: impl IntoIterator<Item = Reply>) -> Self {
        Self {
            pki,
            key,
            replies: replies.into_iter().collect(),
            seen: Vec::new(),
        }
    }

    fn answer(&mut self, request: &JoinRequest) -> Result<JoinResponse, JoinError> {
        self.seen.push(request.clone());
        let csr = sha256(&request.csr);
        let body = match self.replies.pop_front().expect("the script ran out") {
            Reply::Join(node_id) => {
                let leaf = self.pki.node_leaf(self.key.key_pair(), node_id);
                joined_body(&csr, node_id, vec![leaf])
            }
            Reply::Pending(retry_after_seconds) => deferred_body(
                &csr,
                Deferral::Pending(Pending {
                    request_id: "jr_1".into(),
                    retry_after_seconds,
                }),
            ),
            Reply::Challenge(attestor) => deferred_body(
                &csr,
                Deferral::Challenge(Challenge {
                    attestor: attestor.into(),
                    payload: vec![self.seen.len() as u8; 4],
                    not_after: i64::MAX,
                }),
            ),
            Reply::Denied => return Err(JoinError::Denied),
            Reply::OtherCsr => {
                let leaf = self.pki.node_leaf(self.key.key_pair(), "node_a");
                joined_body(&[0; 32], "node_a", vec![leaf])
            }
        };
        Ok(self.pki.respond(&body))
    }
}

impl Transport for &mut Script<'_> {
    fn round(
        &mut self,
        request: &JoinRequest,
    ) -> impl Future<Output = Result<JoinResponse, JoinError>> + Send {
        std::future::ready(self.answer(request))
    }
}

/// Answers each challenge with its payload followed by the CSR's hash.
struct Answering {
    challenges: Vec<Challenge>,
}

impl EvidenceProducer for Answering {
    fn attestor(&self) -> &str {
        "tpm"
    }
    fn role(&self) -> Role {
        Role::Node
    }
    fn evidence(&mut self, csr_der: &[u8]) -> Result<Vec<u8>, ProducerError> {
        Ok([b"ev".as_slice(), &sha256(csr_der)].concat())
    }
    fn answer(&mut self, c: &Challenge, csr_der: &[u8]) -> Result<Vec<u8>, ProducerError> {
        self.challenges.push(c.clone());
        Ok([c.payload.as_slice(), &sha256(csr_der)].concat())
    }
}

fn token() -> TokenString {
    TokenString {
        id: "tok_1".into(),
        secret: vec![4; 32],
    }
}

fn claims() -> Claims {
    Claims {
        macs: vec!["52:54:00:12:34:56".into()],
        product_uuid: None,
    }
}

fn fast() -> JoinOptions {
    JoinOptions {
        claims: claims(),
        max_retry_after: Duration::from_millis(1),
    }
}

async fn token_join(script: &mut Script<'_>, options: &JoinOptions) -> Result<Joined, JoinError> {
    let (pki, key) = (script.pki, script.key);
    let mut producer = TokenProducer::new(Role::Node);
    let token = token();
    run(
        script,
        &pki.trust,
        &mut producer,
        Some(&token),
        key,
        options,
    )
    .await
}

#[tokio::test]
async fn token_join_seals_the_token_for_the_csr() {
    let (pki, key) = (Pki::new(), NodeKey::generate().unwrap());
    let mut script = Script::new(&pki, &key, [Reply::Join("node_a")]);
    let joined = token_join(&mut script, &fast()).await.unwrap();
    assert_eq!(joined.node_id, "node_a");
    assert_eq!(joined.spiffe_id, "spiffe://td.test/node/node_a");
    assert_eq!(joined.trust_domain, "td.test");
    assert_eq!(joined.attestor, "join-token");
    assert_eq!(joined.rounds, 1);
    let [sent] = script.seen.as_slice() else {
        panic!("one round")
    };
    assert_eq!(
        (sent.attestor.as_str(), sent.role, sent.round),
        ("join-token", Role::Node, 1)
    );
    assert!(sent.attestation.is_empty());
    assert_eq!(sent.claims, claims());
    let sealed = sent.sealed_token.as_deref().unwrap();
    let csr = sha256(&sent.csr);
    assert_eq!(pki.opener.open(sealed, &csr).unwrap(), token());
}

#[tokio::test]
async fn no_token_sends_no_sealed_token() {
    let (pki, key) = (Pki::new(), NodeKey::generate().unwrap());
    let mut script = Script::new(&pki, &key, [Reply::Join("node_a")]);
    let mut producer = Answering { challenges: vec![] };
    let joined = run(&mut script, &pki.trust, &mut producer, None, &key, &fast())
        .await
        .unwrap();
    assert_eq!(joined.attestor, "tpm");
    assert_eq!(script.seen[0].sealed_token, None);
    assert_eq!(script.seen[0].attestation[..2], *b"ev");
}

#[tokio::test(start_paused = true)]
async fn pending_is_waited_out_with_the_same_csr_and_capped() {
    let (pki, key) = (Pki::new(), NodeKey::generate().unwrap());
    let replies = [
        Reply::Pending(7),
        Reply::Pending(3600),
        Reply::Join("node_a"),
    ];
    let mut script = Script::new(&pki, &key, replies);
    let start = tokio::time::Instant::now();
    let joined = token_join(&mut script, &JoinOptions::default())
        .await
        .unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(7) + MAX_RETRY_AFTER);
    assert_eq!(joined.rounds, 3);
    let rounds: Vec<u8> = script.seen.iter().map(|r| r.round).collect();
    assert_eq!(rounds, [1, 2, 3]);
    assert!(script.seen.iter().all(|r| r.csr == script.seen[0].csr));
    assert!(
        script
            .seen
            .iter()
            .all(|r| r.sealed_token == script.seen[0].sealed_token)
    );
}

#[tokio::test(start_paused = true)]
async fn tests_may_shorten_the_wait() {
    let (pki, key) = (Pki::new(), NodeKey::generate().unwrap());
    let mut script = Script::new(&pki, &key, [Reply::Pending(300), Reply::Join("node_a")]);
    let start = tokio::time::Instant::now();
    token_join(&mut script, &fast()).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(1));
}

#[tokio::test]
async fn challenges_are_answered_with_the_same_csr() {
    let (pki, key) = (Pki::new(), NodeKey::generate().unwrap());
    let replies = [
        Reply::Challenge("tpm"),
        Reply::Challenge("tpm"),
        Reply::Challenge("tpm"),
        Reply::Join("node_a"),
    ];
    let mut script = Script::new(&pki, &key, replies);
    let mut producer = Answering { challenges: vec![] };
    let joined = run(&mut script, &pki.trust, &mut producer, None, &key, &fast())
        .await
        .unwrap();
    assert_eq!(joined.rounds, 4);
    assert_eq!(producer.challenges.len(), 3);
    let csr = sha256(&script.seen[0].csr);
    for (i, sent) in script.seen.iter().enumerate().skip(1) {
        assert_eq!(sent.csr, script.seen[0].csr);
        assert_eq!(usize::from(sent.round), i + 1);
        // The answer to the challenge sent in reply to round i.
        assert_eq!(
            sent.attestation,
            [vec![i as u8; 4].as_slice(), &csr].concat()
        );
    }
}

#[tokio::test]
async fn a_fourth_challenge_is_refused() {
    let (pki, key) = (Pki::new(), NodeKey::generate().unwrap());
    let mut script = Script::new(&pki, &key, (0..4).map(|_| Reply::Challenge("tpm")));
    let mut producer = Answering { challenges: vec![] };
    let err = run(&mut script, &pki.trust, &mut producer, None, &key, &fast())
        .await
        .unwrap_err();
    assert!(matches!(err, JoinError::TooManyChallenges), "{err}");
    assert_eq!(producer.challenges.len(), 3);
}

#[tokio::test]
async fn a_challenge_for_another_attestor_is_refused() {
    let (pki, key) = (Pki::new(), NodeKey::generate().unwrap());
    let mut script = Script::new(&pki, &key, [Reply::Challenge("x509pop")]);
    let mut producer = Answering { challenges: vec![] };
    let err = run(&mut script, &pki.trust, &mut producer, None, &key, &fast())
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "the host sent a challenge of attestor x509pop, not tpm"
    );
    assert!(producer.challenges.is_empty());
}

#[tokio::test]
async fn a_token_join_answers_no_challenge() {
    let (pki, key) = (Pki::new(), NodeKey::generate().unwrap());
    let mut script = Script::new(&pki, &key, [Reply::Challenge("join-token")]);
    let err = token_join(&mut script, &fast()).await.unwrap_err();
    assert!(
        matches!(err, JoinError::Producer(ProducerError::NoChallenges { .. })),
        "{err}"
    );
}

#[tokio::test]
async fn denial_and_foreign_responses_end_the_join() {
    let (pki, key) = (Pki::new(), NodeKey::generate().unwrap());
    let mut script = Script::new(&pki, &key, [Reply::Denied]);
    let err = token_join(&mut script, &fast()).await.unwrap_err();
    assert_eq!(err.to_string(), "join refused: ACCESS_DENIED");
    let mut script = Script::new(&pki, &key, [Reply::OtherCsr]);
    let err = token_join(&mut script, &fast()).await.unwrap_err();
    assert!(
        matches!(err, JoinError::Response(ResponseError::OtherRequest)),
        "{err}"
    );
}

#[tokio::test]
async fn a_token_that_cannot_be_sealed_stops_before_sending() {
    let (mut pki, key) = (Pki::new(), NodeKey::generate().unwrap());
    pki.trust.join_encryption_key = vec![1, 2, 3];
    let mut script = Script::new(&pki, &key, []);
    let err = token_join(&mut script, &fast()).await.unwrap_err();
    assert!(matches!(err, JoinError::Seal(_)), "{err}");
    assert!(script.seen.is_empty());
}

#[test]
fn join_is_send() {
    fn send<T: Send>(_: &T) {}
    let (pki, key) = (Pki::new(), NodeKey::generate().unwrap());
    let client = JoinClient::new("https://localhost:1", &pki.trust).unwrap();
    let mut producer = TokenProducer::new(Role::Node);
    let options = fast();
    let fut = join(&client, &pki.trust, &mut producer, None, &key, &options);
    send(&fut);
}

#[test]
fn client_setup_refusals() {
    let pki = Pki::new();
    let setup = |server: &str, trust: &JoinTrust| match JoinClient::new(server, trust) {
        Err(JoinError::Setup(m)) => m,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        setup("http://h:1", &pki.trust),
        "server URL http://h:1 is not https"
    );
    assert!(setup("not a url", &pki.trust).starts_with("server URL not a url"));
    let mut no_ca = pki.trust.clone();
    no_ca.tls_ca_pem = String::new();
    assert_eq!(
        setup("https://h:1", &no_ca),
        "tlsCaPem holds no certificate"
    );
}

#[test]
fn errors_display() {
    let host = JoinError::Host {
        status: 500,
        code: "INTERNAL".into(),
        message: "Internal error".into(),
    };
    assert_eq!(
        host.to_string(),
        "the host answered HTTP 500: INTERNAL Internal error"
    );
    assert_eq!(
        JoinError::TooManyChallenges.to_string(),
        "the host sent more than 3 challenges"
    );
    assert_eq!(
        JoinError::TooLarge.to_string(),
        "the host's response is larger than 1048576 bytes"
    );
    assert_eq!(
        JoinError::Response(ResponseError::WrongKey).to_string(),
        "the host's response was rejected: the response is signed by another key than the pinned one"
    );
}

mod https {
    //! JoinClient against a local HTTPS server with a certificate from a test TLS CA.

    use crate::testutil::{TlsCa, serve_https, tls_ca};

    use super::*;

    /// Serves one request without asking for a client certificate; returns the URL and the
    /// request it read.
    async fn serve(
        ca: &TlsCa,
        status: &'static str,
        body: Vec<u8>,
    ) -> (
        String,
        impl Future<Output = Result<Vec<u8>, tokio::task::JoinError>>,
    ) {
        let (url, task) = serve_https(ca, None, status, body).await;
        (url, async move { task.await.map(|s| s.request) })
    }

    fn request() -> JoinRequest {
        JoinRequest {
            attestor: "join-token".into(),
            role: Role::Node,
            sealed_token: Some(vec![1; 40]),
            attestation: vec![],
            csr: vec![2; 8],
            claims: Claims::default(),
            round: 1,
        }
    }

    fn trust_for(ca: &TlsCa) -> JoinTrust {
        let mut trust = Pki::new().trust;
        trust.tls_ca_pem = ca.pem.clone();
        trust
    }

    #[tokio::test]
    async fn posts_json_and_reads_the_response() {
        let ca = tls_ca();
        let pki = Pki::new();
        let response = pki.respond(&joined_body(&[1; 32], "node_a", vec![]));
        let (url, server) = serve(&ca, "200 OK", serde_json::to_vec(&response).unwrap()).await;
        let client = JoinClient::new(&url, &trust_for(&ca)).unwrap();
        assert_eq!(client.send(&request()).await.unwrap(), response);
        let seen = String::from_utf8(server.await.unwrap()).unwrap();
        assert!(seen.starts_with("POST /v1/join HTTP/1.1\r\n"), "{seen}");
        let body = &seen[seen.find("\r\n\r\n").unwrap() + 4..];
        assert_eq!(
            serde_json::from_str::<JoinRequest>(body).unwrap(),
            request()
        );
    }

    #[tokio::test]
    async fn access_denied_is_a_denial() {
        let ca = tls_ca();
        let body = br#"{"code":"ACCESS_DENIED","message":"Join refused"}"#.to_vec();
        let (url, _server) = serve(&ca, "403 Forbidden", body).await;
        let client = JoinClient::new(&url, &trust_for(&ca)).unwrap();
        assert!(matches!(
            client.send(&request()).await,
            Err(JoinError::Denied)
        ));
    }

    #[tokio::test]
    async fn other_errors_keep_their_status_and_code() {
        let ca = tls_ca();
        let body = br#"{"code":"INVALID_INPUT","message":"Bad request"}"#.to_vec();
        let (url, _server) = serve(&ca, "400 Bad Request", body).await;
        let client = JoinClient::new(&url, &trust_for(&ca)).unwrap();
        let err = client.send(&request()).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "the host answered HTTP 400: INVALID_INPUT Bad request"
        );
        // A 403 that is not ACCESS_DENIED is not a denial.
        let (url, _server) = serve(&ca, "403 Forbidden", b"nope".to_vec()).await;
        let client = JoinClient::new(&url, &trust_for(&ca)).unwrap();
        let err = client.send(&request()).await.unwrap_err();
        assert!(matches!(err, JoinError::Host { status: 403, .. }), "{err}");
    }

    #[tokio::test]
    async fn a_server_certificate_from_another_ca_is_refused() {
        let (pinned, other) = (tls_ca(), tls_ca());
        let (url, _server) = serve(&other, "200 OK", b"{}".to_vec()).await;
        let client = JoinClient::new(&url, &trust_for(&pinned)).unwrap();
        let err = client.send(&request()).await.unwrap_err();
        // Said as what it is: not "cannot reach the host".
        assert!(matches!(err, JoinError::Untrusted(_)), "{err}");
        assert!(err.to_string().starts_with("TLS trust failure"), "{err}");
        // A host that is not there at all is a transport failure.
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        let client =
            JoinClient::new(&format!("https://127.0.0.1:{port}"), &trust_for(&pinned)).unwrap();
        let err = client.send(&request()).await.unwrap_err();
        assert!(matches!(err, JoinError::Transport(_)), "{err}");
    }

    #[test]
    fn an_error_line_names_each_cause_once() {
        #[derive(Debug, thiserror::Error)]
        #[error("inner")]
        struct Inner;
        #[derive(Debug, thiserror::Error)]
        #[error("outer: {0}")]
        struct Repeats(#[source] Inner);
        #[derive(Debug, thiserror::Error)]
        #[error("outer")]
        struct Plain(#[source] Inner);
        assert_eq!(error_line(&Repeats(Inner)), "outer: inner");
        assert_eq!(error_line(&Plain(Inner)), "outer: inner");
    }

    #[tokio::test]
    async fn an_oversized_body_is_refused() {
        let ca = tls_ca();
        let (url, _server) = serve(&ca, "200 OK", vec![b' '; MAX_BODY + 1]).await;
        let client = JoinClient::new(&url, &trust_for(&ca)).unwrap();
        assert!(matches!(
            client.send(&request()).await,
            Err(JoinError::TooLarge)
        ));
    }
}
