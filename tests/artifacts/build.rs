//! Builds every fixture in `tests/fixtures` and the built-in attestors into components, and
//! writes `$OUT_DIR/components.rs`: a `pub const <NAME>: &str` path per component and the
//! `foreach_fixture!` macro.
//!
//! Fixtures are found by directory (`tests/fixtures/<name>` is package
//! `gatehouse-fixture-<name>`), so a new fixture is built, and must be tested, without an
//! edit here.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use gatehouse_build_support::{Built, build_components, build_components_in};

/// The built-in attestors, beside the fixtures: `(constant, package)`.
const ATTESTORS: &[(&str, &str)] = &[
    ("JOIN_TOKEN", "gatehouse-attestor-join-token"),
    ("X509POP", "gatehouse-attestor-x509pop"),
    ("TPM", "gatehouse-attestor-tpm"),
];

/// The crate a fixture depends on to embed join-token's decision in a component of its own.
const JOIN_TOKEN_CRATE: &str = "gatehouse-attestor-join-token";

/// A fixture crate.
struct Fixture {
    /// Its directory name (`loop-forever`).
    name: String,
    /// `gatehouse-fixture-<name>`.
    package: String,
    /// Whether it depends on the join-token crate (without its `component` feature).
    embeds_join_token: bool,
}

fn main() {
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let fixtures_dir = manifest_dir.join("../fixtures");
    println!("cargo:rerun-if-changed={}", fixtures_dir.display());
    let fixtures = fixtures(&fixtures_dir);

    // join-token built with its `component` feature and without it must not share a target
    // directory (a cdylib's file name has no hash, so one overwrites the other): fixtures that
    // embed the crate get a directory of their own.
    let mut shared: Vec<&str> = ATTESTORS.iter().map(|(_, package)| *package).collect();
    shared.extend(
        fixtures
            .iter()
            .filter(|f| !f.embeds_join_token)
            .map(|f| f.package.as_str()),
    );
    let embedding: Vec<&str> = fixtures
        .iter()
        .filter(|f| f.embeds_join_token)
        .map(|f| f.package.as_str())
        .collect();
    let mut built = build_components(&shared);
    if !embedding.is_empty() {
        built.extend(build_components_in("components-embedding", &embedding));
    }

    let source = generate(&fixtures, &built);
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
                embeds_join_token: depends_on(&manifest, JOIN_TOKEN_CRATE),
                name,
            }
        })
        .collect();
    fixtures.sort_by(|a, b| a.name.cmp(&b.name));
    fixtures
}

/// Whether the manifest at `path` lists `dependency` in `[dependencies]`.
fn depends_on(path: &Path, dependency: &str) -> bool {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) => panic!("reading {}: {error}", path.display()),
    };
    let manifest: toml::Table = match text.parse() {
        Ok(manifest) => manifest,
        Err(error) => panic!("parsing {}: {error}", path.display()),
    };
    manifest
        .get("dependencies")
        .and_then(toml::Value::as_table)
        .is_some_and(|deps| deps.contains_key(dependency))
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
