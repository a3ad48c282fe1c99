//! Running the nested cargo and reading what it built.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::Deserialize;

use crate::{BuildError, Kind, PROFILE, TARGET};

/// Variables of the outer build that must not reach the nested one: flags and wrappers meant
/// for the host target (a `-C target-cpu=native`, coverage instrumentation, clippy-driver,
/// sccache), and target or build directories that would point it at the outer, locked
/// directory.
const SCRUBBED: &[&str] = &[
    "CARGO_ENCODED_RUSTFLAGS",
    "RUSTFLAGS",
    "CARGO_BUILD_RUSTFLAGS",
    "RUSTC_WORKSPACE_WRAPPER",
    "RUSTC_WRAPPER",
    "CARGO_BUILD_RUSTC_WRAPPER",
    "CARGO_BUILD_RUSTC_WORKSPACE_WRAPPER",
    "CARGO_BUILD_TARGET",
    "CARGO_BUILD_TARGET_DIR",
];

/// Fails with [`BuildError::TargetMissing`] unless `rustc` has the wasm32-wasip2 standard
/// library (`<sysroot>/lib/rustlib/wasm32-wasip2/lib/libstd-*.rlib`).
pub(crate) fn check_target_installed(rustc: &OsStr) -> Result<(), BuildError> {
    let mut command = Command::new(rustc);
    command.args(["--print", "sysroot"]);
    let sysroot = PathBuf::from(output(command, "rustc --print sysroot")?.trim());
    let libdir = target_libdir(&sysroot);
    if has_std(&libdir) {
        Ok(())
    } else {
        Err(BuildError::TargetMissing(libdir))
    }
}

/// Where a sysroot keeps the wasm32-wasip2 standard library.
fn target_libdir(sysroot: &Path) -> PathBuf {
    sysroot.join("lib/rustlib").join(TARGET).join("lib")
}

/// Whether `libdir` holds a standard library.
fn has_std(libdir: &Path) -> bool {
    std::fs::read_dir(libdir).is_ok_and(|entries| {
        entries.flatten().any(|entry| {
            entry
                .file_name()
                .to_str()
                .is_some_and(|name| name.starts_with("libstd-"))
        })
    })
}

/// A component (or binary) cargo built.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Artifact {
    /// The package, for a requested one; the target's name among cargo's messages.
    pub(crate) package: String,
    /// Its `Cargo.toml`.
    pub(crate) manifest: PathBuf,
    /// The `.wasm` (or executable) in the nested target directory.
    pub(crate) file: PathBuf,
}

/// Runs a nested `cargo build` of each of `packages` and returns what it built of them, in
/// order.
///
/// Each package is a build of its own, so cargo resolves its dependencies' features for it
/// alone, as its author's `cargo build -p` would: within one build cargo unifies features, and
/// a component that leaves out the standard library (`gatehouse_sdk::no_std_runtime!`) would
/// get it back from a neighbour that enables, say, serde's `std`. Packages with the same
/// dependencies share the compiled ones in the target directory.
pub(crate) fn build(
    cargo: &str,
    workspace: &Path,
    target_dir: &Path,
    kind: Kind,
    packages: &[&str],
) -> Result<Vec<Artifact>, BuildError> {
    packages
        .iter()
        .map(|package| build_one(cargo, workspace, target_dir, kind, package))
        .collect()
}

/// Runs the nested `cargo build` of `package` and returns what it built.
fn build_one(
    cargo: &str,
    workspace: &Path,
    target_dir: &Path,
    kind: Kind,
    package: &str,
) -> Result<Artifact, BuildError> {
    let mut command = build_command(cargo, workspace, target_dir, kind, package);
    // Diagnostics are rendered to stderr, which cargo shows when the build script fails; the
    // JSON messages on stdout name the artifacts.
    command.stdout(Stdio::piped()).stderr(Stdio::inherit());
    let described = describe(&command);
    let result = command.output().map_err(|source| BuildError::Spawn {
        command: described.clone(),
        source,
    })?;
    if !result.status.success() {
        return Err(BuildError::Failed {
            command: described,
            status: result.status,
            detail: String::new(),
        });
    }
    let stdout = String::from_utf8_lossy(&result.stdout);
    let artifacts = artifacts(&stdout, kind).map_err(|detail| BuildError::Output {
        command: described,
        detail,
    })?;
    // A lib target is named after its package, `-` read as `_` (every component crate here
    // keeps the default lib name); a binary is named after its package.
    let crate_name = package.replace('-', "_");
    artifacts
        .into_iter()
        .rfind(|artifact| artifact.package.replace('-', "_") == crate_name)
        .map(|artifact| Artifact {
            package: package.to_owned(),
            manifest: artifact.manifest,
            file: artifact.file,
        })
        .ok_or_else(|| BuildError::NoComponent(package.to_owned()))
}

