//! join-token against an in-memory transaction: every branch of [`admit`](super::admit).

use gatehouse_sdk::{
    AttestationResult, Attestor, Context, HardwareClaims, JoinRequest, JoinRole, NoTpm,
    NodeKeyAttestation, OpenedToken, Outcome, TimestampMs, Token, TokenExpect, TokenRole, reason,
    refuse,
};
use gatehouse_sdk_test::{MemoryTx, Op, SoftCrypto};
use sha2::Digest as _;

use super::JoinToken;

const NOW: TimestampMs = 1_790_000_000_000;
const SECRET: &[u8] = b"correct horse battery staple";

/// A transaction holding `token`.
fn tx_with(token: Token) -> MemoryTx {
    let tx = MemoryTx::new(NOW);
    tx.insert_token(token);
    tx
}

fn left(tx: &MemoryTx, id: &str) -> u32 {
    tx.token(id).unwrap().uses_left
}

fn token(role: TokenRole) -> Token {
    Token {
        id: "tok_1".into(),
        role,
        secret_sha256: sha2::Sha256::digest(SECRET).to_vec(),
        tenant_id: "ten_1".into(),
        pool_id: Some("pool_1".into()),
        site_id: Some("site_1".into()),
        expires_at: NOW + 1,
        revoked: false,
        uses_left: 2,
        expect: TokenExpect {
            product_uuid: None,
            mac: None,
            node_id: None,
        },
        reclaim: false,
    }
}

fn request(role: JoinRole, secret: &[u8]) -> JoinRequest {
    JoinRequest {
        attestor: "join-token".into(),
        role,
        attestation: Vec::new(),
        token: Some(OpenedToken {
            id: "tok_1".into(),
            secret: secret.to_vec(),
        }),
        csr_der: vec![0x30],
        csr_sha256: vec![0; 32],
        csr_spki_sha256: vec![1; 32],
        claims: HardwareClaims {
            macs: vec!["aa:bb:cc:dd:ee:ff".into()],
            product_uuid: None,
        },
        round: 1,
    }
}

fn verify(tx: &MemoryTx, request: &JoinRequest) -> Outcome {
    let attestor = JoinToken::configure("{}").unwrap();
    let cx = Context {
        tx,
        crypto: &SoftCrypto::new("join-token", tx.clock()),
        tpm: &NoTpm,
    };
    // Held to `JoinToken::CALLS`, as the component is.
    gatehouse_sdk_test::declared::<JoinToken, _>(&cx, |cx| attestor.verify(cx, request))
}

/// Asserts a refusal with `code` that names the token and its tenant and spent nothing.
#[track_caller]
fn assert_refused(tx: &MemoryTx, request: &JoinRequest, code: &str) {
    let before = left(tx, "tok_1");
    assert_eq!(
        verify(tx, request),
        refuse(code).token("tok_1").tenant("ten_1").into()
    );
    assert_eq!(left(tx, "tok_1"), before, "a refusal spent a use");
}

#[test]
fn node_token_admits_node_and_spends_a_use() {
    let tx = tx_with(token(TokenRole::Node));
    let outcome = verify(&tx, &request(JoinRole::Node, SECRET));
    assert_eq!(
        outcome,
        Outcome::Admitted(AttestationResult {
            node_id: None,
            tenant_id: Some("ten_1".into()),
            pool_id: Some("pool_1".into()),
            site_id: Some("site_1".into()),
            token_id: Some("tok_1".into()),
            bindings: Vec::new(),
            node_key: NodeKeyAttestation::Unattested,
            node_key_uri: None,
            cert_ttl_seconds: None,
            allowed_kinds: None,
            subject: Some("token:tok_1".into()),
        })
    );
    assert_eq!(left(&tx, "tok_1"), 1);
}

#[test]
fn site_token_admits_site() {
    let tx = tx_with(token(TokenRole::Site));
    let Outcome::Admitted(result) = verify(&tx, &request(JoinRole::Site, SECRET)) else {
        panic!("site token refused");
    };
    assert_eq!(result.token_id.as_deref(), Some("tok_1"));
    assert_eq!(left(&tx, "tok_1"), 1);
}

#[test]
fn expected_node_is_rekeyed() {
    let mut row = token(TokenRole::Node);
    row.expect.node_id = Some("node_7".into());
    let tx = tx_with(row);
    let Outcome::Admitted(result) = verify(&tx, &request(JoinRole::Node, SECRET)) else {
        panic!("token with expected node refused");
    };
    assert_eq!(result.node_id.as_deref(), Some("node_7"));
}

