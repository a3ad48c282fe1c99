//! The command kinds a restricted (ramdisk) certificate allows, carried in the certificate.
//!
//! A ramdisk's certificate names the kinds of commands it may run as one `urn:bc:` URI SAN
//! after the SPIFFE ID:
//!
//! ```text
//! urn:bc:kinds:inventory.refresh,logs.collect,diag.*,disk.wipe,deploy.*,boot.kexec
//! ```
//!
//! A URI SAN rather than a private X.509 extension because every X.509 library and relying
//! party already reads SANs (the SPIFFE ID is one), and Gatehouse's renewal copies `urn:bc:`
//! statements from the old certificate verbatim, so the restriction survives renewals without
//! a second mechanism. A kind is dot-separated lowercase words (`[a-z0-9-]+`); a pattern is a
//! kind or a prefix ending in `.*`, which allows every kind under it (`deploy.*` allows
//! `deploy.image` but not `deploy` itself). A certificate without the statement is not
//! restricted by it; a ramdisk certificate never lacks it (JoinService refuses to issue one).

/// The statement prefix.
pub const KINDS_STATEMENT_PREFIX: &str = "urn:bc:kinds:";

/// The most patterns one certificate carries.
pub const MAX_KINDS: usize = 32;

/// The longest pattern.
pub const MAX_KIND_LEN: usize = 64;

/// The longest statement (the host's limit on any `urn:bc:` statement).
pub const MAX_STATEMENT_LEN: usize = 512;

/// The kinds a discovered ramdisk may run when the attestor's configuration names none
/// (seed: `discoveryAllowedKinds`).
pub const COMMISSIONING_KINDS: [&str; 6] = [
    "inventory.refresh",
    "logs.collect",
    "diag.*",
    "disk.wipe",
    "deploy.*",
    "boot.kexec",
];

fn is_word(w: &str) -> bool {
    !w.is_empty()
        && w.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// Whether `pattern` is a kind (`disk.wipe`) or a prefix pattern (`diag.*`).
pub fn is_pattern(pattern: &str) -> bool {
    if pattern.len() > MAX_KIND_LEN {
        return false;
    }
    let body = pattern.strip_suffix(".*").unwrap_or(pattern);
    body.split('.').all(is_word)
}

/// Whether `patterns` is a list a certificate may carry: 1 to [`MAX_KINDS`] distinct
/// patterns whose statement fits in [`MAX_STATEMENT_LEN`].
pub fn is_pattern_list(patterns: &[String]) -> bool {
    let len = KINDS_STATEMENT_PREFIX.len() + patterns.iter().map(|p| p.len() + 1).sum::<usize>();
    !patterns.is_empty()
        && len <= MAX_STATEMENT_LEN + 1
        && patterns.len() <= MAX_KINDS
        && patterns.iter().all(|p| is_pattern(p))
        && patterns
            .iter()
            .enumerate()
            .all(|(i, p)| !patterns[..i].contains(p))
}

/// The statement for `patterns`, or `None` if they are not a valid list.
pub fn statement(patterns: &[String]) -> Option<String> {
    is_pattern_list(patterns).then(|| format!("{KINDS_STATEMENT_PREFIX}{}", patterns.join(",")))
}

/// The patterns of a kinds statement; `None` if `statement` is not one (or not a valid one).
pub fn parse_statement(statement: &str) -> Option<Vec<String>> {
    let list = statement.strip_prefix(KINDS_STATEMENT_PREFIX)?;
    let patterns: Vec<String> = list.split(',').map(str::to_owned).collect();
    is_pattern_list(&patterns).then_some(patterns)
}

/// Whether `kind` is allowed by one of `patterns`.
pub fn allows(patterns: &[String], kind: &str) -> bool {
    if kind.ends_with(".*") || !is_pattern(kind) {
        return false;
    }
    patterns.iter().any(|p| match p.strip_suffix(".*") {
        Some(prefix) => kind
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('.')),
        None => p == kind,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_commissioning_statement() {
        let kinds = owned(&COMMISSIONING_KINDS);
        let s = statement(&kinds).unwrap();
        assert_eq!(
            s,
            "urn:bc:kinds:inventory.refresh,logs.collect,diag.*,disk.wipe,deploy.*,boot.kexec"
        );
        assert_eq!(parse_statement(&s).unwrap(), kinds);
        assert!(parse_statement("urn:bc:tpm-ak:000b:00").is_none());
        assert!(parse_statement("urn:bc:kinds:").is_none());
        assert!(parse_statement("urn:bc:kinds:a,,b").is_none());
    }

    #[test]
    fn patterns_allow_what_they_name() {
        let kinds = owned(&COMMISSIONING_KINDS);
        for yes in ["disk.wipe", "deploy.image", "diag.cpu.stress", "boot.kexec"] {
            assert!(allows(&kinds, yes), "{yes}");
        }
        for no in [
            "disk.format",
            "deploy",
            "diagx.cpu",
            "node.exec",
            "deploy.*",
            "",
            "Disk.wipe",
        ] {
            assert!(!allows(&kinds, no), "{no}");
        }
    }

    #[test]
    fn invalid_lists() {
        assert!(!is_pattern_list(&[]));
        assert!(!is_pattern_list(&owned(&["a", "a"])));
        assert!(!is_pattern_list(&owned(&["a b"])));
        assert!(!is_pattern_list(&owned(&["*"])));
        assert!(!is_pattern_list(&owned(&["a.*.b"])));
        assert!(!is_pattern_list(&owned(&["a,b"])));
        assert!(!is_pattern_list(&["a".repeat(65)]));
        assert!(!is_pattern_list(
            &(0..20)
                .map(|i| format!("{i}{}", "a".repeat(40)))
                .collect::<Vec<_>>()
        ));
        assert!(is_pattern_list(&owned(&["a.*", "b-c.d"])));
    }
}
