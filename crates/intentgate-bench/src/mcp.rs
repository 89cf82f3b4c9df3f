//! `intentgate bench mcp`: what the gate adds to a call of an MCP server's tool, over calling
//! that server directly (docs/design.md section 11, measured as section 12 asks).
//!
//! One process holds a refund server that speaks MCP over Streamable HTTP on a loopback port
//! (the official SDK's server side, stateless, answering JSON), a SQLite ledger, a gate whose
//! one side-effecting tool is performed on that server through the MCP upstream, and the real
//! gateway HTTP server, which also serves MCP at `/mcp`. Each round makes one new refund per
//! series, the series taking turns to go first, so that a burst of noise on a shared machine
//! lands on all of them:
//!
//! 1. `direct`: the SDK's client calls the server's `refund` tool itself, with a new key in
//!    `_meta`: the baseline, the call an agent makes without the gateway;
//! 2. `gate`: `Gate::call` in process, the upstream sending the same `tools/call` over its own
//!    session: the ledger's writes and what the gate does around them;
//! 3. `http`: `POST /v1/tools/refund_order/call` to the gateway over one keep-alive
//!    connection;
//! 4. `mcp`: the SDK's client calls `refund_order` on the gateway's `/mcp`: MCP in front of
//!    the gateway as well as behind it.
//!
//! The report gives each series' p50 and p99, and what each of the last three adds over the
//! direct call. Every gate, HTTP and MCP call must answer `done`, every direct call a refund,
//! the server must have made one refund per call and never replayed a key, and the ledger
//! must hold one `done` intent per call through the gateway; otherwise the run fails.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use clap::Args;
use intentgate_core::{CallStatus, Effect, IntentStatus, ToolDefinition};
use intentgate_gate::{CallContext, Gate, GateOptions, SystemClock};
use intentgate_ledger::{Ledger, SqliteLedger, SqliteOptions};
use intentgate_mcp::{HttpOptions, LOOPBACK_HOSTS, McpOptions, McpService};
use intentgate_mcp_upstream::{
    McpConnection, McpLookup, McpServer, McpTool, McpToolCall, McpTransport, McpUpstream,
    result_value,
};
use reqwest::header::CONTENT_TYPE;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, JsonObject,
    ListToolsResult, PaginatedRequestParams, RequestMetaObject, ServerCapabilities, ServerConfig,
    Tool,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::{
    StreamableHttpClientTransport, StreamableHttpServerConfig, StreamableHttpService,
};
use rmcp::{ErrorData, RoleClient, RoleServer, ServerHandler, ServiceExt};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::gateway::GatewayServer;
use crate::loopback::LoopbackServer;
use crate::measure::{
    cores, existing_folder, microseconds, percentile, progress, rounded, scratch_folder,
};
use intentgate_terminal::DurabilityArgument;
use intentgate_terminal::table::{self, Align};

/// `intentgate bench mcp`.
#[derive(Debug, Args)]
pub struct McpBenchArgs {
    /// The folder the ledger goes in (in a temporary folder inside it). Pick a folder on the
    /// disk that will hold the real ledger: under strict durability its fsyncs are measured.
    #[arg(long, env = "INTENTGATE_BENCH_DIR", default_value = ".")]
    pub dir: PathBuf,

    #[arg(
        long,
        default_value_t = ROUNDS_DEFAULT,
        value_parser = clap::value_parser!(u32).range(1..=i64::from(ROUNDS_MAX)),
        help = format!(
            "Measured rounds (1 to {ROUNDS_MAX}), each making one new refund per series"
        )
    )]
    pub rounds: u32,

    /// What a ledger write promises before the upstream call: `strict` fsyncs it (survives a
    /// power loss), `relaxed` does not (survives a crash of the process).
    #[arg(long, env = "INTENTGATE_DURABILITY", value_enum, default_value_t = DurabilityArgument::Strict)]
    pub durability: DurabilityArgument,

    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Default measured rounds: a stable p50 and a meaningful p99 in well under a minute under
