//! Unpadded base64url, the encoding of byte strings inside JSON evidence (the same alphabet as
//! Gatehouse's wire format).

use alloc::string::String;
use alloc::vec::Vec;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

pub use base64::DecodeError;

/// Encodes bytes as unpadded base64url.
pub fn encode(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Decodes unpadded base64url. Padding, the standard alphabet and whitespace are errors, so
/// every byte string has exactly one encoding.
pub fn decode(text: &str) -> Result<Vec<u8>, DecodeError> {
    URL_SAFE_NO_PAD.decode(text)
}

#[cfg(test)]
mod tests {
    use super::{decode, encode};

    #[test]
    fn round_trips_without_padding() {
        let bytes = [0xfb, 0xff, 0x00, 0x10];
        assert_eq!(encode(&bytes), "-_8AEA");
        assert_eq!(decode("-_8AEA").unwrap(), bytes);
    }

    #[test]
    fn rejects_other_encodings() {
        assert!(decode("-_8AEA==").is_err());
        assert!(decode("+/8AEA").is_err());
        assert!(decode("-_8A EA").is_err());
    }
}
