//! `tpm`, Gatehouse's built-in TPM attestor: a machine is its TPM's endorsement key (EK).
//!
//! Two rounds (three when an operator approves), the go-attestation enrollment flow ([`gatehouse_proto::tpm`] is the wire
//! contract); every TPM structure is checked by the host's native `tpm` import through
//! [`gatehouse_sdk::Tpm`] (the host's `tpm` imports).
//!
//! 1. **Enroll**: the EK certificate chains to a configured `ekRoots` entry and certifies the
//!    EK public area (`ek-untrusted`); the AK is a restricted signing key that cannot leave the
//!    TPM (`ak-attributes`). The answer is a challenge: MakeCredential of a fresh 32-byte
//!    secret for that EK and AK name, and the attestor's state (secret, EK hash, AK public
//!    area) sealed by the host, bound to the CSR hash and expiring with the challenge (5
//!    minutes). Nothing is written.
//! 2. **Answer**: the state opens for this CSR (`challenge-state`, `challenge-expired`); the
//!    activated secret equals the sealed one, compared in constant time (`bad-secret`): only
//!    the TPM holding the EK, with the AK loaded, could activate it. The quote by the AK is over
//!    extraData `sha256(secret ‖ sha256(csr))` and exactly the PCR values sent
//!    (`quote-signature`, `quote-nonce`, `quote-type`, `quote-malformed`, `pcr-mismatch`), and
//!    they satisfy `pcrPolicy` (`pcr-policy`). The node key's TPM2_Certify by the AK, qualified
//!    by `sha256(csr)`, proves the CSR's key lives in that TPM (`node-key-*`).
//!
//! Where the machine joins is keyed by the SHA-256 of the EK public area: the node that EK is
//! bound to (a reclaim: the result names it), else the `allow` list (a delivery manifest),
//! else a join request an operator approves (`enrollment: approval`, the default), or
//! `unknown-ek` (`enrollment: refuse`). Every admitted result binds `tpm-ek` to the EK hash,
//! so JoinService never lets that EK admit another node (`bound-elsewhere`). A certified node
//! key makes the result `node-key: tpm` with the AK statement `urn:bc:tpm-ak:…`, which every
//! renewal of the certificate must prove again.
//!
//! An approval can take longer than a challenge lives, so once an answer has been verified in
//! full the pending request is remembered in the attestor's key/value space under the CSR hash
//! (`jr:<hex>`, with what the answer proved and the EK and AK public areas); while the request
//! is pending the agent's later rounds with the same CSR are answered from that entry. The
//! approval is bound to the EK the operator saw (the request's subject is `ek:<hash>` and its
//! details carry `ekSha256`), not to whoever sends the CSR first: on the round that finds the
//! request approved, the attestor answers with a fresh MakeCredential challenge for that EK
//! and AK whose sealed state names the request, and admits only an answer to *that* challenge,
//! verified in full, from the same EK (`join-request-ek`). JoinService separately checks that
//! the round's CSR is the request's and the placement the operator's.
//!
//! A challenge answer admits once: the admitting round records `sha256(secret)` in the
//! single-use ledger until the challenge would have expired anyway, so a captured round-2
//! request replayed with the same CSR is refused `challenge-replayed` instead of re-keying the
//! node and revoking the certificate it was just issued.

use gatehouse_proto::tpm::{
    TPM_EVIDENCE_VERSION, TpmAnswer, TpmChallenge, TpmEnrollment, TpmEvidence, ak_statement,
    quote_nonce_input,
};
use gatehouse_sdk::{
    Approval, AttestationResult, Attestor, Binding, Challenge, Context, CryptoError, Deferral,
    Info, JoinRequest, JoinRequestRow, JoinRequestState, JoinRole, NodeKeyAttestation, Outcome,
    Refusal, TpmError, TpmPcrValue, UseError, constant_time_eq, reason, refuse,
};
use serde::{Deserialize, Serialize};

mod config;

pub use config::{AllowEntry, EnrollmentMode, NodeKeyMode, PcrRequirement};

