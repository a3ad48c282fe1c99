//! The tpm attestor's configuration (strict JSON: unknown keys refuse to load).

use base64::Engine as _;
use gatehouse_sdk::TpmPcrValue;
use serde::Deserialize;

/// Most `ekRoots` certificates, counted after every entry is split into its certificates: the
/// host's `verify-ek` takes no more.
const MAX_ROOTS: usize = gatehouse_sdk::MAX_EK_ROOTS;
/// Most `allow` entries (a delivery manifest).
const MAX_ALLOW: usize = 100_000;
/// Most `pcrPolicy` entries.
const MAX_PCR_POLICY: usize = 96;

/// Whether the node key must be certified by the AK.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum NodeKeyMode {
    /// Refuse an answer without a node-key certification (`node-key-not-certified`).
    #[default]
    Certified,
    /// Admit an uncertified node key (the result is then `node-key: unattested`).
    Any,
}

/// What happens to an EK neither bound nor allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum EnrollmentMode {
    /// Open a join request an operator approves into a placement.
    #[default]
    Approval,
    /// Refuse it (`unknown-ek`).
    Refuse,
}

/// One entry of the delivery manifest.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AllowEntry {
    /// Lowercase hex SHA-256 of the EK public area (TPMT_PUBLIC).
    pub ek_sha256: String,
    /// The tenant the machine joins.
    pub tenant_id: String,
    /// The pool, if any.
    #[serde(default)]
    pub pool_id: Option<String>,
    /// The site, if any.
    #[serde(default)]
    pub site_id: Option<String>,
}

/// One PCR value the quote must cover with exactly this digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PcrRequirement {
    /// The bank (TPM_ALG_ID).
    pub hash_alg: u16,
    /// The PCR index.
    pub index: u8,
    /// The value.
    pub digest: Vec<u8>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawPcr {
    /// `sha1`, `sha256`, `sha384` or `sha512`.
    hash_alg: String,
    index: u8,
    /// Hex.
    digest: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Raw {
    /// Empty by default, so the built-in attestor loads on a host that does not configure it
    /// (the host refuses to start when an attestor's configure fails); with no roots every
    /// enrollment is refused `ek-untrusted`.
    #[serde(default)]
    ek_roots: Vec<String>,
    #[serde(default)]
    pcr_policy: Vec<RawPcr>,
    #[serde(default)]
    node_key: NodeKeyMode,
    #[serde(default)]
    allow: Vec<AllowEntry>,
    #[serde(default)]
    enrollment: EnrollmentMode,
}

/// The validated configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Config {
    /// Trusted EK roots (DER).
    pub(crate) ek_roots: Vec<Vec<u8>>,
    pub(crate) pcr_policy: Vec<PcrRequirement>,
    pub(crate) node_key: NodeKeyMode,
    pub(crate) allow: Vec<AllowEntry>,
    pub(crate) enrollment: EnrollmentMode,
}

impl Config {
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let raw: Raw = gatehouse_sdk::config::parse(text)?;
        let mut ek_roots = Vec::new();
        for (i, root) in raw.ek_roots.iter().enumerate() {
            let ders = certificates(root)
                .map_err(|why| format!("invalid configuration: ekRoots[{i}] {why}"))?;
            ek_roots.extend(ders);
            if ek_roots.len() > MAX_ROOTS {
                return Err(format!(
                    "invalid configuration: ekRoots holds more than {MAX_ROOTS} certificates \
                     (split the bundle, or keep only the vendors your machines use)"
                ));
            }
        }
        if raw.pcr_policy.len() > MAX_PCR_POLICY {
            return Err(format!(
                "invalid configuration: pcrPolicy has more than {MAX_PCR_POLICY} entries"
            ));
        }
        let mut pcr_policy = Vec::new();
        for (i, p) in raw.pcr_policy.iter().enumerate() {
            let (hash_alg, size) = match p.hash_alg.as_str() {
                "sha1" => (0x0004, 20),
                "sha256" => (0x000b, 32),
                "sha384" => (0x000c, 48),
                "sha512" => (0x000d, 64),
                other => {
                    return Err(format!(
                        "invalid configuration: pcrPolicy[{i}].hashAlg {other:?} is not sha1, sha256, sha384 or sha512"
                    ));
                }
            };
            let digest = hex::decode(&p.digest)
                .ok()
                .filter(|d| d.len() == size)
                .ok_or_else(|| {
                    format!(
                        "invalid configuration: pcrPolicy[{i}].digest is not {size} bytes of hex"
                    )
                })?;
            if p.index > 23 {
                return Err(format!(
                    "invalid configuration: pcrPolicy[{i}].index {} is not 0 to 23",
                    p.index
                ));
            }
            pcr_policy.push(PcrRequirement {
                hash_alg,
                index: p.index,
                digest,
            });
        }
        if raw.allow.len() > MAX_ALLOW {
            return Err(format!(
                "invalid configuration: allow has more than {MAX_ALLOW} entries"
            ));
        }
        for (i, entry) in raw.allow.iter().enumerate() {
            let hex_ok = entry.ek_sha256.len() == 64
                && entry
                    .ek_sha256
                    .bytes()
                    .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
            if !hex_ok {
                return Err(format!(
                    "invalid configuration: allow[{i}].ekSha256 is not 64 lowercase hex digits"
                ));
            }
            if entry.tenant_id.is_empty() {
                return Err(format!(
                    "invalid configuration: allow[{i}].tenantId is empty"
                ));
            }
        }
        Ok(Config {
            ek_roots,
            pcr_policy,
            node_key: raw.node_key,
            allow: raw.allow,
            enrollment: raw.enrollment,
        })
    }

    /// Whether every `pcrPolicy` entry is among the quoted values, with its digest.
    pub(crate) fn pcrs_satisfied(&self, covered: &[TpmPcrValue]) -> bool {
        self.pcr_policy.iter().all(|required| {
            covered.iter().any(|v| {
                v.hash_alg == required.hash_alg
                    && v.index == required.index
                    && v.digest == required.digest
            })
        })
    }
}

