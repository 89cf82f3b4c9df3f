//! A running gateway from a loaded config: what `intentgate serve` and `intentgate mcp` are,
//! as a library a Rust program can embed.
//!
//! [`Gateway::open`] opens the ledger (a SQLite file, or PostgreSQL for a `postgres://` URL)
//! and builds the `Gate` over the config's tools and their HTTP upstream. Then either
//! [`Gateway::bind`] binds the HTTP listener and starts the background tasks, and
//! [`HttpGateway::run`] serves the HTTP API with MCP over Streamable HTTP at `/mcp` and the
//! admin API at `/v1/admin/` until a shutdown future completes; or [`Gateway::serve_stdio`]
//! serves MCP on stdin and stdout. The background tasks (`tasks.rs`: the process heartbeat,
//! retention purge, sweeper, duplicate-call alerts, reconciliation schedule) stop with the
//! server. A gateway registers its process in the ledger when it opens it, heartbeats while
//! it serves and marks itself stopped when it stops, so the leases of a process that died
//! are taken over at once.
//!
//! ```no_run
//! # async fn embed() -> Result<(), intentgate_runtime::Error> {
//! let loaded = intentgate_runtime::load("gateway.yaml".as_ref())?;
//! let gateway = intentgate_runtime::Gateway::open(loaded, Default::default()).await?;
//! let server = gateway.bind().await?;
//! println!("listening on {}", server.local_addr());
//! server.run(intentgate_server::shutdown_signal()).await
//! # }
//! ```
//!
//! The few pieces the other commands share (loading a config, a throwaway hash key, a gate
//! over a config) are here too, so that a config becomes a `Gate` in one place; and so are
//! the process's logging ([`logs`]: the format, the filter, fields callers can't forge) and
//! its traces ([`telemetry`]: OTLP export when a collector is named), which every command
//! sets up before it runs.

mod auth;
mod error;
mod http;
pub mod logs;
mod mcp;
mod open_files;
mod stdio;
mod tasks;
pub mod telemetry;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use intentgate_config::{DurabilityMode, HashKeySource, LoadedConfig, ResolutionConfig};
use intentgate_core::HashKey;
use intentgate_gate::{Clock, Gate, GateOptions, Resolution, SystemClock};
use intentgate_http::HttpUpstream;
use intentgate_ledger::{Durability, Ledger};

pub use auth::authenticator;
pub use error::{AuthError, Error};
pub use http::HttpGateway;
pub use mcp::McpUpstreams;
pub use tasks::{
    HEARTBEAT_EVERY, PURGE_EVERY, SILENT_AFTER, SWEEP_EVERY, purge_forever, reconcile_forever,
    start_alerts, start_held_notices, start_key_reuse_notices, start_lookup_notices,
    start_upstream_notices, sweep_forever,
};

use crate::tasks::Background;

/// How a gateway runs beyond its config: what the command line may override, and the admin
/// token. Every field is optional; the default runs the config as it is.
#[derive(Clone, Default)]
pub struct Options {
    /// Where the config was read from, named in the startup log.
    pub config_path: Option<PathBuf>,
    /// Address to listen on instead of `gateway.listen` (port 0 picks a free port).
    pub listen: Option<String>,
    /// The ledger instead of `gateway.ledger`: a SQLite file or a `postgres://` URL. A
    /// relative path is read from the working directory, as a command line's is.
    pub ledger: Option<String>,
    /// Durability instead of `gateway.durability`.
    pub durability: Option<Durability>,
    /// Turns the admin API on: the bearer token its requests must carry (at least 32 bytes).
    /// Empty is the same as none.
    pub admin_token: Option<String>,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("config_path", &self.config_path)
            .field("listen", &self.listen)
            .field(
                "ledger",
                &self
                    .ledger
                    .as_deref()
                    .map(intentgate_ledger::display_location),
            )
            .field("durability", &self.durability)
            .field(
                "admin_token",
                &self.admin_token.as_ref().map(|_| "<hidden>"),
            )
            .finish()
    }
}

/// A config with its ledger open and its gate built; nothing is served and no task runs yet.
pub struct Gateway {
    loaded: LoadedConfig,
    options: Options,
    ledger: Arc<dyn Ledger>,
    /// Where the ledger is, absolute for a file (it may hold a password: log it only
    /// through `intentgate_ledger::display_location`).
    ledger_location: String,
    durability: Durability,
    gate: Arc<Gate>,
    /// The sessions of the config's MCP upstreams; they live as long as the gateway.
    mcp: McpUpstreams,
}

