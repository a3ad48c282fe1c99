//! `gatehouse-agent install-script`: a shell script that installs (or upgrades) the agent on a
//! machine, writes its systemd units (the agent, and the TPM helper) and configuration, joins,
//! and (re)starts the units. The same script installs and upgrades: the join answers
//! `already joined as <node>` on a machine that already joined, and the units are restarted
//! either way.
//!
//! The script takes from its environment: `GATEHOUSE_AGENT_BIN` (a local binary to install;
//! otherwise the `--binary-url` it was made with is fetched with curl), `GATEHOUSE_JOIN_TOKEN`
//! (the token of a token join; otherwise the first line of its standard input), and, for tests,
//! `ROOT` (install under this prefix instead of /, and skip creating the user) and
//! `TPM_DEVICE` (instead of /dev/tpmrm0). A tpm join reads no token (the variable is dropped)
//! and fails before it installs anything when the machine has no TPM device.
//!
//! The agent comes in two builds (README: "What a machine needs"): the TPM build links the
//! system's libtss2, the build without TPM support links none and keeps file keys. The script
//! runs the binary it is about to install (`--version` names the build) before it replaces
//! anything: a binary that does not run on the machine (the TPM build without libtss2) stops
//! the script, a tpm join refuses the build without TPM support, and a machine with a TPM gets
//! the helper unit only with the TPM build.

/// How the machine joins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InstallJoin {
    /// A join token, from `GATEHOUSE_JOIN_TOKEN` or standard input.
    Token,
    /// The provisioned token in the user data at this path.
    Userdata(String),
    /// The cloud's identity document (cloud-iid): its file, the provider, and for AWS the
    /// signature file. The script fetches nothing: a boot step writes these files.
    Document {
        /// The document file.
        document: String,
        /// aws, gcp, azure or oidc.
        provider: Option<String>,
        /// AWS: the pkcs7 signature file.
        signature: Option<String>,
    },
    /// The TPM is the credential.
    Tpm,
}

/// What the script installs.
#[derive(Debug, Clone)]
pub struct InstallOptions {
    /// The host's URL.
    pub server: String,
    /// The join trust file's text, written to /etc/gatehouse-agent/trust.json.
    pub trust_json: String,
    /// How to join.
    pub join: InstallJoin,
    /// The attestor (`None`: the join's default for its credential).
    pub attestor: Option<String>,
    /// Where the binary is fetched from when `GATEHOUSE_AGENT_BIN` is not set.
    pub binary_url: Option<String>,
    /// The unprivileged user the agent runs as.
    pub user: String,
}

/// Single-quotes `s` for sh.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The installed layout (paths on the machine, without `ROOT`).
const BIN: &str = "/usr/local/bin/gatehouse-agent";
const ETC: &str = "/etc/gatehouse-agent";
const DATA: &str = "/var/lib/gatehouse-agent";
const SOCKET: &str = crate::tpm_build::DEFAULT_SOCKET;

/// What `gatehouse-agent --version` of the TPM build says.
pub const TPM_BUILD_MARK: &str = "(with TPM support)";

