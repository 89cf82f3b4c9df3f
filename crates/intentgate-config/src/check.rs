//! The checks that follow parsing: everything a YAML parser can't know is wrong.
//!
//! Each check reports at the line of the offending field and keeps going, so one run shows
//! every mistake of a file. Tool effects are reported while the file is read (by
//! intentgate-config-file, on the raw tree, so a tool without one is reported even when the
//! typed parse fails); the checks here run on the typed file: the gateway
//! settings, upstreams and owners, then each tool: its definition as the engine checks it
//! (`ToolDefinition::new`), its input schema, the names it refers to, its approval and
//! budgets, its request templates and its `${NAME}` references. Templates are checked with the HTTP crate's own parser
//! (`intentgate_http::template::check_template`, `check_body_template`, `check_list_spec`),
//! so the config is refused for exactly what would make a request impossible to build.
//! Last, the hash key of sensitive arguments: required when a tool marks one, read from the
//! environment as the caller of the loader asks ([`HashKeySource`]).

mod auth;
mod gateway;
mod mcp;
mod pairing;
mod policies;
mod requests;
mod spec;
mod tools;
mod upstreams;

use std::collections::HashMap;

use intentgate_config_file::at;
use intentgate_config_file::env::{self, EnvError, Lookup};
use intentgate_config_file::error::{Errors, UnsetVariable};
use intentgate_config_file::file::ConfigFile;
use intentgate_config_file::source_map::{Position, Segment, SourceMap};
use intentgate_core::{HashKey, ToolDefinition};

use crate::config::Config;
use crate::{HashKeySource, Secrets};

/// What the checks build: the config, the engine's tool definitions (with the hash key
/// attached), the hash key, and the references left unresolved (with secrets optional).
pub(crate) type Checked = (
    Config,
    Vec<ToolDefinition>,
    Option<HashKey>,
    Vec<UnsetVariable>,
);

/// Checks the parsed file, resolves its references and builds the config and the engine's
/// tool definitions. Returns `None` when anything was reported.
pub(crate) fn check(
    file: ConfigFile,
    map: &SourceMap,
    lookup: Lookup<'_>,
    hash_key_source: &HashKeySource,
    secrets: Secrets,
    errors: &mut Errors<'_>,
) -> Option<Checked> {
    let mut checker = Checker {
        map,
        lookup,
        errors,
        secrets,
        unset: Vec::new(),
        arguments_known: true,
        declared: HashMap::new(),
    };
    checker.gateway(&file.gateway);
    checker.auth(&file.auth.0);
    let (upstreams, mcp_upstreams) = checker.upstream_kinds(file.upstreams);
    let imports = checker.imports(file.imports, &mcp_upstreams);
    checker.owners(&file.owners);
    checker.reconcile(&file.reconcile);
    checker.resolution(&file.resolution);
    checker.tool_list(&file.tools, !imports.is_empty());
    let tool_count = file.tools.len();
    let mut tools = Vec::with_capacity(file.tools.len());
    let mut definitions = Vec::with_capacity(file.tools.len());
    let mut first_seen: HashMap<String, Position> = HashMap::new();
    // The first tool with a sensitive argument, where a missing hash key is reported.
    let mut first_sensitive: Option<(usize, ToolDefinition)> = None;
    for (index, tool) in file.tools.into_iter().enumerate() {
        let name_at = map.value(&at!["tools", index, "name"]);
        if let Some(first) = first_seen.get(&tool.name) {
            checker.errors.push(
                name_at,
                format!(
                    "tool name `{}` is already used by the tool at line {}",
                    tool.name, first.line
                ),
                "rename one of the two tools; names must be unique because models call tools by name",
            );
        } else {
            first_seen.insert(tool.name.clone(), name_at);
        }
        if let Some((tool, definition)) =
            checker.tool(index, tool, &upstreams, &mcp_upstreams, &file.owners)
        {
            if first_sensitive.is_none() && !definition.sensitive.is_empty() {
                first_sensitive = Some((index, definition.clone()));
            }
            tools.push(tool);
            definitions.push(definition);
        }
    }
    let hash_key = checker.hash_key(
        file.gateway.hash_key.as_deref(),
        first_sensitive.as_ref(),
        hash_key_source,
    );
    for definition in &mut definitions {
        definition.hash_key = hash_key.clone();
    }
    if !checker.errors.is_empty() {
        return None;
    }
    // Every tool that was not built has an error above; a tool dropped silently would be a
    // tool the gateway does not serve although the config names it.
    assert_eq!(
        tools.len(),
        tool_count,
        "a tool was dropped without an error"
    );
    let config = Config {
        gateway: file.gateway,
        auth: file.auth.0,
        upstreams,
        mcp_upstreams,
        imports,
        owners: file.owners,
        reconcile: file.reconcile,
        resolution: file.resolution,
        tools,
    };
    // In file order, as errors are.
    let mut unset = checker.unset;
    unset.sort_by_key(|unset| (unset.line, unset.column));
    Some((config, definitions, hash_key, unset))
}

