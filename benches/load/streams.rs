//! Concurrency and memory: thousands of slow streams (one piece every
//! 100 ms) through the full path (agent → ingress → reference compressor →
//! return leg → upstream), shimgate's RSS read from `/proc`; then one slow
//! agent reading one frame a second from a fast, huge answer, to show that
//! back-pressure, not shimgate's memory, absorbs the difference.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http::Method;
use http_body_util::BodyExt;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::agent::Conn;
use super::check;
use super::findings::Findings;
use super::gate::{self, Proc};
use super::wire::{self, Answer, Wire};
use shimgate_testkit::upstream::{Options, Recorded, Reply, Step, Upstream};

/// One piece every 100 ms: a slow model, so streams sit idle most of the time.
const PACE: Duration = Duration::from_millis(100);
/// Pieces per slow stream (8 s each).
const PIECES: usize = 80;
/// Streams are opened over this long (a burst of thousands of connects at
/// once would measure the accept queue, not shimgate).
const RAMP: Duration = Duration::from_secs(3);
/// Peak RSS target for the big run.
const TARGET_PEAK_RSS_MIB: u64 = 200;
/// shimgate's RSS per idle stream through the full path (four sockets a
/// stream, two of them the proxy's round trip), at most.
const TARGET_PER_STREAM_KIB: f64 = 64.0;

/// The slow agent's answer: this many 1 KiB content frames (64 MiB), more
/// than every kernel buffer on the path can hold, sent as fast as the
/// path takes them.
const FAT_FRAMES: usize = 65_536;
const FAT_PIECE: usize = 1024;
/// How long, and how often, the slow agent reads.
const SLOW_SECONDS: u64 = 10;
const SLOW_READ: usize = FAT_PIECE + 200;
/// shimgate may hold this much more for one slow reader, at most.
const TARGET_SLOW_GROWTH_KIB: u64 = 16 * 1024;

/// The figures of this phase.
pub struct StreamsReport {
    pub streams: usize,
    pub direct: bool,
    pub completed: usize,
    pub errors: usize,
    pub baseline_kib: u64,
    /// RSS with every stream open and idle (the most seen at full concurrency).
    pub all_open_kib: u64,
    pub peak_kib: u64,
    pub max_fds: usize,
    /// The reference compressor's RSS (a plain hyper proxy, two connections
    /// a stream): baseline and with every stream open, for comparison.
    pub compressor_kib: Option<(u64, u64)>,
    pub max_active: usize,
    pub fallback: u64,
    /// `lastError` of each shim after the run.
    pub last_errors: Vec<String>,
    /// (second, upstream bytes written, agent bytes read, shimgate RSS KiB).
    pub slow: Vec<(u64, u64, u64, u64)>,
    pub slow_baseline_kib: u64,
    pub findings: Findings,
    pub fd_cap: u64,
}

impl StreamsReport {
    fn per_stream_kib(&self) -> f64 {
        (self.all_open_kib.saturating_sub(self.baseline_kib)) as f64 / self.max_active.max(1) as f64
    }

    pub fn print(&self) {
        println!(
            "streams: {} slow streams ({} pieces at {} ms) through {}: {} complete, {} errors; at most {} open at once; fallback {}",
            self.streams,
            PIECES,
            PACE.as_millis(),
            if self.direct { "shimgate alone (direct mode)" } else { "the reference compressor and shimgate" },
            self.completed,
            self.errors,
            self.max_active,
            self.fallback
        );
        for e in &self.last_errors {
            println!("  lastError {e}");
        }
        println!(
            "  shimgate RSS: baseline {} KiB, all open {} KiB, peak (VmHWM) {} KiB = {:.1} MiB; {:.1} KiB per idle stream; up to {} fds (cap {})",
            self.baseline_kib,
            self.all_open_kib,
            self.peak_kib,
            self.peak_kib as f64 / 1024.0,
            self.per_stream_kib(),
            self.max_fds,
            self.fd_cap
        );
        if let Some((base, open)) = self.compressor_kib {
            println!(
                "  compressor RSS (for comparison): baseline {base} KiB, all open {open} KiB = {:.1} KiB per stream",
                open.saturating_sub(base) as f64 / self.max_active.max(1) as f64
            );
        }
        println!(
            "  slow agent (one {SLOW_READ}-byte read per second from a {} MiB answer): second, upstream wrote, agent read, in flight, shimgate RSS growth",
            FAT_FRAMES * FAT_PIECE / (1024 * 1024)
        );
        for (s, up, read, rss) in &self.slow {
            println!(
                "    {s:>2} s  {:>8} KiB  {:>5} KiB  {:>8} KiB  {:+} KiB",
                up / 1024,
                read / 1024,
                (up - read.min(up)) / 1024,
                *rss as i64 - self.slow_baseline_kib as i64
            );
        }
    }

