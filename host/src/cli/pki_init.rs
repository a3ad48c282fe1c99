//! `gatehouse pki init`.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;

use crate::pki::Pki;

#[derive(Debug, Args)]
pub(super) struct InitArgs {
    /// The SPIFFE trust domain node certificates are issued in.
    #[arg(long)]
    trust_domain: String,
    /// Where to write the bundle (refuses to overwrite).
    #[arg(long)]
    out: PathBuf,
    /// The file holding the secret the bundle is encrypted under (else GATEHOUSE_SECRET).
    #[arg(long)]
    secret_file: Option<PathBuf>,
}

pub(super) fn run(args: InitArgs) -> anyhow::Result<()> {
    let secret = match &args.secret_file {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("reading {}", path.display()))?
            .trim()
            .to_owned(),
        None => std::env::var("GATEHOUSE_SECRET")
            .context("set GATEHOUSE_SECRET or pass --secret-file")?,
    };
    let pki = Pki::generate(&args.trust_domain)?;
    let bundle = pki.to_bundle(secret.as_bytes())?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&args.out)
        .with_context(|| format!("creating {} (it must not exist)", args.out.display()))?;
    file.write_all(bundle.as_bytes())?;
    println!(
        "wrote {} for trust domain {}",
        args.out.display(),
        args.trust_domain
    );
    Ok(())
}