pub(crate) struct Checker<'c, 'e> {
    map: &'c SourceMap,
    lookup: Lookup<'c>,
    errors: &'c mut Errors<'e>,
    /// Whether an unset variable is an error or a warning.
    secrets: Secrets,
    /// The unset variables reported as warnings (with [`Secrets::Optional`]).
    unset: Vec<UnsetVariable>,
    /// Whether the current tool's input schema is an object schema, so that its argument
    /// names are known. Without them every placeholder would be reported as unknown: one
    /// mistake in the schema would bury the file under errors that are not.
    arguments_known: bool,
    /// Every upstream the file declares, with its kind, whether or not it passed its
    /// checks: a request naming a broken upstream is not reported again.
    declared: HashMap<String, intentgate_config_file::file::UpstreamKind>,
}

impl Checker<'_, '_> {
    pub(super) fn position(&self, path: &[Segment<'_>]) -> Position {
        self.map.value(path)
    }

    pub(crate) fn push(
        &mut self,
        path: &[Segment<'_>],
        message: impl Into<String>,
        fix: impl Into<String>,
    ) {
        let at = self.position(path);
        self.errors.push(at, message, fix);
    }

    pub(crate) fn range(
        &mut self,
        path: &[Segment<'_>],
        value: u64,
        min: u64,
        max: u64,
        unit: &str,
    ) {
        if (min..=max).contains(&value) {
            return;
        }
        let field = match path.last() {
            Some(Segment::Key(key)) => *key,
            _ => "value",
        };
        self.push(
            path,
            format!("`{field}` is {value}, outside {min} to {max}"),
            format!("set `{field}` between {min} and {max} {unit}"),
        );
    }

    /// Resolves `${NAME}` references in one value, reporting failures at `path`. With
    /// secrets optional, an unset variable is a warning and the value is `None`: left out,
    /// and left unchecked, since what it would be is not known.
    pub(super) fn resolve(
        &mut self,
        path: &[Segment<'_>],
        field: &str,
        text: &str,
    ) -> Option<String> {
        match env::resolve(text, self.lookup) {
            Ok(value) => Some(value),
            Err(EnvError::Unset { name }) if self.secrets == Secrets::Optional => {
                self.warn_unset(path, field, name);
                None
            }
            Err(error) => {
                let (message, fix) = error.describe(&format!("`{field}`"));
                self.push(path, message, fix);
                None
            }
        }
    }

    /// [`Checker::resolve`] for a value that must be there: with secrets optional, an
    /// unset variable leaves the value as written (and `true`, so its checks are skipped).
    pub(super) fn resolve_or_written(
        &mut self,
        path: &[Segment<'_>],
        field: &str,
        text: &str,
    ) -> Option<(String, bool)> {
        let unset_before = self.unset.len();
        match self.resolve(path, field, text) {
            Some(value) => Some((value, false)),
            None if self.unset.len() > unset_before => Some((text.to_owned(), true)),
            None => None,
        }
    }

    /// Records an unset variable as a warning at `path`.
    pub(super) fn warn_unset(&mut self, path: &[Segment<'_>], field: &str, name: String) {
        let at = self.position(path);
        let unset = UnsetVariable {
            name,
            field: field.to_owned(),
            source: self.errors.source().to_owned(),
            line: at.line,
            column: at.column,
        };
        if !self.unset.contains(&unset) {
            self.unset.push(unset);
        }
    }
}

/// "`a`, `b`, `c`" (or "none").
fn names<S: AsRef<str>>(names: impl IntoIterator<Item = S>) -> String {
    let names: Vec<String> = names
        .into_iter()
        .map(|name| format!("`{}`", name.as_ref()))
        .collect();
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::requests::is_json_pointer;
    use super::upstreams::{check_url, is_token};

    #[test]
    fn pointers_urls_and_header_names() {
        assert!(is_json_pointer(""));
        assert!(is_json_pointer("/data/0"));
        assert!(is_json_pointer("/a~1b"));
        assert!(!is_json_pointer("data"));
        assert!(!is_json_pointer("/a~2"));
        assert!(check_url("http://127.0.0.1:8090").is_ok());
        assert!(check_url("https://api.example.com/v1").is_ok());
        assert!(check_url("ftp://x").is_err());
        assert!(check_url("localhost:8090").is_err());
        assert!(check_url("not a url").is_err());
        assert!(is_token("Idempotency-Key"));
        assert!(!is_token("Bad Header"));
        assert!(!is_token(""));
    }
}
