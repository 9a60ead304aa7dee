//! The demo's moving parts started together on free loopback ports: the
//! two scripted providers, both shims (`server::start`) routed to them, and
//! the reference compressor in front of a shim listener.

use std::net::SocketAddr;
use std::time::Duration;

use super::providers::{self, Provider};
use super::{DEMO_KEEP_TURNS, DEMO_THRESHOLD_CHARS};
use crate::compressor::{self, Compressor, Policy};
use crate::config::Config;
use crate::server::{self, Running};

/// How long the summary waits for shimgate to close the connections the
/// qoder provider holds open (it does so right after the answer).
const RELEASE_PATIENCE: Duration = Duration::from_millis(500);

/// Everything the demo runs (providers and compressor stop when dropped).
pub struct Stack {
    pub qoder: Provider,
    pub trae: Provider,
    pub running: Running,
    pub compressor: Compressor,
    pub qoder_shim: String,
    pub trae_shim: String,
}

/// The shims' config: routes to the providers, maybe the compressor.
fn shim_config(stack_urls: (&str, &str), compressor: Option<&str>) -> Result<Config, String> {
    let (qoder, trae) = stack_urls;
    // No retries: the providers are local, so a retry would only hide a bug.
    // No route state file and no savings file: the demo's routes and
    // tokens are not the user's.
    let mut toml = format!(
        "[retry]\nmax_retries = 0\ninitial_delay_ms = 20\nmax_delay_ms = 100\n\n\
         [state]\nttl_ms = 0\n\n[savings]\nfile = false\n\n\
         [upstream]\nfirst_byte_timeout_ms = 10000\nidle_timeout_ms = 10000\n\n\
         [[shims.qoder.routes]]\nname = \"demo-qoder\"\nurl = \"{qoder}\"\n\n\
         [[shims.trae.routes]]\nname = \"demo-trae\"\nurl = \"{trae}\"\n"
    );
    if let Some(url) = compressor {
        toml.push_str(&format!("\n[compressor]\nurl = \"{url}\"\n"));
    }
    let mut config = Config::from_toml(&toml).map_err(|e| format!("demo config: {e}"))?;
    config.listen_on_free_ports();
    Ok(config)
}

/// Starts providers, shims and compressor on free loopback ports.
pub async fn start() -> Result<Stack, String> {
    let bind = |e: std::io::Error| format!("cannot start a scripted provider: {e}");
    let qoder = Provider::start(providers::qoder::answer)
        .await
        .map_err(bind)?;
    let trae = Provider::start(providers::trae::answer)
        .await
        .map_err(bind)?;
    let urls = (qoder.url(), trae.url());
    // The compressor needs a shim's port and the shims need the compressor's:
    // start the shims first, then swap in the config that names it.
    let running = server::start(shim_config((&urls.0, &urls.1), None)?).await;
    let status = running.status();
    let addr = |name: &str, key: &str| {
        running
            .addr(name)
            .map(|a| format!("http://{a}"))
            .ok_or_else(|| {
                format!(
                    "the {name} shim did not start: {}",
                    status[key]["startError"]
                )
            })
    };
    let qoder_shim = addr("qoder", "qoderShim")?;
    let trae_shim = addr("trae", "traeShim")?;
    let policy = Policy {
        threshold_chars: DEMO_THRESHOLD_CHARS,
        keep_turns: DEMO_KEEP_TURNS,
        pass_through: false,
    };
    // Every listener serves both shims' return legs, so one compressor in
    // front of the qoder listener serves trae too (as billion-context does
    // with its single upstream).
    let compressor = compressor::start(SocketAddr::from(([127, 0, 0, 1], 0)), &qoder_shim, policy)
        .await
        .map_err(|e| format!("cannot start the compressor: {e}"))?;
    let config = shim_config((&urls.0, &urls.1), Some(&compressor.url()))?;
    running.app.replace_config(config);
    Ok(Stack {
        qoder,
        trae,
        running,
        compressor,
        qoder_shim,
        trae_shim,
    })
}

/// Waits until shimgate has closed every connection the qoder provider
/// held open after `event:finish` (it stops reading at the sentinel).
pub async fn holds_released(p: &Provider) -> (u64, u64) {
    let start = tokio::time::Instant::now();
    loop {
        let (held, released) = p.log().holds();
        if released >= held || start.elapsed() > RELEASE_PATIENCE {
            return (held, released);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
