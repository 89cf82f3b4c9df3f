//! The intentgate config file: one YAML file that declares the gateway's settings, the
//! upstream APIs, the owners who hear about problems, and every tool with its effect.
//!
//! Loading goes through four steps, and every error of every step says where (file, line,
//! column), what is wrong and what to change:
//!
//! 1. **Positions** (`source_map`): the YAML is read into a tree of positions. This is where
//!    syntax errors are reported, and where later checks find the line of a field.
//! 2. **Types** (`file`): the YAML is read into the wire types, which refuse unknown fields
//!    and wrong types. Their JSON Schema is [`schema`].
//! 3. **Checks** (`check`): what a parser can't know. A tool without an effect, a key that
//!    changes per attempt, an owner or upstream that does not exist, a template placeholder
//!    that is not an argument, a value out of range. All of them are collected.
//! 4. **References** (`env`): `${NAME}` and `${NAME:-default}` in upstream `base_url` and
//!    `headers` values, in tools' request `headers` values and in `gateway.hash_key` (the key
//!    of the hashes the ledger keeps of `sensitive: true` arguments, read as the caller asks:
//!    [`HashKeySource`]) are resolved from the environment. Commands that only read the
//!    file or the ledger load it with [`Secrets::Optional`]: an unset variable is then an
//!    [`UnsetVariable`] warning instead of an error.
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
mod env;
mod error;
mod file;
pub mod imports;
pub mod limits;
mod source_map;

use std::io::Read;
use std::path::Path;

use intentgate_core::{HashKey, ToolDefinition};

pub use auth::{ApiKeyConfig, AuthConfig, AuthMethods, JwtConfig, TrustedProxyConfig};
pub use config::{
    AlertRule, AlertScope, Config, DurabilityMode, GatewayConfig, IdempotencyKeyHeader,
    ImportConfig, McpToolConfig, McpUpstreamConfig, OwnerConfig, ReconcileConfig, ResolutionConfig,
    TelemetryConfig, ToolConfig, UpstreamToolInfo,
};
pub use error::{ConfigError, ConfigErrors, UnsetVariable};

use crate::error::Errors;
use crate::file::ConfigFile;
use crate::limits::{CONFIG_ALIASES_MAX, CONFIG_BYTES_MAX, CONFIG_DEPTH_MAX, CONFIG_NODES_MAX};
use crate::source_map::{Position, SourceMap};

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
    if text.len() > CONFIG_BYTES_MAX {
        errors.push(
            Position::default(),
            format!(
                "the file is {} bytes; a config is at most {CONFIG_BYTES_MAX}",
                text.len()
            ),
            "check that this is the config file; split a very large one across gateways",
        );
        return Err(errors.finish());
    }
    let has_content = text.lines().any(|line| {
        let line = line.trim();
        !line.is_empty() && !line.starts_with('#') && line != "---"
    });
    if !has_content {
        errors.push(
            Position::default(),
            "the config file is empty",
            "add at least a `tools:` list; examples/support-agent.yaml is a complete config",
        );
        return Err(errors.finish());
    }
    let map = match SourceMap::parse(text, parser_options()) {
        Ok(map) => map,
        Err(error) => {
            errors.parser(&error, text, None);
            return Err(errors.finish());
        }
    };
    if !map.is_mapping() {
        errors.push(
            map.value(&[]),
            "the config is not a mapping",
            "write the top-level fields `gateway:`, `upstreams:`, `owners:` and `tools:`, each \
             at the start of a line; examples/support-agent.yaml is a complete config",
        );
        return Err(errors.finish());
    }
    check::tools_have_effects(&map, &mut errors);
    let file: ConfigFile = match serde_saphyr::from_str_with_options(text, parser_options()) {
        Ok(file) => file,
        Err(error) => {
            errors.parser(&error, text, Some(&map));
            return Err(errors.finish());
        }
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

/// The published JSON Schema (draft 2020-12) of the config file, with the doc comments of
/// its types as titles and descriptions. Editors use it for completion and validation.
pub fn schema() -> serde_json::Value {
    file::schema()
}

/// How every config is parsed: bounded, and strict where YAML is loose.
fn parser_options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_depth: CONFIG_DEPTH_MAX,
            max_nodes: CONFIG_NODES_MAX,
            max_aliases: CONFIG_ALIASES_MAX,
            max_documents: 1,
        },
        // `yes`, `no`, `on` and `off` stay strings in schemas and bodies, and a boolean
        // field wants `true` or `false`: the Norway problem has no place in a request body.
        strict_booleans: true,
        // Errors are rendered here, with a fix; the parser's snippets would be dropped.
        with_snippet: false,
    }
}

/// Reads at most [`CONFIG_BYTES_MAX`] bytes of UTF-8 text; the error is a message and a fix.
fn read_bounded(path: &Path) -> Result<String, (String, String)> {
    let file = std::fs::File::open(path).map_err(|error| {
        (
            format!("can't open the config file: {error}"),
            "check the path".to_owned(),
        )
    })?;
    let mut bytes = Vec::new();
    let limit = CONFIG_BYTES_MAX as u64 + 1;
    file.take(limit).read_to_end(&mut bytes).map_err(|error| {
        (
            format!("can't read the config file: {error}"),
            "check that the path is a readable file".to_owned(),
        )
    })?;
    if bytes.len() > CONFIG_BYTES_MAX {
        return Err((
            format!("the file is larger than {CONFIG_BYTES_MAX} bytes"),
            "check that this is the config file; split a very large one across gateways".to_owned(),
        ));
    }
    String::from_utf8(bytes).map_err(|error| {
        (
            format!(
                "the file is not UTF-8 text (invalid byte at offset {})",
                error.utf8_error().valid_up_to()
            ),
            "save the file as UTF-8".to_owned(),
        )
    })
}

/// The `telemetry:` section of the config at `path`, its `${NAME}` references resolved from
/// the process environment; the default (off) when the file has none. Read on its own, before
/// logging starts: a file that can't be read or parsed is also the default here, since the
/// whole file is checked later and its errors reported in full then. A header whose
/// reference can't be resolved is an error that names it.
pub fn telemetry_section(path: &Path) -> Result<TelemetryConfig, String> {
    /// Only the section; every other key is left to the full check.
    #[derive(serde::Deserialize)]
    struct Section {
        #[serde(default)]
        telemetry: TelemetryConfig,
    }
    let Ok(text) = read_bounded(path) else {
        return Ok(TelemetryConfig::default());
    };
    let Ok(section) = serde_saphyr::from_str_with_options::<Section>(&text, parser_options())
    else {
        return Ok(TelemetryConfig::default());
    };
    let mut telemetry = section.telemetry;
    let lookup = |name: &str| std::env::var(name).ok();
    for (name, value) in &mut telemetry.headers {
        *value = env::resolve(value, &lookup).map_err(|error| {
            let (message, fix) = error.describe(&format!("telemetry.headers.{name}"));
            format!("{}: {message}; {fix}", path.display())
        })?;
    }
    Ok(telemetry)
}
