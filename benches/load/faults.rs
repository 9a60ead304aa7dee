//! The fault plan: what can go wrong on one upstream try, how the scripted
//! upstream plays it on each wire, how shimgate's chain must classify it,
//! and the chain rules (`docs/failover.md`) a sequence of tries must obey.

use std::time::Duration;

use super::wire::{self, Answer, Wire};
use shimgate_testkit::upstream::{Reply, Step};

/// One upstream try's fate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fault {
    /// The whole answer.
    Ok,
    /// HTTP 502.
    Http502,
    /// HTTP 429 with `Retry-After` (seconds).
    Http429 { retry_after_s: u32 },
    /// Head and non-content frames, then a TCP reset.
    ResetBeforeContent,
    /// Half the pieces, then a TCP reset.
    ResetAfterContent,
    /// Half the pieces, then a clean close in the middle of the body.
    CloseAfterContent,
    /// No response head until the peer gives up.
    StallFirstByte,
    /// Head and non-content frames, then silence.
    StallBeforeContent,
    /// A 200 stream that ends with no content.
    Empty,
    /// SOLO `4008` (quota pool used up), in band.
    Solo4008,
    /// SOLO `4022` (prompt over the window), in band.
    Solo4022,
    /// qoder `103` duplicate request, in an error envelope.
    Qoder103,
    /// qoder `110` daily allowance used up.
    Qoder110,
    /// qoder `10605` queue throttle with `retryAfterSeconds`.
    Qoder10605 { retry_after_s: f64 },
}

/// How long a cut answer pauses before the reset or close, so what was
/// written has been read (a reset may discard unread bytes in the kernel).
const CUT_PAUSE: Duration = Duration::from_millis(30);

impl Fault {
    /// The code shimgate's chain logs for this try (`None`: success).
    pub fn code(self) -> Option<&'static str> {
        Some(match self {
            Fault::Ok => return None,
            Fault::Http502 => "SERVER",
            Fault::Http429 { .. } | Fault::Qoder10605 { .. } => "RATE_LIMIT",
            Fault::ResetBeforeContent | Fault::ResetAfterContent | Fault::CloseAfterContent => {
                "TRANSPORT"
            }
            Fault::StallFirstByte | Fault::StallBeforeContent => "TIMEOUT",
            Fault::Empty => "EMPTY_RESPONSE",
            Fault::Solo4008 | Fault::Qoder110 => "QUOTA",
            Fault::Solo4022 => "CONTEXT_WINDOW_EXCEEDED",
            Fault::Qoder103 => "DUPLICATE_REQUEST",
        })
    }

    /// Content reached the agent: the try is committed, nothing may follow.
    pub fn commits(self) -> bool {
        matches!(
            self,
            Fault::Ok | Fault::ResetAfterContent | Fault::CloseAfterContent
        )
    }

    /// The wait the upstream asked for.
    pub fn retry_after(self) -> Option<Duration> {
        match self {
            Fault::Http429 { retry_after_s } => Some(Duration::from_secs(u64::from(retry_after_s))),
            Fault::Qoder10605 { retry_after_s } => Some(Duration::from_secs_f64(retry_after_s)),
            _ => None,
        }
    }

    /// How many pieces a cut answer sends before breaking.
    pub fn cut_at(pieces: usize) -> usize {
        (pieces / 2).max(1)
    }

    /// The upstream's answer for this try.
    pub fn reply(self, wire: Wire, a: &Answer) -> Reply {
        let cut = Fault::cut_at(a.pieces);
        match (self, wire) {
            (Fault::Ok, Wire::Qoder) => wire::qoder_answer(a),
            (Fault::Ok, Wire::Trae) => wire::trae_answer(a),
            (Fault::Http502, _) => Reply::json_sized(502, &[], "{\"message\":\"bad gateway\"}"),
            (Fault::Http429 { retry_after_s }, _) => Reply::json_sized(
                429,
                &[("retry-after", &retry_after_s.to_string())],
                "{\"error\":{\"message\":\"too many requests\"}}",
            ),
            (Fault::ResetBeforeContent, _) => wire::cut(wire, a, 0, Duration::ZERO, Step::Reset),
            (Fault::ResetAfterContent, _) => wire::cut(wire, a, cut, CUT_PAUSE, Step::Reset),
            (Fault::CloseAfterContent, _) => wire::cut(wire, a, cut, CUT_PAUSE, Step::Close),
            (Fault::StallFirstByte, _) => Reply::default().then(Step::Hold),
            (Fault::StallBeforeContent, _) => wire::cut(wire, a, 0, Duration::ZERO, Step::Hold),
            (Fault::Empty, Wire::Qoder) => wire::qoder_empty(),
            (Fault::Empty, Wire::Trae) => wire::trae_empty(),
            (Fault::Solo4008, _) => {
                wire::trae_error(4008, "Your requests have exceeded the quota.")
            }
            (Fault::Solo4022, _) => wire::trae_error(4022, "prompt tokens exceed the limit"),
            (Fault::Qoder103, _) => wire::qoder_error(403, wire::QODER_103),
            (Fault::Qoder110, _) => wire::qoder_error(429, wire::QODER_110),
            (Fault::Qoder10605 { retry_after_s }, _) => {
                wire::qoder_error(403, &wire::qoder_10605(retry_after_s))
            }
        }
    }

    /// The answer of a pass-through call (not a stream).
    pub fn passthrough_reply(self, call: u64) -> Reply {
        match self {
            Fault::Http502 => Reply::json_sized(502, &[], PASSTHROUGH_502),
            Fault::StallFirstByte => Reply::default().then(Step::Hold),
            _ => Reply::json_sized(200, &[], &passthrough_body(call)),
        }
    }
}

