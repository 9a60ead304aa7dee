//! `shimgate autostart` through the real binary on Linux, in a temporary
//! home: `enable` writes the systemd user unit and its `default.target.wants`
//! link for the config given, `status` names it and asks the configured
//! listener (nothing, then a running shimgate), `disable` removes exactly
//! those two files. (Windows: `.ci/wine/smoke` does the same with the Run
//! value; the macOS plist's content is a unit test of `autostart::launchd`.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![cfg(target_os = "linux")]

use std::path::Path;
use std::process::{Command, Output};

fn shimgate(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_shimgate"))
        .args(args)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_STATE_HOME", home.join("state"))
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A free loopback port (bound, then let go).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn enable_status_disable_round_trip_with_a_systemd_user_unit() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let config = home.join("my config.toml");
    let (q, t) = (free_port(), free_port());
    std::fs::write(
        &config,
        format!(
            "[shims.qoder]\nlisten = \"127.0.0.1:{q}\"\n[shims.trae]\nlisten = \"127.0.0.1:{t}\"\n"
        ),
    )
    .unwrap();
    let units = home.join(".config/systemd/user");
    let unit = units.join("shimgate.service");
    let link = units.join("default.target.wants/shimgate.service");

    let before = text(&shimgate(home, &["autostart", "status"]));
    assert!(before.contains("autostart: nothing at"), "{before}");

    let enabled = text(&shimgate(
        home,
        &["autostart", "enable", "--config", config.to_str().unwrap()],
    ));
    assert!(
        enabled.contains(&format!("installed {}", unit.display())),
        "{enabled}"
    );
    let written = std::fs::read_to_string(&unit).unwrap();
    let exe = std::fs::canonicalize(env!("CARGO_BIN_EXE_shimgate")).unwrap();
    assert!(
        written.contains(&format!(
            "ExecStart=\"{}\" \"serve\" \"--config\" \"{}\"",
            exe.display(),
            config.display()
        )),
        "{written}"
    );
    assert_eq!(std::fs::read_link(&link).unwrap(), unit);

    let status = text(&shimgate(home, &["autostart", "status"]));
    assert!(status.contains("runs: "), "{status}");
    assert!(
        status.contains(&format!("listener trae 127.0.0.1:{t}: nothing answers")),
        "{status}"
    );

    // A shimgate serving that config: status finds it.
    let mut served = Command::new(env!("CARGO_BIN_EXE_shimgate"))
        .args(["serve", "--config", config.to_str().unwrap()])
        .env("XDG_STATE_HOME", home.join("state"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(served.stdout.take().unwrap()));
    while !lines.next().unwrap().unwrap().starts_with("listening trae") {}
    let status = text(&shimgate(home, &["autostart", "status"]));
    let _ = served.kill();
    let _ = served.wait();
    assert!(
        status.contains(&format!(
            "listener qoder 127.0.0.1:{q}: a shimgate answers (version {})",
            env!("CARGO_PKG_VERSION")
        )),
        "{status}"
    );

    let disabled = text(&shimgate(home, &["autostart", "disable"]));
    assert!(
        disabled.contains(&format!("removed {}", link.display())),
        "{disabled}"
    );
    assert!(
        disabled.contains(&format!("removed {}", unit.display())),
        "{disabled}"
    );
    assert!(!unit.exists() && !link.exists());
    let again = text(&shimgate(home, &["autostart", "disable"]));
    assert!(again.contains("nothing of shimgate's installed"), "{again}");
}