/// The script.
pub fn render(o: &InstallOptions) -> String {
    let q = sh_quote;
    let mut join_args = String::new();
    let mut early = String::new();
    let mut token = String::new();
    let mut needs_tpm_build = String::new();
    match &o.join {
        InstallJoin::Token => {
            token =
                r#"# The join token: GATEHOUSE_JOIN_TOKEN, else the first line of standard input.
if [ -z "${GATEHOUSE_JOIN_TOKEN:-}" ] && [ ! -e "$DATA/identity.json" ]; then
  IFS= read -r GATEHOUSE_JOIN_TOKEN || true
fi
"#
                .to_owned();
            join_args.push_str(" --token-file \"$TOKEN_FILE\"");
        }
        InstallJoin::Userdata(path) => {
            join_args.push_str(&format!(" --userdata {}", q(path)));
        }
        InstallJoin::Document {
            document,
            provider,
            signature,
        } => {
            join_args.push_str(&format!(" --document-file {}", q(document)));
            if let Some(p) = provider {
                join_args.push_str(&format!(" --provider {}", q(p)));
            }
            if let Some(s) = signature {
                join_args.push_str(&format!(" --signature-file {}", q(s)));
            }
        }
        InstallJoin::Tpm => {
            early =
                r#"# A tpm join: the TPM is the credential. No token is read, and without a TPM the
# script stops before it changes anything.
unset GATEHOUSE_JOIN_TOKEN
if [ ! -e "$TPM_DEVICE" ]; then
  echo "gatehouse-agent install: no TPM at $TPM_DEVICE; a tpm join needs one" >&2
  exit 2
fi
"#
                .to_owned();
            needs_tpm_build = format!(
                r#"if [ -z "$TPM_BUILD" ]; then
  rm -f "$ROOT{BIN}.new"
  echo "gatehouse-agent install: $VERSION: a tpm join needs the TPM build of gatehouse-agent" >&2
  exit 2
fi
"#
            );
            join_args.push_str(" --attestor tpm");
        }
    }
    if let (Some(a), false) = (&o.attestor, o.join == InstallJoin::Tpm) {
        join_args.push_str(&format!(" --attestor {}", q(a)));
    }
    let fetch = match &o.binary_url {
        Some(url) => format!(
            "  curl -fsSL --proto '=https' {} -o \"$ROOT{BIN}.new\"\n",
            q(url)
        ),
        None => "  echo \"gatehouse-agent install: set GATEHOUSE_AGENT_BIN to the binary to \
                 install\" >&2\n  exit 2\n"
            .to_owned(),
    };
    let server = q(&o.server);
    let user = q(&o.user);
    format!(
        r#"#!/bin/sh
# Installs or upgrades gatehouse-agent, joins this machine to {server_text}, and (re)starts
# its units. Made by `gatehouse-agent install-script`; run it as root. Running it again
# upgrades: the join answers "already joined as <node>" and the units restart.
set -eu
ROOT="${{ROOT:-}}"
TPM_DEVICE="${{TPM_DEVICE:-/dev/tpmrm0}}"
SERVER={server}
AGENT_USER={user}
DATA="$ROOT{DATA}"
{early}
if [ -z "$ROOT" ] && [ "$(id -u)" != 0 ]; then
  echo "gatehouse-agent install: run as root" >&2
  exit 2
fi
{token}
umask 022
mkdir -p "$ROOT/usr/local/bin" "$ROOT{ETC}" "$ROOT/etc/systemd/system"
mkdir -p -m 0700 "$DATA"

# The binary, replaced in one rename once it is known to run here and to be the build this
# join needs: the TPM build needs the system's libtss2.
if [ -n "${{GATEHOUSE_AGENT_BIN:-}}" ]; then
  cp "$GATEHOUSE_AGENT_BIN" "$ROOT{BIN}.new"
else
{fetch}fi
chmod 0755 "$ROOT{BIN}.new"
if ! VERSION=$("$ROOT{BIN}.new" --version 2>&1); then
  rm -f "$ROOT{BIN}.new"
  echo "gatehouse-agent install: the binary does not run on this machine: $VERSION" >&2
  echo "gatehouse-agent install: the TPM build needs libtss2-esys and libtss2-tctildr; a token, provisioned or cloud join can use the build without TPM support" >&2
  exit 2
fi
case "$VERSION" in
  *"{TPM_BUILD_MARK}"*) TPM_BUILD=1 ;;
  *) TPM_BUILD= ;;
esac
{needs_tpm_build}mv -f "$ROOT{BIN}.new" "$ROOT{BIN}"

# The join trust file: the pinned TLS CA, node CA and join keys.
cat > "$ROOT{ETC}/trust.json.new" <<'GATEHOUSE_TRUST_EOF'
{trust}
GATEHOUSE_TRUST_EOF
mv -f "$ROOT{ETC}/trust.json.new" "$ROOT{ETC}/trust.json"

# The agent's user: unprivileged, and never in the tss group (the helper holds the TPM).
if [ -z "$ROOT" ]; then
  id "$AGENT_USER" >/dev/null 2>&1 ||
    useradd --system --no-create-home --home-dir {DATA} --shell /usr/sbin/nologin "$AGENT_USER"
  if id -nG "$AGENT_USER" | tr ' ' '\n' | grep -qx tss; then
    gpasswd -d "$AGENT_USER" tss >/dev/null
  fi
fi

# With a TPM (and the TPM build) the agent reaches it through the helper; without, it keeps a
# file key.
if [ -e "$TPM_DEVICE" ] && [ -z "$TPM_BUILD" ]; then
  echo "gatehouse-agent install: $VERSION: the node key stays a file on this machine with a TPM (install the TPM build to keep it in the TPM)" >&2
fi
if [ -e "$TPM_DEVICE" ] && [ -n "$TPM_BUILD" ]; then
  RUN_TPM="--helper {SOCKET}"
  UNITS="gatehouse-agent-helper.service gatehouse-agent.service"
  AFTER="gatehouse-agent-helper.service"
