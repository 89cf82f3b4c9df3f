//! `intentgate serve`: the gateway as an HTTP server.
//!
//! Glue only: load and check the config, open the ledger, build the HTTP upstream and the
//! gate, and hand them to `intentgate_server::run` with a shutdown future. A background task
//! purges settled intents older than the retention period.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use intentgate_config::LoadedConfig;
use intentgate_gate::{Clock, Gate, GateOptions, SystemClock};
use intentgate_http::{HttpTool, HttpUpstream};
use intentgate_ledger::{Durability, Ledger, SqliteLedger, SqliteOptions};
use intentgate_server::ServerOptions;
use tokio::net::TcpListener;

use crate::cli::ServeArgs;

/// How often the retention purge runs.
const PURGE_EVERY: Duration = Duration::from_secs(60 * 60);

pub async fn run(arguments: ServeArgs) -> anyhow::Result<()> {
    let loaded = load(&arguments.config)?;
    let gateway = &loaded.config.gateway;
    let listen = arguments
        .listen
        .clone()
        .unwrap_or_else(|| gateway.listen.to_string());
    let ledger_path = arguments
        .ledger
        .clone()
        .unwrap_or_else(|| gateway.ledger.clone().into());
    let durability: Durability = match arguments.durability {
        Some(argument) => argument.into(),
        None => gateway.durability.into(),
    };
    let ledger = Arc::new(
        SqliteLedger::open(
            &ledger_path,
            SqliteOptions {
                durability,
                inline: false,
            },
        )
        .context("opening the intent ledger")?,
    );
    let gate = Arc::new(build_gate(&loaded, ledger.clone(), Arc::new(SystemClock))?);
    let options = ServerOptions {
        body_limit_bytes: gateway.body_limit_bytes as usize,
        concurrency_limit: gateway.concurrency_limit as usize,
        shutdown_grace: Duration::from_millis(gateway.shutdown_grace_ms),
        tenant: gateway.tenant.clone(),
    };
    let listener = TcpListener::bind(&listen)
        .await
        .with_context(|| format!("can't listen on {listen}: is another process using it?"))?;
    let address = listener.local_addr()?;
    tokio::spawn(purge_forever(ledger.clone(), gateway.retention_days));
    // Printed on stdout, alone on its line, so scripts and tests can read the port.
    println!("intentgate listening on http://{address}");
    eprintln!(
        "serving {} tools from {} (ledger {}, durability {:?})",
        gate.tools().len(),
        arguments.config.display(),
        ledger_path.display(),
        durability
    );
    intentgate_server::run(
        listener,
        gate,
        options,
        intentgate_server::shutdown_signal(),
    )
    .await
    .context("the HTTP server stopped")
}

/// Loads a config, turning its errors into one message with every line and fix.
pub fn load(path: &Path) -> anyhow::Result<LoadedConfig> {
    intentgate_config::load_file(path).map_err(|errors| anyhow::anyhow!("{errors}"))
}

/// The gate over a config's tools, with the HTTP upstream they describe.
pub fn build_gate(
    loaded: &LoadedConfig,
    ledger: Arc<dyn Ledger>,
    clock: Arc<dyn Clock>,
) -> anyhow::Result<Gate> {
    build_gate_with(loaded, ledger, clock, GateOptions::default())
}

/// [`build_gate`] with chosen gate options.
pub fn build_gate_with(
    loaded: &LoadedConfig,
    ledger: Arc<dyn Ledger>,
    clock: Arc<dyn Clock>,
    options: GateOptions,
) -> anyhow::Result<Gate> {
    let tools: BTreeMap<String, HttpTool> = loaded
        .config
        .tools
        .iter()
        .map(|tool| {
            (
                tool.name.clone(),
                HttpTool {
                    call: tool.call.clone(),
                    lookup: tool.lookup.clone(),
                },
            )
        })
        .collect();
    let upstream = HttpUpstream::new(loaded.config.upstreams.clone(), tools)
        .context("the upstreams of the config")?;
    Gate::new(
        loaded.tools.clone(),
        ledger,
        Arc::new(upstream),
        clock,
        options,
    )
    .context("the tools of the config")
}

async fn purge_forever(ledger: Arc<SqliteLedger>, retention_days: u32) {
    let retention_ms = i64::from(retention_days) * 24 * 60 * 60 * 1000;
    let mut ticks = tokio::time::interval(PURGE_EVERY);
    loop {
        ticks.tick().await;
        let cutoff_ms = SystemClock.now_ms() - retention_ms;
        match ledger.purge(cutoff_ms).await {
            Ok(0) => {}
            Ok(purged) => tracing::info!(
                purged,
                retention_days,
                "purged settled intents past retention"
            ),
            Err(error) => tracing::warn!(%error, "retention purge failed; will try again"),
        }
    }
}
