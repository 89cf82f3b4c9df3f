//! The config's MCP upstreams, started: one supervised session per server
//! (`intentgate_mcp_upstream::McpConnection`), what each listed, the imports expanded into
//! tools (`intentgate_config::imports`), and the upstream the gate calls, which sends each
//! tool to its server or to the HTTP upstream.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use async_trait::async_trait;
use intentgate_config::imports::{ImportedTool, expand};
use intentgate_config::{LoadedConfig, UpstreamToolInfo};
use intentgate_core::{RequestFacts, UpstreamObservation};
use intentgate_gate::{LookupOutcome, Upstream, UpstreamCall};
use intentgate_mcp_upstream::{McpConnection, McpUpstream};
use rmcp::model::Tool;

use crate::Error;

/// The running sessions of a config's MCP upstreams, by upstream name.
#[derive(Debug, Default, Clone)]
pub struct McpUpstreams {
    connections: BTreeMap<String, Arc<McpConnection>>,
}

impl McpUpstreams {
    /// Starts every MCP upstream of the config at once and waits for each first session
    /// (`McpConnection::start`): a server that can't start is a config that can't serve.
    pub async fn start(loaded: &LoadedConfig) -> Result<McpUpstreams, Error> {
        crate::assert_secrets_resolved(loaded);
        let starts = loaded.config.mcp_upstreams.values().map(|upstream| {
            let server = upstream.server.clone();
            async move { McpConnection::start(server).await }
        });
        let mut connections = BTreeMap::new();
        let mut failed = Vec::new();
        for started in futures_util::future::join_all(starts).await {
            match started {
                Ok(connection) => {
                    connections.insert(connection.name().to_owned(), Arc::new(connection));
                }
                Err(error) => failed.push(error.to_string()),
            }
        }
        if !failed.is_empty() {
            return Err(Error::McpStart(failed.join("; ")));
        }
        Ok(McpUpstreams { connections })
    }

    /// The sessions by upstream name (what reconciliation lists MCP records through).
    pub fn connections(&self) -> BTreeMap<String, Arc<McpConnection>> {
        self.connections.clone()
    }

    /// True when the config has no MCP upstream.
    pub fn is_empty(&self) -> bool {
        self.connections.is_empty()
    }

    /// What each server listed when its session opened, as the config's imports read it.
    pub fn listed(&self) -> BTreeMap<String, Vec<UpstreamToolInfo>> {
        self.connections
            .iter()
            .map(|(name, connection)| {
                let tools = connection.tools().unwrap_or_default();
                (name.clone(), tools.iter().map(info).collect())
            })
            .collect()
    }

    /// Adds the imported tools to `loaded` and checks every MCP tool the config names
    /// against what its server lists; the classification of every imported tool.
    pub fn expand(&self, loaded: &mut LoadedConfig) -> Result<Vec<ImportedTool>, Error> {
        expand(loaded, &self.listed()).map_err(Error::McpTools)
    }

    /// The gate's upstream for `loaded`'s tools: each MCP tool to its server's session,
    /// every other tool to `http`.
    pub fn route(&self, loaded: &LoadedConfig, http: Arc<dyn Upstream>) -> Arc<dyn Upstream> {
        if self.connections.is_empty() {
            return http;
        }
        let mut routes: HashMap<String, Arc<dyn Upstream>> = HashMap::new();
        for (upstream, tools) in loaded.config.mcp_tools() {
            let Some(connection) = self.connections.get(&upstream) else {
                continue;
            };
            let names: Vec<String> = tools.keys().cloned().collect();
            let mcp: Arc<dyn Upstream> = Arc::new(McpUpstream::new(connection.clone(), tools));
            for name in names {
                routes.insert(name, mcp.clone());
            }
        }
        Arc::new(Routed { routes, http })
    }
}

/// What the gateway reads of one listed tool.
fn info(tool: &Tool) -> UpstreamToolInfo {
    let annotations = tool.annotations.as_ref();
    UpstreamToolInfo {
        name: tool.name.to_string(),
        title: tool
            .title
            .clone()
            .or_else(|| annotations.and_then(|hints| hints.title.clone())),
        description: tool.description.as_ref().map(ToString::to_string),
        input_schema: serde_json::Value::Object((*tool.input_schema).clone()),
        output_schema: tool
            .output_schema
            .as_ref()
            .map(|schema| serde_json::Value::Object((**schema).clone())),
        read_only: annotations.and_then(|hints| hints.read_only_hint),
        destructive: annotations.and_then(|hints| hints.destructive_hint),
        idempotent: annotations.and_then(|hints| hints.idempotent_hint),
        open_world: annotations.and_then(|hints| hints.open_world_hint),
    }
}

/// Sends each tool to the upstream that performs it.
struct Routed {
    routes: HashMap<String, Arc<dyn Upstream>>,
    http: Arc<dyn Upstream>,
}

impl Routed {
    fn of(&self, call: &UpstreamCall<'_>) -> &dyn Upstream {
        self.routes
            .get(&call.tool.name)
            .map_or(self.http.as_ref(), |upstream| upstream.as_ref())
    }
}

#[async_trait]
impl Upstream for Routed {
    fn check(&self, call: UpstreamCall<'_>) -> Result<(), String> {
        self.of(&call).check(call)
    }

    async fn execute(&self, call: UpstreamCall<'_>) -> UpstreamObservation {
        self.of(&call).execute(call).await
    }

    async fn execute_with_facts(
        &self,
        call: UpstreamCall<'_>,
    ) -> (UpstreamObservation, RequestFacts) {
        self.of(&call).execute_with_facts(call).await
    }

    async fn lookup(&self, call: UpstreamCall<'_>) -> LookupOutcome {
        self.of(&call).lookup(call).await
    }
}
