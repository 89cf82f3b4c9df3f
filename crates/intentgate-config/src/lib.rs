//! The intentgate config, checked: what the file (read by intentgate-config-file) means to
//! the gateway. Loading goes through four steps, and every error of every step says where
//! (file, line, column), what is wrong and what to change:
//!
//! 1. **Reading** (intentgate-config-file's `parse`): bounds, the tree of positions where
//!    syntax errors are reported, and the typed file whose JSON Schema is [`schema`].
//! 2. **Checks** (`check`): what a parser can't know. A tool without an effect, a key that
//!    changes per attempt, an owner or upstream that does not exist, a template placeholder
//!    that is not an argument, a value out of range. All of them are collected.
//! 3. **References** (intentgate-config-file's `env`): `${NAME}` and `${NAME:-default}` in
//!    upstream `base_url` and `headers` values, in tools' request `headers` values and in
//!    `gateway.hash_key` (the key of the hashes the ledger keeps of `sensitive: true`
//!    arguments, read as the caller asks: [`HashKeySource`]) are resolved from the
//!    environment. Commands that only read the file or the ledger load it with
//!    [`Secrets::Optional`]: an unset variable is then an [`UnsetVariable`] warning instead
//!    of an error.
//! 4. **Building**: the HTTP upstreams' specs, the MCP servers, and the engine's tool
//!    definitions.
//!
//! A config read from a file takes a relative `gateway.ledger` from the file's folder, not
//! from the working directory: a gateway started elsewhere must find the same ledger, not
//! create an empty one and answer repeats as new calls.
//!
//! **API boundary:** [`load_file`], [`load_str`] (with `_with` forms that choose the
//! [`HashKeySource`]) and [`schema`]. A [`LoadedConfig`] holds the plain [`Config`], the hash
//! key, and the engine's [`ToolDefinition`]s (carrying the key), built by
//! `ToolDefinition::new` and completed with the tool's owner, messages, `retry_rejected`,
//! `once_per`, external-id pointer, executor, MCP listing, approval and budgets (`policies`,
//! `None` for a tool with neither) and resend window (from its upstream's
//! `honours_idempotency_keys` and `key_window_hours`, or, for a client-executed tool, from
//! its own `key_window_hours`; less `limits::RESEND_WINDOW_MARGIN`).
//!
//! **Invariant:** a resolved `${NAME}` value (a secret) never appears in an error, a `Debug`
//! print or anything this crate renders: errors quote only text written in the file, and
//! the types that hold resolved values print them as `<redacted>`.

pub mod auth;
mod check;
mod config;
pub mod imports;
pub mod limits;

use std::path::Path;

use intentgate_config_file::error::Errors;
use intentgate_config_file::{Position, read_bounded};
use intentgate_core::{HashKey, ToolDefinition};

pub use auth::{ApiKeyConfig, AuthConfig, AuthMethods, JwtConfig, TrustedProxyConfig};
pub use config::{
    Config, ImportConfig, McpToolConfig, McpUpstreamConfig, ToolConfig, UpstreamToolInfo,
};
pub use intentgate_config_file::{
    AlertRule, AlertScope, ConfigError, ConfigErrors, DurabilityMode, GatewayConfig,
    IdempotencyKeyHeader, OwnerConfig, ReconcileConfig, ResolutionConfig, TelemetryConfig,
    UnsetVariable, schema, telemetry_section,
};

/// A config that passed every check.
#[derive(Debug, Clone)]
pub struct LoadedConfig {
    pub config: Config,
    /// One definition per tool, in file order: what the engine runs. Each carries the hash
    /// key, when one was loaded.
    pub tools: Vec<ToolDefinition>,
    /// The key of the hashes of sensitive arguments (`gateway.hash_key`), when the config
    /// names one and the loader was asked to read it ([`HashKeySource`]).
    pub hash_key: Option<HashKey>,
    /// The `${NAME}` references left unresolved because their variable is unset, when the
    /// loader was told secrets are optional ([`Secrets::Optional`]); always empty otherwise.
    /// Their values are missing from `config`, so a config with any can't call upstreams.
    pub unset: Vec<UnsetVariable>,
}

/// Whether every `${NAME}` reference (upstream credentials and URLs, the hash key) must
/// resolve. A reference with a default (`${NAME:-value}`) always resolves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Secrets {
    /// An unset variable is an error: for the commands that call upstreams (`serve`, `mcp`,
    /// `smoke`, `reconcile`).
    Required,
    /// An unset variable is reported in [`LoadedConfig::unset`] and its value left out: for
    /// the commands that only read the file or the ledger (`config check`, `intents`,
    /// `flags`, `audit`), so that CI and an operator's shell need no secrets.
    Optional,
}

