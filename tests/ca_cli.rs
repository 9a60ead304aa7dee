//! `shimgate ca` through the real binary, in a temporary home: `path`
//! makes the CA once and prints its root's path alone; `show` says what it
//! may sign and where its files are, never a key; the key file is
//! owner-only; `rotate` gives a new fingerprint; a CA made for other names
//! is reported by `show` and `check-config`, not remade; `trust` and
//! `untrust` round trip through the user's NSS database with `certutil`
//! (Linux; the macOS and Windows stores are built but driven only there),
//! touching nothing they did not add.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn shimgate(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_shimgate"))
        .args(args)
        .current_dir(home)
        .env("HOME", home)
        .env("USERPROFILE", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_STATE_HOME", home.join("state"))
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

fn ok(out: &Output) -> (String, String) {
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(!stdout.contains("PRIVATE KEY") && !stderr.contains("PRIVATE KEY"));
    (stdout, stderr)
}

/// The `fingerprint` line of `ca show`.
fn fingerprint(home: &Path) -> String {
    let (out, _) = ok(&shimgate(home, &["ca", "show"]));
    out.lines()
        .find_map(|l| l.strip_prefix("fingerprint"))
        .unwrap()
        .trim()
        .trim_start_matches("SHA-256 ")
        .to_owned()
}

#[test]
fn path_makes_the_ca_once_show_describes_it_rotate_replaces_it() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let (out, err) = ok(&shimgate(home, &["ca", "path"]));
    let root = PathBuf::from(out.trim());
    assert_eq!(out.lines().count(), 1, "the path alone: {out}");
    assert_eq!(root, home.join("state/shimgate/ca/root.pem"));
    assert!(root.is_file());
    assert!(err.contains("made a new local CA"), "{err}");
    let (again, err) = ok(&shimgate(home, &["ca", "path"]));
    assert_eq!(again, out);
    assert!(err.is_empty(), "made once: {err}");
    let key = root.with_file_name("intermediate.key");
    assert!(!shimgate::app::secret_file::readable_by_others(&key));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(
            std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
    let (show, _) = ok(&shimgate(home, &["ca", "show"]));
    for want in [
        "(give this file to clients)",
        "may sign      localhost, qoder.sh, qoder.com.cn, mchost.guru, trae.ai, trae.cn, 127.0.0.0/8, ::1/128 (critical name constraints",
        "(owner only)",
        "root key      not kept",
        "OS store      not added",
        "config        [ca] names match the CA",
    ] {
        assert!(show.contains(want), "{want:?} in:\n{show}");
    }
    let before = fingerprint(home);
    assert_eq!(before.len(), 95, "{before}");
    let (rotated, _) = ok(&shimgate(home, &["ca", "rotate"]));
    let after = fingerprint(home);
    assert_ne!(before, after);
    assert!(
        rotated.contains(&format!("made a new local CA: SHA-256 {after}")),
        "{rotated}"
    );
    assert!(
        rotated.contains(&format!("replaced SHA-256 {before}")),
        "{rotated}"
    );
    assert!(rotated.contains("give clients the new root"), "{rotated}");
}

#[test]
fn a_ca_made_for_other_names_is_reported_not_remade() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let config = home.join("shimgate.toml");
    std::fs::write(&config, "[ca]\nnames = [\"qoder.sh\"]\n").unwrap();
    let c = config.to_str().unwrap();
    ok(&shimgate(home, &["ca", "path", "--config", c]));
    let before = fingerprint(home);
    let (checked, warned) = ok(&shimgate(home, &["check-config", c]));
    assert!(checked.contains(": ok"), "{checked}");
    assert!(warned.is_empty(), "{warned}");
    std::fs::write(&config, "[ca]\nnames = [\"qoder.sh\", \"example.org\"]\n").unwrap();
    let (_, warned) = ok(&shimgate(home, &["check-config", c]));
    assert!(
        warned.contains("[ca] names lists example.org but the CA cannot sign for it")
            && warned.contains("shimgate ca rotate"),
        "{warned}"
    );
    let (show, _) = ok(&shimgate(home, &["ca", "show", "--config", c]));
    assert!(
        show.contains("warning       local CA: [ca] names lists example.org"),
        "{show}"
    );
    assert_eq!(
        fingerprint(home),
        before,
        "never remade behind the user's back"
    );
    let (_, warned) = ok(&shimgate(home, &["ca", "rotate", "--config", c]));
    assert!(warned.is_empty(), "{warned}");
    let (show, _) = ok(&shimgate(home, &["ca", "show", "--config", c]));
    assert!(
        show.contains("may sign      localhost, qoder.sh, example.org, 127.0.0.0/8"),
        "{show}"
    );
}

