//! A test harness: software TPMs (swtpm, libtpms: a full TPM 2.0) manufactured with an EK
//! certificate from a local CA, for the agent's unit tests and the end-to-end tests.
//!
//! [`LocalCa`] is a `swtpm-localca` configuration with its own state directory in a temporary
//! directory: the first TPM manufactured with it creates its root and intermediate CA, and
//! every TPM after that gets an EK certificate from the same intermediate. [`Swtpm`]
//! manufactures a TPM (`swtpm_setup --create-ek-cert`) and serves it over TCP on free loopback
//! ports until dropped.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{EkTemplate, Tpm};

/// A local EK-issuing CA (root and intermediate) made by `swtpm_localca`.
#[derive(Debug)]
pub struct LocalCa {
    dir: tempfile::TempDir,
}

impl LocalCa {
    /// A CA with its own state directory; its keys are made with the first TPM.
    pub fn new() -> std::io::Result<Self> {
        let dir = tempfile::tempdir()?;
        let state = dir.path().join("ca");
        std::fs::create_dir(&state)?;
        let s = state.display();
        std::fs::write(
            dir.path().join("swtpm-localca.conf"),
            format!(
                "statedir = {s}\nsigningkey = {s}/signkey.pem\nissuercert = {s}/issuercert.pem\n\
                 certserial = {s}/certserial\n"
            ),
        )?;
        std::fs::write(
            dir.path().join("swtpm-localca.options"),
            "--platform-manufacturer Gatehouse\n--platform-version 2.1\n--platform-model test\n",
        )?;
        std::fs::write(
            dir.path().join("swtpm_setup.conf"),
            format!(
                "create_certs_tool = /usr/bin/swtpm_localca\n\
                 create_certs_tool_config = {d}/swtpm-localca.conf\n\
                 create_certs_tool_options = {d}/swtpm-localca.options\n\
                 active_pcr_banks = sha256\n",
                d = dir.path().display()
            ),
        )?;
        Ok(Self { dir })
    }

    fn setup_conf(&self) -> PathBuf {
        self.dir.path().join("swtpm_setup.conf")
    }

    /// The root CA certificate (PEM): what an attestor's `ekRoots` trusts. Exists once a TPM
    /// was manufactured.
    pub fn root_pem(&self) -> std::io::Result<String> {
        std::fs::read_to_string(self.dir.path().join("ca/swtpm-localca-rootca-cert.pem"))
    }

    /// The intermediate CA certificate (PEM) that issues the EK certificates.
    pub fn intermediate_pem(&self) -> std::io::Result<String> {
        std::fs::read_to_string(self.dir.path().join("ca/issuercert.pem"))
    }

    /// The intermediate CA certificate (DER), as an enrollment's `ekChain` carries it.
    pub fn intermediate_der(&self) -> std::io::Result<Vec<u8>> {
        pem_to_der(&self.intermediate_pem()?)
    }
}

