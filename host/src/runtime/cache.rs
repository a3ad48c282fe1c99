//! The on-disk cache of compiled components.
//!
//! `Component::deserialize` runs whatever machine code the bytes hold, so this cache trusts a
//! file only if this host could have written it: the directory must belong to this process's
//! user and be writable by no one else, the file name carries the SHA-256 of the component's
//! source and the engine's compatibility hash, and a sidecar holds the SHA-256 of the compiled
//! bytes (a truncated or corrupted file is recompiled, never loaded).

use std::fs;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// Why the cache directory cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CacheError {
    /// The directory could not be created or inspected.
    #[error("compiled-component cache {path}: {source}")]
    Io {
        /// The cache directory.
        path: PathBuf,
        /// What the filesystem said.
        source: std::io::Error,
    },
    /// The directory is writable by another user, so its files cannot be trusted.
    #[error(
        "compiled-component cache {path} is not private to this user (mode {mode:o}, owner {owner}); \
         make it owned by this user with mode 0700"
    )]
    NotPrivate {
        /// The cache directory.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
        /// Its owner's uid.
        owner: u32,
    },
}

/// Compiled components keyed by source hash and engine.
#[derive(Clone)]
pub(super) struct ComponentCache {
    dir: PathBuf,
    engine_key: String,
}

impl ComponentCache {
    /// Opens (creating with mode 0700) a cache directory and checks it is private.
    pub(super) fn open(dir: &Path, engine: &Engine) -> Result<Self, CacheError> {
        let io = |source| CacheError::Io {
            path: dir.to_owned(),
            source,
        };
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io)?;
        let meta = fs::metadata(dir).map_err(io)?;
        // A file this process creates is owned by its effective uid: compare with that rather
        // than calling into libc.
        let probe = dir.join(format!(".owner-probe-{}", std::process::id()));
        let probe_meta = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&probe)
            .and_then(|f| f.metadata())
            .map_err(io)?;
        let _ = fs::remove_file(&probe);
        let mode = meta.permissions().mode() & 0o7777;
        if meta.uid() != probe_meta.uid() || mode & 0o022 != 0 {
            return Err(CacheError::NotPrivate {
                path: dir.to_owned(),
                mode,
                owner: meta.uid(),
            });
        }
        let mut hasher = std::hash::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        Ok(Self {
            dir: dir.to_owned(),
            engine_key: format!("{:016x}", hasher.finish()),
        })
    }

    /// The compiled form of `wasm`, from the cache when a trusted entry exists, else compiled
    /// now and stored. A cache that cannot be written is logged and skipped: compiling again
    /// next start is slower, not wrong.
    pub(super) fn load_or_compile(
        &self,
        engine: &Engine,
        wasm: &[u8],
        source_sha256: &[u8; 32],
        origin: &str,
    ) -> wasmtime::Result<Component> {
        let stem = format!("{}-{}", hex::encode(source_sha256), self.engine_key);
        let compiled_path = self.dir.join(format!("{stem}.cwasm"));
        let sum_path = self.dir.join(format!("{stem}.sha256"));
        if let Some(component) = self.load(engine, &compiled_path, &sum_path) {
            return Ok(component);
        }
        // On a first start (or a new binary) every attestor is compiled: seconds each on a
        // small machine, which an operator watching the log should not mistake for a hang.
        tracing::info!(
            component = origin,
            sha256 = %hex::encode(source_sha256),
            bytes = wasm.len(),
            cache = %self.dir.display(),
            "compiling an attestor component (not in the cache yet; later starts load it)"
        );
        let started = std::time::Instant::now();
        let component = Component::new(engine, wasm)?;
        tracing::info!(
            component = origin,
            ms = started.elapsed().as_millis() as u64,
            "compiled"
        );
        match component.serialize() {
            Ok(bytes) => {
                let sum = hex::encode(Sha256::digest(&bytes));
                if let Err(e) = write_private(&compiled_path, &bytes)
                    .and_then(|()| write_private(&sum_path, sum.as_bytes()))
                {
                    tracing::warn!(path = %compiled_path.display(), error = %e, "could not cache a compiled component");
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not serialize a compiled component"),
        }
        Ok(component)
    }

    fn load(&self, engine: &Engine, compiled_path: &Path, sum_path: &Path) -> Option<Component> {
        let bytes = fs::read(compiled_path).ok()?;
        let recorded = fs::read_to_string(sum_path).ok()?;
        if hex::encode(Sha256::digest(&bytes)) != recorded.trim() {
            tracing::warn!(path = %compiled_path.display(), "cached component does not match its checksum; recompiling");
            return None;
        }
        // SAFETY: the bytes are a file this host wrote with `Component::serialize` for this
        // engine: the directory is private to this user (checked in `open`), the name binds the
        // source hash and the engine's compatibility hash, and the content matches the checksum
        // recorded when it was written. wasmtime additionally checks its header and version.
        #[allow(unsafe_code)]
        let loaded = unsafe { Component::deserialize(engine, &bytes) };
        match loaded {
            Ok(component) => Some(component),
            Err(e) => {
                tracing::warn!(path = %compiled_path.display(), error = %e, "cached component does not load; recompiling");
                None
            }
        }
    }
}

/// Writes a file atomically (temporary file, then rename) with mode 0600.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_a_directory_others_can_write() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("cache");
        fs::create_dir(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
        let engine = Engine::default();
        let err = ComponentCache::open(&dir, &engine)
            .err()
            .expect("must refuse");
        assert!(matches!(err, CacheError::NotPrivate { .. }), "{err}");
        assert!(err.to_string().contains("mode 777"), "{err}");
    }

    #[test]
    fn creates_a_private_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/b");
        ComponentCache::open(&dir, &Engine::default()).unwrap();
        assert_eq!(
            fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
            0o700
        );
    }
}
