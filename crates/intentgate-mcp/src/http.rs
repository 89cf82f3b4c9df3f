//! MCP over Streamable HTTP, stateless: the router that `intentgate serve` mounts at
//! [`MCP_PATH`].
//!
//! No sessions (protocol version 2026-07-28 removed them, and a gateway with several
//! replicas must not need sticky routing): every POST carries one JSON-RPC request and gets
//! its answer on its own response stream. Clients of the `initialize` era are answered on
//! the same route; their `initialize` is served like any other request. A client that drops
//! a response stream cancels nothing: the call goes on in its own task, and a re-issued
//! request (with a new id, as the spec tells clients to do) lands on the same intent.
//!
//! Without a standing connection there is no one to send `notifications/tools/list_changed`
//! to: a client of this endpoint sees a tool switched off or on at its next `tools/list`
//! (within about a second of the switch, as the gate honours it).

use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use std::sync::Arc;

use crate::McpService;

/// Where the MCP endpoint is served.
pub const MCP_PATH: &str = "/mcp";

/// The `Host` values a loopback-bound server accepts: a local MCP server must refuse other
/// names, or a web page could reach it through DNS rebinding.
pub const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// Settings of the Streamable HTTP endpoint.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Largest request body accepted (413 beyond).
    pub body_limit_bytes: usize,
    /// `Host` header values accepted (with or without a port); empty accepts any host.
    /// A server that listens on loopback should accept only [`LOOPBACK_HOSTS`]; one that
    /// listens on a routable address is reached by names its operators choose.
    pub allowed_hosts: Vec<String>,
}

/// The MCP endpoint as an axum router with one route, [`MCP_PATH`], to merge into the HTTP
/// API's router.
pub fn http_router(service: McpService, options: HttpOptions) -> axum::Router {
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_max_request_body_bytes(options.body_limit_bytes);
    let config = if options.allowed_hosts.is_empty() {
        config.disable_allowed_hosts()
    } else {
        config.with_allowed_hosts(options.allowed_hosts)
    };
    let endpoint = StreamableHttpService::new(
        move || Ok(service.clone()),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    axum::Router::new().route_service(MCP_PATH, endpoint)
}
