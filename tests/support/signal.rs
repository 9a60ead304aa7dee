//! Signalling a child process by PID (`bin::Served`, `bili::Bili`). The
//! tests run on a Unix host, where a signal is sent with rustix: TERM and
//! INT stop shimgate gracefully, HUP reloads it (also when the child is
//! `shimgate.exe` under Wine, which turns INT into Ctrl-C). Windows has no
//! way to send another console process a signal without sharing its
//! console: a Windows-hosted run can only end the child (`taskkill /F`),
//! so the graceful-stop tests are for a Unix host (CI runs them against the
//! Windows binary through Wine, `.ci/windows`).

/// Sends `name` (`HUP`, `INT`, `TERM`) to `pid`; a process already gone is
/// not an error.
#[cfg(unix)]
pub fn send(pid: u32, name: &str) {
    use rustix::process::{kill_process, Pid, Signal};
    let sig = match name {
        "HUP" => Signal::HUP,
        "INT" => Signal::INT,
        "TERM" => Signal::TERM,
        other => panic!("no signal {other} here: add it"),
    };
    if let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) {
        let _ = kill_process(pid, sig);
    }
}

/// Ends `pid` (see the module doc: no graceful signal on Windows).
#[cfg(windows)]
pub fn send(pid: u32, name: &str) {
    eprintln!("{name} is not sendable on Windows: ending process {pid}");
    let _ = std::process::Command::new("taskkill")
        .args(["/F", "/PID", &pid.to_string()])
        .status();
}
