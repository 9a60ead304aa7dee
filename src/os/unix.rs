//! The Unix half of [`crate::os`]: signals, modes, socket flags.

use std::io;
use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
use std::path::Path;

use rustix::net::RecvFlags;
use tokio::signal::unix::{signal, SignalKind};

use super::{Event, LoginEntry, Shell, Source, TrustStore};

/// TERM (what `kill`, systemd and launchd send) and INT (Ctrl-C) stop; HUP
/// reloads `serve` (and ends a process with nothing to reload, as the
/// terminal it ran in closing does).
pub(super) fn sources() -> Vec<(Event, io::Result<Source>)> {
    [
        (Event::Stop("SIGTERM"), SignalKind::terminate()),
        (Event::Stop("SIGINT"), SignalKind::interrupt()),
        (Event::Reload("SIGHUP"), SignalKind::hangup()),
    ]
    .into_iter()
    .map(|(event, kind)| {
        let source = signal(kind).map(|mut s| Source::new(event, move |cx| s.poll_recv(cx)));
        (event, source)
    })
    .collect()
}

/// Mode 0600.
pub(super) fn owner_only() -> Option<std::fs::Permissions> {
    Some(std::fs::Permissions::from_mode(0o600))
}

/// The folders to `dir`, those it creates mode 0700 (one that exists is
/// left as it is: it may be the user's own).
pub(super) fn create_owner_only_dir_all(dir: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Its mode lets the group or others read (or write, or run) it.
pub(super) fn readable_by_others(file: &Path) -> bool {
    std::fs::metadata(file).is_ok_and(|m| m.permissions().mode() & 0o077 != 0)
}

/// The owner's write bit is off: `mode 444`.
pub(super) fn read_only(p: &std::fs::Permissions) -> Option<String> {
    let mode = p.mode();
    (mode & 0o200 == 0).then(|| format!("mode {:o}", mode & 0o777))
}

/// The socket is tokio's, non-blocking already; DONTWAIT says so again
/// for this one call.
pub(super) const PEEK_NOW: RecvFlags = RecvFlags::PEEK.union(RecvFlags::DONTWAIT);

/// macOS starts per-user programs with launchd; the other Unixes shimgate
/// runs on, with systemd's user manager.
pub const LOGIN_ENTRY: LoginEntry = if cfg!(target_os = "macos") {
    LoginEntry::LaunchAgent
} else {
    LoginEntry::SystemdUser
};

/// macOS keeps trusted roots in the login keychain; the other Unixes'
/// browsers and desktop apps read the user's NSS database.
pub const TRUST_STORE: TrustStore = if cfg!(target_os = "macos") {
    TrustStore::Keychain
} else {
    TrustStore::Nss
};

/// How a program named without a folder is found, for messages.
pub const PROGRAM_SEARCH: &str = "on PATH";

/// What a Unix terminal runs (sh, bash, zsh).
pub const DEFAULT_SHELL: Shell = Shell::Sh;

/// `exec`: the client takes this process's place (its pid, its signals,
/// its exit status), so nothing stands between it and the terminal.
pub(super) fn run_in_place(
    mut command: std::process::Command,
    typed: &std::ffi::OsStr,
) -> io::Result<i32> {
    use std::os::unix::process::CommandExt as _;
    Err(command.arg0(typed).exec())
}

fn no_registry() -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        "the Windows registry exists on Windows only",
    )
}

/// The Windows Run value `name` (none here).
pub fn run_value(_name: &str) -> io::Result<Option<String>> {
    Ok(None)
}

/// Sets the Windows Run value `name` (an error here).
pub fn set_run_value(_name: &str, _data: &str) -> io::Result<()> {
    Err(no_registry())
}

/// Deletes the Windows Run value `name` (an error here).
pub fn delete_run_value(_name: &str) -> io::Result<()> {
    Err(no_registry())
}

#[cfg(test)]
mod tests {
    use super::super::*;
    use std::os::unix::fs::PermissionsExt as _;

    /// The real handlers, fed real signals sent to this test process:
    /// once tokio's handler is installed the signal is its, not the
    /// default action's, so the test process lives on.
    #[tokio::test]
    async fn real_signals_arrive_as_their_events() {
        use rustix::process::{getpid, kill_process, Signal};
        let mut events = stop_events();
        kill_process(getpid(), Signal::HUP).unwrap();
        assert_eq!(events.next().await, Event::Reload("SIGHUP"));
        kill_process(getpid(), Signal::TERM).unwrap();
        assert_eq!(events.next().await, Event::Stop("SIGTERM"));
    }

    #[test]
    fn an_owner_only_file_and_its_new_folder_have_narrow_modes() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("state");
        let file = dir.join("key");
        std::fs::write(tmp.path().join("wide"), "x").unwrap();
        write_owner_only(&file, b"abc\n").unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&file), 0o600);
        assert_eq!(mode(&dir), 0o700);
        assert!(!readable_by_others(&file));
        // A secret once left wide open is narrowed when rewritten.
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(readable_by_others(&file));
        write_owner_only(&file, b"def\n").unwrap();
        assert_eq!(mode(&file), 0o600);
    }

    #[test]
    fn a_replaced_file_keeps_its_mode_exactly() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("shimgate.toml");
        std::fs::write(&file, "a").unwrap();
        // Group-writable: a umask of 022 would narrow it at creation.
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o664)).unwrap();
        replace_atomically(&file, b"b").unwrap();
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o664);
        assert_eq!(
            read_only(&file),
            None,
            "writable by its owner: not read-only"
        );
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o444)).unwrap();
        assert_eq!(read_only(&file).as_deref(), Some("mode 444"));
    }

    #[test]
    fn there_is_no_run_value_here() {
        assert_eq!(run_value("shimgate").unwrap(), None);
        assert!(set_run_value("shimgate", "x").is_err());
    }
}
