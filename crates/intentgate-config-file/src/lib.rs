//! The intentgate config file as written: one YAML file that declares the gateway's settings,
//! the upstream APIs, the owners who hear about problems, and every tool with its effect.
//!
//! This crate reads the file; intentgate-config checks what it means. Reading goes through
//! three steps, and every error of every step says where (file, line, column), what is wrong
//! and what to change:
//!
//! 1. **Bounds** ([`read_bounded`], [`parse`]): at most [`CONFIG_BYTES_MAX`] bytes of UTF-8,
//!    not empty, nested and aliased within the limits of [`limits`].
//! 2. **Positions** ([`source_map`]): the YAML is read into a tree of positions. This is where
//!    syntax errors are reported, and where later checks find the line of a field.
//! 3. **Types** ([`mod@file`]): the YAML is read into the wire types, which refuse unknown fields
//!    and wrong types. Their JSON Schema is [`schema`]. A tool without an `effect` is
//!    reported on the tree of positions first, so that it never hides behind a typo.
//!
//! `${NAME}` references ([`mod@env`]) are resolved by the checks, where a secret belongs; the
//! file's types hold them as written.
//!
//! **Architecture invariant:** this crate depends on intentgate-core and on serde, YAML and
//! schema libraries only: no gate, HTTP, ledger or MCP crate. The request fields a tool
//! writes have types of their own here ([`request`]), which intentgate-config turns into the
//! HTTP upstream's.
//!
//! **Invariant:** a resolved `${NAME}` value (a secret) never appears in an error or a
//! `Debug` print: errors quote only text written in the file, and the types that can hold a
//! credential print it through [`redact`].

pub mod auth;
pub mod env;
pub mod error;
pub mod file;
pub mod limits;
pub mod redact;
pub mod request;
pub mod settings;
pub mod source_map;

use std::io::Read;
use std::path::Path;

pub use auth::{ApiKeyConfig, AuthConfig, AuthFile, AuthMethods, JwtConfig, TrustedProxyConfig};
pub use error::{ConfigError, ConfigErrors, Errors, UnsetVariable};
pub use file::ConfigFile;
pub use settings::{
    AlertRule, AlertScope, DurabilityMode, GatewayConfig, IdempotencyKeyHeader, OwnerConfig,
    ReconcileConfig, ResolutionConfig, TelemetryConfig,
};
pub use source_map::{Position, Segment, SourceMap};

use crate::limits::{CONFIG_ALIASES_MAX, CONFIG_BYTES_MAX, CONFIG_DEPTH_MAX, CONFIG_NODES_MAX};

/// Reads `text` into its positions and its typed file, reporting into `errors` what keeps it
/// from being a config. `None` when the file can't be typed; `Some` may still come with
/// errors (a tool without an effect), which the caller reports with its own.
pub fn parse(text: &str, errors: &mut Errors<'_>) -> Option<(SourceMap, ConfigFile)> {
    if text.len() > CONFIG_BYTES_MAX {
        errors.push(
            Position::default(),
            format!(
                "the file is {} bytes; a config is at most {CONFIG_BYTES_MAX}",
                text.len()
            ),
            "check that this is the config file; split a very large one across gateways",
        );
        return None;
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
        return None;
    }
    let map = match SourceMap::parse(text, parser_options()) {
        Ok(map) => map,
        Err(error) => {
            errors.parser(&error, text, None);
            return None;
        }
    };
    if !map.is_mapping() {
        errors.push(
            map.value(&[]),
            "the config is not a mapping",
            "write the top-level fields `gateway:`, `upstreams:`, `owners:` and `tools:`, each \
             at the start of a line; examples/support-agent.yaml is a complete config",
        );
        return None;
    }
    tools_have_effects(&map, errors);
    match serde_saphyr::from_str_with_options(text, parser_options()) {
        Ok(file) => Some((map, file)),
        Err(error) => {
            errors.parser(&error, text, Some(&map));
            None
        }
    }
}

/// Reports every tool that lacks `effect`. Runs on the raw tree, before the typed parse,
/// because this is the error the gateway exists to catch and it must not hide behind a typo
/// elsewhere in the file.
fn tools_have_effects(map: &SourceMap, errors: &mut Errors<'_>) {
    for index in 0..map.len(&at!["tools"]) {
        if map.has_value(&at!["tools", index, "effect"]) {
            continue;
        }
        let name = map
            .text(&at!["tools", index, "name"])
            .map(|name| format!("tool `{name}`"))
            .unwrap_or_else(|| format!("tool {}", index + 1));
        errors.push(
            map.value(&at!["tools", index]),
            format!("{name} has no effect, so the gateway can't tell whether a retry is safe"),
            "add `effect: read`, `idempotent` or `side_effect` (side_effect if calling it twice \
             would act twice: refunds, charges, emails)",
        );
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
pub fn read_bounded(path: &Path) -> Result<String, (String, String)> {
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
