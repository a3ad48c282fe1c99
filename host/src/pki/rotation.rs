//! Key rotation: a new node CA, join signing key or join encryption key, with an overlap
//! window in which the retiring key still works.
//!
//! [`Pki::rotate`] makes the new key the bundle's current one and keeps the old one as the
//! *previous* key of its kind until a retire time. What each kind does in the window, and why:
//!
//! - **node CA**: the new CA issues every certificate from the rotation on. Certificates of
//!   the retiring CA still renew (and both CAs are published: `/v1/trust`, the SPIFFE bundle,
//!   a CRL signed by each), so every node moves to the new CA at its next renewal. After the
//!   window, a certificate of the retiring CA is refused (`retired-ca`); make the window at
//!   least the certificate lifetime.
//! - **join signing key**: the new key is published, and the *retiring* key keeps signing
//!   until the window ends (pre-publication), because agents can only verify what a key they
//!   pin signed. Every response carries the new trust ([`gatehouse_proto::TrustUpdate`]), so
//!   an agent pins the new key at its next renewal or join, before the host signs with it.
//! - **join encryption key**: the new key is advertised; tokens sealed to the retiring key
//!   still open until the window ends, then are refused (`retired-encryption-key`).
//!
//! Retirement is by time alone, so every replica loading the same bundle agrees on what is
//! live without being told again; a later rotation drops previous keys whose window is over.

use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair};
use gatehouse_proto::{TokenOpener, TokenOpeningKey, TokenString};
use rcgen::{Issuer, KeyPair};
use zeroize::Zeroizing;

use super::{Parts, Pki, PkiError};

/// A key that can be rotated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyKind {
    /// The node CA.
    NodeCa,
    /// The join signing key.
    JoinSigning,
    /// The join encryption key.
    JoinEncryption,
}

impl KeyKind {
    /// Every kind, in the order they are reported.
    pub const ALL: [KeyKind; 3] = [
        KeyKind::NodeCa,
        KeyKind::JoinSigning,
        KeyKind::JoinEncryption,
    ];

    /// The kind's name on the command line and in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyKind::NodeCa => "node-ca",
            KeyKind::JoinSigning => "join-signing",
            KeyKind::JoinEncryption => "join-encryption",
        }
    }
}

impl std::fmt::Display for KeyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a rotation was not made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RotationError {
    /// The previous key of this kind is still in its window: rotating again would drop it
    /// while certificates, agents or tokens may still depend on it.
    #[error("the previous {kind} key is still in its overlap window until {retire_at_ms} ms")]
    InWindow {
        /// The kind.
        kind: KeyKind,
        /// When its window ends, ms since the Unix epoch.
        retire_at_ms: i64,
    },
    /// The window is not positive.
    #[error("the overlap window must be longer than zero")]
    NoWindow,
    /// Nothing to rotate was named.
    #[error("no key to rotate was named")]
    Nothing,
}

/// A key kept for its overlap window.
pub(super) struct Retiring<T> {
    /// The key.
    pub(super) key: T,
    /// When its window ends (ms since the Unix epoch): from then on it is refused.
    pub(super) retire_at_ms: i64,
}

impl<T> Retiring<T> {
    /// The key while its window lasts.
    fn live(&self, now_ms: i64) -> Option<&T> {
        (now_ms < self.retire_at_ms).then_some(&self.key)
    }
}

/// The private parts of the previous keys, as in a bundle.
#[derive(Default)]
pub(super) struct PreviousParts {
    pub(super) node_ca: Option<Retiring<CaParts>>,
    pub(super) signing: Option<Retiring<Zeroizing<Vec<u8>>>>,
    pub(super) encryption: Option<Retiring<Zeroizing<[u8; 32]>>>,
}

/// A node CA's certificate and key.
pub(super) struct CaParts {
    pub(super) pem: String,
    pub(super) der: Vec<u8>,
    pub(super) key_pkcs8: Zeroizing<Vec<u8>>,
}

/// A retiring node CA, loaded.
pub(super) struct PreviousCa {
    pub(super) der: Vec<u8>,
    pub(super) pem: String,
    pub(super) issuer: Issuer<'static, KeyPair>,
}

/// A retiring join signing key, loaded.
pub(super) struct PreviousSigning {
    pub(super) key: EcdsaKeyPair,
    pub(super) spki: Vec<u8>,
    pub(super) key_id: String,
}

