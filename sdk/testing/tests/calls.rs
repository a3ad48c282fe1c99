//! `Kit::round` holds an attestor to its `Attestor::CALLS`, as a component is held: a call it
//! does not name fails the test, naming the function, before any host sees it.

use gatehouse_sdk::{
    Attestor, Calls, Context, Info, JoinRequest, Outcome, TokenRole, reason, refuse, token,
};
use gatehouse_sdk_test::{JoinRequestExt as _, Kit, join_request, token_row};

/// Checks the request's token as join-token does, then reads its key/value space: a
/// `kv-get` outside [`Calls::TOKEN`].
struct Nosy;

impl Attestor for Nosy {
    const CALLS: Calls = Calls::TOKEN;

    fn info() -> Info {
        Info {
            id: "nosy".into(),
            version: "0.1.0".into(),
            rounds: 1,
        }
    }

    fn configure(_: &str) -> Result<Self, String> {
        Ok(Nosy)
    }

    fn verify(&self, cx: &Context<'_>, request: &JoinRequest) -> Outcome {
        if let Err(refusal) = token::checked(cx, request) {
            return refusal.into();
        }
        let _ = cx.tx.kv_get("seen");
        refuse(reason::STORAGE).into()
    }
}

/// The same attestor naming every call, the default.
struct Open;

impl Attestor for Open {
    fn info() -> Info {
        Nosy::info()
    }

    fn configure(_: &str) -> Result<Self, String> {
        Ok(Open)
    }

    fn verify(&self, cx: &Context<'_>, request: &JoinRequest) -> Outcome {
        Nosy.verify(cx, request)
    }
}

fn kit_with_token() -> (Kit, JoinRequest) {
    let kit = Kit::new("nosy");
    kit.tx.insert_token(token_row(
        "tok_1",
        TokenRole::Node,
        b"secret",
        kit.tx.now() + 60_000,
    ));
    let request = join_request("nosy").with_token("tok_1", b"secret");
    (kit, request)
}

#[test]
#[should_panic(expected = "the attestor called tx.kv-get, which its Attestor::CALLS does not name")]
fn a_call_the_attestor_does_not_name_fails_the_round() {
    let (kit, request) = kit_with_token();
    kit.round(&Nosy, &request);
}

#[test]
fn the_calls_it_names_pass_through() {
    // The token checks (all in `Calls::TOKEN`) ran before the panic above: an unknown token
    // is refused without reaching `kv-get`.
    let kit = Kit::new("nosy");
    let request = join_request("nosy").with_token("tok_missing", b"secret");
    assert_eq!(
        kit.round(&Nosy, &request),
        refuse(reason::UNKNOWN_TOKEN).token("tok_missing").into()
    );
    // By default every call is named.
    let (kit, request) = kit_with_token();
    assert_eq!(kit.round(&Open, &request), refuse(reason::STORAGE).into());
}
