//! Slowloris and idle sockets, bounded in time (`docs/security.md`: a client that
//! sends its head slowly or idles on a connection is timed out). Against a
//! `shimgate serve` with small `header_read_timeout_ms` and
//! `client_idle_timeout_ms`:
//!
//! 1. **RSS**: `--rss-sockets` (1,000) connections that send nothing;
//!    shimgate's `VmRSS` before and once they are all accepted, and each
//!    must be closed by the server within the header-read timeout plus a
//!    slack.
//! 2. **Slowloris**: `--idle-sockets` N (500) silent connections, N that
//!    send half a request head and stop, and a few keep-alive connections
//!    that make one request and then idle; every one must be closed by the
//!    server within its timeout plus the slack, while fresh connections
//!    keep getting `/status` and trae inference answers (checked piece by
//!    piece) every 25 ms.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Method;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::agent::{collect, Conn};
use super::check;
use super::findings::Findings;
use super::gate::{self, Proc};
use super::wire::{self, Answer, Wire};
use shimgate_testkit::upstream::{Options, Recorded, Reply, Upstream};

/// `[limits] header_read_timeout_ms` of the shimgate under test.
const HEADER_READ: Duration = Duration::from_millis(1000);
/// `[limits] client_idle_timeout_ms`: longer than the header-read timeout,
/// so the two are told apart.
const CLIENT_IDLE: Duration = Duration::from_millis(2000);
/// How late after its timeout a socket may be closed.
const SLACK: Duration = Duration::from_millis(1000);
/// Keep-alive connections that make one request, then idle.
const KEEP_ALIVE: usize = 20;
/// How often the normal traffic sends a request.
const NORMAL_EVERY: Duration = Duration::from_millis(25);
/// A normal request slower than this is a finding.
const NORMAL_LIMIT: Duration = Duration::from_secs(1);

/// How one kind of socket fared.
#[derive(Debug, Default, Clone)]
pub struct Kind {
    pub name: &'static str,
    pub opened: usize,
    /// Time from being opened (or, keep-alive, from the answer) to the
    /// server's close, for each socket the server closed.
    pub closed: Vec<Duration>,
    /// The timeout that should close it.
    pub timeout: Duration,
    /// Sockets that got bytes back (an answer to a half head would be one).
    pub answered: usize,
}

impl Kind {
    fn quantile(&self, q: f64) -> Duration {
        let mut v = self.closed.clone();
        v.sort();
        v.get(((v.len() as f64 - 1.0) * q).round() as usize)
            .copied()
            .unwrap_or_default()
    }

    fn line(&self) -> String {
        format!(
            "{}: {} opened, {} closed by the server (timeout {} ms: p50 {} ms, max {} ms){}",
            self.name,
            self.opened,
            self.closed.len(),
            self.timeout.as_millis(),
            self.quantile(0.5).as_millis(),
            self.quantile(1.0).as_millis(),
            if self.answered > 0 {
                format!(", {} got bytes back", self.answered)
            } else {
                String::new()
            }
        )
    }
}

/// The figures of this phase.
pub struct IdleReport {
    pub rss_sockets: usize,
    pub rss_before_kib: u64,
    pub rss_open_kib: u64,
    pub rss_after_kib: u64,
    pub fds_open: usize,
    pub kinds: Vec<Kind>,
    pub normal_ok: usize,
    pub normal_failed: usize,
    pub normal_max: Duration,
    pub elapsed: Duration,
    pub findings: Findings,
}

impl IdleReport {
    fn per_socket_kib(&self) -> f64 {
        self.rss_open_kib.saturating_sub(self.rss_before_kib) as f64
            / self.rss_sockets.max(1) as f64
    }

