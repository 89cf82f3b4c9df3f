//! The accept loop: HTTP/1.1 over hyper, with every connection bounded in time and number.
//!
//! A connection costs a file descriptor and a task for as long as the client keeps it. A
//! client that opens sockets and sends half a request head (slowloris), or keeps connections
//! alive without using them, would otherwise hold them forever: the process runs out of file
//! descriptors, stops accepting, and real calls time out. So each connection is watched:
//!
//! - **header read timeout**: from the moment the server waits for a request (the connection
//!   was accepted, or the first byte of the next request on a kept-alive connection arrived),
//!   the whole request head must be in within [`ServerOptions::header_read_timeout`]. A
//!   client that trickles a byte at a time does not reset it.
//! - **idle timeout**: a kept-alive connection on which no byte of a new request arrives
//!   within [`ServerOptions::idle_timeout`] after the last response is closed.
//! - **connection limit**: at most [`ServerOptions::connection_limit`] connections are open;
//!   one more is answered 503 at once and closed, so the process keeps file descriptors for
//!   its ledger, its upstreams and its logs.
//!
//! While a request is being handled no timer runs: a call is bounded by the tool's timeout
//! and its permit, not by the connection. Connections closed for these reasons are counted in
//! `intentgate_connections_dropped_total{reason}`; the open ones in
//! `intentgate_connections_open`.
//!
//! Every request carries [`ConnectInfo<SocketAddr>`](axum::extract::ConnectInfo) with the
//! peer's address, as `axum::serve` with connect info would give it.
//!
//! Shutdown stops accepting, asks every connection to finish its current request and close
//! (an idle one closes at once), and waits for them up to a deadline; connections still open
//! then are closed.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::ConnectInfo;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use intentgate_gate::{ConnectionDrop, Metrics};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tower_service::Service;

/// Pause after an `accept` that failed for a reason other than one connection (out of file
/// descriptors): accepting again at once would spin, and a pause lets connections close.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// What a connection refused at the connection limit is sent before it is closed: a
/// complete response, so that a client sees why rather than a reset.
const LIMIT_RESPONSE: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
content-type: application/problem+json\r\n\
retry-after: 1\r\n\
connection: close\r\n\
content-length: 208\r\n\
\r\n\
{\"type\":\"urn:intentgate:problem:connection-limit\",\"title\":\"Too many open connections\",\"status\":503,\"detail\":\"the gateway holds as many connections as it is configured for; nothing was run, try again shortly\"}";

/// How a connection is watched and how many there may be.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub connection_limit: usize,
    pub shutdown_grace: Duration,
}

/// Accepts connections on `listener` and serves `app` on each until `shutdown` completes;
/// then drains the connections, closing those still open at `deadline` (returned so the
/// caller can wait for its own work until the same moment).
pub(crate) async fn serve(
    listener: TcpListener,
    app: axum::Router,
    limits: Limits,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Instant {
    let slots = Arc::new(Semaphore::new(limits.connection_limit));
    let (stop, stopping) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        // Reap the tasks of closed connections, so the set holds only open ones.
        while connections.try_join_next().is_some() {}
        match accepted {
            Ok((stream, peer)) => match slots.clone().try_acquire_owned() {
                Ok(slot) => {
                    let connection = Connection {
                        app: app.clone(),
                        peer,
                        limits,
                        metrics: metrics.clone(),
                        stopping: stopping.clone(),
                    };
                    connections.spawn(async move {
                        let _slot = slot;
                        connection.serve(stream).await;
                    });
                }
                Err(_) => {
                    metrics.connection_dropped(ConnectionDrop::Limit);
                    // Best effort: a full socket buffer loses the answer, not the refusal.
                    let _ = stream.try_write(LIMIT_RESPONSE);
                }
            },
            Err(error) if is_connection_error(&error) => {}
            Err(error) => {
                tracing::error!(
                    %error,
                    "could not accept a connection; if the process is out of file descriptors, \
                raise its limit (ulimit -n) or lower gateway.connection_limit"
                );
                tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
            }
        }
    }
    drop(listener);
    let deadline = Instant::now() + limits.shutdown_grace;
    let _ = stop.send(true);
    let drained = tokio::time::timeout_at(deadline, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            open = connections.len(),
            "shutdown grace period over; closing the connections still open"
        );
        connections.shutdown().await;
    }
    deadline
}

