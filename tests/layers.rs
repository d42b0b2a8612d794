//! The daemon's top-level modules form layers: each imports only from layers below it, so there
//! is no import cycle between them. The layers are the ```layers block of ARCHITECTURE.md (top
//! line first); this test reads them from there, so the drawing and the code cannot drift.
//!
//! A module is a `src/X.rs` or a `src/X/` directory, counted as one; an import is any
//! `crate::X` path in its code (a `use`, a `use crate::{X::.., Y}` group, or a path in an
//! expression), comments left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The layers as ARCHITECTURE.md draws them, top first.
fn layers() -> Vec<Vec<String>> {
    let doc = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let start = doc
        .find("```layers\n")
        .expect("ARCHITECTURE.md has a ```layers block")
        + "```layers\n".len();
    let end = start + doc[start..].find("```").expect("the block is closed");
    doc[start..end]
        .lines()
        .map(|line| line.split_whitespace().map(str::to_string).collect())
        .filter(|l: &Vec<String>| !l.is_empty())
        .collect()
}

/// The top-level modules `src/lib.rs` declares.
fn modules() -> BTreeSet<String> {
    let lib = std::fs::read_to_string(root().join("src/lib.rs")).unwrap();
    lib.lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod "))
        .map(|m| m.trim_end_matches(';').to_string())
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// The code of `src` without its comments (line comments end at the line; block comments may
/// nest). String literals are kept: a `crate::` inside one is rare, and would only make the
/// check stricter.
fn without_comments(src: &str) -> String {
    let b = src.as_bytes();
    let (mut out, mut i, mut depth) = (String::with_capacity(src.len()), 0, 0usize);
    while i < b.len() {
        if depth == 0 && b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            depth += 1;
            i += 2;
        } else if depth > 0 && b[i..].starts_with(b"*/") {
            depth -= 1;
            i += 2;
        } else {
            if depth == 0 {
                out.push(b[i] as char);
            }
            i += 1;
        }
    }
    out
}

fn ident_at(s: &str) -> Option<&str> {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    (end > 0).then(|| &s[..end])
}

/// Every top-level module named after `crate::` in `code`.
fn imports(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // `crate::{a::b, c, d::{e, f}}`: the first name of each item at depth 1.
            let mut depth = 1;
            let mut item_start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    ',' if depth == 1 => item_start = true,
                    c if c.is_whitespace() => {}
                    _ if item_start && depth == 1 => {
                        if let Some(name) = ident_at(&group[i..]) {
                            found.insert(name.to_string());
                        }
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else if let Some(name) = ident_at(rest) {
            found.insert(name.to_string());
        }
    }
    found
}

/// module -> the other top-level modules it imports.
fn import_graph(mods: &BTreeSet<String>) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(root().join("src")).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let module = first.trim_end_matches(".rs").to_string();
        if !mods.contains(&module) {
            continue; // lib.rs, bin/
        }
        let code = without_comments(&std::fs::read_to_string(&file).unwrap());
        let deps = graph.entry(module.clone()).or_default();
        for m in imports(&code) {
            if m != module && mods.contains(&m) {
                deps.insert(m);
            }
        }
    }
    graph
}

#[test]
fn every_module_sits_in_exactly_one_layer() {
    let mods = modules();
    let mut seen = BTreeMap::new();
    for (i, layer) in layers().iter().enumerate() {
        for m in layer {
            assert!(
                mods.contains(m),
                "ARCHITECTURE.md's layers name `{m}`, which src/lib.rs does not declare"
            );
            assert!(
                seen.insert(m.clone(), i).is_none(),
                "`{m}` is in two layers"
            );
        }
    }
    let missing: Vec<_> = mods.iter().filter(|m| !seen.contains_key(*m)).collect();
    assert!(
        missing.is_empty(),
        "modules missing from ARCHITECTURE.md's layers: {missing:?}"
    );
}

#[test]
fn modules_import_only_from_layers_below() {
    let mods = modules();
    let layer_of: BTreeMap<String, usize> = layers()
        .iter()
        .enumerate()
        .flat_map(|(i, l)| l.iter().map(move |m| (m.clone(), i)))
        .collect();
    let mut wrong = Vec::new();
    for (module, deps) in import_graph(&mods) {
        for dep in deps {
            // Layers are listed top first: a dependency must have a larger index.
            if layer_of[&dep] <= layer_of[&module] {
                wrong.push(format!(
                    "{module} (layer {}) imports {dep} (layer {})",
                    layer_of[&module] + 1,
                    layer_of[&dep] + 1
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports that go sideways or up (move the shared piece down, or redraw the layers in \
         ARCHITECTURE.md):\n  {}",
        wrong.join("\n  ")
    );
}

#[test]
fn the_import_reader_sees_groups_paths_and_not_comments() {
    let code = without_comments(
        "use crate::a::X;\nuse crate::{b::Y, c, d::{e::Z, f}};\n// crate::g\n/* crate::h /* crate::i */ */\nlet x = crate::j::k();",
    );
    let got: Vec<_> = imports(&code).into_iter().collect();
    assert_eq!(got, ["a", "b", "c", "d", "j"]);
}
