//! `gatehouse pki rotate`: new keys, with an overlap window in which the replaced ones still
//! work (see `crate::pki` rotation for what each key does in the window).
//!
//! The bundle is rewritten in place (one rename; 0600). A running host takes it on SIGHUP
//! (`crate::pki::LivePki`), as it takes the admin key: no restart. Replicas sharing one
//! database are signalled one after another: a replica still on the old bundle and one on the
//! new accept each other's certificates and tokens, because the new bundle keeps the old keys
//! for the window. Replicas with their own copy of the file get the new copy first.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use clap::{Args, ValueEnum};

use crate::config::Config;
use crate::pki::{KeyKind, Pki};

/// What can be rotated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Rotatable {
    /// The node CA: new certificates come from a new CA.
    NodeCa,
    /// The join signing key.
    JoinSigning,
    /// The join encryption key tokens are sealed to.
    JoinEncryption,
    /// The three PKI keys above.
    All,
    /// The admin API's bearer key (`admin_key_file`).
    AdminKey,
}

#[derive(Debug, Args)]
pub(super) struct RotateArgs {
    /// What to rotate: any of `node-ca`, `join-signing`, `join-encryption`, `all` (the three),
    /// `admin-key`.
    #[arg(required = true, value_enum)]
    keys: Vec<Rotatable>,
    /// How long the replaced keys keep working (`48h`, `7d`, …). With `--config`, `node-ca`
    /// refuses a window shorter than `[join] cert_ttl_seconds`: every node must be able to
    /// renew onto the new CA within it.
    #[arg(long, value_parser = humantime::parse_duration)]
    overlap: Duration,
    /// The host's configuration: its `pki_bundle` and `secret_file` (or GATEHOUSE_SECRET), and
    /// its `admin_key_file`.
    #[arg(long, conflicts_with_all = ["bundle", "secret_file", "admin_key_file"])]
    config: Option<PathBuf>,
    /// The PKI bundle to rotate in place (without `--config`).
    #[arg(long)]
    bundle: Option<PathBuf>,
    /// The file holding the bundle's secret (else GATEHOUSE_SECRET), with `--bundle`.
    #[arg(long)]
    secret_file: Option<PathBuf>,
    /// The admin key file to rotate (without `--config`).
    #[arg(long)]
    admin_key_file: Option<PathBuf>,
}

/// Where the bundle and admin key are, and what bounds the window.
struct Targets {
    bundle: Option<(PathBuf, Vec<u8>)>,
    admin_key_file: Option<PathBuf>,
    cert_ttl: Option<Duration>,
}

fn targets(args: &RotateArgs, pki: bool, admin: bool) -> anyhow::Result<Targets> {
    if let Some(path) = &args.config {
        let config = Config::load(path)?;
        let bundle = if pki {
            let secret = crate::app::load_secret(&config)?;
            Some((config.path(&config.pki_bundle), secret))
        } else {
            None
        };
        return Ok(Targets {
            bundle,
            admin_key_file: admin.then(|| config.path(&config.admin_key_file)),
            cert_ttl: Some(Duration::from_secs(u64::from(config.join.cert_ttl_seconds))),
        });
    }
    let bundle = match (pki, &args.bundle) {
        (false, _) => None,
        (true, None) => anyhow::bail!("pass --config, or --bundle for the PKI keys"),
        (true, Some(bundle)) => {
            let secret = match &args.secret_file {
                Some(path) => std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?
                    .trim()
                    .as_bytes()
                    .to_vec(),
                None => std::env::var("GATEHOUSE_SECRET")
                    .context("set GATEHOUSE_SECRET or pass --secret-file")?
                    .into_bytes(),
            };
            Some((bundle.clone(), secret))
        }
    };
    let admin_key_file = match (admin, &args.admin_key_file) {
        (false, _) => None,
        (true, None) => anyhow::bail!("pass --config, or --admin-key-file for admin-key"),
        (true, Some(path)) => Some(path.clone()),
    };
    Ok(Targets {
        bundle,
        admin_key_file,
        cert_ttl: None,
    })
}

fn ms(time: SystemTime) -> i64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .ok()
        .and_then(|d| i64::try_from(d.as_millis()).ok())
        .unwrap_or(i64::MAX)
}

fn rfc3339(ms: i64) -> String {
    let at = SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_seconds(at).to_string()
}

