//! `discovery`, Gatehouse's built-in attestor for commissioning ramdisks (seed: discovery).
//!
//! A bare-metal server PXE-boots a platform ramdisk before anything is installed on it. The
//! ramdisk has no identity of its own, so two parties vouch for it: the iPXE script carries a
//! single-use discovery token bound to the MAC, and the site's boot server (a site node
//! holding the site's boot lease) signs an assertion that it just served that MAC
//! ([`gatehouse_proto::discovery`] defines it). The request carries the sealed token and, as
//! its attestation, the serialized assertion. The attestor admits the ramdisk only if, in this
//! order:
//!
//! 1. the token is a live discovery token with exactly one use left, and the machine asks to
//!    join as `ramdisk` (the SDK's single-use token checks, [`gatehouse_sdk::token::checked_single_use`]);
//! 2. the assertion parses (`bad-evidence`);
//! 3. the token was issued for the assertion's site (`site-mismatch`) and, when it names a
//!    MAC (`expect.mac`), for the asserted one (`mac-mismatch`);
//! 4. the signer is a site node of that site (`unknown-signer`, `signer-not-site`) that is not
//!    retired (`signer-retired`);
//! 5. it holds the `site:<id>:boot` lease at exactly the asserted epoch (`lease-epoch`) and
//!    the lease has not lapsed (`lease-expired`), by database time: a boot server fenced by a
//!    newer holder, or one that stopped renewing, can no longer vouch;
//! 6. the signature (purpose `discovery-assertion`) verifies with the key of one of the
//!    signer's live certificates of its current identity generation, the one the assertion's
//!    `kid` names (`assertion-signature`);
//! 7. the assertion is fresh: database time before the earlier of its `notAfter` and
//!    `issuedAt + maxAgeMs` (`assertion-stale`), and `issuedAt` not more than a minute ahead
//!    (`clock-skew`);
//! 8. the machine claims the asserted MAC (`mac-not-claimed`) and, when the assertion names a
//!    product UUID, claims that one (`product-uuid-mismatch`);
//! 9. with `approval: "unknown-machines"`, a MAC no inventory lists waits for an operator's
//!    approval of a join request (as the approval fixture does: `join-request-denied`,
//!    `join-request-expired`, `join-request-used`, `join-request-mismatch`);
//! 10. the assertion admits one join: the single-use ledger records the SHA-256 of its signing
//!     input (never the signature bytes, which ECDSA lets anyone re-encode) until it would go
//!     stale anyway (`assertion-reused`);
//!
//! and then spends the token. The result places the ramdisk where the token says (tenant,
//! pool, site), as a new node, with a certificate of at most `certTtlSeconds` (≤ 2 h; the host
//! caps every ramdisk certificate at 2 h too) carrying the allowed command kinds
//! (`allowedKinds`) as its `urn:bc:kinds:` statement ([`gatehouse_proto::kinds`]).
//!
//! Only the final round records or spends anything: an approval deferral commits the join
//! request alone, and every check runs again on the round after the approval, so the
//! assertion must still be fresh then (an operator decides within its 15 minutes, or the
//! machine boots again for a new one).
//!
//! The crate is both the component the host loads and an `rlib`: [`Discovery`] runs natively
//! through [`gatehouse_sdk::Attestor`] too.

use gatehouse_proto::discovery::{DiscoveryAssertion, SignedDiscoveryAssertion, is_mac};
use gatehouse_proto::kinds;
use gatehouse_sdk::{
    AttestationResult, Attestor, Context, Info, JoinRequest, JoinRole, Node, NodeKeyAttestation,
    Outcome, Refusal, SignatureScheme, Token, TokenRole, UseError, approval, reason, refuse, token,
};

