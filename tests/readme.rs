//! README.md's command blocks that work offline run here, so the README
//! cannot drift from the binary. A fenced block preceded by
//! `<!-- readme-test -->` runs in bash (`set -e`) in a scratch folder with
//! the test build of `shimgate` first on `PATH`; one preceded by
//! `<!-- readme-test: write FILE -->` is written to `FILE` there first (and,
//! for a `.toml`, must pass `shimgate check-config`). The full config
//! example under "Configuration" is checked the same way.
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

/// The first ```toml block after `heading`.
fn toml_after(readme: &str, heading: &str) -> String {
    let from = &readme[readme.find(heading).unwrap()..];
    let start = from.find("```toml\n").unwrap() + "```toml\n".len();
    from[start..start + from[start..].find("```").unwrap()].to_string()
}

fn shimgate_on_path(dir: &Path) -> String {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_shimgate"), bin.join("shimgate")).unwrap();
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
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

#[test]
fn the_readme_s_offline_command_blocks_run() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = shimgate_on_path(dir.path());
    let found = blocks(&readme);
    assert!(found.len() >= 4, "the marked blocks went missing");
    for block in found {
        match block {
            Block::Write(file, body) => {
                std::fs::write(dir.path().join(&file), body).unwrap();
                if file.ends_with(".toml") {
                    let out = run(dir.path(), &path, &format!("shimgate check-config {file}"));
                    assert!(
                        out.status.success(),
                        "{file}: {}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
            }
            Block::Run(script) => {
                let out = run(dir.path(), &path, &script);
                assert!(
                    out.status.success(),
                    "README block failed ({}):\n{script}\nstdout:\n{}\nstderr:\n{}",
                    out.status,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
}

#[test]
fn the_readme_s_full_config_example_is_a_valid_config() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = shimgate_on_path(dir.path());
    let example = toml_after(&readme, "## Configuration");
    // The example's exec codec names a script the reader writes: check the
    // rest of it with the plain codec.
    let example = example
        .replace("codec = \"exec\"", "codec = \"plain\"")
        .replace("codec_command", "# codec_command");
    std::fs::write(dir.path().join("full.toml"), example).unwrap();
    let out = run(dir.path(), &path, "shimgate check-config full.toml");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
