//! intentgate's upstream for MCP servers: a gate tool performed by `tools/call` on a server
//! the gateway starts (stdio) or reaches (Streamable HTTP), through the official SDK's client
//! (rmcp).
//!
//! [`McpConnection::start`] opens a session with one server ([`McpServer`]): rmcp negotiates
//! the protocol, and the tools are read with `tools/list`. [`McpUpstream`] implements the
//! gate's `Upstream` over that connection, with one [`McpTool`] per gate tool: the
//! [`McpToolCall`] that performs it and, for a side effect, the [`McpLookup`] that finds its
//! effect afterwards.
//!
//! # The request
//!
//! The `arguments` template (or the gate's arguments as they are) becomes the `tools/call`
//! arguments. The provider idempotency key goes into the argument that
//! `idempotency_key_argument` names, or else into the request's `_meta` as
//! `idempotency_key`. A result's value is its `structuredContent`, else the JSON in its first
//! text block, else that text, else its content blocks (an image, a resource); the gate reads the external id from it with the tool
//! definition's `external_id_pointer`.
//!
//! # Outcome mapping
//!
//! Each call ends in one observation, which the gate's `classify` turns into an outcome:
//!
//! | What happened                                              | Observation                   | Outcome          |
//! |------------------------------------------------------------|-------------------------------|------------------|
//! | a result without `isError`                                 | `Response` 200, the value     | done             |
//! | `isError`, its text matches a `not_processed` pattern      | `Response` 429                | not processed    |
//! | `isError`, any other text                                  | `Response` 422                | rejected         |
//! | JSON-RPC error -32601 or -32602 (the call was not accepted) | `Response` 429                | not processed    |
//! | any other JSON-RPC error                                   | `Response` 502                | ambiguous        |
//! | no answer within the timeout                               | `Timeout`                     | ambiguous        |
//! | the session or process ended with the call in flight       | `Dropped`                     | ambiguous        |
//! | the server is down (restarting; nothing listens at its URL) | `NotSent`                     | not processed    |
//!
//! The error bodies are `{"error": {"type", "message"}}` (plus `code` for JSON-RPC errors);
//! `type` tells the two 429s apart (`not_processed`, `not_accepted`). A call the server did not
//! accept is retried within the tool's budget like a rate limit, then ends `not_executed`
//! (docs/design.md section 11). A server that answers an unknown tool with an `isError` result (the
//! Python SDK does) gets a refusal instead: `rejected`, which is as certain that nothing
//! happened. A gate tool with no MCP call configured answers 422 (`not_configured`).
//! A lookup that gets no result, or an `isError` result, is `LookupOutcome::Failed`: nothing
//! is known.
//!
//! # Listing for reconciliation
//!
//! [`McpRecordPager`] pages through a tool's effects with another tool of the server
//! ([`McpList`]): its `arguments` template takes `{since_ms}`, `{until_ms}`, `{since_s}`,
//! `{until_s}`, `{limit}` and `{cursor}`, and each result is one page, read with the same
//! pointers (`items`, `next_cursor` or `has_more`, `fields`) as an HTTP listing. An `isError` result, a JSON-RPC error or no
//! answer within `LIST_PAGE_TIMEOUT` fails the page, and asking again asks for the same page.
//!
//! # Supervision
//!
//! A supervisor task watches the session. When a stdio server exits (or an HTTP session is
//! lost), calls in flight end as `Dropped`, never as failed: the server may have committed
//! before it died. Until a new session is open, calls answer `NotSent` at once: nothing was
//! sent; a lookup, which performs nothing, waits for the new session within its timeout
//! instead, since the gate looks up right after an ambiguous outcome such as a crash. The
//! first session must open for [`McpConnection::start`] to succeed (a server that can't start
//! at all is a config error); later ones are retried forever. The server is started again after [`connection::BACKOFF_MIN`], doubling up to
//! [`connection::BACKOFF_MAX`]. A stdio server's stderr lines go to the log at `info`,
//! escaped and cut at [`connection::STDERR_LINE_BYTES_MAX`] bytes.

pub mod connection;
mod list;
mod spec;
mod upstream;

pub use connection::{McpConnectError, McpConnection};
pub use list::McpRecordPager;
pub use spec::{McpList, McpLookup, McpServer, McpTool, McpToolCall, McpTransport};
pub use upstream::{
    McpUpstream, NOT_ACCEPTED_STATUS, NOT_PROCESSED_STATUS, REFUSED_STATUS, SERVER_ERROR_STATUS,
    observation_of_result, result_value,
};