/// The attestation is not a serialized assertion of `bettercompute.site.v1`, or is malformed
/// (a bad MAC or `kid`, `notAfter` not after `issuedAt`).
pub const BAD_EVIDENCE: &str = "bad-evidence";
/// The token was not issued for the assertion's site.
pub const SITE_MISMATCH: &str = "site-mismatch";
/// The token names another MAC (`expect.mac`) than the one asserted.
pub const MAC_MISMATCH: &str = "mac-mismatch";
/// The assertion's signer is not a node.
pub const UNKNOWN_SIGNER: &str = "unknown-signer";
/// The signer is not a site node of the assertion's site.
pub const SIGNER_NOT_SITE: &str = "signer-not-site";
/// The signer is retired.
pub const SIGNER_RETIRED: &str = "signer-retired";
/// The signer does not hold the site's boot lease at the asserted epoch.
pub const LEASE_EPOCH: &str = "lease-epoch";
/// The signer's boot lease lapsed (it stopped renewing, or released it).
pub const LEASE_EXPIRED: &str = "lease-expired";
/// The signature does not verify with the key of a live certificate of the signer.
pub const ASSERTION_SIGNATURE: &str = "assertion-signature";
/// The assertion is past its `notAfter` or older than `maxAgeMs`.
pub const ASSERTION_STALE: &str = "assertion-stale";
/// The assertion was issued more than [`MAX_FUTURE_MS`] ahead of database time.
pub const CLOCK_SKEW: &str = "clock-skew";
/// The machine does not claim the asserted MAC.
pub const MAC_NOT_CLAIMED: &str = "mac-not-claimed";
/// The operator denied the join request.
pub const JOIN_REQUEST_DENIED: &str = reason::JOIN_REQUEST_DENIED;
/// The join request lapsed before it could admit.
pub const JOIN_REQUEST_EXPIRED: &str = reason::JOIN_REQUEST_EXPIRED;
/// The join request's approval already admitted this CSR.
pub const JOIN_REQUEST_USED: &str = reason::JOIN_REQUEST_USED;
/// The remembered join request is for another subject or CSR.
pub const JOIN_REQUEST_MISMATCH: &str = reason::JOIN_REQUEST_MISMATCH;

/// Default and largest `maxAgeMs`: 15 minutes.
pub const MAX_AGE_MS: u64 = 15 * 60 * 1000;
/// Smallest `maxAgeMs`.
pub const MIN_AGE_MS: u64 = 1_000;
/// Default and largest `certTtlSeconds`: 2 hours.
pub const MAX_CERT_TTL_SECONDS: u32 = 2 * 3600;
/// Smallest `certTtlSeconds`.
pub const MIN_CERT_TTL_SECONDS: u32 = 60;
/// How far ahead of database time an assertion may be issued (the site node's clock).
pub const MAX_FUTURE_MS: i64 = 60_000;
/// Seconds the ramdisk waits between rounds while a join request is pending.
const RETRY_AFTER_SECONDS: u32 = 10;

/// When a machine waits for an operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ApprovalPolicy {
    /// Never: the token and the assertion are enough.
    None,
    /// When no inventory lists the asserted MAC.
    UnknownMachines,
}

/// The `discovery` attestor, configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovery {
    max_age_ms: i64,
    cert_ttl_seconds: u32,
    allowed_kinds: Vec<String>,
    approval: ApprovalPolicy,
}

/// The configuration (the JSON form of `[attestors.discovery] config`).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Config {
    #[serde(default = "max_age")]
    max_age_ms: u64,
    #[serde(default = "max_ttl")]
    cert_ttl_seconds: u32,
    #[serde(default = "commissioning")]
    allowed_kinds: Vec<String>,
    #[serde(default = "no_approval")]
    approval: ApprovalPolicy,
}

fn max_age() -> u64 {
    MAX_AGE_MS
}
fn max_ttl() -> u32 {
    MAX_CERT_TTL_SECONDS
}
fn commissioning() -> Vec<String> {
    kinds::COMMISSIONING_KINDS.map(String::from).to_vec()
}
fn no_approval() -> ApprovalPolicy {
    ApprovalPolicy::None
}

impl Discovery {
    /// The attestor with this configuration, if every value is in range.
    pub fn new(
        max_age_ms: u64,
        cert_ttl_seconds: u32,
        allowed_kinds: Vec<String>,
        approval: ApprovalPolicy,
    ) -> Result<Self, String> {
        if !(MIN_AGE_MS..=MAX_AGE_MS).contains(&max_age_ms) {
            return Err(format!(
                "invalid configuration: maxAgeMs {max_age_ms} is not between {MIN_AGE_MS} and \
                 {MAX_AGE_MS} (15 min)"
            ));
        }
        if !(MIN_CERT_TTL_SECONDS..=MAX_CERT_TTL_SECONDS).contains(&cert_ttl_seconds) {
            return Err(format!(
                "invalid configuration: certTtlSeconds {cert_ttl_seconds} is not between \
                 {MIN_CERT_TTL_SECONDS} and {MAX_CERT_TTL_SECONDS} (2 h)"
            ));
        }
        if !kinds::is_pattern_list(&allowed_kinds) {
            return Err(format!(
                "invalid configuration: allowedKinds must be 1 to {} distinct kinds \
                 (dot-separated lowercase words, optionally ending in .*)",
                kinds::MAX_KINDS
            ));
        }
        Ok(Self {
            // Bounded by the check above.
            max_age_ms: i64::try_from(max_age_ms).map_err(|e| e.to_string())?,
            cert_ttl_seconds,
            allowed_kinds,
            approval,
        })
    }
}