/// The nested `cargo build`, with the outer build's flags, wrappers and directories removed.
fn build_command(
    cargo: &str,
    workspace: &Path,
    target_dir: &Path,
    kind: Kind,
    package: &str,
) -> Command {
    let mut command = Command::new(cargo);
    command.arg("build").arg("--manifest-path").arg(workspace);
    if kind == Kind::Component {
        command.args(["--target", TARGET, "--profile", PROFILE]);
    }
    command.args(["--message-format", "json-render-diagnostics"]);
    command.args(["-p", package]);
    if kind == Kind::Binary {
        command.args(["--bin", package]);
    }
    for name in SCRUBBED {
        command.env_remove(name);
    }
    command
        .env("CARGO_TARGET_DIR", target_dir)
        .env("CARGO_BUILD_BUILD_DIR", target_dir);
    command
}

/// The cdylib `.wasm` outputs (or the executables) among cargo's JSON messages, with the
/// target each is of.
fn artifacts(messages: &str, kind: Kind) -> Result<Vec<Artifact>, String> {
    let mut artifacts = Vec::new();
    for line in messages.lines().filter(|line| line.starts_with('{')) {
        let message: Message =
            serde_json::from_str(line).map_err(|error| format!("{error}: {line}"))?;
        let Message::CompilerArtifact {
            manifest_path,
            target,
            filenames,
            executable,
        } = message
        else {
            continue;
        };
        let file = match kind {
            Kind::Component if target.kind.iter().any(|k| k == "cdylib") => filenames
                .into_iter()
                .find(|file| file.extension().is_some_and(|ext| ext == "wasm")),
            Kind::Binary if target.kind.iter().any(|k| k == "bin") => executable,
            _ => None,
        };
        let Some(file) = file else {
            continue;
        };
        artifacts.push(Artifact {
            package: target.name,
            manifest: manifest_path,
            file,
        });
    }
    Ok(artifacts)
}

/// The messages of `cargo build --message-format json` that matter here.
#[derive(Deserialize)]
#[serde(tag = "reason", rename_all = "kebab-case")]
enum Message {
    /// A unit was compiled (or was fresh).
    CompilerArtifact {
        manifest_path: PathBuf,
        target: Target,
        filenames: Vec<PathBuf>,
        #[serde(default)]
        executable: Option<PathBuf>,
    },
    /// Anything else: diagnostics, build-script output, the final status.
    #[serde(other)]
    Other,
}

/// The target a compiler artifact is of.
#[derive(Deserialize)]
struct Target {
    name: String,
    kind: Vec<String>,
}

/// Runs `command` and returns its stdout, or fails with its stderr.
fn output(mut command: Command, what: &str) -> Result<String, BuildError> {
    let result = command.output().map_err(|source| BuildError::Spawn {
        command: what.to_owned(),
        source,
    })?;
    if !result.status.success() {
        return Err(BuildError::Failed {
            command: what.to_owned(),
            status: result.status,
            detail: format!(": {}", String::from_utf8_lossy(&result.stderr).trim()),
        });
    }
    String::from_utf8(result.stdout).map_err(|_| BuildError::Output {
        command: what.to_owned(),
        detail: "not UTF-8".into(),
    })
}

/// `command` as a shell would show it, for error messages.
fn describe(command: &Command) -> String {
    std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(OsStr::to_string_lossy)
        .collect::<Vec<_>>()
        .join(" ")
}

