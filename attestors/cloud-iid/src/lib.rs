//! `cloud-iid`, Gatehouse's built-in attestor: a cloud VM that a managed account created
//! proves it with the identity document its cloud signs, and needs no token.
//!
//! The evidence ([`gatehouse_proto::cloud_iid`]) names a provider and carries its document:
//!
//! - `aws`: the instance identity document and its PKCS#7 signature by the region's AWS
//!   certificate; identity (`accountId`, `instanceId`), age from `pendingTime`;
//! - `gcp`: a Compute Engine identity token (RS256 JWT, `format=full`) from
//!   `https://accounts.google.com` for the configured audience; identity
//!   (`google.compute_engine.project_id`, `instance_id`), age from `iat`;
//! - `azure`: IMDS attested data, PKCS#7 SignedData carrying the JSON and its signer's
//!   certificate, which must chain to a configured one; identity (`subscriptionId`, `vmId`),
//!   age from `timeStamp.createdOn`, refused after `timeStamp.expiresOn`;
//! - `oidc`: an RS256 or ES256 JWT from the configured issuer and audience; identity from the
//!   configured claims, age from `iat`.
//!
//! Keys, JWKS and certificates come from the configuration only: the component never fetches
//! anything. Then, in this order: a document older than `maxAgeMs` (10 minutes by default,
//! per provider) is refused `too-old`; the account must be in the resolver (`resolve`) or the
//! join is refused `unknown-instance`; the requested role must be one the entry allows (`node`
//! by default); and each (provider, account, instance) admits exactly one join, ever: the
//! attestor records `cloud:<provider>:<account>:<instance>` in the single-use ledger with an
//! expiry that never comes, so a second join is refused `instance-reused` (an AWS document is
//! readable by any process on the VM, and even a bound token must not mint a second node). A
//! known instance that lost its certificate re-joins with x509pop.
//!
//! The crate is both the component the host loads and an `rlib`: [`CloudIid`] runs natively
//! through [`gatehouse_sdk::Attestor`] too, and the `mint` feature makes documents signed by
//! test keys standing in for each provider.

mod config;
pub mod jwt;
#[cfg(any(test, feature = "mint"))]
pub mod mint;
pub mod pkcs7;

use gatehouse_proto::cloud_iid::{CloudIidEvidence, Provider};
use gatehouse_sdk::{
    AttestationResult, Attestor, Context, Info, JoinRequest, Outcome, Refusal, TimestampMs,
    UseError, reason, refuse,
};
use serde::Deserialize;
use serde_json::Value;

pub use config::{
    AZURE_SIGNER_NAMES, Config, DEFAULT_MAX_AGE_MS, Entry, GOOGLE_ISSUER, MAX_MAX_AGE_MS,
    MIN_MAX_AGE_MS, NonceCheck, SIGNATURE_RSA_BITS, Signed, Tokens,
};