/// strict durability (each round makes three intents, each with an fsync).
pub const ROUNDS_DEFAULT: u32 = 1_000;
/// Most measured rounds: bounds the run's time, the server's refunds and the memory of the
/// latencies kept.
pub const ROUNDS_MAX: u32 = 50_000;
/// Unmeasured rounds made first, so that opening connections and filling statement caches
/// are not counted.
const WARM_UP_ROUNDS: u32 = 50;
/// The series of a round: direct, gate, HTTP, MCP.
const SERIES: u32 = 4;
/// Longest wait for one answer, over any of the series: every one here takes milliseconds.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The gate's tool, and the server's tools it is performed and found with.
const TOOL_NAME: &str = "refund_order";
const TOOL_KEY: &str = "refund:{order_id}:{amount}";
const SERVER_TOOL: &str = "refund";
const LOOKUP_TOOL: &str = "find_refund";
/// The `_meta` member the server reads the idempotency key from, as the MCP upstream sends it.
const KEY_META: &str = "idempotency_key";
/// Every refund is of this amount; the order ids keep the calls distinct.
const AMOUNT: &str = "10.00";
/// The name the gate's upstream gives the server, for its logs.
const SERVER_NAME: &str = "refunds";

/// Runs the benchmark and prints its report.
pub async fn run(arguments: McpBenchArgs) -> anyhow::Result<()> {
    // reqwest is built without a crypto provider; an error only means one is installed.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = existing_folder(&arguments.dir)?;
    // Declared first so that it is removed after the ledger has closed.
    let scratch = scratch_folder(&dir, "intentgate-bench-")?;
    let progress = progress(arguments.json);

    progress("starting the MCP refund server on a loopback port ...");
    let refunds = RefundServer::default();
    let server = RefundHttp::serve(refunds.clone()).await?;
    let measured = measure_against(&server.url, &scratch, &arguments, &progress).await;
    let stopped = server.stop().await;
    let (measured, intents_done) = measured?;
    stopped?;
    scratch
        .close()
        .with_context(|| format!("can't remove the temporary folder in {}", dir.display()))?;

    let calls = u64::from(SERIES * (WARM_UP_ROUNDS + arguments.rounds));
    let made = refunds.made();
    ensure!(
        refunds.replays() == 0,
        "the server replayed {} refunds: a call reused another's idempotency key",
        refunds.replays()
    );
    ensure!(
        made == calls,
        "the server made {made} refunds after {calls} calls; expected one per call"
    );
    let through_gateway = u64::from((SERIES - 1) * (WARM_UP_ROUNDS + arguments.rounds));
    ensure!(
        intents_done == through_gateway,
        "the ledger holds {intents_done} done intents after {through_gateway} calls through the gateway"
    );

    let report = Report::new(
        arguments.durability,
        &dir,
        arguments.rounds,
        &measured,
        made,
        intents_done,
    );
    if arguments.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.table());
    }
    Ok(())
}

