//! The configured tools over the Model Context Protocol, through the same [`Gate`].
//!
//! Most agents reach their tools over MCP. [`McpService`] is an MCP server (a hand-written
//! `rmcp::ServerHandler`, no macros) whose tools are the gate's tools:
//!
//! - `tools/list` publishes each tool with its input schema, its published description (a
//!   side-effecting tool's ends with the once-per-intent sentence), annotations derived
//!   from its effect (`tools.rs`) and an `outputSchema` for the outcome object (the schema of
//!   `intentgate_wire::Outcome`, the type the HTTP API answers too). A tool
//!   switched off with the kill switch stays listed, its description starting with
//!   [`SWITCHED_OFF_SENTENCE`]. The service reads the flags from the ledger every
//!   [`FLAG_POLL`] (`flags.rs`) and, when a tool is switched off or on, sends
//!   `notifications/tools/list_changed` to the stdio client (capability
//!   `tools.listChanged`); clients of the stateless HTTP endpoint, which has no standing
//!   connection, see the change at their next `tools/list`.
//! - `tools/call` runs [`Gate::call`]. Every outcome of docs/design.md section 6 is a tool result:
//!   `structuredContent` holds the outcome object (`intentgate_wire::Outcome`) and a text
//!   block holds the same JSON;
//!   `isError` is set only where the model must act differently (`rejected`, `conflict`,
//!   `invalid_arguments`). Unknown tools and malformed calls are JSON-RPC errors (invalid
//!   params; a request the SDK can't parse gets the SDK's error); a ledger that failed
//!   before anything was sent is an internal error that says nothing was executed. The
//!   application's intent id arrives in `_meta["intentgate/intent_id"]` of the request; a
//!   tool that needs one says so in its description, and a call without one is
//!   `invalid_arguments` with reason `missing_intent_id` (tell the user, don't retry). The
//!   outcome object starts with `status`, then `reason` and `message`, on the wire too.
//!
//! Two transports: [`serve_stdio`] (`intentgate mcp`, one client on stdin/stdout) and
//! [`http_router`] (Streamable HTTP, mounted at [`MCP_PATH`] by `intentgate serve`),
//! stateless, as protocol version 2026-07-28 defines it: no sessions, every POST carries one
//! request and gets its answer on that request's own response stream. Clients of 2025-06-18
//! and 2025-11-25 still connect with the `initialize` handshake, which is answered on the
//! same stateless route.
//!
//! **Architecture invariant:** a call that has started is never cancelled by its client.
//! The gate call runs in its own task: a client that cancels a request or drops its
//! response stream only stops waiting, while the call runs to its end and leaves its intent
//! settled (or `in_flight` with a lease, if the process dies) in the ledger. A retry with a
//! new request id then lands on the same intent.
//!
//! **API boundary:** [`McpService::new`] takes the gate, the per-tool MCP hints
//! ([`ToolHints`]) and [`McpOptions`]; the transports take the service. This crate knows
//! nothing of the config file: the binary turns config into hints.

mod flags;
mod http;
mod service;
mod stdio;
mod tools;

use std::time::Duration;

pub use flags::{FLAG_POLL, PeerRegistration};
pub use http::{HttpOptions, LOOPBACK_HOSTS, MCP_PATH, http_router};
/// The `outputSchema` of every tool: the JSON Schema of the outcome, generated from the
/// type the HTTP API answers too.
pub use intentgate_wire::outcome_schema;
pub use service::{INTENT_ID_META_KEY, McpService, PERMIT_WAIT, PROTOCOL_VERSIONS};
pub use stdio::{StdioError, serve_stdio};
pub use tools::{SWITCHED_OFF_SENTENCE, ToolHints};

#[cfg(doc)]
use intentgate_gate::Gate;

/// Settings of the MCP server, whatever the transport.
#[derive(Debug, Clone)]
pub struct McpOptions {
    /// The tenant of calls without a principal: every call over stdio. Over Streamable HTTP
    /// the caller's principal (inserted by the HTTP edge) decides.
    pub tenant: String,
    /// Tool calls running at once. A call beyond it waits up to [`PERMIT_WAIT`] for a slot.
    pub concurrency_limit: u32,
    /// How long a stopping server waits for calls that are still running (their intents
    /// are settled in the ledger either way; a call cut short stays `in_flight` and is
    /// resolved by the lookup).
    pub shutdown_grace: Duration,
}

impl Default for McpOptions {
    fn default() -> McpOptions {
        McpOptions {
            tenant: "default".to_owned(),
            concurrency_limit: 256,
            shutdown_grace: Duration::from_secs(30),
        }
    }
}
