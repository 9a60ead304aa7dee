//! The layer order of `src/`, checked against the code: each top-level
//! module may name only the modules before it in [`LAYERS`], whether by a
//! `use` line or by a `crate::x::y` path anywhere in its code (a
//! `super::` that climbs to the crate root counts too). `src/lib.rs` and
//! `docs/architecture.md` state the same order, and a module missing from
//! it fails here, so a new one is placed before it is used.
//!
//! Beside the order, the one place for platform code: business code names
//! no `cfg(unix)`, `cfg(windows)` or `cfg(target_os)` outside `src/os/`
//! (and the per-OS autostart files, which are the platforms' own formats),
//! so what differs between Linux, macOS and Windows is found in one place
//! and a change on one OS cannot hide in a branch the others never build.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The top-level modules of `src/`, lowest first: each uses only those
/// before it.
const LAYERS: &[&str] = &[
    "os",
    "clock",
    "registry",
    "http",
    "config",
    "chain",
    "tls",
    "app",
    "host",
    "admin",
    "capture",
    "server",
    "autostart",
    "compressor",
    "cmd",
    "demo",
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn no_module_names_one_above_it() {
    let mut wrong = Vec::new();
    for file in rust_files(&src()) {
        let rel = file.strip_prefix(src()).unwrap();
        let module = module_path(rel);
        let Some(top) = module.first() else {
            continue; // lib.rs and main.rs: the root names every module
        };
        let Some(mine) = LAYERS.iter().position(|l| l == top) else {
            panic!("{} is in no layer: add `{top}` to LAYERS", rel.display());
        };
        let text = std::fs::read_to_string(&file).unwrap();
        for (line, used) in crate_references(&code_only(&text), module.len()) {
            let Some(theirs) = LAYERS.iter().position(|l| *l == used.as_str()) else {
                wrong.push(format!(
                    "src/{}:{line}: crate::{used} is in no layer",
                    rel.display()
                ));
                continue;
            };
            if theirs > mine {
                wrong.push(format!(
                    "src/{}:{line}: `{top}` uses crate::{used}, which the order puts above it",
                    rel.display()
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

#[test]
fn every_module_has_a_layer_and_lib_rs_states_the_order() {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let declared: BTreeSet<&str> = lib
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod "))
        .map(|l| l.trim_end_matches(';'))
        .collect();
    let layers: BTreeSet<&str> = LAYERS.iter().copied().collect();
    assert_eq!(declared, layers, "lib.rs's modules and LAYERS differ");
    // The `//!` list: `1. `os` …`, one item per layer, in order.
    let stated: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("//! "))
        .filter_map(|l| {
            let (number, rest) = l.split_once(". `")?;
            number.trim().parse::<u32>().ok()?;
            rest.split('`').next()
        })
        .collect();
    assert_eq!(stated, LAYERS, "src/lib.rs states another order");
}

#[test]
fn architecture_md_states_the_order() {
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/architecture.md");
    let doc = std::fs::read_to_string(doc).unwrap();
    let section = doc
        .split("## Inside `src/`")
        .nth(1)
        .expect("docs/architecture.md has an `Inside src/` section");
    let stated: Vec<String> = section
        .lines()
        .take_while(|l| !l.starts_with("## "))
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(|name| {
            name.trim_end_matches('/')
                .trim_end_matches(".rs")
                .to_owned()
        })
        .collect();
    assert_eq!(stated, LAYERS, "docs/architecture.md states another order");
}

/// The checker itself, on the shapes it must see through.
#[test]
fn references_are_found_in_code_and_only_there() {
    let text = r#"
//! [`crate::demo`] in a doc comment is not a use
use crate::{os::{self, Event}, clock};
fn f() -> crate::http::Body { let s = "crate::cmd"; let c = '"'; crate::config::x() }
/* crate::server */ fn g<'a>(x: &'a str) { super::app::y(); }
mod tests { fn h() { super::super::chain::z(); } }
"#;
    let found: Vec<String> = crate_references(&code_only(text), 1)
        .into_iter()
        .map(|(_, m)| m)
        .collect();
    assert_eq!(found, ["os", "clock", "http", "config", "app", "chain"]);
    // From a file two deep (`src/a/b.rs`), one `super` stays in `a`.
    assert!(crate_references(&code_only("use super::x;"), 2).is_empty());
}

/// Folders of `src/` where `cfg` on the OS belongs.
const PLATFORM_HOMES: &[&str] = &["os", "autostart"];

#[test]
fn only_the_platform_modules_name_an_os() {
    let mut found = Vec::new();
    for file in rust_files(&src()) {
        let rel = file.strip_prefix(src()).unwrap();
        let top = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        if PLATFORM_HOMES.contains(&top.as_ref()) {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            if names_an_os(line) {
                found.push(format!("src/{}:{}: {}", rel.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "platform code outside src/os/ (move it there, with unix and windows halves):\n{}",
        found.join("\n")
    );
}

/// No code of ours, in any crate, depends on the CPU: CI type-checks macOS
/// for Apple silicon only, and that check stands for Intel Macs because
/// nothing here differs between the two.
#[test]
fn no_code_names_a_cpu() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for dir in ["src", "shims"] {
        for file in rust_files(&root.join(dir)) {
            let text = std::fs::read_to_string(&file).unwrap();
            for (n, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                if code.contains("target_arch") || code.contains("target_pointer_width") {
                    let rel = file.strip_prefix(root).unwrap();
                    found.push(format!("{}:{}: {}", rel.display(), n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "code that depends on the CPU (CI checks macOS for one CPU only):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_sees_each_form() {
    assert!(names_an_os("#[cfg(unix)]"));
    assert!(names_an_os("    #[cfg(not(windows))]"));
    assert!(names_an_os("if cfg!(target_os = \"macos\") {"));
    assert!(names_an_os("#[cfg(any(windows, target_os = \"macos\"))]"));
    assert!(!names_an_os("#[cfg(test)]"));
    assert!(!names_an_os("// on windows the console sends Ctrl-Break"));
}

/// Whether a line holds a `cfg` (attribute or macro) that names an OS.
fn names_an_os(line: &str) -> bool {
    let code = line.split("//").next().unwrap_or("");
    let Some(at) = code.find("cfg(").or_else(|| code.find("cfg!(")) else {
        return false;
    };
    let cond = &code[at..];
    ["unix", "windows", "target_os", "target_family"]
        .iter()
        .any(|os| cond.contains(os))
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// `admin/ui.rs` → `[admin, ui]`, `os/mod.rs` → `[os]`, `lib.rs` → `[]`.
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    if parts.len() == 1 && (parts[0] == "lib" || parts[0] == "main") {
        parts.clear();
    }
    parts
}

/// `text` with comments, string and character literals blanked out
/// (newlines kept, so line numbers hold).
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let start = i;
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if let Some(end) = raw_string_end(&chars, i) {
            i = end;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == '\'' && next == Some('\\') {
            i += 2;
            while i < chars.len() && chars[i] != '\'' {
                i += 1;
            }
            i += 1;
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            i += 3;
        } else {
            out.push(c);
            i += 1;
            continue;
        }
        let end = i.min(chars.len());
        out.extend(chars[start..end].iter().map(|&c| blank(c)));
        i = end;
    }
    out
}

/// Where a raw string (`r"…"`, `r#"…"#`, `br"…"`) starting at `i` ends.
fn raw_string_end(chars: &[char], i: usize) -> Option<usize> {
    let before = i.checked_sub(1).map(|b| chars[b]);
    if before.is_some_and(|b| b.is_alphanumeric() || b == '_') {
        return None;
    }
    let mut j = i;
    if chars.get(j) == Some(&'b') || chars.get(j) == Some(&'c') {
        j += 1;
    }
    if chars.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let hashes = chars[j..].iter().take_while(|&&c| c == '#').count();
    j += hashes;
    if chars.get(j) != Some(&'"') {
        return None;
    }
    j += 1;
    while j < chars.len() {
        if chars[j] == '"'
            && chars[j + 1..]
                .iter()
                .take(hashes)
                .filter(|&&c| c == '#')
                .count()
                == hashes
        {
            return Some(j + 1 + hashes);
        }
        j += 1;
    }
    Some(chars.len())
}

/// A token of the code: a word, `::`, or one other character.
#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Word(String),
    Path,
    Punct(char),
}

fn tokens(code: &str) -> Vec<(usize, Tok)> {
    let mut out = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if c.is_alphanumeric() || c == '_' {
                let start = i;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                out.push((n + 1, Tok::Word(chars[start..i].iter().collect())));
                continue;
            }
            if c == ':' && chars.get(i + 1) == Some(&':') {
                out.push((n + 1, Tok::Path));
                i += 2;
                continue;
            }
            if !c.is_whitespace() {
                out.push((n + 1, Tok::Punct(c)));
            }
            i += 1;
        }
    }
    out
}

/// The top-level modules `code` names (`crate::x`, `crate::{x, y}`, or a
/// `super::` chain that climbs to the crate root), with their line, from
/// a file `depth` modules deep (`src/a.rs`: 1).
fn crate_references(code: &str, depth: usize) -> Vec<(usize, String)> {
    let toks = tokens(code);
    let word = |i: usize| match toks.get(i) {
        Some((_, Tok::Word(w))) => Some(w.as_str()),
        _ => None,
    };
    let is = |i: usize, t: &Tok| toks.get(i).map(|(_, x)| x) == Some(t);
    let mut found = Vec::new();
    // Inline `mod name {` blocks open at these brace depths.
    let mut inline: Vec<usize> = Vec::new();
    let mut braces = 0;
    let mut i = 0;
    while i < toks.len() {
        let (line, tok) = &toks[i];
        match tok {
            Tok::Punct('{') => braces += 1,
            Tok::Punct('}') => {
                braces -= 1;
                if inline.last() == Some(&braces) {
                    inline.pop();
                }
            }
            Tok::Word(w) if w == "mod" && is(i + 2, &Tok::Punct('{')) => inline.push(braces),
            Tok::Word(w) if w == "crate" || w == "super" => {
                // Skip `self::crate`-like tails: only a path's first word.
                let after_path = i > 0 && is(i - 1, &Tok::Path);
                let mut j = i;
                let mut supers = 0;
                while word(j) == Some("super") && is(j + 1, &Tok::Path) {
                    supers += 1;
                    j += 2;
                }
                let root = if w == "crate" {
                    is(i + 1, &Tok::Path).then_some(i + 2)
                } else {
                    (supers == depth + inline.len()).then_some(j)
                };
                if let (Some(at), false) = (root, after_path) {
                    found.extend(named_at(&toks, at).into_iter().map(|m| (*line, m)));
                }
                if w == "super" {
                    i = j.max(i + 1);
                    continue;
                }
            }
            _ => {}
        }
        i += 1;
    }
    found
}

/// The first word of a path at `at`, or each first word of a `{…}` group.
fn named_at(toks: &[(usize, Tok)], at: usize) -> Vec<String> {
    match toks.get(at).map(|(_, t)| t) {
        Some(Tok::Word(w)) => vec![w.clone()],
        Some(Tok::Punct('{')) => {
            let mut out = Vec::new();
            let mut depth = 0;
            let mut expect_name = true;
            for (_, t) in &toks[at..] {
                match t {
                    Tok::Punct('{') => {
                        depth += 1;
                        expect_name = depth == 1;
                    }
                    Tok::Punct('}') => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    Tok::Punct(',') if depth == 1 => expect_name = true,
                    Tok::Word(w) if expect_name && depth == 1 => {
                        if w != "self" {
                            out.push(w.clone());
                        }
                        expect_name = false;
                    }
                    _ => {}
                }
            }
            out
        }
        _ => Vec::new(),
    }
}
