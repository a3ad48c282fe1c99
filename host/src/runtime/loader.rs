//! Loading attestors: built-ins embedded in the binary, then `attestors_dir`, each checked for
//! a compatible WIT version, linked, described, pinned and configured once.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, Linker};
use wasmtime::{Engine, Store};

use super::bindings::AttestorPre;
use super::bindings::types::Info;
use super::cache::ComponentCache;
use super::{Pre, RuntimeConfig, WIT_PACKAGE, WIT_VERSION};
use crate::imports::{CallState, TxBackend};

/// Where an attestor came from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "path")]
pub enum Source {
    /// Embedded in the gatehouse binary.
    BuiltIn,
    /// A file in `attestors_dir`.
    File(PathBuf),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::BuiltIn => f.write_str("built-in"),
            Source::File(path) => write!(f, "file {}", path.display()),
        }
    }
}

/// What `gatehouse attestors list` shows of a loaded attestor.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AttestorSummary {
    /// The id requests name it by.
    pub id: String,
    /// Its own version.
    pub version: String,
    /// The most rounds a join through it takes.
    pub rounds: u8,
    /// Where it came from.
    pub source: Source,
    /// SHA-256 of the component bytes, lowercase hex.
    pub sha256: String,
}

/// Why an attestor was refused at load.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The attestors directory or a file in it could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The path.
        path: PathBuf,
        /// What the filesystem said.
        source: std::io::Error,
    },
    /// The bytes are not a valid component for this engine.
    #[error("{origin}: not a loadable component: {source:#}")]
    Compile {
        /// Which attestor.
        origin: String,
        /// wasmtime's reason.
        source: wasmtime::Error,
    },
    /// The component was built against an incompatible WIT version.
    #[error(
        "{origin}: built against {WIT_PACKAGE}@{found}, but this host implements {WIT_PACKAGE}@{WIT_VERSION}; \
         rebuild it against {WIT_VERSION}"
    )]
    WitVersion {
        /// Which attestor.
        origin: String,
        /// The version the component names.
        found: String,
    },
    /// The component does not export the verifier interface.
    #[error("{origin}: does not export {WIT_PACKAGE}/verifier (is it an attestor?)")]
    NotAnAttestor {
        /// Which attestor.
        origin: String,
    },
    /// The component imports something this host does not provide.
    #[error("{origin}: cannot be linked: {source:#}")]
    Link {
        /// Which attestor.
        origin: String,
        /// wasmtime's reason (names the missing import).
        source: wasmtime::Error,
    },
    /// `describe` trapped or returned an unusable answer.
    #[error("{origin}: describe failed: {reason}")]
    Describe {
        /// Which attestor.
        origin: String,
        /// What went wrong.
        reason: String,
    },
    /// Two files in the attestors directory claim the same id.
    #[error("attestor id {id} is claimed by both {first} and {second}")]
    DuplicateId {
        /// The id.
        id: String,
        /// One file.
        first: String,
        /// The other.
        second: String,
    },
    /// A pinned attestor's bytes have another hash.
    #[error(
        "attestor {id} from {origin} has sha256 {actual}, but the configuration pins {expected}"
    )]
    PinMismatch {
        /// The id.
        id: String,
        /// Where it came from.
        origin: String,
        /// The pinned hash.
        expected: String,
        /// The hash of what was found.
        actual: String,
    },
    /// The configuration names an attestor that is not loaded.
    #[error(
        "the configuration has settings for attestor {0}, which is not loaded (built-ins and attestors_dir)"
    )]
    UnknownAttestor(String),
    /// The attestor rejected its configuration.
    #[error("attestor {id} rejected its configuration: {message}")]
    Configure {
        /// The id.
        id: String,
        /// The attestor's message.
        message: String,
    },
}

/// One loaded attestor, before the runtime indexes it.
pub(super) struct LoadedAttestor<B: TxBackend> {
    pub summary: AttestorSummary,
    pub pre: Pre<B>,
    pub config: String,
}