    pub fn print(&self) {
        println!(
            "idle: {} silent sockets: shimgate VmRSS {} KiB before, {} KiB with all open ({} fds), {:+} KiB = {:.1} KiB per socket; {} KiB after they were closed",
            self.rss_sockets,
            self.rss_before_kib,
            self.rss_open_kib,
            self.fds_open,
            self.rss_open_kib as i64 - self.rss_before_kib as i64,
            self.per_socket_kib(),
            self.rss_after_kib
        );
        for k in &self.kinds {
            println!("  {}", k.line());
        }
        println!(
            "  meanwhile: {} normal requests answered, {} failed, slowest {} ms; {:.1} s in all",
            self.normal_ok,
            self.normal_failed,
            self.normal_max.as_millis(),
            self.elapsed.as_secs_f64()
        );
    }

    pub fn headline(&self) -> String {
        let worst = |name: &str| {
            self.kinds
                .iter()
                .filter(|k| k.name.starts_with(name))
                .map(|k| k.quantile(1.0).as_millis())
                .max()
                .unwrap_or(0)
        };
        format!(
            "idle: {} sockets {:.1} KiB each (RSS {:.1} MiB); slowloris closed within {} ms (silent) / {} ms (half head) / {} ms (keep-alive), {} normal ok, {} failed",
            self.rss_sockets,
            self.per_socket_kib(),
            self.rss_open_kib as f64 / 1024.0,
            worst("silent"),
            worst("half"),
            worst("keep-alive"),
            self.normal_ok,
            self.normal_failed
        )
    }
}

fn script(req: &Recorded, _: usize) -> Reply {
    let call = req
        .header("x-load-call")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if Wire::of_path(&req.path) == Some(Wire::Trae) {
        wire::trae_answer(&Answer::plain(call, 3))
    } else {
        Reply::json_sized(200, &[], "{}")
    }
}

/// What happened to one socket: when the server closed it, and whether it
/// sent anything first.
struct Fate {
    closed_after: Option<Duration>,
    answered: bool,
}

/// Reads until the server closes (or `give_up` passes); `from` is when
/// the wait started.
async fn wait_close(mut s: TcpStream, from: Instant, give_up: Instant) -> Fate {
    let mut answered = false;
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(give_up.into(), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                return Fate {
                    closed_after: Some(from.elapsed()),
                    answered,
                }
            }
            Ok(Ok(_)) => answered = true,
            Err(_) => {
                return Fate {
                    closed_after: None,
                    answered,
                }
            }
        }
    }
}

/// Opens `n` sockets, each written `prefix` (nothing when empty), and
/// waits for the server to close them, up to `give_up` after the last one.
async fn open(
    addr: SocketAddr,
    n: usize,
    prefix: &'static [u8],
    give_up: Duration,
) -> Vec<tokio::task::JoinHandle<Fate>> {
    let mut tasks = Vec::with_capacity(n);
    for _ in 0..n {
        let Ok(mut s) = TcpStream::connect(addr).await else {
            tasks.push(tokio::spawn(async {
                Fate {
                    closed_after: Some(Duration::ZERO),
                    answered: false,
                }
            }));
            continue;
        };
        let from = Instant::now();
        if !prefix.is_empty() {
            let _ = s.write_all(prefix).await;
        }
        tasks.push(tokio::spawn(wait_close(s, from, from + give_up)));
    }
    tasks
}

/// One keep-alive connection: one request answered, then idle until the
/// server closes it.
async fn keep_alive(addr: SocketAddr, give_up: Duration) -> Fate {
    let Ok(mut s) = TcpStream::connect(addr).await else {
        return Fate {
            closed_after: Some(Duration::ZERO),
            answered: false,
        };
    };
    let _ = s
        .write_all(b"GET /status HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        .await;
    // Read the whole answer (content-length), then idle.
    let mut got = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let whole = |b: &[u8]| {
        let end = b.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
        let head = String::from_utf8_lossy(&b[..end]).to_ascii_lowercase();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))?
            .trim()
            .parse()
            .ok()?;
        (b.len() >= end + len).then_some(())
    };
    while whole(&got).is_none() {
        match tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => {
                return Fate {
                    closed_after: Some(Duration::ZERO),
                    answered: false,
                }
            }
        }
    }
    let from = Instant::now();
    wait_close(s, from, from + give_up).await
}