/// The EK certificate does not chain to `ekRoots` or does not certify the EK.
pub const EK_UNTRUSTED: &str = "ek-untrusted";
/// The EK public area does not parse or is sent TPM2B-wrapped.
pub const EK_MALFORMED: &str = "ek-malformed";
/// The AK does not parse.
pub const AK_MALFORMED: &str = "ak-malformed";
/// The AK is not a restricted signing key that cannot leave its TPM.
pub const AK_ATTRIBUTES: &str = "ak-attributes";
/// The answer's state was not sealed by this host for this attestor and CSR.
pub const CHALLENGE_STATE: &str = "challenge-state";
/// The answer came after the challenge's not-after.
pub const CHALLENGE_EXPIRED: &str = "challenge-expired";
/// The quote's signature does not verify with the AK.
pub const QUOTE_SIGNATURE: &str = "quote-signature";
/// The quote is not over `sha256(secret ‖ sha256(csr))`.
pub const QUOTE_NONCE: &str = "quote-nonce";
/// The signed structure is not a quote made by a TPM.
pub const QUOTE_TYPE: &str = "quote-type";
/// The quote does not parse.
pub const QUOTE_MALFORMED: &str = "quote-malformed";
/// The PCR values are not exactly the quoted ones with the quoted digest.
pub const PCR_MISMATCH: &str = "pcr-mismatch";
/// The quoted PCR values do not satisfy `pcrPolicy`.
pub const PCR_POLICY: &str = "pcr-policy";
/// No node is bound to the EK, the allow list does not name it, and enrollment is refused.
pub const UNKNOWN_EK: &str = "unknown-ek";
/// The request carries a join token: a tpm join reads none.
pub const UNEXPECTED_TOKEN: &str = "unexpected-token";
/// MakeCredential failed for this EK: not a storage key of a template the host supports (RSA,
/// or ECC P-256 / P-384; nameAlg SHA-256, -384 or -512; AES-CFB), or an ECC point off its
/// curve.
pub const EK_UNSUPPORTED: &str = "ek-unsupported";
/// The operator denied the join request.
pub const JOIN_REQUEST_DENIED: &str = "join-request-denied";
/// The join request lapsed.
pub const JOIN_REQUEST_EXPIRED: &str = "join-request-expired";
/// The join request's approval already admitted this CSR once.
pub const JOIN_REQUEST_USED: &str = "join-request-used";
/// The approved round proved another EK than the one the operator approved.
pub const JOIN_REQUEST_EK: &str = "join-request-ek";
/// The challenge's answer already admitted a join: a replay.
pub const CHALLENGE_REPLAYED: &str = "challenge-replayed";

/// How long a challenge (and its sealed state) lives: the host's 5-minute maximum.
pub const CHALLENGE_TTL_MS: i64 = 5 * 60 * 1000;
/// Bytes of the MakeCredential secret.
const SECRET_LEN: usize = 32;
/// Most intermediate certificates the enrollment may carry.
const MAX_EK_CHAIN: usize = 6;
/// Seconds the agent waits between rounds while a join request is pending.
const RETRY_AFTER_SECONDS: u32 = 5;
/// The binding kind of an EK.
pub const BINDING_KIND: &str = "tpm-ek";
/// The state format version.
const STATE_VERSION: u8 = 1;

/// The `tpm` attestor, configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tpm {
    config: config::Config,
}

impl Attestor for Tpm {
    /// The host's TPM checks are the whole point: the component imports `tpm`.
    const TPM: bool = true;

    fn info() -> Info {
        Info {
            id: "tpm".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            // Enroll, answer, and on an approval the answer to the fresh challenge for the
            // approved EK (see the module docs).
            rounds: 3,
        }
    }

    fn configure(config: &str) -> Result<Self, String> {
        Ok(Tpm {
            config: config::Config::parse(config)?,
        })
    }

    fn verify(&self, cx: &Context<'_>, request: &JoinRequest) -> Outcome {
        match self.decide(cx, request) {
            Ok(outcome) => outcome,
            Err(refusal) => refusal.into(),
        }
    }
}

gatehouse_sdk::export_attestor!(Tpm);

