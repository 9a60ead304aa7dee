//! The command blocks of README.md and of every `docs/*.md` page that work
//! offline run here, so the pages cannot drift from the binary. A fenced
//! block preceded by `<!-- readme-test -->` runs in bash (`set -e`) in a
//! scratch folder of its page (one folder per page, blocks in page order)
//! with the test build of `shimgate` first on `PATH`; one preceded by
//! `<!-- readme-test: write FILE -->` is written to `FILE` there first (and,
//! for a `.toml`, must pass `shimgate check-config`): that is how the full
//! config example of `docs/configuration.md` stays a valid config.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::Command;

enum Block {
    Run(String),
    Write(String, String),
}

/// The marked blocks, in order.
fn blocks(readme: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut lines = readme.lines();
    while let Some(line) = lines.next() {
        let mark = line.trim();
        let Some(what) = mark
            .strip_prefix("<!-- readme-test")
            .and_then(|r| r.strip_suffix("-->"))
        else {
            continue;
        };
        let fence = lines.next().unwrap_or_default();
        assert!(
            fence.starts_with("```"),
            "a readme-test mark must precede a fence: {fence}"
        );
        let body: Vec<&str> = lines
            .by_ref()
            .take_while(|l| !l.starts_with("```"))
            .collect();
        let body = body.join("\n") + "\n";
        match what.trim().strip_prefix(": write ") {
            Some(file) => out.push(Block::Write(file.trim().to_string(), body)),
            None => out.push(Block::Run(body)),
        }
    }
    out
}

/// A `PATH` whose first folder holds `shimgate` (the binary under test),
/// so a block's `shimgate …` runs it as a user's would.
fn shimgate_on_path(dir: &Path) -> String {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let exe = format!("shimgate{}", std::env::consts::EXE_SUFFIX);
    link_or_copy(Path::new(env!("CARGO_BIN_EXE_shimgate")), &bin.join(exe));
    let mut paths = vec![bin];
    paths.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(paths)
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

#[cfg(unix)]
fn link_or_copy(from: &Path, to: &Path) {
    std::os::unix::fs::symlink(from, to).unwrap();
}

/// Windows links need a privilege a user may lack: a copy does the same.
#[cfg(windows)]
fn link_or_copy(from: &Path, to: &Path) {
    std::fs::copy(from, to).unwrap();
}

fn run(dir: &Path, path: &str, script: &str) -> std::process::Output {
    Command::new("bash")
        .arg("-ec")
        .arg(script)
        .current_dir(dir)
        .env("PATH", path)
        .env("HOME", dir)
        .env("XDG_STATE_HOME", dir.join("state"))
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

/// README.md, then every `docs/*.md` page by name: (path from the clone, text).
fn pages() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut docs: Vec<String> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    docs.sort();
    std::iter::once("README.md".to_string())
        .chain(docs)
        .map(|page| {
            let text = std::fs::read_to_string(root.join(&page)).unwrap();
            (page, text)
        })
        .collect()
}

/// Runs one page's marked blocks in a scratch folder of its own; how many ran.
fn run_page(page: &str, text: &str) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let path = shimgate_on_path(dir.path());
    let found = blocks(text);
    let count = found.len();
    for block in found {
        match block {
            Block::Write(file, body) => {
                std::fs::write(dir.path().join(&file), body).unwrap();
                if file.ends_with(".toml") {
                    let out = run(dir.path(), &path, &format!("shimgate check-config {file}"));
                    assert!(
                        out.status.success(),
                        "{page}: {file}: {}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
            }
            Block::Run(script) => {
                let out = run(dir.path(), &path, &script);
                assert!(
                    out.status.success(),
                    "{page}: block failed ({}):\n{script}\nstdout:\n{}\nstderr:\n{}",
                    out.status,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
    count
}

#[test]
fn the_offline_command_blocks_of_readme_and_docs_run() {
    let mut ran = Vec::new();
    for (page, text) in pages() {
        let count = run_page(&page, &text);
        ran.push((page, count));
    }
    let count = |name: &str| ran.iter().find(|(p, _)| p == name).map_or(0, |(_, n)| *n);
    assert!(
        count("README.md") >= 4,
        "README's marked blocks went missing: {ran:?}"
    );
    assert!(
        count("docs/configuration.md") >= 1,
        "the full config example is no longer marked: {ran:?}"
    );
}
