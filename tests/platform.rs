//! Every platform difference lives in `src/os/` (and the per-OS autostart
//! files, which are the platform's own formats): business code names no
//! `cfg(unix)`, `cfg(windows)` or `cfg(target_os)`, so a reader finds what
//! differs between Linux, macOS and Windows in one place, and a change on
//! one OS cannot hide in a branch the other OSes never build.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

/// Folders of `src/` where `cfg` on the OS belongs.
const PLATFORM_HOMES: &[&str] = &["os", "autostart"];

#[test]
fn only_the_platform_modules_name_an_os() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    for file in rust_files(&src) {
        let rel = file.strip_prefix(&src).unwrap();
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
