//! The commissioning ramdisk's side of discovery: it reads the discovery token and the site
//! node's assertion from its kernel command line (`bc.token=… bc.assertion=…`, put there by
//! the site agent's boot server) and joins with attestor `discovery` as `ramdisk`, claiming
//! its MACs and product UUID.

use std::path::Path;

use gatehouse_proto::discovery::parse_cmdline;
use gatehouse_proto::{Challenge, Claims, Role, TokenString};

use crate::producer::{EvidenceProducer, ProducerError};

/// The attestor a ramdisk joins through.
pub const DISCOVERY: &str = "discovery";

/// Why the command line does not carry what a ramdisk joins with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CmdlineError {
    /// No `bc.token=`.
    #[error("the kernel command line carries no bc.token")]
    NoToken,
    /// No `bc.assertion=`.
    #[error("the kernel command line carries no bc.assertion")]
    NoAssertion,
    /// `bc.token` is not a join token.
    #[error("bc.token: {0}")]
    Token(#[from] gatehouse_proto::TokenError),
}

/// What the boot server put on the command line.
#[derive(Debug)]
pub struct BootCredentials {
    /// The single-use discovery token.
    pub token: TokenString,
    /// The serialized assertion, sent as the attestation as it is.
    pub assertion: String,
}

/// Reads the token and the assertion from a kernel command line.
pub fn read_cmdline(cmdline: &str) -> Result<BootCredentials, CmdlineError> {
    let (token, assertion) = parse_cmdline(cmdline);
    let token = TokenString::parse(&token.ok_or(CmdlineError::NoToken)?)?;
    let assertion = assertion.ok_or(CmdlineError::NoAssertion)?;
    Ok(BootCredentials { token, assertion })
}

/// The evidence of a discovery join: the serialized assertion. No challenges.
#[derive(Debug, Clone)]
pub struct DiscoveryProducer {
    assertion: String,
}

impl DiscoveryProducer {
    /// Sends `assertion` (the `bc.assertion` value).
    pub fn new(assertion: &str) -> Self {
        Self {
            assertion: assertion.to_owned(),
        }
    }
}

impl EvidenceProducer for DiscoveryProducer {
    fn attestor(&self) -> &str {
        DISCOVERY
    }

    fn role(&self) -> Role {
        Role::Ramdisk
    }

    fn evidence(&mut self, _csr_der: &[u8]) -> Result<Vec<u8>, ProducerError> {
        Ok(self.assertion.clone().into_bytes())
    }

    fn answer(&mut self, _: &Challenge, _: &[u8]) -> Result<Vec<u8>, ProducerError> {
        Err(ProducerError::NoChallenges {
            attestor: DISCOVERY.into(),
        })
    }
}

/// The machine's hardware claims as Linux shows them under `sys` (normally `/sys`): the MAC
/// of every interface but loopback (`class/net/*/address`, all-zero ones skipped) and the
/// SMBIOS product UUID (`class/dmi/id/product_uuid`, readable by root only), lowercased.
pub fn local_claims(sys: &Path) -> Claims {
    let mut macs: Vec<String> = std::fs::read_dir(sys.join("class/net"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| entry.file_name() != "lo")
        .filter_map(|entry| std::fs::read_to_string(entry.path().join("address")).ok())
        .map(|a| a.trim().to_ascii_lowercase())
        .filter(|a| gatehouse_proto::discovery::is_mac(a) && a != "00:00:00:00:00:00")
        .collect();
    macs.sort();
    macs.dedup();
    let product_uuid = std::fs::read_to_string(sys.join("class/dmi/id/product_uuid"))
        .ok()
        .map(|u| u.trim().to_ascii_lowercase())
        .filter(|u| !u.is_empty());
    Claims { macs, product_uuid }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_command_line() {
        let creds = read_cmdline(
            "BOOT_IMAGE=/vmlinuz console=ttyS0 bc.token=gh1.tok_a.AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8 bc.assertion=eyJ4IjoxfQ.AQ quiet\n",
        )
        .unwrap();
        assert_eq!(creds.token.id, "tok_a");
        assert_eq!(creds.assertion, "eyJ4IjoxfQ.AQ");
        assert!(matches!(
            read_cmdline("bc.assertion=x"),
            Err(CmdlineError::NoToken)
        ));
        assert!(matches!(
            read_cmdline("bc.token=gh1.tok_a.AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8"),
            Err(CmdlineError::NoAssertion)
        ));
        assert!(matches!(
            read_cmdline("bc.token=nope bc.assertion=x"),
            Err(CmdlineError::Token(_))
        ));
    }

    #[test]
    fn claims_from_sys() {
        let sys = tempfile::tempdir().unwrap();
        for (iface, mac) in [
            ("lo", "00:00:00:00:00:00"),
            ("eth0", "52:54:00:AB:CD:EF"),
            ("eth1", "52:54:00:00:00:01"),
            ("dummy0", "00:00:00:00:00:00"),
        ] {
            let dir = sys.path().join("class/net").join(iface);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("address"), format!("{mac}\n")).unwrap();
        }
        let dmi = sys.path().join("class/dmi/id");
        std::fs::create_dir_all(&dmi).unwrap();
        std::fs::write(
            dmi.join("product_uuid"),
            "4C4C4544-0042-3510-8052-B4C04F4E4D32\n",
        )
        .unwrap();
        let claims = local_claims(sys.path());
        assert_eq!(claims.macs, ["52:54:00:00:00:01", "52:54:00:ab:cd:ef"]);
        assert_eq!(
            claims.product_uuid.as_deref(),
            Some("4c4c4544-0042-3510-8052-b4c04f4e4d32")
        );
        assert_eq!(local_claims(&sys.path().join("none")), Claims::default());
    }
}
