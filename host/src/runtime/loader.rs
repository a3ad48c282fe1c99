//! Loading attestors: built-ins embedded in the binary, then `attestors_dir`, each checked for
//! a compatible WIT version, linked, described, pinned and configured once.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, Linker};
use wasmtime::{Engine, Store};

use super::bindings::types::Info;
use super::bindings::{Attestor, AttestorPre};
use super::cache::ComponentCache;
use super::{Pre, RuntimeConfig, WIT_PACKAGE, WIT_VERSION};
use crate::imports::{CallState, Prepared, TxBackend};

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
    /// For a shadow (`[attestors.<id>] shadow_of`): the live attestor it runs beside. A join
    /// request cannot name a shadow.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shadow_of: Option<String>,
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
    /// A shadow names an attestor that is not loaded, or is itself a shadow.
    #[error("shadow attestor {id} runs beside {of}, which is not a loaded live attestor")]
    ShadowOfUnknown {
        /// The shadow.
        id: String,
        /// What it names.
        of: String,
    },
    /// The attestor rejected its configuration.
    #[error("attestor {id} rejected its configuration: {message}")]
    Configure {
        /// The id.
        id: String,
        /// The attestor's message.
        message: String,
    },
}

impl LoadError {
    /// A short stable code for events and scripts (`attestor.load-failed`'s reason).
    pub fn code(&self) -> &'static str {
        match self {
            LoadError::Read { .. } => "unreadable",
            LoadError::Compile { .. } => "not-a-component",
            LoadError::WitVersion { .. } => "wit-version",
            LoadError::NotAnAttestor { .. } => "not-an-attestor",
            LoadError::Link { .. } => "unlinkable",
            LoadError::Describe { .. } => "describe",
            LoadError::DuplicateId { .. } => "duplicate-id",
            LoadError::PinMismatch { .. } => "sha256-pin",
            LoadError::UnknownAttestor(_) => "unknown-attestor",
            LoadError::ShadowOfUnknown { .. } => "shadow-of-unknown",
            LoadError::Configure { .. } => "configure",
        }
    }
}

/// One loaded attestor, before the runtime indexes it.
pub(super) struct LoadedAttestor<B: TxBackend> {
    pub summary: AttestorSummary,
    pub pre: Pre<B>,
    pub config: Configured,
}

/// An attestor's configuration as its `configure` accepted it. Cheap to clone: every call
/// takes one.
#[derive(Debug, Clone)]
pub(super) struct Configured {
    /// The JSON text `configure` and every `verify` are given.
    pub text: Arc<str>,
    /// What `configure` kept of it (`prepared.keep`), handed to every `verify`.
    pub prepared: Option<Arc<[u8]>>,
}

impl Configured {
    /// Whether `other` is the same configuration (what was kept of it follows from the text).
    pub fn same(&self, other: &Configured) -> bool {
        self.text == other.text
    }
}

// Not derived: a derive would ask for `B: Clone`, which a backend need not be.
impl<B: TxBackend> Clone for LoadedAttestor<B> {
    fn clone(&self) -> Self {
        Self {
            summary: self.summary.clone(),
            pre: self.pre.clone(),
            config: self.config.clone(),
        }
    }
}

/// A component that could not be (re)loaded, and what kept serving instead.
#[derive(Debug)]
pub struct LoadFailure {
    /// The attestor's id, when it got as far as `describe` (or the configuration named it).
    pub id: Option<String>,
    /// The file, for a component from `attestors_dir` (or a shadow's `file`).
    pub path: Option<PathBuf>,
    /// SHA-256 of the bytes that failed, when they could be read.
    pub sha256: Option<String>,
    /// Why (boxed: a failure travels in `Result`s, and most loads succeed).
    pub error: Box<LoadError>,
}

/// What one (re)load found: the attestors that serve now and why others did not load.
pub(super) struct Found<B: TxBackend> {
    pub attestors: Vec<LoadedAttestor<B>>,
    pub failures: Vec<LoadFailure>,
}

/// What loading needs from the runtime.
pub(super) struct LoadContext<'a, B: TxBackend> {
    pub engine: &'a Engine,
    pub linker: &'a Linker<CallState<B>>,
    pub cache: Option<&'a ComponentCache>,
    pub memory_limit: usize,
}

/// A component as [`load_one`] made it: described, not yet configured.
type Described<B> = (AttestorSummary, Pre<B>);