/// The previous keys of a loaded bundle.
#[derive(Default)]
pub(super) struct Previous {
    pub(super) node_ca: Option<Retiring<PreviousCa>>,
    pub(super) signing: Option<Retiring<PreviousSigning>>,
    pub(super) encryption: Option<Retiring<TokenOpener>>,
}

/// Why a sealed token did not open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// It opens under no key this host holds (or is malformed).
    #[error(transparent)]
    Unsealable(#[from] gatehouse_proto::TokenError),
    /// It was sealed to a join encryption key whose overlap window is over.
    #[error("sealed to the join encryption key retired at {retire_at_ms} ms")]
    RetiredKey {
        /// When that key's window ended.
        retire_at_ms: i64,
    },
}

/// Why a node certificate may not be used any more for its issuer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IssuerError {
    /// Its issuer is neither the current node CA nor a previous one in its window.
    #[error("the certificate's node CA is retired")]
    RetiredCa,
}

/// The signature check of `leaf_der` by the CA certificate `ca_der`.
fn signed_by(leaf_der: &[u8], ca_der: &[u8]) -> bool {
    let Ok((_, ca)) = x509_parser::parse_x509_certificate(ca_der) else {
        return false;
    };
    let Ok((rest, leaf)) = x509_parser::parse_x509_certificate(leaf_der) else {
        return false;
    };
    rest.is_empty()
        && leaf.issuer().as_raw() == ca.subject().as_raw()
        && super::verify::verify_signature(
            super::verify::Scheme::EcdsaP256Sha256Der,
            ca.public_key().raw,
            leaf.tbs_certificate.as_ref(),
            &leaf.signature_value.data,
        )
        .is_ok()
}

impl Pki {
    /// A bundle whose `kinds` keys are new, the old ones kept as previous keys until
    /// `now_ms + overlap_ms`. Previous keys whose window is over at `now_ms` are dropped;
    /// rotating a kind whose previous key is still in its window is refused.
    pub fn rotate(&self, kinds: &[KeyKind], now_ms: i64, overlap_ms: i64) -> Result<Pki, PkiError> {
        if kinds.is_empty() {
            return Err(RotationError::Nothing.into());
        }
        if overlap_ms <= 0 {
            return Err(RotationError::NoWindow.into());
        }
        let mut parts = self.parts()?;
        let previous = &mut parts.previous;
        // What is past its window goes now: only live keys are worth keeping.
        if previous
            .node_ca
            .as_ref()
            .is_some_and(|p| p.retire_at_ms <= now_ms)
        {
            previous.node_ca = None;
        }
        if previous
            .signing
            .as_ref()
            .is_some_and(|p| p.retire_at_ms <= now_ms)
        {
            previous.signing = None;
        }
        if previous
            .encryption
            .as_ref()
            .is_some_and(|p| p.retire_at_ms <= now_ms)
        {
            previous.encryption = None;
        }
        let in_window = |kind: KeyKind, retire_at_ms: Option<i64>| match retire_at_ms {
            Some(retire_at_ms) => Err(RotationError::InWindow { kind, retire_at_ms }),
            None => Ok(()),
        };
        let retire_at_ms = now_ms.saturating_add(overlap_ms);
        for kind in KeyKind::ALL.into_iter().filter(|k| kinds.contains(k)) {
            match kind {
                KeyKind::NodeCa => {
                    in_window(kind, previous.node_ca.as_ref().map(|p| p.retire_at_ms))?;
                    let super::rotation::CaParts {
                        pem,
                        der,
                        key_pkcs8,
                    } = super::new_node_ca(&parts.trust_domain)?;
                    let old = CaParts {
                        pem: std::mem::replace(&mut parts.node_ca_pem, pem),
                        der: std::mem::replace(&mut parts.node_ca_der, der),
                        key_pkcs8: std::mem::replace(&mut parts.node_ca_key_pkcs8, key_pkcs8),
                    };
                    previous.node_ca = Some(Retiring {
                        key: old,
                        retire_at_ms,
                    });
                }
                KeyKind::JoinSigning => {
                    in_window(kind, previous.signing.as_ref().map(|p| p.retire_at_ms))?;
                    let rng = aws_lc_rs::rand::SystemRandom::new();
                    let fresh =
                        EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
                            .map_err(|_| PkiError::Crypto("join signing key generation"))?;
                    let old = std::mem::replace(
                        &mut parts.signing_key_pkcs8,
                        Zeroizing::new(fresh.as_ref().to_vec()),
                    );
                    previous.signing = Some(Retiring {
                        key: old,
                        retire_at_ms,
                    });
                }
                KeyKind::JoinEncryption => {
                    in_window(kind, previous.encryption.as_ref().map(|p| p.retire_at_ms))?;
                    let (fresh, _) = gatehouse_proto::generate_token_keypair()
                        .map_err(|_| PkiError::Crypto("join encryption key generation"))?;
                    let old = std::mem::replace(
                        &mut parts.encryption_secret,
                        Zeroizing::new(fresh.to_bytes()),
                    );
                    previous.encryption = Some(Retiring {
                        key: old,
                        retire_at_ms,
                    });
                }
            }
        }
        parts.sequence = parts.sequence.saturating_add(1);
        Pki::assemble(parts)
    }

