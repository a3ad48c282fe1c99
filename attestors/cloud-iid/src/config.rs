//! The configuration (the JSON form of `[attestors.cloud-iid] config`): providers, their keys
//! and certificates (inline, never fetched), and the resolver.

use std::collections::HashSet;

use gatehouse_proto::cloud_iid::Provider;
use gatehouse_sdk::JoinRole;
use serde::Deserialize;

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
    certificates: String,
    max_age_ms: Option<u64>,
}

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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signed {
    /// The signing certificates, or CAs of them.
    pub trusted: Trusted,
    /// How old a document may be, ms.
    pub max_age_ms: i64,
}

/// A provider whose documents are JWTs (GCP, OIDC).
#[derive(Debug, Clone, PartialEq, Eq)]
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
#[derive(Debug, Clone, PartialEq, Eq)]
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
    pub roles: Vec<JoinRole>,
}

/// The whole configuration, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
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
                Ok(Signed {
                    trusted: Trusted::from_pem(&r.certificates)
                        .map_err(|e| format!("invalid configuration: providers.{name}.{e}"))?,
                    max_age_ms: age(r.max_age_ms, max_age, &format!("providers.{name}."))?,
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
        let mut seen = HashSet::new();
        let mut resolve = Vec::with_capacity(raw.resolve.len());
        for entry in raw.resolve {
            if !crate::sane_account(&entry.account) || entry.tenant_id.is_empty() {
                return Err(format!(
                    "invalid configuration: resolve: account {:?} must be 1 to 128 visible ASCII \
                     characters without ':', and tenantId non-empty",
                    entry.account
                ));
            }
            if !seen.insert((entry.provider, entry.account.clone())) {
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
