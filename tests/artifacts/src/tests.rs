//! Every built file is a valid component of the attestor world, as wasmtime 48's parser sees
//! it, and imports nothing the host does not provide.

use wasmparser::{Encoding, Parser, Payload, Validator, WasmFeatures};

/// A component's top-level import and export names, and the host functions its core modules
/// import (`interface#function`).
struct Surface {
    imports: Vec<String>,
    exports: Vec<String>,
    functions: Vec<String>,
    /// The core modules' linear memories' initial sizes, in 64 KiB pages.
    memory_pages: Vec<u64>,
}

/// Validates the component at `path` and returns its surface.
fn inspect(path: &str) -> Surface {
    let bytes = std::fs::read(path).unwrap();
    let mut parser = Parser::new(0).parse_all(&bytes);
    let first = parser.next().unwrap().unwrap();
    assert!(
        matches!(
            first,
            Payload::Version {
                encoding: Encoding::Component,
                ..
            }
        ),
        "{path} is not a component"
    );
    Validator::new_with_features(WasmFeatures::default())
        .validate_all(&bytes)
        .unwrap_or_else(|error| panic!("{path} does not validate: {error}"));

    let mut surface = Surface {
        imports: Vec::new(),
        exports: Vec::new(),
        functions: Vec::new(),
        memory_pages: Vec::new(),
    };
    // Nested modules and components are parsed inline; only depth 0 is the component's own.
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(&bytes) {
        match payload.unwrap() {
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentImportSection(section) if depth == 0 => {
                for import in section {
                    surface.imports.push(import.unwrap().name.name.to_owned());
                }
            }
            Payload::ComponentExportSection(section) if depth == 0 => {
                for export in section {
                    surface.exports.push(export.unwrap().name.name.to_owned());
                }
            }
            // The core modules' imports of interface functions (the adapter modules' own are
            // numbered, from the empty module name).
            Payload::ImportSection(section) if depth == 1 => {
                for import in section.into_imports() {
                    let import = import.unwrap();
                    if import.module.contains(':') {
                        surface
                            .functions
                            .push(format!("{}#{}", import.module, import.name));
                    }
                }
            }
            Payload::MemorySection(section) if depth == 1 => {
                for memory in section {
                    surface.memory_pages.push(memory.unwrap().initial);
                }
            }
            _ => {}
        }
    }
    surface
}

/// Asserts `path` is an attestor component of world version `version` that imports only the
/// world's interfaces but `tpm` (types, transaction, crypto: the SDK links the host's TPM
/// functions only into attestors that set `Attestor::TPM`, so the others load on a host that
/// offers no TPM) and the `wasi:io` and `wasi:cli` interfaces Rust's standard library uses for
/// stdio and exit (no clocks, random, filesystem or sockets).
#[track_caller]
fn assert_attestor(path: &str, version: &str) -> Surface {
    let surface = inspect(path);
    assert_eq!(
        surface.exports,
        [format!("better-compute:attestor/verifier@{version}")],
        "{path}"
    );
    for import in &surface.imports {
        let allowed = import.starts_with("wasi:io/")
            || import.starts_with("wasi:cli/")
            || *import == format!("better-compute:attestor/transaction@{version}")
            || *import == format!("better-compute:attestor/crypto@{version}")
            || *import == format!("better-compute:attestor/types@{version}")
            || *import == format!("better-compute:attestor/prepared@{version}");
        assert!(allowed, "{path} imports {import}");
    }
    surface
}

/// The interface an attestor that prepares its configuration imports (WIT 0.2.1).
const PREPARED: &str = "better-compute:attestor/prepared@0.2.1";

/// Asserts that the attestor `surface` describes is built lean: without the standard library
/// (`gatehouse_sdk::no_std_runtime!`), so it imports nothing from WASI; importing only the host
/// functions its `Attestor::CALLS` names (`functions`, besides the transaction's drop); and
/// with a 64 KiB stack (`attestors/small-stack.rs`), so its memory starts at two pages, not 17,
/// and the host's reset of a reused slot walks that much. Each is a cost on every join.
fn assert_lean(name: &str, surface: &Surface, functions: &[&str]) {
    let wasi: Vec<_> = surface
        .imports
        .iter()
        .filter(|import| import.starts_with("wasi:"))
        .collect();
    assert!(wasi.is_empty(), "{name} imports {wasi:?}");
    let mut imported = surface.functions.clone();
    imported.sort();
    let mut expected: Vec<_> = functions
        .iter()
        .map(|f| format!("better-compute:attestor/{f}"))
        .chain(["better-compute:attestor/transaction@0.2.1#[resource-drop]tx".to_owned()])
        .collect();
    expected.sort();
    assert_eq!(imported, expected, "{name}");
    assert_eq!(surface.memory_pages, [2], "{name}");
}

#[test]
fn join_token() {
    let surface = assert_attestor(crate::JOIN_TOKEN, "0.2.1");
    // It does not set `Attestor::PREPARED`: it still loads on a 0.2.0 host.
    assert!(!surface.imports.contains(&PREPARED.to_owned()));
    // The token checks' calls (`Calls::TOKEN`).
    assert_lean(
        "join-token",
        &surface,
        &[
            "crypto@0.2.1#sha256",
            "transaction@0.2.1#[method]tx.consume-token",
            "transaction@0.2.1#[method]tx.lock-token",
            "transaction@0.2.1#[method]tx.now",
        ],
    );
}