/// The certificates (DER) of a PEM text (one or more CERTIFICATE blocks) or of standard
/// base64 DER, or why not. Operator input, so a small hand-written PEM reader is enough: it
/// only splits the blocks and decodes their base64 (the DER is parsed by the host's chain
/// verification). Outside the blocks, blank lines and `#` comment lines are skipped (the
/// format of published TPM trust bundles such as tpm-ca-certificates.pem); any other text is
/// refused rather than guessed at.
fn certificates(text: &str) -> Result<Vec<Vec<u8>>, String> {
    let engine = base64::engine::general_purpose::STANDARD;
    let text = text.trim();
    if !text.contains("-----BEGIN") {
        return match engine.decode(text) {
            Ok(der) if !der.is_empty() => Ok(vec![der]),
            _ => Err("is neither PEM nor base64 DER".into()),
        };
    }
    let mut out = Vec::new();
    let mut body: Option<String> = None;
    for (n, line) in text.lines().map(str::trim).enumerate() {
        let at = |what: &str| format!("line {}: {what}", n + 1);
        if line == "-----BEGIN CERTIFICATE-----" {
            if body.is_some() {
                return Err(at("BEGIN inside a certificate"));
            }
            body = Some(String::new());
        } else if line == "-----END CERTIFICATE-----" {
            let b64 = body.take().ok_or_else(|| at("END outside a certificate"))?;
            match engine.decode(b64) {
                Ok(der) if !der.is_empty() => out.push(der),
                _ => return Err(at("a certificate that is not base64")),
            }
        } else if let Some(b) = body.as_mut() {
            b.push_str(line);
        } else if !line.is_empty() && !line.starts_with('#') {
            return Err(at("text outside a certificate that is not a # comment"));
        }
    }
    if body.is_some() {
        return Err("a certificate has no END line".into());
    }
    if out.is_empty() {
        return Err("holds no certificate".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vendors' published bundles (tests/vectors/tpm/ca, see its PROVENANCE.md): PEM
    /// blocks, each under `#` comment lines naming it.
    const ROOTS: &str = include_str!("../../../tests/vectors/tpm/ca/tpm-ca-certificates.pem");
    const INTERMEDIATES: &str =
        include_str!("../../../tests/vectors/tpm/ca/tpm-intermediate-ca-certificates.pem");

    fn parse(ek_roots: &[&str]) -> Result<Config, String> {
        Config::parse(&serde_json::json!({ "ekRoots": ek_roots }).to_string())
    }

    #[test]
    fn a_published_trust_bundle_with_comments_loads_whole() {
        let config = parse(&[ROOTS, INTERMEDIATES]).unwrap();
        assert_eq!(config.ek_roots.len(), 26 + 143);
        assert!(ROOTS.lines().any(|l| l.starts_with("# Certificate:")));
    }

    #[test]
    fn more_roots_than_verify_ek_takes_refuse_to_load_and_say_why() {
        let block = ROOTS
            .split_inclusive("-----END CERTIFICATE-----\n")
            .find(|b| b.contains("BEGIN"))
            .unwrap();
        let too_many = block.repeat(MAX_ROOTS + 1);
        let err = parse(&[too_many.as_str()]).unwrap_err();
        assert!(err.contains("more than 1024 certificates"), "{err}");
        assert!(parse(&[block.repeat(MAX_ROOTS).as_str()]).is_ok());
    }

    #[test]
    fn text_that_is_neither_comment_nor_certificate_is_refused_with_its_line() {
        let with_text = format!("{ROOTS}\nnot a comment\n");
        let err = parse(&[with_text.as_str()]).unwrap_err();
        assert!(err.contains("ekRoots[0] line"), "{err}");
        assert!(err.contains("not a # comment"), "{err}");
        let unterminated = ROOTS
            .trim_end()
            .trim_end_matches("-----END CERTIFICATE-----");
        assert!(parse(&[unterminated]).unwrap_err().contains("no END"));
        assert!(
            parse(&[
                "# only a comment\n-----BEGIN CERTIFICATE-----\n%%\n-----END CERTIFICATE-----"
            ])
            .is_err()
        );
        assert!(
            parse(&["%%%"])
                .unwrap_err()
                .contains("neither PEM nor base64")
        );
    }
}