/// The reason codes this attestor refuses with, besides the SDK's shared ones
/// (`malformed-evidence`, `expired`, `wrong-role`, `instance-reused`, `unknown-instance`,
/// `storage-error`).
pub mod codes {
    /// The evidence names a provider the host is not configured for.
    pub const UNKNOWN_PROVIDER: &str = "unknown-provider";
    /// The token's `alg` is not one the provider allows (`none`, `HS256`…), or not the
    /// algorithm of the key its `kid` names (algorithm confusion); or a PKCS#7 signature
    /// algorithm other than RSA / ECDSA with SHA-256.
    pub const BAD_ALGORITHM: &str = "bad-algorithm";
    /// The token names no `kid`, or one not in the configured key set.
    pub const UNKNOWN_KEY: &str = "unknown-key";
    /// The PKCS#7 signer is neither a configured certificate nor issued by one.
    pub const UNTRUSTED_SIGNER: &str = "untrusted-signer";
    /// The signature (or the signed digest of the content) does not verify.
    pub const BAD_SIGNATURE: &str = "bad-signature";
    /// The token's `iss` is not the configured issuer.
    pub const BAD_ISSUER: &str = "bad-issuer";
    /// The token's `aud` does not name the configured audience.
    pub const BAD_AUDIENCE: &str = "bad-audience";
    /// The document was made more than `maxAgeMs` ago.
    pub const TOO_OLD: &str = "too-old";
    /// The document is dated in the future (beyond a minute of clock skew).
    pub const NOT_YET_VALID: &str = "not-yet-valid";
    /// The document lacks a claim the identity or its freshness is read from, or it is not
    /// of the expected form.
    pub const MISSING_CLAIM: &str = "missing-claim";
    /// The signature uses SHA-1 or DSA: AWS's legacy `/pkcs7` (DSA-1024 with SHA-1), refused on
    /// purpose. The machine must send `/rsa2048` (or `/signature`) instead.
    pub const LEGACY_ALGORITHM: &str = "legacy-algorithm";
    /// Azure: the document's `nonce` is not the one derived from the join's CSR
    /// (`providers.azure.nonce = "csr"`).
    pub const NONCE_MISMATCH: &str = "nonce-mismatch";
    /// AWS: a bare `/signature` arrived and `providers.aws.signatureCertificates` is not
    /// configured (its RSA-1024 signatures are accepted only when the operator names the keys).
    pub const SIGNATURE_NOT_ENABLED: &str = "signature-not-enabled";
}

/// The clock skew tolerated for a document dated in the future, ms.
pub const SKEW_MS: i64 = 60_000;
/// Most bytes of an account.
const MAX_ACCOUNT_LEN: usize = 128;
/// Most bytes of an instance.
const MAX_INSTANCE_LEN: usize = 256;

/// The `cloud-iid` attestor, configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudIid {
    config: Config,
}

/// Who a verified document says the machine is, and when the document was made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The provider.
    pub provider: Provider,
    /// The account, project, subscription or account claim.
    pub account: String,
    /// The instance.
    pub instance: String,
}

impl Identity {
    /// The ledger and audit subject, `cloud:<provider>:<account>:<instance>`. The account has
    /// no `:`, so the subject names one identity.
    pub fn subject(&self) -> String {
        format!("cloud:{}:{}:{}", self.provider, self.account, self.instance)
    }
}

impl Attestor for CloudIid {
    fn info() -> Info {
        Info {
            id: gatehouse_proto::cloud_iid::CLOUD_IID.into(),
            version: env!("CARGO_PKG_VERSION").into(),
            rounds: 1,
        }
    }

    /// The configuration holds every provider's certificates and keys (an AWS operator's
    /// regions come to some 30 PEM certificates): parsed once at load, not once per join.
    const PREPARED: bool = true;

    fn configure(config: &str) -> Result<Self, String> {
        Ok(CloudIid {
            config: Config::parse(config)?,
        })
    }

    fn prepare(&self) -> Vec<u8> {
        // Encoding plain data into a Vec does not fail; an empty form reads back as none.
        postcard::to_allocvec(&self.config).unwrap_or_default()
    }

    fn from_prepared(bytes: &[u8]) -> Option<Self> {
        postcard::from_bytes(bytes).ok().map(CloudIid::new)
    }

    fn verify(&self, cx: &Context<'_>, request: &JoinRequest) -> Outcome {
        match self.admit(cx, request) {
            Ok(result) => result.into(),
            Err(refusal) => refusal.into(),
        }
    }
}

gatehouse_sdk::export_attestor!(CloudIid);

impl CloudIid {
    /// The attestor with a validated configuration.
    pub fn new(config: Config) -> Self {
        CloudIid { config }
    }

