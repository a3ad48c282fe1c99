//! Lowercase hexadecimal, the form ledger subjects, key/value keys and binding values usually
//! take.

use alloc::string::String;

/// Encodes bytes as lowercase hex.
///
/// ```
/// assert_eq!(gatehouse_sdk::hex::encode(&[0x0f, 0xa0]), "0fa0");
/// ```
pub fn encode(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    bytes
        .iter()
        .flat_map(|b| [DIGITS[usize::from(b >> 4)], DIGITS[usize::from(b & 15)]])
        .map(char::from)
        .collect()
}
