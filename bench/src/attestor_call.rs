//! `attestor_call_us_wasm` vs `attestor_call_us_native`: join-token's verify of one valid
//! token, as a component (fresh store and instance each call, through the host's imports) and
//! as the same crate compiled natively (through the SDK's traits, over the SDK test kit's
//! in-memory transaction), both in memory so neither pays for a database.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context as _, bail, ensure};
use gatehouse_attestor_join_token::JoinToken;
use gatehouse_sdk::Attestor as _;
use sha2::{Digest, Sha256};

use crate::median;
use crate::memory::MemoryStore;
use gatehouse::imports::Session;
use gatehouse::pki::Pki;
use gatehouse::pki::native::NativeCrypto;
use gatehouse::runtime::bindings::transaction::{Token, TokenExpect};
use gatehouse::runtime::bindings::types::{self as wit, TokenRole};
use gatehouse::runtime::{Runtime, RuntimeConfig};

/// Medians in microseconds.
pub(super) struct Measured {
    pub wasm_us: f64,
    pub native_us: f64,
    /// Where a component call's time goes ([`gatehouse::runtime::CallPhases`]): waiting for the
    /// attestor's guest thread (zero unless the call ran a whole epoch tick and moved there), a
    /// fresh store and instance, `verify` itself (the guest and the host imports it calls), and
    /// the rest (a call share and instance slot, the outcome's checks).
    pub wasm_queued_us: f64,
    pub wasm_instantiate_us: f64,
    pub wasm_verify_us: f64,
    pub wasm_rest_us: f64,
}

const SECRET: [u8; 32] = [7; 32];
const TOKEN_ID: &str = "tok_bench";
const NOW: i64 = 1_800_000_000_000;

fn token() -> Token {
    Token {
        id: TOKEN_ID.into(),
        role: TokenRole::Node,
        secret_sha256: Sha256::digest(SECRET).to_vec(),
        tenant_id: "root".into(),
        pool_id: None,
        site_id: None,
        expires_at: NOW + 3_600_000,
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

/// The same row as the SDK's type.
fn sdk_token(t: &Token) -> gatehouse_sdk::Token {
    gatehouse_sdk::Token {
        id: t.id.clone(),
        role: match t.role {
            TokenRole::Node => gatehouse_sdk::TokenRole::Node,
            TokenRole::Site => gatehouse_sdk::TokenRole::Site,
            TokenRole::Provisioned => gatehouse_sdk::TokenRole::Provisioned,
            TokenRole::Discovery => gatehouse_sdk::TokenRole::Discovery,
        },
        secret_sha256: t.secret_sha256.clone(),
        tenant_id: t.tenant_id.clone(),
        pool_id: t.pool_id.clone(),
        site_id: t.site_id.clone(),
        expires_at: t.expires_at,
        revoked: t.revoked,
        uses_left: t.uses_left,
        expect: gatehouse_sdk::TokenExpect {
            product_uuid: t.expect.product_uuid.clone(),
            mac: t.expect.mac.clone(),
            node_id: t.expect.node_id.clone(),
        },
        reclaim: t.reclaim,
    }
}

fn host_request() -> wit::JoinRequest {
    wit::JoinRequest {
        attestor: "join-token".into(),
        role: wit::JoinRole::Node,
        attestation: vec![],
        token: Some(wit::OpenedToken {
            id: TOKEN_ID.into(),
            secret: SECRET.to_vec(),
        }),
        csr_der: vec![0x30; 300],
        csr_sha256: vec![1; 32],
        csr_spki_sha256: vec![2; 32],
        claims: wit::HardwareClaims {
            macs: vec!["aa:bb:cc:dd:ee:ff".into()],
            product_uuid: None,
        },
        round: 1,
    }
}

fn sdk_request() -> gatehouse_sdk::JoinRequest {
    gatehouse_sdk::JoinRequest {
        attestor: "join-token".into(),
        role: gatehouse_sdk::JoinRole::Node,
        attestation: vec![],
        token: Some(gatehouse_sdk::OpenedToken {
            id: TOKEN_ID.into(),
            secret: SECRET.to_vec(),
        }),
        csr_der: vec![0x30; 300],
        csr_sha256: vec![1; 32],
        csr_spki_sha256: vec![2; 32],
        claims: gatehouse_sdk::HardwareClaims {
            macs: vec!["aa:bb:cc:dd:ee:ff".into()],
            product_uuid: None,
        },
        round: 1,
    }
}

pub(super) async fn measure(iterations: usize) -> anyhow::Result<Measured> {
    let pki = Arc::new(Pki::generate("bench.invalid")?);
    let runtime: Runtime<MemoryStore> = Runtime::load(
        &RuntimeConfig::default(),
        gatehouse::app::builtin_attestors(),
    )
    .await
    .context("loading the built-in attestors")?;
    let request = Arc::new(host_request());

    let mut wasm = Vec::with_capacity(iterations);
    let (mut queued, mut instantiate, mut verify, mut rest) = (
        Vec::with_capacity(iterations),
        Vec::with_capacity(iterations),
        Vec::with_capacity(iterations),
        Vec::with_capacity(iterations),
    );
    for i in 0..iterations + iterations / 10 {
        let session = Session::new(
            "join-token",
            MemoryStore::new(NOW, [token()]),
            pki.clone(),
            vec![1; 32],
        );
        let started = Instant::now();
        let call = runtime.verify("join-token", session, &request).await;
        let took = started.elapsed();
        match call.result {
            Ok(wit::Outcome::Admitted(_)) => {}
            other => bail!(
                "the join-token component did not admit the benchmark token: {:?}",
                other.map(|_| ())
            ),
        }
        if i >= iterations / 10 {
            wasm.push(took); // the first tenth warms caches and the pool
            let phases = call.phases;
            queued.push(phases.queued);
            instantiate.push(phases.instantiate);
            verify.push(call.elapsed.saturating_sub(phases.instantiate));
            rest.push(took.saturating_sub(call.elapsed + phases.queued));
        }
    }

    let sdk_req = sdk_request();
    let mut native = Vec::with_capacity(iterations);
    for i in 0..iterations + iterations / 10 {
        let tx = gatehouse_sdk_test::MemoryTx::new(NOW);
        tx.insert_token(sdk_token(&token()));
        let crypto = NativeCrypto {
            pki: &pki,
            attestor: "join-token",
        };
        let started = Instant::now();
        let attestor = JoinToken::configure("{}").map_err(anyhow::Error::msg)?;
        let outcome = attestor.verify(
            &gatehouse_sdk::Context {
                tx: &tx,
                crypto: &crypto,
                tpm: &gatehouse_sdk::NoTpm,
            },
            &sdk_req,
        );
        let took = started.elapsed();
        ensure!(
            matches!(outcome, gatehouse_sdk::Outcome::Admitted(_)),
            "the native join-token did not admit the benchmark token"
        );
        if i >= iterations / 10 {
            native.push(took);
        }
    }
    Ok(Measured {
        wasm_us: median(wasm),
        native_us: median(native),
        wasm_queued_us: median(queued),
        wasm_instantiate_us: median(instantiate),
        wasm_verify_us: median(verify),
        wasm_rest_us: median(rest),
    })
}
