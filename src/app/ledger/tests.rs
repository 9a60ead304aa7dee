//! The ledger as the runtime drives it: turns and posts booked when their
//! last holder lets go, the day boundary on a paused clock, and the book
//! read back from its file after a restart.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::*;

fn shanghai_config(dir: &std::path::Path) -> Config {
    let mut c = Config::from_toml("[ordering]\nzone = \"Asia/Shanghai\"\n").unwrap();
    c.state_dir = dir.to_path_buf();
    c
}

/// 2026-12-06 15:59:00 UTC: 23:59 in Shanghai.
fn a_minute_to_midnight() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_572_740)
}

/// A turn of `agent` characters answered by one post of `sent` characters
/// for which the provider reported `prompt` tokens.
fn answered_turn(
    ledger: &Arc<Ledger>,
    config: &Config,
    rid: &str,
    agent: u64,
    sent: u64,
    prompt: u64,
) {
    let turn = ledger.open_turn(config, rid, "trae", "conv-1");
    let post = ledger.post(config, rid, ("trae", "conv-1"), false);
    post.measured(false, sent);
    post.agent_chars(|| Some(agent));
    drop(turn);
    let tap = post.tap(Box::new(Reported(prompt)));
    drop(tap);
    post.answered();
}

/// A translator that only reports usage (the tap reads its meter).
struct Reported(u64);

impl shimgate_shim_api::StreamTranslator for Reported {
    fn event(
        &mut self,
        _: &shimgate_shim_api::sse::SseEvent,
        _: &mut bytes::BytesMut,
    ) -> shimgate_shim_api::FrameClass {
        shimgate_shim_api::FrameClass::Content
    }

    fn fail(&mut self, _: &shimgate_shim_api::Failure, _: &mut bytes::BytesMut) {}

    fn meter(&self) -> shimgate_shim_api::translate::Meter {
        shimgate_shim_api::translate::Meter {
            prompt_tokens: Some(self.0),
            completion_tokens: Some(3),
            ..Default::default()
        }
    }
}

#[tokio::test(start_paused = true)]
async fn today_starts_afresh_at_midnight_in_the_zone_on_a_paused_clock() {
    let tmp = tempfile::tempdir().unwrap();
    let config = shanghai_config(tmp.path());
    let start = tokio::time::Instant::now();
    let base = a_minute_to_midnight();
    let clock: Clock = Arc::new(move || base + start.elapsed());
    let ledger = Ledger::with_clock(&config, clock);
    // The tap saw no content frame (its translator was never fed): the
    // chain's commit says it answered.
    answered_turn(&ledger, &config, "r1", 4000, 1000, 250);
    let today = ledger.today(config.ordering.zone);
    assert_eq!(
        (today.calls, today.agent_tokens, today.sent_tokens),
        (1, 1000, 250)
    );
    tokio::time::advance(Duration::from_secs(120)).await;
    assert_eq!(
        ledger.today(config.ordering.zone),
        Figures::default(),
        "a new day in Shanghai"
    );
    answered_turn(&ledger, &config, "r2", 2000, 2000, 500);
    let s = ledger.status(&config);
    assert_eq!(s["today"]["date"], "2026-12-07");
    assert_eq!(s["today"]["savedTokens"], 0);
    let days: Vec<_> = s["days"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["date"].clone())
        .collect();
    assert_eq!(
        days,
        vec![
            serde_json::json!("2026-12-07"),
            serde_json::json!("2026-12-06")
        ]
    );
    assert_eq!(s["days"][1]["savedTokens"], 750);
}

#[tokio::test]
async fn the_book_survives_a_restart_and_the_metrics_count_since_start() {
    let tmp = tempfile::tempdir().unwrap();
    let config = shanghai_config(tmp.path());
    let ledger = Ledger::open(&config);
    answered_turn(&ledger, &config, "r1", 4000, 1000, 250);
    answered_turn(&ledger, &config, "r2", 1000, 2000, 500);
    let t = ledger.totals("trae");
    assert_eq!((t.agent, t.sent, t.saved, t.added), (1250, 750, 750, 250));
    ledger.save().await;
    let before = ledger.status(&config);
    let again = Ledger::open(&config);
    let after = again.status(&config);
    assert_eq!(after["file"]["atStart"], "loaded");
    for key in ["today", "days", "conversations", "totals"] {
        assert_eq!(after[key], before[key], "{key}");
    }
    assert_eq!(after["conversations"][0]["netTokens"], 500);
    assert_eq!(again.totals("trae").agent, 0, "counters start at zero");
}

#[tokio::test]
async fn a_return_leg_request_after_its_call_is_over_is_the_compressor_s_own() {
    let tmp = tempfile::tempdir().unwrap();
    let mut config = shanghai_config(tmp.path());
    config.savings.file = false;
    let ledger = Ledger::open(&config);
    let post = ledger.post(&config, "gone", ("qoder", "conv-9"), false);
    post.measured(false, 400);
    drop(post.tap(Box::new(Reported(100))));
    post.answered();
    drop(post);
    let today = ledger.today(config.ordering.zone);
    assert_eq!(
        (today.calls, today.side_calls, today.side_tokens),
        (0, 1, 103)
    );
    assert_eq!(today.net(), -103);
}
