//! The config's MCP upstreams, as `serve` starts them: each server is started and asked for
//! its tools, the imports are classified (`intentgate_config::imports`), and every imported
//! tool gets a note saying how it was classified. A server that does not start, or an
//! imported tool nobody classified, is an error-level finding: `serve` would refuse the
//! config.

use intentgate_config::LoadedConfig;
use intentgate_config::imports::{Classification, ImportedTool};
use intentgate_runtime::{Error, McpUpstreams};

use super::{Finding, Severity};

/// Starts the config's MCP upstreams and adds the imported tools to `loaded`. Returns the
/// running sessions (dropping them stops the servers); `None` when the config has no MCP
/// upstream or one could not start.
pub async fn expand(
    loaded: &mut LoadedConfig,
    text: &str,
    file: &str,
    findings: &mut Vec<Finding>,
) -> Option<McpUpstreams> {
    if loaded.config.mcp_upstreams.is_empty() {
        return None;
    }
    let upstreams_line = line_of(text, "upstreams:");
    let servers = match McpUpstreams::start(loaded).await {
        Ok(servers) => servers,
        Err(error) => {
            findings.push(Finding::new(
                Severity::Error,
                "mcp-upstream-down",
                file,
                (upstreams_line, 1),
                format!("{error}: its tools can't be listed, and `serve` would refuse to start"),
                Some(
                    "check the server's `command`/`args` (or `url`), and that it starts on its own"
                        .to_owned(),
                ),
            ));
            return None;
        }
    };
    match servers.expand(loaded) {
        Ok(report) => {
            for tool in &report {
                let line = loaded
                    .config
                    .imports
                    .iter()
                    .find(|import| import.upstream == tool.upstream)
                    .map_or(0, |import| import.line);
                let mut finding = Finding::new(
                    Severity::Note,
                    "import-classified",
                    file,
                    (line, 1),
                    classification(tool),
                    None,
                );
                if let Some(name) = &tool.exposed_as {
                    finding = finding.tool(name);
                }
                findings.push(finding);
            }
        }
        Err(Error::McpTools(errors)) => {
            let imports_line = line_of(text, "imports:");
            for (message, fix) in errors.0 {
                findings.push(Finding::new(
                    Severity::Error,
                    "import-unclassified",
                    file,
                    (imports_line, 1),
                    message,
                    Some(fix),
                ));
            }
        }
        Err(other) => findings.push(Finding::new(
            Severity::Error,
            "mcp-tools",
            file,
            (upstreams_line, 1),
            other.to_string(),
            None,
        )),
    }
    Some(servers)
}

/// "MCP upstream `memory`: `read_graph` is exposed as `memory_read_graph`, a read (the server
/// marks it readOnlyHint)".
fn classification(tool: &ImportedTool) -> String {
    let head = format!("MCP upstream `{}`: `{}`", tool.upstream, tool.upstream_tool);
    let effect = tool.effect.map(|effect| effect.as_str()).unwrap_or("none");
    match (&tool.by, &tool.exposed_as) {
        (Classification::Excluded, _) | (_, None) => {
            format!("{head} is not exposed (the import's `exclude`)")
        }
        (Classification::ReadOnlyHint, Some(name)) => {
            format!("{head} is exposed as `{name}`, {effect} (the server marks it readOnlyHint)")
        }
        (Classification::Effects, Some(name)) => {
            format!("{head} is exposed as `{name}`, {effect} (the import's `effects`)")
        }
        (Classification::ToolEntry(_), Some(name)) => format!(
            "{head} is the call of tool `{name}`, {effect} (an entry of `tools`, with its key and lookup)"
        ),
    }
}

/// The line of the first line that starts with `start`, or 0.
fn line_of(text: &str, start: &str) -> u64 {
    text.lines()
        .position(|line| line.starts_with(start))
        .map_or(0, |index| index as u64 + 1)
}
