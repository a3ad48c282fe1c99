//! `gatehouse-agent status`: who this machine is, read from the identity files alone (no TPM,
//! no network), so an unprivileged user or a monitoring script can ask.

use std::path::Path;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;
use serde::Serialize;

use crate::cert::{NodeCert, ak_name};
use crate::identity::{CERT_FILE, IDENTITY_FILE, Identity, IdentityError, KEY_FILE};

/// Where the node key lives, as `status` and `doctor` name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyPlace {
    /// A key the TPM derives; node.key holds only its record.
    Tpm,
    /// A PKCS#8 file.
    File,
}

impl KeyPlace {
    /// The place of the key whose file holds `text`.
    pub fn of_file_text(text: &str) -> Self {
        if text
            .trim_start()
            .starts_with("-----BEGIN BCD TPM NODE KEY-----")
        {
            Self::Tpm
        } else {
            Self::File
        }
    }

    /// `in the TPM` or `a file`.
    pub fn phrase(self) -> &'static str {
        match self {
            Self::Tpm => "in the TPM",
            Self::File => "a file",
        }
    }
}

/// The identity in a directory, as `status` prints it (`--json`: this, camelCase).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// The node id.
    pub node_id: String,
    /// The certificate's role (`node`, `site`, `node-tenant`, `ramdisk`).
    pub role: String,
    /// The SPIFFE ID.
    pub spiffe_id: String,
    /// The leaf's serial, hex.
    pub serial: String,
    /// The leaf's notAfter, ms since the Unix epoch.
    pub not_after: i64,
    /// Whether the certificate has expired at the time of the status.
    pub expired: bool,
    /// Where the node key lives.
    pub node_key: KeyPlace,
    /// The certificate's `urn:bc:tpm-ak:` statement, when it names an AK.
    pub ak_statement: Option<String>,
    /// The attestor that admitted (or last re-admitted) the machine.
    pub attestor: String,
    /// Whether this agent was built with TPM support: a build without keeps file keys, and
    /// cannot renew a certificate whose key is in the TPM or that names an AK.
    pub tpm_support: bool,
}

impl Status {
    /// The identity line: `node <id> (role <role>), certificate <serial> expires in 5h 2m,
    /// node key in the TPM, AK urn:bc:tpm-ak:…` (or `expired 3m ago`, `no AK statement`), and
    /// `, agent built without TPM support` from a build without it.
    pub fn line(&self, now_ms: i64) -> String {
        let left = self.not_after - now_ms;
        let when =
            humantime::format_duration(std::time::Duration::from_secs(left.unsigned_abs() / 1000));
        let expiry = if left > 0 {
            format!("expires in {when}")
        } else {
            format!("expired {when} ago")
        };
        let ak = match &self.ak_statement {
            Some(s) => format!("AK {s}"),
            None => "no AK statement".to_owned(),
        };
        let build = if self.tpm_support {
            ""
        } else {
            ", agent built without TPM support"
        };
        format!(
            "node {} (role {}), certificate {} {expiry}, node key {}, {ak}{build}",
            self.node_id,
            self.role,
            self.serial,
            self.node_key.phrase()
        )
    }
}

/// The status of the identity in `dir` at `now_ms`: identity.json, the leaf of node.crt and
/// the kind of node.key, checked to agree on the node. The key itself is not loaded (`doctor`
/// does that).
pub fn status(dir: &Path, now_ms: i64) -> Result<Status, IdentityError> {
    let id_path = dir.join(IDENTITY_FILE);
    let text = match std::fs::read(&id_path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(IdentityError::Missing(dir.to_owned()));
        }
        Err(source) => {
            return Err(IdentityError::Io {
                path: id_path,
                source,
            });
        }
    };
    let identity: Identity = serde_json::from_slice(&text).map_err(|e| IdentityError::Corrupt {
        path: id_path,
        reason: e.to_string(),
    })?;
    let crt_path = dir.join(CERT_FILE);
    let corrupt = |reason: String| IdentityError::Corrupt {
        path: crt_path.clone(),
        reason,
    };
    let pem = std::fs::read(&crt_path).map_err(|source| IdentityError::Io {
        path: crt_path.clone(),
        source,
    })?;
    let leaf = CertificateDer::pem_slice_iter(&pem)
        .next()
        .ok_or_else(|| corrupt("holds no certificate".into()))?
        .map_err(|e| corrupt(e.to_string()))?;
    let cert = NodeCert::parse(&leaf).map_err(|e| corrupt(e.to_string()))?;
    if cert.node_id != identity.node_id {
        return Err(corrupt(format!(
            "names node {}, not {} as {IDENTITY_FILE} says",
            cert.node_id, identity.node_id
        )));
    }
    let key_path = dir.join(KEY_FILE);
    let key_text = std::fs::read_to_string(&key_path).map_err(|source| IdentityError::Io {
        path: key_path,
        source,
    })?;
    Ok(Status {
        node_id: identity.node_id,
        role: cert.role.clone(),
        spiffe_id: identity.spiffe_id,
        serial: cert.serial.clone(),
        not_after: cert.not_after_ms,
        expired: now_ms >= cert.not_after_ms,
        node_key: KeyPlace::of_file_text(&key_text),
        ak_statement: ak_name(&leaf).and_then(|n| gatehouse_proto::tpm::ak_statement(&n)),
        attestor: identity.attestor,
        tpm_support: crate::tpm_build::TPM_SUPPORT,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_identity_line_names_node_role_expiry_key_and_ak() {
        let s = Status {
            node_id: "node_1".into(),
            role: "node".into(),
            spiffe_id: "spiffe://td/node/node_1".into(),
            serial: "0a".into(),
            not_after: 10_000_000,
            expired: false,
            node_key: KeyPlace::Tpm,
            ak_statement: Some("urn:bc:tpm-ak:sha256:00".into()),
            attestor: "tpm".into(),
            tpm_support: true,
        };
        assert_eq!(
            s.line(10_000_000 - 3_600_000 - 120_000),
            "node node_1 (role node), certificate 0a expires in 1h 2m, node key in the TPM, \
             AK urn:bc:tpm-ak:sha256:00"
        );
        let file = Status {
            node_key: KeyPlace::File,
            ak_statement: None,
            ..s.clone()
        };
        assert_eq!(
            file.line(10_000_000 + 60_000),
            "node node_1 (role node), certificate 0a expired 1m ago, node key a file, \
             no AK statement"
        );
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["nodeKey"], "tpm");
        assert_eq!(json["akStatement"], "urn:bc:tpm-ak:sha256:00");
        assert_eq!(serde_json::to_value(&file).unwrap()["nodeKey"], "file");
        assert_eq!(json["tpmSupport"], true);
        let without = Status {
            tpm_support: false,
            ..file
        };
        assert_eq!(
            without.line(10_000_000 + 60_000),
            "node node_1 (role node), certificate 0a expired 1m ago, node key a file, \
             no AK statement, agent built without TPM support"
        );
    }

    #[test]
    fn a_directory_without_identity_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            status(dir.path(), 0),
            Err(IdentityError::Missing(_))
        ));
    }
}
