//! `tpm_verify_us_native` vs `tpm_verify_us_wasm`: the tpm attestor's round-2 checks (the AK's
//! attributes, a quote over a nonce and two SHA-256 PCRs, the AK's TPM2_Certify of a node key)
//! on fixed structures made in-process with software P-256 keys.
//!
//! - native: `gatehouse-tpm` with aws-lc-rs, the path the host's `tpm` import takes;
//! - wasm: the same checks compiled into the `gatehouse-bench-tpm-verify` component with
//!   RustCrypto's P-256 (a fresh store and instance each call, as for every attestor call).
//!
//! Both parse the same JSON evidence. Before timing, each path must admit the valid structures
//! and refuse a quote with one byte flipped, so a broken check cannot look fast.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context as _, bail, ensure};
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _};
use gatehouse_bench_tpm_verify::Evidence;
use gatehouse_proto::tpm::{PcrValue, TpmCertifiedKey, TpmQuote};
use gatehouse_tpm::marshal::{
    AK_ATTRIBUTES, NODE_KEY_ATTRIBUTES, certify_attest, ecc_p256_public, ecdsa_sha256_signature,
    quote_attest,
};
use gatehouse_tpm::{HashAlg, Public};

use crate::median;
use crate::memory::MemoryStore;
use gatehouse::imports::Session;
use gatehouse::imports::tpm::native::AwsLcVerifier;
use gatehouse::pki::Pki;
use gatehouse::runtime::bindings::types as wit;
use gatehouse::runtime::{Runtime, RuntimeConfig};

/// Medians in microseconds.
pub(super) struct Measured {
    pub wasm_us: f64,
    pub native_us: f64,
}

const ID: &str = "bench-tpm-verify";
const NOW: i64 = 1_800_000_000_000;
const CSR_SHA256: [u8; 32] = [0x21; 32];
const NONCE: [u8; 32] = [0x42; 32];

fn p256() -> anyhow::Result<(EcdsaKeyPair, Vec<u8>, Vec<u8>)> {
    let pair = EcdsaKeyPair::generate(&ECDSA_P256_SHA256_FIXED_SIGNING)
        .map_err(|_| anyhow::anyhow!("P-256 key generation failed"))?;
    let point = pair.public_key().as_ref();
    let x = point.get(1..33).context("P-256 point")?.to_vec();
    let y = point.get(33..65).context("P-256 point")?.to_vec();
    Ok((pair, x, y))
}

fn sign(pair: &EcdsaKeyPair, message: &[u8]) -> anyhow::Result<Vec<u8>> {
    let sig = pair
        .sign(&SystemRandom::new(), message)
        .map_err(|_| anyhow::anyhow!("signing failed"))?;
    Ok(ecdsa_sha256_signature(sig.as_ref()))
}

/// The evidence as JSON, valid, and with one quote byte flipped.
fn evidence() -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
    let (ak, ak_x, ak_y) = p256()?;
    let ak_public = ecc_p256_public(AK_ATTRIBUTES, true, &ak_x, &ak_y);
    let (_, node_x, node_y) = p256()?;
    let node_public = ecc_p256_public(NODE_KEY_ATTRIBUTES, false, &node_x, &node_y);
    let pcrs: Vec<PcrValue> = [0u8, 7]
        .iter()
        .map(|i| PcrValue {
            hash_alg: HashAlg::Sha256.id(),
            index: *i,
            digest: vec![i ^ 0x5a; 32],
        })
        .collect();
    let values: Vec<gatehouse_tpm::PcrValue> = pcrs
        .iter()
        .map(|p| gatehouse_tpm::PcrValue {
            hash_alg: p.hash_alg,
            index: p.index,
            digest: p.digest.clone(),
        })
        .collect();
    let digest = gatehouse_tpm::pcr_digest(HashAlg::Sha256, &values)?;
    let attest = quote_attest(&NONCE, &[0, 7], &digest);
    let name = Public::parse(&node_public)?.name;
    let certify_info = certify_attest(&CSR_SHA256, &name);
    let mut evidence = Evidence {
        ak_public,
        nonce: NONCE.to_vec(),
        quote: TpmQuote {
            signature: sign(&ak, &attest)?,
            attest,
            pcrs,
        },
        node_key: TpmCertifiedKey {
            public: node_public,
            signature: sign(&ak, &certify_info)?,
            certify_info,
        },
    };
    let valid = serde_json::to_vec(&evidence)?;
    if let Some(byte) = evidence.quote.attest.get_mut(20) {
        *byte ^= 1;
    }
    let tampered = serde_json::to_vec(&evidence)?;
    Ok((valid, tampered))
}

pub(super) async fn measure(iterations: usize) -> anyhow::Result<Measured> {
    let (valid, tampered) = evidence()?;
    let pki = Arc::new(Pki::generate("bench.invalid")?);
    let runtime: Runtime<MemoryStore> =
        Runtime::load(&RuntimeConfig::default(), crate::components())
            .await
            .context("loading the tpm-verify benchmark component")?;
    let call = |attestation: &[u8]| {
        let session = Session::new(
            ID,
            MemoryStore::new(NOW, []),
            pki.clone(),
            CSR_SHA256.to_vec(),
        );
        let request = Arc::new(crate::join_request(
            ID,
            attestation.to_vec(),
            CSR_SHA256.to_vec(),
        ));
        let runtime = &runtime;
        async move { runtime.verify(ID, session, &request).await.result }
    };
    match call(&tampered).await {
        Ok(wit::Outcome::Refused(r)) if r.reason == "bench-quote" => {}
        other => bail!(
            "the component did not refuse a flipped quote: {:?}",
            other.map(|_| ())
        ),
    }
    ensure!(
        gatehouse_bench_tpm_verify::check(&tampered, &CSR_SHA256, &AwsLcVerifier) == Err("quote"),
        "the native checks did not refuse a flipped quote"
    );

    let mut wasm = Vec::with_capacity(iterations);
    for i in 0..iterations + iterations / 10 {
        let started = Instant::now();
        let result = call(&valid).await;
        let took = started.elapsed();
        if !matches!(result, Ok(wit::Outcome::Admitted(_))) {
            bail!(
                "the component did not admit the valid structures: {:?}",
                result.map(|_| ())
            );
        }
        if i >= iterations / 10 {
            wasm.push(took);
        }
    }
    let mut native = Vec::with_capacity(iterations);
    for i in 0..iterations + iterations / 10 {
        let started = Instant::now();
        let result = gatehouse_bench_tpm_verify::check(&valid, &CSR_SHA256, &AwsLcVerifier);
        let took = started.elapsed();
        ensure!(result.is_ok(), "the native checks did not pass: {result:?}");
        if i >= iterations / 10 {
            native.push(took);
        }
    }
    Ok(Measured {
        wasm_us: median(wasm),
        native_us: median(native),
    })
}

#[cfg(test)]
mod tests {
    /// Both paths admit the valid structures and refuse a flipped quote (checked inside
    /// `measure`), and the figures are real durations.
    #[tokio::test]
    async fn both_paths_check_and_are_timed() -> anyhow::Result<()> {
        let m = super::measure(20).await?;
        anyhow::ensure!(m.wasm_us > 0.0 && m.native_us > 0.0);
        Ok(())
    }
}
