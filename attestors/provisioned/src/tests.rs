//! provisioned against an in-memory transaction: every branch of [`admit`](super::admit) and
//! of the resolver.

use gatehouse_sdk::{
    AttestationResult, Attestor, Context, HardwareClaims, Inventory, JoinRequest, JoinRole, NoTpm,
    NodeKeyAttestation, OpenedToken, Outcome, TimestampMs, Token, TokenExpect, TokenRole, Workflow,
    reason, refuse,
};
use gatehouse_sdk_test::{MemoryTx, Op, SoftCrypto};
use sha2::Digest as _;

use super::{BAD_EVIDENCE, Provisioned, Target};

const NOW: TimestampMs = 1_790_000_000_000;
const SECRET: &[u8] = b"correct horse battery staple";
const UUID: &str = "4c4c4544-0042-3510-8052-b4c04f384d32";
const OTHER_UUID: &str = "00000000-0000-0000-0000-000000000001";

/// A transaction holding `token`.
fn with(token: Token) -> MemoryTx {
    let tx = MemoryTx::new(NOW);
    tx.insert_token(token);
    tx
}

/// The rows provisioned reads beside the token.
trait Rows {
    /// A workflow in `state` that minted `tok_1` for `node_7`, whose newest inventory reported
    /// `uuid`.
    fn provisioning(self, state: &str, uuid: Option<&str>) -> Self;
    fn uses_left(&self, id: &str) -> u32;
}

impl Rows for MemoryTx {
    fn provisioning(self, state: &str, uuid: Option<&str>) -> Self {
        self.insert_workflow(
            "tok_1",
            Workflow {
                id: "wf_1".into(),
                node_id: "node_7".into(),
                state: state.into(),
                step: "userdata.render".into(),
            },
        );
        self.insert_inventory(Inventory {
            node_id: "node_7".into(),
            product_uuid: uuid.map(str::to_owned),
            macs: vec!["aa:bb:cc:dd:ee:ff".into()],
            recorded_at: NOW - 1,
        });
        self
    }

    fn uses_left(&self, id: &str) -> u32 {
        self.token(id).unwrap().uses_left
    }
}

/// A provisioned token with one use and no `expect`, as a workflow mints it.
fn token() -> Token {
    Token {
        id: "tok_1".into(),
        role: TokenRole::Provisioned,
        secret_sha256: sha2::Sha256::digest(SECRET).to_vec(),
        tenant_id: "ten_1".into(),
        pool_id: Some("pool_1".into()),
        site_id: Some("site_1".into()),
        expires_at: NOW + 1,
        revoked: false,
        uses_left: 1,
        expect: TokenExpect {
            product_uuid: None,
            mac: None,
            node_id: None,
        },
        reclaim: false,
    }
}

fn token_expecting(uuid: &str) -> Token {
    let mut t = token();
    t.expect.product_uuid = Some(uuid.into());
    t
}

fn request(product_uuid: Option<&str>) -> JoinRequest {
    JoinRequest {
        attestor: "provisioned".into(),
        role: JoinRole::Node,
        attestation: Vec::new(),
        token: Some(OpenedToken {
            id: "tok_1".into(),
            secret: SECRET.to_vec(),
        }),
        csr_der: vec![0x30],
        csr_sha256: vec![0; 32],
        csr_spki_sha256: vec![1; 32],
        claims: HardwareClaims {
            macs: vec!["aa:bb:cc:dd:ee:ff".into()],
            product_uuid: product_uuid.map(str::to_owned),
        },
        round: 1,
    }
}

fn verify(tx: &MemoryTx, request: &JoinRequest) -> Outcome {
    let attestor = Provisioned::configure("{}").unwrap();
    let cx = Context {
        tx,
        crypto: &SoftCrypto::new("provisioned", tx.clock()),
        tpm: &NoTpm,
    };
    // Held to `Provisioned::CALLS`, as the component is.
    gatehouse_sdk_test::declared::<Provisioned, _>(&cx, |cx| attestor.verify(cx, request))
}

