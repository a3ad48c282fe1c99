//! Builds every fixture in `tests/fixtures` and the built-in attestors into components (nested
//! cargo builds in the components' workspace, `attestors/Cargo.toml`), the third-party
//! example (`examples/attestor`, its own workspace, and `examples/agent`, its native machine
//! side), and writes `$OUT_DIR/components.rs`: a `pub const <NAME>: &str` path per artifact and
//! the `foreach_fixture!` macro.
//!
//! Fixtures are found by directory (`tests/fixtures/<name>` is package
//! `gatehouse-fixture-<name>`), so a new fixture is built, and must be tested, without an
//! edit here.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use gatehouse_build_support::{Built, build_binaries, build_components};

/// The built-in attestors, beside the fixtures: `(constant, package)`.
const ATTESTORS: &[(&str, &str)] = &[
    ("JOIN_TOKEN", "gatehouse-attestor-join-token"),
    ("PROVISIONED", "gatehouse-attestor-provisioned"),
    ("X509POP", "gatehouse-attestor-x509pop"),
    ("TPM", "gatehouse-attestor-tpm"),
    ("CLOUD_IID", "gatehouse-attestor-cloud-iid"),
];

/// The example attestor's package (`examples/attestor`) and its machine side's
/// (`examples/agent`, a binary of the same name).
const EXAMPLE_ATTESTOR: &str = "ssh-host-key-attestor";
const EXAMPLE_AGENT: &str = "ssh-host-key-agent";

/// A fixture crate.
struct Fixture {
    /// Its directory name (`loop-forever`).
    name: String,
    /// `gatehouse-fixture-<name>`.
    package: String,
}

fn main() {
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let fixtures_dir = manifest_dir.join("../fixtures");
    println!("cargo:rerun-if-changed={}", fixtures_dir.display());
    let fixtures = fixtures(&fixtures_dir);

    let mut packages: Vec<&str> = ATTESTORS.iter().map(|(_, package)| *package).collect();
    packages.extend(fixtures.iter().map(|f| f.package.as_str()));
    let built = build_components(Path::new("../../attestors/Cargo.toml"), &packages);
    // The example is built as a third party builds it: from its own workspace, against the SDK
    // as a path dependency. It shares the nested target directory, so the SDK's dependencies
    // compiled for the components above are reused where their versions agree.
    let example = build_components(
        Path::new("../../examples/attestor/Cargo.toml"),
        &[EXAMPLE_ATTESTOR],
    );
    let agent = build_binaries(
        Path::new("../../examples/agent/Cargo.toml"),
        &[EXAMPLE_AGENT],
    );

    let mut source = generate(&fixtures, &built);
    for (constant, what, artifacts) in [
        (
            "EXAMPLE_ATTESTOR",
            "the example attestor's component (`examples/attestor`)",
            &example,
        ),
        (
            "EXAMPLE_AGENT",
            "the example's machine side, an executable (`examples/agent`)",
            &agent,
        ),
    ] {
        for artifact in artifacts {
            let _ = writeln!(
                source,
                "/// {what}.\npub const {constant}: &str = {:?};",
                artifact.path.to_string_lossy()
            );
        }
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default()).join("components.rs");
    if let Err(error) = std::fs::write(&out, source) {
        panic!("writing {}: {error}", out.display());
    }
}

/// The fixtures in `dir`, sorted by name.
fn fixtures(dir: &Path) -> Vec<Fixture> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) => panic!("reading {}: {error}", dir.display()),
    };
    let mut fixtures: Vec<Fixture> = entries
        .flatten()
        .filter(|entry| entry.path().join("Cargo.toml").is_file())
        .map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let manifest = entry.path().join("Cargo.toml");
            println!("cargo:rerun-if-changed={}", manifest.display());
            Fixture {
                package: format!("gatehouse-fixture-{name}"),
                name,
            }
        })
        .collect();
    fixtures.sort_by(|a, b| a.name.cmp(&b.name));
    fixtures
}

/// The constants and the macro.
fn generate(fixtures: &[Fixture], built: &[Built]) -> String {
    let path_of = |package: &str| match built.iter().find(|b| b.package == package) {
        Some(b) => b.path.to_string_lossy().into_owned(),
        None => panic!("{package} was not built"),
    };
    let mut source = String::new();
    for (constant, package) in ATTESTORS {
        let _ = writeln!(
            source,
            "/// The `{package}` component (a built-in attestor).\n\
             pub const {constant}: &str = {:?};",
            path_of(package)
        );
    }
    for fixture in fixtures {
        let _ = writeln!(
            source,
            "/// The `{}` fixture component (`tests/fixtures/{}`, see its README).\n\
             pub const {}: &str = {:?};",
            fixture.name,
            fixture.name,
            fixture.name.to_uppercase().replace('-', "_"),
            path_of(&fixture.package)
        );
    }
    source.push_str(
        "/// Calls `$mac!(<fixture>)` once for every fixture in `tests/fixtures`, with the\n\
         /// fixture's name in snake_case (`loop_forever`), so a test crate that defines a test\n\
         /// per fixture and checks it with this macro fails to compile when a fixture has none.\n\
         #[macro_export]\n\
         macro_rules! foreach_fixture {\n    ($mac:ident) => {\n",
    );
    for fixture in fixtures {
        let _ = writeln!(source, "        $mac!({});", fixture.name.replace('-', "_"));
    }
    source.push_str("    };\n}\n");
    source
}
