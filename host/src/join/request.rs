//! The request's own fields are untrusted too: the attestor id and the hardware claims are
//! checked (and the claims normalised) before they reach the log, the audit table, an event or
//! an attestor.

use gatehouse_proto::Claims;

/// Most MACs a request may claim.
const MAX_MACS: usize = 64;
/// Longest product UUID accepted.
const MAX_PRODUCT_UUID: usize = 64;
/// What the audit row, the event and the log name a request's attestor by when the id it
/// carried is not a valid id (the id itself is never written anywhere).
pub const INVALID_ATTESTOR: &str = "<invalid>";

/// Whether `id` may name an attestor: what the runtime accepts as an id at load (1 to 64
/// bytes of lowercase letters, digits and single hyphens, starting with a letter). Anything
/// else (a 200,000-byte id, a newline that forges a log line, a NUL that Postgres cannot store)
/// is refused before it is written anywhere.
pub fn valid_attestor_id(id: &str) -> bool {
    crate::runtime::is_code(id)
}

/// Why claims were refused (for the log's detail; the reason is always `bad-claims`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClaimsError {
    /// More than [`MAX_MACS`] MACs.
    #[error("more than {MAX_MACS} MACs")]
    TooManyMacs,
    /// A MAC that is not six hex octets separated by `:` or `-`.
    #[error("MAC #{0} is not six hex octets")]
    Mac(usize),
    /// A product UUID that is empty, longer than 64 bytes, or holds anything but ASCII letters,
    /// digits and hyphens (so no control character and no NUL).
    #[error("the product UUID is not 1 to {MAX_PRODUCT_UUID} letters, digits and hyphens")]
    ProductUuid,
}

/// The claims, checked and normalised: MACs lowercase and colon-separated, the product UUID
/// lowercase. What `expect.mac`, `inventory-by-mac` and the attestors compare with.
pub fn normalise_claims(claims: &Claims) -> Result<Claims, ClaimsError> {
    if claims.macs.len() > MAX_MACS {
        return Err(ClaimsError::TooManyMacs);
    }
    let macs = claims
        .macs
        .iter()
        .enumerate()
        .map(|(i, m)| normalise_mac(m).ok_or(ClaimsError::Mac(i)))
        .collect::<Result<Vec<_>, _>>()?;
    let product_uuid = match &claims.product_uuid {
        None => None,
        Some(u)
            if !u.is_empty()
                && u.len() <= MAX_PRODUCT_UUID
                && u.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') =>
        {
            Some(u.to_ascii_lowercase())
        }
        Some(_) => return Err(ClaimsError::ProductUuid),
    };
    Ok(Claims { macs, product_uuid })
}

/// `aa:bb:cc:dd:ee:ff` from six hex octets separated by `:` or `-` (one separator throughout).
pub fn normalise_mac(mac: &str) -> Option<String> {
    let separator = if mac.contains('-') { '-' } else { ':' };
    let octets: Vec<&str> = mac.split(separator).collect();
    let valid = octets.len() == 6
        && octets
            .iter()
            .all(|o| o.len() == 2 && o.bytes().all(|b| b.is_ascii_hexdigit()));
    valid.then(|| octets.join(":").to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attestor_ids_that_could_forge_or_flood_are_refused() {
        assert!(valid_attestor_id("join-token"));
        assert!(valid_attestor_id("tpm"));
        for bad in [
            "",
            "Join-Token",
            "a\nb",
            "a\0b",
            "-a",
            "a--b",
            "a b",
            "é",
            &"a".repeat(65),
            &"a".repeat(200_000),
        ] {
            assert!(!valid_attestor_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn claims_are_normalised_or_refused() {
        let ok = normalise_claims(&Claims {
            macs: vec!["AA-BB-CC-DD-EE-FF".into(), "02:00:00:00:00:01".into()],
            product_uuid: Some("4C4C4544-0042".into()),
        })
        .unwrap();
        assert_eq!(ok.macs, ["aa:bb:cc:dd:ee:ff", "02:00:00:00:00:01"]);
        assert_eq!(ok.product_uuid.as_deref(), Some("4c4c4544-0042"));
        for mac in [
            "",
            "aa:bb:cc:dd:ee",
            "aa:bb:cc:dd:ee:f\0",
            "aa:bb-cc:dd:ee:ff",
            "aa:bb:cc:dd:ee:ff\n",
            "gg:bb:cc:dd:ee:ff",
        ] {
            let claims = Claims {
                macs: vec![mac.into()],
                product_uuid: None,
            };
            assert_eq!(
                normalise_claims(&claims),
                Err(ClaimsError::Mac(0)),
                "{mac:?}"
            );
        }
        for uuid in ["", "a\0b", "a\nb", "a b", &"a".repeat(65)] {
            let claims = Claims {
                macs: vec![],
                product_uuid: Some(uuid.into()),
            };
            assert_eq!(
                normalise_claims(&claims),
                Err(ClaimsError::ProductUuid),
                "{uuid:?}"
            );
        }
        let many = Claims {
            macs: vec!["02:00:00:00:00:01".into(); 65],
            product_uuid: None,
        };
        assert_eq!(normalise_claims(&many), Err(ClaimsError::TooManyMacs));
    }
}
