//! `gatehouse-agent doctor`: where the node key lives, whether it loads and is the key the node
//! certificate certifies, and whether the TPM still holds the attestation key the certificate
//! names.

use std::path::Path;

use crate::identity::{KEY_FILE, load_identity_with};
use crate::status::KeyPlace;
use crate::tpm_build::{HostTpm, TPM_SUPPORT};

/// The device node of the host's TPM (the kernel's resource manager): a host where it exists
/// has a TPM, and every new node key belongs there.
pub const TPM_DEVICE: &str = "/dev/tpmrm0";

/// Whether this host has a TPM the node key could live in.
pub fn host_has_tpm() -> bool {
    Path::new(TPM_DEVICE).exists()
}

/// Whether the current user can open the TPM device `device` for reading and writing: an
/// unprivileged agent that can is one step from clearing the TPM, which `doctor` fails.
pub fn can_open_device(device: &Path) -> bool {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(device)
        .is_ok()
}

/// The revocation check of `serial` against the host's CRL `crl` (fetched, or why not), at
/// `now_ms`: fails for a certificate the CRL lists, and for a CRL that cannot be believed
/// (unsigned, stale) or fetched, since "not revoked" cannot be said then.
pub fn revocation_check(
    serial: &str,
    crl: Result<Vec<u8>, crate::client::JoinError>,
    trust: &gatehouse_proto::JoinTrust,
    now_ms: i64,
) -> Check {
    let fail = |detail: String| Check {
        name: "revocation",
        ok: false,
        warn: false,
        detail,
    };
    let der = match crl {
        Ok(der) => der,
        Err(e) => return fail(format!("the host's CRL could not be fetched: {e}")),
    };
    match crate::revocation::check_crl(&der, trust, serial, now_ms) {
        Ok(None) => Check {
            name: "revocation",
            ok: true,
            warn: false,
            detail: format!("serial {serial} is not in the host's CRL"),
        },
        Ok(Some(revoked)) => fail(format!(
            "serial {serial} is REVOKED ({}) since {} s after the epoch: it no longer renews;              a superseded certificate was replaced by a renewal (is node.crt the newest?)",
            revoked.reason.as_deref().unwrap_or("no reason given"),
            revoked.revoked_at_s
        )),
        Err(e) => fail(e.to_string()),
    }
}

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// What was checked: `node key`, `identity`, `attestation key`.
    pub name: &'static str,
    /// Whether it is fine (a warning is fine: it does not fail `doctor`).
    pub ok: bool,
    /// Whether it is fine but deserves attention (a file key on a host with a TPM).
    pub warn: bool,
    /// What was found, for people.
    pub detail: String,
}

impl std::fmt::Display for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mark = match (self.ok, self.warn) {
            (false, _) => "FAIL",
            (true, true) => "warn",
            (true, false) => "ok  ",
        };
        write!(f, "{mark} {}: {}", self.name, self.detail)
    }
}

