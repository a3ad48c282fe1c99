//! `gatehouse-agent doctor`: where the node key lives, whether it loads and is the key the node
//! certificate certifies, and whether the TPM still holds the attestation key the certificate
//! names.

use std::path::Path;

use crate::identity::{KEY_FILE, load_identity_with};

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// What was checked: `node key`, `identity`, `attestation key`.
    pub name: &'static str,
    /// Whether it is fine.
    pub ok: bool,
    /// What was found, for people.
    pub detail: String,
}

impl std::fmt::Display for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mark = if self.ok { "ok  " } else { "FAIL" };
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
                detail: format!(
                    "{}: {e}; join first: gatehouse-agent join",
                    key_path.display()
                ),
            });
            return checks;
        }
    };
    #[cfg(feature = "tpm")]
    let in_tpm = crate::tpm::is_record(&text);
    #[cfg(not(feature = "tpm"))]
    let in_tpm = text.contains("BCD TPM NODE KEY");
    checks.push(Check {
        name: "node key",
        ok: true,
        detail: if in_tpm {
            format!(
                "in the TPM ({} holds only the record it is derived from)",
                key_path.display()
            )
        } else {
            format!("a file ({})", key_path.display())
        },
    });
    if in_tpm && tpm.is_none() {
        checks.push(Check {
            name: "identity",
            ok: false,
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
                detail: e.to_string(),
            });
            return checks;
        }
    };
    checks.push(Check {
        name: "identity",
        ok: true,
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
                detail: format!("the TPM holds the AK the certificate names ({statement})"),
            },
            Some(Ok(_)) => Check {
                name: "attestation key",
                ok: false,
                detail: format!(
                    "the TPM's AK is not the one the certificate names ({statement}): another \
                     TPM, or its endorsement seed changed; renewals will fail. Delete the old \
                     node on the host, then: gatehouse-agent join --reset --yes --attestor tpm"
                ),
            },
            Some(Err(e)) => Check {
                name: "attestation key",
                ok: false,
                detail: e.to_string(),
            },
            None => Check {
                name: "attestation key",
                ok: false,
                detail: format!("the certificate names {statement}; no TPM to check it (--tpm)"),
            },
        };
        #[cfg(not(feature = "tpm"))]
        let check = Check {
            name: "attestation key",
            ok: false,
            detail: format!("the certificate names {statement}; built without TPM support"),
        };
        checks.push(check);
    }
    checks
}