/// What round 1 seals for round 2.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct State {
    v: u8,
    /// The MakeCredential secret, base64url.
    secret: String,
    /// Lowercase hex SHA-256 of the EK public area.
    ek_sha256: String,
    /// The AK public area, base64url.
    ak_public: String,
    /// The EK public area, base64url (remembered with a pending request, so the approved
    /// round can challenge the EK again).
    ek_public: String,
    /// The approved join request this challenge was issued for (the approved round's fresh
    /// proof of the EK); absent on round 1's challenge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    request: Option<String>,
}

/// What a verified answer proved, remembered while its join request is pending.
#[derive(Serialize, Deserialize, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Proven {
    /// The join request id.
    request_id: String,
    /// Lowercase hex SHA-256 of the EK public area.
    ek_sha256: String,
    /// The AK statement, when the node key was certified.
    ak_statement: Option<String>,
    /// The EK public area, base64url: the approved round challenges it again.
    ek_public: String,
    /// The AK public area, base64url.
    ak_public: String,
    /// Whether the approval admitted this CSR already.
    used: bool,
}

/// What a verified answer proved.
struct Verified {
    /// Lowercase hex SHA-256 of the EK public area the challenge was made for.
    ek_sha256: String,
    /// The AK public area.
    ak_public: Vec<u8>,
    /// The EK public area, base64url.
    ek_public: String,
    /// The AK statement, when the node key was certified.
    ak_statement: Option<String>,
    /// The ledger subject that makes this answer single-use.
    ledger: String,
    /// The approved request the challenge was issued for, if any.
    request: Option<String>,
}

impl Tpm {
    fn decide(&self, cx: &Context<'_>, request: &JoinRequest) -> Result<Outcome, Refusal> {
        if !matches!(request.role, JoinRole::Node | JoinRole::Site) {
            return Err(refuse(reason::WRONG_ROLE));
        }
        if request.token.is_some() {
            return Err(refuse(UNEXPECTED_TOKEN));
        }
        let evidence: TpmEvidence = gatehouse_sdk::evidence::json(&request.attestation)?;
        match evidence {
            TpmEvidence::Enroll(enrollment) => self.enroll(cx, request, &enrollment),
            TpmEvidence::Answer(answer) => self.answer(cx, request, &answer),
        }
    }

    /// Round 1: the EK and AK, answered with a MakeCredential challenge.
    fn enroll(
        &self,
        cx: &Context<'_>,
        request: &JoinRequest,
        enrollment: &TpmEnrollment,
    ) -> Result<Outcome, Refusal> {
        if enrollment.v != TPM_EVIDENCE_VERSION || enrollment.ek_chain.len() > MAX_EK_CHAIN {
            return Err(refuse(reason::MALFORMED_EVIDENCE));
        }
        let ek_sha256 = ek_hash(cx, &enrollment.ek_public)?;
        let now = cx.tx.now();
        cx.tpm
            .verify_ek(
                &enrollment.ek_public,
                &enrollment.ek_certificate,
                &enrollment.ek_chain,
                &self.config.ek_roots,
                now,
            )
            .map_err(|e| match e {
                TpmError::Untrusted(_) => refuse(EK_UNTRUSTED),
                _ => refuse(EK_MALFORMED),
            })?;
        let ak = cx
            .tpm
            .check_ak(&enrollment.ak_public)
            .map_err(|e| match e {
                TpmError::Attributes(_) => refuse(AK_ATTRIBUTES),
                _ => refuse(AK_MALFORMED),
            })?;

        challenge(
            cx,
            request,
            &enrollment.ek_public,
            &ak.name,
            State {
                v: STATE_VERSION,
                secret: String::new(),
                ek_sha256,
                ak_public: gatehouse_sdk::b64url::encode(&enrollment.ak_public),
                ek_public: gatehouse_sdk::b64url::encode(&enrollment.ek_public),
                request: None,
            },
        )
    }

