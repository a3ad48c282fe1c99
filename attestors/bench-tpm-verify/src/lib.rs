//! The tpm attestor's round-2 checks compiled into a component: the AK's attributes, the quote
//! (signature, type, nonce, PCR digest) and the node key's TPM2_Certify, all with
//! `gatehouse-tpm` and RustCrypto's P-256 inside wasm, never through the host's `tpm` import.
//! `gatehouse bench` times it against the same checks run natively with aws-lc-rs
//! (`tpm_verify_us_wasm` vs `tpm_verify_us_native`), so the design's choice of a native import
//! is measured, not assumed. It is a benchmark component only: it is never built in.

use gatehouse_proto::tpm::{TpmCertifiedKey, TpmQuote};
use gatehouse_sdk::{AttestationResult, Attestor, Context, Info, JoinRequest, Outcome, refuse};
use gatehouse_tpm::{PcrValue, Verifier};
use serde::{Deserialize, Serialize};

/// The evidence: an AK, a quote by it over `nonce`, and its certification of the node key
/// over the request's CSR hash.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Evidence {
    /// The AK public area (TPMT_PUBLIC).
    #[serde(with = "gatehouse_proto::b64")]
    pub ak_public: Vec<u8>,
    /// The quote's extraData.
    #[serde(with = "gatehouse_proto::b64")]
    pub nonce: Vec<u8>,
    /// The quote.
    pub quote: TpmQuote,
    /// The node key's certification.
    pub node_key: TpmCertifiedKey,
}

/// Runs the round-2 checks with `verifier`; the error names the first that failed.
pub fn check(
    attestation: &[u8],
    csr_sha256: &[u8],
    verifier: &dyn Verifier,
) -> Result<(), &'static str> {
    let evidence: Evidence = gatehouse_sdk::evidence::json(attestation).map_err(|_| "evidence")?;
    gatehouse_tpm::check_ak(&evidence.ak_public).map_err(|_| "ak")?;
    let pcrs: Vec<PcrValue> = evidence
        .quote
        .pcrs
        .iter()
        .map(|p| PcrValue {
            hash_alg: p.hash_alg,
            index: p.index,
            digest: p.digest.clone(),
        })
        .collect();
    gatehouse_tpm::verify_quote(
        verifier,
        &evidence.ak_public,
        &evidence.quote.attest,
        &evidence.quote.signature,
        &pcrs,
        &evidence.nonce,
    )
    .map_err(|_| "quote")?;
    gatehouse_tpm::verify_certify(
        verifier,
        &evidence.ak_public,
        &evidence.node_key.certify_info,
        &evidence.node_key.signature,
        &evidence.node_key.public,
        csr_sha256,
    )
    .map_err(|_| "certify")?;
    Ok(())
}

/// The benchmark component: admits into tenant `bench` when every check passes.
pub struct TpmVerifyBench;

impl Attestor for TpmVerifyBench {
    fn info() -> Info {
        Info {
            id: "bench-tpm-verify".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            rounds: 1,
        }
    }

    fn configure(_: &str) -> Result<Self, String> {
        Ok(TpmVerifyBench)
    }

    fn verify(&self, _: &Context<'_>, request: &JoinRequest) -> Outcome {
        match check(
            &request.attestation,
            &request.csr_sha256,
            &gatehouse_tpm::RustCryptoVerifier,
        ) {
            Ok(()) => AttestationResult {
                tenant_id: Some("bench".into()),
                ..AttestationResult::default()
            }
            .into(),
            Err(what) => refuse(match what {
                "ak" => "bench-ak",
                "quote" => "bench-quote",
                "certify" => "bench-certify",
                _ => "bench-evidence",
            })
            .into(),
        }
    }
}

gatehouse_sdk::export_attestor!(TpmVerifyBench);