/// One normal request on a fresh connection: `/status` or a trae
/// inference checked piece by piece.
async fn normal(addr: SocketAddr, call: u64) -> Result<(), String> {
    let mut conn = Conn::new(addr);
    if call % 2 == 0 {
        let resp = conn.send(Method::GET, "/status", &[], Bytes::new()).await?;
        let whole = collect(resp, NORMAL_LIMIT).await;
        if whole.status != 200 || whole.broken.is_some() {
            return Err(format!("/status: {} {:?}", whole.status, whole.broken));
        }
        return Ok(());
    }
    let body = wire::trae_body(&[wire::solo_text("user", "are you there")]);
    let resp = conn
        .send(
            Method::POST,
            wire::TRAE_PATH,
            &[
                ("content-type", "application/json".to_string()),
                ("x-load-call", call.to_string()),
            ],
            Bytes::from(serde_json::to_vec(&body).unwrap_or_default()),
        )
        .await?;
    let whole = collect(resp, NORMAL_LIMIT).await;
    let seen = check::read(Wire::Trae, whole.status, whole.sse, &whole.body);
    if !seen.complete() || check::prefix_len(&seen.text, call, 3) != Some(3) {
        return Err(format!(
            "inference: status {} {:?} problems {:?}",
            whole.status, seen.text, seen.problems
        ));
    }
    Ok(())
}

async fn settle_kind(
    name: &'static str,
    timeout: Duration,
    tasks: Vec<tokio::task::JoinHandle<Fate>>,
    findings: &mut Findings,
) -> Kind {
    let mut k = Kind {
        name,
        opened: tasks.len(),
        timeout,
        ..Kind::default()
    };
    let mut open = 0;
    for t in tasks {
        match t.await {
            Ok(Fate {
                closed_after: Some(d),
                answered,
            }) => {
                k.closed.push(d);
                k.answered += usize::from(answered);
            }
            _ => open += 1,
        }
    }
    if open > 0 {
        findings.add(
            "slowloris",
            format!(
                "{open} of {} {name} sockets still open {} ms after they were opened (timeout {} ms)",
                k.opened,
                (timeout + SLACK).as_millis(),
                timeout.as_millis()
            ),
        );
    }
    let late = k.closed.iter().filter(|d| **d > timeout + SLACK).count();
    if late > 0 {
        findings.add(
            "slowloris",
            format!(
                "{late} {name} sockets closed later than {} ms",
                (timeout + SLACK).as_millis()
            ),
        );
    }
    k
}

