//! The process's log filter, replaceable while it runs (`log_level`, applied again on SIGHUP).
//!
//! The binary installs the subscriber ([`init`]); a library user (the tests) that installs its
//! own has no replaceable filter, and [`set_filter`] then says so instead of doing nothing
//! silently.

use std::sync::OnceLock;

use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Registry, reload};

/// The environment variable whose filter wins over `log_level`.
pub const ENV: &str = "GATEHOUSE_LOG";

static FILTER: OnceLock<reload::Handle<EnvFilter, Registry>> = OnceLock::new();

/// Why a filter was not applied.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// The text is not a valid filter.
    #[error("not a log filter: {0}")]
    Invalid(String),
    /// `GATEHOUSE_LOG` set the filter; the configuration does not override it.
    #[error("{ENV} is set; it wins over log_level")]
    FromEnvironment,
    /// No replaceable filter was installed (not the `gatehouse` binary).
    #[error("this process's log filter cannot be replaced")]
    NotReloadable,
}

/// Installs the subscriber: logs to stderr as text (ANSI colours only on a terminal) or as
/// JSON lines, filtered by `GATEHOUSE_LOG` or `info` until the configuration's `log_level`
/// replaces it.
pub fn init(format: crate::cli::LogFormat) {
    use std::io::IsTerminal as _;
    let filter = EnvFilter::try_from_env(ENV).unwrap_or_else(|_| EnvFilter::new("info"));
    let (filter, handle) = reload::Layer::new(filter);
    let _ = FILTER.set(handle);
    let registry = tracing_subscriber::registry().with(filter);
    match format {
        crate::cli::LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_current_span(false)
                    .with_writer(std::io::stderr),
            )
            .init(),
        crate::cli::LogFormat::Text => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(std::io::stderr().is_terminal())
                    .with_writer(std::io::stderr),
            )
            .init(),
    }
}

/// Replaces the filter with `spec` (unless `GATEHOUSE_LOG` set one).
pub fn set_filter(spec: &str) -> Result<(), LogError> {
    if std::env::var_os(ENV).is_some_and(|v| !v.is_empty()) {
        return Err(LogError::FromEnvironment);
    }
    let filter = EnvFilter::try_new(spec).map_err(|e| LogError::Invalid(e.to_string()))?;
    let handle = FILTER.get().ok_or(LogError::NotReloadable)?;
    handle
        .reload(filter)
        .map_err(|e| LogError::Invalid(e.to_string()))
}
