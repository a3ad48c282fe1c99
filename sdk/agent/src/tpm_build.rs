//! What this build of the agent knows of the TPM. The TPM code (tss-esapi over the system's
//! libtss2) is the `tpm` feature: a fleet that joins with tokens, user data or cloud documents
//! can run a build without it, which links no libtss2. The names here are the same in both
//! builds, so that the command line, the install script and `doctor` can say what the build
//! lacks instead of failing to parse.

/// Whether this build has TPM support (the `tpm` feature).
pub const TPM_SUPPORT: bool = cfg!(feature = "tpm");

/// The tpm attestor's id.
pub const TPM: &str = "tpm";

/// The TCTI of a host's TPM: the kernel's resource manager.
pub const DEFAULT_TCTI: &str = "device:/dev/tpmrm0";

/// Where the TPM helper listens by default (systemd's RuntimeDirectory of the helper unit).
pub const DEFAULT_SOCKET: &str = "/run/gatehouse-agent/helper.sock";

/// The TPM a node key, an identity or a check may use: [`crate::tpm::Tpm`] in a build with
/// TPM support; in a build without, a type with no values, so no code path reaches a TPM.
#[cfg(feature = "tpm")]
pub type HostTpm = crate::tpm::Tpm;
/// The TPM a node key, an identity or a check may use: in this build without TPM support, a
/// type with no values, so no code path reaches a TPM.
#[cfg(not(feature = "tpm"))]
pub type HostTpm = std::convert::Infallible;

/// A TPM command line (`--attestor tpm`, `--tpm`, `--helper`, `helper`) given to a build
/// without TPM support.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "this agent was built without TPM support (cargo feature `tpm`); install the TPM build of \
     gatehouse-agent for {0}"
)]
pub struct NoTpmSupport(pub &'static str);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_names_what_needs_the_tpm_build() {
        assert_eq!(
            NoTpmSupport("--attestor tpm").to_string(),
            "this agent was built without TPM support (cargo feature `tpm`); install the TPM \
             build of gatehouse-agent for --attestor tpm"
        );
    }
}