/// Opens the ledger, the gate over the server at `server_url` and the gateway, measures, and
/// closes them; returns the latencies and the ledger's `done` intents.
async fn measure_against(
    server_url: &str,
    scratch: &tempfile::TempDir,
    arguments: &McpBenchArgs,
    progress: &impl Fn(&str),
) -> anyhow::Result<(Measured, u64)> {
    progress("opening a SQLite ledger, the MCP upstream and the gateway on a loopback port ...");
    let ledger = Arc::new(
        SqliteLedger::open(
            scratch.path().join("ledger.sqlite3"),
            SqliteOptions {
                durability: arguments.durability.into(),
                inline: false,
            },
        )
        .context("opening the intent ledger")?,
    );
    let connection = McpConnection::start(McpServer {
        name: SERVER_NAME.to_owned(),
        transport: McpTransport::Http {
            url: server_url.to_owned(),
            headers: BTreeMap::new(),
        },
        timeout: REQUEST_TIMEOUT,
    })
    .await
    .context("the MCP upstream's session with the refund server")?;
    let upstream = McpUpstream::new(
        Arc::new(connection),
        BTreeMap::from([(TOOL_NAME.to_owned(), upstream_tool())]),
    );
    let gate = Arc::new(Gate::new(
        vec![gate_tool()?],
        ledger.clone(),
        Arc::new(upstream),
        Arc::new(SystemClock),
        GateOptions::default(),
    )?);
    let mcp_routes = intentgate_mcp::http_router(
        McpService::new(gate.clone(), &BTreeMap::new(), McpOptions::default()),
        HttpOptions {
            body_limit_bytes: intentgate_server::ServerOptions::default().body_limit_bytes,
            allowed_hosts: LOOPBACK_HOSTS.map(String::from).to_vec(),
        },
    );
    let gateway = GatewayServer::serve_with(gate.clone(), Some(mcp_routes)).await?;

    let measured = async {
        let bench = Bench {
            gate: gate.clone(),
            direct: McpClient::connect(server_url).await?,
            front: McpClient::connect(&format!("{}{}", gateway.url, intentgate_mcp::MCP_PATH))
                .await?,
            http: reqwest::Client::builder()
                .timeout(REQUEST_TIMEOUT)
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .context("building the benchmark's HTTP client")?,
            call_url: format!("{}/v1/tools/{TOOL_NAME}/call", gateway.url),
        };
        let measured = bench.measure(arguments.rounds, progress).await;
        bench.close().await;
        measured
    }
    .await;
    let stopped = gateway.stop().await;
    let measured = measured?;
    stopped?;

    let done: u64 = ledger
        .status_counts()
        .await?
        .iter()
        .filter(|count| count.status == IntentStatus::Done)
        .map(|count| count.count)
        .sum();
    drop(gate);
    drop(ledger);
    Ok((measured, done))
}

/// The gate's refund: a side effect keyed by order and amount, performed on the server.
fn gate_tool() -> anyhow::Result<ToolDefinition> {
    Ok(ToolDefinition::new(
        TOOL_NAME,
        "Refund an order through the refund server's MCP tool.",
        Effect::SideEffect,
        refund_schema(),
        Some(TOOL_KEY),
        REQUEST_TIMEOUT,
        0,
    )?)
}

/// The gate's arguments sent as they are, the key in `_meta`, and `find_refund` to find a
/// refund whose outcome was lost.
fn upstream_tool() -> McpTool {
    McpTool {
        call: McpToolCall::new(SERVER_TOOL),
        lookup: Some(McpLookup {
            call: McpToolCall {
                arguments: Some(json!({"order_id": "{order_id}"})),
                ..McpToolCall::new(LOOKUP_TOOL)
            },
            found: "/refund".to_owned(),
            external_id: None,
            key: Some("/idempotency_key".to_owned()),
            match_fields: Default::default(),
        }),
    }
}

fn refund_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "order_id": {"type": "string"},
            "amount": {"type": "string", "pattern": "^[0-9]+(\\.[0-9]{1,2})?$"}
        },
        "required": ["order_id", "amount"],
        "additionalProperties": false
    })
}

fn arguments(order_id: &str) -> Value {
    json!({"order_id": order_id, "amount": AMOUNT})
}

// The refund server.

/// An MCP server with two tools: `refund`, which makes one refund per idempotency key (taken
/// from the request's `_meta`) and replays it for a key it has seen, and `find_refund`, which
/// finds an order's refund. Everything is in memory; clones share it.
#[derive(Debug, Clone, Default)]
struct RefundServer {
    state: Arc<Mutex<Refunds>>,
}

#[derive(Debug, Default)]
struct Refunds {
    /// Each refund, by the key it was made with.
    by_key: HashMap<String, Value>,
    /// The key of each order's refund.
    by_order: HashMap<String, String>,
    /// Calls answered with a refund made before, under the same key.
    replays: u64,
}

impl RefundServer {
    /// Refunds made.
    fn made(&self) -> u64 {
        self.lock().by_key.len() as u64
    }