/// Waits (up to 3 s) until shimgate holds `want` more descriptors than
/// `base`; the count it reached.
async fn accepted(gate: &Proc, base: usize, want: usize) -> usize {
    let until = Instant::now() + Duration::from_secs(3);
    loop {
        let fds = gate.fds();
        if fds >= base + want || Instant::now() > until {
            return fds;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs the phase: `rss_sockets` silent sockets for the RSS figure, then
/// `n` silent and `n` half-head sockets and a few idle keep-alive ones.
pub async fn run(rss_sockets: usize, n: usize) -> IdleReport {
    let started = Instant::now();
    let up = Upstream::start_with(
        Options {
            send_buffer: None,
            record: false,
        },
        script,
    )
    .await;
    let (qport, tport) = (gate::free_port(), gate::free_port());
    let toml = format!(
        "[limits]\nheader_read_timeout_ms = {}\nclient_idle_timeout_ms = {}\nmax_connections = {}\n\
         [shims.qoder]\nlisten = \"127.0.0.1:{qport}\"\n\
         [shims.trae]\nlisten = \"127.0.0.1:{tport}\"\n[[shims.trae.routes]]\nname = \"t\"\nurl = \"{}\"\n",
        HEADER_READ.as_millis(),
        CLIENT_IDLE.as_millis(),
        (rss_sockets + 2 * n + KEEP_ALIVE + 64).max(1024),
        up.url()
    );
    let gate = gate::serve("idle", &toml, "error").await;
    let addr = gate.addr("trae");
    let mut findings = Findings::default();
    for call in 0..20 {
        if let Err(e) = normal(addr, call).await {
            findings.add("slowloris", format!("warm-up: {e}"));
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;

    // 1. RSS with `rss_sockets` silent sockets open.
    let fds_before = gate.fds();
    let rss_before_kib = gate.memory_kib().0;
    let bound = HEADER_READ + SLACK;
    let first_open = Instant::now();
    let silent = open(addr, rss_sockets, b"", bound).await;
    let fds_open = accepted(&gate, fds_before, rss_sockets).await;
    // The most seen while every socket is open: an accepted connection's
    // task allocates its buffers when it first runs, a moment later.
    let mut rss_open_kib = gate.memory_kib().0;
    while first_open.elapsed() + Duration::from_millis(150) < HEADER_READ {
        tokio::time::sleep(Duration::from_millis(20)).await;
        rss_open_kib = rss_open_kib.max(gate.memory_kib().0);
    }
    if fds_open < fds_before + rss_sockets {
        findings.add(
            "slowloris",
            format!(
                "only {} of {rss_sockets} silent sockets were accepted",
                fds_open.saturating_sub(fds_before)
            ),
        );
    }
    let mut kinds =
        vec![settle_kind("silent (RSS wave)", HEADER_READ, silent, &mut findings).await];

    // 2. Slowloris: silent, half heads and idle keep-alive connections at
    // once, with normal traffic on fresh connections meanwhile.
    let traffic = tokio::spawn(async move {
        let (mut ok, mut failed, mut slowest) = (0usize, Vec::new(), Duration::ZERO);
        let until = Instant::now() + CLIENT_IDLE + SLACK;
        let mut call = 1_000u64;
        while Instant::now() < until {
            let t0 = Instant::now();
            match normal(addr, call).await {
                Ok(()) => ok += 1,
                Err(e) => failed.push(e),
            }
            slowest = slowest.max(t0.elapsed());
            call += 1;
            tokio::time::sleep_until((t0 + NORMAL_EVERY).into()).await;
        }
        (ok, failed, slowest)
    });
    let keep: Vec<_> = (0..KEEP_ALIVE)
        .map(|_| tokio::spawn(keep_alive(addr, CLIENT_IDLE + SLACK)))
        .collect();
    let half = open(
        addr,
        n,
        b"POST /api/agent/v3/llm_utils_chat HTTP/1.1\r\nhost: slow\r\ncontent-type: application/json\r\nx-slow: ",
        bound,
    )
    .await;
    let silent = open(addr, n, b"", bound).await;
    kinds.push(settle_kind("silent", HEADER_READ, silent, &mut findings).await);
    kinds.push(settle_kind("half head", HEADER_READ, half, &mut findings).await);
    kinds.push(settle_kind("keep-alive idle", CLIENT_IDLE, keep, &mut findings).await);
    let (normal_ok, failed, normal_max) = traffic.await.unwrap_or_default();
    for e in failed.iter().take(5) {
        findings.add(
            "slowloris",
            format!("a normal request failed meanwhile: {e}"),
        );
    }
    if normal_max > NORMAL_LIMIT {
        findings.add(
            "slowloris",
            format!(
                "a normal request took {} ms meanwhile",
                normal_max.as_millis()
            ),
        );
    }
    if normal_ok == 0 {
        findings.add(
            "slowloris",
            "no normal request was answered meanwhile".into(),
        );
    }
    let rss_after_kib = gate.memory_kib().0;
    gate.stop().await;
    IdleReport {
        rss_sockets,
        rss_before_kib,
        rss_open_kib,
        rss_after_kib,
        fds_open,
        kinds,
        normal_ok,
        normal_failed: failed.len(),
        normal_max,
        elapsed: started.elapsed(),
        findings,
    }
}
