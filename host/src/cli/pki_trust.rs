//! `gatehouse pki trust`: the join trust file agents pin, from the host's PKI bundle and its
//! TLS CA.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::Args;

use crate::config::Config;

#[derive(Debug, Args)]
pub(super) struct TrustArgs {
    /// The host's configuration: the bundle is its `pki_bundle`, the TLS CA its `[tls] ca`
    /// (else the last certificate of `[tls] cert`).
    #[arg(long, conflicts_with_all = ["bundle", "tls_ca"], required_unless_present = "bundle")]
    config: Option<PathBuf>,
    /// The PKI bundle `gatehouse pki init` wrote (its public parts are read; no secret).
    #[arg(long, requires = "tls_ca")]
    bundle: Option<PathBuf>,
    /// The CA certificate(s), PEM, the API's TLS certificate chains to.
    #[arg(long)]
    tls_ca: Option<PathBuf>,
    /// Where to write the trust file (replaced if it exists); stdout without it.
    #[arg(long)]
    out: Option<PathBuf>,
}

fn read_text(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

pub(super) fn run(args: TrustArgs, out: &mut (dyn std::io::Write + Send)) -> anyhow::Result<()> {
    let (bundle, tls_ca) = match (&args.config, &args.bundle, &args.tls_ca) {
        (Some(config), _, _) => {
            let config = Config::load(config)?;
            let bundle = read_text(&config.path(&config.pki_bundle))?;
            let tls_ca = match &config.tls.ca {
                Some(ca) => read_text(&config.path(ca))?,
                None => {
                    let chain = std::fs::read(config.path(&config.tls.cert))
                        .with_context(|| format!("reading {}", config.tls.cert.display()))?;
                    last_certificate_pem(&chain)?
                }
            };
            (bundle, tls_ca)
        }
        (None, Some(bundle), Some(tls_ca)) => (read_text(bundle)?, read_text(tls_ca)?),
        _ => anyhow::bail!("pass --config, or --bundle and --tls-ca"),
    };
    // During a rotation's window the file names the retiring keys too, so it works on either
    // side of the window's end.
    let trust = crate::pki::join_trust_from_bundle(&bundle, &tls_ca, crate::wall_clock::now_ms())?;
    let mut text = serde_json::to_string_pretty(&trust)?;
    text.push('\n');
    match &args.out {
        None => out.write_all(text.as_bytes())?,
        Some(path) => {
            write_replacing(path, text.as_bytes())?;
            writeln!(
                out,
                "wrote {} for trust domain {} (agents pass it as --ca)",
                path.display(),
                trust.trust_domain
            )?;
        }
    }
    Ok(())
}

/// The last certificate of a PEM chain, as PEM.
fn last_certificate_pem(chain: &[u8]) -> anyhow::Result<String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject as _;
    let last = CertificateDer::pem_slice_iter(chain)
        .collect::<Result<Vec<_>, _>>()
        .context("the TLS certificate file is not PEM")?
        .pop()
        .context("the TLS certificate file holds no certificate")?;
    Ok(crate::pki::pem_block("CERTIFICATE", &last))
}

/// Writes `bytes` to `path` through a temporary file in the same directory and one rename, so
/// a reader never sees half a file. The trust file is public (0644).
fn write_replacing(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("trust"),
        std::process::id()
    ));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}
