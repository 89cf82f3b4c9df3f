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
//! - **body read timeout**: once the head is in, the whole request body must follow within
//!   [`ServerOptions::body_read_timeout`]; a body that stalls or trickles is answered 408 and
//!   the connection closed (at once if the answer can't be written). Nothing has run by
//!   then: a handler acts only on a whole body.
//! - **idle timeout**: a kept-alive connection on which no byte of a new request arrives
//!   within [`ServerOptions::idle_timeout`] after the last response is closed.
//! - **connection limits**: at most [`ServerOptions::connection_limit`] connections are open,
//!   and at most [`ServerOptions::connection_limit_per_address`] from one client address.
//!   A new connection over either limit closes the connection (from that address, or from
//!   any) that has waited longest for its client: for a request head, a body, or the next
//!   request on a kept-alive connection. Only when every one is handling a request whose
//!   body is in is the new one answered 503 and closed. So clients that stall can't lock out one that doesn't, and the process
//!   keeps file descriptors for its ledger, its upstreams and its logs.
//!
//! While a request is being handled (its body is in) no timer runs: a call is bounded by the
//! tool's timeout and its permit, not by the connection. Connections closed for these reasons
//! are counted in `intentgate_connections_dropped_total{reason}`; the open ones in
//! `intentgate_connections_open`.
//!
//! Every request carries [`ConnectInfo<SocketAddr>`](axum::extract::ConnectInfo) with the
//! peer's address, as `axum::serve` with connect info would give it.
//!
//! Shutdown stops accepting, asks every connection to finish its current request and close
//! (an idle one closes at once), and waits for them up to a deadline; connections still open
//! then are closed.

use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::ConnectInfo;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::IntoResponse;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use intentgate_gate::{ConnectionDrop, Metrics};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tower_service::Service;

use crate::problem::Problem;

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

