//! Stable refusal reason codes.
//!
//! A reason goes to the `security.join.refused` event, the audit row and the log (the agent
//! sees only ACCESS_DENIED), so operators and alerts match on it: codes are lowercase,
//! hyphenated and at most [`MAX_LEN`] bytes ([`is_valid`]); the host turns anything else into
//! `attestor-fault`. Attestors may use codes of their own; these are the ones Gatehouse's
//! attestors share.

/// The most bytes a reason code may have.
pub const MAX_LEN: usize = 64;

/// The request carries no token, and the attestor needs one.
pub const NO_TOKEN: &str = "no-token";
/// No token has the request's token id.
pub const UNKNOWN_TOKEN: &str = "unknown-token";
/// The token's secret does not match.
pub const BAD_SECRET: &str = "bad-secret";
/// An operator revoked the token.
pub const REVOKED: &str = "revoked";
/// The token's expiry has passed (by database time).
pub const EXPIRED: &str = "expired";
/// The token has no use left.
pub const NO_USES_LEFT: &str = "no-uses-left";
/// The token does not admit the role the machine asks for.
pub const WRONG_ROLE: &str = "wrong-role";
/// A storage operation failed, so the attestor cannot decide.
pub const STORAGE: &str = "storage-error";
/// The evidence does not parse as the attestor's format.
pub const MALFORMED_EVIDENCE: &str = "malformed-evidence";
/// The configuration the host passed to `verify` does not configure the attestor.
pub const BAD_CONFIG: &str = "bad-config";
/// A single-use token (provisioned, discovery) does not have exactly one use left.
pub const NOT_SINGLE_USE: &str = "not-single-use";
/// The machine claims no product UUID, and the attestor needs one.
pub const NO_PRODUCT_UUID: &str = "no-product-uuid";
/// Nothing binds the token to one machine.
pub const UNBOUND: &str = "unbound";
/// The machine's product UUID is not the one the token or its target expects.
pub const PRODUCT_UUID_MISMATCH: &str = "product-uuid-mismatch";
/// A signed assertion was used for a join before.
pub const ASSERTION_REUSED: &str = "assertion-reused";
/// A cloud instance joined before (each admits exactly one join).
pub const INSTANCE_REUSED: &str = "instance-reused";
/// The host does not know where a cloud instance joins.
pub const UNKNOWN_INSTANCE: &str = "unknown-instance";
/// The node key's certification does not parse.
pub const NODE_KEY_MALFORMED: &str = "node-key-malformed";
/// The node key's certification signature does not verify.
pub const NODE_KEY_SIGNATURE: &str = "node-key-signature";
/// The node key's certification is not over the expected nonce.
pub const NODE_KEY_NONCE: &str = "node-key-nonce";
/// The certified key is not the CSR's key.
pub const NODE_KEY_NAME: &str = "node-key-name";
/// The certified key's attributes do not make it a TPM-resident signing key.
pub const NODE_KEY_ATTRIBUTES: &str = "node-key-attributes";
/// The certified key is not the key the CSR carries.
pub const NODE_KEY_NOT_CSR: &str = "node-key-not-csr";
/// An operator denied the machine's join request.
pub const JOIN_REQUEST_DENIED: &str = "join-request-denied";
/// The join request lapsed before an operator decided it, or before the machine came back.
pub const JOIN_REQUEST_EXPIRED: &str = "join-request-expired";
/// The join request's approval already admitted a machine once.
pub const JOIN_REQUEST_USED: &str = "join-request-used";
/// The remembered join request is for another subject or CSR.
pub const JOIN_REQUEST_MISMATCH: &str = "join-request-mismatch";
/// The attestor requires a certified node key and the answer carries none.
pub const NODE_KEY_NOT_CERTIFIED: &str = "node-key-not-certified";

/// Whether `code` is a well-formed reason: 1 to [`MAX_LEN`] bytes of lowercase ASCII letters,
/// digits and single hyphens, starting with a letter and not ending with a hyphen.
pub fn is_valid(code: &str) -> bool {
    let bytes = code.as_bytes();
    let well_placed = match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => first.is_ascii_lowercase() && *last != b'-',
        _ => false,
    };
    well_placed
        && bytes.len() <= MAX_LEN
        && !code.contains("--")
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: &[&str] = &[
        NO_TOKEN,
        UNKNOWN_TOKEN,
        BAD_SECRET,
        REVOKED,
        EXPIRED,
        NO_USES_LEFT,
        WRONG_ROLE,
        STORAGE,
        MALFORMED_EVIDENCE,
        BAD_CONFIG,
        NOT_SINGLE_USE,
        NO_PRODUCT_UUID,
        UNBOUND,
        PRODUCT_UUID_MISMATCH,
        ASSERTION_REUSED,
        INSTANCE_REUSED,
        UNKNOWN_INSTANCE,
        NODE_KEY_MALFORMED,
        NODE_KEY_SIGNATURE,
        NODE_KEY_NONCE,
        NODE_KEY_NAME,
        NODE_KEY_ATTRIBUTES,
        NODE_KEY_NOT_CSR,
        NODE_KEY_NOT_CERTIFIED,
        JOIN_REQUEST_DENIED,
        JOIN_REQUEST_EXPIRED,
        JOIN_REQUEST_USED,
        JOIN_REQUEST_MISMATCH,
    ];

    #[test]
    fn every_code_is_valid_and_distinct() {
        for (i, code) in ALL.iter().enumerate() {
            assert!(is_valid(code), "{code}");
            assert!(!ALL[..i].contains(code), "{code} twice");
        }
    }

    #[test]
    fn rejects_malformed_codes() {
        for code in [
            "",
            "Bad",
            "has space",
            "-leading",
            "trailing-",
            "double--hyphen",
            "9starts-with-digit",
            "under_score",
            "ünicode",
            &"a".repeat(MAX_LEN + 1),
        ] {
            assert!(!is_valid(code), "{code:?}");
        }
        assert!(is_valid(&"a".repeat(MAX_LEN)));
        assert!(is_valid("tpm2-quote"));
    }
}
