//! The trust an agent pins, kept up to date across the host's key rotations.
//!
//! An agent starts from its operator's trust file (`--ca`). When a signed response carries the
//! host's rotated keys (see [`crate::verify_response`]), the agent writes them to
//! [`TRUST_FILE`] in its identity directory, in one rename, before it installs the certificate
//! that came with them, and pins them from then on. At start it pins the keys of whichever of
//! the two is newer by `sequence` (the stored ones on a tie: they came from the host later),
//! always with the trust domain and TLS CA of the operator's file, which an update never
//! changes.

use std::path::Path;

use gatehouse_proto::JoinTrust;

use crate::identity::{IdentityError, sync_dir, write_replacing};

/// The file in the identity directory that holds the keys the host last vouched for.
pub const TRUST_FILE: &str = "trust.json";

/// Largest stored trust file read: far above two CAs and three keys.
const MAX_TRUST_LEN: u64 = 256 * 1024;

/// The trust to pin for the identity in `dir`, given the operator's `configured` trust.
pub fn pinned_trust(dir: &Path, configured: JoinTrust) -> Result<JoinTrust, IdentityError> {
    let path = dir.join(TRUST_FILE);
    let corrupt = |reason: String| IdentityError::Corrupt {
        path: path.clone(),
        reason,
    };
    let io = |source| IdentityError::Io {
        path: path.clone(),
        source,
    };
    let stored = match std::fs::metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(configured),
        Err(e) => return Err(io(e)),
        Ok(meta) if meta.len() > MAX_TRUST_LEN => {
            return Err(corrupt(format!("is larger than {MAX_TRUST_LEN} bytes")));
        }
        Ok(_) => std::fs::read_to_string(&path).map_err(io)?,
    };
    let stored: JoinTrust = serde_json::from_str(&stored)
        .map_err(|e| corrupt(format!("not a join trust file: {e}")))?;
    if stored.trust_domain != configured.trust_domain {
        tracing::warn!(
            path = %path.display(),
            stored = %stored.trust_domain,
            configured = %configured.trust_domain,
            "the stored trust is of another trust domain; pinning the configured one"
        );
        return Ok(configured);
    }
    if stored.sequence < configured.sequence {
        return Ok(configured);
    }
    Ok(configured.updated(&stored.keys()))
}

/// Stores `trust` as the keys to pin for the identity in `dir` (0644, one rename).
pub fn save_trust(dir: &Path, trust: &JoinTrust) -> Result<(), IdentityError> {
    let path = dir.join(TRUST_FILE);
    let mut text = serde_json::to_vec_pretty(trust).map_err(|e| IdentityError::Io {
        path: path.clone(),
        source: e.into(),
    })?;
    text.push(b'\n');
    write_replacing(&path, &text)?;
    sync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trust(sequence: u64, key: u8) -> JoinTrust {
        JoinTrust {
            trust_domain: "td.test".into(),
            node_ca_pem: format!("ca {key}"),
            tls_ca_pem: "tls".into(),
            join_signing_key: vec![key],
            join_encryption_key: vec![key; 32],
            other_join_signing_keys: vec![],
            sequence,
        }
    }

    #[test]
    fn without_a_stored_trust_the_configured_one_is_pinned() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(pinned_trust(dir.path(), trust(0, 1)).unwrap(), trust(0, 1));
    }

    #[test]
    fn the_newer_keys_win_with_the_configured_tls_ca() {
        let dir = tempfile::tempdir().unwrap();
        let mut stored = trust(1, 2);
        stored.tls_ca_pem = "an older tls ca".into();
        save_trust(dir.path(), &stored).unwrap();
        let mut configured = trust(0, 1);
        configured.tls_ca_pem = "renewed tls ca".into();
        let pinned = pinned_trust(dir.path(), configured.clone()).unwrap();
        assert_eq!(pinned.join_signing_key, vec![2]);
        assert_eq!(pinned.sequence, 1);
        assert_eq!(pinned.tls_ca_pem, "renewed tls ca");
        // The operator's file is newer: it wins.
        let newer = trust(2, 3);
        assert_eq!(pinned_trust(dir.path(), newer.clone()).unwrap(), newer);
        // Another trust domain's stored keys are never pinned.
        let mut other = trust(0, 4);
        other.trust_domain = "other.test".into();
        assert_eq!(pinned_trust(dir.path(), other.clone()).unwrap(), other);
    }

    #[test]
    fn a_corrupt_stored_trust_is_an_error_not_a_silent_fallback() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(TRUST_FILE), "{").unwrap();
        assert!(matches!(
            pinned_trust(dir.path(), trust(0, 1)),
            Err(IdentityError::Corrupt { .. })
        ));
    }
}