/// Errors of `accept` that concern one connection, not the listener.
fn is_connection_error(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// One accepted connection and what serving it needs.
struct Connection {
    app: axum::Router,
    peer: SocketAddr,
    limits: Limits,
    metrics: Arc<Metrics>,
    stopping: watch::Receiver<bool>,
}

impl Connection {
    /// Serves requests until the client closes, a timeout drops the connection, or
    /// shutdown has let its last request finish.
    async fn serve(mut self, stream: TcpStream) {
        let _open = OpenConnection::new(self.metrics.clone());
        // Answers are small and written at once; waiting to coalesce them only adds latency.
        let _ = stream.set_nodelay(true);
        let watch = Arc::new(Watch::new(Instant::now()));
        let io = TokioIo::new(WatchedStream {
            inner: stream,
            watch: watch.clone(),
        });
        let (app, peer, request_watch) = (self.app.clone(), self.peer, watch.clone());
        let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            let busy = Busy::start(request_watch.clone());
            let mut app = app.clone();
            async move {
                let response = match app.call(request).await {
                    Ok(response) => response,
                    Err(never) => match never {},
                };
                Ok::<_, Infallible>(response.map(|body| Tracked { body, _busy: busy }))
            }
        });
        let mut builder = hyper::server::conn::http1::Builder::new();
        // The timeouts are this module's own (see `Watch`): hyper's header timer would also
        // run while a kept-alive connection is idle.
        builder.keep_alive(true).header_read_timeout(None);
        let connection = builder.serve_connection(io, service);
        let mut connection = std::pin::pin!(connection);
        let mut shutting_down = false;
        loop {
            let deadline = watch.deadline(&self.limits);
            let expiry = async move {
                match deadline {
                    Some((at, _)) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                result = connection.as_mut() => {
                    if let Err(error) = result {
                        tracing::debug!(%error, "connection ended with an error");
                    }
                    return;
                }
                () = watch.changed.notified() => {}
                () = expiry => {
                    // The deadline may have moved while the timer ran; only a deadline that
                    // still stands drops the connection.
                    if let Some((at, reason)) = watch.deadline(&self.limits)
                        && at <= Instant::now()
                    {
                        self.metrics.connection_dropped(reason);
                        tracing::debug!(peer = %self.peer, reason = reason.as_str(), "connection dropped");
                        return;
                    }
                }
                _ = self.stopping.wait_for(|stop| *stop), if !shutting_down => {
                    shutting_down = true;
                    connection.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

/// Keeps `intentgate_connections_open` right however the connection's task ends (closed,
/// dropped, or aborted at shutdown).
struct OpenConnection(Arc<Metrics>);

impl OpenConnection {
    fn new(metrics: Arc<Metrics>) -> OpenConnection {
        metrics.connection_opened();
        OpenConnection(metrics)
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.connection_closed();
    }
}

/// What a connection is waiting for when no request is being handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Waiting {
    /// A whole request head, since this instant (accepted, or first byte of a new request).
    Head(Instant),
    /// The first byte of the next request, since the last response ended at this instant.
    NextRequest(Instant),
}

#[derive(Debug)]
struct WatchState {
    /// Requests being handled; while there is one, no timer runs.
    requests: usize,
    waiting: Waiting,
}

/// A connection's state as the timers see it, shared by its stream (bytes arriving), its
/// service (requests starting and ending) and its task (the timers).
#[derive(Debug)]
struct Watch {
    state: Mutex<WatchState>,
    /// Woken on every change of the deadline, so the task sleeps until the right one.
    changed: Notify,
}

impl Watch {
    fn new(accepted: Instant) -> Watch {
        Watch {
            state: Mutex::new(WatchState {
                requests: 0,
                waiting: Waiting::Head(accepted),
            }),
            changed: Notify::new(),
        }
    }

    fn update(&self, change: impl FnOnce(&mut WatchState) -> bool) {
        // A poisoned lock means a panic elsewhere on this connection; its state is still
        // plain data, so the timers keep working from it.
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if change(&mut state) {
            self.changed.notify_one();
        }
    }

    /// Bytes arrived: on an idle kept-alive connection they start a request head.
    fn bytes_arrived(&self) {
        self.update(|state| match state.waiting {
            Waiting::NextRequest(_) if state.requests == 0 => {
                state.waiting = Waiting::Head(Instant::now());
                true
            }
            _ => false,
        });
    }

    fn request_started(&self) {
        self.update(|state| {
            state.requests += 1;
            true
        });
    }

    fn request_ended(&self) {
        self.update(|state| {
            state.requests = state.requests.saturating_sub(1);
            if state.requests == 0 {
                state.waiting = Waiting::NextRequest(Instant::now());
            }
            true
        });
    }

    /// When the connection is dropped if nothing changes, and why; `None` while a request
    /// is being handled.
    fn deadline(&self, limits: &Limits) -> Option<(Instant, ConnectionDrop)> {
        let state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if state.requests > 0 {
            return None;
        }
        Some(match state.waiting {
            Waiting::Head(since) => (
                since + limits.header_read_timeout,
                ConnectionDrop::HeaderTimeout,
            ),
            Waiting::NextRequest(since) => (since + limits.idle_timeout, ConnectionDrop::Idle),
        })
    }
}

/// Marks a request as being handled from the moment its head was read until its response
/// body is done (hyper drops the body once it has taken all of it) or abandoned.
struct Busy(Arc<Watch>);

impl Busy {
    fn start(watch: Arc<Watch>) -> Busy {
        watch.request_started();
        Busy(watch)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.request_ended();
    }
}

/// A response body that holds its request's [`Busy`] mark until it is dropped.
struct Tracked {
    body: axum::body::Body,
    _busy: Busy,
}

impl Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(context)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The TCP stream, telling the [`Watch`] when bytes arrive.
struct WatchedStream {
    inner: TcpStream,
    watch: Arc<Watch>,
}

impl AsyncRead for WatchedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffer: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buffer.filled().len();
        let result = Pin::new(&mut self.inner).poll_read(context, buffer);
        if matches!(result, Poll::Ready(Ok(()))) && buffer.filled().len() > before {
            self.watch.bytes_arrived();
        }
        result
    }
}

impl AsyncWrite for WatchedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffer: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(context, buffer)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffers: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(context, buffers)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(context)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(context)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        header_read_timeout: Duration::from_secs(10),
        idle_timeout: Duration::from_secs(60),
        connection_limit: 1,
        shutdown_grace: Duration::ZERO,
    };

    #[test]
    fn the_refusal_at_the_limit_is_a_complete_response() {
        let text = std::str::from_utf8(LIMIT_RESPONSE).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let length: usize = head
            .lines()
            .find_map(|line| line.strip_prefix("content-length: "))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(length, body.len());
        let problem: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(problem["status"], 503);
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_connection_waits_for_a_head_and_bytes_do_not_reset_it() {
        let accepted = Instant::now();
        let watch = Watch::new(accepted);
        let head_deadline = Some((
            accepted + LIMITS.header_read_timeout,
            ConnectionDrop::HeaderTimeout,
        ));
        assert_eq!(watch.deadline(&LIMITS), head_deadline);
        tokio::time::advance(Duration::from_secs(3)).await;
        watch.bytes_arrived();
        assert_eq!(
            watch.deadline(&LIMITS),
            head_deadline,
            "a trickle keeps the deadline"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn after_a_response_the_idle_timer_runs_until_the_next_request_starts() {
        let watch = Watch::new(Instant::now());
        watch.request_started();
        assert_eq!(watch.deadline(&LIMITS), None, "no timer while handling");
        tokio::time::advance(Duration::from_secs(100)).await;
        watch.request_ended();
        let ended = Instant::now();
        assert_eq!(
            watch.deadline(&LIMITS),
            Some((ended + LIMITS.idle_timeout, ConnectionDrop::Idle))
        );
        tokio::time::advance(Duration::from_secs(50)).await;
        watch.bytes_arrived();
        let started = Instant::now();
        assert_eq!(
            watch.deadline(&LIMITS),
            Some((
                started + LIMITS.header_read_timeout,
                ConnectionDrop::HeaderTimeout
            ))
        );
    }
}