/// Loads built-ins, then the directory (replacing built-ins by id), then applies settings.
pub(super) async fn load_all<B: TxBackend>(
    engine: &Engine,
    linker: &Linker<CallState<B>>,
    cache: Option<&ComponentCache>,
    config: &RuntimeConfig,
    builtins: &[(&str, &[u8])],
    memory_limit: usize,
) -> Result<Vec<LoadedAttestor<B>>, LoadError> {
    let mut by_id: BTreeMap<String, (AttestorSummary, Pre<B>)> = BTreeMap::new();
    for (name, wasm) in builtins {
        let (summary, pre) = load_one(
            engine,
            linker,
            cache,
            &format!("built-in {name}"),
            Source::BuiltIn,
            wasm,
            memory_limit,
        )
        .await?;
        by_id.insert(summary.id.clone(), (summary, pre));
    }

    if let Some(dir) = &config.attestors_dir {
        let mut from_dir: BTreeMap<String, String> = BTreeMap::new();
        for path in wasm_files(dir)? {
            let wasm = std::fs::read(&path).map_err(|source| LoadError::Read {
                path: path.clone(),
                source,
            })?;
            let origin = path.display().to_string();
            let (summary, pre) = load_one(
                engine,
                linker,
                cache,
                &origin,
                Source::File(path.clone()),
                &wasm,
                memory_limit,
            )
            .await?;
            if let Some(first) = from_dir.insert(summary.id.clone(), origin.clone()) {
                return Err(LoadError::DuplicateId {
                    id: summary.id,
                    first,
                    second: origin,
                });
            }
            if by_id.contains_key(&summary.id) {
                tracing::info!(attestor = %summary.id, file = %origin, "attestor from attestors_dir replaces the built-in");
            }
            by_id.insert(summary.id.clone(), (summary, pre));
        }
    }

    if let Some(id) = config.attestors.keys().find(|id| !by_id.contains_key(*id)) {
        return Err(LoadError::UnknownAttestor(id.clone()));
    }

    let mut loaded = Vec::with_capacity(by_id.len());
    for (id, (summary, pre)) in by_id {
        let settings = config.attestors.get(&id);
        if let Some(expected) = settings.and_then(|s| s.sha256.as_deref())
            && !expected.eq_ignore_ascii_case(&summary.sha256)
        {
            return Err(LoadError::PinMismatch {
                id,
                origin: summary.source.to_string(),
                expected: expected.to_owned(),
                actual: summary.sha256,
            });
        }
        let config_json = match settings {
            Some(s) if !s.config.is_null() => s.config.to_string(),
            _ => "{}".to_owned(),
        };
        configure(&pre, &id, &config_json, memory_limit).await?;
        tracing::info!(attestor = %id, version = %summary.version, source = %summary.source, sha256 = %summary.sha256, "attestor loaded");
        loaded.push(LoadedAttestor {
            summary,
            pre,
            config: config_json,
        });
    }
    Ok(loaded)
}