    /// The previous keys and when their windows end (ms), for `pki rotate` to report.
    pub fn retiring(&self) -> Vec<(KeyKind, i64)> {
        let p = &self.previous;
        [
            p.node_ca
                .as_ref()
                .map(|r| (KeyKind::NodeCa, r.retire_at_ms)),
            p.signing
                .as_ref()
                .map(|r| (KeyKind::JoinSigning, r.retire_at_ms)),
            p.encryption
                .as_ref()
                .map(|r| (KeyKind::JoinEncryption, r.retire_at_ms)),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// How many rotations this bundle has been through.
    pub fn sequence(&self) -> u64 {
        self.sequence
    }

    /// The node CA certificates live at `now_ms`, DER, the current one first.
    pub fn live_node_cas_der(&self, now_ms: i64) -> Vec<&[u8]> {
        std::iter::once(self.node_ca_der.as_slice())
            .chain(
                self.previous
                    .node_ca
                    .as_ref()
                    .and_then(|p| p.live(now_ms))
                    .map(|ca| ca.der.as_slice()),
            )
            .collect()
    }

    /// The issuers of the CAs live at `now_ms`, the current one first (each signs a CRL).
    pub(super) fn live_issuers(&self, now_ms: i64) -> Vec<&Issuer<'static, KeyPair>> {
        std::iter::once(&self.ca)
            .chain(
                self.previous
                    .node_ca
                    .as_ref()
                    .and_then(|p| p.live(now_ms))
                    .map(|ca| &ca.issuer),
            )
            .collect()
    }

    /// Whether `leaf_der`, a certificate this host issued, was issued by a node CA live at
    /// `now_ms`.
    pub fn check_issuer(&self, leaf_der: &[u8], now_ms: i64) -> Result<(), IssuerError> {
        if self
            .live_node_cas_der(now_ms)
            .into_iter()
            .any(|ca| signed_by(leaf_der, ca))
        {
            Ok(())
        } else {
            Err(IssuerError::RetiredCa)
        }
    }

    /// Opens a token sealed (for the CSR hashing to `csr_sha256`) to the current join
    /// encryption key, or to the previous one while its window lasts at `now_ms`. A token
    /// sealed to the previous key after its window is [`OpenError::RetiredKey`], so the
    /// refusal says why rather than "does not open".
    pub fn open_token(
        &self,
        sealed: &[u8],
        csr_sha256: &[u8; 32],
        now_ms: i64,
    ) -> Result<TokenString, OpenError> {
        let current = match self.token_key.open(sealed, csr_sha256) {
            Ok(token) => return Ok(token),
            Err(e) => e,
        };
        let Some(previous) = &self.previous.encryption else {
            return Err(current.into());
        };
        match previous.key.open(sealed, csr_sha256) {
            Ok(token) if previous.live(now_ms).is_some() => Ok(token),
            Ok(_) => Err(OpenError::RetiredKey {
                retire_at_ms: previous.retire_at_ms,
            }),
            Err(_) => Err(current.into()),
        }
    }

    /// The key that signs responses at `now_ms` and its key id: the previous join signing key
    /// while its window lasts (agents that have not renewed yet pin only it), else the current.
    pub(super) fn signer(&self, now_ms: i64) -> (&EcdsaKeyPair, &str) {
        match self.previous.signing.as_ref().and_then(|p| p.live(now_ms)) {
            Some(previous) => (&previous.key, previous.key_id.as_str()),
            None => (&self.signing_key, self.signing_key_id.as_str()),
        }
    }

    /// The join signing keys agents should pin at `now_ms` besides the current one.
    pub(super) fn other_signing_spkis(&self, now_ms: i64) -> Vec<Vec<u8>> {
        self.previous
            .signing
            .as_ref()
            .and_then(|p| p.live(now_ms))
            .map(|p| p.spki.clone())
            .into_iter()
            .collect()
    }

    /// The live node CAs at `now_ms` as one PEM text, the current one first.
    pub(super) fn live_node_cas_pem(&self, now_ms: i64) -> String {
        let mut pem = self.node_ca_pem.clone();
        if let Some(previous) = self.previous.node_ca.as_ref().and_then(|p| p.live(now_ms)) {
            if !pem.ends_with('\n') {
                pem.push('\n');
            }
            pem.push_str(&previous.pem);
        }
        pem
    }

    /// What signed responses carry at `now_ms` once the keys have been rotated: the keys as
    /// they are now. Before the first rotation there is nothing to update, and nothing is sent.
    pub fn trust_update(&self, now_ms: i64) -> Option<gatehouse_proto::TrustUpdate> {
        (self.sequence > 0).then(|| gatehouse_proto::TrustUpdate {
            sequence: self.sequence,
            node_ca_pem: self.live_node_cas_pem(now_ms),
            join_signing_key: self.signing_spki.clone(),
            other_join_signing_keys: self.other_signing_spkis(now_ms),
            join_encryption_key: self.join_encryption_public().to_vec(),
        })
    }
}

/// Loads the previous keys' private parts, each checked to load.
pub(super) fn load_previous(parts: PreviousParts) -> Result<Previous, PkiError> {
    use super::BundleError::Inconsistent;
    let node_ca = match parts.node_ca {
        None => None,
        Some(Retiring { key, retire_at_ms }) => {
            let keypair = KeyPair::try_from(key.key_pkcs8.as_slice())
                .map_err(|_| Inconsistent("the previous node CA key does not load"))?;
            let (rest, cert) = x509_parser::parse_x509_certificate(&key.der)
                .map_err(|_| Inconsistent("the previous node CA certificate does not parse"))?;
            if !rest.is_empty()
                || !cert.is_ca()
                || cert.public_key().raw
                    != rcgen::PublicKeyData::subject_public_key_info(&keypair).as_slice()
            {
                return Err(
                    Inconsistent("the previous node CA key is not its certificate's").into(),
                );
            }
            let issuer = Issuer::from_ca_cert_der(&key.der.clone().into(), keypair)?;
            Some(Retiring {
                key: PreviousCa {
                    der: key.der,
                    pem: key.pem,
                    issuer,
                },
                retire_at_ms,
            })
        }
    };
    let signing = match parts.signing {
        None => None,
        Some(Retiring { key, retire_at_ms }) => {
            let (key, spki) = super::load_signing_key(&key)?;
            Some(Retiring {
                key: PreviousSigning {
                    key_id: hex::encode(super::verify::sha256(&spki)),
                    key,
                    spki,
                },
                retire_at_ms,
            })
        }
    };
    let encryption = match parts.encryption {
        None => None,
        Some(Retiring { key, retire_at_ms }) => {
            let key = TokenOpener::new(TokenOpeningKey::from_bytes(*key))
                .map_err(|_| Inconsistent("the previous join encryption key does not load"))?;
            Some(Retiring { key, retire_at_ms })
        }
    };
    Ok(Previous {
        node_ca,
        signing,
        encryption,
    })
}

/// The previous keys' private parts, to write them again.
pub(super) fn previous_parts(previous: &Previous) -> Result<PreviousParts, PkiError> {
    let node_ca = previous.node_ca.as_ref().map(|p| Retiring {
        key: CaParts {
            pem: p.key.pem.clone(),
            der: p.key.der.clone(),
            key_pkcs8: Zeroizing::new(p.key.issuer.key().serialize_der()),
        },
        retire_at_ms: p.retire_at_ms,
    });
    let signing = match &previous.signing {
        None => None,
        Some(p) => Some(Retiring {
            key: Zeroizing::new(
                p.key
                    .key
                    .to_pkcs8v1()
                    .map_err(|_| PkiError::Crypto("join signing key export"))?
                    .as_ref()
                    .to_vec(),
            ),
            retire_at_ms: p.retire_at_ms,
        }),
    };
    let encryption = previous.encryption.as_ref().map(|p| Retiring {
        key: Zeroizing::new(p.key.key().to_bytes()),
        retire_at_ms: p.retire_at_ms,
    });
    Ok(PreviousParts {
        node_ca,
        signing,
        encryption,
    })
}

impl Pki {
    /// Every part of this bundle, private ones included: what [`Pki::rotate`] and
    /// [`Pki::to_bundle`] start from.
    pub(super) fn parts(&self) -> Result<Parts, PkiError> {
        Ok(Parts {
            trust_domain: self.trust_domain.clone(),
            node_ca_pem: self.node_ca_pem.clone(),
            node_ca_der: self.node_ca_der.clone(),
            node_ca_key_pkcs8: Zeroizing::new(self.ca.key().serialize_der()),
            signing_key_pkcs8: Zeroizing::new(
                self.signing_key
                    .to_pkcs8v1()
                    .map_err(|_| PkiError::Crypto("join signing key export"))?
                    .as_ref()
                    .to_vec(),
            ),
            encryption_secret: Zeroizing::new(self.token_key.key().to_bytes()),
            challenge_secret: self.challenge_secret.clone(),
            previous: previous_parts(&self.previous)?,
            sequence: self.sequence,
        })
    }

