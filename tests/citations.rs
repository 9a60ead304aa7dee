//! Docs and code comments cite only what a reader of the repository can
//! open: no design document, research notes or user stories that live
//! elsewhere (`DESIGN`, `research/…`, "seed 003"), and every `*.md` file
//! named anywhere (a page, a comment, a script) exists in the clone. A
//! page on the web is cited by its URL, which this does not check.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The text files of the clone (outside `target/`, dot folders and this
/// file, which must name what it looks for).
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with('.') && name != ".ci" {
            continue;
        }
        if matches!(name.as_str(), "target" | "node_modules" | "Cargo.lock") {
            continue;
        }
        if path.is_dir() {
            files(&path, out);
        } else if path != Path::new(file!()) && !path.ends_with(file!()) {
            out.push(path);
        }
    }
}

/// The `*.md` paths named in `line` (not those inside a URL).
fn md_names(line: &str) -> Vec<&str> {
    let is_path = |c: char| c.is_ascii_alphanumeric() || "_./-".contains(c);
    let mut out = Vec::new();
    let mut rest = line;
    let mut offset = 0;
    while let Some(at) = rest.find(".md") {
        let end = offset + at + 3;
        let followed = line[end..].chars().next();
        if followed.is_some_and(|c| c.is_ascii_alphanumeric()) {
            offset = end;
            rest = &line[end..];
            continue;
        }
        let start = line[..end]
            .char_indices()
            .rev()
            .take_while(|(_, c)| is_path(*c))
            .last()
            .map_or(end, |(i, _)| i);
        let name = &line[start..end];
        let in_url = line[..start].ends_with(':') || name.starts_with("//");
        if !in_url && name.len() > 3 {
            out.push(name);
        }
        offset = end;
        rest = &line[end..];
    }
    out
}

/// Why `line` cites something the clone does not hold, if it does. In a
/// Rust file only its comment names files (a string literal may be a test
/// fixture's page name).
fn foreign_citation(line: &str, pages: &[String], rust: bool) -> Option<String> {
    let words: Vec<&str> = line
        .split(|c: char| !c.is_ascii_alphanumeric() && c != '/' && c != '_')
        .collect();
    if words.contains(&"DESIGN") {
        return Some("cites DESIGN, which is not in the repository".into());
    }
    if line.contains("research/") {
        return Some("cites research/, which is not in the repository".into());
    }
    let seed_story = words.windows(2).any(|w| {
        matches!(w[0], "seed" | "seeds") && w[1].chars().next().is_some_and(|c| c.is_ascii_digit())
    });
    if seed_story {
        return Some("cites a seed story, which is not in the repository".into());
    }
    let prose = if rust {
        line.find("//").map_or("", |at| &line[at..])
    } else {
        line
    };
    for name in md_names(prose) {
        // `docs/../README.md`, `../README.md`: what follows the last `../`.
        let wanted = name.rsplit("../").next().unwrap_or(name);
        let wanted = wanted.trim_start_matches(['.', '/']);
        if !pages
            .iter()
            .any(|p| p == wanted || p.ends_with(&format!("/{wanted}")))
        {
            return Some(format!("names {name}, which is not in the repository"));
        }
    }
    None
}

#[test]
fn nothing_cites_a_document_outside_the_repository() {
    let mut all = Vec::new();
    files(root(), &mut all);
    all.sort();
    let pages: Vec<String> = all
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| p.strip_prefix(root()).unwrap().display().to_string())
        .collect();
    let mut found = Vec::new();
    for file in &all {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue; // not text
        };
        let rel = file.strip_prefix(root()).unwrap().display().to_string();
        let rust = rel.ends_with(".rs");
        for (n, line) in text.lines().enumerate() {
            if let Some(why) = foreign_citation(line, &pages, rust) {
                found.push(format!("{rel}:{}: {why}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "\n{}", found.join("\n"));
}

#[test]
fn the_checker_sees_each_kind_of_foreign_citation() {
    let pages = vec!["docs/failover.md".to_owned(), "README.md".to_owned()];
    let cites = |l: &str| foreign_citation(l, &pages, false).is_some();
    assert!(cites("//! The rules (DESIGN §5)."));
    assert!(cites("# see research/desktop.md §2"));
    assert!(cites("(wires.md §2.4)"));
    assert!(cites("Route windows (seed 003)"));
    assert!(!cites("[failover](failover.md#the-rules) and ../README.md"));
    assert!(!cites("[docs](https://docs.qoder.com/cli/settings.md)"));
    assert!(!cites("fuzz/seeds/sse_parse and a design note"));
    let rust = |l: &str| foreign_citation(l, &pages, true).is_some();
    assert!(rust("let page = \"[a](a.md)\"; // see wires.md"));
    assert!(!rust("let page = \"[a](a.md)\"; // see failover.md"));
}
