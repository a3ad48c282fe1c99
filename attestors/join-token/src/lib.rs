//! `join-token`, Gatehouse's built-in attestor: a join token an operator minted admits a
//! machine.
//!
//! The request carries the token JoinService opened (`gh1.<id>.<secret>`). The attestor locks
//! the token's row, checks the secret in constant time, revocation, expiry at database time,
//! the uses left and the role (node tokens admit `node`, site tokens admit `site`; provisioned
//! and discovery tokens belong to their own attestors), spends one use and admits the machine
//! into the token's tenant, pool and site. JoinService then enforces the token's `expect`
//! binding and `reclaim` flag, as for every token-based attestor.
//!
//! The checks are the SDK's ([`gatehouse_sdk::token`]), which every token-based attestor
//! shares. The crate is both the component the host loads and an `rlib`: the host's benchmark
//! runs [`JoinToken`] natively through [`gatehouse_sdk::Attestor`] too.
//!
//! The component leaves out Rust's standard library ([`gatehouse_sdk::no_std_runtime!`]), so
//! it imports nothing from WASI and instantiates faster on every join: it is the attestor
//! most joins go through.

#![cfg_attr(target_arch = "wasm32", no_std)]

extern crate alloc;

use alloc::string::String;

use gatehouse_sdk::{
    AttestationResult, Attestor, Calls, Context, Info, JoinRequest, Outcome, Refusal, token,
};

/// The `join-token` attestor. It has no configuration.
#[derive(Debug)]
pub struct JoinToken;

/// The configuration: empty, and strict, so a key meant for another attestor is caught at load.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {}

impl Attestor for JoinToken {
    /// The token checks' calls only: the component imports 5 host functions, not 25.
    const CALLS: Calls = Calls::TOKEN;

    fn info() -> Info {
        Info {
            id: "join-token".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            rounds: 1,
        }
    }

    fn configure(config: &str) -> Result<Self, String> {
        let Config {} = gatehouse_sdk::config::parse(config)?;
        Ok(JoinToken)
    }

    fn verify(&self, cx: &Context<'_>, request: &JoinRequest) -> Outcome {
        match admit(cx, request) {
            Ok(result) => result.into(),
            Err(refusal) => refusal.into(),
        }
    }
}

gatehouse_sdk::export_attestor!(JoinToken);
gatehouse_sdk::no_std_runtime!();

/// Decides one join with the SDK's token checks, spending a use of the token when it admits.
fn admit(cx: &Context<'_>, request: &JoinRequest) -> Result<AttestationResult, Refusal> {
    let token = token::checked(cx, request)?;
    token::spend(cx, &token)?;
    Ok(token::admission(token))
}

#[cfg(test)]
mod tests;