    /// The previous join encryption public key, when there is one (a bundle records it).
    pub(super) fn previous_encryption_public(&self) -> Option<[u8; 32]> {
        self.previous.encryption.as_ref().map(|p| p.key.public())
    }

    /// The previous join signing key's SubjectPublicKeyInfo, when there is one.
    pub(super) fn previous_signing_spki(&self) -> Option<&[u8]> {
        self.previous
            .signing
            .as_ref()
            .map(|p| p.key.spki.as_slice())
    }

    /// The previous node CA certificate (PEM) and its retire time, when there is one.
    pub(super) fn previous_node_ca(&self) -> Option<(&str, i64)> {
        self.previous
            .node_ca
            .as_ref()
            .map(|p| (p.key.pem.as_str(), p.retire_at_ms))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::pki::IssueRequest;

    /// The rotation time of the tests (ms).
    const T: i64 = 1_800_000_000_000;
    const HOUR: i64 = 3_600_000;

    fn leaf(pki: &Pki, spki: &[u8]) -> Vec<u8> {
        pki.issue_node_cert(&IssueRequest {
            node_id: "node_a",
            role: "node",
            spki_der: spki,
            statements: &[],
            not_before_ms: T - HOUR,
            not_after_ms: T + 24 * HOUR,
        })
        .unwrap()
        .der
    }

    fn node_spki() -> Vec<u8> {
        use rcgen::PublicKeyData as _;
        rcgen::KeyPair::generate()
            .unwrap()
            .subject_public_key_info()
    }

    fn sealed_to(pki: &Pki, csr_sha256: &[u8; 32]) -> Vec<u8> {
        let token = TokenString {
            id: "tok_a".into(),
            secret: vec![7; 32],
        };
        gatehouse_proto::seal_token(&pki.join_encryption_public(), &token, csr_sha256).unwrap()
    }

    #[test]
    fn the_old_ca_renews_in_the_window_and_is_retired_after_it() {
        let old = Pki::generate("td").unwrap();
        let old_leaf = leaf(&old, &node_spki());
        let new = old.rotate(&[KeyKind::NodeCa], T, HOUR).unwrap();
        assert_ne!(new.node_ca_der(), old.node_ca_der());
        assert_eq!(new.sequence(), 1);
        let new_leaf = leaf(&new, &node_spki());
        // The new CA issues; both are accepted in the window, only the new one after.
        assert!(signed_by(&new_leaf, new.node_ca_der()));
        assert_eq!(new.check_issuer(&old_leaf, T + HOUR - 1), Ok(()));
        assert_eq!(new.check_issuer(&new_leaf, T + HOUR - 1), Ok(()));
        assert_eq!(
            new.check_issuer(&old_leaf, T + HOUR),
            Err(IssuerError::RetiredCa)
        );
        assert_eq!(new.check_issuer(&new_leaf, T + HOUR), Ok(()));
        assert_eq!(new.live_node_cas_der(T).len(), 2);
        assert_eq!(new.live_node_cas_der(T + HOUR), [new.node_ca_der()]);
        // A certificate of a CA the host never had is no more accepted than a retired one.
        let stranger = leaf(&Pki::generate("td").unwrap(), &node_spki());
        assert_eq!(new.check_issuer(&stranger, T), Err(IssuerError::RetiredCa));
        assert_eq!(new.retiring(), [(KeyKind::NodeCa, T + HOUR)]);
    }

    #[test]
    fn the_old_encryption_key_opens_in_the_window_and_is_refused_by_name_after_it() {
        let old = Pki::generate("td").unwrap();
        let csr = [3u8; 32];
        let to_old = sealed_to(&old, &csr);
        let new = old.rotate(&[KeyKind::JoinEncryption], T, HOUR).unwrap();
        assert_ne!(new.join_encryption_public(), old.join_encryption_public());
        let to_new = sealed_to(&new, &csr);
        assert_eq!(
            new.open_token(&to_old, &csr, T + HOUR - 1).unwrap().id,
            "tok_a"
        );
        assert_eq!(
            new.open_token(&to_new, &csr, T + HOUR - 1).unwrap().id,
            "tok_a"
        );
        assert_eq!(
            new.open_token(&to_old, &csr, T + HOUR),
            Err(OpenError::RetiredKey {
                retire_at_ms: T + HOUR
            })
        );
        assert_eq!(new.open_token(&to_new, &csr, T + HOUR).unwrap().id, "tok_a");
        // Another CSR, or a key the host never had: unsealable, never "retired".
        assert!(matches!(
            new.open_token(&to_old, &[4u8; 32], T),
            Err(OpenError::Unsealable(_))
        ));
        let stranger = sealed_to(&Pki::generate("td").unwrap(), &csr);
        assert!(matches!(
            new.open_token(&stranger, &csr, T + HOUR),
            Err(OpenError::Unsealable(_))
        ));
    }

    #[test]
    fn the_old_signing_key_signs_through_the_window_and_the_update_names_both() {
        let old = Pki::generate("td").unwrap();
        assert_eq!(old.trust_update(T), None);
        let new = old.rotate(&[KeyKind::JoinSigning], T, HOUR).unwrap();
        assert_eq!(new.signer(T).1, old.join_signing_key_id());
        assert_eq!(new.signer(T + HOUR).1, new.join_signing_key_id());
        let update = new.trust_update(T).unwrap();
        assert_eq!(update.sequence, 1);
        assert_eq!(update.join_signing_key, new.join_signing_spki());
        assert_eq!(update.other_join_signing_keys, [old.join_signing_spki()]);
        let after = new.trust_update(T + HOUR).unwrap();
        assert!(after.other_join_signing_keys.is_empty());
        assert_eq!(after.node_ca_pem, new.node_ca_pem());
    }

    #[test]
    fn rotating_again_inside_the_window_is_refused_and_after_it_drops_the_old_key() {
        let first = Pki::generate("td").unwrap();
        let second = first.rotate(&KeyKind::ALL, T, HOUR).unwrap();
        assert_eq!(second.retiring().len(), 3);
        assert_eq!(
            second.rotate(&[KeyKind::NodeCa], T + 1, HOUR).unwrap_err(),
            PkiError::Rotation(RotationError::InWindow {
                kind: KeyKind::NodeCa,
                retire_at_ms: T + HOUR
            })
        );
        let third = second.rotate(&[KeyKind::NodeCa], T + HOUR, HOUR).unwrap();
        // The node CA's previous is the second's; the other kinds' windows were over: gone.
        assert_eq!(third.retiring(), [(KeyKind::NodeCa, T + 2 * HOUR)]);
        assert_eq!(third.live_node_cas_der(T + HOUR)[1], second.node_ca_der());
        assert_eq!(third.sequence(), 2);
        assert_eq!(
            first.rotate(&[], T, HOUR).unwrap_err(),
            PkiError::Rotation(RotationError::Nothing)
        );
        assert_eq!(
            first.rotate(&[KeyKind::NodeCa], T, 0).unwrap_err(),
            PkiError::Rotation(RotationError::NoWindow)
        );
    }

    #[test]
    fn display() {
        assert_eq!(
            RotationError::InWindow {
                kind: KeyKind::JoinEncryption,
                retire_at_ms: 5
            }
            .to_string(),
            "the previous join-encryption key is still in its overlap window until 5 ms"
        );
        assert_eq!(
            OpenError::RetiredKey { retire_at_ms: 5 }.to_string(),
            "sealed to the join encryption key retired at 5 ms"
        );
        assert_eq!(
            IssuerError::RetiredCa.to_string(),
            "the certificate's node CA is retired"
        );
    }
}
