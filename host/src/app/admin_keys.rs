//! The admin keys the API accepts: the one in `admin_key_file`, and while a rotation's window
//! lasts the one it replaced.
//!
//! `gatehouse pki rotate admin-key` writes a new key to `admin_key_file` and moves the old one
//! to `<admin_key_file>.previous` with the time its window ends. The host reads both at start
//! and again on SIGHUP, so a rotation needs no restart: clients holding the old key keep
//! working until the window ends while they are given the new one, and from then on the old
//! key is refused (the time is checked on every request; nothing has to be reloaded for it).

use std::path::{Path, PathBuf};
use std::sync::RwLock;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq as _;

use super::{MIN_ADMIN_KEY_BYTES, StartError, load_admin_key};

/// The suffix of the file that holds the previous admin key during its window.
pub const PREVIOUS_SUFFIX: &str = ".previous";

/// The previous key's file beside `admin_key_file`.
pub fn previous_path(admin_key_file: &Path) -> PathBuf {
    let mut path = admin_key_file.as_os_str().to_owned();
    path.push(PREVIOUS_SUFFIX);
    PathBuf::from(path)
}

/// The text of a previous key's file: the line `retire-at <ms since the Unix epoch>`, then
/// the key.
pub fn previous_file_text(key: &str, retire_at_ms: i64) -> String {
    format!("retire-at {retire_at_ms}\n{key}\n")
}

/// The SHA-256 of the admin keys, as the API compares them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Keys {
    current: [u8; 32],
    /// The previous key and when its window ends (ms since the Unix epoch).
    previous: Option<([u8; 32], i64)>,
}

/// The admin keys of a running host; replaced on SIGHUP.
#[derive(Debug)]
pub struct AdminKeys {
    keys: RwLock<Keys>,
}

/// Reads `admin_key_file` and, when it exists, its previous key's file.
fn read(admin_key_file: &Path) -> Result<Keys, StartError> {
    let current = load_admin_key(admin_key_file)?;
    let previous_path = previous_path(admin_key_file);
    let previous = match std::fs::read_to_string(&previous_path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(source) => {
            return Err(StartError::Read {
                path: previous_path,
                source,
            });
        }
        Ok(text) => Some(parse_previous(&text).ok_or_else(|| StartError::Read {
            path: previous_path.clone(),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("not `retire-at <ms>` and a key of at least {MIN_ADMIN_KEY_BYTES} bytes"),
            ),
        })?),
    };
    Ok(Keys { current, previous })
}

/// A previous key's file: its key's SHA-256 and retire time, or `None` if it is not of that form.
fn parse_previous(text: &str) -> Option<([u8; 32], i64)> {
    let (first, key) = text.trim().split_once('\n')?;
    let retire_at_ms = first
        .trim()
        .strip_prefix("retire-at ")?
        .trim()
        .parse()
        .ok()?;
    let key = key.trim();
    (key.len() >= MIN_ADMIN_KEY_BYTES)
        .then(|| (Sha256::digest(key.as_bytes()).into(), retire_at_ms))
}

impl AdminKeys {
    /// The keys of `admin_key_file` (and its previous key's file, if any).
    pub fn load(admin_key_file: &Path) -> Result<Self, StartError> {
        Ok(Self {
            keys: RwLock::new(read(admin_key_file)?),
        })
    }

    /// Reads the files again (SIGHUP); on an error the keys in use stay.
    pub fn reload(&self, admin_key_file: &Path) -> Result<(), StartError> {
        let keys = read(admin_key_file)?;
        *self
            .keys
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = keys;
        Ok(())
    }

    /// Whether `presented` (at least [`MIN_ADMIN_KEY_BYTES`]) is the current key, or the
    /// previous one before `now_ms`. Both comparisons are made, in constant time, whatever
    /// the first says.
    pub fn accepts(&self, presented: &str, now_ms: i64) -> bool {
        if presented.len() < MIN_ADMIN_KEY_BYTES {
            return false;
        }
        let hash: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        let keys = *self
            .keys
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let current = hash.ct_eq(&keys.current);
        let previous = match keys.previous {
            Some((key, retire_at_ms)) => {
                hash.ct_eq(&key) & u8::from(now_ms < retire_at_ms).ct_eq(&1)
            }
            None => 0u8.ct_eq(&1),
        };
        bool::from(current | previous)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const OLD: &str = "old-admin-key-of-at-least-32-bytes-0000";
    const NEW: &str = "new-admin-key-of-at-least-32-bytes-1111";
    const T: i64 = 1_800_000_000_000;

    #[test]
    fn the_previous_key_works_until_its_window_ends() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("admin.key");
        std::fs::write(&file, format!("{OLD}\n")).unwrap();
        let keys = AdminKeys::load(&file).unwrap();
        assert!(keys.accepts(OLD, T) && !keys.accepts(NEW, T));

        // A rotation: the new key in the file, the old one beside it until T + 1000.
        std::fs::write(&file, NEW).unwrap();
        std::fs::write(previous_path(&file), previous_file_text(OLD, T + 1000)).unwrap();
        // Nothing changes until the host reads the files again.
        assert!(!keys.accepts(NEW, T));
        keys.reload(&file).unwrap();
        assert!(keys.accepts(NEW, T) && keys.accepts(OLD, T + 999));
        assert!(!keys.accepts(OLD, T + 1000));
        assert!(keys.accepts(NEW, T + 1000));
        assert!(!keys.accepts(&NEW[..31], T));

        // A broken previous file is an error, and the keys in use stay.
        std::fs::write(previous_path(&file), OLD).unwrap();
        assert!(keys.reload(&file).is_err());
        assert!(keys.accepts(OLD, T));
    }

    #[test]
    fn previous_files_parse_only_in_their_form() {
        assert_eq!(
            parse_previous(&previous_file_text(OLD, 5)),
            Some((Sha256::digest(OLD.as_bytes()).into(), 5))
        );
        assert_eq!(parse_previous(OLD), None);
        assert_eq!(parse_previous("retire-at x\nkey"), None);
        assert_eq!(parse_previous("retire-at 5\nshort"), None);
        assert_eq!(parse_previous(""), None);
    }
}