/// The admission of `tok_1` into its tenant, pool and site, as `node_id`.
fn admitted(node_id: Option<&str>, uuid: &str) -> Outcome {
    Outcome::Admitted(AttestationResult {
        node_id: node_id.map(str::to_owned),
        tenant_id: Some("ten_1".into()),
        pool_id: Some("pool_1".into()),
        site_id: Some("site_1".into()),
        token_id: Some("tok_1".into()),
        subject: Some(format!("product-uuid:{uuid}")),
        node_key: NodeKeyAttestation::Unattested,
        ..AttestationResult::default()
    })
}

/// Asserts a refusal with `code` naming the token, its tenant and `node`, that spent nothing.
#[track_caller]
fn assert_refused(tx: &MemoryTx, request: &JoinRequest, code: &str, node: Option<&str>) {
    let before = tx.uses_left("tok_1");
    let mut expected = refuse(code).token("tok_1").tenant("ten_1");
    expected.node_id = node.map(str::to_owned);
    assert_eq!(verify(tx, request), Outcome::Refused(expected), "{code}");
    assert_eq!(tx.uses_left("tok_1"), before, "{code}: nothing spent");
}

#[test]
fn the_running_workflows_target_is_re_keyed_when_the_uuid_matches() {
    let tx = with(token()).provisioning("running", Some(UUID));
    assert_eq!(
        verify(&tx, &request(Some(UUID))),
        admitted(Some("node_7"), UUID)
    );
    assert_eq!(tx.uses_left("tok_1"), 0, "the token is spent");
    // Spent: the same token never admits again.
    assert_refused(&tx, &request(Some(UUID)), reason::NO_USES_LEFT, None);
}

#[test]
fn uuids_compare_without_case_and_the_subject_is_lowercase() {
    let upper = UUID.to_ascii_uppercase();
    let tx = with(token()).provisioning("running", Some(&upper));
    assert_eq!(
        verify(&tx, &request(Some(&upper))),
        admitted(Some("node_7"), UUID)
    );
}

#[test]
fn another_machine_than_the_targets_inventory_is_a_mismatch() {
    let tx = with(token()).provisioning("running", Some(UUID));
    assert_refused(
        &tx,
        &request(Some(OTHER_UUID)),
        reason::PRODUCT_UUID_MISMATCH,
        Some("node_7"),
    );
}

#[test]
fn without_a_target_expect_product_uuid_binds_a_new_node() {
    let tx = with(token_expecting(UUID));
    assert_eq!(verify(&tx, &request(Some(UUID))), admitted(None, UUID));
    assert_eq!(tx.uses_left("tok_1"), 0);

    let tx = with(token_expecting(UUID));
    assert_refused(
        &tx,
        &request(Some(OTHER_UUID)),
        reason::PRODUCT_UUID_MISMATCH,
        None,
    );
}

#[test]
fn expect_and_target_must_both_match() {
    // The token's expect names one machine, the workflow's inventory another: no claim fits.
    for claim in [UUID, OTHER_UUID] {
        let tx = with(token_expecting(OTHER_UUID)).provisioning("running", Some(UUID));
        assert_refused(
            &tx,
            &request(Some(claim)),
            reason::PRODUCT_UUID_MISMATCH,
            Some("node_7"),
        );
    }
    // Agreeing, they admit as the target.
    let tx = with(token_expecting(UUID)).provisioning("running", Some(UUID));
    assert_eq!(
        verify(&tx, &request(Some(UUID))),
        admitted(Some("node_7"), UUID)
    );
}

#[test]
fn nothing_binding_the_token_is_unbound() {
    // No workflow minted it and it expects nothing.
    let tx = with(token());
    assert_refused(&tx, &request(Some(UUID)), reason::UNBOUND, None);
    // The workflow's node reported no product UUID: a target, but no machine to bind to.
    let tx = with(token()).provisioning("running", None);
    assert_refused(&tx, &request(Some(UUID)), reason::UNBOUND, Some("node_7"));
    // A workflow that is no longer running vouches for nothing.
    for state in ["succeeded", "failed", "cancelled"] {
        let tx = with(token()).provisioning(state, Some(UUID));
        assert_refused(&tx, &request(Some(UUID)), reason::UNBOUND, None);
    }
    // Its expect alone still binds a finished workflow's token, as a new node.
    let tx = with(token_expecting(UUID)).provisioning("succeeded", Some(UUID));
    assert_eq!(verify(&tx, &request(Some(UUID))), admitted(None, UUID));
}