#[test]
fn last_use_admits() {
    let mut row = token(TokenRole::Node);
    row.uses_left = 1;
    let tx = tx_with(row);
    assert!(matches!(
        verify(&tx, &request(JoinRole::Node, SECRET)),
        Outcome::Admitted(_)
    ));
    assert_eq!(left(&tx, "tok_1"), 0);
}

#[test]
fn request_without_token_is_refused() {
    let tx = tx_with(token(TokenRole::Node));
    let mut request = request(JoinRole::Node, SECRET);
    request.token = None;
    assert_eq!(verify(&tx, &request), refuse(reason::NO_TOKEN).into());
    assert_eq!(left(&tx, "tok_1"), 2);
}

#[test]
fn unknown_token_is_refused() {
    let tx = MemoryTx::new(NOW);
    assert_eq!(
        verify(&tx, &request(JoinRole::Node, SECRET)),
        refuse(reason::UNKNOWN_TOKEN).token("tok_1").into()
    );
}

#[test]
fn storage_failure_while_locking_is_refused() {
    let tx = tx_with(token(TokenRole::Node));
    tx.fail(Op::LockToken);
    assert_eq!(
        verify(&tx, &request(JoinRole::Node, SECRET)),
        refuse(reason::STORAGE).token("tok_1").into()
    );
    assert_eq!(left(&tx, "tok_1"), 2);
}

#[test]
fn wrong_secret_is_refused() {
    let tx = tx_with(token(TokenRole::Node));
    assert_refused(&tx, &request(JoinRole::Node, b"wrong"), reason::BAD_SECRET);
    assert_refused(&tx, &request(JoinRole::Node, b""), reason::BAD_SECRET);
    let mut truncated = SECRET.to_vec();
    truncated.pop();
    assert_refused(
        &tx,
        &request(JoinRole::Node, &truncated),
        reason::BAD_SECRET,
    );
}

#[test]
fn revoked_token_is_refused() {
    let mut row = token(TokenRole::Node);
    row.revoked = true;
    let tx = tx_with(row);
    assert_refused(&tx, &request(JoinRole::Node, SECRET), reason::REVOKED);
}

#[test]
fn token_expires_at_its_expiry() {
    let mut row = token(TokenRole::Node);
    row.expires_at = NOW;
    let tx = tx_with(row);
    assert_refused(&tx, &request(JoinRole::Node, SECRET), reason::EXPIRED);
}

#[test]
fn spent_token_is_refused() {
    let mut row = token(TokenRole::Node);
    row.uses_left = 0;
    let tx = tx_with(row);
    assert_refused(&tx, &request(JoinRole::Node, SECRET), reason::NO_USES_LEFT);
}

#[test]
fn token_admits_only_its_own_role() {
    let token_roles = [
        TokenRole::Node,
        TokenRole::Site,
        TokenRole::Provisioned,
        TokenRole::Discovery,
    ];
    let join_roles = [JoinRole::Node, JoinRole::Site, JoinRole::Ramdisk];
    for token_role in token_roles {
        for join_role in join_roles {
            let tx = tx_with(token(token_role));
            let request = request(join_role, SECRET);
            let admitted = matches!(
                (token_role, join_role),
                (TokenRole::Node, JoinRole::Node) | (TokenRole::Site, JoinRole::Site)
            );
            if admitted {
                assert!(
                    matches!(verify(&tx, &request), Outcome::Admitted(_)),
                    "{token_role:?} token refused {join_role:?}"
                );
            } else {
                assert_refused(&tx, &request, reason::WRONG_ROLE);
            }
        }
    }
}

#[test]
fn storage_failure_while_consuming_is_refused() {
    let tx = tx_with(token(TokenRole::Node));
    tx.fail(Op::ConsumeToken);
    assert_refused(&tx, &request(JoinRole::Node, SECRET), reason::STORAGE);
}