impl Gateway {
    /// Opens the ledger that `options` or the config names and builds the gate over the
    /// config's tools, with the system clock.
    /// Its MCP upstreams are started first, and their tools listed: the config's imports
    /// become tools, and a config whose MCP tools don't fit what the servers list is refused.
    pub async fn open(mut loaded: LoadedConfig, options: Options) -> Result<Gateway, Error> {
        assert_secrets_resolved(&loaded);
        if let Some(token) = admin_token(&options) {
            intentgate_admin::check_token(token).map_err(Error::AdminToken)?;
        }
        let mcp = McpUpstreams::start(&loaded).await?;
        mcp.expand(&mut loaded)?;
        let gateway = &loaded.config.gateway;
        let ledger_location = ledger_location(options.ledger.as_deref(), &gateway.ledger);
        let durability = options
            .durability
            .unwrap_or_else(|| durability(gateway.durability));
        let ledger = intentgate_ledger::open(&ledger_location, durability)
            .await
            .map_err(Error::Ledger)?;
        let options_of_gate = GateOptions {
            resolution: resolution(&loaded.config.resolution),
            ..GateOptions::default()
        };
        let gate = Arc::new(build_gate_over(
            &loaded,
            ledger.clone(),
            Arc::new(SystemClock),
            options_of_gate,
            &mcp,
        )?);
        // The leases this process takes belong to it: registered, they are taken over as
        // soon as it is gone rather than when they expire.
        tasks::register(ledger.as_ref(), &gate.options().instance)
            .await
            .map_err(Error::Register)?;
        Ok(Gateway {
            loaded,
            options,
            ledger,
            ledger_location,
            durability,
            gate,
            mcp,
        })
    }

    /// The sessions of the config's MCP upstreams.
    pub fn mcp_upstreams(&self) -> &McpUpstreams {
        &self.mcp
    }

    /// The gate every interface calls through.
    pub fn gate(&self) -> &Arc<Gate> {
        &self.gate
    }

    /// The intent ledger.
    pub fn ledger(&self) -> &Arc<dyn Ledger> {
        &self.ledger
    }

    /// The config the gateway runs.
    pub fn config(&self) -> &LoadedConfig {
        &self.loaded
    }

    /// The background tasks every gateway process runs, whatever it serves: the heartbeat
    /// of this process, the retention purge and the sweeper.
    fn start_background(&self) -> Background {
        let mut background = Background::default();
        background.spawn(tasks::heartbeat_forever(
            self.ledger.clone(),
            self.gate.options().instance.clone(),
        ));
        background.spawn(purge_forever(
            self.ledger.clone(),
            self.loaded.config.gateway.retention_days,
        ));
        background.spawn(sweep_forever(self.gate.clone()));
        background
    }

    /// Logs, on the startup target, what is served, from where, over which ledger.
    fn log_start(&self, over: &str) {
        tracing::info!(
            target: "intentgate::startup",
            "serving {} {}{over} from {} (ledger {}, durability {:?})",
            self.gate.tools().len(),
            if self.gate.tools().len() == 1 { "tool" } else { "tools" },
            match &self.options.config_path {
                Some(path) => path.display().to_string(),
                None => "a config".to_owned(),
            },
            intentgate_ledger::display_location(&self.ledger_location),
            self.durability
        );
    }
}

/// Where the ledger is: `--ledger` (a relative file read from the working directory) or
/// the config's `gateway.ledger` (read from the config's folder by the loader), a file
/// made absolute either way, so that the startup line names the file that is opened.
pub fn ledger_location(command_line: Option<&str>, config: &str) -> String {
    let location = intentgate_ledger::Location::parse(command_line.unwrap_or(config)).absolute();
    match location.text() {
        Some(text) => text.to_owned(),
        // A working directory whose name is not UTF-8: the path as given still opens the
        // same file from here.
        None => command_line.unwrap_or(config).to_owned(),
    }
}

