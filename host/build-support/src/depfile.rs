//! Reading the Makefile-style `.d` files cargo writes beside its outputs.

use std::path::{Path, PathBuf};

/// The prerequisites of every rule in a `.d` file (`target: dep dep ...`), in order, without
/// duplicates. Spaces inside a path are escaped as `\ `.
pub(crate) fn dependencies(text: &str) -> Vec<PathBuf> {
    let mut deps: Vec<PathBuf> = Vec::new();
    for line in text.lines() {
        let Some((_, prerequisites)) = split_rule(line) else {
            continue;
        };
        for path in words(prerequisites) {
            let path = PathBuf::from(path);
            if !deps.contains(&path) {
                deps.push(path);
            }
        }
    }
    deps
}

/// The `Cargo.toml` of the package each of `deps` under `root` belongs to (the nearest one
/// above it, not above `root`), without duplicates.
pub(crate) fn manifests(deps: &[PathBuf], root: &Path) -> Vec<PathBuf> {
    let mut manifests: Vec<PathBuf> = Vec::new();
    for dep in deps.iter().filter(|dep| dep.starts_with(root)) {
        let found = dep
            .ancestors()
            .skip(1)
            .take_while(|dir| dir.starts_with(root))
            .map(|dir| dir.join("Cargo.toml"))
            .find(|manifest| manifest.is_file());
        if let Some(manifest) = found
            && !manifests.contains(&manifest)
        {
            manifests.push(manifest);
        }
    }
    manifests
}

/// Splits `target: prerequisites` at the first unescaped `": "`.
fn split_rule(line: &str) -> Option<(&str, &str)> {
    let mut escaped = false;
    for (i, c) in line.char_indices() {
        match c {
            '\\' if !escaped => escaped = true,
            ':' if !escaped => {
                let rest = &line[i + 1..];
                if rest.is_empty() || rest.starts_with([' ', '\t']) {
                    return Some((&line[..i], rest));
                }
            }
            _ => escaped = false,
        }
    }
    None
}

/// Whitespace-separated words, with `\ ` (and `\\`) unescaped.
fn words(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(next @ (' ' | '\\')) => word.push(next),
                Some(next) => {
                    word.push('\\');
                    word.push(next);
                }
                None => word.push('\\'),
            },
            c if c.is_whitespace() => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

#[cfg(test)]
mod tests {
    use super::dependencies;
    use std::path::PathBuf;

    #[test]
    fn reads_every_rule() {
        let text = "/t/a.wasm: /src/lib.rs /src/x.rs\n\n/t/a.d: /src/lib.rs /wit/w.wit\n";
        assert_eq!(
            dependencies(text),
            ["/src/lib.rs", "/src/x.rs", "/wit/w.wit"].map(PathBuf::from)
        );
    }

    #[test]
    fn unescapes_spaces() {
        let text = "/my\\ target/a.wasm: /my\\ src/lib.rs /b.rs\n";
        assert_eq!(
            dependencies(text),
            ["/my src/lib.rs", "/b.rs"].map(PathBuf::from)
        );
    }

    #[test]
    fn finds_the_manifests_of_path_dependencies() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let deps = [
            root.join("src/lib.rs"),
            root.join("src/cargo.rs"),
            PathBuf::from("/elsewhere/src/lib.rs"),
        ];
        assert_eq!(super::manifests(&deps, root), [root.join("Cargo.toml")]);
    }

    #[test]
    fn ignores_lines_without_a_rule() {
        assert!(dependencies("").is_empty());
        assert!(dependencies("no rule here\n").is_empty());
        assert!(dependencies("/t/a.wasm:\n").is_empty());
    }
}
