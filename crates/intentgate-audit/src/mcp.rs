//! A live MCP server's tools, listed with the official SDK's client and checked against the
//! config.
//!
//! `--mcp-server` is a URL (`http://` or `https://`: Streamable HTTP) or a command line,
//! started as a child process that speaks MCP on its stdin and stdout (its stderr is ours).
//! Connecting and listing are bounded together by [`LIST_TIMEOUT`], and at most
//! [`MCP_TOOLS_MAX`] tools are read. The child is killed when the listing ends.
//!
//! Findings: a tool the config does not have is not behind the gateway (no kill switch, no
//! ledger); one whose annotations leave it side-effecting by default (neither
//! `readOnlyHint` nor `idempotentHint` true) should declare them or get an effect class in
//! the config; a side-effecting tool whose description lacks the once-per sentence.

use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use intentgate_config::ToolConfig;
use intentgate_core::Effect;
use rmcp::ServiceExt;
use rmcp::model::{PaginatedRequestParams, Tool};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

use super::config::has_once_per_sentence;
use super::{Finding, Severity};

/// Connecting, the handshake and every page of `tools/list` together: a server that takes
/// longer is reported as unreachable rather than holding a CI job.
const LIST_TIMEOUT: Duration = Duration::from_secs(10);
/// Most tools read from one server; more is not a tool list an agent could use.
const MCP_TOOLS_MAX: usize = 1000;
/// Longest `--mcp-server` command line, in arguments.
const COMMAND_ARGUMENTS_MAX: usize = 256;

/// The server's tools, at most [`MCP_TOOLS_MAX`]; `true` when there were more.
pub struct Listed {
    pub tools: Vec<Tool>,
    pub truncated: bool,
}

/// Lists the tools of the server `server` names. Any failure is "could not run".
pub async fn list(server: &str) -> anyhow::Result<Listed> {
    if server.starts_with("http://") || server.starts_with("https://") {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .connect_timeout(LIST_TIMEOUT)
            .build()
            .context("building the HTTP client")?;
        let transport = StreamableHttpClientTransport::with_client(
            client,
            StreamableHttpClientTransportConfig::with_uri(server),
        );
        tokio::time::timeout(LIST_TIMEOUT, async {
            let service = ().serve(transport).await.context("MCP handshake")?;
            list_pages(service).await
        })
        .await
        .map_err(|_| anyhow::anyhow!("no tool list within {LIST_TIMEOUT:?}"))?
        .with_context(|| format!("--mcp-server {server}"))
    } else {
        let words = split_command(server).with_context(|| format!("--mcp-server {server}"))?;
        let (program, arguments) = words.split_first().context("--mcp-server is empty")?;
        let mut child = tokio::process::Command::new(program)
            .args(arguments)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("--mcp-server: starting `{program}`"))?;
        let stdout = child.stdout.take().context("the child's stdout")?;
        let stdin = child.stdin.take().context("the child's stdin")?;
        let listed = tokio::time::timeout(LIST_TIMEOUT, async {
            let service = ().serve((stdout, stdin)).await.context("MCP handshake")?;
            list_pages(service).await
        })
        .await
        .map_err(|_| anyhow::anyhow!("no tool list within {LIST_TIMEOUT:?}"))
        .and_then(|listed| listed)
        .with_context(|| format!("--mcp-server {server}"));
        let _ = child.kill().await;
        listed
    }
}

/// Every page of `tools/list`, up to [`MCP_TOOLS_MAX`] tools; then the connection closes.
async fn list_pages(service: RunningService<rmcp::RoleClient, ()>) -> anyhow::Result<Listed> {
    let mut tools = Vec::new();
    let mut cursor = None;
    let mut truncated = false;
    loop {
        let page = service
            .list_tools(Some(PaginatedRequestParams::default().with_cursor(cursor)))
            .await
            .context("tools/list")?;
        tools.extend(page.tools);
        if tools.len() > MCP_TOOLS_MAX {
            tools.truncate(MCP_TOOLS_MAX);
            truncated = true;
            break;
        }
        match page.next_cursor {
            Some(next) if !next.is_empty() => cursor = Some(next),
            _ => break,
        }
    }
    let _ = service.cancel().await;
    Ok(Listed { tools, truncated })
}

