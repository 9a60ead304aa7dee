//! What the machine under a latency run does that moves its figures and is
//! no proxy's doing: the host's CPU steal over the phase, and how the
//! guest's idle CPUs wait for work.
//!
//! The second matters on a VM. With the `haltpoll` idle driver and
//! `guest_halt_poll_ns` at 0 (as this workplace's VMs boot), an idle vCPU
//! halts at once, and waking it for the next request took the host 40–51 µs
//! at p50, against 5 µs when the guest polls first (the mainline default,
//! 200 µs). At concurrency 1 about half of every proxy's wakes find an idle
//! CPU, so that wait is about half of what a hop adds at p50, and it varies
//! from run to run (`benches/README.md`, "2026-12-03 (20:30 UTC)"). The load
//! tool only reports the setting; changing it is the machine owner's call.

/// `/proc/stat`'s first line: (steal, all) ticks of every CPU since boot.
/// Steal is time the hypervisor ran someone else while this VM had work:
/// on a shared host it is what makes one run's tails unlike the next's.
/// All = user through steal (the guest fields after them are already in
/// user).
pub fn cpu_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let fields: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|f| f.parse().ok())
        .collect();
    Some((*fields.get(7)?, fields.iter().sum()))
}

/// The share of CPU time stolen between two [`cpu_ticks`] readings.
pub fn steal_between(before: Option<(u64, u64)>, after: Option<(u64, u64)>) -> Option<f64> {
    let ((s0, a0), (s1, a1)) = before.zip(after)?;
    (a1 > a0).then(|| s1.saturating_sub(s0) as f64 / (a1 - a0) as f64)
}

/// How an idle CPU waits, in a few words: the cpuidle driver, and for
/// `haltpoll` how long it polls before it halts. `None` off Linux or
/// where the kernel does not say.
pub fn idle_wait() -> Option<String> {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    let driver = read("/sys/devices/system/cpu/cpuidle/current_driver")?;
    if driver != "haltpoll" {
        return Some(format!("idle driver {driver}"));
    }
    let poll = read("/sys/module/haltpoll/parameters/guest_halt_poll_ns")
        .and_then(|s| s.parse::<u64>().ok());
    Some(match poll {
        Some(0) => "haltpoll, halts at once (guest_halt_poll_ns 0)".to_string(),
        Some(ns) => format!("haltpoll, polls up to {} µs first", ns / 1000),
        None => "haltpoll".to_string(),
    })
}
