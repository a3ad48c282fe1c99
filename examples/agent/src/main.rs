//! `ssh-host-key-agent`: the machine side of the example `ssh-host-key` attestor.
//!
//! ```text
//! ssh-host-key-agent evidence --host-key /etc/ssh/ssh_host_ed25519_key.pub > evidence.json
//! gatehouse-agent join --attestor ssh-host-key --evidence-file evidence.json \
//!     --producer 'ssh-host-key-agent answer --host-key /etc/ssh/ssh_host_ed25519_key' ...
//! ```
//!
//! `answer` follows the stock agent's evidence-producer protocol: it reads the challenge's
//! payload (the attestor's JSON, `{"namespace", "message", "state"}`) on stdin, and prints the
//! next round's evidence (`{"state", "signature"}`) on stdout; a non-zero exit status (with a
//! message on stderr) makes the agent give up the join.

use std::io::{Read as _, Write as _};
use std::process::{Command, ExitCode, Stdio};

use base64::Engine as _;

/// The most bytes of challenge read from stdin.
const MAX_PAYLOAD: u64 = 64 * 1024;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.as_slice() {
        [command, flag, key] if command == "evidence" && flag == "--host-key" => evidence(key),
        [command, flag, key] if command == "answer" && flag == "--host-key" => answer(key),
        _ => Err(
            "usage: ssh-host-key-agent evidence --host-key KEY.pub\n       \
                  ssh-host-key-agent answer --host-key KEY  (challenge on stdin)"
                .to_owned(),
        ),
    };
    match result {
        Ok(out) => {
            let mut stdout = std::io::stdout();
            if stdout
                .write_all(out.as_bytes())
                .and_then(|()| stdout.flush())
                .is_err()
            {
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("ssh-host-key-agent: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Round one's evidence: the public key line.
fn evidence(public_key: &str) -> Result<String, String> {
    let line = std::fs::read_to_string(public_key).map_err(|e| format!("{public_key}: {e}"))?;
    let line = line.trim();
    if !line.starts_with("ssh-ed25519 ") {
        return Err(format!("{public_key}: not an ssh-ed25519 public key"));
    }
    Ok(serde_json::json!({ "hostKey": line }).to_string())
}

/// The answer to the challenge on stdin, signed with `ssh-keygen -Y sign`.
fn answer(private_key: &str) -> Result<String, String> {
    let mut input = String::new();
    std::io::stdin()
        .take(MAX_PAYLOAD)
        .read_to_string(&mut input)
        .map_err(|e| format!("reading the challenge: {e}"))?;
    let payload: serde_json::Value =
        serde_json::from_str(&input).map_err(|e| format!("the challenge is not JSON: {e}"))?;
    let field = |name: &str| {
        payload[name]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("the challenge has no {name}"))
    };
    let namespace = field("namespace")?;
    let state = field("state")?;
    let message = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(field("message")?)
        .map_err(|e| format!("the challenge's message: {e}"))?;
    if !namespace
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'@')
    {
        return Err("the challenge's namespace is not a plain name".into());
    }

    let mut child = Command::new("ssh-keygen")
        .args(["-q", "-Y", "sign", "-f", private_key, "-n", &namespace])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("running ssh-keygen: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(&message)
            .map_err(|e| format!("writing to ssh-keygen: {e}"))?;
    }
    let output = child
        .wait_with_output()
        .map_err(|e| format!("running ssh-keygen: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "ssh-keygen -Y sign failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    let signature = String::from_utf8(output.stdout)
        .map_err(|_| "ssh-keygen printed something other than text".to_owned())?;
    Ok(serde_json::json!({ "state": state, "signature": signature }).to_string())
}
