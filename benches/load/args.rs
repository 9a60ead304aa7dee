//! Command-line options of the load tool: what clap reads, then the
//! presets (`--quick`, `--ci`) under the values given on the line.

use clap::{Parser, ValueEnum};

/// Which phases run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Phases {
    pub soak: bool,
    pub latency: bool,
    pub streams: bool,
    /// Idle and slowloris sockets (bounded in time).
    pub idle: bool,
    /// Instruction counts per call under callgrind (only when asked for).
    pub profile: bool,
}

/// Everything a run is told.
#[derive(Debug, Clone)]
pub struct Args {
    pub phases: Phases,
    /// Concurrent soak conversations (both wires together).
    pub streams: usize,
    /// Soak seconds per leg.
    pub seconds: f64,
    /// Turns per soak conversation at most.
    pub turns: usize,
    /// Soak legs: `compressor`, `bare`, `direct`; the latency and
    /// profile phases take `direct` (`bare` reads as it) and `compressor`.
    pub paths: Vec<String>,
    /// What the chain may learn: `classic` legs run on every path, the
    /// others (`budget`, `learn`) once, on the direct path.
    pub chains: Vec<String>,
    /// The first route of each shim answers 502 to everything.
    pub dead_primary: bool,
    /// Concurrent slow streams of the memory phase.
    pub big_streams: usize,
    /// The memory phase without the compressor (shimgate's own cost).
    pub streams_direct: bool,
    /// Latency samples per mode and case at concurrency 1.
    pub samples: usize,
    /// Silent sockets, and as many half-sent heads, of the slowloris wave.
    pub idle_sockets: usize,
    /// Silent sockets open for the RSS figure of the idle phase.
    pub rss_sockets: usize,
    pub seed: u64,
    /// Characters of each soak question.
    pub question_chars: usize,
    /// Calls per case and mode of the profile phase.
    pub profile_calls: usize,
    /// The latency phase over TLS: the agents speak TLS to shimgate and
    /// to the bare forwarder (which then serves TLS too, same crypto).
    pub tls: bool,
}

/// A soak leg, as `--path` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum PathArg {
    Compressor,
    Bare,
    Direct,
    /// `compressor`, then `direct`.
    Both,
}

/// A chain setting, as `--chains` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ChainArg {
    /// Auto ordering, no breaker, no retry budget.
    Classic,
    /// Classic plus the default retry budget.
    Budget,
    /// Measured ordering, the breaker and the retry budget.
    Learn,
}

/// A phase, as `--phases` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum PhaseArg {
    Soak,
    Latency,
    Streams,
    Idle,
    /// shimgate and the bare forwarders under `valgrind --tool=callgrind`:
    /// instructions per call of each case (slow; never in the defaults).
    Profile,
}