fn certutil(args: &[&str]) -> String {
    let out = Command::new("certutil").args(args).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn trust_and_untrust_round_trip_in_the_nss_database_touching_nothing_else() {
    if !cfg!(target_os = "linux") {
        return;
    }
    // Any exit status: `certutil` has no `--version`.
    if Command::new("certutil").arg("--version").output().is_err() {
        let why = "no `certutil` on PATH: install libnss3-tools";
        assert!(
            std::env::var("SHIMGATE_REQUIRE_EXTERNAL").as_deref() != Ok("1"),
            "{why}"
        );
        eprintln!("SKIPPED: {why}");
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let db = format!("sql:{}", home.join(".pki/nssdb").display());
    let (added, _) = ok(&shimgate(home, &["ca", "trust"]));
    let fp = fingerprint(home);
    let label = format!("shimgate local CA {}", &fp.replace(':', "")[..16]);
    assert!(
        added.contains(&format!("added the local CA (SHA-256 {fp})")),
        "{added}"
    );
    assert!(added.contains("NODE_EXTRA_CA_CERTS="), "{added}");
    assert!(certutil(&["-L", "-d", &db]).contains(&label));
    let (again, _) = ok(&shimgate(home, &["ca", "trust"]));
    assert!(again.starts_with("already added"), "{again}");
    let (show, _) = ok(&shimgate(home, &["ca", "show"]));
    assert!(show.contains(&format!("as {label:?} since")), "{show}");
    // A certificate shimgate did not add, and a record line that points at
    // it (hand-edited): neither is touched.
    let other = tempfile::tempdir().unwrap();
    ok(&shimgate(other.path(), &["ca", "path"]));
    let foreign = other.path().join("state/shimgate/ca/root.pem");
    let out = Command::new("certutil")
        .args([
            "-A",
            "-d",
            &db,
            "-t",
            "C,,",
            "-n",
            "someone else's CA",
            "-i",
        ])
        .arg(&foreign)
        .output()
        .unwrap();
    assert!(out.status.success());
    let record_file = home.join("state/shimgate/ca-trust.json");
    let mut record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&record_file).unwrap()).unwrap();
    let mut forged = record["entries"][0].clone();
    forged["label"] = "someone else's CA".into();
    record["entries"].as_array_mut().unwrap().push(forged);
    std::fs::write(&record_file, serde_json::to_vec(&record).unwrap()).unwrap();
    let (removed, _) = ok(&shimgate(home, &["ca", "untrust"]));
    assert!(
        removed.contains(&format!("removed SHA-256 {fp} ({label:?})")),
        "{removed}"
    );
    assert!(
        removed.contains("(\"someone else's CA\") was no longer in"),
        "{removed}"
    );
    let listed = certutil(&["-L", "-d", &db]);
    assert!(!listed.contains(&label), "{listed}");
    assert!(listed.contains("someone else's CA"), "left alone: {listed}");
    assert!(!record_file.exists(), "the record goes with its last line");
    let (nothing, _) = ok(&shimgate(home, &["ca", "untrust"]));
    assert!(
        nothing.starts_with("nothing of shimgate's recorded"),
        "{nothing}"
    );
}