/// Where the loader takes the hash key of sensitive arguments from (`gateway.hash_key`,
/// a `${NAME}` reference). Whatever the source, a config whose tools mark an argument
/// sensitive must name a key, and must name it by reference.
#[derive(Debug, Clone)]
pub enum HashKeySource {
    /// From the environment; an unset variable or a key under 32 bytes is an error. For every
    /// command whose ledger outlives it (`serve`, `mcp`, `reconcile`): a key it invented
    /// would change every hash at the next start.
    Environment,
    /// From the environment, or this key when the variable is unset. For commands whose
    /// ledger lives only as long as they run (`demo`, `smoke`).
    EnvironmentOrEphemeral(HashKey),
    /// Not read: for commands that hash nothing (`flags`, `intents`, `audit`). Their
    /// definitions have no key, and a gate refuses a tool with sensitive arguments without
    /// one.
    NotNeeded,
}

/// Reads and checks the config at `path`, resolving `${NAME}` references (the hash key
/// included) from the process environment.
pub fn load_file(path: &Path) -> Result<LoadedConfig, ConfigErrors> {
    load_file_with(path, &HashKeySource::Environment)
}

/// [`load_file`], with the hash key taken as `hash_key` says.
pub fn load_file_with(path: &Path, hash_key: &HashKeySource) -> Result<LoadedConfig, ConfigErrors> {
    load_file_as(path, hash_key, Secrets::Required)
}

/// [`load_file_with`], with unset variables refused or reported as `secrets` says.
pub fn load_file_as(
    path: &Path,
    hash_key: &HashKeySource,
    secrets: Secrets,
) -> Result<LoadedConfig, ConfigErrors> {
    let source = path.display().to_string();
    let whole_file = |message: String, fix: String| {
        let mut errors = Errors::new(&source);
        errors.push(Position::default(), message, fix);
        errors.finish()
    };
    let text = read_bounded(path).map_err(|(message, fix)| whole_file(message, fix))?;
    let lookup = |name: &str| std::env::var(name).ok();
    let mut loaded = load_str_as(&text, &source, &lookup, hash_key, secrets)?;
    let ledger = intentgate_ledger::Location::parse(&loaded.config.gateway.ledger)
        .relative_to(&config_folder(path));
    loaded.config.gateway.ledger = ledger
        .text()
        .ok_or_else(|| {
            whole_file(
                format!(
                    "the ledger's path, taken from the config's folder, is not UTF-8 text: {}",
                    ledger
                ),
                "write `gateway.ledger` as an absolute path, or move the config to a folder \
                 whose name is UTF-8"
                    .to_owned(),
            )
        })?
        .to_owned();
    Ok(loaded)
}

/// The folder of the config file at `path`, absolute: a relative ledger path is read from
/// here. The file was just read, so it exists; symbolic links are followed, as when it was
/// opened.
fn config_folder(path: &Path) -> std::path::PathBuf {
    let file = std::fs::canonicalize(path)
        .or_else(|_| std::path::absolute(path))
        .unwrap_or_else(|_| path.to_owned());
    file.parent().map(Path::to_owned).unwrap_or_default()
}

/// Checks the config in `text`. `source` names it in errors (a path, or `<stdin>`); `env`
/// looks up the variables of `${NAME}` references, the hash key's included.
pub fn load_str(
    text: &str,
    source: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<LoadedConfig, ConfigErrors> {
    load_str_with(text, source, env, &HashKeySource::Environment)
}

/// [`load_str`], with the hash key taken as `hash_key` says.
pub fn load_str_with(
    text: &str,
    source: &str,
    env: &dyn Fn(&str) -> Option<String>,
    hash_key: &HashKeySource,
) -> Result<LoadedConfig, ConfigErrors> {
    load_str_as(text, source, env, hash_key, Secrets::Required)
}

/// [`load_str_with`], with unset variables refused or reported as `secrets` says. Text has
/// no folder: a relative `gateway.ledger` stays relative (to the working directory).
pub fn load_str_as(
    text: &str,
    source: &str,
    env: &dyn Fn(&str) -> Option<String>,
    hash_key: &HashKeySource,
    secrets: Secrets,
) -> Result<LoadedConfig, ConfigErrors> {
    let mut errors = Errors::new(source);
    let Some((map, file)) = intentgate_config_file::parse(text, &mut errors) else {
        return Err(errors.finish());
    };
    match check::check(file, &map, env, hash_key, secrets, &mut errors) {
        Some((config, tools, hash_key, unset)) if errors.is_empty() => Ok(LoadedConfig {
            config,
            tools,
            hash_key,
            unset,
        }),
        _ => Err(errors.finish()),
    }
}
