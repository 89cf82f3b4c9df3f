//! MCP over stdio: one client, which started this process, on stdin and stdout.
//!
//! stdout carries the protocol and nothing else; logs go to stderr.
//! The client is told (`notifications/tools/list_changed`) when a tool is switched off or on.

use std::future::Future;

use rmcp::ServiceExt;
use rmcp::service::ServerInitializeError;
use rmcp::transport::stdio_pipes;

use crate::McpService;

/// Why serving over stdio stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum StdioError {
    /// The client's first message could not be answered (not an MCP request, or stdin or
    /// stdout failed).
    #[error("the MCP client did not start a session: {0}")]
    Start(#[source] Box<ServerInitializeError>),
    /// The task that served the connection panicked (a bug).
    #[error("the MCP connection failed: {0}")]
    Connection(#[source] tokio::task::JoinError),
}

/// Serves `service` on stdin and stdout until the client closes stdin or `shutdown`
/// completes, then waits (bounded by the shutdown grace period) for calls still running,
/// so that a client that exits right after a cancellation does not cut an upstream call
/// short.
pub async fn serve_stdio(
    service: McpService,
    shutdown: impl Future<Output = ()>,
) -> Result<(), StdioError> {
    tokio::pin!(shutdown);
    // Non-blocking pipes when the client started us with pipes (the usual case), so that
    // a shutdown is not held up by a blocking read of stdin.
    let started = tokio::select! {
        started = service.clone().serve(stdio_pipes()) => started,
        _ = &mut shutdown => return Ok(()),
    };
    let running = match started {
        Ok(running) => running,
        // The client went away before its first request: nothing to serve.
        Err(ServerInitializeError::ConnectionClosed(_)) => return Ok(()),
        Err(error) => return Err(StdioError::Start(Box::new(error))),
    };
    // Switching a tool off or on is told to this client until the connection ends.
    let registration = service.notify_tool_changes(running.peer().clone());
    let stop = running.cancellation_token();
    let waiting = running.waiting();
    tokio::pin!(waiting);
    let quit = tokio::select! {
        quit = &mut waiting => quit,
        _ = &mut shutdown => {
            stop.cancel();
            waiting.await
        }
    };
    drop(registration);
    let still_running = service.drain().await;
    if still_running > 0 {
        tracing::warn!(
            still_running,
            "shutdown grace period over; calls still running stay in_flight in the ledger and are resolved by lookup"
        );
    }
    quit.map(|_| ()).map_err(StdioError::Connection)
}
