//! The workspace's `rust-version` is the true minimum: no crate that
//! `Cargo.lock` pins (for any platform, dev-dependencies included) declares
//! a higher one, so a user with the toolchain README names can build what
//! the lock file says. `cargo update` that pulls a crate needing a newer
//! Rust fails here, and the fix is to raise `rust-version` (and README's
//! Install) or to pin the crate lower.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;

use serde_json::Value;

/// `1.89` or `1.89.0` as (1, 89, 0).
fn version(text: &str) -> (u64, u64, u64) {
    let mut parts = text.split('.').map(|p| p.parse::<u64>().unwrap_or(0));
    let mut next = || parts.next().unwrap_or(0);
    (next(), next(), next())
}

#[test]
fn no_locked_crate_needs_a_newer_rust_than_ours() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--locked", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).unwrap();
    let packages = meta["packages"].as_array().unwrap();
    let ours = packages
        .iter()
        .find(|p| p["name"] == "shimgate")
        .and_then(|p| p["rust_version"].as_str())
        .expect("shimgate states a rust-version");
    let higher: Vec<String> = packages
        .iter()
        .filter_map(|p| {
            let needs = p["rust_version"].as_str()?;
            let (name, v) = (p["name"].as_str()?, p["version"].as_str()?);
            (version(needs) > version(ours)).then(|| format!("{name} {v} needs Rust {needs}"))
        })
        .collect();
    assert!(
        higher.is_empty(),
        "rust-version is {ours}, but the lock file pins:\n{}",
        higher.join("\n")
    );
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    assert!(
        readme.contains(&format!("Rust {ours} or newer")),
        "README's Install names another minimum than rust-version {ours}"
    );
}
