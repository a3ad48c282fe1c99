//! Constant-time comparison of secrets.

use subtle::ConstantTimeEq as _;

/// Whether `a` and `b` are equal, in time that depends only on their lengths: compare secrets
/// (and their hashes) with this, never with `==`, so the time taken does not leak how many
/// leading bytes matched.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.ct_eq(b).into()
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;

    #[test]
    fn compares_contents_and_lengths() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(constant_time_eq(b"", b""));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secre"));
        assert!(!constant_time_eq(b"", b"x"));
    }
}
