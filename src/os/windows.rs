//! The Windows half of [`crate::os`]: console events, the profile folder's
//! ACL, socket flags, the Run value.
//!
//! Console events: tokio's handler holds the OS's notification thread for
//! the events that end the process (the console closed, logoff,
//! shutdown), so a drain runs until the process returns or Windows' own
//! limit for them (about 5 s for a closed console) runs out. Windows has
//! no HUP: `serve` reloads on `POST /reload` or the panel, as everywhere.
//!
//! "Owner only": a file takes the ACL of its folder, and the user's
//! profile folder (where the default state dir, `%LOCALAPPDATA%\shimgate`,
//! lies) grants the user, SYSTEM and the administrators alone. shimgate
//! reads no ACL itself (that needs the Win32 security API, unsafe code
//! this crate forbids), so a secret outside the profile folder is reported
//! as possibly readable by others.

use std::io;
use std::path::Path;

use rustix::net::RecvFlags;
use tokio::signal::windows as w;
use winreg::enums::{HKEY_CURRENT_USER, KEY_READ, KEY_SET_VALUE};
use winreg::RegKey;

use super::{Event, LoginEntry, Shell, Source, TrustStore};

/// Every console event stops: Ctrl-C, Ctrl-Break, the console closed,
/// logoff, shutdown.
pub(super) fn sources() -> Vec<(Event, io::Result<Source>)> {
    fn each<T: Send + 'static>(
        event: Event,
        made: io::Result<T>,
        poll: fn(&mut T, &mut std::task::Context<'_>) -> std::task::Poll<Option<()>>,
    ) -> (Event, io::Result<Source>) {
        let source = made.map(|mut s| Source::new(event, move |cx| poll(&mut s, cx)));
        (event, source)
    }
    vec![
        each(Event::Stop("Ctrl-C"), w::ctrl_c(), w::CtrlC::poll_recv),
        each(
            Event::Stop("Ctrl-Break"),
            w::ctrl_break(),
            w::CtrlBreak::poll_recv,
        ),
        each(
            Event::Stop("console closed"),
            w::ctrl_close(),
            w::CtrlClose::poll_recv,
        ),
        each(
            Event::Stop("logoff"),
            w::ctrl_logoff(),
            w::CtrlLogoff::poll_recv,
        ),
        each(
            Event::Stop("system shutdown"),
            w::ctrl_shutdown(),
            w::CtrlShutdown::poll_recv,
        ),
    ]
}

/// Nothing to set: the folder's ACL decides (see the module doc).
pub(super) fn owner_only() -> Option<std::fs::Permissions> {
    None
}

/// The folders to `dir`, with the ACL their parents pass on.
pub(super) fn create_owner_only_dir_all(dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dir)
}

/// It lies outside the user's profile folder (or no profile is known).
pub(super) fn readable_by_others(file: &Path) -> bool {
    match dirs::home_dir() {
        Some(profile) => {
            let file = std::path::absolute(file).unwrap_or_else(|_| file.to_path_buf());
            !is_inside(&file, &profile)
        }
        None => true,
    }
}

/// Whether `file` lies inside `folder`, compared case-insensitively as
/// Windows compares paths.
fn is_inside(file: &Path, folder: &Path) -> bool {
    let lower = |p: &Path| p.display().to_string().to_lowercase();
    let (file, folder) = (lower(file), lower(folder));
    file.strip_prefix(folder.trim_end_matches('\\'))
        .is_some_and(|rest| rest.starts_with('\\'))
}

/// The read-only attribute is set.
pub(super) fn read_only(p: &std::fs::Permissions) -> Option<String> {
    p.readonly().then(|| "the read-only attribute".to_owned())
}

/// Windows has no DONTWAIT and needs none: the socket is non-blocking
/// (tokio's).
pub(super) const PEEK_NOW: RecvFlags = RecvFlags::PEEK;

/// A value under `HKCU\…\Run`.
pub const LOGIN_ENTRY: LoginEntry = LoginEntry::RunKey;

