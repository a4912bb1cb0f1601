//! The gateway's import rule, executable: CONTRIBUTING.md's table "The gateway's rooms" lists
//! the rooms of `crates/mrtr-gateway/src` from the top down, and a room may import only rooms
//! below its own row. This reads every source file with `syn`, resolves each `crate::…` and
//! `super::…` path (in `use` items, in code, and in macro calls) to the room it names, and fails
//! on every import that runs up the table, or from a file in no room of it.
//!
//! Also: `route/` takes from `upstream/` only what `upstream/mod.rs` hands it, never a door
//! (`http`, `session`, `stdio`), so that the router names no transport.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

/// The doors of `upstream/`: transport code that `route/` must not name.
const DOORS: &[&str] = &["http", "session", "stdio"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The rooms of CONTRIBUTING.md's table, top row first; a row may name several rooms (the
/// ground floor's files), which then share a rank.
fn table(contributing: &str) -> BTreeMap<String, usize> {
    let section = contributing
        .split("\n## ")
        .find(|s| s.starts_with("The gateway's rooms"))
        .expect("CONTRIBUTING.md has a section \"The gateway's rooms\"");
    let mut ranks = BTreeMap::new();
    let rows = section.lines().filter(|l| l.starts_with("| `"));
    for (rank, row) in rows.enumerate() {
        let first = row.split('|').nth(1).unwrap();
        for name in first.split('`').skip(1).step_by(2) {
            let room = name.trim_end_matches('/').trim_end_matches(".rs");
            ranks.insert(room.to_owned(), rank);
        }
    }
    ranks
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// The module path of `file` relative to the crate's `src`: `front/shed.rs` is `[front, shed]`,
/// `front/mod.rs` is `[front]`.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).unwrap().with_extension("");
    let mut path: Vec<String> = relative
        .iter()
        .map(|c| c.to_string_lossy().into_owned())
        .collect();
    if path.last().is_some_and(|last| last == "mod") {
        path.pop();
    }
    path
}

/// One path a file uses, resolved from the crate root: `crate::upstream::body::ProxyBody` from
/// `route/mod.rs` is `[upstream, body, ProxyBody]`; `super::answer` from `upstream/http/body.rs`
/// is `[upstream, http, answer]`.
#[derive(Debug)]
struct Used {
    path: Vec<String>,
    line: usize,
}

/// Collects the crate-rooted paths of one file, tracking inline modules (`mod tests { … }`), so
/// that `super` resolves from the module it is written in.
struct Paths {
    module: Vec<String>,
    used: Vec<Used>,
}

impl Paths {
    /// Resolves `segments` (as written) from the current module; `None` for a path that does not
    /// start at the crate (`std::…`, a local name, an extern crate).
    fn resolve(&self, segments: &[String]) -> Option<Vec<String>> {
        let mut base = self.module.clone();
        let mut rest = segments;
        match rest.first().map(String::as_str) {
            Some("crate") => {
                base.clear();
                rest = &rest[1..];
            }
            Some("super") => {
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop()?;
                    rest = &rest[1..];
                }
            }
            Some("self") => rest = &rest[1..],
            _ => return None,
        }
        base.extend(rest.iter().cloned());
        Some(base)
    }

    fn record(&mut self, segments: &[String], line: usize) {
        if let Some(path) = self.resolve(segments) {
            self.used.push(Used { path, line });
        }
    }

    /// Every path of a `use` tree, each with its prefix.
    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                prefix.push(n.ident.to_string());
                self.record(&prefix.clone(), n.ident.span().start().line);
                prefix.pop();
            }
            syn::UseTree::Rename(r) => {
                prefix.push(r.ident.to_string());
                self.record(&prefix.clone(), r.ident.span().start().line);
                prefix.pop();
            }
            syn::UseTree::Glob(g) => {
                self.record(&prefix.clone(), g.star_token.spans[0].start().line);
            }
            syn::UseTree::Group(g) => {
                for tree in &g.items {
                    self.use_tree(prefix, tree);
                }
            }
        }
    }

    /// `crate :: a :: b` and `super :: …` sequences inside a macro call's tokens, which `syn`
    /// does not parse as paths.
    fn tokens(&mut self, tokens: TokenStream) {
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < trees.len() {
            if let TokenTree::Group(group) = &trees[i] {
                self.tokens(group.stream());
                i += 1;
                continue;
            }
            let starts = matches!(&trees[i], TokenTree::Ident(id) if id == "crate" || id == "super")
                && !matches!(i.checked_sub(1).map(|j| &trees[j]), Some(TokenTree::Punct(p)) if p.as_char() == '$');
            if !starts {
                i += 1;
                continue;
            }
            let line = trees[i].span().start().line;
            let mut segments = Vec::new();
            let mut j = i;
            while let Some(TokenTree::Ident(ident)) = trees.get(j) {
                segments.push(ident.to_string());
                let colons = matches!(trees.get(j + 1), Some(TokenTree::Punct(p)) if p.as_char() == ':')
                    && matches!(trees.get(j + 2), Some(TokenTree::Punct(p)) if p.as_char() == ':');
                if !colons {
                    break;
                }
                j += 3;
            }
            if segments.len() > 1 {
                self.record(&segments, line);
            }
            i = j + 1;
        }
    }
}