impl LocalCa {
    /// An EK certificate from this CA for the ECC point (`x`, `y`) on `curve` (`secp256r1`
    /// or `secp384r1`), as `swtpm_setup` has `swtpm_localca` make one. The CA must exist
    /// (a TPM was manufactured with it).
    pub fn issue_ecc_ek_certificate(
        &self,
        x: &[u8],
        y: &[u8],
        curve: &str,
    ) -> std::io::Result<Vec<u8>> {
        let hex = |b: &[u8]| b.iter().map(|v| format!("{v:02x}")).collect::<String>();
        let out_dir = tempfile::tempdir()?;
        let out = Command::new("swtpm_localca")
            .arg("--type")
            .arg("ek")
            .arg("--ek")
            .arg(format!("x={},y={},id={curve}", hex(x), hex(y)))
            .arg("--dir")
            .arg(out_dir.path())
            .args(["--tpm-spec-family", "2.0", "--tpm-spec-level", "0"])
            .args([
                "--tpm-spec-revision",
                "164",
                "--tpm-manufacturer",
                "id:00001014",
            ])
            .args([
                "--tpm-model",
                "swtpm",
                "--tpm-version",
                "id:20191023",
                "--tpm2",
            ])
            .arg("--configfile")
            .arg(self.dir.path().join("swtpm-localca.conf"))
            .arg("--optsfile")
            .arg(self.dir.path().join("swtpm-localca.options"))
            .stdin(Stdio::null())
            .output()?;
        if !out.status.success() {
            return Err(std::io::Error::other(format!(
                "swtpm_localca failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        std::fs::read(out_dir.path().join("ek.cert"))
    }
}

/// The DER of the first certificate in a PEM text.
fn pem_to_der(pem: &str) -> std::io::Result<Vec<u8>> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject as _;
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()
        .and_then(Result::ok)
        .map(|c| c.to_vec())
        .ok_or_else(|| std::io::Error::other("no certificate in the PEM"))
}

/// A manufactured software TPM served over TCP; killed on drop.
#[derive(Debug)]
pub struct Swtpm {
    dir: tempfile::TempDir,
    child: Option<Child>,
    port: u16,
}

impl Swtpm {
    /// Manufactures a new TPM (a new endorsement seed, so a new EK) with an EK certificate
    /// from `ca`, and serves it.
    pub fn start(ca: &LocalCa) -> std::io::Result<Self> {
        Self::start_with_rsa_bits(ca, 2048)
    }

    /// Like [`Swtpm::start`], with an RSA EK of `rsa_bits` (2048: template L-1 at 0x01c00002;
    /// 3072: the high-range template H-6 at 0x01c0001c). swtpm_setup also makes an ECC P-384
    /// EK (template H-3) and its certificate at 0x01c00016 either way.
    pub fn start_with_rsa_bits(ca: &LocalCa, rsa_bits: u16) -> std::io::Result<Self> {
        let dir = tempfile::tempdir()?;
        let state = dir.path().join("state");
        std::fs::create_dir(&state)?;
        let out = Command::new("swtpm_setup")
            .arg("--tpm2")
            .arg("--tpmstate")
            .arg(&state)
            .arg("--create-ek-cert")
            .arg("--rsa-keysize")
            .arg(rsa_bits.to_string())
            .arg("--config")
            .arg(ca.setup_conf())
            .arg("--overwrite")
            .stdin(Stdio::null())
            .output()?;
        if !out.status.success() {
            return Err(std::io::Error::other(format!(
                "swtpm_setup failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        let mut tpm = Self {
            dir,
            child: None,
            port: 0,
        };
        tpm.serve()?;
        Ok(tpm)
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// Starts swtpm on two free consecutive loopback ports (server, control).
    fn serve(&mut self) -> std::io::Result<()> {
        let mut last = None;
        for _ in 0..10 {
            let port = free_port_pair()?;
            let child = Command::new("swtpm")
                .arg("socket")
                .arg("--tpm2")
                .arg("--tpmstate")
                .arg(format!("dir={}", self.state().display()))
                .arg("--server")
                .arg(format!("type=tcp,port={port},bindaddr=127.0.0.1"))
                .arg("--ctrl")
                .arg(format!("type=tcp,port={},bindaddr=127.0.0.1", port + 1))
                .arg("--flags")
                .arg("not-need-init,startup-clear")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()?;
            self.child = Some(child);
            self.port = port;
            match wait_listening(port, self.child.as_mut()) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    self.kill();
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| std::io::Error::other("swtpm did not start")))
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The TCTI of this TPM: `swtpm:host=127.0.0.1,port=<port>`.
    pub fn tcti(&self) -> String {
        format!("swtpm:host=127.0.0.1,port={}", self.port)
    }

    /// Opens a connection to this TPM.
    pub fn open(&self) -> Result<Tpm, super::TpmError> {
        Tpm::open(&self.tcti())
    }

    /// Provisions an EK certificate from `ca` for this TPM's low-range ECC P-256 EK (template
    /// L-2) at its NV index 0x01c0000a, as a manufacturer does: swtpm_setup makes none.
    pub fn provision_ecc_p256_ek(&self, ca: &LocalCa) -> std::io::Result<()> {
        let tpm = self.open().map_err(std::io::Error::other)?;
        let public = tpm
            .ek_public(EkTemplate::EccP256)
            .map_err(std::io::Error::other)?;
        let parsed = gatehouse_tpm::Public::parse(&public).map_err(std::io::Error::other)?;
        let gatehouse_tpm::PublicKey::Ecc { x, y, .. } = parsed.key else {
            return Err(std::io::Error::other("the P-256 EK is not an ECC key"));
        };
        let certificate = ca.issue_ecc_ek_certificate(&x, &y, "secp256r1")?;
        tpm.provision_nv(EkTemplate::EccP256.certificate_index(), certificate)
            .map_err(std::io::Error::other)
    }

    /// The directory holding the TPM's state.
    pub fn state_dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Swtpm {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A port P such that P and P+1 are free on the loopback interface (as far as binding shows).
fn free_port_pair() -> std::io::Result<u16> {
    for _ in 0..50 {
        let a = TcpListener::bind("127.0.0.1:0")?;
        let port = a.local_addr()?.port();
        if port == u16::MAX {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", port + 1)).is_ok() {
            return Ok(port);
        }
    }
    Err(std::io::Error::other("no two consecutive free ports"))
}

/// Waits until swtpm accepts connections on `port` (and on its control port), or has exited.
fn wait_listening(port: u16, child: Option<&mut Child>) -> std::io::Result<()> {
    let Some(child) = child else {
        return Err(std::io::Error::other("swtpm not started"));
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let ok = |p: u16| {
        TcpStream::connect_timeout(
            &SocketAddr::from(([127, 0, 0, 1], p)),
            Duration::from_millis(200),
        )
        .is_ok()
    };
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait()? {
            return Err(std::io::Error::other(format!("swtpm exited: {status}")));
        }
        // A probe connection on the server port is harmless: swtpm serves one client at a
        // time and takes the next when it closes.
        if ok(port + 1) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(std::io::Error::other("swtpm did not listen in time"))
}