    pub fn headline(&self) -> String {
        let last = self.slow.last().copied().unwrap_or_default();
        format!(
            "{} streams: {} errors, peak RSS {:.1} MiB, {:.1} KiB/stream; slow agent: shimgate +{} KiB while {} MiB waited in flight",
            self.streams,
            self.errors,
            self.peak_kib as f64 / 1024.0,
            self.per_stream_kib(),
            last.3.saturating_sub(self.slow_baseline_kib),
            (last.1 - last.2.min(last.1)) / (1024 * 1024)
        )
    }
}

fn script(req: &Recorded, _: usize) -> Reply {
    let wire = Wire::of_path(&req.path).unwrap_or(Wire::Qoder);
    let call: u64 = req
        .header("x-load-call")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if req.header("x-load-fat").is_some() {
        return fat_answer();
    }
    let pieces = req
        .header("x-load-pieces")
        .and_then(|v| v.parse().ok())
        .unwrap_or(PIECES);
    let a = Answer {
        pace: Some(PACE),
        ending: 1,
        ..Answer::plain(call, pieces)
    };
    match wire {
        Wire::Qoder => wire::qoder_answer(&a),
        Wire::Trae => wire::trae_answer(&a),
    }
}

/// A qoder answer of [`FAT_FRAMES`] identical 1 KiB text frames (shared
/// bytes: the reply itself costs the bench almost nothing).
fn fat_answer() -> Reply {
    let text = "x".repeat(FAT_PIECE);
    let chunk = json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]})
    .to_string();
    let frame = Bytes::from(wire::envelope(&chunk));
    let mut r = Reply::sse();
    r.steps.reserve(FAT_FRAMES + 2);
    for _ in 0..FAT_FRAMES {
        r.steps.push(Step::Chunk(frame.clone()));
    }
    r.chunk(Bytes::from_static(b"data: [DONE]\n\n"))
        .then(Step::End)
}