impl<'ast> Visit<'ast> for Paths {
    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        if item.content.is_some() {
            self.module.push(item.ident.to_string());
            syn::visit::visit_item_mod(self, item);
            self.module.pop();
        }
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &item.tree);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        if segments.len() > 1 {
            let line = path.segments[0].ident.span().start().line;
            self.record(&segments, line);
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.tokens(mac.tokens.clone());
        syn::visit::visit_macro(self, mac);
    }
}

/// Every crate-rooted path each file of `src` uses, by file.
fn used_paths(src: &Path) -> BTreeMap<PathBuf, Vec<Used>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut by_file = BTreeMap::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let syntax = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let mut paths = Paths {
            module: module_path(src, &file),
            used: Vec::new(),
        };
        paths.visit_file(&syntax);
        by_file.insert(file, paths.used);
    }
    by_file
}

/// The import rule's findings for the crate at `src` against the rooms table `ranks`: one line
/// per import that runs up the table (or leaves a file that is in no room), empty when it holds.
fn upward_imports(src: &Path, ranks: &BTreeMap<String, usize>) -> Vec<String> {
    let mut findings = BTreeSet::new();
    for (file, used) in used_paths(src) {
        let module = module_path(src, &file);
        let shown = file.strip_prefix(src).unwrap().display().to_string();
        // The crate root and the binary hold the public surface: they re-export from every room.
        let Some(room) = module.first().filter(|r| *r != "lib" && *r != "main") else {
            continue;
        };
        let Some(&rank) = ranks.get(room) else {
            findings.insert(format!(
                "{shown}: room `{room}` is not in CONTRIBUTING.md's rooms table"
            ));
            continue;
        };
        for Used { path, line } in used {
            let Some(target) = path.first() else { continue };
            if target == room {
                continue;
            }
            // A name the crate root defines or re-exports is not a room.
            let Some(&target_rank) = ranks.get(target) else {
                continue;
            };
            if target_rank <= rank {
                findings.insert(format!(
                    "{shown}:{line}: `{room}` imports `{}`, which is not below it in the table",
                    path.join("::")
                ));
            }
            if room == "route"
                && target == "upstream"
                && path.get(1).is_some_and(|d| DOORS.contains(&d.as_str()))
            {
                findings.insert(format!(
                    "{shown}:{line}: `route` names a door of `upstream` (`{}`); take it through upstream/mod.rs",
                    path.join("::")
                ));
            }
        }
    }
    findings.into_iter().collect()
}

#[test]
fn gateway_imports_only_go_down_the_rooms_table() {
    let root = root();
    let contributing = std::fs::read_to_string(root.join("CONTRIBUTING.md")).unwrap();
    let ranks = table(&contributing);
    assert!(
        ranks.len() > 5,
        "CONTRIBUTING.md's rooms table has {} rooms: was it found?",
        ranks.len()
    );
    let src = root.join("crates/mrtr-gateway/src");
    let findings = upward_imports(&src, &ranks);
    assert!(
        findings.is_empty(),
        "imports against the rooms table of CONTRIBUTING.md:\n{}",
        findings.join("\n")
    );
}

/// The check itself finds what it must, in a planted tree: an upward path in code and one inside
/// a macro call, a door named from `route/`, a room missing from the table; and it passes what
/// is allowed (imports down the table, `super` out of an inline module into its own room).
#[test]
fn the_import_check_finds_planted_faults() {
    let dir = std::env::temp_dir().join(format!("mrtr-rooms-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let write = |path: &str, text: &str| {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write("lib.rs", "mod top; mod low; mod route; mod upstream; mod stray;");
    write("top.rs", "use crate::low::Thing; pub struct Top;");
    write(
        "low.rs",
        "pub struct Thing;\nfn f() { let _ = crate::top::Top; }\nmod tests { use super::super::low::Thing; }",
    );
    // `super::super` from the inline module is `route`; read from the file's module, it would
    // be the crate root, and `top` an upward import.
    write("route/named.rs", "mod tests { use super::super::top::Ranked; }");
    write(
        "route/mod.rs",
        "use crate::upstream::http::Forwarder;\nuse crate::upstream::Seam;",
    );
    write(
        "upstream/mod.rs",
        "pub struct Seam;\nfn g() { tracing::info!(\"{}\", crate::low::Thing); }\nfn h() { tracing::info!(\"{}\", crate::top::Top); }",
    );
    write("stray.rs", "");
    let contributing = "# Contributing\n\n## The gateway's rooms\n\n| room | holds |\n|---|---|\n| `top.rs` | a |\n| `route/` | b |\n| `upstream/` | c |\n| `low.rs` | d |\n\n## Next\n";
    let findings = upward_imports(&dir, &table(contributing));
    std::fs::remove_dir_all(&dir).unwrap();
    let expected = [
        "low.rs:2: `low` imports `top::Top`, which is not below it in the table",
        "route/mod.rs:1: `route` names a door of `upstream` (`upstream::http::Forwarder`); take it through upstream/mod.rs",
        "stray.rs: room `stray` is not in CONTRIBUTING.md's rooms table",
        "upstream/mod.rs:3: `upstream` imports `top::Top`, which is not below it in the table",
    ];
    assert_eq!(findings, expected);
}
