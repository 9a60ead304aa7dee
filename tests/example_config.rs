//! The sample config the release archives carry (`shimgate.example.toml`)
//! is one `check-config` accepts, as a user would check it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;

#[test]
fn the_sample_config_in_the_archives_checks_ok() {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/shimgate.example.toml");
    let out = Command::new(env!("CARGO_BIN_EXE_shimgate"))
        .args(["check-config", file])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains(": ok (qoder 1 routes"), "{text}");
}