/// The command line as given; [`Args`] is what it resolves to.
#[derive(Debug, Parser)]
#[command(
    name = "load",
    bin_name = "cargo bench --bench load --",
    about = "shimgate under load: soak, added latency, slow streams, idle and slowloris sockets"
)]
struct Cli {
    /// About 3.5 minutes: 8 s soak legs, 500 slow streams, 800 latency samples.
    #[arg(long)]
    quick: bool,
    /// The soak and the idle phase, small (about 35 s): 16 conversations, 12 s legs.
    #[arg(long)]
    ci: bool,
    /// Concurrent soak conversations (both wires together) [default: 64; --ci 16].
    #[arg(long, value_name = "N")]
    streams: Option<usize>,
    /// Soak seconds per leg [default: 30; --quick 8, --ci 12].
    #[arg(long, value_name = "S")]
    seconds: Option<f64>,
    /// Turns per soak conversation at most.
    #[arg(long, value_name = "N", default_value_t = 400)]
    turns: usize,
    /// Soak legs; also the latency and profile paths (`bare` counts as
    /// `direct` there).
    #[arg(long, value_enum, default_value = "both")]
    path: PathArg,
    /// What the chain may learn: classic legs on every path, budget and
    /// learn legs once each, direct.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "classic,learn"
    )]
    chains: Vec<ChainArg>,
    /// The first route of each shim is dead (502 to every try): the
    /// figure is upstream requests per call.
    #[arg(long)]
    dead_primary: bool,
    /// Phases to run, comma-separated [default: soak,latency,streams,idle; --ci soak,idle].
    #[arg(long, value_enum, value_delimiter = ',')]
    phases: Option<Vec<PhaseArg>>,
    /// Concurrent slow streams of the memory phase [default: 2000; --quick 500].
    #[arg(long, value_name = "N")]
    big_streams: Option<usize>,
    /// The memory phase without the compressor (shimgate's own cost).
    #[arg(long)]
    streams_direct: bool,
    /// Latency samples per mode and case at concurrency 1 [default: 3000; --quick 800].
    #[arg(long, value_name = "N")]
    samples: Option<usize>,
    /// Silent sockets, and as many half-sent heads, of the slowloris wave.
    #[arg(long, value_name = "N", default_value_t = 500)]
    idle_sockets: usize,
    /// Silent sockets open for the idle phase's RSS figure.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    rss_sockets: usize,
    /// Seed of the fault plans and conversations.
    #[arg(long, value_name = "N", default_value_t = 0x5eed_10ad)]
    seed: u64,
    /// Characters of each soak question.
    #[arg(long, value_name = "N", default_value_t = 336)]
    question_chars: usize,
    /// Calls per case and mode of the profile phase (each under callgrind).
    #[arg(long, value_name = "N", default_value_t = 200)]
    profile_calls: usize,
    /// The latency phase over TLS: agents speak TLS to shimgate (under its
    /// local CA) and to the bare forwarder, which serves TLS too with a
    /// leaf of the same CA and the same rustls config.
    #[arg(long)]
    tls: bool,
    /// Passed by `cargo bench`; nothing to do here.
    #[arg(long, hide = true)]
    bench: bool,
    /// A criterion-style name filter: not used by this tool.
    #[arg(hide = true)]
    filter: Vec<String>,
}

impl Args {
    /// Parses the process arguments (program name first); exits with usage
    /// (status 2) on a bad one.
    pub fn parse(argv: impl IntoIterator<Item = String>) -> Args {
        Args::from(Cli::parse_from(argv))
    }
}

impl From<Cli> for Args {
    /// The values given, else the preset's (`--ci` over `--quick`), else
    /// the defaults.
    fn from(cli: Cli) -> Args {
        let preset = Preset {
            ci: cli.ci,
            quick: cli.quick,
        };
        let phases = match cli.phases {
            Some(list) => Phases {
                soak: list.contains(&PhaseArg::Soak),
                latency: list.contains(&PhaseArg::Latency),
                streams: list.contains(&PhaseArg::Streams),
                idle: list.contains(&PhaseArg::Idle),
                profile: list.contains(&PhaseArg::Profile),
            },
            None => Phases {
                soak: true,
                latency: !cli.ci,
                streams: !cli.ci,
                // A few seconds: part of every run, `--ci` included.
                idle: true,
                profile: false,
            },
        };
        let paths = match cli.path {
            PathArg::Both => vec!["compressor".into(), "direct".into()],
            PathArg::Compressor => vec!["compressor".into()],
            PathArg::Bare => vec!["bare".into()],
            PathArg::Direct => vec!["direct".into()],
        };
        let chains = cli
            .chains
            .iter()
            .map(|c| match c {
                ChainArg::Classic => "classic",
                ChainArg::Budget => "budget",
                ChainArg::Learn => "learn",
            })
            .map(String::from)
            .collect();
        Args {
            phases,
            chains,
            dead_primary: cli.dead_primary,
            streams: preset.pick(cli.streams, Some(16), None, 64),
            seconds: preset.pick(cli.seconds, Some(12.0), Some(8.0), 30.0),
            turns: cli.turns,
            paths,
            big_streams: preset.pick(cli.big_streams, None, Some(500), 2000),
            streams_direct: cli.streams_direct,
            samples: preset.pick(cli.samples, None, Some(800), 3000),
            idle_sockets: cli.idle_sockets,
            rss_sockets: cli.rss_sockets,
            seed: cli.seed,
            question_chars: cli.question_chars,
            profile_calls: cli.profile_calls,
            tls: cli.tls,
        }
    }
}

/// The presets asked for.
struct Preset {
    ci: bool,
    quick: bool,
}

impl Preset {
    /// The value given, else `--ci`'s, else `--quick`'s, else `default`.
    fn pick<T>(&self, given: Option<T>, ci: Option<T>, quick: Option<T>, default: T) -> T {
        given
            .or(ci.filter(|_| self.ci))
            .or(quick.filter(|_| self.quick))
            .unwrap_or(default)
    }
}
