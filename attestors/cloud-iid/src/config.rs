//! The configuration (the JSON form of `[attestors.cloud-iid] config`): providers, their keys
//! and certificates (inline, never fetched), and the resolver.

use std::collections::BTreeSet;

use gatehouse_proto::cloud_iid::Provider;
use gatehouse_sdk::JoinRole;
use serde::{Deserialize, Serialize};

use crate::jwt::KeySet;
use crate::pkcs7::Trusted;

/// Default `maxAgeMs`: 10 minutes.
pub const DEFAULT_MAX_AGE_MS: u64 = 10 * 60_000;
/// Smallest `maxAgeMs`: 1 second.
pub const MIN_MAX_AGE_MS: u64 = 1_000;
/// Largest `maxAgeMs`: 10 years (an AWS operator who enrols instances long after their launch).
pub const MAX_MAX_AGE_MS: u64 = 3650 * 24 * 3_600_000;
/// The issuer of Google's identity tokens.
pub const GOOGLE_ISSUER: &str = "https://accounts.google.com";
/// Most resolver entries.
pub const MAX_RESOLVE: usize = 10_000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Raw {
    #[serde(default = "default_max_age_ms")]
    max_age_ms: u64,
    #[serde(default)]
    providers: RawProviders,
    #[serde(default)]
    resolve: Vec<RawEntry>,
}

fn default_max_age_ms() -> u64 {
    DEFAULT_MAX_AGE_MS
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawProviders {
    aws: Option<RawSigned>,
    gcp: Option<RawToken>,
    azure: Option<RawSigned>,
    oidc: Option<RawToken>,
}

/// aws / azure: PKCS#7-signed documents.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawSigned {
    /// AWS: the regions' RSA-2048 certificates (`/rsa2048`); Azure: the CAs of IMDS's signer.
    certificates: String,
    max_age_ms: Option<u64>,
    /// AWS only: the regions' RSA certificates for the bare `/signature` (RSA-1024 keys).
    signature_certificates: Option<String>,
    /// Azure only: the DNS names (or `.suffix`es) the signer certificate must carry.
    signer_names: Option<Vec<String>>,
    /// Azure only: `none` (the default) or `csr`.
    nonce: Option<String>,
}

/// The names Azure IMDS signs attested data as (public cloud, US Gov, China, Germany):
/// `metadata.azure.com` and its regional `<region>.metadata.azure.com`, and so on.
pub const AZURE_SIGNER_NAMES: [&str; 8] = [
    "metadata.azure.com",
    ".metadata.azure.com",
    "metadata.azure.us",
    ".metadata.azure.us",
    "metadata.azure.cn",
    ".metadata.azure.cn",
    "metadata.microsoftazure.de",
    ".metadata.microsoftazure.de",
];

/// Most bits of an RSA key accepted for AWS's bare `/signature`; fewest.
pub const SIGNATURE_RSA_BITS: std::ops::RangeInclusive<usize> = 1024..=4096;

/// gcp / oidc: JWTs.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawToken {
    /// A JWKS, as JSON text or as a table.
    jwks: serde_json::Value,
    audience: String,
    issuer: Option<String>,
    account_claim: Option<String>,
    instance_claim: Option<String>,
    max_age_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawEntry {
    provider: Provider,
    account: String,
    tenant_id: String,
    pool_id: Option<String>,
    site_id: Option<String>,
    roles: Option<Vec<String>>,
}

/// A provider whose documents are PKCS#7 SignedData (AWS, Azure).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signed {
    /// The signing certificates, or CAs of them.
    pub trusted: Trusted,
    /// How old a document may be, ms.
    pub max_age_ms: i64,
    /// AWS: the RSA public keys (PKCS#1 `RSAPublicKey` DER) that verify a bare `/signature`;
    /// empty when it is not accepted.
    pub signature_keys: Vec<Vec<u8>>,
    /// Azure: the DNS names the signer certificate must carry one of (an entry starting with
    /// `.` matches any name ending with it); empty for AWS.
    pub signer_names: Vec<String>,
    /// Azure: whether the document's nonce must be the one derived from the node key.
    pub nonce: NonceCheck,
}

/// Whether Azure's attested data must carry a nonce bound to the join.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum NonceCheck {
    /// Any nonce (IMDS puts the request time there when the VM asks for none).
    #[default]
    None,
    /// [`gatehouse_proto::cloud_iid::azure_nonce`] of the CSR's key: the document was fetched
    /// for this node key, so one copied off the VM does not join another key.
    Csr,
}

