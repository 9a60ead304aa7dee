//! What stops or reloads `serve` from outside, per OS. Unix: TERM and INT
//! stop, HUP reloads. Windows: Ctrl-C, Ctrl-Break, closing the console,
//! logging off and shutting down stop (Windows has no HUP: reload is `POST
//! /reload` or the panel, as everywhere). Either way a stop drains the
//! streams in flight (`server::Running::shutdown`).
//!
//! On Windows, tokio's handler holds the OS's notification thread for the
//! events that end the process (close, logoff, shutdown), so the drain runs
//! until `serve` returns or Windows' own limit for them (about 5 s for a
//! closed console) runs out.

use tracing::info;

use crate::server;

/// The handlers, installed before the listeners start so a signal sent as
/// soon as the `listening` lines appear reaches them.
pub struct Stop {
    #[cfg(unix)]
    signals: Option<[tokio::signal::unix::Signal; 3]>,
    #[cfg(windows)]
    events: Option<WindowsEvents>,
}

#[cfg(windows)]
struct WindowsEvents {
    c: tokio::signal::windows::CtrlC,
    brk: tokio::signal::windows::CtrlBreak,
    close: tokio::signal::windows::CtrlClose,
    logoff: tokio::signal::windows::CtrlLogoff,
    shutdown: tokio::signal::windows::CtrlShutdown,
}

impl Stop {
    #[cfg(unix)]
    pub fn install() -> Stop {
        use tokio::signal::unix::{signal, SignalKind};
        let signals = match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
            signal(SignalKind::hangup()),
        ) {
            (Ok(term), Ok(int), Ok(hup)) => Some([term, int, hup]),
            _ => {
                tracing::error!("cannot install signal handlers; stopping on ctrl-c only");
                None
            }
        };
        Stop { signals }
    }

    #[cfg(windows)]
    pub fn install() -> Stop {
        use tokio::signal::windows as w;
        let events = match (
            w::ctrl_c(),
            w::ctrl_break(),
            w::ctrl_close(),
            w::ctrl_logoff(),
            w::ctrl_shutdown(),
        ) {
            (Ok(c), Ok(brk), Ok(close), Ok(logoff), Ok(shutdown)) => Some(WindowsEvents {
                c,
                brk,
                close,
                logoff,
                shutdown,
            }),
            _ => {
                tracing::error!("cannot install console handlers; stopping on ctrl-c only");
                None
            }
        };
        Stop { events }
    }

    /// Waits for a stop signal, reloading the config on each HUP.
    #[cfg(unix)]
    pub async fn wait(self, running: &server::Running) {
        let Some([mut term, mut int, mut hup]) = self.signals else {
            let _ = tokio::signal::ctrl_c().await;
            return;
        };
        loop {
            tokio::select! {
                _ = term.recv() => return info!("stopping (SIGTERM)"),
                _ = int.recv() => return info!("stopping (SIGINT)"),
                _ = hup.recv() => match running.app.reload() {
                    Ok(_) => info!("config reloaded (SIGHUP)"),
                    Err(e) => tracing::warn!(error = %e, "config reload rejected; the old config stays"),
                },
            }
        }
    }

    /// Waits for a console event that stops the process.
    #[cfg(windows)]
    pub async fn wait(self, _running: &server::Running) {
        let Some(mut e) = self.events else {
            let _ = tokio::signal::ctrl_c().await;
            return;
        };
        let why = tokio::select! {
            _ = e.c.recv() => "Ctrl-C",
            _ = e.brk.recv() => "Ctrl-Break",
            _ = e.close.recv() => "console closed",
            _ = e.logoff.recv() => "logoff",
            _ = e.shutdown.recv() => "system shutdown",
        };
        info!("stopping ({why})");
    }
}
