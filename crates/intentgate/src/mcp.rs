//! `intentgate mcp`: the gateway as an MCP server on stdin and stdout, started by an agent
//! (a desktop client, an agent framework) as its tool server.
//!
//! Glue only, like `serve`: load the config, open the ledger, build the gate, and hand it
//! to `intentgate_mcp::serve_stdio`. stdout is the protocol: everything else this command
//! says goes to stderr.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use intentgate_config::{GatewayConfig, LoadedConfig};
use intentgate_gate::SystemClock;
use intentgate_ledger::Durability;
use intentgate_mcp::{McpOptions, McpService, ToolHints, serve_stdio};

use crate::cli::McpArgs;
use crate::serve::{build_gate, load, purge_forever};

pub async fn run(arguments: McpArgs) -> anyhow::Result<()> {
    let loaded = load(&arguments.config)?;
    let gateway = &loaded.config.gateway;
    let ledger_location = arguments
        .ledger
        .clone()
        .unwrap_or_else(|| gateway.ledger.clone());
    let durability: Durability = match arguments.durability {
        Some(argument) => argument.into(),
        None => gateway.durability.into(),
    };
    // A SQLite file, or PostgreSQL for a postgres:// URL.
    let ledger = intentgate_ledger::open(&ledger_location, durability)
        .await
        .context("opening the intent ledger")?;
    let gate = Arc::new(build_gate(&loaded, ledger.clone(), Arc::new(SystemClock))?);
    // Duplicate-call alerts for the calls this process serves (reconciliation runs in
    // `serve` or `intentgate reconcile`: one per deployment is enough).
    let notifier = Arc::new(intentgate_ops::Notifier::new(loaded.config.owners.clone()));
    crate::serve::start_alerts(&loaded, &gate, &notifier);
    tokio::spawn(purge_forever(ledger, gateway.retention_days));
    tracing::info!(
        target: "intentgate::startup",
        "serving {} tools over MCP on stdio from {} (ledger {}, durability {:?})",
        gate.tools().len(),
        arguments.config.display(),
        intentgate_ledger::display_location(&ledger_location),
        durability
    );
    let service = McpService::new(gate, &hints(&loaded), options(gateway));
    serve_stdio(service, intentgate_server::shutdown_signal())
        .await
        .context("serving MCP on stdio")?;
    // Every call has ended (or the grace period has). When stdin is not a pipe, tokio reads
    // it on a blocking thread that nothing can interrupt, and the runtime would wait for
    // that read at exit: a stopped server would hang until its client writes or closes.
    let _ = std::io::Write::flush(&mut std::io::stdout());
    std::process::exit(0)
}

/// The MCP hints each tool's config sets (`destructive`, `open_world`).
pub fn hints(loaded: &LoadedConfig) -> BTreeMap<String, ToolHints> {
    loaded
        .config
        .tools
        .iter()
        .map(|tool| {
            (
                tool.name.clone(),
                ToolHints {
                    destructive: tool.destructive,
                    open_world: tool.open_world,
                },
            )
        })
        .collect()
}

/// The MCP server's settings from the gateway's.
pub fn options(gateway: &GatewayConfig) -> McpOptions {
    McpOptions {
        tenant: gateway.tenant.clone(),
        concurrency_limit: gateway.concurrency_limit,
        shutdown_grace: Duration::from_millis(gateway.shutdown_grace_ms),
    }
}
