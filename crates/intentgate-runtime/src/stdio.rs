//! The gateway as an MCP server on stdin and stdout, started by an agent (a desktop client,
//! an agent framework) as its tool server; and the MCP service both servers build.
//!
//! stdout is the protocol: everything else goes to the logs. Besides the calls, this server
//! heartbeats in the ledger (its leases are taken over once it is gone), runs the retention
//! purge, the duplicate-call alerts for the calls it serves, and the
//! sweeper: an agent may run only stdio gateways on a ledger, and an intent one of them left
//! in flight or unknown must still be settled without an operator. Sweepers of several
//! processes share the work through the ledger's leases and each intent's lookup interval.
//! Reconciliation runs in an HTTP gateway or `intentgate reconcile` (one per deployment is
//! enough).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use intentgate_config::{GatewayConfig, LoadedConfig};
use intentgate_gate::Gate;
use intentgate_mcp::{McpOptions, McpService, ToolHints};
use intentgate_ops::Notifier;

use crate::{Error, Gateway};

impl Gateway {
    /// Serves MCP on stdin and stdout until `shutdown` completes or the client closes stdin,
    /// then waits (bounded by the grace period) for the calls still running.
    pub async fn serve_stdio(self, shutdown: impl Future<Output = ()>) -> Result<(), Error> {
        let mut background = self.start_background();
        // Kept in the ledger's history, which the HTTP replicas on the same ledger list.
        let notifier = Arc::new(
            Notifier::new(self.loaded.config.owners.clone()).with_history(self.ledger.clone()),
        );
        background.add(crate::start_alerts(&self.loaded, &self.gate, &notifier));
        background.add(Some(crate::start_upstream_notices(
            &self.loaded,
            &self.gate,
            &notifier,
        )));
        background.add(Some(crate::start_lookup_notices(
            &self.loaded,
            &self.gate,
            &notifier,
        )));
        background.add(Some(crate::start_key_reuse_notices(
            &self.loaded,
            &self.gate,
            &notifier,
        )));
        background.add(Some(crate::start_held_notices(
            &self.loaded,
            &self.gate,
            &notifier,
        )));
        self.log_start(" over MCP on stdio");
        let service = mcp_service(&self.loaded, self.gate.clone());
        let served = intentgate_mcp::serve_stdio(service, shutdown).await;
        drop(background);
        crate::tasks::stop(&self.gate).await;
        served.map_err(Error::Stdio)
    }
}

/// The MCP service over `gate`, with each tool's hints and the gateway's limits.
pub(crate) fn mcp_service(loaded: &LoadedConfig, gate: Arc<Gate>) -> McpService {
    McpService::new(gate, &hints(loaded), options(&loaded.config.gateway))
}

/// The MCP hints each tool's config sets (`destructive`, `open_world`), and for an imported
/// tool its server's title and output schema.
fn hints(loaded: &LoadedConfig) -> BTreeMap<String, ToolHints> {
    loaded
        .config
        .tools
        .iter()
        .map(|tool| {
            let imported = tool.mcp.as_ref().and_then(|mcp| mcp.imported.as_ref());
            (
                tool.name.clone(),
                ToolHints {
                    destructive: tool.destructive,
                    open_world: tool.open_world,
                    title: imported.and_then(|info| info.title.clone()),
                    upstream_output_schema: imported.and_then(|info| info.output_schema.clone()),
                },
            )
        })
        .collect()
}

/// The MCP server's settings from the gateway's.
fn options(gateway: &GatewayConfig) -> McpOptions {
    McpOptions {
        tenant: gateway.tenant.clone(),
        concurrency_limit: gateway.concurrency_limit,
        shutdown_grace: Duration::from_millis(gateway.shutdown_grace_ms),
    }
}