    /// Round 2 (and the rounds after it while a join request is pending).
    fn answer(
        &self,
        cx: &Context<'_>,
        request: &JoinRequest,
        answer: &TpmAnswer,
    ) -> Result<Outcome, Refusal> {
        let key = format!("jr:{}", hex::encode(&request.csr_sha256));
        if let Some(proven) = remembered(cx, &key)? {
            return self.pending(cx, request, answer, &key, proven);
        }
        let verified = self.verify_answer(cx, request, answer)?;
        if verified.request.is_some() {
            // A challenge for an approved request, but no request is remembered for this CSR.
            return Err(refuse(CHALLENGE_STATE));
        }
        self.resolve(cx, request, &key, verified)
    }

    /// Verifies an answer in full: the state opens for this CSR, the secret was activated by
    /// the TPM holding the EK, the quote is over this CSR, the node key is certified.
    fn verify_answer(
        &self,
        cx: &Context<'_>,
        request: &JoinRequest,
        answer: &TpmAnswer,
    ) -> Result<Verified, Refusal> {
        if answer.v != TPM_EVIDENCE_VERSION {
            return Err(refuse(reason::MALFORMED_EVIDENCE));
        }
        let state = open_state(cx, &answer.state, &request.csr_sha256)?;
        let secret = decode(&state.secret)?;
        let ak_public = decode(&state.ak_public)?;
        if !constant_time_eq(&answer.secret, &secret) {
            return Err(refuse(reason::BAD_SECRET));
        }

        // The quote, over this CSR and the secret only this TPM could activate.
        let nonce = cx
            .crypto
            .sha256(&quote_nonce_input(&secret, &request.csr_sha256));
        let pcrs: Vec<TpmPcrValue> = answer
            .quote
            .pcrs
            .iter()
            .map(|p| TpmPcrValue {
                hash_alg: p.hash_alg,
                index: p.index,
                digest: p.digest.clone(),
            })
            .collect();
        let covered = cx
            .tpm
            .verify_quote(
                &ak_public,
                &answer.quote.attest,
                &answer.quote.signature,
                &pcrs,
                &nonce,
            )
            .map_err(|e| {
                refuse(match e {
                    TpmError::BadSignature => QUOTE_SIGNATURE,
                    TpmError::WrongNonce => QUOTE_NONCE,
                    TpmError::WrongType => QUOTE_TYPE,
                    TpmError::PcrMismatch => PCR_MISMATCH,
                    _ => QUOTE_MALFORMED,
                })
            })?;
        if !self.config.pcrs_satisfied(&covered) {
            return Err(refuse(PCR_POLICY));
        }

        // The node key.
        let ak_statement = match &answer.node_key {
            Some(node_key) => {
                let key = cx
                    .tpm
                    .verify_certify(
                        &ak_public,
                        &node_key.certify_info,
                        &node_key.signature,
                        &node_key.public,
                        &request.csr_sha256,
                    )
                    .map_err(|e| refuse(node_key_reason(&e)))?;
                if !constant_time_eq(&cx.crypto.sha256(&key.spki), &request.csr_spki_sha256) {
                    return Err(refuse(reason::NODE_KEY_NOT_CSR));
                }
                let ak = cx
                    .tpm
                    .parse_public(&ak_public)
                    .map_err(|_| refuse(AK_MALFORMED))?;
                Some(ak_statement(&ak.name).ok_or_else(|| refuse(AK_MALFORMED))?)
            }
            None if self.config.node_key == NodeKeyMode::Certified => {
                return Err(refuse(reason::NODE_KEY_NOT_CERTIFIED));
            }
            None => None,
        };

        Ok(Verified {
            ek_sha256: state.ek_sha256,
            ak_public,
            ek_public: state.ek_public,
            ak_statement,
            ledger: format!("challenge:{}", hex::encode(cx.crypto.sha256(&secret))),
            request: state.request,
        })
    }

