//! Parsing an attestor's configuration.

use alloc::format;
use alloc::string::String;
use serde::de::DeserializeOwned;

/// Parses the configuration text the host passes to [`crate::Attestor::configure`] (the JSON
/// form of the attestor's `[attestors.<id>]` table, `{}` when there is none) into `T`. The
/// error is a message for the operator; derive `T` with `#[serde(deny_unknown_fields)]` so a
/// misspelt key refuses to load rather than being ignored. Anything but a JSON object is an
/// error, whatever `T` would accept.
pub fn parse<T: DeserializeOwned>(config: &str) -> Result<T, String> {
    let table: serde_json::Map<String, serde_json::Value> = serde_json::from_str(config)
        .map_err(|error| format!("invalid configuration: not a JSON object: {error}"))?;
    T::deserialize(serde_json::Value::Object(table))
        .map_err(|error| format!("invalid configuration: {error}"))
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[derive(serde::Deserialize, Debug, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Config {
        #[serde(default)]
        grace_ms: u64,
    }

    #[test]
    fn parses_and_defaults() {
        assert_eq!(parse::<Config>("{}").unwrap(), Config { grace_ms: 0 });
        assert_eq!(
            parse::<Config>(r#"{"grace_ms":5}"#).unwrap(),
            Config { grace_ms: 5 }
        );
    }

    #[test]
    fn names_what_is_wrong() {
        assert_eq!(
            parse::<Config>(r#"{"grace":5}"#).unwrap_err(),
            "invalid configuration: unknown field `grace`, expected `grace_ms`"
        );
        for text in ["", "[", "[]", "null", "5"] {
            let error = parse::<Config>(text).unwrap_err();
            assert!(
                error.starts_with("invalid configuration: not a JSON object: "),
                "{text:?}: {error}"
            );
        }
    }
}
