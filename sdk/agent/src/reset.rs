//! `join --reset`: moving an identity aside so the machine joins as a new one. Nothing is
//! deleted: each file is renamed to `<name>.reset-<UTC time>` in the same directory.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::identity::{CERT_FILE, IDENTITY_FILE, IdentityError, KEY_FILE, NEXT_KEY_FILE};

/// Every file an identity consists of, and the temporary files its writers may leave behind
/// after a crash, in the order they are moved.
pub const IDENTITY_FILES: [&str; 7] = [
    IDENTITY_FILE,
    KEY_FILE,
    NEXT_KEY_FILE,
    CERT_FILE,
    "identity.json.tmp",
    "node.key.next.tmp",
    "node.crt.tmp",
];

/// One file a reset moves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResetMove {
    /// The identity file.
    pub from: PathBuf,
    /// Where it goes.
    pub to: PathBuf,
}

/// `at` as a compact UTC timestamp, e.g. `20261202T153000Z`.
pub fn utc_stamp(at: SystemTime) -> String {
    let secs = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(i64::try_from(days).unwrap_or(0));
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    // d is 1..=31 and m 1..=12 by construction.
    (
        y,
        u32::try_from(m).unwrap_or(1),
        u32::try_from(d).unwrap_or(1),
    )
}

/// The moves a reset of `dir` at `at` would make: one per identity file present. Refuses if
/// a target already exists (two resets in the same second), so nothing is ever overwritten.
pub fn plan_reset(dir: &Path, at: SystemTime) -> Result<Vec<ResetMove>, IdentityError> {
    let stamp = utc_stamp(at);
    let mut moves = Vec::new();
    for name in IDENTITY_FILES {
        let from = dir.join(name);
        match std::fs::symlink_metadata(&from) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => return Err(IdentityError::Io { path: from, source }),
        }
        let to = dir.join(format!("{name}.reset-{stamp}"));
        if std::fs::symlink_metadata(&to).is_ok() {
            return Err(IdentityError::Exists(to));
        }
        moves.push(ResetMove { from, to });
    }
    Ok(moves)
}

/// Makes the moves: each a hard link to the new name, then the old name removed, so an
/// existing target is never replaced. Stops at the first failure; the moves made stay made.
pub fn apply_reset(moves: &[ResetMove]) -> Result<(), IdentityError> {
    for m in moves {
        std::fs::hard_link(&m.from, &m.to).map_err(|source| IdentityError::Io {
            path: m.to.clone(),
            source,
        })?;
        std::fs::remove_file(&m.from).map_err(|source| IdentityError::Io {
            path: m.from.clone(),
            source,
        })?;
    }
    if let Some(dir) = moves.first().and_then(|m| m.from.parent()) {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|source| IdentityError::Io {
                path: dir.to_owned(),
                source,
            })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::identity::ensure_no_identity;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn stamps_in_utc() {
        assert_eq!(utc_stamp(at(0)), "19700101T000000Z");
        // 2026-12-02 15:30:00 UTC.
        assert_eq!(utc_stamp(at(1_796_225_400)), "20261202T153000Z");
        // A leap day, and the last second of a year.
        assert_eq!(utc_stamp(at(951_825_600)), "20000229T120000Z");
        assert_eq!(utc_stamp(at(1_767_225_599)), "20251231T235959Z");
    }

    #[test]
    fn moves_every_identity_file_aside_and_deletes_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        for name in [
            IDENTITY_FILE,
            KEY_FILE,
            NEXT_KEY_FILE,
            CERT_FILE,
            "journal.db",
        ] {
            std::fs::write(dir.join(name), name).unwrap();
        }
        let moves = plan_reset(dir, at(1_796_225_400)).unwrap();
        let names: Vec<String> = moves
            .iter()
            .map(|m| m.to.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "identity.json.reset-20261202T153000Z",
                "node.key.reset-20261202T153000Z",
                "node.key.next.reset-20261202T153000Z",
                "node.crt.reset-20261202T153000Z",
            ]
        );
        // Planning moves nothing.
        assert!(dir.join(KEY_FILE).exists());
        apply_reset(&moves).unwrap();
        ensure_no_identity(dir).unwrap();
        for m in &moves {
            let name = m.from.file_name().unwrap().to_str().unwrap();
            assert_eq!(std::fs::read_to_string(&m.to).unwrap(), name);
        }
        assert!(dir.join("journal.db").exists(), "not an identity file");

        // A second reset in the same second would overwrite: refused, nothing moved.
        std::fs::write(dir.join(KEY_FILE), "again").unwrap();
        let err = plan_reset(dir, at(1_796_225_400)).unwrap_err();
        assert!(matches!(err, IdentityError::Exists(_)), "{err}");
        assert_eq!(
            std::fs::read_to_string(dir.join(KEY_FILE)).unwrap(),
            "again"
        );
        // One second later it goes through.
        let later = plan_reset(dir, at(1_796_225_401)).unwrap();
        assert_eq!(later.len(), 1);
    }

    #[test]
    fn an_empty_or_missing_directory_moves_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        assert!(plan_reset(tmp.path(), at(0)).unwrap().is_empty());
        assert!(
            plan_reset(&tmp.path().join("missing"), at(0))
                .unwrap()
                .is_empty()
        );
        apply_reset(&[]).unwrap();
    }
}