impl<B: TxBackend> LoadContext<'_, B> {
    /// Compiles, links and describes `wasm`, unless `previous` holds the same bytes from the
    /// same source (then its compiled form is reused: nothing is compiled or run again).
    async fn load(
        &self,
        origin: &str,
        source: Source,
        wasm: &[u8],
        previous: &[LoadedAttestor<B>],
    ) -> Result<Described<B>, LoadFailure> {
        let sha256 = hex::encode(Sha256::digest(wasm));
        if let Some(p) = previous
            .iter()
            .find(|p| p.summary.source == source && p.summary.sha256 == sha256)
        {
            let summary = AttestorSummary {
                shadow_of: None,
                ..p.summary.clone()
            };
            return Ok((summary, p.pre.clone()));
        }
        let path = match &source {
            Source::File(path) => Some(path.clone()),
            Source::BuiltIn => None,
        };
        load_one(
            self.engine,
            self.linker,
            self.cache,
            origin,
            source,
            wasm,
            self.memory_limit,
        )
        .await
        .map_err(|error| LoadFailure {
            id: None,
            path,
            sha256: Some(sha256),
            error: Box::new(error),
        })
    }
}

/// Loads built-ins, then the directory (replacing built-ins by id), then shadows' files, then
/// applies settings (pins, configuration, `shadow_of`).
///
/// Nothing here stops at the first failure: a component that does not load is reported in
/// [`Found::failures`] and, on a reload, what `previous` served from the same file (or under
/// the same id, for a pin or configuration that is refused) keeps serving. The first start
/// refuses to start on any failure ([`super::Runtime::load`]).
pub(super) async fn load_all<B: TxBackend>(
    cx: &LoadContext<'_, B>,
    config: &RuntimeConfig,
    builtins: &[(&str, &[u8])],
    previous: &[LoadedAttestor<B>],
) -> Found<B> {
    let mut failures = Vec::new();
    let mut by_id: BTreeMap<String, Described<B>> = BTreeMap::new();
    for (name, wasm) in builtins {
        match cx
            .load(&format!("built-in {name}"), Source::BuiltIn, wasm, previous)
            .await
        {
            Ok((summary, pre)) => {
                by_id.insert(summary.id.clone(), (summary, pre));
            }
            Err(failure) => failures.push(failure),
        }
    }

    let shadow_files: std::collections::BTreeSet<&Path> = config
        .attestors
        .values()
        .filter_map(|s| s.file.as_deref())
        .collect();
    // What a broken file leaves serving: what it served before (a shadow's own file is
    // handled with the shadows).
    let keep_previous = |by_id: &mut BTreeMap<String, Described<B>>, path: &Path| {
        if shadow_files.contains(path) {
            return;
        }
        for p in previous
            .iter()
            .filter(|p| p.summary.source == Source::File(path.to_owned()))
        {
            let summary = AttestorSummary {
                shadow_of: None,
                ..p.summary.clone()
            };
            by_id.insert(summary.id.clone(), (summary, p.pre.clone()));
        }
    };
    if let Some(dir) = &config.attestors_dir {
        match wasm_files(dir) {
            Err(error) => {
                for p in previous {
                    if let Source::File(path) = &p.summary.source {
                        keep_previous(&mut by_id, path);
                    }
                }
                failures.push(LoadFailure {
                    id: None,
                    path: Some(dir.clone()),
                    sha256: None,
                    error: Box::new(error),
                });
            }
            Ok(files) => {
                let mut from_dir: BTreeMap<String, String> = BTreeMap::new();
                for path in files {
                    if shadow_files.contains(path.as_path()) {
                        continue;
                    }
                    let origin = path.display().to_string();
                    let loaded = match read_file(&path) {
                        Ok(wasm) => {
                            cx.load(&origin, Source::File(path.clone()), &wasm, previous)
                                .await
                        }
                        Err(failure) => Err(failure),
                    };
                    let (summary, pre) = match loaded {
                        Ok(loaded) => loaded,
                        Err(failure) => {
                            failures.push(failure);
                            keep_previous(&mut by_id, &path);
                            continue;
                        }
                    };
                    if let Some(first) = from_dir.insert(summary.id.clone(), origin.clone()) {
                        failures.push(LoadFailure {
                            id: Some(summary.id.clone()),
                            path: Some(path.clone()),
                            sha256: Some(summary.sha256.clone()),
                            error: Box::new(LoadError::DuplicateId {
                                id: summary.id,
                                first,
                                second: origin,
                            }),
                        });
                        continue;
                    }
                    if by_id.contains_key(&summary.id) {
                        tracing::info!(attestor = %summary.id, file = %origin, "attestor from attestors_dir replaces the built-in");
                    }
                    by_id.insert(summary.id.clone(), (summary, pre));
                }
            }
        }
    }

    // Shadows: from their own file (under the id the configuration gives them, whatever they
    // describe themselves as: a new version of `join-token` describes itself `join-token`), or
    // an attestor loaded above under the configured id.
    let mut shadows: BTreeMap<String, (Described<B>, String)> = BTreeMap::new();
    for (id, settings) in &config.attestors {
        let Some(of) = &settings.shadow_of else {
            continue;
        };
        let described = match &settings.file {
            Some(path) => {
                let origin = path.display().to_string();
                let loaded = match read_file(path) {
                    Ok(wasm) => {
                        cx.load(&origin, Source::File(path.clone()), &wasm, previous)
                            .await
                    }
                    Err(failure) => Err(failure),
                };
                match loaded {
                    Ok((summary, pre)) => Some((
                        AttestorSummary {
                            id: id.clone(),
                            ..summary
                        },
                        pre,
                    )),
                    Err(failure) => {
                        failures.push(LoadFailure {
                            id: Some(id.clone()),
                            ..failure
                        });
                        previous
                            .iter()
                            .find(|p| &p.summary.id == id)
                            .map(|p| (p.summary.clone(), p.pre.clone()))
                    }
                }
            }
            None => by_id.remove(id),
        };
        if let Some(described) = described {
            shadows.insert(id.clone(), (described, of.clone()));
        }
    }

    let reported: Vec<String> = failures.iter().filter_map(|f| f.id.clone()).collect();
    for id in config.attestors.keys() {
        if !by_id.contains_key(id) && !shadows.contains_key(id) && !reported.contains(id) {
            failures.push(LoadFailure {
                id: Some(id.clone()),
                path: None,
                sha256: None,
                error: Box::new(LoadError::UnknownAttestor(id.clone())),
            });
        }
    }

    let candidates = by_id
        .into_iter()
        .map(|(id, described)| (id, described, None))
        .chain(
            shadows
                .into_iter()
                .map(|(id, (described, of))| (id, described, Some(of))),
        )
        .collect::<Vec<_>>();

    let mut loaded = Vec::with_capacity(candidates.len());
    for (id, (summary, pre), shadow_of) in candidates {
        let summary = AttestorSummary {
            shadow_of,
            ..summary
        };
        match settle(cx, config, &id, summary, pre, previous).await {
            Ok(attestor) => loaded.push(attestor),
            Err(failure) => {
                failures.push(failure);
                if let Some(p) = previous.iter().find(|p| p.summary.id == id) {
                    loaded.push(p.clone());
                }
            }
        }
    }
    // A shadow runs beside a live attestor, never beside another shadow or nothing.
    let live: Vec<String> = loaded
        .iter()
        .filter(|l| l.summary.shadow_of.is_none())
        .map(|l| l.summary.id.clone())
        .collect();
    loaded.retain(|l| match &l.summary.shadow_of {
        Some(of) if !live.contains(of) => {
            failures.push(LoadFailure {
                id: Some(l.summary.id.clone()),
                path: None,
                sha256: Some(l.summary.sha256.clone()),
                error: Box::new(LoadError::ShadowOfUnknown {
                    id: l.summary.id.clone(),
                    of: of.clone(),
                }),
            });
            false
        }
        _ => true,
    });
    Found {
        attestors: loaded,
        failures,
    }
}