    /// Calls answered from a refund made before.
    fn replays(&self) -> u64 {
        self.lock().replays
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Refunds> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn tools() -> Vec<Tool> {
        let schema = |value: Value| match value {
            Value::Object(members) => Arc::new(members),
            _ => unreachable!("a JSON object literal"),
        };
        let mut refund_schema = schema(refund_schema());
        Arc::make_mut(&mut refund_schema).remove("additionalProperties");
        vec![
            Tool::new(
                SERVER_TOOL,
                "Refund an order; the request's _meta.idempotency_key makes a retry safe.",
                refund_schema,
            ),
            Tool::new(
                LOOKUP_TOOL,
                "Find the refund of an order.",
                schema(json!({
                    "type": "object",
                    "properties": {"order_id": {"type": "string"}},
                    "required": ["order_id"]
                })),
            ),
        ]
    }

    /// `refund`: the refund made under the request's key, made now if the key is new.
    fn refund(&self, arguments: &JsonObject, key: Option<String>) -> Result<Value, ErrorData> {
        let key = key.ok_or_else(|| {
            ErrorData::invalid_params(format!("_meta.{KEY_META} is required"), None)
        })?;
        let order_id = text_argument(arguments, "order_id")?;
        let amount = text_argument(arguments, "amount")?;
        let mut refunds = self.lock();
        if let Some(refund) = refunds.by_key.get(&key).cloned() {
            refunds.replays += 1;
            return Ok(refund);
        }
        let id = format!("re_{}", refunds.by_key.len() + 1);
        let refund = json!({
            "id": id,
            "order_id": order_id,
            "amount": amount,
            "status": "succeeded",
            "idempotency_key": key,
        });
        refunds.by_order.insert(order_id.to_owned(), key.clone());
        refunds.by_key.insert(key, refund.clone());
        Ok(refund)
    }

    /// `find_refund`: `{"refund": ...}`, `null` when the order has none.
    fn find_refund(&self, arguments: &JsonObject) -> Result<Value, ErrorData> {
        let order_id = text_argument(arguments, "order_id")?;
        let refunds = self.lock();
        let refund = refunds
            .by_order
            .get(order_id)
            .and_then(|key| refunds.by_key.get(key))
            .cloned()
            .unwrap_or(Value::Null);
        Ok(json!({"refund": refund}))
    }
}

fn text_argument<'a>(arguments: &'a JsonObject, name: &str) -> Result<&'a str, ErrorData> {
    arguments
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| ErrorData::invalid_params(format!("`{name}` must be a string"), None))
}

