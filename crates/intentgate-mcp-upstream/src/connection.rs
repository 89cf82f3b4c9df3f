//! [`McpConnection`]: one supervised session with an MCP server.
//!
//! A supervisor task opens the session (for stdio: starts the child), lets rmcp negotiate the
//! protocol, reads `tools/list`, and publishes the session. When the session ends (the child
//! exits, the HTTP session is lost) it publishes that the server is down and opens a new one
//! after a backoff of [`BACKOFF_MIN`] doubling to [`BACKOFF_MAX`]; a session that lived at
//! least [`BACKOFF_MAX`] starts the backoff over. The supervisor stops when the connection
//! is dropped, and the child is killed with it.

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::handler::client::ClientHandler;
use rmcp::model::Tool;
use rmcp::service::{NotificationContext, Peer, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};
use tokio::sync::{Notify, watch};

use crate::spec::{McpServer, McpTransport};

/// The first restart comes this long after a session ends.
pub const BACKOFF_MIN: Duration = Duration::from_millis(100);
/// The longest wait between restarts.
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// Starting the server, the handshake and `tools/list` together, per session.
pub const OPEN_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest stderr line logged, in bytes; the rest of a longer line is dropped.
pub const STDERR_LINE_BYTES_MAX: usize = 2048;

/// Why a connection could not be started.
#[derive(Debug, thiserror::Error)]
pub enum McpConnectError {
    #[error("MCP server `{server}`: {reason}")]
    Open { server: String, reason: String },
    #[error("MCP server `{server}`: header `{header}` is not a valid HTTP header")]
    BadHeader { server: String, header: String },
}

/// The server's state as calls see it.
#[derive(Clone)]
pub(crate) enum State {
    /// A session is open: calls go to `peer`.
    Up {
        peer: Peer<RoleClient>,
        tools: Arc<Vec<Tool>>,
    },
    /// No session: the server is starting, or restarting after `reason`.
    Down { reason: String },
}

/// A supervised session with one MCP server. Cheap to share behind an `Arc`; dropping it
/// stops the supervisor and the child process.
pub struct McpConnection {
    name: String,
    timeout: Duration,
    state: watch::Receiver<State>,
    supervisor: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for McpConnection {
    /// The name only: a command line, URL or headers may hold secrets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpConnection")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Drop for McpConnection {
    fn drop(&mut self) {
        self.supervisor.abort();
    }
}

impl McpConnection {
    /// Starts the supervisor and waits for the first session, up to [`OPEN_TIMEOUT`]. `Err`
    /// when the first session can't be opened (a command that does not start, a URL that
    /// does not answer MCP): a config that can't work is refused at start, not restarted
    /// forever. Later failures are restarted.
    pub async fn start(server: McpServer) -> Result<McpConnection, McpConnectError> {
        let opener = Opener::new(&server)?;
        let name = server.name.clone();
        let first = opener
            .open()
            .await
            .map_err(|reason| McpConnectError::Open {
                server: name.clone(),
                reason,
            })?;
        let (sender, state) = watch::channel(State::Up {
            peer: first.peer().clone(),
            tools: first.tools.clone(),
        });
        let supervisor = tokio::spawn(supervise(opener, first, sender));
        Ok(McpConnection {
            name,
            timeout: server.timeout,
            state,
            supervisor,
        })
    }

    /// The server's name, as configured.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The server's bound on one call (`McpServer::timeout`).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The tools the current session listed when it opened; `None` while the server is
    /// down.
    pub fn tools(&self) -> Option<Arc<Vec<Tool>>> {
        match &*self.state.borrow() {
            State::Up { tools, .. } => Some(tools.clone()),
            State::Down { .. } => None,
        }
    }

    /// True while a session is open.
    pub fn is_up(&self) -> bool {
        matches!(*self.state.borrow(), State::Up { .. })
    }

    /// Waits until a session is open, at most `within`; true when one is.
    pub async fn wait_up(&self, within: Duration) -> bool {
        let mut state = self.state.clone();
        tokio::time::timeout(
            within,
            state.wait_for(|state| matches!(state, State::Up { .. })),
        )
        .await
        .is_ok_and(|waited| waited.is_ok())
    }

    /// The current state, for a call.
    pub(crate) fn state(&self) -> State {
        self.state.borrow().clone()
    }
}

/// The client side of a session: it hears `notifications/tools/list_changed`, which the
/// supervisor answers by reading `tools/list` again.
#[derive(Clone, Default)]
struct Listener {
    tools_changed: Arc<Notify>,
}

impl ClientHandler for Listener {
    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.tools_changed.notify_one();
        std::future::ready(())
    }
}

/// One open session and what it listed.
struct Session {
    service: RunningService<RoleClient, Listener>,
    tools: Arc<Vec<Tool>>,
}

