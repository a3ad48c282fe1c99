//! The bundle a running host uses now, replaced whole when SIGHUP finds it rotated.
//!
//! `gatehouse pki rotate` rewrites the bundle file; a host picks the new one up on SIGHUP
//! (`crate::app::Running::reload`) without a restart. Readers take a snapshot
//! ([`LivePki::get`]) per use. A round that straddles a replacement may open a token with the
//! old bundle and sign its answer with the new one: that is valid under both, because a
//! rotation keeps every key it replaces accepted through its overlap window, and a bundle
//! with fewer rotations than the loaded one is refused ([`ReplaceError::Older`]).

use std::sync::{Arc, PoisonError, RwLock};

use super::Pki;

/// The host's current [`Pki`], shared by the join service, renewal, the published trust
/// documents and attestors' imports.
#[derive(Debug, Clone)]
pub struct LivePki(Arc<RwLock<Arc<Pki>>>);

/// Why a reloaded bundle was not put in place (the loaded one stays).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReplaceError {
    /// The file holds an earlier rotation than the loaded bundle (a restored backup, a copy
    /// from a replica not yet rotated): taking it would retire keys the host already handed
    /// out.
    #[error("the bundle is at rotation {file}, older than the loaded rotation {loaded}")]
    Older {
        /// The file's rotation count.
        file: u64,
        /// The loaded bundle's.
        loaded: u64,
    },
    /// Same rotation count, different keys: not a rotation of this bundle.
    #[error("the bundle is at rotation {0} like the loaded one but holds other keys")]
    Diverged(u64),
}

impl LivePki {
    /// Starts with `pki`.
    pub fn new(pki: Pki) -> Self {
        Self(Arc::new(RwLock::new(Arc::new(pki))))
    }

    /// The bundle now.
    pub fn get(&self) -> Arc<Pki> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Puts `next` in place when it is a later rotation of the loaded bundle: its rotation
    /// count when it was, `None` when the file holds the loaded bundle still.
    pub fn replace(&self, next: Pki) -> Result<Option<u64>, ReplaceError> {
        let mut current = self.0.write().unwrap_or_else(PoisonError::into_inner);
        let (loaded, file) = (current.sequence(), next.sequence());
        if file < loaded {
            return Err(ReplaceError::Older { file, loaded });
        }
        if file == loaded {
            return if same_keys(&next, &current) {
                Ok(None)
            } else {
                Err(ReplaceError::Diverged(file))
            };
        }
        *current = Arc::new(next);
        Ok(Some(file))
    }
}

/// Whether two bundles hold the same current keys (by their public halves).
fn same_keys(a: &Pki, b: &Pki) -> bool {
    a.node_ca_der() == b.node_ca_der()
        && a.join_signing_spki() == b.join_signing_spki()
        && a.join_encryption_public() == b.join_encryption_public()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::KeyKind;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    fn rotated(pki: &Pki) -> Pki {
        pki.rotate(&[KeyKind::JoinSigning], 0, 60_000).unwrap()
    }

    #[test]
    fn takes_a_later_rotation_and_refuses_an_older_or_foreign_bundle() {
        let first = Pki::generate("td.test").unwrap();
        let again = Pki::from_bundle(&first.to_bundle(SECRET).unwrap(), SECRET).unwrap();
        let second = rotated(&first);
        let second_key = second.join_signing_key_id().to_owned();
        let live = LivePki::new(first);

        // The same bundle read again: nothing to do.
        assert_eq!(live.replace(again), Ok(None));
        // A rotation: in place for every later reader.
        let before = live.get();
        assert_eq!(live.replace(second), Ok(Some(1)));
        assert_eq!(live.get().join_signing_key_id(), second_key);
        assert_ne!(
            before.join_signing_key_id(),
            second_key,
            "a snapshot keeps its bundle"
        );
        // The bundle from before the rotation, or another host's: refused, the rotation stays.
        let old = Pki::from_bundle(&before.to_bundle(SECRET).unwrap(), SECRET).unwrap();
        assert_eq!(
            live.replace(old),
            Err(ReplaceError::Older { file: 0, loaded: 1 })
        );
        let stranger = rotated(&Pki::generate("td.test").unwrap());
        assert_eq!(live.replace(stranger), Err(ReplaceError::Diverged(1)));
        assert_eq!(live.get().join_signing_key_id(), second_key);
    }
}
