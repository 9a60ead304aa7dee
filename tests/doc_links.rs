//! Every relative link in README.md, `docs/*.md` and `benches/README.md`
//! resolves: the file (or folder) it names exists in the clone, and a
//! `#fragment` names a heading of the target page by GitHub's slug rules
//! (lowercase; every character but letters, digits, spaces, `-` and `_`
//! dropped; spaces become `-`; a repeated slug gets `-1`, `-2`, …). Links to
//! other sites are not fetched. A moved or renamed page or heading fails
//! here instead of leaving a reader at a dead link.
//!
//! The release archives (`.ci/release`) carry README.md, `docs/`, LICENSE
//! and `shimgate.example.toml` beside the binary: a link in one of those
//! pages must stay inside that set, or it is dead for a reader of an
//! unpacked archive.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The pages checked, as paths from the clone.
fn pages() -> Vec<String> {
    let mut pages: Vec<String> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    pages.sort();
    pages.insert(0, "README.md".into());
    pages.push("benches/README.md".into());
    pages
}

/// The page's lines outside fenced code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push(line);
        }
    }
    out
}

/// A line with its inline code spans blanked out (a `[x](y)` inside
/// backticks is code, not a link).
fn without_code_spans(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
            out.push(' ');
        } else if in_code {
            out.push(' ');
        } else {
            out.push(c);
        }
    }
    out
}

/// The targets of `[text](target)` and `![alt](target)` links on a page.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose(text) {
        let line = without_code_spans(line);
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].split_whitespace().next().unwrap_or_default();
            out.push(target.to_string());
            rest = &after[end..];
        }
    }
    out
}

/// GitHub's anchor for a heading's text.
fn slug(heading: &str) -> String {
    let mut text = heading.to_string();
    // A link in a heading reads as its text.
    while let (Some(open), Some(mid)) = (text.find('['), text.find("](")) {
        let Some(close) = text[mid..].find(')').map(|c| mid + c) else {
            break;
        };
        if open > mid {
            break;
        }
        text = format!(
            "{}{}{}",
            &text[..open],
            &text[open + 1..mid],
            &text[close + 1..]
        );
    }
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// Every anchor a page's headings make, with GitHub's `-N` suffixes.
fn anchors(text: &str) -> Vec<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = Vec::new();
    for line in prose(text) {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if hashes == 0 || hashes > 6 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(line[hashes..].trim().trim_end_matches('#'));
        let n = seen.entry(base.clone()).or_insert(0);
        out.push(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// What is wrong with one link from `page`, if anything.
fn check(page: &str, target: &str) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (file, fragment) = match target.split_once('#') {
        Some((file, fragment)) => (file, Some(fragment)),
        None => (target, None),
    };
    let resolved: PathBuf = if file.is_empty() {
        root().join(page)
    } else {
        root().join(page).parent().unwrap().join(file)
    };
    if !resolved.exists() {
        return Some(format!("{page}: {target}: no such file"));
    }
    let fragment = fragment?;
    if resolved.extension().is_none_or(|e| e != "md") {
        return Some(format!(
            "{page}: {target}: a fragment on a page that is not markdown"
        ));
    }
    let text = std::fs::read_to_string(&resolved).unwrap();
    if anchors(&text).iter().any(|a| a == fragment) {
        None
    } else {
        Some(format!("{page}: {target}: no heading makes #{fragment}"))
    }
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let mut problems = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(root().join(&page)).unwrap();
        for target in links(&text) {
            checked += 1;
            problems.extend(check(&page, &target));
        }
    }
    assert!(
        checked >= 20,
        "only {checked} links found: is the parser broken?"
    );
    assert!(problems.is_empty(), "dead links:\n{}", problems.join("\n"));
}

/// What `.ci/release` packs beside the binary, as paths from the clone
/// (a folder ends with `/`).
const PACKED: &[&str] = &["README.md", "LICENSE", "shimgate.example.toml", "docs/"];

#[test]
fn the_packed_pages_link_only_inside_the_archive() {
    let script = std::fs::read_to_string(root().join(".ci/release")).unwrap();
    for packed in PACKED {
        assert!(
            script.contains(packed.trim_end_matches('/')),
            ".ci/release no longer packs {packed}: update PACKED"
        );
    }
    let mut outside = Vec::new();
    for page in pages().iter().filter(|p| is_packed(p)) {
        let text = std::fs::read_to_string(root().join(page)).unwrap();
        for target in links(&text) {
            let file = target.split('#').next().unwrap_or_default();
            if target.contains("://") || target.starts_with("mailto:") || file.is_empty() {
                continue;
            }
            let joined = Path::new(page).parent().unwrap().join(file);
            let resolved = normalised(&joined);
            if !is_packed(&resolved) {
                outside.push(format!("{page}: {target} ({resolved} is not packed)"));
            }
        }
    }
    assert!(
        outside.is_empty(),
        "links that leave the release archive:\n{}",
        outside.join("\n")
    );
}

fn is_packed(path: &str) -> bool {
    PACKED.iter().any(|p| match p.strip_suffix('/') {
        Some(folder) => path.starts_with(&format!("{folder}/")),
        None => path == *p,
    })
}

/// `docs/../README.md` → `README.md` (no file system asked).
fn normalised(path: &Path) -> String {
    let mut parts: Vec<String> = Vec::new();
    for c in path.components() {
        match c {
            std::path::Component::ParentDir => {
                parts.pop();
            }
            std::path::Component::Normal(p) => parts.push(p.to_string_lossy().into_owned()),
            _ => {}
        }
    }
    parts.join("/")
}

#[test]
fn slugs_follow_github_s_rules() {
    assert_eq!(slug("Failover that learns"), "failover-that-learns");
    assert_eq!(slug("`/status` and `/metrics`"), "status-and-metrics");
    assert_eq!(
        slug("What the proxy sees of the agent"),
        "what-the-proxy-sees-of-the-agent"
    );
    assert_eq!(
        slug("2026-12-03 (20:30 UTC): six runs"),
        "2026-12-03-2030-utc-six-runs"
    );
    assert_eq!(slug("Install, from [source](x.md)"), "install-from-source");
    assert_eq!(slug("Our own HTTP/1.1 client"), "our-own-http11-client");
    assert_eq!(
        anchors("# A\n## A\n```\n# not a heading\n```\n### A\n"),
        ["a", "a-1", "a-2"]
    );
}

#[test]
fn links_are_found_outside_code_only() {
    let page = "See [a](a.md#x) and ![p](p.png).\n`[no](code.md)`\n```\n[no](fenced.md)\n```\n";
    assert_eq!(links(page), ["a.md#x", "p.png"]);
}