#[test]
fn provisioned() {
    let surface = assert_attestor(crate::PROVISIONED, "0.2.1");
    assert!(!surface.imports.contains(&PREPARED.to_owned()));
    // The token checks' calls and the resolver's.
    assert_lean(
        "provisioned",
        &surface,
        &[
            "crypto@0.2.1#sha256",
            "transaction@0.2.1#[method]tx.consume-token",
            "transaction@0.2.1#[method]tx.lock-token",
            "transaction@0.2.1#[method]tx.newest-inventory",
            "transaction@0.2.1#[method]tx.now",
            "transaction@0.2.1#[method]tx.token-workflow",
        ],
    );
}

/// cloud-iid keeps its parsed configuration (`Attestor::PREPARED`), so it imports `prepared`.
#[test]
fn cloud_iid() {
    let surface = assert_attestor(crate::CLOUD_IID, "0.2.1");
    assert!(surface.imports.contains(&PREPARED.to_owned()));
}

#[test]
fn x509pop() {
    let surface = assert_attestor(crate::X509POP, "0.2.1");
    for import in [
        "better-compute:attestor/crypto@0.2.1",
        "better-compute:attestor/transaction@0.2.1",
    ] {
        assert!(surface.imports.contains(&import.to_owned()), "{import}");
    }
}

/// The tpm attestor calls the `tpm` interface (the host links it natively) and is the one
/// component that imports `wasi:random` (the MakeCredential secret); nothing else beyond the
/// others.
#[test]
fn tpm() {
    let path = crate::TPM;
    let surface = inspect(path);
    assert_eq!(
        surface.exports,
        ["better-compute:attestor/verifier@0.2.1".to_owned()],
        "{path}"
    );
    for import in &surface.imports {
        let allowed = import.starts_with("wasi:io/")
            || import.starts_with("wasi:cli/")
            || import.starts_with("wasi:random/random@")
            || [
                "better-compute:attestor/transaction@0.2.1",
                "better-compute:attestor/crypto@0.2.1",
                "better-compute:attestor/types@0.2.1",
                "better-compute:attestor/tpm@0.2.1",
            ]
            .contains(&import.as_str());
        assert!(allowed, "{path} imports {import}");
    }
    for import in [
        "better-compute:attestor/tpm@0.2.1",
        "better-compute:attestor/crypto@0.2.1",
        "better-compute:attestor/transaction@0.2.1",
    ] {
        assert!(surface.imports.contains(&import.to_owned()), "{import}");
    }
}

/// The third-party example is an attestor like the others: no `tpm`, no WASI beyond stdio.
#[test]
fn example_attestor() {
    let surface = assert_attestor(crate::EXAMPLE_ATTESTOR, "0.2.1");
    for import in [
        "better-compute:attestor/crypto@0.2.1",
        "better-compute:attestor/transaction@0.2.1",
    ] {
        assert!(surface.imports.contains(&import.to_owned()), "{import}");
    }
}

/// The example's machine side is an executable.
#[test]
fn example_agent() {
    let metadata = std::fs::metadata(crate::EXAMPLE_AGENT).unwrap();
    assert!(metadata.is_file() && metadata.len() > 0);
}

/// The SDK carries the WIT it is built from (`sdk/attestor/wit`, so `cargo package` ships it);
/// the repository's `wit/` is the canonical copy the host binds. They must not drift: after
/// editing `wit/`, run `cp wit/*.wit sdk/attestor/wit/`.
#[test]
fn the_sdk_carries_the_hosts_wit() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let names = |dir: &str| {
        let mut names: Vec<String> = std::fs::read_dir(format!("{root}/{dir}"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    assert_eq!(names("wit"), names("sdk/attestor/wit"));
    for name in names("wit") {
        let canonical = std::fs::read(format!("{root}/wit/{name}")).unwrap();
        let carried = std::fs::read(format!("{root}/sdk/attestor/wit/{name}")).unwrap();
        assert!(
            canonical == carried,
            "sdk/attestor/wit/{name} differs from wit/{name}: run `cp wit/*.wit sdk/attestor/wit/`"
        );
    }
}

macro_rules! fixture_is_a_component {
    ($fixture:ident) => {
        #[test]
        fn $fixture() {
            let name = stringify!($fixture).replace('_', "-");
            let path = match name.as_str() {
                "admit-by-token-id" => crate::ADMIT_BY_TOKEN_ID,
                "alloc-forever" => crate::ALLOC_FOREVER,
                "approval" => crate::APPROVAL,
                "challenge" => crate::CHALLENGE,
                "downgrade-reclaim" => crate::DOWNGRADE_RECLAIM,
                "foreign-binding-kind" => crate::FOREIGN_BINDING_KIND,
                "join-token-replacement" => crate::JOIN_TOKEN_REPLACEMENT,
                "kv-flood" => crate::KV_FLOOD,
                "loop-forever" => crate::LOOP_FOREVER,
                "malformed-result" => crate::MALFORMED_RESULT,
                "other-tenant" => crate::OTHER_TENANT,
                "panic" => crate::PANIC,
                "prepared" => crate::PREPARED,
                "reclaim-any-node" => crate::RECLAIM_ANY_NODE,
                "remember" => crate::REMEMBER,
                "replay-approval" => crate::REPLAY_APPROVAL,
                "spend-then-defer" => crate::SPEND_THEN_DEFER,
                "verify-mistyped" => crate::VERIFY_MISTYPED,
                "wit-major" => crate::WIT_MAJOR,
                other => panic!("no constant for fixture {other}"),
            };
            let version = if name == "wit-major" {
                "1.0.0"
            } else {
                "0.2.1"
            };
            assert_attestor(path, version);
        }
    };
}

foreach_fixture!(fixture_is_a_component);
