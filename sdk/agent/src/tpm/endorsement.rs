//! Which endorsement key (EK) the agent proves: one of the TCG EK Credential Profile's
//! templates whose key the TPM derives from its endorsement seed, and whose certificate the
//! manufacturer stored at that template's NV index.
//!
//! A TPM may hold several EK certificates (an RSA-2048 and an ECC P-256 one is common; some
//! newer TPMs have only ECC; swtpm has RSA and P-384). `--ek auto` takes the first template in
//! [`EkTemplate::ALL`] whose certificate index exists. RSA-2048 comes first so that an agent
//! that joined before ECC EKs were supported keeps proving the same EK (its binding is the
//! EK's hash). `--ek ecc-p256` is the faster choice on a discrete TPM, where deriving an RSA
//! primary key can take seconds.

use tss_esapi::abstraction::AsymmetricAlgorithmSelection;
use tss_esapi::interface_types::ecc::EccCurve;
use tss_esapi::interface_types::key_bits::RsaKeyBits;

/// An EK template of the TCG EK Credential Profile (2.x) this agent derives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EkTemplate {
    /// Low range L-1: RSA-2048, SHA-256, AES-128; certificate at 0x01c00002.
    Rsa2048,
    /// Low range L-2: ECC NIST P-256, SHA-256, AES-128; certificate at 0x01c0000a.
    EccP256,
    /// High range H-6: RSA-3072, SHA-384, AES-256; certificate at 0x01c0001c.
    Rsa3072,
    /// High range H-3: ECC NIST P-384, SHA-384, AES-256; certificate at 0x01c00016.
    EccP384,
}

impl EkTemplate {
    /// Every template, in the order `--ek auto` tries them.
    pub const ALL: [Self; 4] = [Self::Rsa2048, Self::EccP256, Self::Rsa3072, Self::EccP384];

    /// The NV index of its EK certificate.
    pub fn certificate_index(self) -> u32 {
        match self {
            Self::Rsa2048 => 0x01c0_0002,
            Self::EccP256 => 0x01c0_000a,
            Self::Rsa3072 => 0x01c0_001c,
            Self::EccP384 => 0x01c0_0016,
        }
    }

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Rsa2048 => "rsa2048",
            Self::EccP256 => "ecc-p256",
            Self::Rsa3072 => "rsa3072",
            Self::EccP384 => "ecc-p384",
        }
    }

    /// The key tss-esapi's EK templates derive for it.
    pub(crate) fn selection(self) -> AsymmetricAlgorithmSelection {
        match self {
            Self::Rsa2048 => AsymmetricAlgorithmSelection::Rsa(RsaKeyBits::Rsa2048),
            Self::EccP256 => AsymmetricAlgorithmSelection::Ecc(EccCurve::NistP256),
            Self::Rsa3072 => AsymmetricAlgorithmSelection::Rsa(RsaKeyBits::Rsa3072),
            Self::EccP384 => AsymmetricAlgorithmSelection::Ecc(EccCurve::NistP384),
        }
    }

    /// Whether its EK has userWithAuth set (the high-range templates): its user role, which
    /// TPM2_ActivateCredential needs, is then authorized with the empty auth value. A
    /// low-range EK's user role needs its policy, PolicySecret(TPM_RH_ENDORSEMENT).
    pub(crate) fn user_with_auth(self) -> bool {
        matches!(self, Self::Rsa3072 | Self::EccP384)
    }
}

impl std::fmt::Display for EkTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Which EK to prove: a template, or the first with a certificate in NV.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EkSelection {
    /// The first of [`EkTemplate::ALL`] whose certificate index exists.
    #[default]
    Auto,
    /// This template.
    Template(EkTemplate),
}

impl EkSelection {
    /// The template chosen, given which NV indices exist.
    pub fn resolve(self, has_index: impl Fn(u32) -> bool) -> Option<EkTemplate> {
        match self {
            Self::Template(t) => Some(t),
            Self::Auto => EkTemplate::ALL
                .into_iter()
                .find(|t| has_index(t.certificate_index())),
        }
    }
}

impl std::str::FromStr for EkSelection {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "auto" {
            return Ok(Self::Auto);
        }
        EkTemplate::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .map(Self::Template)
            .ok_or_else(|| {
                format!("{s}: not an EK template (auto, rsa2048, ecc-p256, rsa3072, ecc-p384)")
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_prefers_rsa2048_then_the_low_range_ecc_key() {
        let has = |present: &'static [u32]| move |i: u32| present.contains(&i);
        assert_eq!(
            EkSelection::Auto.resolve(has(&[0x01c0_0016, 0x01c0_0002])),
            Some(EkTemplate::Rsa2048)
        );
        assert_eq!(
            EkSelection::Auto.resolve(has(&[0x01c0_0016, 0x01c0_000a])),
            Some(EkTemplate::EccP256)
        );
        assert_eq!(
            EkSelection::Auto.resolve(has(&[0x01c0_0016])),
            Some(EkTemplate::EccP384)
        );
        assert_eq!(EkSelection::Auto.resolve(has(&[0x01c0_0003])), None);
        // A named template is used whatever NV holds.
        assert_eq!(
            EkSelection::Template(EkTemplate::Rsa3072).resolve(has(&[])),
            Some(EkTemplate::Rsa3072)
        );
    }

    #[test]
    fn parses_every_name_and_refuses_others() {
        for t in EkTemplate::ALL {
            assert_eq!(t.name().parse(), Ok(EkSelection::Template(t)));
        }
        assert_eq!("auto".parse(), Ok(EkSelection::Auto));
        assert!("ecc".parse::<EkSelection>().is_err());
        assert!("RSA2048".parse::<EkSelection>().is_err());
    }
}