    /// Decides one join, recording the instance in the single-use ledger when it admits.
    fn admit(&self, cx: &Context<'_>, request: &JoinRequest) -> Result<AttestationResult, Refusal> {
        let evidence: CloudIidEvidence = gatehouse_sdk::evidence::json(&request.attestation)?;
        // The document is the credential: a token beside it would be neither checked nor
        // spent, so a request carrying one is not this attestor's.
        if request.token.is_some() {
            return Err(refuse(reason::MALFORMED_EVIDENCE));
        }
        let now = cx.tx.now();
        let identity = self.identify(cx, request, &evidence, now)?;

        let entry = self
            .config
            .resolve
            .iter()
            .find(|e| e.provider == identity.provider && e.account == identity.account)
            .ok_or_else(|| refuse(reason::UNKNOWN_INSTANCE))?;
        let refusal = |code: &str| refuse(code).tenant(&entry.tenant_id);
        if !entry.roles.contains(&request.role) {
            return Err(refusal(reason::WRONG_ROLE));
        }

        // Once, ever: an expiry that never comes, so pruning never forgets it.
        let subject = identity.subject();
        cx.tx
            .record_use(&subject, TimestampMs::MAX)
            .map_err(|error| match error {
                UseError::Reused => refusal(reason::INSTANCE_REUSED),
                UseError::Storage => refusal(reason::STORAGE),
            })?;

        Ok(AttestationResult {
            tenant_id: Some(entry.tenant_id.clone()),
            pool_id: entry.pool_id.clone(),
            site_id: entry.site_id.clone(),
            subject: Some(subject),
            ..AttestationResult::default()
        })
    }

    /// Verifies the document with its provider and checks its age; who it names.
    fn identify(
        &self,
        cx: &Context<'_>,
        request: &JoinRequest,
        evidence: &CloudIidEvidence,
        now: TimestampMs,
    ) -> Result<Identity, Refusal> {
        let unknown = || refuse(codes::UNKNOWN_PROVIDER);
        if evidence.provider != Provider::Aws && evidence.signature.is_some() {
            return Err(refuse(reason::MALFORMED_EVIDENCE));
        }
        match evidence.provider {
            Provider::Aws => {
                let aws = self.config.aws.as_ref().ok_or_else(unknown)?;
                aws_identity(cx, aws, evidence, now)
            }
            Provider::Azure => {
                let azure = self.config.azure.as_ref().ok_or_else(unknown)?;
                azure_identity(cx, azure, &evidence.document, &request.csr_spki_sha256, now)
            }
            Provider::Gcp => {
                let gcp = self.config.gcp.as_ref().ok_or_else(unknown)?;
                token_identity(cx, gcp, Provider::Gcp, &evidence.document, now)
            }
            Provider::Oidc => {
                let oidc = self.config.oidc.as_ref().ok_or_else(unknown)?;
                token_identity(cx, oidc, Provider::Oidc, &evidence.document, now)
            }
        }
    }
}

/// The parts of an AWS instance identity document the attestor reads.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AwsDocument {
    account_id: String,
    instance_id: String,
    pending_time: String,
}

