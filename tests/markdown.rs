//! The shape of every Markdown page in the repository, where an edit most
//! often breaks it without anyone seeing (a page renders whatever it is
//! given):
//!
//! - a table split by a blank line (the rows after it render as loose
//!   text): a `|` line after a blank line must start a new table, i.e. be
//!   followed by its `|---|` row;
//! - a paragraph or list that starts mid-sentence, the trace of a lost
//!   line: a paragraph that starts with a lowercase word (other than a
//!   name written lowercase, [`LOWERCASE_NAMES`]) or with `,` `;` `)`, or
//!   an indented block that follows no list item (the rest of a list
//!   item whose first line went); what goes on after a fenced block may
//!   go on with its sentence;
//! - a fence left open.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

/// Names written lowercase that may open a sentence.
const LOWERCASE_NAMES: &[&str] = &[
    "shimgate",
    "hyper",
    "cargo-fuzz",
    "bili",
    "billion-context",
    "context-guardian",
    "awecompress",
    "qoder",
    "qodercli",
    "curl",
    "curl.exe",
    "cargo",
    "npm",
    "pip",
    "systemd",
    "launchd",
    "mitmproxy",
    "mitmdump",
    "tinyproxy",
    "microsocks",
    "iOS",
    "e.g.",
    "i.e.",
];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.md` file of the clone outside `target/` and dot folders.
fn pages(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with('.') || name == "target" || name == "node_modules" {
            continue;
        }
        if path.is_dir() {
            pages(&path, out);
        } else if name.ends_with(".md") {
            out.push(path);
        }
    }
}

/// What is wrong with `text`'s shape, as `line: problem`.
fn problems(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut fence: Option<(usize, String)> = None;
    let mut after_blank = true;
    let mut in_list = false;
    // The block after a fence may go on with the sentence the fence
    // interrupted ("… like this:", code, "or like that").
    let mut after_fence = false;
    for (i, line) in lines.iter().enumerate() {
        let n = i + 1;
        let trimmed = line.trim_start();
        if let Some((_, marker)) = &fence {
            if trimmed.starts_with(marker.as_str()) && trimmed.trim_end() == marker {
                fence = None;
                after_fence = true;
            }
            continue;
        }
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            let marker: String = trimmed
                .chars()
                .take_while(|c| *c == '`' || *c == '~')
                .collect();
            fence = Some((n, marker));
            after_blank = false;
            continue;
        }
        if trimmed.is_empty() {
            after_blank = true;
            continue;
        }
        let starts_block = after_blank;
        let follows_fence = std::mem::take(&mut after_fence);
        after_blank = false;
        if !starts_block {
            continue;
        }
        let indented = line.starts_with(' ') || line.starts_with('\t');
        let item = list_item(trimmed);
        if item.is_some() && !indented {
            in_list = true;
        } else if !indented {
            in_list = false;
        }
        if trimmed.starts_with('|') {
            let next = lines.get(i + 1).map(|l| l.trim()).unwrap_or("");
            if !is_delimiter_row(next) {
                out.push(format!(
                    "{n}: a table row after a blank line: the blank line splits the table"
                ));
            }
            continue;
        }
        if trimmed.starts_with('#')
            || trimmed.starts_with('<')
            || trimmed.starts_with('>')
            || trimmed.starts_with('!')
            || trimmed.starts_with('[')
        {
            continue;
        }
        if indented && item.is_none() && !in_list {
            out.push(format!(
                "{n}: an indented block that follows no list item (a lost first line?): {trimmed}"
            ));
            continue;
        }
        // A list item may start lowercase (`- item one`), and so may the
        // rest of one or what goes on after a fence; a paragraph not.
        if item.is_some() || indented || follows_fence {
            continue;
        }
        if let Some(why) = mid_sentence(trimmed) {
            out.push(format!("{n}: starts mid-sentence ({why}): {trimmed}"));
        }
    }
    if let Some((n, _)) = fence {
        out.push(format!("{n}: a fence that is never closed"));
    }
    out
}

/// The text of a list item (`- x`, `* x`, `1. x`), if `line` is one.
fn list_item(line: &str) -> Option<&str> {
    if let Some(rest) = line.strip_prefix("- ").or_else(|| line.strip_prefix("* ")) {
        return Some(rest);
    }
    let digits = line.chars().take_while(char::is_ascii_digit).count();
    if digits > 0 {
        return line[digits..].strip_prefix(". ");
    }
    None
}

fn is_delimiter_row(line: &str) -> bool {
    line.starts_with('|')
        && line.contains('-')
        && line.chars().all(|c| matches!(c, '|' | '-' | ':' | ' '))
}

/// Why `text` reads as the middle of a sentence, if it does.
fn mid_sentence(text: &str) -> Option<&'static str> {
    let first = text.chars().next()?;
    if matches!(first, ',' | ';' | ')' | '.') {
        return Some("punctuation first");
    }
    if !first.is_lowercase() {
        return None;
    }
    let word = text
        .split(|c: char| c.is_whitespace() || c == ':' || c == ',' || c == '(')
        .next()
        .unwrap_or("");
    let word = word.trim_end_matches(['.', ':', ',']);
    (!LOWERCASE_NAMES
        .iter()
        .any(|n| n.trim_end_matches('.') == word || word.starts_with(&format!("{n}'"))))
    .then_some("a lowercase word first")
}

#[test]
fn every_page_keeps_its_tables_paragraphs_and_fences_whole() {
    let mut files = Vec::new();
    pages(root(), &mut files);
    files.sort();
    assert!(files.len() > 10, "found only {files:?}");
    let mut found = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let rel = file.strip_prefix(root()).unwrap().display().to_string();
        found.extend(problems(&text).into_iter().map(|p| format!("{rel}:{p}")));
    }
    assert!(found.is_empty(), "\n{}", found.join("\n"));
}

/// The checker on the faults it exists for, and on what it must let be.
#[test]
fn the_checker_sees_a_split_table_and_a_lost_first_line() {
    let split = "| a | b |\n|---|---|\n| 1 | 2 |\n\n| 3 | 4 |\n";
    assert_eq!(problems(split).len(), 1, "{:?}", problems(split));
    let two_tables = "| a |\n|---|\n| 1 |\n\n| b |\n|---|\n| 2 |\n";
    assert!(problems(two_tables).is_empty());
    let lost =
        "There are two ways:\n\n  URL, shimgate posts to it.\n- **It compresses** one path.\n";
    assert_eq!(problems(lost).len(), 1, "{:?}", problems(lost));
    let lower = "A paragraph.\n\nand then it goes on.\n";
    assert_eq!(problems(lower).len(), 1);
    let fine = "Intro:\n\n- item one\n\n  more of item one\n\n```sh\n\nlowercase in code\n```\n\nbili starts it.\n";
    assert!(problems(fine).is_empty(), "{:?}", problems(fine));
    assert_eq!(problems("```\nopen\n").len(), 1);
}