/// The request's idempotency key: the SDK moves `_meta` into the context; read both, in case
/// a transport leaves it in place.
fn idempotency_key(request: &CallToolRequestParams, context: &RequestMetaObject) -> Option<String> {
    let from = |meta: &RequestMetaObject| {
        meta.get(KEY_META)
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    from(context).or_else(|| request.meta.as_ref().and_then(from))
}

impl ServerHandler for RefundServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_server_info(
            Implementation::new("intentgate-bench-refunds", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(RefundServer::tools()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        RefundServer::tools()
            .into_iter()
            .find(|tool| tool.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = request.arguments.clone().unwrap_or_default();
        let value = match request.name.as_ref() {
            SERVER_TOOL => self.refund(&arguments, idempotency_key(&request, &context.meta))?,
            LOOKUP_TOOL => self.find_refund(&arguments)?,
            other => {
                return Err(ErrorData::invalid_params(
                    format!("no tool named `{other}`"),
                    None,
                ));
            }
        };
        Ok(CallToolResponse::from(CallToolResult::structured(value)))
    }
}

/// The refund server over Streamable HTTP on a free loopback port, in this process.
struct RefundHttp {
    /// `http://127.0.0.1:PORT/mcp`.
    url: String,
    server: LoopbackServer,
}

impl RefundHttp {
    /// Serves `server` statelessly (no sessions; each answer a JSON body), as the gateway
    /// serves its own MCP endpoint.
    async fn serve(server: RefundServer) -> anyhow::Result<RefundHttp> {
        let config = StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_json_response(true);
        let endpoint = StreamableHttpService::new(
            move || Ok(server.clone()),
            Arc::new(NeverSessionManager::default()),
            config,
        );
        let app = axum::Router::new().route_service("/mcp", endpoint);
        let server = LoopbackServer::start("the refund server", app).await?;
        Ok(RefundHttp {
            url: format!("{}/mcp", server.url),
            server,
        })
    }

    async fn stop(self) -> anyhow::Result<()> {
        self.server.stop().await
    }
}

// The measurement.

/// The SDK's client with one session over Streamable HTTP, as the MCP upstream opens one.
struct McpClient {
    service: RunningService<RoleClient, ()>,
}

impl McpClient {
    async fn connect(url: &str) -> anyhow::Result<McpClient> {
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .context("building the benchmark's MCP client")?;
        let transport = StreamableHttpClientTransport::with_client(
            http,
            StreamableHttpClientTransportConfig::with_uri(url),
        );
        let service = tokio::time::timeout(REQUEST_TIMEOUT, ().serve(transport))
            .await
            .with_context(|| format!("no MCP handshake with {url}"))?
            .with_context(|| format!("the MCP handshake with {url}"))?;
        Ok(McpClient { service })
    }

    /// `tools/call` of `tool` with `arguments`, and `_meta.idempotency_key` when `key` is
    /// given; the result's value.
    async fn call(&self, tool: &str, arguments: Value, key: Option<&str>) -> anyhow::Result<Value> {
        let mut params = json!({"name": tool, "arguments": arguments});
        if let Some(key) = key {
            params["_meta"] = json!({KEY_META: key});
        }
        let params: CallToolRequestParams = serde_json::from_value(params)?;
        let result = tokio::time::timeout(REQUEST_TIMEOUT, self.service.peer().call_tool(params))
            .await
            .with_context(|| format!("no answer to `{tool}` within {REQUEST_TIMEOUT:?}"))??;
        let value = result_value(&result);
        ensure!(
            result.is_error != Some(true),
            "`{tool}` answered an error: {value}"
        );
        Ok(value)
    }

    async fn close(self) {
        let _ = self.service.cancel().await;
    }
}

/// What every series drives.
struct Bench {
    gate: Arc<Gate>,
    /// A session with the refund server.
    direct: McpClient,
    /// A session with the gateway's `/mcp`.
    front: McpClient,
    http: reqwest::Client,
    /// `POST` a call of the gate's tool to the gateway.
    call_url: String,
}

/// Latencies of every measured call, one series each, in round order.
struct Measured {
    direct: Vec<Duration>,
    gate: Vec<Duration>,
    http: Vec<Duration>,
    mcp: Vec<Duration>,
}

/// The part of an outcome the benchmark checks.
#[derive(Debug, Deserialize)]
struct OutcomeView {
    status: CallStatus,
    #[serde(default)]
    message: String,
}

impl Bench {
    async fn measure(&self, rounds: u32, progress: &impl Fn(&str)) -> anyhow::Result<Measured> {
        progress(&format!(
            "warming up with {WARM_UP_ROUNDS} rounds of four new refunds (direct, gate, HTTP, MCP) ..."
        ));
        self.rounds("warm-up", WARM_UP_ROUNDS).await?;
        progress(&format!(
            "measuring {rounds} rounds of four new refunds, one per series, each round started by the next series ..."
        ));
        self.rounds("measured", rounds).await
    }

    async fn rounds(&self, label: &str, rounds: u32) -> anyhow::Result<Measured> {
        let mut measured = Measured {
            direct: Vec::with_capacity(rounds as usize),
            gate: Vec::with_capacity(rounds as usize),
            http: Vec::with_capacity(rounds as usize),
            mcp: Vec::with_capacity(rounds as usize),
        };
        for round in 0..rounds {
            for turn in 0..SERIES {
                match (round + turn) % SERIES {
                    0 => {
                        let order_id = format!("{label}-direct-{round}");
                        measured.direct.push(self.direct_refund(&order_id).await?);
                    }
                    1 => {
                        let order_id = format!("{label}-gate-{round}");
                        measured.gate.push(self.gate_refund(&order_id).await?);
                    }
                    2 => {
                        let order_id = format!("{label}-http-{round}");
                        measured.http.push(self.http_refund(&order_id).await?);
                    }
                    _ => {
                        let order_id = format!("{label}-mcp-{round}");
                        measured.mcp.push(self.mcp_refund(&order_id).await?);
                    }
                }
            }
        }
        Ok(measured)
    }

    /// `refund` on the server itself, with a key of its own.
    async fn direct_refund(&self, order_id: &str) -> anyhow::Result<Duration> {
        let key = format!("bench-direct-{order_id}");
        let started = Instant::now();
        let refund = self
            .direct
            .call(SERVER_TOOL, arguments(order_id), Some(&key))
            .await
            .with_context(|| format!("the direct refund of order {order_id}"))?;
        let latency = started.elapsed();
        ensure!(
            refund["order_id"] == order_id && refund["id"].is_string(),
            "the direct refund of order {order_id} answered {refund}"
        );
        Ok(latency)
    }

    /// `Gate::call` in process.
    async fn gate_refund(&self, order_id: &str) -> anyhow::Result<Duration> {
        let started = Instant::now();
        let outcome = self
            .gate
            .call(TOOL_NAME, arguments(order_id), &CallContext::default())
            .await?;
        let latency = started.elapsed();
        ensure!(
            outcome.status == CallStatus::Done,
            "the refund of order {order_id} through the gate was {}: {}",
            outcome.status,
            outcome.message
        );
        Ok(latency)
    }

    /// `POST /v1/tools/refund_order/call` to the gateway.
    async fn http_refund(&self, order_id: &str) -> anyhow::Result<Duration> {
        let body = serde_json::to_vec(&json!({"arguments": arguments(order_id)}))?;
        let started = Instant::now();
        let response = self
            .http
            .post(&self.call_url)
            .header(CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await
            .with_context(|| format!("the refund of order {order_id} over HTTP"))?;
        let status = response.status();
        let body = response.bytes().await?;
        let latency = started.elapsed();
        ensure!(
            status.is_success(),
            "the refund of order {order_id} over HTTP answered HTTP {status}: {}",
            String::from_utf8_lossy(&body)
        );
        let outcome: OutcomeView = serde_json::from_slice(&body).with_context(|| {
            format!(
                "the refund of order {order_id} over HTTP is not an outcome: {}",
                String::from_utf8_lossy(&body)
            )
        })?;
        check_done(order_id, "over HTTP", &outcome)?;
        Ok(latency)
    }

    /// `refund_order` on the gateway's `/mcp`.
    async fn mcp_refund(&self, order_id: &str) -> anyhow::Result<Duration> {
        let started = Instant::now();
        let value = self
            .front
            .call(TOOL_NAME, arguments(order_id), None)
            .await
            .with_context(|| format!("the refund of order {order_id} over the gateway's MCP"))?;
        let latency = started.elapsed();
        let outcome: OutcomeView = serde_json::from_value(value.clone()).with_context(|| {
            format!(
                "the refund of order {order_id} over the gateway's MCP is not an outcome: {value}"
            )
        })?;
        check_done(order_id, "over the gateway's MCP", &outcome)?;
        Ok(latency)
    }

    async fn close(self) {
        self.direct.close().await;
        self.front.close().await;
    }
}

fn check_done(order_id: &str, route: &str, outcome: &OutcomeView) -> anyhow::Result<()> {
    if outcome.status != CallStatus::Done {
        bail!(
            "the refund of order {order_id} {route} was {}: {}",
            outcome.status,
            outcome.message
        );
    }
    Ok(())
}

/// p50 and p99 of a series, in microseconds.
fn p50_p99_us(samples: &[Duration]) -> (f64, f64) {
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    (
        microseconds(percentile(&sorted, 0.5)),
        microseconds(percentile(&sorted, 0.99)),
    )
}

/// What the run measured. Serialised by `--json`: its field names are a promise to users.
#[derive(Debug, Serialize)]
struct Report {
    durability: &'static str,
    /// The folder the ledger was in (absolute).
    dir: String,
    /// Cores this process may use; the servers, the clients and the ledger share them.
    cores: usize,
    warm_up_rounds: u32,
    /// Measured rounds; each made one refund per series.
    rounds: u32,
    /// The SDK's client calling the server's tool directly: the baseline.
    direct_p50_us: f64,
    direct_p99_us: f64,
    /// `Gate::call` in process, over the MCP upstream.
    gate_p50_us: f64,
    gate_p99_us: f64,
    /// `POST /v1/tools/refund_order/call` to the gateway.
    http_p50_us: f64,
    http_p99_us: f64,
    /// The SDK's client calling the gateway's `/mcp`.
    mcp_p50_us: f64,
    mcp_p99_us: f64,
    /// What each adds over the direct call, at each percentile.
    added_by_gate_p50_us: f64,
    added_by_gate_p99_us: f64,
    added_over_http_p50_us: f64,
    added_over_http_p99_us: f64,
    added_over_mcp_p50_us: f64,
    added_over_mcp_p99_us: f64,
    /// Each p50 over the direct call's p50.
    ratio_gate_to_direct_p50: f64,
    ratio_http_to_direct_p50: f64,
    ratio_mcp_to_direct_p50: f64,
    /// Refunds the server made: one per call, warm-up included.
    refunds: u64,
    /// Intents the ledger holds `done` afterwards: one per call through the gateway.
    intents_done: u64,
}

impl Report {
    fn new(
        durability: DurabilityArgument,
        dir: &Path,
        rounds: u32,
        measured: &Measured,
        refunds: u64,
        intents_done: u64,
    ) -> Report {
        let (direct_p50, direct_p99) = p50_p99_us(&measured.direct);
        let (gate_p50, gate_p99) = p50_p99_us(&measured.gate);
        let (http_p50, http_p99) = p50_p99_us(&measured.http);
        let (mcp_p50, mcp_p99) = p50_p99_us(&measured.mcp);
        Report {
            durability: durability.as_str(),
            dir: dir.display().to_string(),
            cores: cores(),
            warm_up_rounds: WARM_UP_ROUNDS,
            rounds,
            direct_p50_us: rounded(direct_p50, 1),
            direct_p99_us: rounded(direct_p99, 1),
            gate_p50_us: rounded(gate_p50, 1),
            gate_p99_us: rounded(gate_p99, 1),
            http_p50_us: rounded(http_p50, 1),
            http_p99_us: rounded(http_p99, 1),
            mcp_p50_us: rounded(mcp_p50, 1),
            mcp_p99_us: rounded(mcp_p99, 1),
            added_by_gate_p50_us: rounded(gate_p50 - direct_p50, 1),
            added_by_gate_p99_us: rounded(gate_p99 - direct_p99, 1),
            added_over_http_p50_us: rounded(http_p50 - direct_p50, 1),
            added_over_http_p99_us: rounded(http_p99 - direct_p99, 1),
            added_over_mcp_p50_us: rounded(mcp_p50 - direct_p50, 1),
            added_over_mcp_p99_us: rounded(mcp_p99 - direct_p99, 1),
            ratio_gate_to_direct_p50: rounded(gate_p50 / direct_p50, 3),
            ratio_http_to_direct_p50: rounded(http_p50 / direct_p50, 3),
            ratio_mcp_to_direct_p50: rounded(mcp_p50 / direct_p50, 3),
            refunds,
            intents_done,
        }
    }

    fn table(&self) -> String {
        let us = |value: f64| format!("{value:.1} us");
        let ratio = |value: f64| format!("{value:.2}");
        let row = |label: &str, p50: String, p99: String, ratio: String| {
            [label.to_owned(), p50, p99, ratio]
        };
        let rows = [
            row(
                "measure",
                "p50".to_owned(),
                "p99".to_owned(),
                "p50 / direct".to_owned(),
            ),
            row(
                "direct: MCP client -> server (baseline)",
                us(self.direct_p50_us),
                us(self.direct_p99_us),
                String::new(),
            ),
            row(
                "gate: Gate::call over the MCP upstream",
                us(self.gate_p50_us),
                us(self.gate_p99_us),
                ratio(self.ratio_gate_to_direct_p50),
            ),
            row(
                "  added by the gate (gate - direct)",
                us(self.added_by_gate_p50_us),
                us(self.added_by_gate_p99_us),
                String::new(),
            ),
            row(
                "HTTP: POST /v1/tools/refund_order/call",
                us(self.http_p50_us),
                us(self.http_p99_us),
                ratio(self.ratio_http_to_direct_p50),
            ),
            row(
                "  added over HTTP (HTTP - direct)",
                us(self.added_over_http_p50_us),
                us(self.added_over_http_p99_us),
                String::new(),
            ),
            row(
                "MCP: MCP client -> gateway /mcp",
                us(self.mcp_p50_us),
                us(self.mcp_p99_us),
                ratio(self.ratio_mcp_to_direct_p50),
            ),
            row(
                "  added over MCP (MCP - direct)",
                us(self.added_over_mcp_p50_us),
                us(self.added_over_mcp_p99_us),
                String::new(),
            ),
        ];
        let mut text = format!(
            "intentgate bench mcp: a side-effecting tool of an MCP server (Streamable HTTP, on \
             loopback) through the gate, over a SQLite ledger, durability {}, in {} ({} cores)\n\
             {} rounds measured after {} warm-up rounds, each making one new refund per series, \
             the series taking turns to go first; every call through the gateway was `done`, the \
             server made {} refunds (one per call) and the ledger holds {} done intents.\n\n",
            self.durability,
            self.dir,
            self.cores,
            self.rounds,
            self.warm_up_rounds,
            self.refunds,
            self.intents_done,
        );
        text.push_str(&table::render(
            rows,
            &[Align::Left, Align::Right, Align::Right, Align::Right],
        ));
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn milliseconds(values: &[u64]) -> Vec<Duration> {
        values.iter().copied().map(Duration::from_millis).collect()
    }

    #[test]
    fn the_report_subtracts_the_direct_call() {
        let measured = Measured {
            direct: milliseconds(&[2, 4]),
            gate: milliseconds(&[3, 7]),
            http: milliseconds(&[4, 8]),
            mcp: milliseconds(&[5, 12]),
        };
        let report = Report::new(
            DurabilityArgument::Strict,
            Path::new("/bench"),
            2,
            &measured,
            8,
            6,
        );
        assert_eq!(report.added_by_gate_p50_us, 1_000.0);
        assert_eq!(report.added_by_gate_p99_us, 3_000.0);
        assert_eq!(report.added_over_http_p50_us, 2_000.0);
        assert_eq!(report.added_over_http_p99_us, 4_000.0);
        assert_eq!(report.added_over_mcp_p50_us, 3_000.0);
        assert_eq!(report.added_over_mcp_p99_us, 8_000.0);
        assert_eq!(report.ratio_gate_to_direct_p50, 1.5);
        assert_eq!(report.ratio_http_to_direct_p50, 2.0);
        assert_eq!(report.ratio_mcp_to_direct_p50, 2.5);
        assert!(report.table().contains("added by the gate"));
    }

    #[tokio::test]
    async fn the_refund_server_makes_one_refund_per_key_and_finds_it() {
        let refunds = RefundServer::default();
        let server = RefundHttp::serve(refunds.clone()).await.unwrap();
        let client = McpClient::connect(&server.url).await.unwrap();

        let first = client
            .call(SERVER_TOOL, arguments("8812"), Some("key-1"))
            .await
            .unwrap();
        assert_eq!(first["order_id"], "8812");
        assert_eq!(first["amount"], AMOUNT);
        let again = client
            .call(SERVER_TOOL, arguments("8812"), Some("key-1"))
            .await
            .unwrap();
        assert_eq!(again, first);
        let other = client
            .call(SERVER_TOOL, arguments("8813"), Some("key-2"))
            .await
            .unwrap();
        assert_ne!(other["id"], first["id"]);
        assert_eq!((refunds.made(), refunds.replays()), (2, 1));

        let found = client
            .call(LOOKUP_TOOL, json!({"order_id": "8812"}), None)
            .await
            .unwrap();
        assert_eq!(found["refund"], first);
        let missing = client
            .call(LOOKUP_TOOL, json!({"order_id": "9999"}), None)
            .await
            .unwrap();
        assert_eq!(missing["refund"], Value::Null);
        // Without a key nothing is made.
        assert!(
            client
                .call(SERVER_TOOL, arguments("8814"), None)
                .await
                .is_err()
        );
        assert_eq!(refunds.made(), 2);

        client.close().await;
        server.stop().await.unwrap();
    }

    #[tokio::test]
    async fn a_short_run_refunds_once_per_call_through_each_series() {
        let dir = tempfile::tempdir().unwrap();
        run(McpBenchArgs {
            dir: dir.path().to_owned(),
            rounds: 3,
            durability: DurabilityArgument::Relaxed,
            json: true,
        })
        .await
        .unwrap();
    }
}