/// Words of a command line: split on whitespace, with '...' and "..." quoting and `\` escapes
/// outside single quotes. No variables, globs or pipes: nothing runs through a shell.
fn split_command(line: &str) -> anyhow::Result<Vec<String>> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('\''), c) => word.push(c),
            (_, '\\') => {
                word.push(chars.next().context("a trailing `\\`")?);
                in_word = true;
            }
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            (None, c) => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if quote.is_some() {
        bail!("an unclosed quote");
    }
    if in_word {
        words.push(word);
    }
    if words.len() > COMMAND_ARGUMENTS_MAX {
        bail!("more than {COMMAND_ARGUMENTS_MAX} arguments");
    }
    Ok(words)
}

pub fn check(server: &str, listed: &Listed, tools: &[ToolConfig], findings: &mut Vec<Finding>) {
    let fronted = listed
        .tools
        .iter()
        .filter(|tool| tools.iter().any(|known| known.name == tool.name))
        .count();
    findings.push(Finding::new(
        Severity::Note,
        "mcp-listed",
        server,
        (0, 0),
        format!(
            "the server lists {}{} tools; {fronted} of them are in the config",
            listed.tools.len(),
            if listed.truncated {
                " (or more: only the first were read)"
            } else {
                ""
            },
        ),
        None,
    ));
    for tool in &listed.tools {
        let name = tool.name.as_ref();
        let configured = tools.iter().find(|known| known.name == name);
        let annotations = tool.annotations.as_ref();
        let read_only = annotations.and_then(|a| a.read_only_hint) == Some(true);
        let idempotent = annotations.and_then(|a| a.idempotent_hint) == Some(true);
        let side_effect = match configured {
            Some(known) => known.effect == Effect::SideEffect,
            None => !read_only && !idempotent,
        };
        if configured.is_none() {
            findings.push(
                Finding::new(
                    Severity::Warning,
                    "no-kill-switch",
                    server,
                    (0, 0),
                    format!(
                        "MCP tool `{name}` is not in the config: no kill switch covers it, and \
                         its calls bypass the intent ledger"
                    ),
                    Some(format!(
                        "add `{name}` to the config's `tools` with its `effect` (and, for a side \
                         effect, a key, lookup, owner and list), and point the agent at \
                         intentgate instead of this server"
                    )),
                )
                .tool(name),
            );
            if side_effect {
                findings.push(
                    Finding::new(
                        Severity::Warning,
                        "mcp-side-effect-by-default",
                        server,
                        (0, 0),
                        format!(
                            "MCP tool `{name}` is side-effecting by default: neither \
                             readOnlyHint nor idempotentHint is true, so clients must treat it \
                             as possibly destructive and a retry may act twice"
                        ),
                        Some(
                            "declare readOnlyHint/idempotentHint, or put it behind intentgate \
                             with an effect class"
                                .to_owned(),
                        ),
                    )
                    .tool(name),
                );
            }
        }
        let description = tool.description.as_deref().unwrap_or_default();
        if side_effect && !has_once_per_sentence(description) {
            findings.push(
                Finding::new(
                    Severity::Warning,
                    "missing-once-per-sentence",
                    server,
                    (0, 0),
                    format!(
                        "the description of side-effecting MCP tool `{name}` does not tell the \
                         model that one call per intent is enough"
                    ),
                    Some(
                        "end it with a sentence such as \"Safe to call once per order. Repeated \
                         calls return the original result.\" (intentgate adds it to the tools \
                         it serves)"
                            .to_owned(),
                    ),
                )
                .tool(name),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_lines_split_like_a_shell_without_one() {
        assert_eq!(
            split_command(r#"intentgate mcp --config "my dir/a.yaml" 'x y' a\ b"#).unwrap(),
            [
                "intentgate",
                "mcp",
                "--config",
                "my dir/a.yaml",
                "x y",
                "a b"
            ]
        );
        assert!(split_command("a 'b").is_err());
        assert_eq!(split_command("  ").unwrap(), Vec::<String>::new());
    }
}