/// Runs the phase with `n` concurrent slow streams, through the reference
/// compressor unless `direct`.
pub async fn run(n: usize, direct: bool) -> StreamsReport {
    // Small send buffers: the upstream's own kernel buffer should not hide
    // whether shimgate pushes back.
    let up = Upstream::start_with(
        Options {
            send_buffer: Some(16 * 1024),
            record: false,
        },
        script,
    )
    .await;
    let qport = gate::free_port();
    let tport = gate::free_port();
    // Direct mode measures shimgate alone (agent → ingress → upstream),
    // to tell its own cost per stream from the cost of the proxy round trip.
    let compressor = if direct {
        None
    } else {
        Some(gate::compressor(&format!("http://127.0.0.1:{qport}"), 1_000_000).await)
    };
    let compressor_section = compressor
        .as_ref()
        .map(|c| format!("[compressor]\nurl = \"http://{}\"\n", c.addr("")))
        .unwrap_or_default();
    // Every stream is up to two connections on the qoder listener (the
    // agent's half of them, and each return leg the proxy opens): above
    // the default cap of 1,024 a listener answers new ones 503 at once.
    let limits = format!("[limits]\nmax_connections = {}\n", 2 * n + 64);
    let toml = format!(
        "{limits}{compressor_section}[shims.qoder]\nlisten = \"127.0.0.1:{qport}\"\ncodec = \"plain\"\n[[shims.qoder.routes]]\nname = \"slow\"\nurl = \"{}\"\n\
         [shims.trae]\nlisten = \"127.0.0.1:{tport}\"\n[[shims.trae.routes]]\nname = \"slow\"\nurl = \"{}\"\n",
        up.url(),
        up.url()
    );
    let gate = gate::serve("streams", &toml, "error").await;
    let addrs = [gate.addr("qoder"), gate.addr("trae")];
    // Warm up both paths so lazily built state is in the baseline.
    for i in 0..20u64 {
        let _ = one_stream(addrs[(i % 2) as usize], i % 2 == 1, 1_000_000 + i, 2).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let baseline_kib = gate.memory_kib().0;
    let compressor_base = compressor.as_ref().map(|c| c.memory_kib().0);
    let mut compressor_open = 0;
    let active = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::with_capacity(n);
    let step = RAMP / n.max(1) as u32;
    let started = Instant::now();
    for i in 0..n {
        let addr = addrs[i % 2];
        let active = active.clone();
        tasks.push(tokio::spawn(async move {
            let r = one_stream_counted(addr, i % 2 == 1, i as u64 + 1, PIECES, &active).await;
            (i, r)
        }));
        tokio::time::sleep_until((started + step * (i as u32 + 1)).into()).await;
    }
    let (mut all_open_kib, mut peak_kib, mut max_fds, mut max_active) = (0, 0, 0, 0);
    while tasks.iter().any(|t| !t.is_finished()) {
        let (rss, hwm) = gate.memory_kib();
        let now_active = active.load(Ordering::Relaxed);
        peak_kib = peak_kib.max(hwm);
        max_fds = max_fds.max(gate.fds());
        if now_active >= max_active {
            max_active = now_active;
            all_open_kib = all_open_kib.max(rss);
            if let Some(c) = &compressor {
                compressor_open = compressor_open.max(c.memory_kib().0);
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (mut completed, mut errors) = (0, 0);
    let mut findings = Findings::default();
    for t in tasks {
        match t.await {
            Ok((_, Ok(()))) => completed += 1,
            Ok((i, Err(e))) => {
                errors += 1;
                findings.add("limits", format!("slow stream {i}: {e}"));
            }
            Err(e) => {
                errors += 1;
                findings.add("limits", format!("slow stream task: {e}"));
            }
        }
    }
    peak_kib = peak_kib.max(gate.memory_kib().1);
    let st = gate::status(addrs[0]).await;
    let fallback = st["qoderShim"]["fallback"].as_u64().unwrap_or(0)
        + st["traeShim"]["fallback"].as_u64().unwrap_or(0);
    let last_errors: Vec<String> = ["qoderShim", "traeShim"]
        .iter()
        .filter_map(|s| st[*s]["lastError"].as_str().map(|e| format!("{s}: {e}")))
        .collect();
    if peak_kib > TARGET_PEAK_RSS_MIB * 1024 {
        findings.add(
            "limits",
            format!(
                "peak RSS {} KiB over the {TARGET_PEAK_RSS_MIB} MiB target",
                peak_kib
            ),
        );
    }
    let per_stream = (all_open_kib.saturating_sub(baseline_kib)) as f64 / max_active.max(1) as f64;
    if !direct && per_stream > TARGET_PER_STREAM_KIB {
        findings.add(
            "limits",
            format!(
                "{per_stream:.1} KiB per idle stream through the full path, over the {TARGET_PER_STREAM_KIB} KiB target"
            ),
        );
    }
    let (slow, slow_baseline_kib) = slow_agent(&gate, &up, addrs[0]).await;
    if let (Some(first), Some(last)) = (slow.first(), slow.last()) {
        let growth = last.3.saturating_sub(slow_baseline_kib);
        if growth > TARGET_SLOW_GROWTH_KIB {
            findings.add(
                "limits",
                format!("one slow reader grew shimgate by {growth} KiB"),
            );
        }
        let total = (FAT_FRAMES * FAT_PIECE) as u64;
        if last.1 >= total || last.1 > first.1 * 2 + (8 << 20) {
            findings.add(
                "limits",
                format!(
                    "no back-pressure: the upstream wrote {} KiB while the agent read {} KiB",
                    last.1 / 1024,
                    last.2 / 1024
                ),
            );
        }
    }
    let report = StreamsReport {
        streams: n,
        direct,
        completed,
        errors,
        baseline_kib,
        all_open_kib,
        peak_kib,
        max_fds,
        compressor_kib: compressor_base.map(|b| (b, compressor_open)),
        max_active,
        fallback,
        last_errors,
        slow,
        slow_baseline_kib,
        findings,
        fd_cap: gate::fd_cap(),
    };
    gate.stop().await;
    if let Some(c) = compressor {
        c.stop().await;
    }
    report
}

async fn one_stream(addr: SocketAddr, trae: bool, call: u64, pieces: usize) -> Result<(), String> {
    let idle = AtomicUsize::new(0);
    one_stream_counted(addr, trae, call, pieces, &idle).await
}

/// One agent: one answer, checked piece by piece; `active` counts streams
/// between their first piece and their end.
async fn one_stream_counted(
    addr: SocketAddr,
    trae: bool,
    call: u64,
    pieces: usize,
    active: &AtomicUsize,
) -> Result<(), String> {
    let wire = if trae { Wire::Trae } else { Wire::Qoder };
    let body = match wire {
        Wire::Qoder => wire::qoder_ask(
            &format!("slow-{call}"),
            &[json!({"role": "user", "content": "stream slowly"})],
        ),
        Wire::Trae => wire::trae_body(&[wire::solo_text("user", "stream slowly")]),
    };
    let headers = [
        ("content-type", "application/json".to_string()),
        ("x-load-call", call.to_string()),
        ("x-load-pieces", pieces.to_string()),
    ];
    let mut conn = Conn::new(addr);
    let resp = conn
        .send(
            Method::POST,
            wire.path(),
            &headers,
            Bytes::from(serde_json::to_vec(&body).unwrap_or_default()),
        )
        .await?;
    let status = resp.status().as_u16();
    let mut incoming = resp.into_body();
    let mut buf = BytesMut::new();
    let mut counted = false;
    let limit = PACE * (pieces as u32 + 50) + Duration::from_secs(20);
    let read = async {
        while let Some(frame) = incoming.frame().await {
            let data = frame
                .map_err(|e| format!("body broke: {e}"))?
                .into_data()
                .unwrap_or_default();
            if !counted && memchr::memchr(b'~', &data).is_some() {
                counted = true;
                active.fetch_add(1, Ordering::Relaxed);
            }
            buf.extend_from_slice(&data);
        }
        Ok::<(), String>(())
    };
    let result = tokio::time::timeout(limit, read).await;
    if counted {
        active.fetch_sub(1, Ordering::Relaxed);
    }
    result.map_err(|_| "no end in time".to_string())??;
    let seen = check::read(wire, status, true, &buf);
    let got = check::prefix_len(&seen.text, call, pieces);
    if !seen.complete() || got != Some(pieces) || !seen.problems.is_empty() {
        return Err(format!(
            "status {status}, {:?} of {pieces} pieces, {} errors {:?}, problems {:?}",
            got, seen.errors, seen.error_codes, seen.problems
        ));
    }
    Ok(())
}

/// One agent reading one frame-sized piece a second from a huge answer
/// over a socket with a small receive buffer. Returns one sample a second
/// and shimgate's RSS before it started.
async fn slow_agent(
    gate: &Proc,
    up: &Upstream,
    addr: SocketAddr,
) -> (Vec<(u64, u64, u64, u64)>, u64) {
    let baseline = gate.memory_kib().0;
    let written_before = up.bytes_out.load(Ordering::Relaxed);
    let socket = match tokio::net::TcpSocket::new_v4() {
        Ok(s) => s,
        Err(_) => return (Vec::new(), baseline),
    };
    let _ = socket.set_recv_buffer_size(8 * 1024);
    let Ok(mut stream) = socket.connect(addr).await else {
        return (Vec::new(), baseline);
    };
    let body = serde_json::to_vec(&wire::qoder_ask(
        "slow-agent",
        &[json!({"role": "user", "content": "a long answer please"})],
    ))
    .unwrap_or_default();
    let head = format!(
        "POST {} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nx-load-fat: 1\r\n\r\n",
        wire::QODER_PATH,
        body.len()
    );
    let mut request = head.into_bytes();
    request.extend_from_slice(&body);
    if stream.write_all(&request).await.is_err() {
        return (Vec::new(), baseline);
    }
    let mut read_total = 0u64;
    let mut samples = Vec::new();
    let mut buf = vec![0u8; SLOW_READ];
    let started = Instant::now();
    for second in 1..=SLOW_SECONDS {
        if let Ok(Ok(n)) = tokio::time::timeout(Duration::from_secs(1), stream.read(&mut buf)).await
        {
            read_total += n as u64;
        }
        tokio::time::sleep_until((started + Duration::from_secs(second)).into()).await;
        let written = up.bytes_out.load(Ordering::Relaxed) - written_before;
        samples.push((second, written, read_total, gate.memory_kib().0));
    }
    drop(stream);
    (samples, baseline)
}
