//! The one id type of the admin surface: tenants, pools, nodes, tokens, workflows, join
//! requests, sites, owners, attestors and admin names are all 1 to 128 of `[A-Za-z0-9._-]`.
//!
//! A value of [`Id`] was checked when it was made (parsed from a request body, a path, a
//! command-line argument), so code holding one never checks again, and an id can never carry a
//! `/`, `?`, control character or NUL into a URL path, a SQL text column or a terminal.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

/// Longest id, in bytes.
pub const MAX_ID_LEN: usize = 128;

/// A checked id: 1 to [`MAX_ID_LEN`] ASCII letters, digits, `-`, `_` or `.`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
pub struct Id(String);

/// A text that is not an [`Id`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("is not an id (1 to 128 of A-Z a-z 0-9 . _ -)")]
pub struct InvalidId;

impl Id {
    /// The tenant every host starts with.
    pub fn root() -> Self {
        Self("root".to_owned())
    }

    /// The name of the bootstrap admin identity ([`super::Actor::BOOTSTRAP`]).
    pub(super) fn bootstrap_actor() -> Self {
        Self(super::Actor::BOOTSTRAP.to_owned())
    }

    /// Checks `text`.
    pub fn new(text: impl Into<String>) -> Result<Self, InvalidId> {
        let text = text.into();
        if is_id(&text) {
            Ok(Self(text))
        } else {
            Err(InvalidId)
        }
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The id as an owned `String`.
    pub fn into_string(self) -> String {
        self.0
    }
}

/// Whether `v` is an id (see [`Id`]).
pub fn is_id(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= MAX_ID_LEN
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for Id {
    type Err = InvalidId;

    fn from_str(s: &str) -> Result<Self, InvalidId> {
        Self::new(s)
    }
}

impl AsRef<str> for Id {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for Id {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl PartialEq<str> for Id {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for Id {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl From<Id> for String {
    fn from(id: Id) -> String {
        id.0
    }
}

impl<'de> serde::Deserialize<'de> for Id {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Id::new(text).map_err(serde::de::Error::custom)
    }
}

impl utoipa::PartialSchema for Id {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .min_length(Some(1))
            .max_length(Some(MAX_ID_LEN))
            .pattern(Some("^[A-Za-z0-9._-]+$"))
            .into()
    }
}

impl utoipa::ToSchema for Id {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Id")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_checked_once_at_the_edge() {
        for good in ["root", "node_01", "a.b-c", &"x".repeat(128)] {
            assert_eq!(Id::new(good).unwrap().as_str(), good);
        }
        for bad in [
            "",
            "a/b",
            "../x",
            "a b",
            "a?b",
            "a#",
            "a\0b",
            "a\nb",
            "é",
            &"x".repeat(129),
        ] {
            assert_eq!(Id::new(bad), Err(InvalidId), "{bad:?}");
        }
        assert_eq!(
            InvalidId.to_string(),
            "is not an id (1 to 128 of A-Z a-z 0-9 . _ -)"
        );
    }

    #[test]
    fn ids_deserialize_only_when_valid() {
        let id: Id = serde_json::from_str("\"gpu-1\"").unwrap();
        assert_eq!(id, "gpu-1");
        assert_eq!(serde_json::to_string(&id).unwrap(), "\"gpu-1\"");
        let err = serde_json::from_str::<Id>("\"a/b\"").unwrap_err();
        assert!(err.to_string().contains("is not an id"), "{err}");
    }
}
