//! `intentgate serve`: the gateway as an HTTP server.
//!
//! Glue only: load and check the config, open the ledger, build the HTTP upstream and the
//! gate, and hand them to `intentgate_server::run_with` with a shutdown future, with MCP over
//! Streamable HTTP mounted at `/mcp` and the admin API (`intentgate_admin`, on only with a
//! token) at `/v1/admin/` beside the HTTP API. Background tasks purge settled intents older
//! than the retention period, sweep intents left in flight or unknown (`Gate::sweep`),
//! evaluate the duplicate-call alert rules over the gate's repeated calls, and reconcile the
//! ledger with the providers every `reconcile.every_seconds` (`intentgate_ops`). The process's
//! open-file limit is raised first and the connection limit fitted under it (`open_files`).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use intentgate_admin::{AdminOptions, FailureLimit};
use intentgate_config::{HashKeySource, LoadedConfig, ReconcileConfig};
use intentgate_core::HashKey;
use intentgate_gate::{Clock, Gate, GateOptions, SystemClock};
use intentgate_http::HttpUpstream;
use intentgate_ledger::{Durability, Ledger};
use intentgate_mcp::{HttpOptions, LOOPBACK_HOSTS, McpService};
use intentgate_ops::{AlertEngine, Notifier, Reconciler};
use intentgate_server::ServerOptions;
use tokio::net::TcpListener;

use crate::cli::ServeArgs;

/// How often the retention purge runs.
const PURGE_EVERY: Duration = Duration::from_secs(60 * 60);
/// How often the sweeper looks for intents left in flight or unknown. Short enough that a
/// crashed call's intent is settled seconds after its lease expires, before a user asks
/// again; long enough that an idle gateway costs one indexed read per status each time. Each
/// intent's lookups are rate-limited on their own, so sweeping often does not mean asking the
/// provider often.
const SWEEP_EVERY: Duration = Duration::from_secs(10);
/// Most intents of each status (expired in flight, unknown) one sweep takes; one sweep
/// handles them one at a time, so this bounds how long it runs. The rest wait for the next.
const SWEEP_LIMIT: u32 = 100;
/// Who an admin API change is attributed to when the request names no actor.
const ADMIN_ACTOR_DEFAULT: &str = "admin-api";