/// Checks an attestor's pin and configures it (unless `previous` already serves the same
/// bytes from the same source with the same configuration).
async fn settle<B: TxBackend>(
    cx: &LoadContext<'_, B>,
    config: &RuntimeConfig,
    id: &str,
    summary: AttestorSummary,
    pre: Pre<B>,
    previous: &[LoadedAttestor<B>],
) -> Result<LoadedAttestor<B>, LoadFailure> {
    let settings = config.attestors.get(id);
    let fail = |summary: &AttestorSummary, error| LoadFailure {
        id: Some(id.to_owned()),
        path: match &summary.source {
            Source::File(path) => Some(path.clone()),
            Source::BuiltIn => None,
        },
        sha256: Some(summary.sha256.clone()),
        error: Box::new(error),
    };
    if let Some(expected) = settings.and_then(|s| s.sha256.as_deref())
        && !expected.eq_ignore_ascii_case(&summary.sha256)
    {
        let error = LoadError::PinMismatch {
            id: id.to_owned(),
            origin: summary.source.to_string(),
            expected: expected.to_owned(),
            actual: summary.sha256.clone(),
        };
        return Err(fail(&summary, error));
    }
    let config_json = match settings {
        Some(s) if !s.config.is_null() => s.config.to_string(),
        _ => "{}".to_owned(),
    };
    let unchanged = previous.iter().find(|p| {
        p.summary.id == id
            && p.summary.sha256 == summary.sha256
            && p.summary.source == summary.source
            && *p.config.text == config_json
    });
    let config = match unchanged {
        Some(previous) => previous.config.clone(),
        None => {
            let prepared = match configure(&pre, id, &config_json, cx.memory_limit).await {
                Ok(prepared) => prepared,
                Err(error) => return Err(fail(&summary, error)),
            };
            tracing::info!(attestor = %id, version = %summary.version, source = %summary.source, sha256 = %summary.sha256, shadow_of = summary.shadow_of.as_deref().unwrap_or(""), prepared_bytes = prepared.as_ref().map_or(0, |p| p.len()), "attestor loaded");
            Configured {
                text: config_json.into(),
                prepared,
            }
        }
    };
    Ok(LoadedAttestor {
        summary,
        pre,
        config,
    })
}

