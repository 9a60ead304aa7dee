//! Every difference between the operating systems shimgate runs on, behind
//! one function each, with its `unix.rs` and `windows.rs` halves (the way
//! tokio's `signal` module and `dirs-sys` are built): the rest of the code
//! calls these and never says `cfg`.
//!
//! - **Stop and reload events** ([`stop_events`]): one source for `serve`,
//!   `compressor` and `demo`, so all three drain on every way a user or
//!   the system asks a process to end (Unix: SIGTERM, SIGINT, and SIGHUP,
//!   which reloads `serve`; Windows: Ctrl-C, Ctrl-Break, the console
//!   closed, logoff, shutdown).
//! - **Files written whole** ([`replace_atomically`],
//!   [`write_owner_only`]): every file shimgate writes (secrets, the route
//!   state, the user's config, the autostart entries) goes through a
//!   temporary file beside it, synced, then renamed over it; a failure
//!   leaves the old file and no temporary one.
//! - **Who may read or write a file** ([`readable_by_others`],
//!   [`read_only`]).
//! - **Socket flags** ([`nothing_to_read`]).
//! - **The login entry this OS uses** ([`LOGIN_ENTRY`]) and the Windows
//!   Run value ([`run_value`]).
//! - **The shell a user types in** ([`DEFAULT_SHELL`]: what `shimgate env`
//!   writes for when none is named).
//! - **Running a client in this process's place** ([`run_in_place`], for
//!   `shimgate launch`: its exit code, its signals, its console), found
//!   as this OS's shells find programs ([`PROGRAM_SEARCH`] says how).

use std::ffi::OsStr;
use std::future::{poll_fn, Future as _};
use std::io::Write as _;
use std::path::Path;
use std::task::{Context, Poll};

#[cfg(unix)]
mod unix;
#[cfg(unix)]
use unix as sys;
#[cfg(windows)]
mod windows;
#[cfg(windows)]
use windows as sys;

pub use sys::{
    delete_run_value, run_value, set_run_value, DEFAULT_SHELL, LOGIN_ENTRY, PROGRAM_SEARCH,
    TRUST_STORE,
};

/// What a stop or reload event asks of the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// End, draining what is in flight; the name says what arrived
    /// (`SIGTERM`, `Ctrl-Break`, `console closed` …).
    Stop(&'static str),
    /// Read the config again (`SIGHUP`; Windows has no such event).
    Reload(&'static str),
}

/// Polls one event stream: `Some(())` each time it fires, `None` once it
/// never will again.
type PollFn = Box<dyn FnMut(&mut Context<'_>) -> Poll<Option<()>> + Send>;

/// One event source: what it means and how to poll it (a signal stream,
/// or in tests a channel).
pub struct Source {
    event: Event,
    poll: PollFn,
}

impl Source {
    /// A source that yields `event` each time `poll` is ready with
    /// `Some(())`; `None` means it will never fire again.
    pub fn new(
        event: Event,
        poll: impl FnMut(&mut Context<'_>) -> Poll<Option<()>> + Send + 'static,
    ) -> Source {
        Source {
            event,
            poll: Box::new(poll),
        }
    }
}

/// The installed stop and reload handlers. Install them before the
/// listeners start, so a signal sent as soon as the `listening` lines
/// appear reaches them and not the OS's default action (an end without a
/// drain).
pub struct Events {
    sources: Vec<Source>,
}

/// Installs this OS's stop and reload handlers (inside a tokio runtime).
/// A handler that cannot be installed is logged and the others kept; with
/// none at all, Ctrl-C alone stops.
pub fn stop_events() -> Events {
    let mut sources = Vec::new();
    for (event, installed) in sys::sources() {
        match installed {
            Ok(source) => sources.push(source),
            Err(e) => tracing::error!(?event, error = %e, "cannot install a stop handler"),
        }
    }
    if sources.is_empty() {
        sources.push(ctrl_c_only());
    }
    Events::from_sources(sources)
}

/// Ctrl-C through tokio's portable handler, once.
fn ctrl_c_only() -> Source {
    let mut waiting = Some(Box::pin(tokio::signal::ctrl_c()));
    Source::new(Event::Stop("Ctrl-C"), move |cx| {
        let Some(future) = waiting.as_mut() else {
            return Poll::Ready(None);
        };
        match future.as_mut().poll(cx) {
            Poll::Ready(_) => {
                waiting = None;
                Poll::Ready(Some(()))
            }
            Poll::Pending => Poll::Pending,
        }
    })
}

impl Events {
    /// Events from these sources (what [`stop_events`] installs, or a
    /// test's own).
    pub fn from_sources(sources: Vec<Source>) -> Events {
        Events { sources }
    }

    /// The next event, from whichever source fires first. A source that
    /// ends is dropped; with none left this waits forever, as a process
    /// with no handler would.
    pub async fn next(&mut self) -> Event {
        poll_fn(|cx| {
            let mut i = 0;
            while i < self.sources.len() {
                match (self.sources[i].poll)(cx) {
                    Poll::Ready(Some(())) => return Poll::Ready(self.sources[i].event),
                    Poll::Ready(None) => drop(self.sources.remove(i)),
                    Poll::Pending => i += 1,
                }
            }
            Poll::Pending
        })
        .await
    }

    /// For a process with nothing to reload (the compressor, the demo):
    /// the first event of any kind ends it, a hang-up (a terminal closed)
    /// included. Returns what arrived.
    pub async fn until_any(mut self) -> &'static str {
        match self.next().await {
            Event::Stop(why) | Event::Reload(why) => why,
        }
    }
}

/// Writes `bytes` to `path` so a reader sees the old file or the new one,
/// never half of one: a temporary file beside it (created when its folder
/// is missing), synced, then renamed over it. The file keeps the
/// permissions of the one it replaces; a new one is readable by its owner
/// only. On failure the old file stays and the temporary one is removed.
pub fn replace_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let keep = std::fs::metadata(path).ok().map(|m| m.permissions());
    std::fs::create_dir_all(parent(path))?;
    replace(path, bytes, keep.or_else(sys::owner_only))
}

/// [`replace_atomically`] for a file only its owner may read (a key, a
/// token, the route state), whatever the file it replaces allowed: mode
/// 0600 on Unix, in a folder created 0700 when missing; on Windows the
/// ACL its folder passes on (see [`readable_by_others`]).
pub fn write_owner_only(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    sys::create_owner_only_dir_all(parent(path))?;
    replace(path, bytes, sys::owner_only())
}

/// The folder `path` is in (`.` for a bare name).
fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

fn replace(
    path: &Path,
    bytes: &[u8],
    permissions: Option<std::fs::Permissions>,
) -> std::io::Result<()> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let prefix = format!(".{}.", name.as_deref().unwrap_or("shimgate"));
    // Removed when dropped unpersisted: any `?` below, or a failed rename,
    // leaves nothing behind. Created with a random name and `O_EXCL`, so
    // two writers of one file never share a temporary file.
    let mut tmp = tempfile::Builder::new()
        .prefix(&prefix)
        .suffix(".tmp")
        .tempfile_in(parent(path))?;
    // Set on the open file, not at creation: the umask does not narrow it.
    if let Some(p) = permissions {
        tmp.as_file().set_permissions(p)?;
    }
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map(|_| ()).map_err(|e| e.error)
}

