//! Unpadded base64url, the encoding of every byte string on the wire, as a serde helper.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Deserializer, Serializer};

/// Encodes bytes as unpadded base64url.
pub fn encode(bytes: impl AsRef<[u8]>) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Decodes unpadded base64url; padding or other alphabets are errors.
pub fn decode(text: &str) -> Result<Vec<u8>, base64::DecodeError> {
    URL_SAFE_NO_PAD.decode(text)
}

/// `#[serde(with = "gatehouse_proto::b64")]` for `Vec<u8>` fields.
pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&encode(bytes))
}

/// See [`serialize`].
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    let text = String::deserialize(d)?;
    decode(&text).map_err(serde::de::Error::custom)
}

/// `#[serde(with = "gatehouse_proto::b64::option")]` for `Option<Vec<u8>>` fields.
pub mod option {
    use super::*;

    /// Serializes `None` as null.
    pub fn serialize<S: Serializer>(bytes: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match bytes {
            Some(b) => s.serialize_str(&encode(b)),
            None => s.serialize_none(),
        }
    }

    /// Accepts null or a base64url string.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        match Option::<String>::deserialize(d)? {
            Some(text) => decode(&text).map(Some).map_err(serde::de::Error::custom),
            None => Ok(None),
        }
    }
}

/// `#[serde(with = "gatehouse_proto::b64::list")]` for `Vec<Vec<u8>>` fields.
pub mod list {
    use super::*;
    use serde::ser::SerializeSeq;

    /// Serializes each element as a base64url string.
    pub fn serialize<S: Serializer>(items: &[Vec<u8>], s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(items.len()))?;
        for item in items {
            seq.serialize_element(&encode(item))?;
        }
        seq.end()
    }

    /// Accepts a list of base64url strings.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Vec<u8>>, D::Error> {
        Vec::<String>::deserialize(d)?
            .iter()
            .map(|t| decode(t).map_err(serde::de::Error::custom))
            .collect()
    }
}