/// The current user's root store (`Cert:\CurrentUser\Root`).
pub const TRUST_STORE: TrustStore = TrustStore::UserRoot;

/// How a program named without a folder is found, for messages (npm's
/// shims are `.cmd` files).
pub const PROGRAM_SEARCH: &str = "on PATH (with any PATHEXT ending: .exe, .cmd, …)";

/// What a Windows terminal opens by default (Windows Terminal and the
/// Start menu's own: PowerShell).
pub const DEFAULT_SHELL: Shell = Shell::PowerShell;

/// The client as a child, waited for. The console sends Ctrl-C and
/// Ctrl-Break to every process attached to it: the child gets them and
/// decides; this process holds tokio's handlers meanwhile, which answer
/// "handled", so it is not ended before the child and passes its exit
/// code on (a code of 32 bits, as Windows has them).
pub(super) fn run_in_place(
    command: std::process::Command,
    _typed: &std::ffi::OsStr,
) -> io::Result<i32> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let _ctrl_c = w::ctrl_c()?;
        let _ctrl_break = w::ctrl_break()?;
        let status = tokio::process::Command::from(command)
            .spawn()?
            .wait()
            .await?;
        Ok(status.code().unwrap_or(1))
    })
}

/// The key Windows reads at the user's logon, under HKCU.
const RUN_KEY: &str = r"Software\Microsoft\Windows\CurrentVersion\Run";

/// The Run value `name`, if set.
pub fn run_value(name: &str) -> io::Result<Option<String>> {
    let key = match RegKey::predef(HKEY_CURRENT_USER).open_subkey_with_flags(RUN_KEY, KEY_READ) {
        Ok(k) => k,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    match key.get_value::<String, _>(name) {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Sets the Run value `name` to `data`.
pub fn set_run_value(name: &str, data: &str) -> io::Result<()> {
    let (key, _) = RegKey::predef(HKEY_CURRENT_USER).create_subkey(RUN_KEY)?;
    key.set_value(name, &data.to_owned())
}

/// Deletes the Run value `name`.
pub fn delete_run_value(name: &str) -> io::Result<()> {
    RegKey::predef(HKEY_CURRENT_USER)
        .open_subkey_with_flags(RUN_KEY, KEY_SET_VALUE)?
        .delete_value(name)
}

#[cfg(test)]
mod tests {
    use super::super::*;
    use super::is_inside;

    /// A secret in the profile folder is the user's alone; one outside it
    /// (Wine maps the Linux root to `Z:\`) is not vouched for.
    #[test]
    fn a_secret_outside_the_profile_folder_is_reported() {
        let profile = dirs::home_dir().unwrap();
        let inside = profile
            .join("AppData")
            .join("Local")
            .join("shimgate-test")
            .join("secret");
        write_owner_only(&inside, b"abc\n").unwrap();
        assert!(!readable_by_others(&inside));
        std::fs::remove_dir_all(inside.parent().unwrap()).unwrap();
        assert!(readable_by_others(Path::new(r"Z:\tmp\secret")));
        assert!(!is_inside(
            Path::new(r"C:\users\rootx\a"),
            Path::new(r"C:\users\root")
        ));
        assert!(is_inside(
            Path::new(r"C:\Users\Root\a"),
            Path::new(r"c:\users\root")
        ));
    }

    /// The child's exit code comes back (found the way `launch` finds it).
    #[test]
    fn a_child_in_this_process_s_place_passes_its_exit_code_on() {
        let cmd = which::which("cmd").unwrap();
        let args = ["/c".into(), "exit".into(), "7".into()];
        let code = run_in_place(&cmd, std::ffi::OsStr::new("cmd"), &args, &[]).unwrap();
        assert_eq!(code, 7);
    }

    #[test]
    fn a_read_only_attribute_is_named() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("shimgate.toml");
        std::fs::write(&file, "a").unwrap();
        let mut p = std::fs::metadata(&file).unwrap().permissions();
        p.set_readonly(true);
        std::fs::set_permissions(&file, p).unwrap();
        assert_eq!(read_only(&file).as_deref(), Some("the read-only attribute"));
    }
}