/// AWS: the document with one of its two accepted signatures, told apart by their form:
///
/// - `/rsa2048`: PKCS#7 SignedData (SHA-256, RSA-2048) by the region's RSA-2048 certificate
///   (`providers.aws.certificates`), the document encapsulated (it must equal `document`);
/// - `/signature`: a bare RSASSA-PKCS1-v1_5 SHA-256 signature over `document` by the region's
///   RSA certificate, whose key is RSA-1024: accepted only when
///   `providers.aws.signatureCertificates` names those certificates (else
///   [`codes::SIGNATURE_NOT_ENABLED`]), and verified in the component because the host's
///   `crypto` import refuses RSA keys under 2048 bits for everyone;
/// - the legacy `/pkcs7` (DSA with SHA-1) is refused [`codes::LEGACY_ALGORITHM`].
fn aws_identity(
    cx: &Context<'_>,
    aws: &Signed,
    evidence: &CloudIidEvidence,
    now: TimestampMs,
) -> Result<Identity, Refusal> {
    let malformed = || refuse(reason::MALFORMED_EVIDENCE);
    let signature = evidence.signature.as_deref().ok_or_else(malformed)?;
    let der = decode_base64_text(signature).ok_or_else(malformed)?;
    let content = if pkcs7::is_ber_element(&der) {
        pkcs7::verify(
            &der,
            Some(evidence.document.as_bytes()),
            &aws.trusted,
            now,
            cx.crypto,
        )?
        .content
    } else {
        if aws.signature_keys.is_empty() {
            return Err(refuse(codes::SIGNATURE_NOT_ENABLED));
        }
        let digest = cx.crypto.sha256(evidence.document.as_bytes());
        if !aws
            .signature_keys
            .iter()
            .any(|key| legacy_rsa_verify(key, &digest, &der))
        {
            return Err(refuse(codes::BAD_SIGNATURE));
        }
        evidence.document.as_bytes().to_vec()
    };
    let document: AwsDocument =
        serde_json::from_slice(&content).map_err(|_| refuse(codes::MISSING_CLAIM))?;
    // AWS serves the same document for the instance's whole life: its age is the time since
    // the instance launched (`pendingTime`), so maxAgeMs bounds how long after its launch an
    // instance may join.
    let made = parse_rfc3339(&document.pending_time).ok_or_else(|| refuse(codes::MISSING_CLAIM))?;
    check_age(made, None, aws.max_age_ms, now)?;
    identity(Provider::Aws, document.account_id, document.instance_id)
}

/// RSASSA-PKCS1-v1_5 with SHA-256 of `digest` under the PKCS#1 key `key`, any size in
/// [`config::SIGNATURE_RSA_BITS`] (checked when the configuration loaded).
fn legacy_rsa_verify(key: &[u8], digest: &[u8], signature: &[u8]) -> bool {
    use pkcs1::DecodeRsaPublicKey as _;
    let Ok(key) = rsa::RsaPublicKey::from_pkcs1_der(key) else {
        return false;
    };
    key.verify(rsa::Pkcs1v15Sign::new::<sha2::Sha256>(), digest, signature)
        .is_ok()
}

/// The parts of Azure attested data the attestor reads.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AzureDocument {
    subscription_id: String,
    vm_id: String,
    time_stamp: AzureTimeStamp,
    #[serde(default)]
    nonce: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AzureTimeStamp {
    created_on: String,
    expires_on: String,
}

/// Azure: the attested data's PKCS#7, whose signer certificate chains to a configured CA and
/// is IMDS's (a DNS name in `signerNames`: the Microsoft CAs issue certificates for many other
/// services too); with `nonce = "csr"`, the nonce the VM asked IMDS for is the node key's.
fn azure_identity(
    cx: &Context<'_>,
    azure: &Signed,
    document: &str,
    node_key_sha256: &[u8],
    now: TimestampMs,
) -> Result<Identity, Refusal> {
    let der = decode_base64_text(document).ok_or_else(|| refuse(reason::MALFORMED_EVIDENCE))?;
    let verified = pkcs7::verify(&der, None, &azure.trusted, now, cx.crypto)?;
    let names = pkcs7::dns_names(&verified.signer);
    let allowed = |name: &String| {
        azure.signer_names.iter().any(|want| {
            if want.starts_with('.') {
                name.ends_with(want.as_str())
            } else {
                name == want
            }
        })
    };
    if !names.iter().any(allowed) {
        return Err(refuse(codes::UNTRUSTED_SIGNER));
    }
    let document: AzureDocument =
        serde_json::from_slice(&verified.content).map_err(|_| refuse(codes::MISSING_CLAIM))?;
    if azure.nonce == NonceCheck::Csr
        && document.nonce.as_deref()
            != Some(gatehouse_proto::cloud_iid::azure_nonce(node_key_sha256).as_str())
    {
        return Err(refuse(codes::NONCE_MISMATCH));
    }
    let created = parse_azure_time(&document.time_stamp.created_on)
        .ok_or_else(|| refuse(codes::MISSING_CLAIM))?;
    let expires = parse_azure_time(&document.time_stamp.expires_on)
        .ok_or_else(|| refuse(codes::MISSING_CLAIM))?;
    check_age(created, Some(expires), azure.max_age_ms, now)?;
    identity(Provider::Azure, document.subscription_id, document.vm_id)
}