pub async fn run(arguments: ServeArgs) -> anyhow::Result<()> {
    let loaded = load(&arguments.config)?;
    // The admin API is on only with a token (never printed or logged).
    let admin_token = arguments
        .admin_token
        .as_ref()
        .map(|token| token.0.clone())
        .filter(|token| !token.is_empty());
    if let Some(token) = &admin_token {
        intentgate_admin::check_token(token).context("--admin-token (INTENTGATE_ADMIN_TOKEN)")?;
    }
    let gateway = &loaded.config.gateway;
    let connection_limit = match crate::open_files::raise_open_file_limit() {
        Some(limit) => {
            let fitted = crate::open_files::fit_connection_limit(gateway.connection_limit, limit)
                .map_err(anyhow::Error::msg)?;
            if let Some(warning) = &fitted.warning {
                tracing::warn!(target: "intentgate::startup", "{warning}");
            }
            fitted.connections
        }
        None => gateway.connection_limit as usize,
    };
    let listen = arguments
        .listen
        .clone()
        .unwrap_or_else(|| gateway.listen.to_string());
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
    let listener = TcpListener::bind(&listen)
        .await
        .with_context(|| format!("can't listen on {listen}: is another process using it?"))?;
    let address = listener.local_addr()?;
    let authenticator = crate::auth::authenticator(&loaded.config, address)?;
    let options = ServerOptions {
        body_limit_bytes: gateway.body_limit_bytes as usize,
        concurrency_limit: gateway.concurrency_limit as usize,
        shutdown_grace: Duration::from_millis(gateway.shutdown_grace_ms),
        authenticator: Arc::new(authenticator),
        allowed_origins: gateway.allowed_origins.clone(),
        header_read_timeout: Duration::from_millis(gateway.header_read_timeout_ms),
        idle_timeout: Duration::from_millis(gateway.idle_timeout_ms),
        connection_limit,
    };
    tokio::spawn(purge_forever(ledger.clone(), gateway.retention_days));
    tokio::spawn(sweep_forever(gate.clone()));
    // Owners hear about duplicate-call alerts and reconciliation mismatches.
    let notifier = Arc::new(Notifier::new(loaded.config.owners.clone()));
    start_alerts(&loaded, &gate, &notifier);
    let reconciler = Arc::new(
        Reconciler::new(
            &loaded,
            ledger.clone(),
            notifier.clone(),
            Some(gate.metrics().clone()),
        )
        .context("the upstreams of the config")?,
    );
    if loaded.config.reconcile.every_seconds > 0 {
        tokio::spawn(reconcile_forever(
            reconciler.clone(),
            ledger.clone(),
            loaded.config.reconcile.clone(),
        ));
    }
    // Printed on stdout, alone on its line, so scripts and tests can read the port.
    println!("intentgate listening on http://{address}");
    tracing::info!(
        target: "intentgate::startup",
        "serving {} tools from {} (ledger {}, durability {:?})",
        gate.tools().len(),
        arguments.config.display(),
        intentgate_ledger::display_location(&ledger_location),
        durability
    );
    // MCP over Streamable HTTP, through the same gate. A loopback server accepts only
    // loopback Host names (DNS-rebinding protection); a routable one any name.
    let mcp = McpService::new(
        gate.clone(),
        &crate::mcp::hints(&loaded),
        crate::mcp::options(gateway),
    );
    let allowed_hosts = if address.ip().is_loopback() {
        LOOPBACK_HOSTS.map(String::from).to_vec()
    } else {
        Vec::new()
    };
    let mcp_routes = intentgate_mcp::http_router(
        mcp.clone(),
        HttpOptions {
            body_limit_bytes: gateway.body_limit_bytes as usize,
            allowed_hosts,
        },
    );
    // The admin API (flags, intents, reconciliation) under /v1/admin/, over the same ledger.
    // With credentials, a key or token with the `admin` scope reaches the admin API.
    let admin_scope = !options.authenticator.is_none();
    let admin_on = admin_token.is_some() || admin_scope;
    let admin_routes = intentgate_admin::router(
        ledger.clone(),
        AdminOptions {
            token: admin_token,
            tools: loaded.tools.iter().map(|tool| tool.name.clone()).collect(),
            actor_default: ADMIN_ACTOR_DEFAULT.to_owned(),
            failure_limit: FailureLimit::default(),
            admin_scope,
        },
        Some(Arc::new(AdminReconciler(reconciler))),
    );
    if admin_on {
        tracing::info!(
            target: "intentgate::startup",
            "admin API on at /v1/admin/ (the admin token{} required)",
            if admin_scope { ", or a credential with the admin scope," } else { "" }
        );
    } else {
        tracing::info!(
            target: "intentgate::startup",
            "admin API off (set {} to turn it on)",
            intentgate_admin::TOKEN_ENV
        );
    }
    intentgate_server::run_with(
        listener,
        gate,
        options,
        Some(mcp_routes.merge(admin_routes)),
        intentgate_server::shutdown_signal(),
    )
    .await
    .context("the HTTP server stopped")?;
    let still_running = mcp.drain().await;
    if still_running > 0 {
        tracing::warn!(
            still_running,
            "shutdown grace period over; MCP calls still running stay in_flight in the ledger and are resolved by lookup"
        );
    }
    Ok(())
}

/// Loads a config, turning its errors into one message with every line and fix. The hash
/// key of sensitive arguments comes from the environment: `serve` never invents one, since
/// a key that changed at every start would make every stored hash unmatchable.
pub fn load(path: &Path) -> anyhow::Result<LoadedConfig> {
    load_with(path, &HashKeySource::Environment)
}

/// [`load`], with the hash key taken as `hash_key` says.
pub fn load_with(path: &Path, hash_key: &HashKeySource) -> anyhow::Result<LoadedConfig> {
    intentgate_config::load_file_with(path, hash_key).map_err(|errors| anyhow::anyhow!("{errors}"))
}

/// Bytes of a random hash key: SHA-256's output size, the least a key may have.
const EPHEMERAL_HASH_KEY_BYTES: usize = 32;