#[test]
fn a_machine_without_a_product_uuid_is_refused() {
    for claim in [None, Some(""), Some("  ")] {
        let tx = with(token_expecting(UUID));
        assert_refused(&tx, &request(claim), reason::NO_PRODUCT_UUID, None);
    }
}

#[test]
fn only_a_single_use_provisioned_token_for_a_node() {
    let mut two = token_expecting(UUID);
    two.uses_left = 2;
    assert_refused(
        &with(two),
        &request(Some(UUID)),
        reason::NOT_SINGLE_USE,
        None,
    );
    let mut spent = token_expecting(UUID);
    spent.uses_left = 0;
    assert_refused(
        &with(spent),
        &request(Some(UUID)),
        reason::NO_USES_LEFT,
        None,
    );
    for role in [TokenRole::Node, TokenRole::Site, TokenRole::Discovery] {
        let mut t = token_expecting(UUID);
        t.role = role;
        assert_refused(&with(t), &request(Some(UUID)), reason::WRONG_ROLE, None);
    }
    for role in [JoinRole::Site, JoinRole::Ramdisk] {
        let mut r = request(Some(UUID));
        r.role = role;
        assert_refused(&with(token_expecting(UUID)), &r, reason::WRONG_ROLE, None);
    }
    let mut revoked = token_expecting(UUID);
    revoked.revoked = true;
    assert_refused(&with(revoked), &request(Some(UUID)), reason::REVOKED, None);
    let mut expired = token_expecting(UUID);
    expired.expires_at = NOW;
    assert_refused(&with(expired), &request(Some(UUID)), reason::EXPIRED, None);
    let mut wrong = request(Some(UUID));
    wrong.token = Some(OpenedToken {
        id: "tok_1".into(),
        secret: b"guess".to_vec(),
    });
    assert_refused(
        &with(token_expecting(UUID)),
        &wrong,
        reason::BAD_SECRET,
        None,
    );
}

#[test]
fn a_request_without_a_token_or_with_evidence_is_refused() {
    let mut r = request(Some(UUID));
    r.token = None;
    assert_eq!(
        verify(&with(token_expecting(UUID)), &r),
        Outcome::Refused(refuse(reason::NO_TOKEN))
    );
    let mut r = request(Some(UUID));
    r.attestation = b"{}".to_vec();
    assert_refused(&with(token_expecting(UUID)), &r, BAD_EVIDENCE, None);
}

#[test]
fn storage_failures_refuse_and_spend_nothing() {
    let tx = with(token()).provisioning("running", Some(UUID));
    tx.fail(Op::TokenWorkflow);
    assert_refused(&tx, &request(Some(UUID)), reason::STORAGE, None);
    let tx = with(token()).provisioning("running", Some(UUID));
    tx.fail(Op::NewestInventory);
    assert_refused(&tx, &request(Some(UUID)), reason::STORAGE, None);
}

#[test]
fn the_resolver_names_the_running_workflows_node_and_its_newest_uuid() {
    let tx = with(token()).provisioning("running", Some(UUID));
    let cx = Context {
        tx: &tx,
        crypto: &SoftCrypto::new("provisioned", tx.clock()),
        tpm: &NoTpm,
    };
    assert_eq!(
        super::resolve_target(&cx, &token()).unwrap(),
        Some(Target {
            node_id: "node_7".into(),
            product_uuid: Some(UUID.into()),
        })
    );
    let mut other = token();
    other.id = "tok_2".into();
    assert_eq!(super::resolve_target(&cx, &other).unwrap(), None);
}

#[test]
fn configuration_is_empty_and_strict() {
    assert!(Provisioned::configure("{}").is_ok());
    assert!(Provisioned::configure(r#"{"graceMs": 1}"#).is_err());
    assert_eq!(Provisioned::info().id, "provisioned");
}
