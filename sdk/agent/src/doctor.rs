//! `gatehouse-agent doctor`: where the node key lives, whether it loads and is the key the node
//! certificate certifies, and whether the TPM still holds the attestation key the certificate
//! names.

use std::path::Path;

use crate::identity::{KEY_FILE, load_identity_with};
use crate::status::KeyPlace;

/// The device node of the host's TPM (the kernel's resource manager): a host where it exists
/// has a TPM, and every new node key belongs there.
pub const TPM_DEVICE: &str = "/dev/tpmrm0";

/// Whether this host has a TPM the node key could live in.
pub fn host_has_tpm() -> bool {
    Path::new(TPM_DEVICE).exists()
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
pub fn doctor(
    dir: &Path,
    #[cfg(feature = "tpm")] tpm: Option<&crate::tpm::Tpm>,
    #[cfg(not(feature = "tpm"))] tpm: Option<std::convert::Infallible>,
) -> Vec<Check> {
    let mut checks = Vec::new();
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
            (false, true) => format!(
                "a file ({}) on a host with a TPM: the next renewal moves it into the TPM \
                 (through gatehouse-agent helper when the agent runs unprivileged)",
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
            detail: "the node key is in the TPM and no TPM could be opened (--tpm)".into(),
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
            detail: format!("the certificate names {statement}; built without TPM support"),
        };
        checks.push(check);
    }
    checks
}
