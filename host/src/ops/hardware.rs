//! Hardware identities as the admin surface stores them: what joins compare against is
//! normalised when it is written (lowercase, MACs with colons), and refused if malformed.

use super::OpsError;

/// A UUID in its 8-4-4-4-12 hex form, lowercased (as agents claim SMBIOS product UUIDs).
pub fn product_uuid(s: &str) -> Result<String, OpsError> {
    let lens: Vec<usize> = s.split('-').map(str::len).collect();
    if lens == [8, 4, 4, 4, 12] && s.bytes().all(|b| b == b'-' || b.is_ascii_hexdigit()) {
        Ok(s.to_ascii_lowercase())
    } else {
        Err(OpsError::invalid(format!(
            "productUuid {s:?} is not a UUID"
        )))
    }
}

/// Six hex octets separated by `:` or `-`, lowercased with colons (as agents claim MACs).
pub fn mac(s: &str) -> Result<String, OpsError> {
    let octets: Vec<&str> = s.split([':', '-']).collect();
    if octets.len() == 6
        && octets
            .iter()
            .all(|o| o.len() == 2 && o.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        Ok(octets.join(":").to_ascii_lowercase())
    } else {
        Err(OpsError::invalid(format!("{s:?} is not a MAC address")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_and_macs_are_normalised_or_refused() {
        assert_eq!(
            product_uuid("4C4C4544-0042-3510-8052-B4C04F384D32").unwrap(),
            "4c4c4544-0042-3510-8052-b4c04f384d32"
        );
        for bad in [
            "",
            "4c4c4544",
            "4c4c4544-0042-3510-8052-b4c04f384d3g",
            "{4c4c4544-0042-3510-8052-b4c04f384d32}",
        ] {
            assert!(product_uuid(bad).is_err(), "{bad}");
        }
        assert_eq!(mac("AA-BB-CC-00-11-22").unwrap(), "aa:bb:cc:00:11:22");
        for bad in ["", "aa:bb:cc:dd:ee", "aa:bb:cc:dd:ee:fg", "aabb.ccdd.eeff"] {
            assert!(mac(bad).is_err(), "{bad}");
        }
    }
}