impl Session {
    fn peer(&self) -> &Peer<RoleClient> {
        self.service.peer()
    }
}

/// Opens sessions of one server.
struct Opener {
    server: McpServer,
    /// Shared by every session's listener.
    listener: Listener,
    /// The HTTP client and headers, built once.
    http: Option<(
        reqwest::Client,
        std::collections::HashMap<reqwest::header::HeaderName, reqwest::header::HeaderValue>,
    )>,
}

impl Opener {
    fn new(server: &McpServer) -> Result<Opener, McpConnectError> {
        let http = match &server.transport {
            McpTransport::Stdio { .. } => None,
            McpTransport::Http { headers, .. } => {
                let _ = rustls::crypto::ring::default_provider().install_default();
                let client = reqwest::Client::builder()
                    .connect_timeout(OPEN_TIMEOUT)
                    .build()
                    .map_err(|error| McpConnectError::Open {
                        server: server.name.clone(),
                        reason: format!("building the HTTP client: {error}"),
                    })?;
                let mut parsed = std::collections::HashMap::new();
                for (name, value) in headers {
                    let bad = || McpConnectError::BadHeader {
                        server: server.name.clone(),
                        header: name.clone(),
                    };
                    parsed.insert(
                        reqwest::header::HeaderName::try_from(name.as_str()).map_err(|_| bad())?,
                        reqwest::header::HeaderValue::try_from(value.as_str())
                            .map_err(|_| bad())?,
                    );
                }
                Some((client, parsed))
            }
        };
        Ok(Opener {
            server: server.clone(),
            listener: Listener::default(),
            http,
        })
    }

    /// Opens one session: starts the server (stdio) or connects (HTTP), negotiates, lists
    /// the tools. `Err` says why not.
    async fn open(&self) -> Result<Session, String> {
        let service = match (&self.server.transport, &self.http) {
            (McpTransport::Stdio { command, args, env }, _) => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args).envs(env).kill_on_drop(true);
                let (transport, stderr) = TokioChildProcess::builder(cmd)
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|error| format!("starting `{command}`: {error}"))?;
                if let Some(stderr) = stderr {
                    tokio::spawn(log_stderr(self.server.name.clone(), stderr));
                }
                tokio::time::timeout(OPEN_TIMEOUT, self.listener.clone().serve(transport))
                    .await
                    .map_err(|_| format!("no MCP handshake within {OPEN_TIMEOUT:?}"))?
                    .map_err(|error| format!("MCP handshake: {error}"))?
            }
            (McpTransport::Http { url, .. }, Some((client, headers))) => {
                let transport = StreamableHttpClientTransport::with_client(
                    client.clone(),
                    StreamableHttpClientTransportConfig::with_uri(url.as_str())
                        .custom_headers(headers.clone()),
                );
                tokio::time::timeout(OPEN_TIMEOUT, self.listener.clone().serve(transport))
                    .await
                    .map_err(|_| format!("no MCP handshake within {OPEN_TIMEOUT:?}"))?
                    .map_err(|error| format!("MCP handshake: {error}"))?
            }
            (McpTransport::Http { .. }, None) => unreachable!("Opener::new builds the client"),
        };
        let tools = tokio::time::timeout(OPEN_TIMEOUT, service.peer().list_all_tools())
            .await
            .map_err(|_| format!("no tools/list answer within {OPEN_TIMEOUT:?}"))?
            .map_err(|error| format!("tools/list: {error}"))?;
        tracing::info!(server = %self.server.name, tools = tools.len(), "MCP session open");
        Ok(Session {
            service,
            tools: Arc::new(tools),
        })
    }
}

