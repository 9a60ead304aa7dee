//! The real billion-context (bili 0.1.45) in front of shimgate, nothing in
//! between: `ACP_UPSTREAM` at one shimgate listener, a 16,000-token window,
//! scripted models that report `prompt_tokens` and follow bili's nudges, and
//! agents that hold long conversations on both wires. This is the run that
//! found `folded` stuck at 0 (`research/bili.md` §7): every assertion here
//! is about what bili really does.

use crate::support::bili::{self, Bili};
use crate::support::conversation::{Conversation, Turn};
use crate::support::model::{Model, Wire};
use crate::support::{print_figures, Gate};

use super::savings::{agent_tokens, check_real};

/// The window bili is given (tokens), as in the measured run.
const WINDOW: u64 = 16_000;

/// shimgate with one model per wire, bili in front of the trae listener.
struct Stack {
    gate: Gate,
    bili: Bili,
    qoder: Model,
    trae: Model,
}

async fn stack(dir: &std::path::Path, window: u64) -> Stack {
    let (qoder, trae) = (
        Model::start(Wire::Qoder).await,
        Model::start(Wire::Trae).await,
    );
    let base = format!(
        "[retry]\ninitial_delay_ms = 10\n[[shims.qoder.routes]]\nname = \"q1\"\nurl = \"{}\"\n[[shims.trae.routes]]\nname = \"t1\"\nurl = \"{}\"\n",
        qoder.url(),
        trae.url()
    );
    let gate = Gate::start(&base).await;
    let bili = Bili::start(dir, &gate.trae, window).await;
    gate.use_compressor(&bili.url(), &base);
    Stack {
        gate,
        bili,
        qoder,
        trae,
    }
}