/// A provider whose documents are JWTs (GCP, OIDC).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tokens {
    /// The verification keys, by kid.
    pub keys: KeySet,
    /// The `aud` the token must carry.
    pub audience: String,
    /// The `iss` the token must carry.
    pub issuer: String,
    /// OIDC: the dotted path of the claim naming the account.
    pub account_claim: String,
    /// OIDC: the dotted path of the claim naming the instance.
    pub instance_claim: String,
    /// How old a token may be (by `iat`), ms.
    pub max_age_ms: i64,
}

/// Where an account's instances join.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The provider.
    pub provider: Provider,
    /// The account (AWS account id, GCP project id, Azure subscription id, OIDC account claim).
    pub account: String,
    /// The tenant its instances join.
    pub tenant_id: String,
    /// The pool they join, if any.
    pub pool_id: Option<String>,
    /// The site they belong to, if any.
    pub site_id: Option<String>,
    /// The roles they may ask for.
    #[serde(with = "role_names")]
    pub roles: Vec<JoinRole>,
}

/// [`JoinRole`] is the WIT's type, which has no serde: roles are kept by their configuration
/// names in the prepared form.
mod role_names {
    use gatehouse_sdk::JoinRole;
    use serde::de::Error as _;
    use serde::{Deserialize as _, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(roles: &[JoinRole], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(roles.iter().map(|role| match role {
            JoinRole::Node => "node",
            JoinRole::Site => "site",
            JoinRole::Ramdisk => "ramdisk",
        }))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<JoinRole>, D::Error> {
        Vec::<String>::deserialize(d)?
            .iter()
            .map(|name| super::role(name).map_err(D::Error::custom))
            .collect()
    }
}

/// The whole configuration, validated: also the attestor's prepared form (`prepared.keep`),
/// encoded with postcard, so a join reads keys and certificates already decoded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// AWS, if configured.
    pub aws: Option<Signed>,
    /// GCP, if configured.
    pub gcp: Option<Tokens>,
    /// Azure, if configured.
    pub azure: Option<Signed>,
    /// Generic OIDC, if configured.
    pub oidc: Option<Tokens>,
    /// The resolver.
    pub resolve: Vec<Entry>,
}

fn age(value: Option<u64>, default: u64, what: &str) -> Result<i64, String> {
    let value = value.unwrap_or(default);
    if !(MIN_MAX_AGE_MS..=MAX_MAX_AGE_MS).contains(&value) {
        return Err(format!(
            "invalid configuration: {what}maxAgeMs {value} is not between {MIN_MAX_AGE_MS} and \
             {MAX_MAX_AGE_MS}"
        ));
    }
    i64::try_from(value).map_err(|e| e.to_string())
}

fn role(name: &str) -> Result<JoinRole, String> {
    match name {
        "node" => Ok(JoinRole::Node),
        "site" => Ok(JoinRole::Site),
        "ramdisk" => Ok(JoinRole::Ramdisk),
        other => Err(format!(
            "invalid configuration: role {other:?} is not node, site or ramdisk"
        )),
    }
}

impl Config {
    /// Parses and validates the configuration text.
    pub fn parse(text: &str) -> Result<Config, String> {
        let raw: Raw = gatehouse_sdk::config::parse(text)?;
        let max_age = raw.max_age_ms;
        age(Some(max_age), max_age, "")?;
        let signed = |raw: Option<RawSigned>, name: &str| -> Result<Option<Signed>, String> {
            raw.map(|r| {
                let bad = |e: String| format!("invalid configuration: providers.{name}.{e}");
                let aws = name == "aws";
                if aws && (r.signer_names.is_some() || r.nonce.is_some()) {
                    return Err(bad("signerNames and nonce are Azure's".into()));
                }
                if !aws && r.signature_certificates.is_some() {
                    return Err(bad("signatureCertificates is AWS's".into()));
                }
                let signature_keys = match &r.signature_certificates {
                    Some(pem) => signature_keys(pem).map_err(bad)?,
                    None => Vec::new(),
                };
                let signer_names = match r.signer_names {
                    _ if aws => Vec::new(),
                    None => AZURE_SIGNER_NAMES.iter().map(|n| (*n).to_owned()).collect(),
                    Some(names) if names.is_empty() || names.iter().any(|n| n.len() < 2) => {
                        return Err(bad("signerNames: empty list or name".into()));
                    }
                    Some(names) => names.iter().map(|n| n.to_ascii_lowercase()).collect(),
                };
                let nonce = match r.nonce.as_deref() {
                    None | Some("none") => NonceCheck::None,
                    Some("csr") => NonceCheck::Csr,
                    Some(other) => {
                        return Err(bad(format!("nonce {other:?} is not none or csr")));
                    }
                };
                Ok(Signed {
                    trusted: Trusted::from_pem(&r.certificates).map_err(bad)?,
                    max_age_ms: age(r.max_age_ms, max_age, &format!("providers.{name}."))?,
                    signature_keys,
                    signer_names,
                    nonce,
                })
            })
            .transpose()
        };
        let tokens = |raw: Option<RawToken>,
                      provider: Provider|
         -> Result<Option<Tokens>, String> {
            let name = provider.as_str();
            raw.map(|r| {
                let jwks = match r.jwks {
                    serde_json::Value::String(text) => {
                        serde_json::from_str(&text).map_err(|e| {
                            format!("invalid configuration: providers.{name}.jwks: not JSON: {e}")
                        })?
                    }
                    other => other,
                };
                let keys = KeySet::parse(&jwks)
                    .map_err(|e| format!("invalid configuration: providers.{name}.jwks: {e}"))?;
                let (issuer, account_claim, instance_claim) = match provider {
                    Provider::Gcp => {
                        if r.account_claim.is_some() || r.instance_claim.is_some() {
                            return Err("invalid configuration: providers.gcp takes no \
                                        accountClaim or instanceClaim (it reads \
                                        google.compute_engine)"
                                .to_owned());
                        }
                        (
                            r.issuer.unwrap_or_else(|| GOOGLE_ISSUER.to_owned()),
                            "google.compute_engine.project_id".to_owned(),
                            "google.compute_engine.instance_id".to_owned(),
                        )
                    }
                    _ => (
                        r.issuer.ok_or_else(|| {
                            format!("invalid configuration: providers.{name}.issuer is required")
                        })?,
                        r.account_claim.ok_or_else(|| {
                            format!(
                                "invalid configuration: providers.{name}.accountClaim is required"
                            )
                        })?,
                        r.instance_claim.unwrap_or_else(|| "sub".to_owned()),
                    ),
                };
                if r.audience.is_empty() || issuer.is_empty() {
                    return Err(format!(
                        "invalid configuration: providers.{name}: empty audience or issuer"
                    ));
                }
                Ok(Tokens {
                    keys,
                    audience: r.audience,
                    issuer,
                    account_claim,
                    instance_claim,
                    max_age_ms: age(r.max_age_ms, max_age, &format!("providers.{name}."))?,
                })
            })
            .transpose()
        };
        if raw.resolve.len() > MAX_RESOLVE {
            return Err(format!(
                "invalid configuration: more than {MAX_RESOLVE} resolve entries"
            ));
        }
        let mut seen = BTreeSet::new();
        let mut resolve = Vec::with_capacity(raw.resolve.len());
        for entry in raw.resolve {
            if !crate::sane_account(&entry.account) || entry.tenant_id.is_empty() {
                return Err(format!(
                    "invalid configuration: resolve: account {:?} must be 1 to 128 visible ASCII \
                     characters without ':', and tenantId non-empty",
                    entry.account
                ));
            }
            if !seen.insert((entry.provider.as_str(), entry.account.clone())) {
                return Err(format!(
                    "invalid configuration: resolve: {} account {:?} twice",
                    entry.provider, entry.account
                ));
            }
            let roles = match entry.roles {
                None => vec![JoinRole::Node],
                Some(names) if names.is_empty() => {
                    return Err("invalid configuration: resolve: empty roles".into());
                }
                Some(names) => names.iter().map(|n| role(n)).collect::<Result<_, _>>()?,
            };
            resolve.push(Entry {
                provider: entry.provider,
                account: entry.account,
                tenant_id: entry.tenant_id,
                pool_id: entry.pool_id,
                site_id: entry.site_id,
                roles,
            });
        }
        Ok(Config {
            aws: signed(raw.providers.aws, "aws")?,
            gcp: tokens(raw.providers.gcp, Provider::Gcp)?,
            azure: signed(raw.providers.azure, "azure")?,
            oidc: tokens(raw.providers.oidc, Provider::Oidc)?,
            resolve,
        })
    }
}

/// The RSA public keys (PKCS#1 DER) of the PEM certificates for AWS's `/signature`.
fn signature_keys(pem: &str) -> Result<Vec<Vec<u8>>, String> {
    use pkcs1::DecodeRsaPublicKey as _;
    let trusted = Trusted::from_pem(pem).map_err(|e| format!("signatureCertificates: {e}"))?;
    trusted
        .certs
        .iter()
        .map(|der| {
            let key = crate::pkcs7::rsa_public_key(der)
                .ok_or("signatureCertificates: not an RSA certificate")?;
            let parsed = rsa::RsaPublicKey::from_pkcs1_der(&key)
                .map_err(|_| "signatureCertificates: not an RSA key")?;
            let bits = rsa::traits::PublicKeyParts::size(&parsed) * 8;
            if !SIGNATURE_RSA_BITS.contains(&bits) {
                return Err(format!(
                    "signatureCertificates: a {bits}-bit key (1024 to 4096 bits are accepted)"
                ));
            }
            Ok(key)
        })
        .collect()
}