/// What [`build_command`] sets or removes, for its tests.
#[cfg(test)]
fn env_of(command: &Command, name: &str) -> Option<Option<std::ffi::OsString>> {
    command
        .get_envs()
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.map(OsStr::to_owned))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_build_is_scrubbed_and_isolated() {
        let command = build_command(
            "cargo",
            Path::new("/w/Cargo.toml"),
            Path::new("/w/target/components"),
            Kind::Component,
            "a",
        );
        assert_eq!(
            describe(&command),
            "cargo build --manifest-path /w/Cargo.toml --target wasm32-wasip2 \
             --profile component --message-format json-render-diagnostics -p a"
        );
        let native = build_command(
            "cargo",
            Path::new("/w/Cargo.toml"),
            Path::new("/w/target/components"),
            Kind::Binary,
            "a",
        );
        assert_eq!(
            describe(&native),
            "cargo build --manifest-path /w/Cargo.toml \
             --message-format json-render-diagnostics -p a --bin a"
        );
        for name in SCRUBBED {
            assert_eq!(
                env_of(&command, name),
                Some(None),
                "{name} reaches the nested build"
            );
        }
        for name in ["CARGO_TARGET_DIR", "CARGO_BUILD_BUILD_DIR"] {
            assert_eq!(
                env_of(&command, name),
                Some(Some(std::ffi::OsString::from("/w/target/components")))
            );
        }
    }

    #[test]
    fn reads_cdylib_components_from_messages() {
        let messages = r#"{"reason":"compiler-artifact","package_id":"x","manifest_path":"/w/sdk/Cargo.toml","target":{"kind":["lib"],"crate_types":["lib"],"name":"gatehouse_sdk","src_path":"/w/sdk/src/lib.rs"},"filenames":["/t/deps/libgatehouse_sdk.rlib"],"fresh":true}
{"reason":"compiler-message","message":{}}
{"reason":"compiler-artifact","manifest_path":"/w/a/Cargo.toml","target":{"kind":["cdylib","rlib"],"name":"gatehouse_attestor_join_token"},"filenames":["/t/c/gatehouse_attestor_join_token.wasm","/t/c/libgatehouse_attestor_join_token.rlib"]}
{"reason":"build-finished","success":true}
"#;
        assert_eq!(
            artifacts(messages, Kind::Component).unwrap(),
            [Artifact {
                package: "gatehouse_attestor_join_token".into(),
                manifest: PathBuf::from("/w/a/Cargo.toml"),
                file: PathBuf::from("/t/c/gatehouse_attestor_join_token.wasm"),
            }]
        );
        assert!(artifacts(messages, Kind::Binary).unwrap().is_empty());
        let bin = r#"{"reason":"compiler-artifact","manifest_path":"/w/b/Cargo.toml","target":{"kind":["bin"],"name":"b"},"filenames":["/t/debug/b"],"executable":"/t/debug/b"}"#;
        assert_eq!(
            artifacts(bin, Kind::Binary).unwrap(),
            [Artifact {
                package: "b".into(),
                manifest: PathBuf::from("/w/b/Cargo.toml"),
                file: PathBuf::from("/t/debug/b"),
            }]
        );
    }

    #[test]
    fn finds_the_wasm_standard_library() {
        let dir = std::env::temp_dir().join(format!("gatehouse-bs-{}", std::process::id()));
        let libdir = target_libdir(&dir);
        assert_eq!(libdir, dir.join("lib/rustlib/wasm32-wasip2/lib"));
        assert!(!has_std(&libdir));
        std::fs::create_dir_all(&libdir).unwrap();
        assert!(!has_std(&libdir));
        std::fs::write(libdir.join("libstd-0123.rlib"), b"").unwrap();
        assert!(has_std(&libdir));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_toolchain_building_this_has_the_target() {
        // setup.sh installs it; the host and the tests cannot build without it.
        let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
        check_target_installed(&rustc).unwrap();
    }

    #[test]
    fn refuses_garbled_messages() {
        assert!(artifacts("{not json\n", Kind::Component).is_err());
        assert!(
            artifacts("Compiling x\n", Kind::Component)
                .unwrap()
                .is_empty()
        );
    }
}
