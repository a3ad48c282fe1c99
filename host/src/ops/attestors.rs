//! The attestors a host runs, as the admin API lists them.

use super::types::{Attestor, AttestorSource};
use crate::runtime::{AttestorSummary, Source};

/// An attestor summary as the API shows it.
pub fn view(a: AttestorSummary) -> Attestor {
    Attestor {
        id: a.id,
        version: a.version,
        rounds: a.rounds,
        source: match a.source {
            Source::BuiltIn => AttestorSource::BuiltIn,
            Source::File(path) => AttestorSource::File(path.display().to_string()),
        },
        sha256: a.sha256,
        shadow_of: a.shadow_of,
    }
}
