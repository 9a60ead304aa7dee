//! Config loading: defaults, a full file, and every kind of bad value with
//! its key path.

use super::*;

fn err(toml: &str) -> String {
    match Config::from_toml(toml) {
        Ok(_) => panic!("accepted:\n{toml}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn empty_file_gives_the_defaults() {
    let c = Config::from_toml("").unwrap();
    assert_eq!(c, Config::default());
    assert_eq!(
        c.shim("qoder").unwrap().listen.to_string(),
        "127.0.0.1:47001"
    );
    assert_eq!(
        c.shim("trae").unwrap().listen.to_string(),
        "127.0.0.1:47011"
    );
    assert_eq!(c.retry.max_retries, 5);
    assert_eq!(c.retry.initial_delay, Duration::from_millis(500));
    assert_eq!(c.retry.max_delay, Duration::from_secs(10));
    assert_eq!(c.ordering.mode, OrderingMode::Auto);
    assert!(c.compressor.is_none());
    assert!(c.shim("qoder").unwrap().routes.is_empty());
}

#[test]
fn the_design_example_loads() {
    let c = Config::from_toml(
        r#"
[compressor]
url = "http://127.0.0.1:8787/"

[retry]
max_retries = 3
initial_delay_ms = 100
max_delay_ms = 2000
jitter_ratio = 0.2
retryable = ["RATE_LIMIT", "SERVER"]

[ordering]
mode = "manual"
quota_cooldown_ms = 60000

[upstream]
connect_timeout_ms = 1000
first_byte_timeout_ms = 2000
idle_timeout_ms = 3000

[limits]
max_body_bytes = 1024

[shims.qoder]
enabled = true
listen = "127.0.0.1:47001"
allow_remote = false
compressor = "http://127.0.0.1:8788"
codec = "exec"
codec_command = ["node", "encode.mjs"]

[[shims.qoder.routes]]
name = "qoder-intl"
url = "https://upstream.example"
max_concurrency = 2
headers = { "X-Extra" = "1" }

[shims.trae]
listen = "127.0.0.1:47011"

[[shims.trae.routes]]
name = "trae-cn"
url = "https://upstream.example/base/"
"#,
    )
    .unwrap();
    assert_eq!(c.compressor.as_deref(), Some("http://127.0.0.1:8787"));
    assert_eq!(c.compressor_for("qoder"), Some("http://127.0.0.1:8788"));
    assert_eq!(c.compressor_for("trae"), Some("http://127.0.0.1:8787"));
    assert_eq!(
        c.retry.retryable,
        vec![FailureCode::RateLimit, FailureCode::Server]
    );
    assert_eq!(c.ordering.mode, OrderingMode::Manual);
    assert_eq!(c.max_body_bytes, 1024);
    assert_eq!(
        c.shim("qoder").unwrap().codec,
        Codec::Exec(vec!["node".into(), "encode.mjs".into()])
    );
    assert_eq!(c.shim("qoder").unwrap().routes[0].max_concurrency, 2);
    assert_eq!(
        c.shim("qoder").unwrap().routes[0].headers[0].0.as_str(),
        "x-extra"
    );
    assert_eq!(
        c.shim("trae").unwrap().routes[0].url,
        "https://upstream.example/base"
    );
}

#[test]
fn relative_route_url_names_its_path() {
    let e = err(r#"
[[shims.trae.routes]]
name = "a"
url = "https://ok.example"
[[shims.trae.routes]]
name = "b"
url = "upstream.example/x"
"#);
    assert!(
        e.starts_with("shims.trae.routes[1].url: relative URL without a base"),
        "{e}"
    );
}

#[test]
fn unknown_key_is_rejected_with_its_path() {
    let e = err("[retry]\nmax_retry = 3\n");
    assert!(
        e.starts_with("retry.max_retry: unknown field `max_retry`"),
        "{e}"
    );
}

#[test]
fn wrong_type_names_the_key() {
    let e = err("[retry]\nmax_retries = \"five\"\n");
    assert!(e.starts_with("retry.max_retries:"), "{e}");
}

#[test]
fn unknown_retryable_code_names_its_index() {
    let e = err("[retry]\nretryable = [\"SERVER\", \"FLAKY\"]\n");
    assert_eq!(e, "retry.retryable[1]: unknown failure code \"FLAKY\"");
}

#[test]
fn jitter_above_one_is_rejected() {
    let e = err("[retry]\njitter_ratio = 1.5\n");
    assert_eq!(e, "retry.jitter_ratio: 1.5 is not between 0 and 1");
}

#[test]
fn max_delay_below_initial_is_rejected() {
    let e = err("[retry]\ninitial_delay_ms = 1000\nmax_delay_ms = 10\n");
    assert!(e.starts_with("retry.max_delay_ms: 10 is below"), "{e}");
}

#[test]
fn zero_timeout_is_rejected() {
    let e = err("[upstream]\nidle_timeout_ms = 0\n");
    assert_eq!(e, "upstream.idle_timeout_ms: must be > 0, got 0");
}

#[test]
fn bad_ordering_mode_is_rejected() {
    let e = err("[ordering]\nmode = \"fastest\"\n");
    assert_eq!(
        e,
        "ordering.mode: \"fastest\" is not \"auto\", \"manual\" or \"measured\""
    );
}

#[test]
fn remote_listen_needs_allow_remote() {
    let e = err("[shims.qoder]\nlisten = \"0.0.0.0:47001\"\n");
    assert!(
        e.starts_with("shims.qoder.listen: 0.0.0.0:47001 is not a loopback"),
        "{e}"
    );
    Config::from_toml("[shims.qoder]\nlisten = \"0.0.0.0:47001\"\nallow_remote = true\n").unwrap();
}

#[test]
fn bad_listen_address_is_rejected() {
    let e = err("[shims.trae]\nlisten = \"localhost\"\n");
    assert_eq!(
        e,
        "shims.trae.listen: \"localhost\" is not an ip:port address"
    );
}

#[test]
fn same_listen_for_both_shims_is_rejected() {
    let e = err("[shims.trae]\nlisten = \"127.0.0.1:47001\"\n");
    assert!(
        e.starts_with("shims.trae.listen: 127.0.0.1:47001 is also"),
        "{e}"
    );
}

#[test]
fn exec_codec_needs_a_command() {
    let e = err("[shims.qoder]\ncodec = \"exec\"\n");
    assert!(e.starts_with("shims.qoder.codec_command:"), "{e}");
}

#[test]
fn trae_has_no_codec() {
    let e = err("[shims.trae]\ncodec = \"plain\"\n");
    assert_eq!(e, "shims.trae.codec: this shim has no codec");
}

#[test]
fn duplicate_route_name_is_rejected() {
    let e = err(
        "[[shims.qoder.routes]]\nname = \"a\"\nurl = \"http://x\"\n[[shims.qoder.routes]]\nname = \"a\"\nurl = \"http://y\"\n",
    );
    assert_eq!(
        e,
        "shims.qoder.routes[1].name: \"a\" is used by an earlier route"
    );
}

#[test]
fn bad_header_value_is_rejected() {
    let e = err(
        "[[shims.qoder.routes]]\nname = \"a\"\nurl = \"http://x\"\nheaders = { \"X-A\" = \"a\\nb\" }\n",
    );
    assert!(e.starts_with("shims.qoder.routes[0].headers.X-A:"), "{e}");
}

#[test]
fn compressor_with_ftp_scheme_is_rejected() {
    let e = err("[compressor]\nurl = \"ftp://127.0.0.1\"\n");
    assert!(
        e.starts_with("compressor.url: scheme must be http or https"),
        "{e}"
    );
}

#[test]
fn toml_syntax_error_names_the_line() {
    let e = err("[retry]\nmax_retries = \n");
    assert!(e.contains("line 2"), "{e}");
}

#[test]
fn zero_body_limit_is_rejected() {
    let e = err("[limits]\nmax_body_bytes = 0\n");
    assert_eq!(e, "limits.max_body_bytes: must be > 0, got 0");
}

#[test]
fn an_unknown_shim_section_names_the_known_ones() {
    let e = err("[shims.gemini]\nenabled = true\n");
    assert!(
        e.starts_with("shims.gemini: unknown shim \"gemini\" (known: qoder, trae"),
        "{e}"
    );
}

#[test]
fn an_empty_route_list_for_an_enabled_shim_names_the_key() {
    let e = err("[shims.trae]\nroutes = []\n");
    assert!(e.starts_with("shims.trae.routes: is empty"), "{e}");
    Config::from_toml("[shims.trae]\nenabled = false\nroutes = []\n").unwrap();
}

#[test]
fn client_limits_have_sane_defaults_and_refuse_zero() {
    let c = Config::default();
    assert_eq!(c.client.header_read_timeout.as_secs(), 30);
    assert_eq!(c.client.idle_timeout.as_secs(), 120);
    assert_eq!(c.client.max_connections, 1024);
    let e = err("[limits]\nmax_connections = 0\n");
    assert_eq!(e, "limits.max_connections: must be > 0, got 0");
}

#[test]
fn one_worker_by_default_and_a_bounded_number_when_asked() {
    assert_eq!(Config::default().client.workers, 1);
    let c = Config::from_toml("[limits]\nworkers = 4\n").unwrap();
    assert_eq!(c.client.workers, 4);
    assert_eq!(
        err("[limits]\nworkers = 0\n"),
        "limits.workers: must be 1 to 64, got 0"
    );
    assert_eq!(
        err("[limits]\nworkers = 65\n"),
        "limits.workers: must be 1 to 64, got 65"
    );
}

#[test]
fn the_learning_keys_load_with_their_defaults_and_values() {
    let d = Config::from_toml("").unwrap();
    assert_eq!(d.retry.budget_ratio, 0.2);
    assert_eq!(d.retry.budget_min_per_s, 3);
    assert_eq!(d.breaker.failures, 5);
    assert_eq!(d.breaker.open, Duration::from_secs(30));
    assert_eq!(d.breaker.max_open, Duration::from_secs(600));
    assert_eq!(d.state_ttl, Duration::from_secs(24 * 3600));
    assert_eq!(d.ordering.quota_cooldown_hour, None);
    let c = Config::from_toml(
        r#"
[retry]
budget_ratio = 0.5
budget_min_per_s = 0
[ordering]
mode = "measured"
quota_cooldown_hour = 4
measure_window_ms = 2000
[breaker]
failures = 3
open_ms = 50
max_open_ms = 400
[state]
ttl_ms = 0
"#,
    )
    .unwrap();
    assert_eq!(c.ordering.mode, OrderingMode::Measured);
    assert_eq!(c.ordering.quota_cooldown_hour, Some(4));
    assert_eq!(c.ordering.measure_window, Duration::from_secs(2));
    assert_eq!((c.retry.budget_ratio, c.retry.budget_min_per_s), (0.5, 0));
    assert_eq!(c.breaker.failures, 3);
    assert_eq!(c.breaker.open, Duration::from_millis(50));
    assert_eq!(c.breaker.max_open, Duration::from_millis(400));
    assert_eq!(c.state_ttl, Duration::ZERO);
}

#[test]
fn bad_learning_keys_name_their_path() {
    for (toml, want) in [
        (
            "[ordering]\nquota_cooldown_hour = 24\n",
            "ordering.quota_cooldown_hour: 24 is not an hour of the day (0-23)",
        ),
        (
            "[ordering]\nmeasure_window_ms = 0\n",
            "ordering.measure_window_ms: must be > 0, got 0",
        ),
        (
            "[retry]\nbudget_ratio = -0.1\n",
            "retry.budget_ratio: -0.1 is not between 0 and 100",
        ),
        (
            "[breaker]\nopen_ms = 0\n",
            "breaker.open_ms: must be > 0, got 0",
        ),
        (
            "[breaker]\nopen_ms = 5000\nmax_open_ms = 1000\n",
            "breaker.max_open_ms: 1000 is below breaker.open_ms (5000)",
        ),
        ("[breaker]\nfailures = -1\n", "breaker.failures"),
        ("[state]\nttl = 5\n", "state"),
        (
            "[retry]\nbudget_min_per_s = \"a\"\n",
            "retry.budget_min_per_s",
        ),
    ] {
        let e = err(toml);
        assert!(e.starts_with(want), "{toml}: {e}");
    }
}

#[test]
fn route_windows_load_and_bad_values_name_their_key() {
    let base = "[[shims.trae.routes]]\nname = \"a\"\nurl = \"http://x\"\n";
    let c = Config::from_toml(&format!(
        "{base}active_hours = [\"22-6\", \"9-12\"]\nuntil = \"2026-12-31\"\n"
    ))
    .unwrap();
    let w = &c.shim("trae").unwrap().routes[0].window;
    assert_eq!(w.hours, [(22, 6), (9, 12)]);
    assert_eq!(
        w.until.map(|d| d.to_string()).as_deref(),
        Some("2026-12-31")
    );
    assert!(Config::from_toml(base)
        .unwrap()
        .shim("trae")
        .unwrap()
        .routes[0]
        .window
        .always());
    for (value, key) in [
        (
            "active_hours = [\"25-3\"]",
            "shims.trae.routes[0].active_hours[0]",
        ),
        (
            "active_hours = [\"9-12\", \"9\"]",
            "shims.trae.routes[0].active_hours[1]",
        ),
        (
            "active_hours = [\"a-b\"]",
            "shims.trae.routes[0].active_hours[0]",
        ),
        ("until = \"2026-13-01\"", "shims.trae.routes[0].until"),
        ("until = \"31.12.2026\"", "shims.trae.routes[0].until"),
    ] {
        let e = err(&format!("{base}{value}\n"));
        assert!(e.starts_with(&format!("{key}: ")), "{value}: {e}");
    }
}

#[test]
fn admin_hosts_and_token_file_load_and_bad_hosts_name_their_index() {
    let c = Config::from_toml(
        "[admin]\nallowed_hosts = [\"MyBox.lan\", \"box:8080\"]\ntoken_file = \"/tmp/t\"\n",
    )
    .unwrap();
    assert_eq!(c.admin.allowed_hosts, ["mybox.lan", "box:8080"]);
    assert_eq!(c.admin_token_file(), std::path::PathBuf::from("/tmp/t"));
    assert!(Config::default()
        .admin_token_file()
        .ends_with("admin.token"));
    for bad in ["http://box", "box/x", "", "a b"] {
        let e = err(&format!("[admin]\nallowed_hosts = [\"ok\", \"{bad}\"]\n"));
        assert!(e.starts_with("admin.allowed_hosts[1]: "), "{bad}: {e}");
    }
}

#[test]
fn savings_keys_are_checked_with_their_key_path() {
    let c = Config::from_toml("").unwrap();
    assert_eq!(
        (c.savings.days, c.savings.conversations, c.savings.file),
        (DEFAULT_SAVINGS_DAYS, DEFAULT_SAVINGS_CONVERSATIONS, true)
    );
    let c = Config::from_toml("[savings]\ndays = 14\nconversations = 20\nfile = false\n").unwrap();
    assert_eq!(
        (c.savings.days, c.savings.conversations, c.savings.file),
        (14, 20, false)
    );
    assert_eq!(
        err("[savings]\ndays = 0\n"),
        "savings.days: must be 1 to 3660, got 0"
    );
    assert_eq!(
        err("[savings]\nconversations = 100000\n"),
        "savings.conversations: must be 1 to 10000, got 100000"
    );
    assert!(err("[savings]\nkeep = 3\n").contains("unknown field"));
}

#[test]
fn ca_names_default_to_the_providers_and_bad_ones_name_their_key() {
    let c = Config::from_toml("").unwrap();
    assert_eq!(c.ca.names, ca::DEFAULT_CA_NAMES);
    let c = Config::from_toml("[ca]\nnames = [\"Qoder.sh\", \"example.com\"]\n").unwrap();
    assert_eq!(c.ca.names, ["qoder.sh", "example.com"]);
    let e = err("[ca]\nnames = [\"qoder.sh\", \".trae.ai\"]\n");
    assert!(
        e.starts_with("ca.names[1]: \".trae.ai\" starts with a dot"),
        "{e}"
    );
    let e = err("[ca]\nnames = [\"com\"]\n");
    assert!(e.starts_with("ca.names[0]:"), "{e}");
    let e = err("[ca]\nname = [\"qoder.sh\"]\n");
    assert!(e.contains("unknown field `name`"), "{e}");
}
