//! Command-line options of the load tool (hand-parsed: `cargo bench`
//! passes its own `--bench` flag, which is ignored here).

/// Which phases run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Phases {
    pub soak: bool,
    pub latency: bool,
    pub streams: bool,
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
    /// Soak legs: `compressor`, `bare`, `direct`.
    pub paths: Vec<String>,
    /// Concurrent slow streams of the memory phase.
    pub big_streams: usize,
    /// The memory phase without the compressor (shimgate's own cost).
    pub streams_direct: bool,
    /// Latency samples per mode and case at concurrency 1.
    pub samples: usize,
    pub seed: u64,
    /// Characters of each soak question.
    pub question_chars: usize,
    /// The short CI variant.
    pub ci: bool,
}

impl Args {
    /// Parses the process arguments; exits with usage on a bad one.
    pub fn parse(argv: impl Iterator<Item = String>) -> Args {
        let mut a = Args {
            phases: Phases {
                soak: true,
                latency: true,
                streams: true,
            },
            streams: 64,
            seconds: 30.0,
            turns: 400,
            paths: vec!["compressor".into(), "direct".into()],
            big_streams: 2000,
            streams_direct: false,
            samples: 3000,
            seed: 0x5eed_10ad,
            question_chars: 336,
            ci: false,
        };
        let argv: Vec<String> = argv.collect();
        let mut i = 0;
        let value = |i: &mut usize| -> String {
            *i += 1;
            argv.get(*i)
                .cloned()
                .unwrap_or_else(|| usage("missing value"))
        };
        while i < argv.len() {
            match argv[i].as_str() {
                "--bench" => {}
                "--quick" => {
                    a.seconds = 8.0;
                    a.big_streams = 500;
                    a.samples = 800;
                }
                "--ci" => {
                    a.ci = true;
                    a.phases = Phases {
                        soak: true,
                        latency: false,
                        streams: false,
                    };
                    a.streams = 16;
                    a.seconds = 12.0;
                }
                "--streams" => a.streams = number(&value(&mut i)),
                "--seconds" => a.seconds = number::<f64>(&value(&mut i)),
                "--turns" => a.turns = number(&value(&mut i)),
                "--big-streams" => a.big_streams = number(&value(&mut i)),
                "--streams-direct" => a.streams_direct = true,
                "--samples" => a.samples = number(&value(&mut i)),
                "--seed" => a.seed = number(&value(&mut i)),
                "--question-chars" => a.question_chars = number(&value(&mut i)),
                "--path" => {
                    let v = value(&mut i);
                    a.paths = match v.as_str() {
                        "both" => vec!["compressor".into(), "direct".into()],
                        "compressor" | "bare" | "direct" => vec![v],
                        _ => usage("--path is compressor, bare, direct or both"),
                    };
                }
                "--phases" => {
                    let v = value(&mut i);
                    let has = |p: &str| v.split(',').any(|x| x == p);
                    a.phases = Phases {
                        soak: has("soak"),
                        latency: has("latency"),
                        streams: has("streams"),
                    };
                }
                other if other.starts_with("--") => usage(&format!("unknown option {other}")),
                // A criterion-style name filter: not used by this tool.
                _ => {}
            }
            i += 1;
        }
        a
    }
}

fn number<T: std::str::FromStr>(v: &str) -> T {
    v.parse()
        .unwrap_or_else(|_| usage(&format!("not a number: {v}")))
}

fn usage(why: &str) -> ! {
    eprintln!(
        "load: {why}\nusage: cargo bench --bench load -- [--quick|--ci] [--streams N] [--seconds S] \
         [--turns N] [--path compressor|bare|direct|both] [--phases soak,latency,streams] \
         [--big-streams N] [--streams-direct] [--samples N] [--seed N] [--question-chars N]"
    );
    std::process::exit(2)
}