fn read_file(path: &Path) -> Result<Vec<u8>, LoadFailure> {
    std::fs::read(path).map_err(|source| LoadFailure {
        id: None,
        path: Some(path.to_owned()),
        sha256: None,
        error: Box::new(LoadError::Read {
            path: path.to_owned(),
            source,
        }),
    })
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

pub(super) async fn load_one<B: TxBackend>(
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
    // Compiling takes the cores for up to seconds: off the async workers, so a reload beside
    // serving joins does not stall the ones whose task shares a worker with it.
    let (engine_owned, bytes, cache_owned, origin_owned) = (
        engine.clone(),
        wasm.to_vec(),
        cache.cloned(),
        origin.to_owned(),
    );
    let component = tokio::task::spawn_blocking(move || match &cache_owned {
        Some(cache) => cache.load_or_compile(&engine_owned, &bytes, &sha256, &origin_owned),
        None => Component::new(&engine_owned, &bytes),
    })
    .await
    .map_err(|e| {
        compile(wasmtime::Error::msg(format!(
            "the compiling task ended: {e}"
        )))
    })?
    .map_err(compile)?;
    check_wit_version(engine, &component, origin)?;
    let pre = linker
        .instantiate_pre(&component)
        .and_then(AttestorPre::new)
        .map_err(|source| LoadError::Link {
            origin: origin.to_owned(),
            source,
        })?;
    let (info, pre) = describe(pre, memory_limit)
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
        shadow_of: None,
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

/// Calls `describe` and checks its answer, and checks `verify`'s signature in the same instance.
async fn describe<B: TxBackend>(
    bindings: AttestorPre<CallState<B>>,
    memory_limit: usize,
) -> Result<(Info, Pre<B>), String> {
    let mut store = loading_store(bindings.engine(), memory_limit);
    let instance = bindings
        .instance_pre()
        .instantiate_async(&mut store)
        .await
        .map_err(|e| format!("{e:#}"))?;
    let info = Attestor::new(&mut store, &instance)
        .map_err(|e| format!("{e:#}"))?
        .better_compute_attestor_verifier()
        .call_describe(&mut store)
        .await
        .map_err(|e| format!("{e:#}"))?;
    let pre = Pre::check(bindings, &mut store, &instance).map_err(|e| format!("{e:#}"))?;
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
    Ok((info, pre))
}

/// Calls `configure` once; an error refuses the attestor. Returns what it kept
/// (`prepared.keep`).
async fn configure<B: TxBackend>(
    pre: &Pre<B>,
    id: &str,
    config: &str,
    memory_limit: usize,
) -> Result<Option<Arc<[u8]>>, LoadError> {
    let err = |message| LoadError::Configure {
        id: id.to_owned(),
        message,
    };
    let mut store = loading_store(pre.engine(), memory_limit);
    store.data_mut().prepared = Prepared::Configuring(None);
    let instance = pre
        .bindings()
        .instantiate_async(&mut store)
        .await
        .map_err(|e| err(format!("{e:#}")))?;
    instance
        .better_compute_attestor_verifier()
        .call_configure(&mut store, config)
        .await
        .map_err(|e| err(format!("trapped: {e:#}")))?
        .map_err(err)?;
    Ok(store.into_data().prepared.into_kept())
}

/// A store for load-time calls: no transaction, a memory cap, and a generous deadline (a load
/// happens at start, and on a reload beside the joins, which it does not hold up: the rounds
/// running keep the version they started with).
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
