//! Join tokens as operators and agents see them, and how they travel sealed.
//!
//! A token is `gh1.<id>.<secret>`: the id names the `join_tokens` row, the secret is 32 random
//! bytes in base64url whose SHA-256 the row keeps. Agents never send it in the clear: they seal
//! it with HPKE (RFC 9180) to the JoinService encryption key, with the CSR's SHA-256 as
//! associated data, so a sealed token is good for one CSR only.

use std::fmt;

/// HPKE `info` for sealed tokens (domain separation from any other use of the key).
pub const TOKEN_SEAL_INFO: &[u8] = b"gatehouse/join-token/v1";

const PREFIX: &str = "gh1";
const SECRET_LEN: usize = 32;
const MAX_ID_LEN: usize = 64;

/// Why a token string or a sealed token was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// The text (or the plaintext of a sealed token that opened) is not `gh1.<id>.<secret>`.
    #[error("a join token has the form gh1.<id>.<secret>")]
    Format,
    /// The id is empty, too long, or has characters other than `[a-z0-9_]`.
    #[error("the token id is not of the form tok_<lowercase alphanumerics>")]
    Id,
    /// The secret is not 32 bytes of unpadded base64url.
    #[error("the token secret is not 32 bytes of base64url")]
    Secret,
    /// The sealed token does not open: tampered, sealed to another key, or for another CSR.
    #[error("the sealed token does not open for this key and CSR")]
    Sealed,
}

/// A parsed join token.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenString {
    /// The token id.
    pub id: String,
    /// The secret bytes.
    pub secret: Vec<u8>,
}

impl fmt::Debug for TokenString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the secret.
        f.debug_struct("TokenString")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl TokenString {
    /// Parses `gh1.<id>.<secret>` (surrounding whitespace, as in a token file, is ignored).
    pub fn parse(text: &str) -> Result<Self, TokenError> {
        let mut parts = text.trim().split('.');
        let (Some(prefix), Some(id), Some(secret), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(TokenError::Format);
        };
        if prefix != PREFIX {
            return Err(TokenError::Format);
        }
        if id.is_empty()
            || id.len() > MAX_ID_LEN
            || !id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            return Err(TokenError::Id);
        }
        let secret = crate::b64::decode(secret).map_err(|_| TokenError::Secret)?;
        if secret.len() != SECRET_LEN {
            return Err(TokenError::Secret);
        }
        Ok(Self {
            id: id.to_owned(),
            secret,
        })
    }

    /// The token's text form.
    pub fn to_text(&self) -> String {
        format!("{PREFIX}.{}.{}", self.id, crate::b64::encode(&self.secret))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let t = TokenString {
            id: "tok_abc123".into(),
            secret: vec![7; 32],
        };
        let text = t.to_text();
        assert_eq!(TokenString::parse(&format!(" {text}\n")).unwrap(), t);
        assert!(!format!("{t:?}").contains(&crate::b64::encode([7u8; 32])));
    }

    #[test]
    fn rejects_malformed() {
        let secret = crate::b64::encode([1u8; 32]);
        assert_eq!(TokenString::parse("gh1.tok_a"), Err(TokenError::Format));
        assert_eq!(
            TokenString::parse(&format!("gh2.tok_a.{secret}")),
            Err(TokenError::Format)
        );
        assert_eq!(
            TokenString::parse(&format!("gh1.Tok-A.{secret}")),
            Err(TokenError::Id)
        );
        assert_eq!(
            TokenString::parse(&format!("gh1..{secret}")),
            Err(TokenError::Id)
        );
        assert_eq!(
            TokenString::parse("gh1.tok_a.AAAA"),
            Err(TokenError::Secret)
        );
        assert_eq!(
            TokenString::parse(&format!("gh1.tok_a.{secret}.x")),
            Err(TokenError::Format)
        );
        assert_eq!(
            TokenError::Secret.to_string(),
            "the token secret is not 32 bytes of base64url"
        );
    }
}