/// Keeps a session open: waits for the current one to end, publishes `Down`, reopens with
/// backoff, publishes `Up`. Ends when every receiver is gone.
async fn supervise(opener: Opener, first: Session, state: watch::Sender<State>) {
    let name = opener.server.name.clone();
    let mut backoff = BACKOFF_MIN;
    let mut last_tools = first.tools.clone();
    let mut session = Some(first);
    loop {
        if let Some(open) = session.take() {
            let opened = Instant::now();
            let peer = open.peer().clone();
            let waiting = open.service.waiting();
            tokio::pin!(waiting);
            let quit = loop {
                tokio::select! {
                    quit = &mut waiting => break quit,
                    () = opener.listener.tools_changed.notified() => {
                        match tokio::time::timeout(OPEN_TIMEOUT, peer.list_all_tools()).await {
                            Ok(Ok(listed)) => {
                                log_changes(&name, &last_tools, &listed);
                                last_tools = Arc::new(listed);
                                let up = State::Up { peer: peer.clone(), tools: last_tools.clone() };
                                if state.send(up).is_err() {
                                    return;
                                }
                            }
                            Ok(Err(error)) => tracing::warn!(server = %name, %error, "MCP server announced new tools, and tools/list failed"),
                            Err(_) => tracing::warn!(server = %name, "MCP server announced new tools, and tools/list did not answer"),
                        }
                    }
                }
            };
            let reason = match quit {
                Ok(reason) => format!("session ended: {reason:?}"),
                Err(error) => format!("session task failed: {error}"),
            };
            tracing::warn!(server = %name, %reason, "MCP server down; restarting");
            if state.send(State::Down { reason }).is_err() {
                return;
            }
            if opened.elapsed() >= BACKOFF_MAX {
                backoff = BACKOFF_MIN;
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(BACKOFF_MAX);
        match opener.open().await {
            Ok(open) => {
                log_changes(&name, &last_tools, &open.tools);
                last_tools = open.tools.clone();
                let up = State::Up {
                    peer: open.peer().clone(),
                    tools: open.tools.clone(),
                };
                if state.send(up).is_err() {
                    return;
                }
                session = Some(open);
            }
            Err(reason) => {
                tracing::warn!(server = %name, %reason, retry_in_ms = backoff.as_millis() as u64, "MCP server did not start");
                if state.send(State::Down { reason }).is_err() {
                    return;
                }
            }
        }
    }
}

/// Logs how a server's tool list changed. The gateway's tools are fixed when it starts:
/// a new upstream tool is not served until a restart, and a call of a removed one is refused
/// by the server (not executed).
fn log_changes(server: &str, before: &[Tool], after: &[Tool]) {
    let names = |tools: &[Tool]| -> std::collections::BTreeSet<String> {
        tools.iter().map(|tool| tool.name.to_string()).collect()
    };
    let (before, after) = (names(before), names(after));
    let added: Vec<&String> = after.difference(&before).collect();
    let removed: Vec<&String> = before.difference(&after).collect();
    if added.is_empty() && removed.is_empty() {
        tracing::info!(
            server,
            tools = after.len(),
            "MCP server listed its tools again; none added or removed"
        );
        return;
    }
    tracing::warn!(
        server,
        ?added,
        ?removed,
        "MCP server's tools changed: added tools are served after the gateway restarts; calls of removed ones end not executed"
    );
}

/// Logs each stderr line of a child at `info` (servers write their ordinary logs there),
/// escaped (no control characters reach the log)
/// and cut at [`STDERR_LINE_BYTES_MAX`] bytes.
async fn log_stderr(server: String, stderr: impl AsyncRead + Unpin) {
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = (&mut reader)
            .take(STDERR_LINE_BYTES_MAX as u64)
            .read_until(b'\n', &mut line)
            .await;
        match read {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let cut = line.len() == STDERR_LINE_BYTES_MAX && !line.ends_with(b"\n");
        if cut {
            // Drop the rest of an overlong line.
            let mut rest = Vec::new();
            loop {
                rest.clear();
                match (&mut reader)
                    .take(STDERR_LINE_BYTES_MAX as u64)
                    .read_until(b'\n', &mut rest)
                    .await
                {
                    Ok(0) | Err(_) => break,
                    Ok(_) if rest.ends_with(b"\n") => break,
                    Ok(_) => {}
                }
            }
        }
        let text = String::from_utf8_lossy(line.strip_suffix(b"\n").unwrap_or(&line));
        let text = text.strip_suffix('\r').unwrap_or(&text);
        tracing::info!(server = %server, truncated = cut, line = %text.escape_debug(), "MCP server stderr");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stderr_lines_are_logged_escaped_and_cut() {
        let log = intentgate_test_support::CapturedLog::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(log.clone())
            .with_ansi(false)
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        let long = "x".repeat(3 * STDERR_LINE_BYTES_MAX);
        let stderr = format!("first\r\n{long}\nbell \u{7} end\nlast without newline");
        log_stderr("refunds".into(), stderr.as_bytes()).await;
        let text = log.text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(
            lines[0].contains("line=first truncated=false")
                || lines[0].contains("truncated=false line=first"),
            "{}",
            lines[0]
        );
        // The long line: its first STDERR_LINE_BYTES_MAX bytes only, marked, and its rest
        // is not taken for the next line.
        assert!(lines[1].contains("truncated=true"), "{}", lines[1]);
        assert!(lines[1].contains(&"x".repeat(STDERR_LINE_BYTES_MAX)));
        assert!(!lines[1].contains(&"x".repeat(STDERR_LINE_BYTES_MAX + 1)));
        assert!(lines[2].contains("bell \\u{7} end"), "{}", lines[2]);
        assert!(lines[3].contains("last without newline"), "{}", lines[3]);
        assert!(lines[3].contains("truncated=false"), "{}", lines[3]);
        assert!(!text.contains('\u{7}'));
    }
}
