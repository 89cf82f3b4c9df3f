//! What a config means once its MCP servers have answered `tools/list`: the tools an import
//! exposes, each classified, and the upstream tools that the config's own MCP calls name.
//!
//! A config file can't know which tools a server lists, so this runs when the gateway
//! starts, with what each server listed ([`UpstreamToolInfo`]). An upstream tool of an import
//! is, in this order:
//!
//! 1. excluded (`exclude`): not exposed;
//! 2. taken by an entry of `tools` whose MCP `call` names it: that entry is the tool
//!    (a side effect, with its key and lookup);
//! 3. classified by the import's `effects` (`read` or `idempotent`);
//! 4. a read, when the server marks it `readOnlyHint: true`;
//! 5. otherwise unclassified, and the gateway refuses to start, naming each such tool and
//!    the lines that would classify it.
//!
//! [`expand`] adds the exposed tools to a [`LoadedConfig`] (a [`ToolConfig`] and a
//! [`ToolDefinition`] each, with the upstream's description, input schema, title, hints and
//! output schema) and returns the classification of every upstream tool for reports
//! (`intentgate audit`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use intentgate_core::{Effect, Executor, Messages, ToolDefinition};
use intentgate_mcp_upstream::{McpTool, McpToolCall};

use crate::LoadedConfig;
use crate::config::{ImportConfig, McpToolConfig, ToolConfig, UpstreamToolInfo};

/// Retries of a failed call of an imported read or idempotent tool (as a tool entry's
/// default).
const IMPORTED_RETRY_BUDGET: u32 = 2;

/// How one upstream tool of an import was classified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Classification {
    /// The server marks it `readOnlyHint: true`: exposed as a read.
    ReadOnlyHint,
    /// The import's `effects` names it.
    Effects,
    /// An entry of `tools` calls it; the entry is the tool (named here).
    ToolEntry(String),
    /// The import's `exclude` names it: not exposed.
    Excluded,
}

/// One upstream tool of an import, as [`expand`] classified it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportedTool {
    /// The MCP upstream.
    pub upstream: String,
    /// The tool's name on the server.
    pub upstream_tool: String,
    /// The name agents call it by; `None` when excluded.
    pub exposed_as: Option<String>,
    /// Its effect behind the gateway; `None` when excluded.
    pub effect: Option<Effect>,
    pub by: Classification,
}

/// Why the tools of the config's MCP servers can't be served: every problem, each a message
/// and a fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", render(.0))]
pub struct ImportErrors(pub Vec<(String, String)>);

fn render(problems: &[(String, String)]) -> String {
    let mut text = format!(
        "the tools of the config's MCP servers can't be served ({} problem{}):",
        problems.len(),
        if problems.len() == 1 { "" } else { "s" }
    );
    for (message, fix) in problems {
        text.push_str(&format!("\n  - {message}\n    fix: {fix}"));
    }
    text
}

/// Adds the tools of `loaded`'s imports, as the servers listed them (`listed`, by upstream
/// name), and checks that every MCP call, lookup and list of the config names a tool its
/// server lists. Returns the classification of every upstream tool of every import.
pub fn expand(
    loaded: &mut LoadedConfig,
    listed: &BTreeMap<String, Vec<UpstreamToolInfo>>,
) -> Result<Vec<ImportedTool>, ImportErrors> {
    let mut problems = Vec::new();
    check_named_tools(loaded, listed, &mut problems);
    let mut expansion = Expansion::new(loaded, problems);
    for import in &loaded.config.imports {
        if let Some(tools) = listed.get(&import.upstream) {
            expansion.import(import, tools);
        }
    }
    let Expansion {
        problems,
        report,
        added,
        ..
    } = expansion;
    if !problems.is_empty() {
        return Err(ImportErrors(problems));
    }
    for (config, definition) in added {
        loaded.config.tools.push(config);
        loaded.tools.push(definition);
    }
    Ok(report)
}