pub(super) fn run(args: RotateArgs, out: &mut (dyn std::io::Write + Send)) -> anyhow::Result<()> {
    let mut kinds = Vec::new();
    for key in &args.keys {
        match key {
            Rotatable::NodeCa => kinds.push(KeyKind::NodeCa),
            Rotatable::JoinSigning => kinds.push(KeyKind::JoinSigning),
            Rotatable::JoinEncryption => kinds.push(KeyKind::JoinEncryption),
            Rotatable::All => kinds.extend(KeyKind::ALL),
            Rotatable::AdminKey => {}
        }
    }
    let admin = args.keys.contains(&Rotatable::AdminKey);
    let targets = targets(&args, !kinds.is_empty(), admin)?;
    let overlap_ms = i64::try_from(args.overlap.as_millis()).context("--overlap is too long")?;
    if let Some(ttl) = targets.cert_ttl
        && kinds.contains(&KeyKind::NodeCa)
        && args.overlap < ttl
    {
        anyhow::bail!(
            "--overlap {} is shorter than the certificate lifetime ({}): certificates of the \
             old node CA would be refused before their nodes renewed",
            humantime::format_duration(args.overlap),
            humantime::format_duration(ttl)
        );
    }
    let now = ms(SystemTime::now());

    if let Some((path, secret)) = &targets.bundle {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let pki = Pki::from_bundle(&text, secret)
            .with_context(|| format!("opening {}", path.display()))?;
        let rotated = pki.rotate(&kinds, now, overlap_ms)?;
        write_private(path, rotated.to_bundle(secret)?.as_bytes())?;
        for (kind, retire_at_ms) in rotated.retiring() {
            let what = if kinds.contains(&kind) {
                "rotated"
            } else {
                "still retiring"
            };
            writeln!(
                out,
                "{kind}: {what}; the previous key works until {}",
                rfc3339(retire_at_ms)
            )?;
        }
        writeln!(
            out,
            "wrote {} (rotation {}); send SIGHUP to every host on it (or restart them, one \
             at a time). Agents pick up the new keys at their next renewal; `gatehouse pki \
             trust` writes the trust file for new machines",
            path.display(),
            rotated.sequence()
        )?;
    }

    if let Some(path) = &targets.admin_key_file {
        rotate_admin_key(path, now.saturating_add(overlap_ms))?;
        writeln!(
            out,
            "admin-key: rotated; the new key is in {}, the previous one (in {}) works until {}. \
             Send SIGHUP to every host now",
            path.display(),
            crate::app::previous_path(path).display(),
            rfc3339(now.saturating_add(overlap_ms))
        )?;
    }
    Ok(())
}

/// Moves the key in `path` to its previous key's file, to work until `retire_at_ms`, and
/// writes a new one (32 random bytes, base64url) in its place.
fn rotate_admin_key(path: &Path, retire_at_ms: i64) -> anyhow::Result<()> {
    let current =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let current = current.trim();
    if current.len() < crate::app::MIN_ADMIN_KEY_BYTES {
        anyhow::bail!(
            "{} holds no usable admin key ({} bytes)",
            path.display(),
            current.len()
        );
    }
    let previous = crate::app::previous_path(path);
    write_private(
        &previous,
        crate::app::previous_file_text(current, retire_at_ms).as_bytes(),
    )?;
    let key: [u8; 32] = rand::random();
    write_private(path, gatehouse_proto::b64::encode(key).as_bytes())
}

/// Replaces `path` with `bytes` (0600) through a temporary file in the same directory and one
/// rename, so a host starting meanwhile reads the old file or the new, never half of one.
fn write_private(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("rotated"),
        std::process::id()
    ));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn cli(args: &[&str]) -> anyhow::Result<String> {
        let cli = crate::cli::Cli::try_parse_args(
            std::iter::once("gatehouse").chain(args.iter().copied()),
        )?;
        let mut out = Vec::new();
        crate::cli::execute(cli, &mut out).await?;
        Ok(String::from_utf8(out)?)
    }

    #[test]
    fn the_admin_key_rotates_and_the_old_one_works_until_the_window_ends() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("admin.key");
        let old = "old-admin-key-of-at-least-32-bytes-0000";
        std::fs::write(&file, format!("{old}\n")).unwrap();
        rotate_admin_key(&file, 2_000).unwrap();
        let new = std::fs::read_to_string(&file).unwrap();
        assert_ne!(new.trim(), old);
        for path in [file.clone(), crate::app::previous_path(&file)] {
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", path.display());
        }
        let keys = crate::app::AdminKeys::load(&file).unwrap();
        assert!(keys.accepts(new.trim(), 1_999) && keys.accepts(old, 1_999));
        assert!(keys.accepts(new.trim(), 2_000) && !keys.accepts(old, 2_000));
        // A file without a usable key is left as it is.
        std::fs::write(&file, "short").unwrap();
        assert!(rotate_admin_key(&file, 2_000).is_err());
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "short");
    }

    #[tokio::test]
    async fn a_node_ca_window_shorter_than_the_certificate_lifetime_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let files = crate::app::dev::prepare(dir.path(), "127.0.0.1:0").unwrap();
        let config = files.config.to_str().unwrap();
        let bundle = dir.path().join("pki.json");
        let before = std::fs::read_to_string(&bundle).unwrap();
        let err = cli(&[
            "pki",
            "rotate",
            "node-ca",
            "--config",
            config,
            "--overlap",
            "1h",
        ])
        .await
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("shorter than the certificate lifetime"),
            "{err}"
        );
        assert_eq!(std::fs::read_to_string(&bundle).unwrap(), before);

        let printed = cli(&[
            "pki",
            "rotate",
            "all",
            "--config",
            config,
            "--overlap",
            "2d",
        ])
        .await
        .unwrap();
        assert!(printed.contains("node-ca: rotated"), "{printed}");
        assert!(printed.contains("join-encryption: rotated"), "{printed}");
        let after = std::fs::read_to_string(&bundle).unwrap();
        assert!(after.contains("\"gatehouse-pki/v2\""));
        // Again inside the window: refused, naming the kind.
        let err = cli(&[
            "pki",
            "rotate",
            "join-signing",
            "--config",
            config,
            "--overlap",
            "2d",
        ])
        .await
        .unwrap_err();
        assert!(
            format!("{err:#}").contains("join-signing key is still in its overlap window"),
            "{err:#}"
        );
        // Only the admin key: the bundle stays.
        let printed = cli(&[
            "pki",
            "rotate",
            "admin-key",
            "--config",
            config,
            "--overlap",
            "1h",
        ])
        .await
        .unwrap();
        assert!(printed.contains("admin-key: rotated"), "{printed}");
        assert_eq!(std::fs::read_to_string(&bundle).unwrap(), after);
    }
}
