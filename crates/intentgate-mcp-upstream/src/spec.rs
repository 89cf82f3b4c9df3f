//! What a config says about an MCP upstream: the server ([`McpServer`]) and, per tool, the
//! call that performs it ([`McpToolCall`]) and the call that finds its effect afterwards
//! ([`McpLookup`]), and the call that lists its effects for reconciliation ([`McpList`]). Plain structs with public fields; [`crate::McpConnection::start`] and
//! [`crate::McpUpstream::new`] check them.

use std::collections::BTreeMap;
use std::time::Duration;

use intentgate_http::spec::{ListRecords, MatchField};
use serde_json::Value;

/// One upstream MCP server and how long one call to it may take.
#[derive(Debug, Clone, PartialEq)]
pub struct McpServer {
    /// The name the config gives the server, for logs and errors.
    pub name: String,
    pub transport: McpTransport,
    /// Upper bound on one `tools/call`; the tool's own timeout bounds it too (the shorter
    /// wins). A call without an answer by then is ambiguous (`Timeout`).
    pub timeout: Duration,
}

/// How the gateway reaches an MCP server. Its `Debug` shows the names of environment variables
/// and headers, never their values (they hold secrets).
#[derive(Clone, PartialEq)]
pub enum McpTransport {
    /// A server the gateway starts as a child process and speaks to over its stdin and
    /// stdout. The child gets `env` and, of the gateway's environment, only
    /// [`crate::connection::INHERITED_ENV`] (`PATH`, `HOME`, ...): never the gateway's
    /// secrets. Its stderr lines go to the log. It is restarted when it exits (see the crate docs on supervision).
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
    },
    /// A server that speaks MCP's Streamable HTTP at `url`; `headers` go with every request
    /// (an `Authorization` header, for example).
    Http {
        url: String,
        headers: BTreeMap<String, String>,
    },
}

impl std::fmt::Debug for McpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            McpTransport::Stdio { command, args, env } => f
                .debug_struct("Stdio")
                .field("command", command)
                .field("args", &args.len())
                .field("env", &env.keys().collect::<Vec<_>>())
                .finish(),
            McpTransport::Http { url, headers } => f
                .debug_struct("Http")
                .field("url", &url.split(['?', '#']).next().unwrap_or_default())
                .field("headers", &headers.keys().collect::<Vec<_>>())
                .finish(),
        }
    }
}

/// The `tools/call` that performs a gate tool (or, inside an [`McpLookup`], finds one).
#[derive(Debug, Clone, PartialEq)]
pub struct McpToolCall {
    /// The tool's name on the MCP server.
    pub tool: String,
    /// The `arguments` object sent, as a template; `None` sends the gate's arguments as they
    /// are. Rendered as an HTTP request's JSON body is (one renderer for every template): a
    /// string value that is exactly one placeholder, `"{order_id}"` or `"{customer.id}"`,
    /// becomes the gate argument at that path, whatever its JSON type (`{amount:minor(USD)}`
    /// an integer); any other string with placeholders is text (`"refund of {order_id}"`,
    /// `"{amount:.2}"`); the gateway's own values are `{intent_key}`, `{idempotency_key}` and
    /// `{intent_id}`. A member whose placeholder names an absent value is left out (a lookup
    /// refuses it instead; in an array it is refused). Every other value is literal JSON;
    /// `"{{x}}"` is the literal string `"{x}"`.
    pub arguments: Option<Value>,
    /// The argument that carries the provider idempotency key. `None` sends it in the
    /// request's `_meta` under `idempotency_key` instead. Only side-effecting calls carry a
    /// key; a lookup never does.
    pub idempotency_key_argument: Option<String>,
    /// Texts of an `isError` result that prove the call was not processed (a rate limit, a
    /// server not ready): substrings, compared case-insensitively. Such a result may be
    /// retried with the same key; any other `isError` result is a refusal.
    pub not_processed: Vec<String>,
}

impl McpToolCall {
    /// A call of `tool` with the gate's arguments as they are, the key in `_meta`, and no
    /// not-processed texts.
    pub fn new(tool: impl Into<String>) -> McpToolCall {
        McpToolCall {
            tool: tool.into(),
            arguments: None,
            idempotency_key_argument: None,
            not_processed: Vec::new(),
        }
    }
}

/// How a gate tool maps onto the MCP server: the call that performs it and, for a side
/// effect, the read-only call that finds its effect afterwards.
#[derive(Debug, Clone, PartialEq)]
pub struct McpTool {
    pub call: McpToolCall,
    pub lookup: Option<McpLookup>,
}

/// A read-only tool of the same server that finds an effect, as `LookupSpec` does for HTTP.
/// Its result (see the crate docs: `structuredContent`, else the first text block's JSON) is
/// read with two JSON pointers.
#[derive(Debug, Clone, PartialEq)]
pub struct McpLookup {
    /// The lookup tool's call; its `idempotency_key_argument` is ignored (a lookup performs
    /// nothing and carries no key).
    pub call: McpToolCall,
    /// JSON pointer to what the lookup found in the result: one record (an object) or the
    /// candidates (an array); absent, `null`, `[]` or `{}` there means not found. `""` is the
    /// whole result.
    pub found: String,
    /// JSON pointer, inside the found value, to the provider's id; `None` is `/id`.
    pub external_id: Option<String>,
    /// JSON pointer, inside a record, to the provider key the gateway sent with the effect.
    pub key: Option<String>,
    /// Business fields a record must hold with the intent's exact values. With `key`, how a
    /// record is proved to be this intent's (`intentgate_http::verify`); at least one.
    pub match_fields: BTreeMap<String, MatchField>,
}

/// A read-only tool of the same server that lists a tool's effects over a time window, for
/// reconciliation, as `ListSpec` does for HTTP. Its `arguments` template may use
/// `{since_ms}`, `{until_ms}`, `{since_s}`, `{until_s}`, `{limit}` and `{cursor}` (nothing
/// else: a listing has no intent); on the first page there is no cursor, so a member that is exactly `"{cursor}"` is
/// left out. Each result (its `structuredContent`, else the JSON of its first text block) is
/// one page, read with `records`.
#[derive(Debug, Clone, PartialEq)]
pub struct McpList {
    /// The listing tool's call; it carries no key.
    pub call: McpToolCall,
    /// Where a page keeps its records and the next cursor, and what each record holds.
    pub records: ListRecords,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_names_secrets_without_their_values() {
        let stdio = McpTransport::Stdio {
            command: "refund-server".into(),
            args: vec!["--token=s3cret-arg".into()],
            env: BTreeMap::from([("API_KEY".into(), "s3cret-env".into())]),
        };
        let http = McpTransport::Http {
            url: "https://mcp.example/mcp?key=s3cret-query".into(),
            headers: BTreeMap::from([("authorization".into(), "Bearer s3cret-header".into())]),
        };
        let text = format!("{stdio:?} {http:?}");
        assert!(
            text.contains("API_KEY") && text.contains("authorization"),
            "{text}"
        );
        assert!(!text.contains("s3cret"), "{text}");
    }
}