    /// Where a proven EK joins: its bound node, the allow list, or an operator's approval.
    fn resolve(
        &self,
        cx: &Context<'_>,
        request: &JoinRequest,
        key: &str,
        verified: Verified,
    ) -> Result<Outcome, Refusal> {
        let ek_sha256 = verified.ek_sha256.as_str();
        let ak_statement = verified.ak_statement.clone();
        if let Some(node_id) = cx.tx.bound_node(BINDING_KIND, ek_sha256)? {
            spend_answer(cx, &verified)?;
            let node = cx
                .tx
                .node(&node_id)
                .map_err(|e| Refusal::from(e).node(&node_id))?;
            let mut result = admitted(ek_sha256, ak_statement);
            result.node_id = Some(node_id);
            if let Some(node) = node {
                result.tenant_id = Some(node.tenant_id);
                result.pool_id = node.pool_id;
                result.site_id = node.site_id;
            }
            return Ok(result.into());
        }
        if let Some(entry) = self.config.allow.iter().find(|e| e.ek_sha256 == ek_sha256) {
            spend_answer(cx, &verified)?;
            let mut result = admitted(ek_sha256, ak_statement);
            result.tenant_id = Some(entry.tenant_id.clone());
            result.pool_id.clone_from(&entry.pool_id);
            result.site_id.clone_from(&entry.site_id);
            return Ok(result.into());
        }
        if self.config.enrollment == EnrollmentMode::Refuse {
            return Err(refuse(UNKNOWN_EK));
        }
        let subject = format!("ek:{ek_sha256}");
        let details = serde_json::json!({
            "ekSha256": ek_sha256,
            "nodeKey": if ak_statement.is_some() { "tpm" } else { "unattested" },
            "akStatement": ak_statement,
            "role": role_name(request.role),
            "macs": request.claims.macs,
            "productUuid": request.claims.product_uuid,
        })
        .to_string();
        let row = cx
            .tx
            .open_join_request(&subject, &details)
            .map_err(|_| refuse(reason::STORAGE))?;
        let proven = Proven {
            request_id: row.id.clone(),
            ek_sha256: ek_sha256.to_owned(),
            ak_statement,
            ek_public: verified.ek_public.clone(),
            ak_public: gatehouse_sdk::b64url::encode(&verified.ak_public),
            used: false,
        };
        remember(cx, key, &proven)?;
        self.pending_with(cx, request, None, key, proven, row)
    }

    /// A later round of a join whose answer was verified in full and is waiting for an
    /// operator.
    fn pending(
        &self,
        cx: &Context<'_>,
        request: &JoinRequest,
        answer: &TpmAnswer,
        key: &str,
        proven: Proven,
    ) -> Result<Outcome, Refusal> {
        if proven.used {
            return Err(refuse(JOIN_REQUEST_USED));
        }
        let row = cx
            .tx
            .join_request(&proven.request_id)
            .map_err(|_| refuse(reason::STORAGE))?
            .ok_or_else(|| refuse(JOIN_REQUEST_EXPIRED))?;
        self.pending_with(cx, request, Some(answer), key, proven, row)
    }

    /// Defers while the request is pending; once it is approved, challenges the approved EK
    /// afresh and admits once, on a verified answer to that challenge.
    fn pending_with(
        &self,
        cx: &Context<'_>,
        request: &JoinRequest,
        answer: Option<&TpmAnswer>,
        key: &str,
        mut proven: Proven,
        row: JoinRequestRow,
    ) -> Result<Outcome, Refusal> {
        if row.subject != format!("ek:{}", proven.ek_sha256) || row.csr_sha256 != request.csr_sha256
        {
            return Err(refuse(CHALLENGE_STATE));
        }
        match row.state {
            JoinRequestState::Pending => Ok(Deferral::Approval(Approval {
                request_id: row.id,
                retry_after_seconds: RETRY_AFTER_SECONDS,
            })
            .into()),
            JoinRequestState::Denied => Err(refuse(JOIN_REQUEST_DENIED)),
            JoinRequestState::Expired => Err(refuse(JOIN_REQUEST_EXPIRED)),
            JoinRequestState::Used => Err(refuse(JOIN_REQUEST_USED)),
            JoinRequestState::Approved => {
                // Only an answer to a challenge issued for this approved request proves that
                // the TPM the operator approved is the one asking now; anything else (the
                // answer the agent sent while waiting, or a captured one) is challenged.
                let fresh = answer.filter(|a| {
                    open_state(cx, &a.state, &request.csr_sha256)
                        .is_ok_and(|s| s.request.as_deref() == Some(row.id.as_str()))
                });
                let Some(answer) = fresh else {
                    return self.challenge_approved(cx, request, &proven, &row.id);
                };
                let verified = self.verify_answer(cx, request, answer)?;
                if verified.ek_sha256 != proven.ek_sha256 {
                    return Err(refuse(JOIN_REQUEST_EK));
                }
                spend_answer(cx, &verified)?;
                // Consuming fails if the approval lapsed or was used in between.
                cx.tx
                    .consume_join_request(&row.id)
                    .map_err(|_| refuse(JOIN_REQUEST_EXPIRED))?;
                proven.used = true;
                remember(cx, key, &proven)?;
                // The AK of this round's answer certified the node key.
                let mut result = admitted(&proven.ek_sha256, verified.ak_statement);
                result.tenant_id = row.tenant_id;
                result.pool_id = row.pool_id;
                result.site_id = row.site_id;
                Ok(result.into())
            }
        }
    }

