//! The user data a provisioning workflow's `userdata.render` step renders for the machine it
//! deploys, and how the installed system reads its token back.
//!
//! The host renders a cloud-init `#cloud-config` document that writes the single-use
//! provisioned token to a root-only file and runs `gatehouse-agent join --attestor provisioned`
//! with it, claiming the machine's SMBIOS product UUID. [`token_from_userdata`] finds the token
//! in any text (this document, or another template an operator wrote around the token), so
//! `gatehouse-agent join --userdata FILE` works either way.

use crate::{TokenError, TokenString};

/// Where the rendered user data writes the token.
pub const TOKEN_PATH: &str = "/etc/gatehouse/provisioned.token";
/// Where the rendered user data expects the join trust file (shipped with the image: it pins
/// the host's keys, so it must not come from the same channel as the token).
pub const TRUST_PATH: &str = "/etc/gatehouse/join-trust.json";
/// Where the agent writes the identity.
pub const IDENTITY_DIR: &str = "/var/lib/gatehouse-agent";

/// What a workflow's user data says.
#[derive(Debug, Clone, Copy)]
pub struct Userdata<'a> {
    /// The workflow that minted the token.
    pub workflow_id: &'a str,
    /// The node it deploys.
    pub node_id: &'a str,
    /// The token, in its text form (`gh1.<id>.<secret>`).
    pub token: &'a str,
    /// The host's URL the machine joins at.
    pub server_url: &'a str,
}

/// Why user data could not be rendered or read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UserdataError {
    /// A field would not stay one YAML scalar (an id or URL with characters outside its safe
    /// set).
    #[error("{0} has characters user data cannot carry safely")]
    Unsafe(&'static str),
    /// The text holds no join token.
    #[error("the user data holds no join token (gh1.<id>.<secret>)")]
    NoToken,
    /// The text holds more than one distinct join token.
    #[error("the user data holds more than one join token")]
    Ambiguous,
    /// A word that starts like a token does not parse as one.
    #[error("the user data's token does not parse: {0}")]
    Token(#[from] TokenError),
}

/// Whether `v` is 1 to 2048 bytes of URL characters that need no escaping inside a YAML
/// single-quoted scalar or a literal block, and that no shell expands: no quote, `$`,
/// backslash, backtick, `#`, space or control character.
fn safe(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= 2048
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~:/?=&%+,;@[]".contains(&b))
}

/// Renders the `#cloud-config` user data. Every field is checked to be safe to embed as is
/// (the token and ids are base64url and id characters; the URL is checked), so the document
/// never needs escaping.
pub fn render(u: &Userdata<'_>) -> Result<String, UserdataError> {
    for (what, v) in [
        ("the workflow id", u.workflow_id),
        ("the node id", u.node_id),
        ("the token", u.token),
        ("the server URL", u.server_url),
    ] {
        if !safe(v) {
            return Err(UserdataError::Unsafe(what));
        }
    }
    let Userdata {
        workflow_id,
        node_id,
        token,
        server_url,
    } = u;
    Ok(format!(
        "#cloud-config\n\
         # Gatehouse provisioning workflow {workflow_id} for node {node_id}.\n\
         # The token admits this machine once (attestor provisioned), as that node.\n\
         write_files:\n\
         \x20 - path: {TOKEN_PATH}\n\
         \x20   owner: root:root\n\
         \x20   permissions: '0600'\n\
         \x20   content: |\n\
         \x20     {token}\n\
         runcmd:\n\
         \x20 - [sh, -c, 'exec gatehouse-agent join --server \"$0\" --ca {TRUST_PATH} \
         --attestor provisioned --token-file {TOKEN_PATH} --out {IDENTITY_DIR} \
         --product-uuid \"$(cat /sys/class/dmi/id/product_uuid)\"', '{server_url}']\n"
    ))
}

/// The one join token in `text` (user data as rendered by [`render`], or any text carrying
/// the token as a word of its own). Words are split on whitespace, quotes, commas and
/// brackets; a word starting with `gh1.` must parse as a token.
pub fn token_from_userdata(text: &str) -> Result<TokenString, UserdataError> {
    let mut found: Option<TokenString> = None;
    let words = text.split(|c: char| c.is_whitespace() || "'\"`,[]{}()=<>".contains(c));
    for word in words.filter(|w| w.starts_with("gh1.")) {
        let token = TokenString::parse(word)?;
        match &found {
            Some(seen) if *seen != token => return Err(UserdataError::Ambiguous),
            _ => found = Some(token),
        }
    }
    found.ok_or(UserdataError::NoToken)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token() -> TokenString {
        TokenString {
            id: "tok_abc".into(),
            secret: vec![7; 32],
        }
    }

    fn userdata(token: &str, server_url: &str) -> Result<String, UserdataError> {
        render(&Userdata {
            workflow_id: "wf_1",
            node_id: "node_1",
            token,
            server_url,
        })
    }

    #[test]
    fn the_rendered_token_reads_back() {
        let text = token().to_text();
        let rendered = userdata(&text, "https://gatehouse.example:8443").unwrap();
        assert!(rendered.starts_with("#cloud-config\n"));
        assert!(rendered.contains(&format!("      {text}\n")));
        assert!(rendered.contains("--attestor provisioned"));
        assert!(rendered.contains("'https://gatehouse.example:8443']"));
        assert_eq!(token_from_userdata(&rendered).unwrap(), token());
    }

    #[test]
    fn nothing_that_could_break_out_of_the_document_is_rendered() {
        let text = token().to_text();
        for url in [
            "https://h/'; rm -rf /",
            "https://h/$(id)",
            "https://h/\nruncmd:",
            "https://h/\"",
            "https://h/`id`",
            "",
        ] {
            assert_eq!(
                userdata(&text, url),
                Err(UserdataError::Unsafe("the server URL")),
                "{url:?}"
            );
        }
        assert_eq!(
            userdata("gh1.x y", "https://h"),
            Err(UserdataError::Unsafe("the token"))
        );
    }

    #[test]
    fn a_token_is_found_in_any_text_once() {
        let text = token().to_text();
        assert_eq!(
            token_from_userdata(&format!("TOKEN=\"{text}\"\n")).unwrap(),
            token()
        );
        // The same token twice is one token.
        assert_eq!(
            token_from_userdata(&format!("{text}\n# {text}\n")).unwrap(),
            token()
        );
        assert_eq!(
            token_from_userdata("#cloud-config\n"),
            Err(UserdataError::NoToken)
        );
        let other = TokenString {
            id: "tok_other".into(),
            secret: vec![8; 32],
        }
        .to_text();
        assert_eq!(
            token_from_userdata(&format!("{text} {other}")),
            Err(UserdataError::Ambiguous)
        );
        assert!(matches!(
            token_from_userdata("gh1.tok_x.short"),
            Err(UserdataError::Token(_))
        ));
    }
}