/// A pass-through 502's body, which the client must get as it is.
pub const PASSTHROUGH_502: &str = "{\"message\":\"bad gateway\"}";

/// The rule for a pass-through POST's try:
/// whatever came back is the client's, and a POST that got no answer may
/// have reached the upstream, so nothing is ever sent again.
pub fn passthrough_next(_fault: Fault) -> Next {
    Next::Stop
}

/// The body a pass-through call must get back, byte for byte.
pub fn passthrough_body(call: u64) -> String {
    format!("{{\"call\":{call},\"detail\":\"~{call}.pass~\"}}")
}

/// The faults a first try may meet on each wire.
pub fn menu(wire: Wire) -> Vec<Fault> {
    let mut common = vec![
        Fault::Http502,
        Fault::Http429 { retry_after_s: 1 },
        Fault::Http429 { retry_after_s: 30 },
        Fault::ResetBeforeContent,
        Fault::ResetAfterContent,
        Fault::CloseAfterContent,
        Fault::StallFirstByte,
        Fault::StallBeforeContent,
        Fault::Empty,
    ];
    match wire {
        Wire::Trae => common.extend([Fault::Solo4008, Fault::Solo4022]),
        Wire::Qoder => common.extend([
            Fault::Qoder103,
            Fault::Qoder110,
            Fault::Qoder10605 {
                retry_after_s: 0.05,
            },
            Fault::Qoder10605 {
                retry_after_s: 30.0,
            },
        ]),
    }
    common
}

/// Faults a second try may meet: the transient ones, so a call needs at
/// most three tries on a route and never runs out of retries by chance.
pub fn retry_menu() -> Vec<Fault> {
    vec![
        Fault::Http502,
        Fault::ResetBeforeContent,
        Fault::Empty,
        Fault::StallFirstByte,
    ]
}

/// The chain settings the rules depend on (mirrors the generated config).
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    pub max_retries: u32,
    pub max_delay: Duration,
}

/// What the chain must do after a failed try.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Nothing more may be sent (committed, or a never-switch code).
    Stop,
    /// Retry on the same route.
    Retry,
    /// Switch to another route (or end the call when none is left).
    Switch,
}

impl Rules {
    /// The rule for `fault` as try number `tries` (1-based) on its route.
    pub fn next(&self, fault: Fault, tries: u32) -> Next {
        let Some(code) = fault.code() else {
            return Next::Stop;
        };
        if fault.commits() || code == "CONTEXT_WINDOW_EXCEEDED" {
            return Next::Stop;
        }
        let retryable = matches!(
            code,
            "EMPTY_RESPONSE" | "RATE_LIMIT" | "SERVER" | "TIMEOUT" | "TRANSPORT"
        );
        let too_long = fault.retry_after().is_some_and(|w| w > self.max_delay);
        if retryable && tries <= self.max_retries && !too_long {
            Next::Retry
        } else {
            Next::Switch
        }
    }
}

/// A call's plan: the answer and the fault of each try (`Ok` after the list).
#[derive(Debug, Clone)]
pub struct Plan {
    pub wire: Wire,
    /// A pass-through call instead of an inference call.
    pub passthrough: bool,
    pub answer: Answer,
    pub faults: Vec<Fault>,
}

impl Plan {
    /// The fault of try number `hit` (0-based) of this call.
    pub fn fault(&self, hit: usize) -> Fault {
        self.faults.get(hit).copied().unwrap_or(Fault::Ok)
    }

    /// A random plan for an inference call: half the calls are clean; the
    /// rest meet one fault from the wire's menu and sometimes a transient
    /// one on the next try.
    pub fn inference(rng: &mut fastrand::Rng, wire: Wire, call: u64) -> Plan {
        let answer = Answer {
            call,
            pieces: rng.usize(3..=12),
            tool_frags: if rng.u8(..10) < 3 {
                rng.usize(2..=5)
            } else {
                0
            },
            split: rng.u8(..4) == 0,
            heartbeats: rng.bool(),
            ending: rng.u8(..6),
            pace: None,
            stamped: false,
        };
        let mut faults = Vec::new();
        if rng.bool() {
            let menu = menu(wire);
            let first = menu[rng.usize(..menu.len())];
            faults.push(first);
            if !first.commits() && first != Fault::Solo4022 && rng.u8(..4) == 0 {
                let again = retry_menu();
                faults.push(again[rng.usize(..again.len())]);
            }
        }
        Plan {
            wire,
            passthrough: false,
            answer,
            faults,
        }
    }

    /// A random plan for a pass-through call.
    pub fn passthrough(rng: &mut fastrand::Rng, wire: Wire, call: u64) -> Plan {
        let faults = match rng.u8(..4) {
            0 => vec![Fault::Http502],
            1 => vec![Fault::StallFirstByte],
            _ => Vec::new(),
        };
        Plan {
            wire,
            passthrough: true,
            answer: Answer::plain(call, 0),
            faults,
        }
    }
}
