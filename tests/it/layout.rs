//! Every test file of the workspace is compiled into a test binary. Each package builds its
//! integration tests as one binary from `tests/it/main.rs` (and a few binaries of their own),
//! with `autotests = false`: a file under a `tests/` directory that no `[[test]]` names and no
//! `mod` declares would never be compiled, and its tests never run, without a word from cargo.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The workspace's package directories, from the root manifest's `members` (`dir/*` expanded).
fn packages(root: &Path) -> Vec<PathBuf> {
    let manifest: toml::Table = std::fs::read_to_string(root.join("Cargo.toml"))
        .unwrap()
        .parse()
        .unwrap();
    let mut packages = Vec::new();
    for member in manifest["workspace"]["members"].as_array().unwrap() {
        let member = member.as_str().unwrap();
        match member.strip_suffix("/*") {
            Some(parent) => {
                for entry in std::fs::read_dir(root.join(parent)).unwrap() {
                    packages.push(entry.unwrap().path());
                }
            }
            None => packages.push(root.join(member)),
        }
    }
    packages.retain(|dir| dir.join("Cargo.toml").is_file());
    packages
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, files: &mut BTreeSet<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.insert(path.canonicalize().unwrap());
        }
    }
}

/// The files `file` declares as modules (`mod name;`, with or without `#[path = "…"]`), by the
/// Reference's rules: a crate root or a `mod.rs` owns its directory, another file `a.rs` owns
/// `a/`, and a `#[path]` is relative to the declaring file's directory.
fn modules(file: &Path, crate_root: bool) -> Vec<(PathBuf, bool)> {
    let dir = file.parent().unwrap();
    let owned = if crate_root || file.file_name().unwrap() == "mod.rs" {
        dir.to_path_buf()
    } else {
        dir.join(file.file_stem().unwrap())
    };
    let mut found = Vec::new();
    let mut path_attribute = None;
    for line in std::fs::read_to_string(file).unwrap().lines().map(str::trim) {
        if let Some(path) = line
            .strip_prefix("#[path = \"")
            .and_then(|p| p.strip_suffix("\"]"))
        {
            path_attribute = Some(dir.join(path));
        } else if let Some(name) = line.strip_prefix("mod ").and_then(|n| n.strip_suffix(';')) {
            let path = path_attribute.take().unwrap_or_else(|| {
                let flat = owned.join(format!("{name}.rs"));
                if flat.is_file() {
                    flat
                } else {
                    owned.join(name).join("mod.rs")
                }
            });
            found.push((path, false));
        } else if !line.starts_with("#[") && !line.starts_with("//") {
            path_attribute = None;
        }
    }
    found
}

#[test]
fn every_file_under_a_tests_directory_belongs_to_a_test_binary() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .canonicalize()
        .unwrap();
    let root = root.as_path();
    let mut skipped = Vec::new();
    for package in packages(root) {
        let manifest: toml::Table = std::fs::read_to_string(package.join("Cargo.toml"))
            .unwrap()
            .parse()
            .unwrap();
        let targets = manifest
            .get("test")
            .and_then(|t| t.as_array())
            .cloned()
            .unwrap_or_default();
        // This package's test files sit at its root; the others' under `tests/`.
        let dir = if package.join("tests").is_dir() {
            package.join("tests")
        } else if !targets.is_empty() {
            package.clone()
        } else {
            continue;
        };
        assert_eq!(
            manifest["package"].get("autotests").and_then(|a| a.as_bool()),
            Some(false),
            "{}: test targets are listed with [[test]], with `autotests = false`",
            package.display()
        );
        let mut files = BTreeSet::new();
        rust_files(&dir, &mut files);
        let mut pending: Vec<(PathBuf, bool)> = targets
            .iter()
            .map(|t| {
                (
                    package.join(t["path"].as_str().expect("a [[test]] with its path")),
                    true,
                )
            })
            .collect();
        while let Some((file, crate_root)) = pending.pop() {
            let file = file.canonicalize().unwrap_or(file);
            if files.remove(&file) || crate_root {
                pending.extend(modules(&file, crate_root));
            }
        }
        skipped.extend(
            files
                .iter()
                .map(|f| f.strip_prefix(root).unwrap().display().to_string()),
        );
    }
    assert!(
        skipped.is_empty(),
        "never compiled (declare each with `mod NAME;` in its package's tests/it/main.rs): {skipped:#?}"
    );
}