impl Attestor for Discovery {
    fn info() -> Info {
        Info {
            id: "discovery".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            rounds: 2,
        }
    }

    fn configure(config: &str) -> Result<Self, String> {
        let Config {
            max_age_ms,
            cert_ttl_seconds,
            allowed_kinds,
            approval,
        } = gatehouse_sdk::config::parse(config)?;
        Discovery::new(max_age_ms, cert_ttl_seconds, allowed_kinds, approval)
    }

    fn verify(&self, cx: &Context<'_>, request: &JoinRequest) -> Outcome {
        match self.decide(cx, request) {
            Ok(outcome) => outcome,
            Err(refusal) => refusal.into(),
        }
    }
}

gatehouse_sdk::export_attestor!(Discovery);

impl Discovery {
    /// One round.
    fn decide(&self, cx: &Context<'_>, request: &JoinRequest) -> Result<Outcome, Refusal> {
        // 1. The token, not spent yet.
        let token = token::checked_single_use(cx, request, TokenRole::Discovery)?;
        let refusal = |code: &str| refuse(code).token(&token.id).tenant(&token.tenant_id);

        // 2. The assertion.
        let (signed, assertion) =
            parse(&request.attestation).ok_or_else(|| refusal(BAD_EVIDENCE))?;

        // 3. The token is for this site and this MAC.
        if token.site_id.as_deref() != Some(assertion.site_id.as_str()) {
            return Err(refusal(SITE_MISMATCH));
        }
        if let Some(mac) = &token.expect.mac
            && !mac.eq_ignore_ascii_case(&assertion.mac)
        {
            return Err(refusal(MAC_MISMATCH));
        }

        // 4. The signer: a live site node of that site.
        let signer = cx
            .tx
            .node(&assertion.node_id)
            .map_err(|_| refusal(reason::STORAGE))?
            .ok_or_else(|| refusal(UNKNOWN_SIGNER))?;
        if signer.role != JoinRole::Site
            || signer.site_id.as_deref() != Some(assertion.site_id.as_str())
        {
            return Err(refusal(SIGNER_NOT_SITE));
        }
        if signer.retired {
            return Err(refusal(SIGNER_RETIRED));
        }

        // 5. It holds the boot lease at exactly the asserted epoch, now.
        let now = cx.tx.now();
        let lease = cx
            .tx
            .lease(&format!("site:{}:boot", assertion.site_id))
            .map_err(|_| refusal(reason::STORAGE))?;
        match lease {
            Some(l) if l.holder == signer.id && l.epoch == assertion.lease_epoch => {
                if l.expires_at <= now {
                    return Err(refusal(LEASE_EXPIRED));
                }
            }
            _ => return Err(refusal(LEASE_EPOCH)),
        }

        // 6. Its signature, by the key of one of its live certificates.
        verify_signature(cx, &signer, &assertion, &signed).map_err(refusal)?;

        // 7. Freshness, by database time.
        let valid_until = assertion
            .not_after
            .min(assertion.issued_at.saturating_add(self.max_age_ms));
        if now >= valid_until {
            return Err(refusal(ASSERTION_STALE));
        }
        if assertion.issued_at > now.saturating_add(MAX_FUTURE_MS) {
            return Err(refusal(CLOCK_SKEW));
        }

        // 8. The machine is the one the site node booted.
        if !request
            .claims
            .macs
            .iter()
            .any(|m| m.eq_ignore_ascii_case(&assertion.mac))
        {
            return Err(refusal(MAC_NOT_CLAIMED));
        }
        if let Some(uuid) = &assertion.product_uuid
            && !request
                .claims
                .product_uuid
                .as_deref()
                .is_some_and(|claimed| claimed.eq_ignore_ascii_case(uuid))
        {
            return Err(refusal(reason::PRODUCT_UUID_MISMATCH));
        }

        // 9. An unknown machine waits for an operator, when so configured.
        let subject = format!("mac:{}", assertion.mac);
        let approved = if self.approval == ApprovalPolicy::UnknownMachines
            && cx
                .tx
                .inventory_by_mac(&assertion.mac)
                .map_err(|_| refusal(reason::STORAGE))?
                .is_none()
        {
            let details = || approval_details(request, &token, &assertion);
            match approval::request(cx, request, &subject, details, RETRY_AFTER_SECONDS, refusal)? {
                approval::Decision::Waiting(deferral) => return Ok(deferral.into()),
                approval::Decision::Approved(approved) => Some(approved),
            }
        } else {
            None
        };

        // 10. One join per assertion: keyed on what was signed.
        let ledger = format!(
            "discovery:{}",
            hex::encode(cx.crypto.sha256(&signed.signing_input()))
        );
        cx.tx
            .record_use(&ledger, valid_until)
            .map_err(|error| match error {
                UseError::Reused => refusal(reason::ASSERTION_REUSED),
                UseError::Storage => refusal(reason::STORAGE),
            })?;
        if let Some(approved) = approved {
            // Spending fails if the approval lapsed or was used meanwhile: never admit then.
            approved.spend(cx, refusal)?;
        }
        cx.tx
            .consume_token(&token.id)
            .map_err(|_| refusal(reason::STORAGE))?;

        Ok(AttestationResult {
            tenant_id: Some(token.tenant_id.clone()),
            pool_id: token.pool_id.clone(),
            site_id: token.site_id.clone(),
            token_id: Some(token.id.clone()),
            subject: Some(subject),
            node_key: NodeKeyAttestation::Unattested,
            cert_ttl_seconds: Some(self.cert_ttl_seconds),
            allowed_kinds: Some(self.allowed_kinds.clone()),
            ..AttestationResult::default()
        }
        .into())
    }
}

