//! The command blocks of README.md and of every `docs/*.md` page that work
//! offline run here, so the pages cannot drift from the binary. A fenced
//! block preceded by `<!-- readme-test -->` runs in bash (`set -e`) in a
//! scratch folder of its page (one folder per page, blocks in page order)
//! with the test build of `shimgate` first on `PATH`; one preceded by
//! `<!-- readme-test: write FILE -->` is written to `FILE` there first (and,
//! for a `.toml`, must pass `shimgate check-config`): that is how the full
//! config example of `docs/configuration.md` stays a valid config.
//!
//! **Output lines.** In a block that runs, the lines starting `# ` directly
//! under a command (no blank line between) are what that command prints,
//! stdout and stderr together, and must match it line for line: a line
//! that is only `…` stands for any number of lines, a `…` inside a line
//! for any text. A comment that is not output goes on the command's own
//! line (`cmd   # why`) or after a blank line. The scratch folder is the
//! reader's home folder and shows as `/home/you` (`HOME` is set to it and
//! the `XDG_*` folders are unset). A command spans lines with a trailing
//! `\` or a here-document.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::Command;

enum Block {
    Run(Script),
    Write(String, String),
}

/// A block to run: its text, and each command with the output shown
/// under it.
struct Script {
    text: String,
    commands: Vec<Shown>,
}

/// One command of a block and the `# ` lines under it.
struct Shown {
    command: String,
    output: Vec<String>,
}

/// What the run prints before each command, so its output can be cut
/// into one piece per command.
const MARK: &str = "@@readme-test command@@";

/// Reads a block's commands and their shown output.
fn script(body: &str) -> Script {
    let mut commands: Vec<Shown> = Vec::new();
    let mut heredoc: Option<String> = None;
    let mut continues = false;
    let mut collecting = false;
    for line in body.lines() {
        if let Some(end) = &heredoc {
            if line.trim() == end {
                heredoc = None;
                collecting = true;
            }
            continue;
        }
        if continues {
            continues = line.ends_with('\\');
            collecting = !continues;
            continue;
        }
        if line.trim().is_empty() {
            collecting = false;
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            if let (true, Some(last)) = (collecting, commands.last_mut()) {
                last.output
                    .push(comment.strip_prefix(' ').unwrap_or(comment).to_owned());
            }
            continue;
        }
        commands.push(Shown {
            command: line.to_owned(),
            output: Vec::new(),
        });
        heredoc = here_document(line);
        continues = line.ends_with('\\');
        collecting = heredoc.is_none() && !continues;
    }
    // The run: stderr with stdout, in order, and a mark before each command.
    let mut text = String::from("exec 2>&1\n");
    let mut heredoc: Option<String> = None;
    let mut continues = false;
    for line in body.lines() {
        let starts =
            heredoc.is_none() && !continues && !line.trim().is_empty() && !line.starts_with('#');
        if starts {
            text.push_str(&format!("echo '{MARK}'\n"));
        }
        text.push_str(line);
        text.push('\n');
        match &heredoc {
            Some(end) if line.trim() == end => heredoc = None,
            Some(_) => {}
            None if continues || starts => {
                continues = line.ends_with('\\');
                heredoc = here_document(line);
            }
            None => {}
        }
    }
    Script { text, commands }
}

/// The word that ends a here-document `line` opens (`<<EOF`, `<<'EOF'`).
fn here_document(line: &str) -> Option<String> {
    let rest = line.split("<<").nth(1)?.trim_start_matches('-').trim();
    let word: String = rest
        .trim_matches(|c| c == '\'' || c == '"')
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!word.is_empty()).then_some(word)
}

/// Whether `shown` (with its `…` wildcards) matches `printed`.
fn output_matches(shown: &[String], printed: &[&str]) -> bool {
    match shown.split_first() {
        None => printed.is_empty(),
        Some((first, rest)) if first.trim() == "…" => {
            (0..=printed.len()).any(|k| output_matches(rest, &printed[k..]))
        }
        Some((first, rest)) => printed
            .split_first()
            .is_some_and(|(line, more)| line_matches(first, line) && output_matches(rest, more)),
    }
}