/// Whether others than the owner may read `file` (Unix: its mode; Windows:
/// whether it lies outside the user's profile folder, whose ACL keeps
/// other users out).
pub fn readable_by_others(file: &Path) -> bool {
    sys::readable_by_others(file)
}

/// Why `file` must not be written, when its permissions say read-only
/// (`mode 444`, `the read-only attribute`): the user's choice, kept even
/// by a process that could write it anyway.
pub fn read_only(file: &Path) -> Option<String> {
    std::fs::metadata(file)
        .ok()
        .and_then(|m| sys::read_only(&m.permissions()))
}

/// Whether a connected socket has nothing to read now (a read would
/// wait): asked of the socket itself with a peek that takes nothing, not
/// of the runtime's readiness, which learns of a close only when its
/// reactor next runs. A close (EOF, a reset) or bytes sent unasked answer
/// `false`.
pub fn nothing_to_read(socket: &tokio::net::TcpStream) -> bool {
    let mut byte = [0u8; 1];
    matches!(
        rustix::net::recv(socket, &mut byte[..], sys::PEEK_NOW),
        Err(rustix::io::Errno::WOULDBLOCK)
    )
}

/// The kind of entry that starts shimgate at login on this OS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoginEntry {
    /// A systemd user unit (Linux and other Unixes but macOS).
    SystemdUser,
    /// A LaunchAgent (macOS).
    LaunchAgent,
    /// A value under `HKCU\…\Run` (Windows).
    RunKey,
}

/// The per-user store of trusted roots `shimgate ca trust` adds to on
/// this OS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrustStore {
    /// The user's NSS database (`~/.pki/nssdb`: Chromium, Electron apps).
    Nss,
    /// The login keychain (macOS).
    Keychain,
    /// The current user's Root store (Windows).
    UserRoot,
}

/// A shell whose syntax `shimgate env` writes its variables in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shell {
    /// sh, bash, zsh (and Git Bash on Windows): `export X='…'`.
    Sh,
    /// PowerShell, Windows' own or `pwsh` elsewhere: `$env:X = '…'`.
    PowerShell,
    /// Windows' `cmd.exe`: `set "X=…"`.
    Cmd,
}

impl Shell {
    /// Every shell, in the order `--help` lists them.
    pub const ALL: [Shell; 3] = [Shell::Sh, Shell::PowerShell, Shell::Cmd];

