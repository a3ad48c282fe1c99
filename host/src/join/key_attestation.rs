//! Renewal of a certificate naming a TPM attestation key (`urn:bc:tpm-ak:<nameAlg>:<digest>`):
//! the next key must be certified by that same AK, in the same TPM, over this CSR.
//!
//! The AK's public area must have the TPM name the statement names (the name hashes the whole
//! area, so only that key matches) and attestation-key attributes; its TPM2_Certify of the new
//! key must verify, be qualified by `sha256(csr)`, name the given key public area, whose
//! attributes make it a TPM-resident signing key, and that key must be the CSR's. There is no
//! downgrade: without a key attestation such a leaf never renews.

use gatehouse_proto::tpm::{TPM_AK_STATEMENT_PREFIX, TpmKeyAttestation, ak_name_from_statement};
use gatehouse_tpm::TpmError;

use super::renew::RenewRefusal;
use crate::imports::tpm::native::AwsLcVerifier;
use crate::pki::VerifiedCsr;
use crate::pki::verify::sha256;

/// Checks the key attestation a renewal of a leaf with `statements` carries, if the leaf names
/// an AK; a leaf without an AK statement needs none (and one sent is ignored).
pub fn check(
    statements: &[String],
    attestation: Option<&TpmKeyAttestation>,
    csr: &VerifiedCsr,
) -> Result<(), RenewRefusal> {
    let mut named = statements
        .iter()
        .filter(|s| s.starts_with(TPM_AK_STATEMENT_PREFIX));
    let Some(statement) = named.next() else {
        return Ok(());
    };
    // The host writes one well-formed statement at most; anything else cannot be proved.
    let ak_name = ak_name_from_statement(statement)
        .filter(|_| named.next().is_none())
        .ok_or(RenewRefusal::KeyAttestationAkName)?;
    let attestation = attestation.ok_or(RenewRefusal::KeyAttestationRequired)?;

    let ak = gatehouse_tpm::check_ak(&attestation.ak_public).map_err(|e| match e {
        TpmError::Attributes(_) => RenewRefusal::KeyAttestationAkAttributes,
        _ => RenewRefusal::NodeKeyMalformed,
    })?;
    if ak.name != ak_name {
        return Err(RenewRefusal::KeyAttestationAkName);
    }
    let key = gatehouse_tpm::verify_certify(
        &AwsLcVerifier,
        &attestation.ak_public,
        &attestation.certify_info,
        &attestation.signature,
        &attestation.key_public,
        &csr.sha256,
    )
    .map_err(|e| match e {
        TpmError::BadSignature => RenewRefusal::NodeKeySignature,
        TpmError::WrongNonce => RenewRefusal::NodeKeyNonce,
        TpmError::WrongName => RenewRefusal::NodeKeyName,
        TpmError::Attributes(_) => RenewRefusal::NodeKeyAttributes,
        _ => RenewRefusal::NodeKeyMalformed,
    })?;
    if sha256(&key.spki) != csr.spki_sha256 {
        return Err(RenewRefusal::NodeKeyNotCsr);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use aws_lc_rs::rand::SystemRandom;
    use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _};
    use gatehouse_proto::tpm::ak_statement;
    use gatehouse_tpm::marshal::{
        AK_ATTRIBUTES, NODE_KEY_ATTRIBUTES, certify_attest, ecc_p256_public, ecdsa_sha256_signature,
    };
    use gatehouse_tpm::{Public, attr};

    use super::*;

    fn key() -> (EcdsaKeyPair, [u8; 64]) {
        let pair = EcdsaKeyPair::generate(&ECDSA_P256_SHA256_FIXED_SIGNING).unwrap();
        let mut xy = [0u8; 64];
        xy.copy_from_slice(&pair.public_key().as_ref()[1..]);
        (pair, xy)
    }

    fn public(xy: &[u8; 64], attributes: u32, scheme: bool) -> Vec<u8> {
        ecc_p256_public(attributes, scheme, &xy[..32], &xy[32..])
    }

    fn sign(pair: &EcdsaKeyPair, message: &[u8]) -> Vec<u8> {
        let sig = pair.sign(&SystemRandom::new(), message).unwrap();
        ecdsa_sha256_signature(sig.as_ref())
    }

    struct Setup {
        ak: EcdsaKeyPair,
        ak_public: Vec<u8>,
        node_xy: [u8; 64],
        statement: String,
        csr: VerifiedCsr,
    }

    fn setup() -> Setup {
        let (ak, ak_xy) = key();
        let ak_public = public(&ak_xy, AK_ATTRIBUTES, true);
        let statement = ak_statement(&Public::parse(&ak_public).unwrap().name).unwrap();
        let (_, node_xy) = key();
        let spki = Public::parse(&public(&node_xy, NODE_KEY_ATTRIBUTES, false))
            .unwrap()
            .spki;
        let csr_der = b"the next CSR".to_vec();
        let csr = VerifiedCsr {
            sha256: sha256(&csr_der),
            der: csr_der,
            spki_sha256: sha256(&spki),
            spki_der: spki,
        };
        Setup {
            ak,
            ak_public,
            node_xy,
            statement,
            csr,
        }
    }

    impl Setup {
        fn attestation(&self, key_public: Vec<u8>, nonce: &[u8]) -> TpmKeyAttestation {
            let name = Public::parse(&key_public).unwrap().name;
            let certify_info = certify_attest(nonce, &name);
            TpmKeyAttestation {
                ak_public: self.ak_public.clone(),
                signature: sign(&self.ak, &certify_info),
                certify_info,
                key_public,
            }
        }

        fn good(&self) -> TpmKeyAttestation {
            self.attestation(
                public(&self.node_xy, NODE_KEY_ATTRIBUTES, false),
                &self.csr.sha256,
            )
        }

        fn check(&self, a: Option<&TpmKeyAttestation>) -> Result<(), RenewRefusal> {
            check(std::slice::from_ref(&self.statement), a, &self.csr)
        }
    }

    #[test]
    fn a_leaf_without_a_statement_needs_no_attestation() {
        let s = setup();
        assert_eq!(check(&[], None, &s.csr), Ok(()));
        assert_eq!(check(&["urn:bc:other".into()], None, &s.csr), Ok(()));
    }

    #[test]
    fn the_same_ak_certifying_the_csr_key_renews() {
        let s = setup();
        assert_eq!(s.check(Some(&s.good())), Ok(()));
    }

    #[test]
    fn every_failure_is_refused_with_its_reason() {
        let s = setup();
        assert_eq!(s.check(None), Err(RenewRefusal::KeyAttestationRequired));
        // Another AK (another TPM, or its endorsement seed changed).
        let (other, other_xy) = key();
        let mut a = s.good();
        a.ak_public = public(&other_xy, AK_ATTRIBUTES, true);
        a.signature = sign(&other, &a.certify_info);
        assert_eq!(s.check(Some(&a)), Err(RenewRefusal::KeyAttestationAkName));
        // An AK with the right name cannot have other attributes; a statement naming an AK
        // that is not restricted is refused on its attributes.
        let (weak, weak_xy) = key();
        let weak_public = public(&weak_xy, AK_ATTRIBUTES & !attr::RESTRICTED, true);
        let weak_statement = ak_statement(&Public::parse(&weak_public).unwrap().name).unwrap();
        let mut a = s.good();
        a.ak_public = weak_public;
        a.signature = sign(&weak, &a.certify_info);
        assert_eq!(
            check(&[weak_statement], Some(&a), &s.csr),
            Err(RenewRefusal::KeyAttestationAkAttributes)
        );
        // A flipped signature byte.
        let mut a = s.good();
        let last = a.signature.len() - 1;
        a.signature[last] ^= 1;
        assert_eq!(s.check(Some(&a)), Err(RenewRefusal::NodeKeySignature));
        // Over another CSR.
        let a = s.attestation(public(&s.node_xy, NODE_KEY_ATTRIBUTES, false), &[0; 32]);
        assert_eq!(s.check(Some(&a)), Err(RenewRefusal::NodeKeyNonce));
        // Certifies another key than the public area sent.
        let mut a = s.good();
        a.key_public = public(&key().1, NODE_KEY_ATTRIBUTES, false);
        assert_eq!(s.check(Some(&a)), Err(RenewRefusal::NodeKeyName));
        // A key with decrypt set.
        let a = s.attestation(
            public(&s.node_xy, NODE_KEY_ATTRIBUTES | attr::DECRYPT, false),
            &s.csr.sha256,
        );
        assert_eq!(s.check(Some(&a)), Err(RenewRefusal::NodeKeyAttributes));
        // A certified TPM key that is not the CSR's.
        let a = s.attestation(public(&key().1, NODE_KEY_ATTRIBUTES, false), &s.csr.sha256);
        assert_eq!(s.check(Some(&a)), Err(RenewRefusal::NodeKeyNotCsr));
        // Garbage.
        let mut a = s.good();
        a.certify_info = vec![1, 2, 3];
        assert_eq!(s.check(Some(&a)), Err(RenewRefusal::NodeKeyMalformed));
        // A malformed or doubled statement.
        assert_eq!(
            check(&["urn:bc:tpm-ak:sha256:00".into()], Some(&s.good()), &s.csr),
            Err(RenewRefusal::KeyAttestationAkName)
        );
        assert_eq!(
            check(
                &[s.statement.clone(), s.statement.clone()],
                Some(&s.good()),
                &s.csr
            ),
            Err(RenewRefusal::KeyAttestationAkName)
        );
    }
}