fn token_identity(
    cx: &Context<'_>,
    tokens: &Tokens,
    provider: Provider,
    token: &str,
    now: TimestampMs,
) -> Result<Identity, Refusal> {
    // Google signs identity tokens with RS256 only.
    let allowed: &[jwt::Alg] = match provider {
        Provider::Gcp => &[jwt::Alg::Rs256],
        _ => &[jwt::Alg::Rs256, jwt::Alg::Es256],
    };
    let claims = Value::Object(jwt::verify(token, &tokens.keys, allowed, cx.crypto)?);
    if claims.get("iss").and_then(Value::as_str) != Some(tokens.issuer.as_str()) {
        return Err(refuse(codes::BAD_ISSUER));
    }
    let audience_ok = match claims.get("aud") {
        Some(Value::String(aud)) => *aud == tokens.audience,
        Some(Value::Array(auds)) => auds
            .iter()
            .any(|a| a.as_str() == Some(tokens.audience.as_str())),
        _ => false,
    };
    if !audience_ok {
        return Err(refuse(codes::BAD_AUDIENCE));
    }
    let seconds = |name: &str| -> Result<Option<TimestampMs>, Refusal> {
        match claims.get(name) {
            None => Ok(None),
            Some(v) => v
                .as_i64()
                .and_then(|s| s.checked_mul(1000))
                .map(Some)
                .ok_or_else(|| refuse(codes::MISSING_CLAIM)),
        }
    };
    let iat = seconds("iat")?.ok_or_else(|| refuse(codes::MISSING_CLAIM))?;
    let exp = seconds("exp")?.ok_or_else(|| refuse(codes::MISSING_CLAIM))?;
    if let Some(nbf) = seconds("nbf")?
        && nbf > now.saturating_add(SKEW_MS)
    {
        return Err(refuse(codes::NOT_YET_VALID));
    }
    check_age(iat, Some(exp), tokens.max_age_ms, now)?;
    let account = claim_string(&claims, &tokens.account_claim)?;
    let instance = claim_string(&claims, &tokens.instance_claim)?;
    identity(provider, account, instance)
}

/// The string (or integer, as decimal) at a dotted claim path.
fn claim_string(claims: &Value, path: &str) -> Result<String, Refusal> {
    let value = path
        .split('.')
        .try_fold(claims, |v, name| v.get(name))
        .ok_or_else(|| refuse(codes::MISSING_CLAIM))?;
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) if n.is_u64() || n.is_i64() => Ok(n.to_string()),
        _ => Err(refuse(codes::MISSING_CLAIM)),
    }
}

/// Refuses a document made more than `max_age_ms` ago (`too-old`) or dated in the future
/// beyond [`SKEW_MS`] (`not-yet-valid`), and one past its expiry (`expired`).
fn check_age(
    made: TimestampMs,
    expires: Option<TimestampMs>,
    max_age_ms: i64,
    now: TimestampMs,
) -> Result<(), Refusal> {
    if made > now.saturating_add(SKEW_MS) {
        return Err(refuse(codes::NOT_YET_VALID));
    }
    if expires.is_some_and(|exp| exp <= now) {
        return Err(refuse(reason::EXPIRED));
    }
    if now.saturating_sub(made) > max_age_ms {
        return Err(refuse(codes::TOO_OLD));
    }
    Ok(())
}

fn identity(provider: Provider, account: String, instance: String) -> Result<Identity, Refusal> {
    if !sane_account(&account) || !sane_instance(&instance) {
        return Err(refuse(codes::MISSING_CLAIM));
    }
    Ok(Identity {
        provider,
        account,
        instance,
    })
}