/// What a connection refused at the per-address limit is sent before it is closed.
const ADDRESS_LIMIT_RESPONSE: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
content-type: application/problem+json\r\n\
retry-after: 1\r\n\
connection: close\r\n\
content-length: 252\r\n\
\r\n\
{\"type\":\"urn:intentgate:problem:address-connection-limit\",\"title\":\"Too many open connections from this address\",\"status\":503,\"detail\":\"this client address holds as many connections as the gateway allows one address; nothing was run, try again shortly\"}";

/// How long a 408 for a body that did not arrive in time may take to be written before the
/// connection is closed anyway: the answer is small, so only a client that reads nothing
/// needs longer, and it is owed nothing.
const BODY_TIMEOUT_ANSWER_GRACE: Duration = Duration::from_secs(1);

/// Connections closed to make room whose tasks have not ended yet, at most. A victim's task
/// ends within a scheduling round; the bound keeps a flood of new connections from holding
/// file descriptors for both the victims and themselves.
const EVICTIONS_CLOSING_MAX: usize = 64;

/// How a connection is watched and how many there may be.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub header_read_timeout: Duration,
    pub body_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub connection_limit: usize,
    pub connection_limit_per_address: usize,
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
    let registry = Arc::new(Registry::new(limits));
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
            Ok((stream, peer)) => {
                let watch = Arc::new(Watch::new(Instant::now()));
                match registry.admit(peer.ip(), watch.clone()) {
                    Ok(admission) => {
                        let connection = Connection {
                            app: app.clone(),
                            peer,
                            limits,
                            metrics: metrics.clone(),
                            stopping: stopping.clone(),
                        };
                        connections.spawn(async move {
                            let _admission = admission;
                            connection.serve(stream, watch).await;
                        });
                    }
                    Err(reason) => {
                        metrics.connection_dropped(reason);
                        let answer = match reason {
                            ConnectionDrop::AddressLimit => ADDRESS_LIMIT_RESPONSE,
                            _ => LIMIT_RESPONSE,
                        };
                        // Best effort: a full socket buffer loses the answer, not the refusal.
                        let _ = stream.try_write(answer);
                    }
                }
            }
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
    async fn serve(mut self, stream: TcpStream, watch: Arc<Watch>) {
        let _open = OpenConnection::new(self.metrics.clone());
        // Answers are small and written at once; waiting to coalesce them only adds latency.
        let _ = stream.set_nodelay(true);
        let io = TokioIo::new(WatchedStream {
            inner: stream,
            watch: watch.clone(),
        });
        let (app, peer, request_watch) = (self.app.clone(), self.peer, watch.clone());
        let body_read_timeout = self.limits.body_read_timeout;
        let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            let busy = Busy::start(request_watch.clone());
            let (request, expiry) =
                watched_request(request, peer, &request_watch, body_read_timeout);
            answer(
                app.clone(),
                request,
                expiry,
                request_watch.clone(),
                body_read_timeout,
                busy,
            )
        });
        let mut builder = hyper::server::conn::http1::Builder::new();
        // The timeouts are this module's own (see `Watch`): hyper's header timer would also
        // run while a kept-alive connection is idle.
        builder.keep_alive(true).header_read_timeout(None);
        let connection = builder.serve_connection(io, service);
        let mut connection = std::pin::pin!(connection);
        let wake = SelfWake::new();
        let mut shutting_down = false;
        loop {
            if watch.is_evicted() {
                self.metrics.connection_dropped(ConnectionDrop::Evicted);
                tracing::debug!(peer = %self.peer, "connection closed to make room for a new one");
                return;
            }
            let deadline = watch.deadline(&self.limits);
            let expiry = async move {
                match deadline {
                    Some((at, _)) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                served = Watched::new(connection.as_mut(), &watch, &wake) => {
                    // `None`: serving moved the deadline; the loop takes the new one.
                    let Some(result) = served else { continue };
                    if let Err(error) = result {
                        tracing::debug!(%error, "connection ended with an error");
                    }
                    if watch.body_timed_out() {
                        // Closed after its 408, as the answer said it would be.
                        self.metrics.connection_dropped(ConnectionDrop::BodyTimeout);
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

/// A poll of the connection (reading, handling, writing) that tells its task whether the
/// deadline moved meanwhile: `Some` with the connection's end, or `None` when the poll
/// changed the [`Watch`] (bytes arrived, a request started or ended, a body came in).
///
/// Serving wakes the connection's task from inside its own poll: the [`Watch`] changes
/// with every request (a head arriving, a request starting, its answer written), and hyper
/// wakes the connection when the handler takes the request body from it. The runtime
/// requeues a task woken while it runs as one that yielded, behind the others, and wakes
/// another worker thread to take it: on a small machine that cost more than answering
/// the request. So the connection is polled with a waker of its own ([`SelfWake`]): a wake
/// during the poll polls it again at once, and the task's loop takes a moved deadline as
/// soon as the poll returns. Only wakes from elsewhere (a request's task finishing, bytes
/// arriving, an eviction) go through the runtime.
struct Watched<'a, F> {
    connection: Pin<&'a mut F>,
    watch: &'a Watch,
    wake: &'a SelfWake,
}

impl<'a, F: Future> Watched<'a, F> {
    fn new(connection: Pin<&'a mut F>, watch: &'a Watch, wake: &'a SelfWake) -> Watched<'a, F> {
        Watched {
            connection,
            watch,
            wake,
        }
    }
}

impl<F: Future> Future for Watched<'_, F> {
    type Output = Option<F::Output>;

    fn poll(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Self::Output> {
        let (wake, waker) = (&self.wake.shared, &self.wake.waker);
        wake.register(context.waker());
        let mut inner = Context::from_waker(waker);
        self.watch.polling(true);
        let (mut polled, mut settled) = (Poll::Pending, false);
        for _ in 0..SELF_WAKES_MAX {
            wake.state.store(POLLING, Ordering::Release);
            polled = self.connection.as_mut().poll(&mut inner);
            if polled.is_ready() {
                break;
            }
            if wake.settle() {
                settled = true;
                break;
            }
            if !tokio::task::coop::has_budget_remaining() {
                // What woke it was a resource refusing this task for its budget: only the
                // runtime gives it a new one.
                break;
            }
        }
        if !settled {
            wake.state.store(IDLE, Ordering::Release);
        }
        let moved = self.watch.polling(false);
        match polled {
            Poll::Ready(output) => Poll::Ready(Some(output)),
            Poll::Pending if moved => Poll::Ready(None),
            Poll::Pending if settled => Poll::Pending,
            // Woken at every one of its polls: the runtime schedules it after the others.
            Poll::Pending => {
                context.waker().wake_by_ref();
                Poll::Pending
            }
        }
    }
}

/// Polls of a connection in a row, each woken during the one before, after which its task
/// goes back to the runtime's queue (so one connection can't hold a worker thread). It goes
/// back at once when the task has used up its budget of work per poll (tokio's cooperative
/// scheduling), which only the runtime renews.
const SELF_WAKES_MAX: usize = 16;

const IDLE: u8 = 0;
const POLLING: u8 = 1;
const WOKEN_WHILE_POLLING: u8 = 2;

/// The waker a connection is polled with ([`Watched`]), made once per connection.
struct SelfWake {
    shared: Arc<WakeState>,
    waker: Waker,
}

impl SelfWake {
    fn new() -> SelfWake {
        let shared = Arc::new(WakeState {
            state: AtomicU8::new(IDLE),
            task: Mutex::new(None),
        });
        let waker = Waker::from(shared.clone());
        SelfWake { shared, waker }
    }
}

/// What [`SelfWake`]'s waker does: a wake while the connection is being polled is noted
/// for the poll to run again; any other wakes the task through the runtime's waker.
struct WakeState {
    state: AtomicU8,
    task: Mutex<Option<Waker>>,
}

impl WakeState {
    /// Keeps the runtime's waker of the task about to poll.
    fn register(&self, waker: &Waker) {
        let mut task = self
            .task
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match task.as_mut() {
            Some(held) if held.will_wake(waker) => {}
            _ => *task = Some(waker.clone()),
        }
    }

    /// After a poll that returned pending: true if nothing woke the connection during it.
    fn settle(&self) -> bool {
        self.state
            .compare_exchange(POLLING, IDLE, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

impl Wake for WakeState {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        match self.state.compare_exchange(
            POLLING,
            WOKEN_WHILE_POLLING,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            // The poll in progress runs again.
            Ok(_) => {}
            Err(WOKEN_WHILE_POLLING) => {}
            Err(_) => {
                let task = self
                    .task
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                if let Some(task) = task.as_ref() {
                    task.wake_by_ref();
                }
            }
        }
    }
}

/// `request` as the router reads it: with the peer's address, and a body still to come
/// watched, with the instant it must be in by (`None` for a body that is already whole,
/// which has nothing to wait for).
fn watched_request(
    mut request: hyper::Request<Incoming>,
    peer: SocketAddr,
    watch: &Arc<Watch>,
    body_read_timeout: Duration,
) -> (axum::extract::Request, Option<(u64, Instant)>) {
    request.extensions_mut().insert(ConnectInfo(peer));
    if request.body().is_end_stream() {
        return (request.map(axum::body::Body::new), None);
    }
    let body = watch.body_started();
    let expiry = Instant::now() + body_read_timeout;
    let request = request.map(|inner| {
        axum::body::Body::new(WatchedBody {
            inner,
            watch: watch.clone(),
            body,
        })
    });
    (request, Some((body, expiry)))
}

/// The router's answer to `request`, or a 408 when its body (`expiry`: its id and the
/// instant it must be in by) did not arrive in time. The answer's body holds `busy` until
/// it is written, so shutdown waits for it.
async fn answer(
    mut app: axum::Router,
    request: axum::extract::Request,
    expiry: Option<(u64, Instant)>,
    watch: Arc<Watch>,
    body_read_timeout: Duration,
    busy: Busy,
) -> Result<hyper::Response<Tracked>, Infallible> {
    let call = app.call(request);
    let response = match expiry {
        None => call.await,
        Some((body, at)) => {
            let expired = async {
                tokio::time::sleep_until(at).await;
                if !watch.body_expired(body) {
                    // The body was in on time; the handler runs as long as it needs.
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                response = call => response,
                // Dropping the handler is safe: none acts on a partial body.
                () = expired => Ok(body_timeout_answer(body_read_timeout)),
            }
        }
    };
    let response = match response {
        Ok(response) => response,
        Err(never) => match never {},
    };
    Ok(response.map(|body| Tracked { body, _busy: busy }))
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

/// A request body being received: which one (a connection's requests are numbered) and
/// since when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BodyWait {
    body: u64,
    since: Instant,
}

#[derive(Debug)]
struct WatchState {
    /// Requests being handled; while there is one whose body is in, no timer runs.
    requests: usize,
    waiting: Waiting,
    /// The body of the request being handled, while it is still arriving.
    body: Option<BodyWait>,
    /// Numbers the request bodies of the connection.
    bodies: u64,
    /// When a body did not arrive in time and the request was answered 408; the connection
    /// closes after that answer.
    body_timed_out: Option<Instant>,
    /// Chosen to be closed to make room for a new connection.
    evicted: bool,
    /// The connection's task is polling the connection ([`Watched`]): a change made now is
    /// seen by the task when the poll returns, without waking it.
    polling: bool,
    /// A change was made during the current poll.
    moved: bool,
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
                body: None,
                bodies: 0,
                body_timed_out: None,
                evicted: false,
                polling: false,
                moved: false,
            }),
            changed: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, WatchState> {
        // A poisoned lock means a panic elsewhere on this connection; its state is still
        // plain data, so the timers keep working from it.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Applies `change`, which says whether it moved the deadline; the connection's task
    /// learns of a move when its poll of the connection returns ([`Watched`]) if it is
    /// polling, else through [`Watch::changed`].
    fn update<T>(&self, change: impl FnOnce(&mut WatchState) -> (bool, T)) -> T {
        let mut state = self.lock();
        let (changed, value) = change(&mut state);
        let notify = changed && !state.polling;
        state.moved |= changed && state.polling;
        drop(state);
        if notify {
            self.changed.notify_one();
        }
        value
    }

    /// The connection's task starts (`true`) or ends (`false`) a poll of the connection;
    /// on ending, whether the deadline moved during the poll.
    fn polling(&self, polling: bool) -> bool {
        let mut state = self.lock();
        state.polling = polling;
        std::mem::take(&mut state.moved)
    }

    /// Bytes arrived: on an idle kept-alive connection they start a request head.
    fn bytes_arrived(&self) {
        self.update(|state| match state.waiting {
            Waiting::NextRequest(_) if state.requests == 0 => {
                state.waiting = Waiting::Head(Instant::now());
                (true, ())
            }
            _ => (false, ()),
        });
    }

    fn request_started(&self) {
        self.update(|state| {
            state.requests += 1;
            (true, ())
        });
    }

    fn request_ended(&self) {
        self.update(|state| {
            state.requests = state.requests.saturating_sub(1);
            if state.requests == 0 {
                state.waiting = Waiting::NextRequest(Instant::now());
            }
            (true, ())
        });
    }

    /// A request's head is in and its body is still to come; the body's number.
    fn body_started(&self) -> u64 {
        self.update(|state| {
            state.bodies += 1;
            let body = state.bodies;
            state.body = Some(BodyWait {
                body,
                since: Instant::now(),
            });
            (true, body)
        })
    }

    /// The body is whole, failed, or was let go of by its handler: nothing waits for it.
    fn body_finished(&self, body: u64) {
        self.update(|state| match state.body {
            Some(wait) if wait.body == body => {
                state.body = None;
                (true, ())
            }
            _ => (false, ()),
        });
    }

    /// The body's time is up: true, and the connection closes after its 408, if the body is
    /// still arriving; false if it was in on time.
    fn body_expired(&self, body: u64) -> bool {
        self.update(|state| match state.body {
            Some(wait) if wait.body == body => {
                state.body = None;
                state.body_timed_out = Some(Instant::now());
                (true, true)
            }
            _ => (false, false),
        })
    }

    fn body_timed_out(&self) -> bool {
        self.lock().body_timed_out.is_some()
    }

    /// Asks the connection to close to make room for a new one.
    fn evict(&self) {
        self.update(|state| {
            state.evicted = true;
            (true, ())
        });
    }

    fn is_evicted(&self) -> bool {
        self.lock().evicted
    }

    /// Since when the connection has waited for its client (for a head, a body, or the next
    /// request), for closing the one waiting longest at a connection limit; `None` while a
    /// request whose body is in is being handled (a call running), or once it is closing.
    /// Age alone decides: a connection that just opened and has not sent its head yet is
    /// the last to go, an attacker's stalled or idle one, held for seconds, the first.
    fn stall(&self) -> Option<Instant> {
        let state = self.lock();
        if state.evicted || state.body_timed_out.is_some() {
            return None;
        }
        let head_since = match state.waiting {
            Waiting::Head(since) | Waiting::NextRequest(since) => since,
        };
        if state.body.is_some() {
            // The client has owed bytes since its request began, not since its head ended.
            return Some(head_since);
        }
        if state.requests > 0 {
            return None;
        }
        Some(head_since)
    }

    /// When the connection is dropped if nothing changes, and why; `None` while a request
    /// whose body is in is being handled.
    fn deadline(&self, limits: &Limits) -> Option<(Instant, ConnectionDrop)> {
        let state = self.lock();
        if let Some(at) = state.body_timed_out {
            return Some((at + BODY_TIMEOUT_ANSWER_GRACE, ConnectionDrop::BodyTimeout));
        }
        if let Some(wait) = state.body {
            // The request's own timer answers 408 at `since + body_read_timeout`; this one
            // closes the connection should that answer never get out.
            return Some((
                wait.since + limits.body_read_timeout + BODY_TIMEOUT_ANSWER_GRACE,
                ConnectionDrop::BodyTimeout,
            ));
        }
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

/// A request body that tells the [`Watch`] when it is no longer waited for: whole, failed,
/// or dropped by its handler (hyper then reads or discards the rest itself, and closes the
/// connection if it can't).
struct WatchedBody {
    inner: Incoming,
    watch: Arc<Watch>,
    body: u64,
}

impl Body for WatchedBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let frame = Pin::new(&mut self.inner).poll_frame(context);
        let finished = match &frame {
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => true,
            Poll::Ready(Some(Ok(_))) => self.inner.is_end_stream(),
            Poll::Pending => false,
        };
        if finished {
            self.watch.body_finished(self.body);
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for WatchedBody {
    fn drop(&mut self) {
        self.watch.body_finished(self.body);
    }
}

/// The answer to a request whose body did not arrive within `timeout` of its head.
fn body_timeout_answer(timeout: Duration) -> axum::response::Response {
    let mut response = Problem::new(
        StatusCode::REQUEST_TIMEOUT,
        "body-timeout",
        "Request body too slow",
        format!(
            "the request body did not arrive whole within {} ms of its head; nothing was run. \
Send the whole body at once, or ask the operator to raise gateway.body_read_timeout_ms",
            timeout.as_millis()
        ),
    )
    .into_response();
    // The rest of the body is never read, so the connection can't carry another request.
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Who is connected, for the connection limits: every admitted connection's [`Watch`] and
/// client address.
struct Registry {
    limits: Limits,
    state: Mutex<RegistryState>,
}

#[derive(Default)]
struct RegistryState {
    /// Numbers the connections.
    admitted: u64,
    /// The open connections, not counting those being closed to make room.
    open: HashMap<u64, Admitted>,
    /// How many of `open` each client address holds.
    by_address: HashMap<IpAddr, usize>,
    /// Connections closed to make room whose tasks have not ended yet.
    closing: usize,
}

struct Admitted {
    address: IpAddr,
    watch: Arc<Watch>,
}

impl Registry {
    fn new(limits: Limits) -> Registry {
        Registry {
            limits,
            state: Mutex::new(RegistryState::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RegistryState> {
        // Plain counts and maps, consistent after every statement that changes them.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Admits a new connection from `address`, closing a stalled one if a limit is reached;
    /// why it is refused when every connection in the way is handling a request.
    fn admit(
        self: &Arc<Self>,
        address: IpAddr,
        watch: Arc<Watch>,
    ) -> Result<Admission, ConnectionDrop> {
        // An IPv4 client seen on a dual-stack socket is the same client as over IPv4.
        let address = address.to_canonical();
        let mut state = self.lock();
        let from_address = state.by_address.get(&address).copied().unwrap_or(0);
        if from_address >= self.limits.connection_limit_per_address
            && !state.evict(|candidate| candidate.address == address)
        {
            return Err(ConnectionDrop::AddressLimit);
        }
        if state.open.len() >= self.limits.connection_limit && !state.evict(|_| true) {
            return Err(ConnectionDrop::Limit);
        }
        state.admitted += 1;
        let id = state.admitted;
        state.open.insert(id, Admitted { address, watch });
        *state.by_address.entry(address).or_insert(0) += 1;
        Ok(Admission {
            registry: self.clone(),
            id,
        })
    }
}

impl RegistryState {
    /// Closes the connection among `candidates` that has waited longest for its client;
    /// false if none is waiting (all are handling requests) or too many are closing already.
    fn evict(&mut self, candidates: impl Fn(&Admitted) -> bool) -> bool {
        if self.closing >= EVICTIONS_CLOSING_MAX {
            return false;
        }
        let victim = self
            .open
            .iter()
            .filter(|(_, admitted)| candidates(admitted))
            .filter_map(|(id, admitted)| Some((admitted.watch.stall()?, *id)))
            .min();
        let Some((_, id)) = victim else {
            return false;
        };
        let admitted = self
            .remove(id)
            .expect("the victim was found among the open");
        self.closing += 1;
        admitted.watch.evict();
        true
    }

    fn remove(&mut self, id: u64) -> Option<Admitted> {
        let admitted = self.open.remove(&id)?;
        if let Some(count) = self.by_address.get_mut(&admitted.address) {
            *count -= 1;
            if *count == 0 {
                self.by_address.remove(&admitted.address);
            }
        }
        Some(admitted)
    }
}

/// A connection's place under the limits, given back when its task ends.
struct Admission {
    registry: Arc<Registry>,
    id: u64,
}

impl Drop for Admission {
    fn drop(&mut self) {
        let mut state = self.registry.lock();
        if state.remove(self.id).is_none() {
            // Evicted: it was taken off the counts then, and is closed now.
            state.closing = state.closing.saturating_sub(1);
        }
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
        body_read_timeout: Duration::from_secs(10),
        idle_timeout: Duration::from_secs(60),
        connection_limit: 1,
        connection_limit_per_address: 1,
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

    /// What serving changes (a request starting here) is reported by the poll that made it,
    /// not notified: a notification would wake the connection's task from inside its own
    /// poll. What another task changes (an eviction) is notified.
    #[test]
    fn changes_made_while_the_connection_is_polled_do_not_wake_its_task() {
        let watch = Watch::new(Instant::now());
        let mut context = Context::from_waker(std::task::Waker::noop());
        let mut changed = std::pin::pin!(watch.changed.notified());
        assert!(changed.as_mut().poll(&mut context).is_pending());
        let wake = SelfWake::new();
        let mut idle = std::pin::pin!(std::future::pending::<()>());
        let mut watched = std::pin::pin!(Watched::new(idle.as_mut(), &watch, &wake));
        assert_eq!(watched.as_mut().poll(&mut context), Poll::Pending);
        let mut serving = std::pin::pin!(std::future::poll_fn(|_| {
            watch.request_started();
            Poll::<()>::Pending
        }));
        let mut watched = std::pin::pin!(Watched::new(serving.as_mut(), &watch, &wake));
        assert_eq!(
            watched.as_mut().poll(&mut context),
            Poll::Ready(None),
            "the poll says the deadline moved"
        );
        assert!(
            changed.as_mut().poll(&mut context).is_pending(),
            "and nothing was notified"
        );
        watch.evict();
        assert!(changed.as_mut().poll(&mut context).is_ready());
    }

    /// Counts the wakes the runtime would get.
    #[derive(Default)]
    struct Wakes(std::sync::atomic::AtomicUsize);

    impl Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    impl Wakes {
        fn count(&self) -> usize {
            self.0.load(Ordering::SeqCst)
        }
    }

    /// hyper wakes the connection from inside its poll when the handler takes the request
    /// body; the runtime would requeue it behind other tasks and wake another thread.
    #[test]
    fn a_connection_woken_during_its_own_poll_is_polled_again_at_once() {
        let watch = Watch::new(Instant::now());
        let wake = SelfWake::new();
        let runtime = Arc::new(Wakes::default());
        let runtime_waker = Waker::from(runtime.clone());
        let mut context = Context::from_waker(&runtime_waker);
        let (polls, held) = (std::cell::Cell::new(0), std::cell::RefCell::new(None));
        let mut connection = std::pin::pin!(std::future::poll_fn(|inner: &mut Context<'_>| {
            polls.set(polls.get() + 1);
            if polls.get() <= 3 {
                inner.waker().wake_by_ref();
            }
            *held.borrow_mut() = Some(inner.waker().clone());
            Poll::<()>::Pending
        }));
        let mut watched = std::pin::pin!(Watched::new(connection.as_mut(), &watch, &wake));
        assert_eq!(watched.as_mut().poll(&mut context), Poll::Pending);
        assert_eq!(polls.get(), 4, "polled again after each of its three wakes");
        assert_eq!(runtime.count(), 0, "none of them reached the runtime");
        // A wake from elsewhere (a request's task done, bytes in) goes to the runtime.
        held.borrow().as_ref().unwrap().wake_by_ref();
        assert_eq!(runtime.count(), 1);

        let polls = std::cell::Cell::new(0);
        let mut restless = std::pin::pin!(std::future::poll_fn(|inner: &mut Context<'_>| {
            polls.set(polls.get() + 1);
            inner.waker().wake_by_ref();
            Poll::<()>::Pending
        }));
        let runtime = Arc::new(Wakes::default());
        let runtime_waker = Waker::from(runtime.clone());
        let mut context = Context::from_waker(&runtime_waker);
        let mut watched = std::pin::pin!(Watched::new(restless.as_mut(), &watch, &wake));
        assert_eq!(watched.as_mut().poll(&mut context), Poll::Pending);
        assert_eq!(polls.get(), SELF_WAKES_MAX);
        assert_eq!(
            runtime.count(),
            1,
            "one that never settles goes back to the runtime"
        );
    }

    /// A connection woken because its task used up its budget (a resource refused it) is
    /// not polled again in vain: it goes back to the runtime, which renews the budget.
    #[tokio::test]
    async fn a_connection_out_of_budget_goes_back_to_the_runtime_at_once() {
        let watch = Watch::new(Instant::now());
        let wake = SelfWake::new();
        let runtime = Arc::new(Wakes::default());
        let runtime_waker = Waker::from(runtime.clone());
        let polls = std::cell::Cell::new(0);
        std::future::poll_fn(|task| {
            for _ in 0..10_000 {
                if !tokio::task::coop::has_budget_remaining() {
                    break;
                }
                let _ = std::pin::pin!(tokio::task::coop::consume_budget()).poll(task);
            }
            assert!(!tokio::task::coop::has_budget_remaining());
            let mut restless = std::pin::pin!(std::future::poll_fn(|inner: &mut Context<'_>| {
                polls.set(polls.get() + 1);
                inner.waker().wake_by_ref();
                Poll::<()>::Pending
            }));
            let mut watched = std::pin::pin!(Watched::new(restless.as_mut(), &watch, &wake));
            let mut context = Context::from_waker(&runtime_waker);
            assert_eq!(watched.as_mut().poll(&mut context), Poll::Pending);
            Poll::Ready(())
        })
        .await;
        assert_eq!(polls.get(), 1);
        assert_eq!(runtime.count(), 1);
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

    #[tokio::test(start_paused = true)]
    async fn a_body_has_one_deadline_from_its_head_that_ends_when_it_is_in() {
        let watch = Watch::new(Instant::now());
        watch.request_started();
        let body = watch.body_started();
        let started = Instant::now();
        let body_deadline = Some((
            started + LIMITS.body_read_timeout + BODY_TIMEOUT_ANSWER_GRACE,
            ConnectionDrop::BodyTimeout,
        ));
        assert_eq!(watch.deadline(&LIMITS), body_deadline);
        tokio::time::advance(Duration::from_secs(3)).await;
        watch.bytes_arrived();
        assert_eq!(watch.deadline(&LIMITS), body_deadline, "a trickle keeps it");
        watch.body_finished(body);
        assert_eq!(
            watch.deadline(&LIMITS),
            None,
            "no timer once the body is in"
        );
        assert!(
            !watch.body_expired(body),
            "a body in on time does not expire"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_connection_waiting_longest_is_closed_and_never_a_busy_one() {
        let limits = Limits {
            connection_limit: 3,
            connection_limit_per_address: 3,
            ..LIMITS
        };
        let registry = Arc::new(Registry::new(limits));
        let address = IpAddr::from([127, 0, 0, 1]);
        let busy = Arc::new(Watch::new(Instant::now()));
        busy.request_started();
        tokio::time::advance(Duration::from_secs(1)).await;
        let stalled = Arc::new(Watch::new(Instant::now()));
        stalled.request_started();
        stalled.body_started();
        tokio::time::advance(Duration::from_secs(1)).await;
        let idle = Arc::new(Watch::new(Instant::now()));
        idle.request_started();
        idle.request_ended();
        tokio::time::advance(Duration::from_secs(1)).await;
        let _held: Vec<Admission> = [&busy, &stalled, &idle]
            .into_iter()
            .map(|watch| registry.admit(address, watch.clone()).ok().unwrap())
            .collect();
        let newcomer = Arc::new(Watch::new(Instant::now()));
        let _newcomer = registry.admit(address, newcomer.clone()).ok().unwrap();
        assert!(stalled.is_evicted(), "the one stalled on its body longest");
        assert!(!idle.is_evicted() && !busy.is_evicted());
        tokio::time::advance(Duration::from_secs(1)).await;
        let next = Arc::new(Watch::new(Instant::now()));
        let _next = registry.admit(address, next.clone()).ok().unwrap();
        assert!(
            idle.is_evicted(),
            "then the one idle longer than the newcomer"
        );
        assert!(!newcomer.is_evicted() && !busy.is_evicted());
        newcomer.request_started();
        next.request_started();
        let refused = registry.admit(address, Arc::new(Watch::new(Instant::now())));
        assert_eq!(
            refused.err(),
            Some(ConnectionDrop::AddressLimit),
            "every connection is handling a request"
        );
    }
}