/// The `.wasm` files of a directory, sorted so loading is deterministic.
fn wasm_files(dir: &Path) -> Result<Vec<PathBuf>, LoadError> {
    let read = |source| LoadError::Read {
        path: dir.to_owned(),
        source,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(read)? {
        let path = entry.map_err(read)?.path();
        if path.extension().is_some_and(|e| e == "wasm") && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

async fn load_one<B: TxBackend>(
    engine: &Engine,
    linker: &Linker<CallState<B>>,
    cache: Option<&ComponentCache>,
    origin: &str,
    source: Source,
    wasm: &[u8],
    memory_limit: usize,
) -> Result<(AttestorSummary, Pre<B>), LoadError> {
    let sha256: [u8; 32] = Sha256::digest(wasm).into();
    let compile = |e| LoadError::Compile {
        origin: origin.to_owned(),
        source: e,
    };
    let component = match cache {
        Some(cache) => cache
            .load_or_compile(engine, wasm, &sha256, origin)
            .map_err(compile)?,
        None => Component::new(engine, wasm).map_err(compile)?,
    };
    check_wit_version(engine, &component, origin)?;
    let pre = linker
        .instantiate_pre(&component)
        .and_then(AttestorPre::new)
        .map_err(|source| LoadError::Link {
            origin: origin.to_owned(),
            source,
        })?;
    let info = describe(&pre, memory_limit)
        .await
        .map_err(|reason| LoadError::Describe {
            origin: origin.to_owned(),
            reason,
        })?;
    let summary = AttestorSummary {
        id: info.id,
        version: info.version,
        rounds: info.rounds,
        source,
        sha256: hex::encode(sha256),
    };
    Ok((summary, pre))
}

/// Refuses a component whose `better-compute:attestor` exports or imports name a version
/// incompatible with [`WIT_VERSION`] (same major; for 0.x, same minor), and one that does not
/// export the verifier at all.
fn check_wit_version(
    engine: &Engine,
    component: &Component,
    origin: &str,
) -> Result<(), LoadError> {
    let ty = component.component_type();
    let prefix = format!("{WIT_PACKAGE}/");
    let mut exports_verifier = false;
    let names = ty
        .exports(engine)
        .map(|(name, _)| (true, name.to_owned()))
        .chain(ty.imports(engine).map(|(name, _)| (false, name.to_owned())));
    for (is_export, name) in names {
        let Some(rest) = name.strip_prefix(&prefix) else {
            continue;
        };
        let (interface, version) = rest.split_once('@').unwrap_or((rest, ""));
        if !compatible(version) {
            return Err(LoadError::WitVersion {
                origin: origin.to_owned(),
                found: version.to_owned(),
            });
        }
        exports_verifier |= is_export && interface == "verifier";
    }
    if !exports_verifier {
        return Err(LoadError::NotAnAttestor {
            origin: origin.to_owned(),
        });
    }
    Ok(())
}

/// Semver compatibility with [`WIT_VERSION`]: the same major, and for 0.x the same minor.
fn compatible(version: &str) -> bool {
    fn parts(v: &str) -> Option<(u64, u64)> {
        let mut it = v.split(['.', '-', '+']);
        Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
    }
    match (parts(version), parts(WIT_VERSION)) {
        (Some((major, minor)), Some((our_major, our_minor))) => {
            major == our_major && (major != 0 || minor == our_minor)
        }
        _ => false,
    }
}

/// Calls `describe` and checks its answer.
async fn describe<B: TxBackend>(pre: &Pre<B>, memory_limit: usize) -> Result<Info, String> {
    let mut store = loading_store(pre.engine(), memory_limit);
    let instance = pre
        .instantiate_async(&mut store)
        .await
        .map_err(|e| format!("{e:#}"))?;
    let info = instance
        .better_compute_attestor_verifier()
        .call_describe(&mut store)
        .await
        .map_err(|e| format!("{e:#}"))?;
    if !super::call::is_code(&info.id) {
        return Err(format!(
            "id {:?} is not lowercase letters, digits and hyphens (at most 64)",
            info.id
        ));
    }
    if info.version.is_empty() || info.version.len() > 64 {
        return Err("version must be 1 to 64 bytes".into());
    }
    if !(1..=8).contains(&info.rounds) {
        return Err(format!("rounds must be 1 to 8, not {}", info.rounds));
    }
    Ok(info)
}

/// Calls `configure` once; an error refuses the attestor.
async fn configure<B: TxBackend>(
    pre: &Pre<B>,
    id: &str,
    config: &str,
    memory_limit: usize,
) -> Result<(), LoadError> {
    let err = |message| LoadError::Configure {
        id: id.to_owned(),
        message,
    };
    let mut store = loading_store(pre.engine(), memory_limit);
    let instance = pre
        .instantiate_async(&mut store)
        .await
        .map_err(|e| err(format!("{e:#}")))?;
    instance
        .better_compute_attestor_verifier()
        .call_configure(&mut store, config)
        .await
        .map_err(|e| err(format!("trapped: {e:#}")))?
        .map_err(err)
}

/// A store for load-time calls: no transaction, a memory cap, and a generous deadline (load
/// happens once, before serving).
fn loading_store<B: TxBackend>(engine: &Engine, memory_limit: usize) -> Store<CallState<B>> {
    let mut store = Store::new(engine, CallState::new(None, memory_limit));
    store.limiter(|s| &mut s.limiter);
    // 5 s of epochs: a component that spins in describe fails to load instead of hanging it.
    store.set_epoch_deadline((5_000 / super::engine::EPOCH_TICK.as_millis()) as u64);
    store
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_compatibility() {
        assert!(compatible("0.2.0"));
        assert!(compatible("0.2.7"));
        // 0.2.0 added the `used` join-request state: a 0.1 component's enum no longer matches.
        assert!(!compatible("0.1.0"));
        assert!(!compatible("0.3.0"));
        assert!(!compatible("1.0.0"));
        assert!(!compatible(""));
        assert!(!compatible("x.y"));
    }

    #[test]
    fn wit_version_error_names_file_and_both_versions() {
        let e = LoadError::WitVersion {
            origin: "/a/b.wasm".into(),
            found: "1.0.0".into(),
        };
        let text = e.to_string();
        assert!(
            text.contains("/a/b.wasm")
                && text.contains("@1.0.0")
                && text.contains(&format!("@{WIT_VERSION}")),
            "{text}"
        );
    }
}