fn assert_clean(turn: &Turn, what: &str, stack: &Stack) {
    assert!(
        turn.status.is_success() && turn.error.is_none() && turn.problems.is_empty(),
        "{what}: {turn:?}\nbili log tail:\n{}",
        tail(&stack.bili.log())
    );
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// The turn on which the model first saw fewer characters than the agent
/// sent, and the characters saved on the last turn.
fn first_fold(turns: &[Turn], model: &Model) -> (Option<usize>, i64) {
    let seen = model.seen();
    let mut first = None;
    let mut last_saved = 0;
    // Each agent turn is one POST, plus one re-POST when the model compressed.
    let mut at = 0;
    for (i, t) in turns.iter().enumerate() {
        let s = &seen[at];
        at += if s.compressed { 2 } else { 1 };
        let saved = t.sent_chars as i64 - s.chars as i64;
        if saved > 0 && first.is_none() {
            first = Some(i + 1);
        }
        last_saved = saved;
    }
    (first, last_saved)
}

#[tokio::test]
async fn the_real_billion_context_compresses_both_wires_through_shimgate() {
    let Some(dir) = bili::bundle() else { return };
    let s = stack(&dir, WINDOW).await;
    let mut q = Conversation::new(Wire::Qoder, "conv-q", "user-1");
    let mut t = Conversation::new(Wire::Trae, "conv-t", "agent-token-1");
    for n in 1..=18 {
        let turn = q.turn(&s.gate.qoder).await;
        assert_clean(&turn, &format!("qoder turn {n}"), &s);
        let turn = t.turn(&s.gate.trae).await;
        assert_clean(&turn, &format!("trae turn {n}"), &s);
    }
    let st = s.gate.status().await;
    let (qf, tf) = (&st["qoderShim"], &st["traeShim"]);
    assert!(qf["folded"].as_u64().unwrap() > 0, "qoder: {qf:#}");
    assert!(tf["folded"].as_u64().unwrap() > 0, "trae: {tf:#}");
    for (name, conv, model) in [("qoder", &q, &s.qoder), ("trae", &t, &s.trae)] {
        let (first, saved) = first_fold(&conv.turns, model);
        eprintln!("{name}: first fold on turn {first:?}, last turn saved {saved} chars");
        print_figures(
            "billion-context",
            name,
            conv.turns.len(),
            &st[format!("{name}Shim")],
            conv.turns.last().unwrap().sent_bytes,
            model.upstream.requests().last().unwrap().body.len(),
            "",
        );
        assert!(
            first.is_some(),
            "{name}: the model never saw a shorter request"
        );
        assert!(saved > 0, "{name}: the last turn was not shorter upstream");
        let bad: Vec<_> = model.seen().into_iter().flat_map(|r| r.problems).collect();
        assert!(bad.is_empty(), "{name}: the model refused {bad:?}");
    }
    let sessions = s.bili.sessions().await;
    eprintln!("bili sessions: {sessions:#?}");
    assert_eq!(
        sessions.len(),
        2,
        "one bili session per conversation: {sessions:#?}"
    );
    // The savings ledger: the rounds in which the model called `compress`
    // are bili's own (it runs the tool and asks again); the round after
    // answered the agent.
    let savings = &st["savings"];
    for (wire, conv, id, model) in [
        (Wire::Qoder, &q, "conv-q", &s.qoder),
        (Wire::Trae, &t, "conv-t", &s.trae),
    ] {
        let seen = model.seen();
        assert!(
            seen.iter().any(|x| x.compressed),
            "{wire:?}: no compress round"
        );
        check_real(
            "billion-context",
            wire,
            savings,
            id,
            &seen,
            |x| !x.compressed,
            agent_tokens(wire, &conv.turns),
        );
    }
}

#[tokio::test]
async fn two_conversations_of_one_agent_are_two_bili_sessions() {
    let Some(dir) = bili::bundle() else { return };
    let s = stack(&dir, WINDOW).await;
    let mut a = Conversation::new(Wire::Trae, "conv-a", "agent-token-1");
    let mut b = Conversation::new(Wire::Trae, "conv-b", "agent-token-1");
    let mut other = Conversation::new(Wire::Trae, "conv-a", "agent-token-2");
    for n in 1..=3 {
        for c in [&mut a, &mut b, &mut other] {
            let turn = c.turn(&s.gate.trae).await;
            assert_clean(&turn, &format!("turn {n}"), &s);
        }
    }
    let sessions = s.bili.sessions().await;
    let requests: Vec<u64> = sessions
        .iter()
        .map(|x| x["requests"].as_u64().unwrap())
        .collect();
    assert_eq!(
        requests,
        vec![3, 3, 3],
        "two conversations, and one of another credential: three sessions of three turns each: {sessions:#?}"
    );
}

/// How the model refuses the overflowing turn: its words (`None`: the
/// default "… the limit of 16000 tokens") and the window bili must learn.
struct Refusal {
    words: Option<&'static str>,
    window: u64,
}

/// The default refusal, naming the window the way bili reads it.
const PLAIN: Refusal = Refusal {
    words: None,
    window: WINDOW,
};

/// A model refusal as too long reaches the agent in its own wire, bili
/// learns the window from the return leg's `400 context_length_exceeded`,
/// and the conversation shrinks right after. bili is given a window four
/// times the model's, so without that lesson it would not compress at all
/// in these turns.
async fn overflow_then_shrink(wire: Wire, refusal: Refusal) {
    let Some(dir) = bili::bundle() else { return };
    let s = stack(&dir, 4 * WINDOW).await;
    let (base, model) = match wire {
        Wire::Qoder => (s.gate.qoder.clone(), s.qoder.clone()),
        _ => (s.gate.trae.clone(), s.trae.clone()),
    };
    let mut c = Conversation::new(wire, "conv-o", "agent-token-1");
    for n in 1..=8 {
        let turn = c.turn(&base).await;
        assert_clean(&turn, &format!("turn {n}"), &s);
    }
    match refusal.words {
        Some(words) => model.overflow_next_saying(words),
        None => model.overflow_next(),
    }
    let refused = c.turn(&base).await;
    let error = refused.error.clone().expect("the agent got an error");
    assert!(refused.problems.is_empty(), "{refused:?}");
    let said = refusal.words.unwrap_or("too long");
    assert!(error.to_string().contains(said), "{error}");
    if wire == Wire::Trae {
        assert!(
            error.to_string().contains("4022"),
            "the SOLO code survives: {error}"
        );
    }
    let log = s.bili.log();
    let learned = format!("learned real window {}", refusal.window);
    let line = log.lines().find(|l| l.contains("context overflow"));
    eprintln!("{wire:?} bili: {}", line.unwrap_or("(no overflow line)"));
    assert!(
        log.contains(&learned),
        "bili learned nothing from the overflow:\n{}",
        tail(&log)
    );
    // The turn after the overflow compresses (bili nudges at once, the
    // model calls `compress`); the one after that is shorter upstream.
    for n in 10..=11 {
        let before = model.seen().len();
        let turn = c.turn(&base).await;
        assert_clean(&turn, &format!("turn {n}"), &s);
        let first_post = model.seen()[before].clone();
        eprintln!(
            "{wire:?} turn {n}: agent sent {} chars, model saw {} (compress called: {})",
            turn.sent_chars, first_post.chars, first_post.compressed
        );
        if n == 10 {
            assert!(
                first_post.compressed,
                "bili did not nudge after the overflow:\n{}",
                tail(&s.bili.log())
            );
        } else {
            assert!(
                first_post.chars < turn.sent_chars,
                "turn {n} was not shrunk:\n{}",
                tail(&s.bili.log())
            );
        }
    }
}

#[tokio::test]
async fn a_trae_context_overflow_reaches_the_agent_and_bili_shrinks_the_next_turns() {
    overflow_then_shrink(Wire::Trae, PLAIN).await;
}

#[tokio::test]
async fn a_qoder_context_overflow_reaches_the_agent_and_bili_shrinks_the_next_turns() {
    overflow_then_shrink(Wire::Qoder, PLAIN).await;
}

/// TRAE's own 4022 text names its window in words bili cannot read ("limit
/// of N" with no "token" after it): shimgate restates it, bili learns it.
#[tokio::test]
async fn bili_learns_the_window_from_trae_s_own_4022_text() {
    let words = "prompt tokens exceed the limit of 1000000.";
    overflow_then_shrink(
        Wire::Trae,
        Refusal {
            words: Some(words),
            window: 1_000_000,
        },
    )
    .await;
}

/// The same for a qoder refusal that names "limit of 200000".
#[tokio::test]
async fn bili_learns_the_window_from_a_qoder_refusal_naming_its_limit() {
    let words = "The prompt is too long: it exceeds the limit of 200000.";
    overflow_then_shrink(
        Wire::Qoder,
        Refusal {
            words: Some(words),
            window: 200_000,
        },
    )
    .await;
}

#[tokio::test]
async fn the_real_qoder_client_s_signed_conversation_is_compressed_by_the_real_billion_context() {
    let Some(dir) = bili::bundle() else { return };
    let s = stack(&dir, WINDOW).await;
    let mut q = Conversation::new(Wire::Qoder, "conv-signed", "user-9").signed();
    for n in 1..=18 {
        let turn = q.turn(&s.gate.qoder).await;
        assert_clean(&turn, &format!("signed qoder turn {n}"), &s);
    }
    let qs = &s.gate.status().await["qoderShim"];
    assert!(qs["folded"].as_u64().unwrap() > 0, "{qs:#}");
    let (first, saved) = first_fold(&q.turns, &s.qoder);
    eprintln!("signed qoder: first fold on turn {first:?}, last turn saved {saved} chars");
    assert!(saved > 0);
    let refused: Vec<_> = s
        .qoder
        .seen()
        .into_iter()
        .flat_map(|r| r.problems)
        .collect();
    assert!(refused.is_empty(), "qoder refused {refused:?}");
    assert!(
        qs["codec"]["cosy"]["signed"].as_u64().unwrap() >= 18,
        "{qs:#}"
    );
}
