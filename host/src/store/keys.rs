//! The keys new rows are made with.

/// A fresh id: `prefix` and 26 characters of lowercase base32, 10 of the host's wall-clock
/// time in ms (50 bits) then 16 random (80 bits), in an alphabet in ASCII order so that ids
/// sort by the time they were made.
///
/// Why the time first: ids are primary keys (and `node_id` columns in several indexes); a key
/// that grows with time is appended at the right edge of its index, where a random one
/// dirties a different page per row, which at 100,000 nodes made SQLite's batch commits
/// write several times the pages. An id is a name, not a secret (tokens have their own);
/// uniqueness rests on the random bits, and a clock stepped back only costs locality.
pub fn new_id(prefix: &str) -> String {
    const ALPHABET: &[u8; 32] = b"234567abcdefghijklmnopqrstuvwxyz";
    const TIME_CHARS: u32 = 10;
    let ms = u128::try_from(crate::wall_clock::now_ms()).unwrap_or(0);
    let random: [u8; 16] = rand::random();
    let mut id = String::with_capacity(prefix.len() + 26);
    id.push_str(prefix);
    id.extend((0..TIME_CHARS).rev().map(|i| {
        let digit = (ms >> (5 * i)) & 31;
        ALPHABET[usize::try_from(digit).unwrap_or(0)] as char
    }));
    id.extend(random.iter().map(|b| ALPHABET[usize::from(b & 31)] as char));
    id
}

#[cfg(test)]
mod tests {
    use super::new_id;

    #[test]
    fn ids_are_base32_after_their_prefix_and_sort_by_time_made() {
        let first = new_id("node_");
        std::thread::sleep(std::time::Duration::from_millis(2));
        let later: Vec<String> = (0..64).map(|_| new_id("node_")).collect();
        for id in &later {
            let rest = id.strip_prefix("node_").unwrap();
            assert_eq!(rest.len(), 26);
            assert!(
                rest.bytes()
                    .all(|b| b"234567abcdefghijklmnopqrstuvwxyz".contains(&b))
            );
            assert!(crate::ops::id::is_id(id));
            assert!(id > &first, "{id} after {first}");
        }
        let mut distinct = later.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), later.len());
    }
}
