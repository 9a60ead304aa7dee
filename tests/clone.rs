//! What CI runs does not depend on where the clone sits: `.ci/run` and the
//! scripts it runs (`.ci/*`, `fuzz/ci.sh`) name the clone's files relative to
//! the clone (`cd "$(dirname "$0")/.."`, `../shared/third_party/…`) or take
//! them from the environment (`SHIMGATE_BILI`), never by an absolute path of
//! the workspace. Only those few scripts are checked: other files name
//! `/tmp/…` or `/home/…` on purpose as examples, and a check that read them
//! would itself fail by where the clone sits (a clone under `/tmp/x/`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

/// First folders of an absolute path that belong to the system, not to a
/// workspace: the tools (`/usr/bin/chromium`), devices (`2>/dev/null`) and
/// the scratch folder (`${HOME:-/tmp}`).
const SYSTEM_ROOTS: &[&str] = &[
    "usr", "bin", "sbin", "lib", "dev", "etc", "proc", "sys", "opt", "var", "tmp",
];

/// The scripts CI runs: every file in `.ci/`, and each `*.sh` that `.ci/run`
/// names (`fuzz/ci.sh`).
fn ci_scripts(root: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root.join(".ci"))
        .expect(".ci/ is in the clone")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    let run = std::fs::read_to_string(root.join(".ci/run")).expect(".ci/run is in the clone");
    for word in run.split(|c: char| c.is_whitespace() || "\"'=;()".contains(c)) {
        let path = root.join(word);
        if word.ends_with(".sh") && !word.starts_with('/') && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    files.dedup();
    files
}

/// Absolute paths written in a shell line whose first folder is not a
/// system one. A path starts at a `/` that begins a word (after a space,
/// quote, `=`, `:`, `(`, `>` or `<`) and is followed by a letter, so
/// `$(dirname "$0")/..`, `target/release` and `http://…` are not paths here.
fn workspace_paths(line: &str) -> Vec<String> {
    let bytes = line.as_bytes();
    let mut found = Vec::new();
    for (i, b) in bytes.iter().enumerate() {
        let starts_word = i == 0 || b" \t\"'=:(<>,[".contains(&bytes[i - 1]);
        let then_letter = bytes.get(i + 1).is_some_and(u8::is_ascii_alphabetic);
        if *b != b'/' || !starts_word || !then_letter {
            continue;
        }
        let path: String = line[i..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || "/._-".contains(*c))
            .collect();
        let first = path[1..].split('/').next().unwrap_or_default();
        if !SYSTEM_ROOTS.contains(&first) {
            found.push(path);
        }
    }
    found
}

#[test]
fn ci_scripts_name_the_clone_s_files_relative_to_the_clone() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let scripts = ci_scripts(root);
    assert!(
        scripts.iter().any(|p| p.ends_with(".ci/run")),
        "found no .ci/run among {scripts:?}"
    );
    // The clone's own folder and the one around it, however deep they sit
    // (`/tmp/x/shimgate`, `/home/you/shimgate`); a top-level parent (`/tmp`)
    // is a system root and the line check below covers the rest.
    let mut needles = vec![format!("{}/", root.display())];
    if let Some(around) = root.parent().filter(|p| p.components().count() > 2) {
        needles.push(format!("{}/", around.display()));
    }
    let mut named = Vec::new();
    for script in &scripts {
        let text = std::fs::read_to_string(script).expect("CI scripts are text");
        let name = script.strip_prefix(root).unwrap_or(script).display();
        for (n, line) in text.lines().enumerate() {
            let mut bad = workspace_paths(line);
            bad.extend(needles.iter().filter(|s| line.contains(*s)).cloned());
            if !bad.is_empty() {
                named.push(format!("{name}:{}: {bad:?} in {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        named.is_empty(),
        "CI scripts name absolute folders of a workspace (use a path relative to \
         the clone, or an environment variable):\n  {}",
        named.join("\n  ")
    );
}

#[test]
fn a_workspace_path_is_told_from_system_paths_and_relative_ones() {
    for line in [
        r#"cd "$(dirname "$0")/..""#,
        "bin=target/release/shimgate",
        r#"if [[ ! -x "${SHIMGATE_CHROMIUM:-/usr/bin/chromium}" ]]; then"#,
        "cargo fuzz --version >/dev/null 2>&1",
        r#"corpus_root="${FUZZ_CORPUS_DIR:-${HOME:-/tmp}/.cache/shimgate}""#,
        "-f ../shared/third_party/billion-context/run.sh",
        "curl -s http://127.0.0.1:47001/ui",
        "#!/usr/bin/env bash",
    ] {
        assert_eq!(workspace_paths(line), Vec::<String>::new(), "{line}");
    }
    for (line, path) in [
        ("SHIMGATE_BILI=/home/you/shared/b", "/home/you/shared/b"),
        (r#"cd "/srv/ws/shimgate""#, "/srv/ws/shimgate"),
        ("x=(/root/clone)", "/root/clone"),
    ] {
        assert_eq!(workspace_paths(line), vec![path.to_owned()], "{line}");
    }
}