#[test]
fn checks_run_in_order() {
    // A token that fails every check is refused for the first: the secret.
    let mut row = token(TokenRole::Discovery);
    row.revoked = true;
    row.expires_at = NOW - 1;
    row.uses_left = 0;
    let tx = tx_with(row);
    assert_refused(
        &tx,
        &request(JoinRole::Ramdisk, b"wrong"),
        reason::BAD_SECRET,
    );
    assert_refused(&tx, &request(JoinRole::Ramdisk, SECRET), reason::REVOKED);
    tx.update_token("tok_1", |t| t.revoked = false);
    assert_refused(&tx, &request(JoinRole::Ramdisk, SECRET), reason::EXPIRED);
    tx.update_token("tok_1", |t| t.expires_at = NOW + 1);
    assert_refused(
        &tx,
        &request(JoinRole::Ramdisk, SECRET),
        reason::NO_USES_LEFT,
    );
    tx.update_token("tok_1", |t| t.uses_left = 1);
    assert_refused(&tx, &request(JoinRole::Ramdisk, SECRET), reason::WRONG_ROLE);
}

#[test]
fn describes_itself() {
    let info = JoinToken::info();
    assert_eq!(info.id, "join-token");
    assert_eq!(info.version, env!("CARGO_PKG_VERSION"));
    assert_eq!(info.rounds, 1);
}

#[test]
fn configuration_is_empty() {
    assert!(JoinToken::configure("{}").is_ok());
    assert!(JoinToken::configure(" { } ").is_ok());
    let error = JoinToken::configure(r#"{"grace_ms":5}"#).unwrap_err();
    assert!(error.contains("unknown field `grace_ms`"), "{error}");
    assert!(JoinToken::configure("").is_err());
    assert!(JoinToken::configure("[]").is_err());
}

/// [`gatehouse_sdk::token::checked_single_use`] with the in-memory transaction, spending
/// nothing.
fn single_use(
    tx: &MemoryTx,
    role: TokenRole,
    join: JoinRole,
) -> Result<Token, gatehouse_sdk::Refusal> {
    let mut request = request(join, SECRET);
    request.attestor = "provisioned".into();
    gatehouse_sdk::token::checked_single_use(
        &Context {
            tx,
            crypto: &SoftCrypto::new("provisioned", tx.clock()),
            tpm: &NoTpm,
        },
        &request,
        role,
    )
}

#[test]
fn single_use_token_needs_exactly_one_use_left() {
    for (uses_left, expected) in [
        (0, Err(reason::NO_USES_LEFT)),
        (1, Ok(())),
        (2, Err(reason::NOT_SINGLE_USE)),
    ] {
        let mut row = token(TokenRole::Provisioned);
        row.uses_left = uses_left;
        let tx = tx_with(row);
        let checked = single_use(&tx, TokenRole::Provisioned, JoinRole::Node);
        match expected {
            Ok(()) => assert_eq!(checked.unwrap().id, "tok_1"),
            Err(code) => assert_eq!(
                checked.unwrap_err(),
                refuse(code).token("tok_1").tenant("ten_1")
            ),
        }
        assert_eq!(left(&tx, "tok_1"), uses_left, "the check spent a use");
    }
}

#[test]
fn single_use_token_role_must_match() {
    let wrong = refuse(reason::WRONG_ROLE).token("tok_1").tenant("ten_1");
    for (minted, asked, join) in [
        // A node token is no single-use credential, whatever it is asked for.
        (TokenRole::Node, TokenRole::Provisioned, JoinRole::Node),
        (TokenRole::Node, TokenRole::Node, JoinRole::Node),
        // A discovery token admits a ramdisk only, and only to the discovery attestor.
        (TokenRole::Discovery, TokenRole::Provisioned, JoinRole::Node),
        (TokenRole::Discovery, TokenRole::Discovery, JoinRole::Node),
        (
            TokenRole::Provisioned,
            TokenRole::Provisioned,
            JoinRole::Ramdisk,
        ),
    ] {
        let mut row = token(minted);
        row.uses_left = 1;
        let tx = tx_with(row);
        assert_eq!(single_use(&tx, asked, join).unwrap_err(), wrong);
    }
    let mut row = token(TokenRole::Discovery);
    row.uses_left = 1;
    let tx = tx_with(row);
    assert!(single_use(&tx, TokenRole::Discovery, JoinRole::Ramdisk).is_ok());
}

#[test]
fn join_token_refuses_single_use_tokens() {
    for role in [TokenRole::Provisioned, TokenRole::Discovery] {
        let tx = tx_with(token(role));
        assert_refused(&tx, &request(JoinRole::Node, SECRET), reason::WRONG_ROLE);
    }
}