/// Whether `account` can be an account: 1 to 128 bytes of visible ASCII other than `:`.
pub(crate) fn sane_account(account: &str) -> bool {
    (1..=MAX_ACCOUNT_LEN).contains(&account.len())
        && account.bytes().all(|b| b.is_ascii_graphic() && b != b':')
}

/// Whether `instance` can be an instance: 1 to 256 bytes of visible ASCII.
fn sane_instance(instance: &str) -> bool {
    (1..=MAX_INSTANCE_LEN).contains(&instance.len())
        && instance.bytes().all(|b| b.is_ascii_graphic())
}

/// Standard base64 as the metadata services serve it: line breaks and PEM armour
/// (`-----BEGIN PKCS7-----`) allowed.
fn decode_base64_text(text: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    if text.len() > 2 * pkcs7::MAX_LEN {
        return None;
    }
    let body: String = text
        .lines()
        .filter(|line| !line.starts_with("-----"))
        .flat_map(|line| line.chars().filter(|c| !c.is_ascii_whitespace()))
        .collect();
    base64::engine::general_purpose::STANDARD.decode(body).ok()
}

/// Milliseconds since the epoch of a proleptic Gregorian UTC date and time; `None` when a
/// field is out of range.
///
/// The two timestamp forms below are parsed by hand instead of with a date crate: each is one
/// fixed layout, and this keeps `time`/`chrono` and their format machinery out of the
/// component for twenty lines.
fn utc_ms(year: i64, month: i64, day: i64, hour: i64, minute: i64, second: i64) -> Option<i64> {
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let days_in_month = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    let max_day = *days_in_month.get(usize::try_from(month - 1).ok()?)?;
    if !(1..=max_day).contains(&day) || !(0..24).contains(&hour) || !(0..60).contains(&minute) {
        return None;
    }
    if !(0..61).contains(&second) || !(1970..=9999).contains(&year) {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((((days * 24 + hour) * 60 + minute) * 60 + second) * 1000)
}

/// Digits at `range` of `s` as a number.
fn digits(s: &str, range: std::ops::Range<usize>) -> Option<i64> {
    let part = s.get(range)?;
    if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    part.parse().ok()
}

/// `YYYY-MM-DDTHH:MM:SSZ` (AWS's `pendingTime`; fractional seconds allowed and ignored).
fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20 || b.get(4) != Some(&b'-') || b.get(7) != Some(&b'-') {
        return None;
    }
    if !matches!(b.get(10), Some(b'T' | b't')) || b.get(13) != Some(&b':') {
        return None;
    }
    if b.get(16) != Some(&b':') || !matches!(b.last(), Some(b'Z' | b'z')) {
        return None;
    }
    let fraction = s.get(19..s.len() - 1)?;
    if !(fraction.is_empty()
        || (fraction.len() > 1
            && fraction.starts_with('.')
            && fraction[1..].bytes().all(|c| c.is_ascii_digit())))
    {
        return None;
    }
    utc_ms(
        digits(s, 0..4)?,
        digits(s, 5..7)?,
        digits(s, 8..10)?,
        digits(s, 11..13)?,
        digits(s, 14..16)?,
        digits(s, 17..19)?,
    )
}

/// `MM/DD/YY HH:MM:SS -0000` (Azure's `timeStamp`; always UTC, years 2000 to 2099).
fn parse_azure_time(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() != 23 || b.get(2) != Some(&b'/') || b.get(5) != Some(&b'/') {
        return None;
    }
    if b.get(8) != Some(&b' ') || b.get(11) != Some(&b':') || b.get(14) != Some(&b':') {
        return None;
    }
    if s.get(17..) != Some(" -0000") && s.get(17..) != Some(" +0000") {
        return None;
    }
    utc_ms(
        2000 + digits(s, 6..8)?,
        digits(s, 0..2)?,
        digits(s, 3..5)?,
        digits(s, 9..11)?,
        digits(s, 12..14)?,
        digits(s, 15..17)?,
    )
}

#[cfg(test)]
mod tests;