/// The serialized assertion and its payload, bounded; `None` for anything malformed.
fn parse(attestation: &[u8]) -> Option<(SignedDiscoveryAssertion, DiscoveryAssertion)> {
    let text = std::str::from_utf8(attestation).ok()?;
    let signed = SignedDiscoveryAssertion::parse(text.trim()).ok()?;
    let assertion = signed.assertion().ok()?;
    let well_formed = is_mac(&assertion.mac)
        && sane_id(&assertion.site_id)
        && sane_id(&assertion.node_id)
        && assertion.kid.len() == 64
        && assertion.not_after > assertion.issued_at
        && signed.signature.len() == 64;
    well_formed.then_some((signed, assertion))
}

/// Whether `id` can be a node or site id: 1 to 128 bytes of ASCII letters, digits, `_`, `-`
/// and `.` (so it cannot add a `:` to the lease name).
fn sane_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// Checks the signature with the signer's live certificate for the key `kid` names: of its
/// current identity generation, of role site.
fn verify_signature(
    cx: &Context<'_>,
    signer: &Node,
    assertion: &DiscoveryAssertion,
    signed: &SignedDiscoveryAssertion,
) -> Result<(), &'static str> {
    let kid = hex::decode(&assertion.kid).map_err(|_| BAD_EVIDENCE)?;
    let cert = cx
        .tx
        .node_cert_for_key(&signer.id, &kid)
        .map_err(|_| reason::STORAGE)?
        .ok_or(ASSERTION_SIGNATURE)?;
    let now = cx.tx.now();
    let live = cert.node_id == signer.id
        && cert.revoked.is_none()
        && cert.generation == signer.identity_generation
        && cert.role == "site"
        && cert.not_before <= now
        && now < cert.not_after;
    if !live {
        return Err(ASSERTION_SIGNATURE);
    }
    cx.crypto
        .verify_signature(
            SignatureScheme::EcdsaP256Sha256Fixed,
            &cert.spki,
            &signed.signing_input(),
            &signed.signature,
        )
        .map_err(|_| ASSERTION_SIGNATURE)
}

/// What the operator is shown when an unknown machine waits for approval: the assertion and
/// what the machine claims.
fn approval_details(
    request: &JoinRequest,
    token: &Token,
    assertion: &DiscoveryAssertion,
) -> String {
    serde_json::json!({
        "mac": assertion.mac,
        "ip": assertion.ip,
        "productUuid": assertion.product_uuid,
        "workflowId": assertion.workflow_id,
        "siteId": assertion.site_id,
        "vouchedBy": assertion.node_id,
        "leaseEpoch": assertion.lease_epoch,
        "claimedMacs": request.claims.macs,
        "claimedProductUuid": request.claims.product_uuid,
        "tokenId": token.id,
    })
    .to_string()
}

#[cfg(test)]
mod tests;
