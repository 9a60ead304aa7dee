//! The pure rules of the savings book: what a call cost and saved, which
//! request answered, the estimate and its sign, the day in a zone, the bounds.

use std::time::Duration;

use super::*;

fn usage(prompt: Option<u64>, completion: Option<u64>) -> Usage {
    Usage {
        prompt,
        completion,
        cached: None,
        content_chars: 40,
    }
}

fn post(seq: u32, side: bool, sent_chars: u64, prompt: Option<u64>) -> PostResult {
    PostResult {
        seq,
        side,
        sent_chars,
        answered: true,
        answer: usage(prompt, Some(10)),
        failed_tokens: 0,
    }
}

fn turn(agent_chars: Option<u64>, posts: Vec<PostResult>) -> TurnRecord {
    TurnRecord {
        shim: "trae",
        conversation: "conv-1".into(),
        agent_chars,
        posts,
    }
}

fn priced(t: &TurnRecord) -> Figures {
    price(t, &mut Ratio::default())
}

#[test]
fn a_compressed_call_saves_the_provider_s_tokens_per_character_times_what_it_left_out() {
    let f = priced(&turn(Some(4000), vec![post(0, false, 1000, Some(250))]));
    assert_eq!(
        (f.calls, f.agent_tokens, f.sent_tokens, f.completion_tokens),
        (1, 1000, 250, 10)
    );
    assert_eq!((f.saved(), f.net(), f.estimated_calls), (750, 750, 0));
}

#[test]
fn a_call_sent_as_the_agent_sent_it_saves_nothing() {
    let f = priced(&turn(None, vec![post(0, false, 9000, Some(2000))]));
    assert_eq!((f.agent_tokens, f.sent_tokens, f.saved()), (2000, 2000, 0));
}

#[test]
fn a_call_the_compressor_made_longer_shows_a_negative_net() {
    // billion-context's first turns: its prompt, tools and tags, nothing folded.
    let f = priced(&turn(Some(1000), vec![post(0, false, 1400, Some(350))]));
    assert_eq!((f.agent_tokens, f.sent_tokens), (250, 350));
    assert_eq!((f.saved(), f.net()), (-100, -100));
}

#[test]
fn the_last_round_of_a_tool_loop_answered_and_the_earlier_ones_are_the_compressor_s_cost() {
    // Round 0: the model called `compress`; round 1: the agent's answer.
    let f = priced(&turn(
        Some(8000),
        vec![
            post(0, false, 2200, Some(550)),
            post(1, false, 2000, Some(500)),
        ],
    ));
    assert_eq!((f.calls, f.sent_tokens, f.agent_tokens), (1, 500, 2000));
    assert_eq!((f.side_calls, f.side_tokens), (1, 560));
    assert_eq!((f.saved(), f.net()), (1500, 940));
}

#[test]
fn a_summary_call_is_charged_whenever_it_came() {
    // awecompress: the summary (`stream: false`) before the agent's request.
    let f = priced(&turn(
        Some(8000),
        vec![
            post(0, true, 6000, Some(1500)),
            post(1, false, 2000, Some(500)),
        ],
    ));
    assert_eq!((f.side_calls, f.side_tokens, f.sent_tokens), (1, 1510, 500));
    assert_eq!(f.net(), 2000 - 500 - 1510);
    // The side request's order does not matter.
    let g = priced(&turn(
        Some(8000),
        vec![
            post(0, false, 2000, Some(500)),
            post(1, true, 6000, Some(1500)),
        ],
    ));
    assert_eq!(f, g);
}

#[test]
fn a_missing_or_malformed_usage_report_is_estimated_and_counted_so() {
    for reported in [None, Some(0)] {
        let f = priced(&turn(Some(4000), vec![post(0, false, 1000, reported)]));
        // One token per four characters before any report.
        assert_eq!((f.agent_tokens, f.sent_tokens), (1000, 250), "{reported:?}");
        assert_eq!(f.estimated_calls, 1);
        assert_eq!(f.saved(), 750);
    }
    let grown = priced(&turn(Some(1000), vec![post(0, false, 1400, None)]));
    assert!(grown.saved() < 0, "{grown:?}");
    // A provider's report teaches the shim's ratio for the next estimate.
    let mut ratio = Ratio::default();
    price(
        &turn(Some(3000), vec![post(0, false, 3000, Some(1000))]),
        &mut ratio,
    );
    let f = price(
        &turn(Some(6000), vec![post(0, false, 3000, None)]),
        &mut ratio,
    );
    assert_eq!((f.agent_tokens, f.sent_tokens), (2000, 1000));
    // No completion count: the answer's characters at the same ratio.
    let mut p = post(0, false, 3000, Some(1000));
    p.answer.completion = None;
    let f = price(&turn(Some(3000), vec![p]), &mut ratio);
    assert_eq!(f.completion_tokens, 13);
}