    /// A MakeCredential challenge for the approved EK and the AK its answer proved, whose
    /// state names the approved request.
    fn challenge_approved(
        &self,
        cx: &Context<'_>,
        request: &JoinRequest,
        proven: &Proven,
        request_id: &str,
    ) -> Result<Outcome, Refusal> {
        let ek_public = decode(&proven.ek_public).map_err(|_| refuse(reason::STORAGE))?;
        let ak_public = decode(&proven.ak_public).map_err(|_| refuse(reason::STORAGE))?;
        let ak = cx
            .tpm
            .check_ak(&ak_public)
            .map_err(|_| refuse(reason::STORAGE))?;
        challenge(
            cx,
            request,
            &ek_public,
            &ak.name,
            State {
                v: STATE_VERSION,
                secret: String::new(),
                ek_sha256: proven.ek_sha256.clone(),
                ak_public: proven.ak_public.clone(),
                ek_public: proven.ek_public.clone(),
                request: Some(request_id.to_owned()),
            },
        )
    }
}

/// A MakeCredential challenge of a fresh secret for `ek_public` and the AK named `ak_name`,
/// with `state` (its secret filled in here) sealed for this CSR until the challenge expires.
fn challenge(
    cx: &Context<'_>,
    request: &JoinRequest,
    ek_public: &[u8],
    ak_name: &[u8],
    mut state: State,
) -> Result<Outcome, Refusal> {
    let mut secret = [0u8; SECRET_LEN];
    getrandom::fill(&mut secret).map_err(|_| refuse(reason::STORAGE))?;
    let credential = cx
        .tpm
        .make_credential(ek_public, ak_name, &secret)
        .map_err(|_| refuse(EK_UNSUPPORTED))?;
    state.secret = gatehouse_sdk::b64url::encode(&secret);
    let plaintext = serde_json::to_vec(&state).map_err(|_| refuse(reason::STORAGE))?;
    let not_after = cx.tx.now().saturating_add(CHALLENGE_TTL_MS);
    let sealed = cx
        .crypto
        .seal_state_until(&plaintext, &request.csr_sha256, not_after);
    let payload = serde_json::to_vec(&TpmChallenge {
        v: TPM_EVIDENCE_VERSION,
        credential_blob: credential.credential_blob,
        encrypted_secret: credential.encrypted_secret,
        state: sealed,
    })
    .map_err(|_| refuse(reason::STORAGE))?;
    Ok(Deferral::Challenge(Challenge { payload, not_after }).into())
}

/// Records the verified answer in the single-use ledger until its challenge would have
/// expired anyway: the admitting round's answer never admits again (`challenge-replayed`).
fn spend_answer(cx: &Context<'_>, verified: &Verified) -> Result<(), Refusal> {
    let until = cx.tx.now().saturating_add(CHALLENGE_TTL_MS);
    cx.tx
        .record_use(&verified.ledger, until)
        .map_err(|e| match e {
            UseError::Reused => refuse(CHALLENGE_REPLAYED),
            UseError::Storage => refuse(reason::STORAGE),
        })
}