/// The checks of the identity in `dir`, with the TPM at `tpm` when one is given.
/// A build without TPM support says so first (a warning on a host with a TPM, whose node key
/// then stays a file).
pub fn doctor(dir: &Path, tpm: Option<&HostTpm>) -> Vec<Check> {
    let mut checks = Vec::new();
    if !TPM_SUPPORT {
        checks.push(Check {
            name: "tpm",
            ok: true,
            warn: host_has_tpm(),
            detail: "this agent was built without TPM support: token, provisioned, cloud and \
                     ramdisk joins with a file key only"
                .into(),
        });
    }
    let key_path = dir.join(KEY_FILE);
    let text = match std::fs::read_to_string(&key_path) {
        Ok(t) => t,
        Err(e) => {
            checks.push(Check {
                name: "node key",
                ok: false,
                warn: false,
                detail: format!(
                    "{}: {e}; join first: gatehouse-agent join",
                    key_path.display()
                ),
            });
            return checks;
        }
    };
    let in_tpm = KeyPlace::of_file_text(&text) == KeyPlace::Tpm;
    let host_tpm = tpm.is_some() || host_has_tpm();
    checks.push(Check {
        name: "node key",
        ok: true,
        warn: !in_tpm && host_tpm,
        detail: match (in_tpm, host_tpm) {
            (true, _) => format!(
                "in the TPM ({} holds only the record it is derived from)",
                key_path.display()
            ),
            (false, true) if TPM_SUPPORT => format!(
                "a file ({}) on a host with a TPM: the next renewal moves it into the TPM \
                 (through gatehouse-agent helper when the agent runs unprivileged)",
                key_path.display()
            ),
            (false, true) => format!(
                "a file ({}) on a host with a TPM: it stays a file, this agent was built \
                 without TPM support (install the TPM build to move it into the TPM)",
                key_path.display()
            ),
            (false, false) => format!("a file ({}); this host has no TPM", key_path.display()),
        },
    });
    if in_tpm && tpm.is_none() {
        checks.push(Check {
            name: "identity",
            ok: false,
            warn: false,
            detail: if TPM_SUPPORT {
                "the node key is in the TPM and no TPM could be opened (--tpm)".into()
            } else {
                "the node key is in the TPM and this agent was built without TPM support: \
                 install the TPM build"
                    .into()
            },
        });
        return checks;
    }
    let loaded = match load_identity_with(dir, tpm) {
        Ok(l) => l,
        Err(e) => {
            checks.push(Check {
                name: "identity",
                ok: false,
                warn: false,
                detail: e.to_string(),
            });
            return checks;
        }
    };
    checks.push(Check {
        name: "identity",
        ok: true,
        warn: false,
        detail: format!(
            "node {} ({}); the node key loads and is the one node.crt certifies",
            loaded.identity.node_id, loaded.identity.spiffe_id
        ),
    });
    let now = crate::x509pop::now_ms();
    checks.push(if now >= loaded.cert.not_after_ms {
        Check {
            name: "certificate",
            ok: false,
            warn: false,
            detail: format!(
                "serial {} expired {} ago: `gatehouse-agent run` re-joins with x509pop within                  the host's grace",
                loaded.cert.serial,
                humantime::format_duration(std::time::Duration::from_secs(
                    u64::try_from((now - loaded.cert.not_after_ms) / 1000).unwrap_or(0)
                ))
            ),
        }
    } else {
        Check {
            name: "certificate",
            ok: true,
            warn: false,
            detail: format!(
                "serial {} valid for {} more",
                loaded.cert.serial,
                humantime::format_duration(std::time::Duration::from_secs(
                    u64::try_from((loaded.cert.not_after_ms - now) / 1000).unwrap_or(0)
                ))
            ),
        }
    });
    let leaf = loaded.chain.first().map_or(&[][..], |c| c);
    if let Some(name) = crate::cert::ak_name(leaf) {
        let statement = gatehouse_proto::tpm::ak_statement(&name).unwrap_or_default();
        #[cfg(feature = "tpm")]
        let check = match tpm.map(crate::tpm::Tpm::ak_public) {
            Some(Ok(ak)) if crate::tpm::tpm_name(&ak) == name => Check {
                name: "attestation key",
                ok: true,
                warn: false,
                detail: format!("the TPM holds the AK the certificate names ({statement})"),
            },
            Some(Ok(_)) => Check {
                name: "attestation key",
                ok: false,
                warn: false,
                detail: format!(
                    "the TPM's AK is not the one the certificate names ({statement}): another \
                     TPM, or its endorsement seed changed; renewals will fail. Delete the old \
                     node on the host, then: gatehouse-agent join --reset --yes --attestor tpm"
                ),
            },
            Some(Err(e)) => Check {
                name: "attestation key",
                ok: false,
                warn: false,
                detail: e.to_string(),
            },
            None => Check {
                name: "attestation key",
                ok: false,
                warn: false,
                detail: format!("the certificate names {statement}; no TPM to check it (--tpm)"),
            },
        };
        #[cfg(not(feature = "tpm"))]
        let check = Check {
            name: "attestation key",
            ok: false,
            warn: false,
            detail: format!(
                "the certificate names {statement}; this agent was built without TPM support"
            ),
        };
        checks.push(check);
    }
    checks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_this_user_can_open_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let device = dir.path().join("tpmrm0");
        assert!(!can_open_device(&device), "absent");
        std::fs::write(&device, b"").unwrap();
        assert!(can_open_device(&device), "read-write for this user");
    }

    /// A build without TPM support says so, and a node key in the TPM fails its identity
    /// check with the reason instead of a parse error.
    #[cfg(not(feature = "tpm"))]
    #[test]
    fn a_build_without_tpm_support_says_so() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(KEY_FILE),
            "-----BEGIN BCD TPM NODE KEY-----\nAAAA\n-----END BCD TPM NODE KEY-----\n",
        )
        .unwrap();
        let checks = doctor(dir.path(), None);
        assert_eq!(checks[0].name, "tpm");
        assert!(checks[0].ok);
        assert!(
            checks[0]
                .detail
                .starts_with("this agent was built without TPM support")
        );
        let identity = checks.iter().find(|c| c.name == "identity").unwrap();
        assert!(!identity.ok);
        assert!(
            identity.detail.contains("built without TPM support"),
            "{}",
            identity.detail
        );
    }
}
