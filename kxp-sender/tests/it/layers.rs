//! The crate's layers import one way (`lib.rs`, "Layers"): a module may use the layers before
//! it, never one after it nor a sibling of its own rank. The compiler cannot say this (every
//! module of a crate sees every other), so this test reads the sources: a `crate::` path in
//! code (comments aside) that names a later layer or a sibling fails, with the file and line.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// The layers in order, each with its rank: a module may name ranks below its own.
const LAYERS: &[(&str, u8)] = &[
    ("model", 0),
    ("policy", 1),
    ("store", 2),
    ("engine", 3),
    ("app", 4),
    ("http", 5),
    ("console", 5),
    ("ingest", 5),
];

fn rank(module: &str) -> Option<u8> {
    LAYERS
        .iter()
        .find(|(name, _)| *name == module)
        .map(|&(_, rank)| rank)
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The code of a file, comments removed (doc links may name any layer), lines kept.
fn code(text: &str) -> String {
    text.lines()
        .map(|line| line.find("//").map_or(line, |at| &line[..at]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first-level modules the `crate::` paths in `code` name, each with its line (1-based):
/// `crate::store::Db` names `store`; `use crate::{model::X, policy::{a, b}}`, on one line or
/// several, names `model` and `policy`.
fn named(code: &str) -> Vec<(String, usize)> {
    named_after(code, "crate::")
}

/// What [`named`] reads, after any path `prefix` (`crate::engine::`, `super::`).
fn named_after(code: &str, prefix: &str) -> Vec<(String, usize)> {
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let mut names = Vec::new();
    let mut from = 0;
    while let Some(found) = code[from..].find(prefix) {
        let start = from + found + prefix.len();
        from = start;
        let rest = &code[start..];
        if rest.starts_with('{') {
            let mut depth = 0;
            let mut item_at = start + 1;
            let mut item = String::new();
            for (offset, c) in rest.char_indices() {
                match c {
                    '{' => {
                        depth += 1;
                        if depth == 1 {
                            continue;
                        }
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
                let at = start + offset;
                if depth == 1 && !c.is_whitespace() && item.trim().is_empty() {
                    item_at = at;
                }
                if (depth == 1 && c == ',') || depth == 0 {
                    if let Some(first) = item.trim().split("::").next().filter(|f| !f.is_empty()) {
                        names.push((first.to_owned(), line_of(item_at)));
                    }
                    item.clear();
                    if depth == 0 {
                        break;
                    }
                } else if depth == 1 {
                    item.push(c);
                }
            }
        } else {
            let ident: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            names.push((ident, line_of(start)));
        }
    }
    names
}

#[test]
fn no_layer_imports_a_later_one_or_a_sibling() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut wrong = Vec::new();
    let mut checked = 0;
    for &(layer, own) in LAYERS {
        let dir = src.join(layer);
        assert!(
            dir.is_dir(),
            "the layer {layer} has no folder {}",
            dir.display()
        );
        for file in sources(&dir) {
            checked += 1;
            let text = fs::read_to_string(&file).unwrap();
            {
                for (module, line) in named(&code(&text)) {
                    // A root item (`crate::Config`) is a re-export of some layer's: naming it
                    // would hide which, so a layer names the layer instead.
                    let allowed =
                        rank(&module).is_some_and(|theirs| module == layer || theirs < own);
                    if !allowed {
                        wrong.push(format!(
                            "{}:{}: {layer} names crate::{module}",
                            file.strip_prefix(&src).unwrap().display(),
                            line
                        ));
                    }
                }
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} files read: is the layout still src/<layer>/?"
    );
    assert!(
        wrong.is_empty(),
        "imports against the layers:\n{}",
        wrong.join("\n")
    );
}

/// Within the engine, no two modules import each other (`config` and `announce` did): a circle
/// makes both one module in all but name, and neither can be read or changed alone.
#[test]
fn no_two_engine_modules_import_each_other() {
    let engine = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/engine");
    let mut imports = BTreeSet::new();
    for file in sources(&engine) {
        let relative = file.strip_prefix(&engine).unwrap();
        let module = relative
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_owned();
        if module == "mod" {
            continue;
        }
        let code = code(&fs::read_to_string(&file).unwrap());
        let mut names = named_after(&code, "crate::engine::");
        // In engine/<module>.rs, `super::` is the engine itself.
        if relative.components().count() == 1 {
            names.extend(named_after(&code, "super::"));
        }
        for (other, _) in names {
            if !other.is_empty() && other != module {
                imports.insert((module.clone(), other));
            }
        }
    }
    assert!(
        imports.len() > 10,
        "only {} imports between engine modules found: is the layout still src/engine/?",
        imports.len()
    );
    let circles: Vec<String> = imports
        .iter()
        .filter(|(a, b)| a < b && imports.contains(&(b.clone(), a.clone())))
        .map(|(a, b)| format!("engine::{a} and engine::{b}"))
        .collect();
    assert!(
        circles.is_empty(),
        "engine modules that import each other:\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_reader_finds_what_each_form_names() {
    let modules = |text: &str| -> Vec<String> {
        named(&code(text))
            .into_iter()
            .map(|(module, _)| module)
            .collect()
    };
    assert_eq!(modules("use crate::store::Db;"), ["store"]);
    assert_eq!(
        modules("use crate::{model::X, policy::{a, b}, http};"),
        ["model", "policy", "http"]
    );
    assert_eq!(
        modules("use crate::{\n    model::X,\n    policy::{a, b},\n    http::Y,\n};"),
        ["model", "policy", "http"]
    );
    assert_eq!(
        modules("let x = crate::http::accept(y, crate::app::z);"),
        ["http", "app"]
    );
    assert_eq!(modules("f(); // [`x`](crate::http)"), Vec::<String>::new());
    assert_eq!(modules("$crate::store::Db::Sqlite(p)"), ["store"]);
    let lines: Vec<usize> = named("a\nuse crate::{\n  model::X,\n  http::Y,\n};")
        .into_iter()
        .map(|(_, line)| line)
        .collect();
    assert_eq!(lines, [3, 4]);
}
