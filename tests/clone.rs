//! What a clone holds does not depend on where it sits: no file in the
//! repository names the absolute folder this clone (or the workspace around
//! it) lives in. Paths to neighbours are relative to the clone
//! (`../shared/third_party/…`) or come from the environment
//! (`SHIMGATE_BILI`), so a fresh clone anywhere else runs the same.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::Command;

/// The files git would commit here: tracked ones and new ones not ignored.
fn repo_files(root: &Path) -> Option<Vec<String>> {
    let out = Command::new("git")
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .current_dir(root)
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    Some(
        String::from_utf8_lossy(&out.stdout)
            .split('\0')
            .filter(|f| !f.is_empty())
            .map(str::to_owned)
            .collect(),
    )
}

#[test]
fn no_file_names_the_absolute_folder_the_clone_sits_in() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // The folder around the clone (the workspace beside it), or the clone
    // itself when it sits at the top of the file system.
    let around = root
        .parent()
        .filter(|p| p.parent().is_some())
        .unwrap_or(root);
    let needle = format!("{}/", around.display());
    let Some(files) = repo_files(root) else {
        eprintln!("SKIPPED: not a git checkout (or no git): nothing to list");
        return;
    };
    assert!(
        !files.is_empty(),
        "git listed no files in {}",
        root.display()
    );
    let mut named = Vec::new();
    for file in &files {
        let Ok(bytes) = std::fs::read(root.join(file)) else {
            continue; // deleted in the work tree, not yet in the index
        };
        for (n, line) in bytes.split(|b| *b == b'\n').enumerate() {
            if contains(line, needle.as_bytes()) {
                named.push(format!(
                    "{file}:{}: {}",
                    n + 1,
                    String::from_utf8_lossy(line).trim()
                ));
            }
        }
    }
    assert!(
        named.is_empty(),
        "these lines name the absolute folder {needle:?} the clone sits in \
         (use a path relative to the clone, or an environment variable):\n  {}",
        named.join("\n  ")
    );
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
