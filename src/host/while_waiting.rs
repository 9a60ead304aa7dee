//! Work that is not on the way to the first token, done while the request
//! is upstream: the return leg's accounting, and in direct mode the read of
//! the agent's request the answer's translators need. One thread (the
//! default runtime) does it in the time the upstream takes anyway, instead
//! of before the send.

use std::future::Future;

/// Polls `work`, and runs `side` once: the first time `work` waits (when
/// its request is upstream and the answer not yet back), or when it is
/// done if it never waited.
pub(super) async fn while_waiting<F: Future>(work: F, side: impl FnOnce()) -> F::Output {
    let mut work = std::pin::pin!(work);
    let mut side = Some(side);
    let out = std::future::poll_fn(|cx| {
        let polled = work.as_mut().poll(cx);
        if polled.is_pending() {
            if let Some(side) = side.take() {
                side();
            }
        }
        polled
    })
    .await;
    if let Some(side) = side {
        side();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_side_work_runs_once_while_the_work_waits_else_after_it() {
        use std::sync::Mutex;
        let log = Mutex::new(Vec::new());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let work = async {
            log.lock().unwrap().push("sent");
            let _ = rx.await;
            log.lock().unwrap().push("answered");
        };
        let answer = async {
            tokio::task::yield_now().await;
            log.lock().unwrap().push("upstream answers");
            let _ = tx.send(());
        };
        let side = || log.lock().unwrap().push("accounted");
        tokio::join!(while_waiting(work, side), answer);
        assert_eq!(
            *log.lock().unwrap(),
            ["sent", "accounted", "upstream answers", "answered"]
        );

        let ready = Mutex::new(Vec::new());
        while_waiting(async { ready.lock().unwrap().push("done") }, || {
            ready.lock().unwrap().push("accounted")
        })
        .await;
        assert_eq!(*ready.lock().unwrap(), ["done", "accounted"]);
    }
}