/// A random hash key, for a command whose ledger lives only as long as it runs (`demo`,
/// `smoke`, benchmarks): nothing it hashes has to match anything later.
pub fn ephemeral_hash_key() -> anyhow::Result<HashKey> {
    let mut bytes = [0u8; EPHEMERAL_HASH_KEY_BYTES];
    getrandom::fill(&mut bytes).map_err(|error| {
        anyhow::anyhow!("the system gave no random bytes for a hash key: {error}")
    })?;
    Ok(HashKey::new(&bytes)?)
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
    let upstream = HttpUpstream::new(loaded.config.upstreams.clone(), loaded.config.http_tools())
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

pub async fn purge_forever(ledger: Arc<dyn Ledger>, retention_days: u32) {
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

/// Sweeps every [`SWEEP_EVERY`], a sweep at a time; logs what a sweep did when it did
/// something.
pub async fn sweep_forever(gate: Arc<Gate>) {
    let mut ticks = tokio::time::interval(SWEEP_EVERY);
    // A sweep slower than the interval delays the next one rather than bunching them.
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        match gate.sweep(SWEEP_LIMIT).await {
            Ok(report) if report.acted() || report.errors > 0 => tracing::info!(
                examined = report.examined,
                resolved_done = report.resolved_done,
                resent = report.resent,
                looked_up = report.looked_up,
                lookup_failed = report.lookup_failed,
                still_unknown = report.still_unknown,
                settled_otherwise = report.settled_otherwise,
                skipped_busy = report.skipped_busy,
                not_due = report.not_due,
                errors = report.errors,
                truncated = report.truncated,
                "swept intents left in flight or unknown"
            ),
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "sweep failed; will try again"),
        }
    }
}

/// Starts the duplicate-call alert rules of `loaded`'s tools over `gate`'s repeated calls.
pub fn start_alerts(loaded: &LoadedConfig, gate: &Arc<Gate>, notifier: &Arc<Notifier>) {
    let engine = AlertEngine::new(loaded);
    if engine.is_empty() {
        return;
    }
    tokio::spawn(engine.run(
        gate.repeated_calls(),
        notifier.clone(),
        gate.ledger().clone(),
        gate.metrics().clone(),
    ));
}

/// Reconciles every `every_seconds` over the last `window_seconds`. Replicas sharing a
/// ledger each run this loop; a replica skips its turn when the ledger shows a run by
/// `serve` that started less than half an interval ago, so one deployment makes about one
/// run (and one set of notices) per interval.
pub async fn reconcile_forever(
    reconciler: Arc<Reconciler>,
    ledger: Arc<dyn Ledger>,
    settings: ReconcileConfig,
) {
    let every = Duration::from_secs(settings.every_seconds.into());
    let window = Duration::from_secs(settings.window_seconds.into());
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let now_ms = SystemClock.now_ms();
        let recent = match ledger.reconciliations(RECENT_RUNS_READ).await {
            Ok(runs) => runs.into_iter().any(|run| {
                run.actor == RECONCILE_ACTOR
                    && now_ms - run.started_ms < every.as_millis() as i64 / 2
            }),
            Err(error) => {
                tracing::warn!(%error, "could not read recent reconciliation runs; reconciling anyway");
                false
            }
        };
        if recent {
            tracing::debug!("another replica reconciled less than half an interval ago; skipping");
            continue;
        }
        let report = reconciler.run(window, now_ms, RECONCILE_ACTOR).await;
        let fields = (
            report.run_id.unwrap_or(0),
            report.mismatches_total,
            report.critical,
        );
        if report.critical > 0 || report.has_errors() {
            tracing::error!(
                run = fields.0,
                mismatches = fields.1,
                critical = fields.2,
                errors = report.has_errors(),
                "reconciliation found critical mismatches or could not complete; the owners were told"
            );
        } else {
            tracing::info!(
                run = fields.0,
                mismatches = fields.1,
                "reconciliation finished"
            );
        }
    }
}

/// The actor of the runs `serve` makes.
const RECONCILE_ACTOR: &str = "serve";
/// Latest runs read to decide whether another replica just reconciled.
const RECENT_RUNS_READ: u32 = 5;

/// Reconciliation for the admin API (`POST /v1/admin/reconcile`).
struct AdminReconciler(Arc<Reconciler>);

#[async_trait::async_trait]
impl intentgate_admin::Reconciler for AdminReconciler {
    async fn reconcile(&self, since: Duration, actor: &str) -> Result<serde_json::Value, String> {
        let report = self.0.run(since, SystemClock.now_ms(), actor).await;
        serde_json::to_value(&report).map_err(|error| error.to_string())
    }
}