/// A config loaded with secrets optional (`Secrets::Optional`) lacks the values of its
/// unset variables, so it must never reach an upstream: the loaders here require them.
fn assert_secrets_resolved(loaded: &LoadedConfig) {
    assert!(
        loaded.unset.is_empty(),
        "a config loaded without its secrets was given to a gateway (unset: {})",
        loaded
            .unset
            .iter()
            .map(|unset| unset.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
}

/// The admin token of `options`, unless unset or empty.
fn admin_token(options: &Options) -> Option<&str> {
    options
        .admin_token
        .as_deref()
        .filter(|token| !token.is_empty())
}

/// Loads a config, all its errors in one. The hash key of sensitive arguments comes from
/// the environment: a gateway never invents one, since a key that changed at every start
/// would make every stored hash unmatchable.
pub fn load(path: &Path) -> Result<LoadedConfig, Error> {
    load_with(path, &HashKeySource::Environment)
}

/// [`load`], with the hash key taken as `hash_key` says.
pub fn load_with(path: &Path, hash_key: &HashKeySource) -> Result<LoadedConfig, Error> {
    intentgate_config::load_file_with(path, hash_key).map_err(Error::Config)
}

/// [`load_with`] for a command that only reads the config or the ledger (`config check`,
/// `intents`, `flags`): an unset `${NAME}` is not an error but an entry of
/// `LoadedConfig::unset`, and such a config can't build a gateway or a gate.
pub fn load_reading(path: &Path, hash_key: &HashKeySource) -> Result<LoadedConfig, Error> {
    intentgate_config::load_file_as(path, hash_key, intentgate_config::Secrets::Optional)
        .map_err(Error::Config)
}

/// Bytes of a random hash key: SHA-256's output size, the least a key may have.
const EPHEMERAL_HASH_KEY_BYTES: usize = 32;

/// A random hash key, for a command whose ledger lives only as long as it runs (`demo`,
/// `smoke`, benchmarks): nothing it hashes has to match anything later.
pub fn ephemeral_hash_key() -> Result<HashKey, Error> {
    let mut bytes = [0u8; EPHEMERAL_HASH_KEY_BYTES];
    getrandom::fill(&mut bytes).map_err(Error::Random)?;
    Ok(HashKey::new(&bytes)?)
}

/// The ledger's durability for the config's `gateway.durability`.
pub fn durability(mode: DurabilityMode) -> Durability {
    match mode {
        DurabilityMode::Strict => Durability::Strict,
        DurabilityMode::Relaxed => Durability::Relaxed,
    }
}

/// The gate over a config's tools, with the HTTP upstream they describe and the config's
/// `resolution` settings.
pub fn build_gate(
    loaded: &LoadedConfig,
    ledger: Arc<dyn Ledger>,
    clock: Arc<dyn Clock>,
) -> Result<Gate, Error> {
    let options = GateOptions {
        resolution: resolution(&loaded.config.resolution),
        ..GateOptions::default()
    };
    build_gate_with(loaded, ledger, clock, options)
}

/// The gate's re-send schedule from a config's `resolution` section.
pub fn resolution(config: &ResolutionConfig) -> Resolution {
    Resolution {
        backoff_initial: Duration::from_millis(config.backoff_initial_ms),
        backoff_max: Duration::from_millis(config.backoff_max_ms),
        resends_per_second: config.resends_per_second,
    }
}

/// [`build_gate`] with chosen gate options. Its tools' upstream is HTTP only: a config with
/// MCP upstreams needs them started ([`build_gate_over`]).
pub fn build_gate_with(
    loaded: &LoadedConfig,
    ledger: Arc<dyn Ledger>,
    clock: Arc<dyn Clock>,
    options: GateOptions,
) -> Result<Gate, Error> {
    build_gate_over(loaded, ledger, clock, options, &McpUpstreams::default())
}

/// The gate over a config's tools: HTTP tools through the HTTP upstream, MCP tools through
/// the sessions of `mcp` (started, and the config expanded, by [`McpUpstreams`]).
pub fn build_gate_over(
    loaded: &LoadedConfig,
    ledger: Arc<dyn Ledger>,
    clock: Arc<dyn Clock>,
    options: GateOptions,
    mcp: &McpUpstreams,
) -> Result<Gate, Error> {
    assert_secrets_resolved(loaded);
    let http = HttpUpstream::new(loaded.config.upstreams.clone(), loaded.config.http_tools())
        .map_err(Error::Upstreams)?;
    let upstream = mcp.route(loaded, Arc::new(http));
    Gate::new(loaded.tools.clone(), ledger, upstream, clock, options).map_err(Error::Tools)
}