#[test]
fn the_sign_of_savings_follows_the_characters_whatever_the_numbers() {
    let values = [0, 1, 3, 999, 1000, 1001, 123_456, u64::MAX / 2, u64::MAX];
    for agent in values {
        for sent in values {
            for prompt in [None, Some(0), Some(1), Some(77), Some(u64::MAX)] {
                let f = priced(&turn(Some(agent), vec![post(0, false, sent, prompt)]));
                let want = agent.cmp(&sent);
                let got = f.agent_tokens.cmp(&f.sent_tokens);
                assert!(
                    got == want || got == std::cmp::Ordering::Equal,
                    "agent {agent} sent {sent} prompt {prompt:?}: {f:?}"
                );
            }
        }
    }
}

#[test]
fn attempts_that_failed_are_counted_apart_and_a_call_with_no_answer_costs_nothing_else() {
    let mut failed = post(0, false, 1000, None);
    failed.answered = false;
    failed.failed_tokens = 260;
    let f = priced(&turn(
        Some(4000),
        vec![failed.clone(), post(1, false, 1000, Some(250))],
    ));
    assert_eq!((f.failed_tokens, f.sent_tokens, f.net()), (260, 250, 750));
    let f = priced(&turn(Some(4000), vec![failed]));
    assert_eq!((f.calls, f.agent_tokens, f.failed_tokens), (0, 0, 260));
    assert!(priced(&turn(Some(4000), Vec::new())).is_empty());
}

#[test]
fn cached_tokens_are_part_of_what_was_sent() {
    let mut p = post(0, false, 1000, Some(250));
    p.answer.cached = Some(9999);
    assert_eq!(priced(&turn(Some(1000), vec![p])).cached_tokens, 250);
}

fn at_utc(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

#[test]
fn a_day_is_the_zone_s_day() {
    let shanghai = Zone::named("Asia/Shanghai").unwrap();
    // 2026-12-06 15:59 UTC is 23:59 in Shanghai; two minutes on, the 7th.
    let t = at_utc(1_796_572_740);
    assert_eq!(local_day(t, shanghai).to_string(), "2026-12-06");
    assert_eq!(
        local_day(t + Duration::from_secs(120), shanghai).to_string(),
        "2026-12-07"
    );
    assert_eq!(
        local_day(t + Duration::from_secs(120), Zone::UTC).to_string(),
        "2026-12-06"
    );
    assert_eq!(
        local_day(SystemTime::UNIX_EPOCH, Zone::UTC).to_string(),
        "1970-01-01"
    );
}

#[test]
fn the_book_keeps_its_days_and_sums_old_and_surplus_conversations() {
    let zone = Zone::UTC;
    let limits = Limits {
        days: 3,
        conversations: 2,
    };
    let mut book = Book::default();
    let day0 = at_utc(1_796_515_200); // 2026-12-06 00:00 UTC
    let call = |conv: &str| TurnRecord {
        shim: "qoder",
        conversation: conv.into(),
        agent_chars: Some(400),
        posts: vec![post(0, false, 100, Some(25))],
    };
    book.book(&call("a"), day0, zone, limits);
    book.book(&call("b"), day0 + Duration::from_secs(86_400), zone, limits);
    book.book(
        &call("c"),
        day0 + Duration::from_secs(2 * 86_400),
        zone,
        limits,
    );
    // A third conversation: the least recent one (a) is summed.
    assert_eq!(book.conversations.len(), 2);
    assert_eq!(book.older.conversations, 1);
    assert_eq!(book.older.figures.agent_tokens, 100);
    assert_eq!(book.days.len(), 3);
    // Day 4: the first day goes, and b (last seen on day 2, still kept).
    book.book(
        &call("c"),
        day0 + Duration::from_secs(3 * 86_400),
        zone,
        limits,
    );
    assert_eq!(book.days.len(), 3);
    assert!(!book.days.contains_key(&local_day(day0, zone)));
    // Day 5: b was last seen before the kept days.
    book.book(
        &call("c"),
        day0 + Duration::from_secs(4 * 86_400),
        zone,
        limits,
    );
    assert_eq!(book.conversations.len(), 1);
    assert_eq!(book.older.conversations, 2);
    let s = book.status(day0 + Duration::from_secs(4 * 86_400), zone, limits);
    assert_eq!(s["method"], METHOD);
    assert_eq!(s["today"]["calls"], 1);
    assert_eq!(s["days"].as_array().unwrap().len(), 3);
    assert_eq!(s["olderConversations"]["conversations"], 2);
    assert_eq!(s["conversations"][0]["id"], "c");
    assert_eq!(s["conversations"][0]["savedTokens"], 225);
    assert_eq!(s["totals"]["calls"], 3);
}