else
  RUN_TPM="--tpm none"
  UNITS="gatehouse-agent.service"
  AFTER=""
fi
cat > "$ROOT/etc/systemd/system/gatehouse-agent-helper.service" <<EOF
[Unit]
Description=Gatehouse agent TPM helper (holds the TPM for the unprivileged agent)

[Service]
User=root
Group=$AGENT_USER
RuntimeDirectory=gatehouse-agent
RuntimeDirectoryMode=0750
ExecStart={BIN} helper --socket {SOCKET}
Restart=always

[Install]
WantedBy=multi-user.target
EOF
cat > "$ROOT/etc/systemd/system/gatehouse-agent.service" <<EOF
[Unit]
Description=Gatehouse agent (keeps the node certificate renewed)
Wants=network-online.target $AFTER
After=network-online.target $AFTER

[Service]
User=$AGENT_USER
ExecStart={BIN} run --server $SERVER --ca {ETC}/trust.json --dir {DATA} $RUN_TPM
Restart=on-failure
RestartPreventExitStatus=2 3 5
NoNewPrivileges=yes
ProtectSystem=strict
ReadWritePaths={DATA}

[Install]
WantedBy=multi-user.target
EOF

# The join (as root: a tpm join opens the TPM itself). A machine that already joined
# answers "already joined as <node>".
TOKEN_FILE="$DATA/join.token"
if [ -n "${{GATEHOUSE_JOIN_TOKEN:-}}" ]; then
  (umask 077; printf '%s\n' "$GATEHOUSE_JOIN_TOKEN" > "$TOKEN_FILE")
fi
status=0
"$ROOT{BIN}" join --server "$SERVER" --ca "$ROOT{ETC}/trust.json" --out "$DATA"{join_args} </dev/null || status=$?
rm -f "$TOKEN_FILE"
if [ "$status" != 0 ]; then
  echo "gatehouse-agent install: the join failed (exit $status)" >&2
  exit "$status"
fi
if [ -z "$ROOT" ]; then
  chown -R "$AGENT_USER:" "$DATA"
fi

systemctl daemon-reload
systemctl enable $UNITS
systemctl restart $UNITS
echo "gatehouse-agent install: done"
"#,
        server_text = o.server,
        trust = o.trust_json.trim_end(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(join: InstallJoin) -> InstallOptions {
        InstallOptions {
            server: "https://h:8443".into(),
            trust_json: "{\"trustDomain\": \"td\"}\n".into(),
            join,
            attestor: None,
            binary_url: Some("https://dl.example/gatehouse-agent".into()),
            user: "gatehouse-agent".into(),
        }
    }

    #[test]
    fn a_token_script_reads_the_token_and_a_tpm_script_does_not() {
        let token = render(&options(InstallJoin::Token));
        assert!(token.contains("read -r GATEHOUSE_JOIN_TOKEN"));
        assert!(token.contains("--token-file \"$TOKEN_FILE\""));
        assert!(!token.contains("--attestor tpm"));
        let tpm = render(&options(InstallJoin::Tpm));
        assert!(!tpm.contains("read -r"));
        assert!(tpm.contains("unset GATEHOUSE_JOIN_TOKEN"));
        assert!(tpm.contains(" --attestor tpm </dev/null"));
        // The TPM check comes before anything is installed.
        assert!(tpm.find("no TPM at").unwrap() < tpm.find("mkdir -p").unwrap());
        // The build is checked before the binary replaces the installed one; only a tpm join
        // needs the TPM build.
        let check = tpm.find("a tpm join needs the TPM build").unwrap();
        assert!(tpm.find("--version").unwrap() < check);
        assert!(
            check
                < tpm
                    .find("mv -f \"$ROOT/usr/local/bin/gatehouse-agent.new\"")
                    .unwrap()
        );
        assert!(!token.contains("a tpm join needs the TPM build"));
        let doc = render(&InstallOptions {
            attestor: Some("cloud-iid".into()),
            ..options(InstallJoin::Document {
                document: "/run/doc.json".into(),
                provider: Some("aws".into()),
                signature: Some("/run/pkcs7".into()),
            })
        });
        assert!(doc.contains(
            "--document-file '/run/doc.json' --provider 'aws' --signature-file '/run/pkcs7' \
             --attestor 'cloud-iid'"
        ));
        let ud = render(&options(InstallJoin::Userdata("/var/lib/cloud/ud".into())));
        assert!(ud.contains("--userdata '/var/lib/cloud/ud'"));
    }

    #[test]
    fn quoting_survives_quotes() {
        assert_eq!(sh_quote("it's"), r"'it'\''s'");
    }
}