/// One shown line against one printed line, `…` matching any text.
fn line_matches(shown: &str, printed: &str) -> bool {
    let (shown, printed) = (shown.trim_end(), printed.trim_end());
    let parts: Vec<&str> = shown.split('…').collect();
    let [first, middle @ .., last] = parts.as_slice() else {
        return shown == printed;
    };
    let Some(mut rest) = printed.strip_prefix(first) else {
        return false;
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// Each command's printed lines, from a run's output cut at the marks.
fn printed_per_command(stdout: &str, home: &Path) -> Vec<Vec<String>> {
    let home = home.display().to_string();
    let mut out: Vec<Vec<String>> = Vec::new();
    for line in stdout.replace(&home, "/home/you").lines() {
        if line == MARK {
            out.push(Vec::new());
        } else if let Some(current) = out.last_mut() {
            current.push(line.trim_end().to_owned());
        }
    }
    for lines in &mut out {
        while lines.last().is_some_and(|l| l.is_empty()) {
            lines.pop();
        }
    }
    out
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
            None => out.push(Block::Run(script(&body))),
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
        .env_remove("XDG_STATE_HOME")
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("XDG_DATA_HOME")
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
                let out = run(dir.path(), &path, &script.text);
                let stdout = String::from_utf8_lossy(&out.stdout);
                assert!(
                    out.status.success(),
                    "{page}: block failed ({}):\n{}\noutput:\n{stdout}",
                    out.status,
                    script.text,
                );
                let printed = printed_per_command(&stdout, dir.path());
                for (shown, printed) in script.commands.iter().zip(&printed) {
                    if shown.output.is_empty() {
                        continue;
                    }
                    let lines: Vec<&str> = printed.iter().map(String::as_str).collect();
                    assert!(
                        output_matches(&shown.output, &lines),
                        "{page}: `{}` prints other lines than the `# ` lines under it \
                         (a comment that is not output goes on the command's line or \
                         after a blank line; tests/readme.rs says how lines match)\n\
                         shown:\n{}\nprinted:\n{}",
                        shown.command,
                        shown.output.join("\n"),
                        lines.join("\n")
                    );
                }
            }
        }
    }
    count
}

/// The reader of output lines, on the shapes the pages use.
#[test]
fn shown_output_is_read_and_matched_as_documented() {
    let block = "shimgate check-config a.toml   # why\n# a.toml: ok (…)\n\n# a comment\n\
                 printf 'x\\n' \\\n  > f\n# never shown\ncat <<EOF\nhi\nEOF\n# hi\n";
    let s = script(block);
    let shown: Vec<(&str, Vec<&str>)> = s
        .commands
        .iter()
        .map(|c| {
            (
                c.command.as_str(),
                c.output.iter().map(String::as_str).collect(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        [
            (
                "shimgate check-config a.toml   # why",
                vec!["a.toml: ok (…)"]
            ),
            ("printf 'x\\n' \\", vec!["never shown"]),
            ("cat <<EOF", vec!["hi"]),
        ]
    );
    assert_eq!(s.text.matches(MARK).count(), 3);
    let lines = |v: &[&str]| v.iter().map(|l| l.to_string()).collect::<Vec<_>>();
    assert!(output_matches(
        &lines(&["a", "…", "z"]),
        &["a", "b", "c", "z"]
    ));
    assert!(output_matches(&lines(&["a", "…"]), &["a"]));
    assert!(!output_matches(&lines(&["a"]), &["a", "b"]));
    assert!(output_matches(
        &lines(&["x: ok (…) end"]),
        &["x: ok (1 2) end"]
    ));
    assert!(!output_matches(
        &lines(&["x: ok (…) end"]),
        &["x: ok (1 2) END"]
    ));
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
