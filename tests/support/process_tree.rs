//! A child and everything it starts, ended together: the Qoder CLI runs
//! shells, git and hooks of its own, and a test that times it out (or is
//! done with it) must leave none of them behind. On Unix the child leads a
//! new process group and the group gets SIGKILL; on Windows `taskkill /T`
//! ends the tree. The one place these tests differ by OS.

use tokio::process::Command;

/// Makes the child lead its own process group (Unix); nothing on Windows,
/// where the tree is found from the child's id.
#[cfg(unix)]
pub fn own_group(cmd: &mut Command) {
    cmd.process_group(0);
}

#[cfg(windows)]
pub fn own_group(_cmd: &mut Command) {}

/// Ends the child `pid` and everything in its group (a group already gone
/// is not an error).
#[cfg(unix)]
pub fn kill_tree(pid: u32) {
    use rustix::process::{kill_process_group, Pid, Signal};
    if let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) {
        let _ = kill_process_group(pid, Signal::KILL);
    }
}

#[cfg(windows)]
pub fn kill_tree(pid: u32) {
    let _ = std::process::Command::new("taskkill")
        .args(["/T", "/F", "/PID", &pid.to_string()])
        .status();
}