    /// Its name on the command line (`--shell sh`).
    pub fn name(self) -> &'static str {
        match self {
            Shell::Sh => "sh",
            Shell::PowerShell => "powershell",
            Shell::Cmd => "cmd",
        }
    }
}

/// Runs `program` (found on `PATH` already: on Windows an npm `.cmd`
/// shim as well as an `.exe`) with `args` and the variables `vars` added
/// to this process's environment, in this process's place: it gets the
/// terminal, stdin, stdout and stderr, Ctrl-C and every other signal, and
/// its exit code is the one to exit with. Unix: `exec` (the process
/// becomes the client, as `cargo run` does; this returns only when that
/// fails); Windows, which has no `exec`: a child, waited for, while this
/// process ignores the Ctrl-C and Ctrl-Break the console sends to both
/// (the child decides what they mean). `typed` is the name the user typed
/// (the child's `argv[0]` on Unix).
pub fn run_in_place(
    program: &Path,
    typed: &OsStr,
    args: &[std::ffi::OsString],
    vars: &[(String, String)],
) -> std::io::Result<i32> {
    let mut command = std::process::Command::new(program);
    command.args(args);
    for (name, value) in vars {
        command.env(name, value);
    }
    sys::run_in_place(command, typed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc;

    fn channel_source(event: Event) -> (mpsc::UnboundedSender<()>, Source) {
        let (tx, mut rx) = mpsc::unbounded_channel();
        (tx, Source::new(event, move |cx| rx.poll_recv(cx)))
    }

    #[tokio::test]
    async fn each_source_yields_its_own_event_in_the_order_they_fire() {
        let (term, a) = channel_source(Event::Stop("SIGTERM"));
        let (hup, b) = channel_source(Event::Reload("SIGHUP"));
        let mut events = Events::from_sources(vec![a, b]);
        hup.send(()).unwrap();
        assert_eq!(events.next().await, Event::Reload("SIGHUP"));
        hup.send(()).unwrap();
        assert_eq!(events.next().await, Event::Reload("SIGHUP"));
        term.send(()).unwrap();
        assert_eq!(events.next().await, Event::Stop("SIGTERM"));
    }

    #[tokio::test(start_paused = true)]
    async fn an_ended_source_is_dropped_and_the_others_still_fire() {
        let (closed, a) = channel_source(Event::Stop("Ctrl-C"));
        let (brk, b) = channel_source(Event::Stop("Ctrl-Break"));
        drop(closed);
        let mut events = Events::from_sources(vec![a, b]);
        let waiting = tokio::time::timeout(std::time::Duration::from_secs(5), events.next());
        assert!(waiting.await.is_err(), "nothing fired yet");
        brk.send(()).unwrap();
        assert_eq!(events.next().await, Event::Stop("Ctrl-Break"));
        assert_eq!(events.sources.len(), 1);
    }

    #[tokio::test]
    async fn a_process_with_nothing_to_reload_stops_on_a_hang_up() {
        let (hup, a) = channel_source(Event::Reload("SIGHUP"));
        hup.send(()).unwrap();
        assert_eq!(Events::from_sources(vec![a]).until_any().await, "SIGHUP");
    }

    #[tokio::test]
    async fn this_os_handlers_install() {
        let events = stop_events();
        assert!(!events.sources.is_empty());
    }

    #[test]
    fn a_replaced_file_is_whole_and_no_temporary_file_stays() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("sub").join("state.json");
        replace_atomically(&file, b"one").unwrap();
        replace_atomically(&file, b"two").unwrap();
        assert_eq!(std::fs::read(&file).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(file.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["state.json"]);
    }

    #[test]
    fn a_failed_write_leaves_the_old_file_and_nothing_else() {
        let tmp = tempfile::tempdir().unwrap();
        // The target is a folder: the rename fails after the temporary
        // file was written.
        let target = tmp.path().join("taken");
        std::fs::create_dir(&target).unwrap();
        std::fs::write(target.join("inside"), "kept").unwrap();
        assert!(replace_atomically(&target, b"new").is_err());
        let names: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["taken"]);
        assert_eq!(
            std::fs::read_to_string(target.join("inside")).unwrap(),
            "kept"
        );
    }

    #[test]
    fn a_secret_is_readable_by_its_owner_only() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("secret");
        write_owner_only(&file, b"abc\n").unwrap();
        assert_eq!(std::fs::read(&file).unwrap(), b"abc\n");
        // A temporary folder outside the profile is not vouched for on
        // Windows (see `readable_by_others`); the halves test that.
        let _ = readable_by_others(&file);
        assert_eq!(read_only(&file), None);
    }

    #[test]
    fn a_read_only_file_says_so() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("shimgate.toml");
        std::fs::write(&file, "").unwrap();
        let mut p = std::fs::metadata(&file).unwrap().permissions();
        p.set_readonly(true);
        std::fs::set_permissions(&file, p).unwrap();
        assert!(read_only(&file).is_some());
        assert_eq!(read_only(&tmp.path().join("absent")), None);
    }
}