/// What [`expand`] gathers over the imports before anything is added: nothing is added
/// unless every import can be served.
struct Expansion<'a> {
    loaded: &'a LoadedConfig,
    /// Which entry of `tools` calls which upstream tool: (upstream, upstream tool) to the
    /// entry's name.
    entries: BTreeMap<(&'a str, &'a str), &'a str>,
    /// Every tool name taken: the config's own tools' and those exposed so far.
    names: BTreeSet<String>,
    /// Each a message and a fix.
    problems: Vec<(String, String)>,
    /// The classification of every upstream tool seen so far.
    report: Vec<ImportedTool>,
    /// The exposed tools, to add once no problem was found.
    added: Vec<(ToolConfig, ToolDefinition)>,
}

impl<'a> Expansion<'a> {
    fn new(loaded: &'a LoadedConfig, problems: Vec<(String, String)>) -> Expansion<'a> {
        let mut entries = BTreeMap::new();
        for tool in &loaded.config.tools {
            if let Some(mcp) = &tool.mcp {
                entries.insert(
                    (mcp.upstream.as_str(), mcp.tool.call.tool.as_str()),
                    tool.name.as_str(),
                );
            }
        }
        let names = loaded
            .config
            .tools
            .iter()
            .map(|tool| tool.name.clone())
            .collect();
        Expansion {
            loaded,
            entries,
            names,
            problems,
            report: Vec::new(),
            added: Vec::new(),
        }
    }

    /// Classifies every tool of one import, as its server listed them (`tools`).
    fn import(&mut self, import: &ImportConfig, tools: &[UpstreamToolInfo]) {
        let at = format!("import of `{}` (line {})", import.upstream, import.line);
        for name in import.effects.keys().chain(&import.exclude) {
            if !tools.iter().any(|tool| &tool.name == name) {
                self.problems.push((
                    format!("{at} names `{name}`, which the server does not list"),
                    format!("remove `{name}`; the server lists {}", listing(tools)),
                ));
            }
        }
        let mut unclassified = Vec::new();
        for info in tools {
            self.upstream_tool(import, &at, info, &mut unclassified);
        }
        for name in unclassified {
            self.problems.push((
                format!(
                    "{at}: the server does not mark tool `{name}` read-only, and the config does not say what it does"
                ),
                format!(
                    "classify it under the import's `effects:` (`{name}: idempotent` if repeating it changes nothing more, `{name}: read` if it changes nothing), \
                     or add a tool with `effect: side_effect`, a key, a lookup and `call: {{upstream: {}, tool: {name}}}`, or add `{name}` to `exclude:`",
                    import.upstream
                ),
            ));
        }
    }

    /// Classifies one upstream tool of `import` (`at` names the import in problems), and
    /// exposes it when the import classifies it; a tool nothing classifies goes to
    /// `unclassified`.
    fn upstream_tool(
        &mut self,
        import: &ImportConfig,
        at: &str,
        info: &UpstreamToolInfo,
        unclassified: &mut Vec<String>,
    ) {
        let classified = |by, exposed: Option<String>, effect| ImportedTool {
            upstream: import.upstream.clone(),
            upstream_tool: info.name.clone(),
            exposed_as: exposed,
            effect,
            by,
        };
        if import.exclude.contains(&info.name) {
            self.report
                .push(classified(Classification::Excluded, None, None));
            return;
        }
        if let Some(entry) = self
            .entries
            .get(&(import.upstream.as_str(), info.name.as_str()))
        {
            let effect = self
                .loaded
                .config
                .tools
                .iter()
                .find(|tool| tool.name == *entry)
                .map(|tool| tool.effect);
            self.report.push(classified(
                Classification::ToolEntry((*entry).to_owned()),
                Some((*entry).to_owned()),
                effect,
            ));
            return;
        }
        let (effect, by) = match import.effects.get(&info.name) {
            Some(effect) => (*effect, Classification::Effects),
            None if info.read_only == Some(true) => (Effect::Read, Classification::ReadOnlyHint),
            None => {
                unclassified.push(info.name.clone());
                return;
            }
        };
        let exposed = format!("{}{}", import.prefix, info.name);
        if !self.names.insert(exposed.clone()) {
            self.problems.push((
                format!("{at}: tool `{exposed}` would have the name of another tool"),
                format!(
                    "give the import a `prefix:`, rename the other tool, or add `{}` to `exclude:`",
                    info.name
                ),
            ));
            return;
        }
        match imported_tool(
            self.loaded,
            &import.upstream,
            &exposed,
            effect,
            info,
            import.line,
        ) {
            Ok(tool) => self.added.push(tool),
            Err(reason) => {
                self.problems.push((
                    format!("{at}: tool `{}` can't be exposed: {reason}", info.name),
                    format!("add `{}` to the import's `exclude:`", info.name),
                ));
                return;
            }
        }
        self.report
            .push(classified(by, Some(exposed), Some(effect)));
    }
}

/// Every MCP call, lookup and list of the config's own tools must name a tool its server
/// lists.
fn check_named_tools(
    loaded: &LoadedConfig,
    listed: &BTreeMap<String, Vec<UpstreamToolInfo>>,
    problems: &mut Vec<(String, String)>,
) {
    for tool in &loaded.config.tools {
        let Some(mcp) = &tool.mcp else { continue };
        let Some(tools) = listed.get(&mcp.upstream) else {
            continue;
        };
        let lookup = mcp
            .tool
            .lookup
            .as_ref()
            .map(|lookup| ("lookup", &lookup.call.tool));
        let list = mcp.list.as_ref().map(|list| ("list", &list.call.tool));
        for (part, name) in [("call", &mcp.tool.call.tool)]
            .into_iter()
            .chain(lookup)
            .chain(list)
        {
            if !tools.iter().any(|listed| &listed.name == name) {
                problems.push((
                    format!(
                        "tool `{}` (line {}): its {part} names tool `{name}`, which MCP upstream `{}` does not list",
                        tool.name, tool.line, mcp.upstream
                    ),
                    format!("use one of the tools the server lists: {}", listing(tools)),
                ));
            }
        }
    }
}

/// The exposed form of one upstream tool: its config and the engine's definition.
fn imported_tool(
    loaded: &LoadedConfig,
    upstream: &str,
    name: &str,
    effect: Effect,
    info: &UpstreamToolInfo,
    line: u64,
) -> Result<(ToolConfig, ToolDefinition), String> {
    let server = loaded
        .config
        .mcp_upstreams
        .get(upstream)
        .map(|upstream| upstream.server.timeout)
        .unwrap_or(Duration::from_secs(30));
    let description = info
        .description
        .clone()
        .filter(|text| !text.trim().is_empty())
        .or_else(|| info.title.clone())
        .unwrap_or_else(|| format!("Tool `{}` of MCP server `{upstream}`.", info.name));
    let mut definition = ToolDefinition::new(
        name,
        &description,
        effect,
        info.input_schema.clone(),
        None,
        server,
        IMPORTED_RETRY_BUDGET,
    )
    .map_err(|error| error.to_string())?;
    definition.hash_key = loaded.hash_key.clone();
    definition.check_hash_key().map_err(|_| {
        "its input schema marks a sensitive argument and the config has no `gateway.hash_key`"
            .to_owned()
    })?;
    let config = ToolConfig {
        name: name.to_owned(),
        description,
        effect,
        executor: Executor::Gateway,
        listed_over_mcp: true,
        key_window_hours: None,
        owner: None,
        once_per: None,
        input_schema: info.input_schema.clone(),
        key: None,
        timeout_ms: u64::try_from(server.as_millis()).unwrap_or(u64::MAX),
        retry_budget: IMPORTED_RETRY_BUDGET,
        retry_rejected: false,
        idempotency_key: Default::default(),
        destructive: info.destructive,
        open_world: info.open_world,
        messages: Messages::default(),
        call: None,
        mcp: Some(McpToolConfig {
            upstream: upstream.to_owned(),
            tool: McpTool {
                call: McpToolCall::new(info.name.clone()),
                lookup: None,
            },
            imported: Some(info.clone()),
            list: None,
        }),
        lookup: None,
        list: None,
        alerts: Vec::new(),
        line,
    };
    Ok((config, definition))
}

/// "`a`, `b`" (the first 20), for a fix line.
fn listing(tools: &[UpstreamToolInfo]) -> String {
    let mut names: Vec<String> = tools
        .iter()
        .take(20)
        .map(|tool| format!("`{}`", tool.name))
        .collect();
    if tools.len() > 20 {
        names.push(format!("and {} more", tools.len() - 20));
    }
    if names.is_empty() {
        "no tools".to_owned()
    } else {
        names.join(", ")
    }
}