/// The result for a proven EK, before placement.
fn admitted(ek_sha256: &str, ak_statement: Option<String>) -> AttestationResult {
    AttestationResult {
        bindings: vec![Binding {
            kind: BINDING_KIND.into(),
            value: ek_sha256.to_owned(),
        }],
        node_key: if ak_statement.is_some() {
            NodeKeyAttestation::Tpm
        } else {
            NodeKeyAttestation::Unattested
        },
        node_key_uri: ak_statement,
        subject: Some(format!("ek:{ek_sha256}")),
        ..AttestationResult::default()
    }
}

/// The seed's reason for a failed node-key certification.
fn node_key_reason(e: &TpmError) -> &'static str {
    match e {
        TpmError::BadSignature => reason::NODE_KEY_SIGNATURE,
        TpmError::WrongNonce => reason::NODE_KEY_NONCE,
        TpmError::WrongName => reason::NODE_KEY_NAME,
        TpmError::Attributes(_) => reason::NODE_KEY_ATTRIBUTES,
        _ => reason::NODE_KEY_MALFORMED,
    }
}

/// The lowercase hex SHA-256 of the EK public area, which must be a bare TPMT_PUBLIC, so one
/// EK has one hash.
///
/// `tpm-parse-public` also reads a TPM2B_PUBLIC (a 16-bit size equal to the rest's length in
/// front), so bytes it read as one are refused: for a SHA-256 nameAlg the name must be
/// `000b ‖ sha256(bytes)`, and for the high-range templates' SHA-384 or SHA-512 nameAlg, whose
/// digest this component does not compute, the first two bytes must not be such a size.
fn ek_hash(cx: &Context<'_>, ek_public: &[u8]) -> Result<String, Refusal> {
    let hash = cx.crypto.sha256(ek_public);
    let info = cx
        .tpm
        .parse_public(ek_public)
        .map_err(|_| refuse(EK_MALFORMED))?;
    let bare = match info.name_alg {
        SHA256_ALG => {
            let mut name = vec![0x00, 0x0b];
            name.extend_from_slice(&hash);
            info.name == name
        }
        _ => match ek_public.split_first_chunk::<2>() {
            Some((size, rest)) => usize::from(u16::from_be_bytes(*size)) != rest.len(),
            None => false,
        },
    };
    if !bare {
        return Err(refuse(EK_MALFORMED));
    }
    Ok(hex::encode(hash))
}

/// TPM_ALG_SHA256.
const SHA256_ALG: u16 = 0x000b;

/// Opens round 1's state for this CSR.
fn open_state(cx: &Context<'_>, sealed: &[u8], csr_sha256: &[u8]) -> Result<State, Refusal> {
    let plaintext = cx
        .crypto
        .open_state(sealed, csr_sha256)
        .map_err(|e| match e {
            CryptoError::Expired => refuse(CHALLENGE_EXPIRED),
            _ => refuse(CHALLENGE_STATE),
        })?;
    let state: State = serde_json::from_slice(&plaintext).map_err(|_| refuse(CHALLENGE_STATE))?;
    if state.v != STATE_VERSION {
        return Err(refuse(CHALLENGE_STATE));
    }
    Ok(state)
}

fn decode(text: &str) -> Result<Vec<u8>, Refusal> {
    gatehouse_sdk::b64url::decode(text).map_err(|_| refuse(CHALLENGE_STATE))
}

/// The remembered verified answer for this CSR, if any.
fn remembered(cx: &Context<'_>, key: &str) -> Result<Option<Proven>, Refusal> {
    match cx.tx.kv_get(key).map_err(|_| refuse(reason::STORAGE))? {
        None => Ok(None),
        Some(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|_| refuse(reason::STORAGE)),
    }
}

fn remember(cx: &Context<'_>, key: &str, proven: &Proven) -> Result<(), Refusal> {
    let bytes = serde_json::to_vec(proven).map_err(|_| refuse(reason::STORAGE))?;
    cx.tx
        .kv_put(key, &bytes)
        .map_err(|_| refuse(reason::STORAGE))
}

fn role_name(role: JoinRole) -> &'static str {
    match role {
        JoinRole::Node => "node",
        JoinRole::Site => "site",
        JoinRole::Ramdisk => "ramdisk",
    }
}

#[cfg(test)]
mod tests;
