//! The HTTP API of intentgate.
//!
//! | route | what it does |
//! |---|---|
//! | `GET /healthz` | liveness: answers at once, touches nothing |
//! | `GET /readyz` | readiness: `{"ready": true}` when the ledger answers a read within 2 s, else 503; 503 too for 5 s after the ledger failed to record a call, unless a call was recorded since; with `degraded` (upstream, tool, kind, status, cause, `since_ms`) for the tools whose requests to an upstream all failed lately because the gateway is misconfigured |
//! | `GET /metrics` | the gate's metrics, Prometheus text format (`intentgate_gate::Metrics`) |
//! | `GET /v1/tools` | the tools, with their published descriptions and input schemas |
//! | `POST /v1/tools/{name}/call` | calls a tool through the [`Gate`]; body `{"arguments": {...}}` |
//! | `GET /v1/intents/{tool}/{key}` | an intent of the caller's tenant, as the ledger holds it |
//! | `POST /v1/tools/{name}/intents` | the intent API (`intent_api`): a grant of a client-executed tool |
//! | `POST /v1/intents/{id}/settle`, `POST /v1/intents/{id}/renew` | settle or renew a granted lease |
//! | `GET /v1/intents/{id}` | an intent of the caller's tenant by id |
//! | `GET /.well-known/oauth-protected-resource` | OAuth protected-resource metadata (JWT auth) |
//! | `GET /openapi.json` | the OpenAPI 3.1 document of these routes ([`openapi`]), without a credential |
//!
//! [`run_with`] serves more routes beside these (MCP over Streamable HTTP at `/mcp`).
//! Every route, these and the extra ones, sits behind the edge (`edge.rs`): the browser
//! checks (content type, `Origin`, loopback `Host`) and authentication, which inserts the
//! caller's [`Principal`](intentgate_core::Principal) into the request. The tenant of a call
//! is the principal's, never a value the caller picks.
//!
//! Connections are HTTP/1.1 with keep-alive, each bounded by a header read timeout, a body
//! read timeout and an idle timeout, and their number by a limit in all and one per client
//! address (`connection.rs`); every request carries the
//! peer's address as `axum::extract::ConnectInfo<SocketAddr>`.
//!
//! A call's outcome, whatever it is (`done`, `pending_unknown`, `conflict`, ...), is a 200
//! with the outcome object: the call worked, and the status tells the model what happened.
//! Malformed requests get a 4xx `application/problem+json` saying what is wrong.
//!
//! A call runs in its own task, so a client that disconnects never cancels a call that is
//! talking to the upstream: the intent is settled in the ledger either way. Shutdown stops
//! accepting, then waits (bounded) for running calls; a call still running when the grace
//! period ends is left `in_flight` in the ledger, where its lease expires and the lookup
//! resolves it.

pub mod auth;
pub mod body;
mod connection;
pub mod edge;
mod idempotency_key;
pub mod intent_api;
pub mod openapi;
mod problem;
mod routes;
pub mod wire;

use std::collections::BTreeSet;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use intentgate_gate::Gate;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tracing::Instrument;

pub use auth::{AuthOptions, Authenticator};
pub use edge::BrowserOptions;
pub use idempotency_key::IDEMPOTENCY_KEY_HEADER;
pub use problem::Problem;

/// Largest request body accepted by default: tool arguments are small JSON objects.
pub const BODY_LIMIT_BYTES_DEFAULT: usize = 1024 * 1024;
/// Calls running at once by default; beyond it, callers get 503 with Retry-After.
pub const CONCURRENCY_LIMIT_DEFAULT: usize = 256;
/// How long shutdown waits for running calls by default.
pub const SHUTDOWN_GRACE_DEFAULT: Duration = Duration::from_secs(30);
/// How long a client has to send a whole request head by default. A real client sends it in
/// one go within milliseconds; ten seconds leaves room for a slow mobile link and still clears
/// a socket that sent half a head (slowloris) quickly.
pub const HEADER_READ_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);
/// How long a client has to send a whole request body after its head by default. Tool
/// arguments are a few hundred bytes sent with the head; ten seconds is room for the whole
/// default body limit (1 MiB) at 100 KiB/s, and clears a body that stalls or trickles as
/// quickly as a half-sent head.
pub const BODY_READ_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);
/// How long a kept-alive connection may wait for its next request by default: longer than
/// the few seconds between an agent's calls, so its pooled connections are reused, and short
/// enough that abandoned ones give their file descriptors back within a minute.
pub const IDLE_TIMEOUT_DEFAULT: Duration = Duration::from_secs(60);
/// Connections open at once by default. Each costs a file descriptor and some 10 KiB of
/// buffers; 4096 serves hundreds of agents with pooled connections, plus a few thousand
/// half-open sockets until the header timeout clears them, in about 40 MiB at worst.
pub const CONNECTION_LIMIT_DEFAULT: usize = 4096;
/// Connections open at once from one client address by default: a quarter of the default
/// connection limit, so that one address can't hold every slot, and far more than the few
/// pooled connections an agent keeps (behind a proxy, every caller shares its address).
pub const CONNECTION_LIMIT_PER_ADDRESS_DEFAULT: usize = CONNECTION_LIMIT_DEFAULT / 4;

/// Settings of the HTTP server.
#[derive(Clone)]
pub struct ServerOptions {
    pub body_limit_bytes: usize,
    pub concurrency_limit: usize,
    pub shutdown_grace: Duration,
    /// Who may call, and which tenant each caller is.
    pub authenticator: Arc<Authenticator>,
    /// Web origins whose requests are accepted; every other request with an `Origin` is
    /// refused.
    pub allowed_origins: Vec<String>,
    /// How long a client has, from the moment the server waits for a request, to send the
    /// whole request head; a connection that hasn't is closed.
    pub header_read_timeout: Duration,
    /// How long a client has, once a request head is in, to send the whole body; a request
    /// whose body is late is answered 408 and its connection closed.
    pub body_read_timeout: Duration,
    /// How long a kept-alive connection may carry no request before it is closed.
    pub idle_timeout: Duration,
    /// Most connections open at once. One more closes the connection that has waited
    /// longest for its client (a request head, a body, or the next request); when every one
    /// is handling a request, the new one is answered 503 and closed at once.
    pub connection_limit: usize,
    /// Most connections open at once from one client address, with the same choice at the
    /// limit among that address's connections.
    pub connection_limit_per_address: usize,
    /// Side-effecting tools whose calls must carry an `Idempotency-Key` header (config
    /// `idempotency_key: required`); a call without it is refused with 400.
    pub idempotency_key_required: BTreeSet<String>,
    /// The OpenAPI operations of the routes served beside the API (`run_with`'s `extra`,
    /// such as the admin API), merged into the document at `/openapi.json` so that it
    /// describes everything this server answers. `None`: the API's own operations only.
    pub openapi_extra: Option<utoipa::openapi::OpenApi>,
}

impl Default for ServerOptions {
    fn default() -> ServerOptions {
        ServerOptions {
            body_limit_bytes: BODY_LIMIT_BYTES_DEFAULT,
            concurrency_limit: CONCURRENCY_LIMIT_DEFAULT,
            shutdown_grace: SHUTDOWN_GRACE_DEFAULT,
            authenticator: Arc::new(
                Authenticator::new(AuthOptions::default()).expect("auth: none always builds"),
            ),
            allowed_origins: Vec::new(),
            header_read_timeout: HEADER_READ_TIMEOUT_DEFAULT,
            body_read_timeout: BODY_READ_TIMEOUT_DEFAULT,
            idle_timeout: IDLE_TIMEOUT_DEFAULT,
            connection_limit: CONNECTION_LIMIT_DEFAULT,
            connection_limit_per_address: CONNECTION_LIMIT_PER_ADDRESS_DEFAULT,
            idempotency_key_required: BTreeSet::new(),
            openapi_extra: None,
        }
    }
}

impl std::fmt::Debug for ServerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerOptions")
            .field("body_limit_bytes", &self.body_limit_bytes)
            .field("concurrency_limit", &self.concurrency_limit)
            .field("shutdown_grace", &self.shutdown_grace)
            .field("auth_none", &self.authenticator.is_none())
            .field("allowed_origins", &self.allowed_origins)
            .field("header_read_timeout", &self.header_read_timeout)
            .field("body_read_timeout", &self.body_read_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("connection_limit", &self.connection_limit)
            .field(
                "connection_limit_per_address",
                &self.connection_limit_per_address,
            )
            .field("idempotency_key_required", &self.idempotency_key_required)
            .field("openapi_extra", &self.openapi_extra.is_some())
            .finish()
    }
}

/// What every handler shares.
pub(crate) struct AppState {
    pub gate: Arc<Gate>,
    pub options: ServerOptions,
    /// One permit per running call: bounds concurrency, and shutdown waits for all of them.
    pub calls: Arc<Semaphore>,
    /// The document served at `/openapi.json`: built once per server, with the operations of
    /// `options.openapi_extra` merged in.
    pub openapi_json: axum::body::Bytes,
}

/// The router with its edge, for embedding in another axum app or testing without a
/// socket. `Host` names are not checked (that needs to know the listener's address).
pub fn router(gate: Arc<Gate>, options: ServerOptions) -> axum::Router {
    with_edge(
        openapi::router(state(gate, options.clone())),
        &options,
        false,
    )
}

/// `app` behind the edge: authentication inside, the browser checks outside it, so a
/// request a browser could forge is refused before any credential is looked at.
fn with_edge(app: axum::Router, options: &ServerOptions, loopback: bool) -> axum::Router {
    let authenticator = options.authenticator.clone();
    let browser = Arc::new(BrowserOptions {
        allowed_origins: options.allowed_origins.clone(),
        loopback_hosts_only: loopback,
    });
    let metadata = axum::Router::new()
        .route(
            edge::RESOURCE_METADATA_PATH,
            axum::routing::get(edge::resource_metadata),
        )
        .route(
            &format!("{}/{{*resource}}", edge::RESOURCE_METADATA_PATH),
            axum::routing::get(edge::resource_metadata),
        )
        .with_state(authenticator.clone());
    app.merge(metadata)
        .layer(axum::middleware::from_fn_with_state(
            authenticator,
            edge::authenticate,
        ))
        .layer(axum::middleware::from_fn_with_state(
            browser,
            edge::browser_checks,
        ))
}

/// What a request runs in a task of its own: the gate's work for it, boxed.
pub(crate) type Work<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

impl AppState {
    /// Runs `work` holding a concurrency permit, so that a client that goes away does not
    /// cancel it half-way through a ledger write; 503 at the concurrency limit.
    ///
    /// `work` is polled here, on the request's own task: a task of its own would cost a
    /// spawn, which wakes the runtime's other worker, and a wake back when it is done (about
    /// 15 us of CPU per call together on two cores, `perf record` of `bench gateway`). Should
    /// the handler be dropped while the work waits (its client went away, or a timeout), the
    /// work moves to a task of its own that finishes it ([`Detachable`]).
    ///
    /// `work` comes boxed: the gate's futures are several KiB (a grant's about 15 in a release
    /// build), and every move of a future copies all of it. Unboxed, each layer between the
    /// handler and the task (the handler's own future, its span, the task's cell, the task's
    /// first poll) copied it again: about half a megabyte of `memmove` per grant and settle.
    pub(crate) async fn in_task<T: Send + 'static>(&self, work: Work<T>) -> Result<T, Problem> {
        let permit = self
            .calls
            .clone()
            .try_acquire_owned()
            .map_err(|_| Problem::overloaded())?;
        let mut detachable = Detachable {
            work: Some(work),
            permit: Some(permit),
            span: tracing::Span::current(),
        };
        std::future::poll_fn(|context| {
            let work = detachable
                .work
                .as_mut()
                .expect("work polled after it ended");
            let polled = poll_caught(work, context);
            if polled.is_ready() {
                detachable.work = None;
            }
            polled.map(|done| done.map_err(|()| request_failed("the request's work panicked")))
        })
        .await
    }
}

/// A request's work, with the permit it holds, while its handler polls it. Dropped before
/// the work ended, it spawns a task that finishes the work, then gives the permit back.
struct Detachable<T: Send + 'static> {
    work: Option<Work<T>>,
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
    /// The request's span, the task's: the work's trace still continues the caller's.
    span: tracing::Span,
}

impl<T: Send + 'static> Drop for Detachable<T> {
    fn drop(&mut self) {
        let (Some(mut work), permit) = (self.work.take(), self.permit.take()) else {
            return;
        };
        // Outside a runtime the runtime is shutting down, and its tasks with it.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(
            async move {
                let done = std::future::poll_fn(|context| poll_caught(&mut work, context)).await;
                if done.is_err() {
                    request_failed("the request's work panicked after its client left");
                }
                drop(permit);
            }
            .instrument(self.span.clone()),
        );
    }
}

/// Polls `work` once; a panic is `Err`, not an unwind through the connection.
fn poll_caught<T>(work: &mut Work<T>, context: &mut Context<'_>) -> Poll<Result<T, ()>> {
    match catch_unwind(AssertUnwindSafe(|| work.as_mut().poll(context))) {
        Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
        Ok(Poll::Pending) => Poll::Pending,
        Err(_) => Poll::Ready(Err(())),
    }
}

/// The answer to a request whose work failed inside the gateway (a panic): logged as the
/// bug it is.
fn request_failed(error: &str) -> Problem {
    tracing::error!(%error, "bug: a request's task failed");
    Problem::internal("the request failed inside the gateway")
}

fn state(gate: Arc<Gate>, options: ServerOptions) -> Arc<AppState> {
    let calls = Arc::new(Semaphore::new(options.concurrency_limit));
    let openapi_json = openapi::document_json(options.openapi_extra.as_ref());
    Arc::new(AppState {
        gate,
        options,
        calls,
        openapi_json,
    })
}

/// Serves until `shutdown` completes, then waits up to the grace period for open connections
/// and running calls.
pub async fn run(
    listener: TcpListener,
    gate: Arc<Gate>,
    options: ServerOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    run_with(listener, gate, options, None, shutdown).await
}

/// [`run`], with `extra` routes served beside the HTTP API (`intentgate serve` mounts MCP
/// at `/mcp` this way). `extra` must not define a fallback or a route of the API; its calls
/// are not counted by the API's concurrency limit or shutdown wait, so it brings its own.
pub async fn run_with(
    listener: TcpListener,
    gate: Arc<Gate>,
    options: ServerOptions,
    extra: Option<axum::Router>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let loopback = listener.local_addr()?.ip().is_loopback();
    let state = state(gate, options.clone());
    let app = openapi::router(state.clone());
    let app = match extra {
        Some(extra) => app.merge(extra),
        None => app,
    };
    let app = with_edge(app, &options, loopback);
    let limits = connection::Limits {
        header_read_timeout: state.options.header_read_timeout,
        body_read_timeout: state.options.body_read_timeout,
        idle_timeout: state.options.idle_timeout,
        connection_limit: state.options.connection_limit,
        connection_limit_per_address: state.options.connection_limit_per_address,
        shutdown_grace: state.options.shutdown_grace,
    };
    let metrics = state.gate.metrics().clone();
    // Connections and calls share one grace period, counted from the shutdown signal.
    let deadline = connection::serve(listener, app, limits, metrics, shutdown).await;
    let permits = state.options.concurrency_limit as u32;
    let drained = tokio::time::timeout_at(deadline, state.calls.acquire_many(permits)).await;
    match drained {
        Ok(_) => tracing::info!("every call finished; stopped"),
        Err(_) => tracing::warn!(
            running = permits as usize - state.calls.available_permits(),
            "shutdown grace period over; calls still running stay in_flight in the ledger and are resolved by lookup"
        ),
    }
    Ok(())
}

/// Completes on Ctrl-C or SIGTERM. The handlers are installed when this is called, not when
/// the future is first polled: a caller that calls it before it announces itself (`serve`
/// prints where it listens) can't be killed by a signal sent in between, which would end the
/// process without its graceful shutdown.
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{Signal, SignalKind, signal};
        // A handler that can't be installed never fires (the signal keeps its default).
        let interrupt = signal(SignalKind::interrupt()).ok();
        let terminate = signal(SignalKind::terminate()).ok();
        async fn received(signal: Option<Signal>) {
            match signal {
                Some(mut signal) => {
                    signal.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        async move {
            tokio::select! {
                _ = received(interrupt) => {}
                _ = received(terminate) => {}
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use axum::Extension;
    use axum::body::Bytes;
    use axum::extract::{Path, State};
    use axum::http::HeaderMap;
    use intentgate_core::Principal;
    use intentgate_mock::FaultPlan;
    use intentgate_test_support::Harness;

    use super::{ServerOptions, intent_api, routes, state};

    /// Work that finishes at its first poll (a repeat answered from memory) runs on the
    /// request's own task: no task spawned, none to wake back.
    #[tokio::test]
    async fn work_that_does_not_wait_is_done_without_a_task_of_its_own() {
        let fixture = Harness::new(FaultPlan::none());
        let state = state(fixture.gate.clone(), ServerOptions::default());
        let handler = tokio::spawn(async move {
            let ran_on = state
                .in_task(Box::pin(async { tokio::task::id() }))
                .await
                .unwrap();
            (tokio::task::id(), ran_on)
        });
        let (handler, ran_on) = handler.await.unwrap();
        assert_eq!(ran_on, handler);
    }

    /// Work that waits is polled on the request's own task as well, while its handler
    /// lives: no task is spawned for it, and none wakes the request back.
    #[tokio::test]
    async fn work_that_waits_is_polled_on_the_requests_own_task() {
        let fixture = Harness::new(FaultPlan::none());
        let state = state(fixture.gate.clone(), ServerOptions::default());
        let (started, waiting) = tokio::sync::oneshot::channel::<()>();
        let (resume, resumed) = tokio::sync::oneshot::channel::<()>();
        let handler = tokio::spawn(async move {
            let work = Box::pin(async move {
                started.send(()).unwrap();
                resumed.await.unwrap();
                tokio::task::id()
            });
            let ran_on = state.in_task(work).await.unwrap();
            (tokio::task::id(), ran_on)
        });
        waiting.await.unwrap();
        resume.send(()).unwrap();
        let (handler, ran_on) = handler.await.unwrap();
        assert_eq!(ran_on, handler, "the work ran on a task of its own");
    }

    /// Work that waits is finished by a task of its own even when the request's handler is
    /// dropped right after the first poll (its client went away): a ledger write is never
    /// cancelled half-way.
    #[tokio::test]
    async fn work_that_waits_is_finished_after_its_handler_is_dropped() {
        let fixture = Harness::new(FaultPlan::none());
        let state = state(fixture.gate.clone(), ServerOptions::default());
        let (resume, resumed) = tokio::sync::oneshot::channel::<()>();
        let (done, finished) = tokio::sync::oneshot::channel::<()>();
        let work = Box::pin(async move {
            resumed.await.unwrap();
            done.send(()).unwrap();
        });
        let mut handler = Box::pin(state.in_task(work));
        let first = poll_once(handler.as_mut()).await;
        assert!(first.is_none(), "the work waits for `resume`");
        drop(handler);
        resume.send(()).unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(10), finished)
            .await
            .expect("the work was dropped with its handler")
            .unwrap();
    }

    /// A panic in the work's first poll is the same 500 as one in its task, not a
    /// connection dropped without an answer.
    #[tokio::test]
    async fn a_panic_in_the_first_poll_is_answered_500() {
        let fixture = Harness::new(FaultPlan::none());
        let state = state(fixture.gate.clone(), ServerOptions::default());
        let failed = state
            .in_task::<()>(Box::pin(async { panic!("a bug in the gate") }))
            .await
            .unwrap_err();
        assert_eq!(failed.status, axum::http::StatusCode::INTERNAL_SERVER_ERROR);
    }

    /// Polls `future` once: its output, or `None` if it is pending.
    async fn poll_once<F: std::future::Future>(
        mut future: std::pin::Pin<&mut F>,
    ) -> Option<F::Output> {
        std::future::poll_fn(|context| match future.as_mut().poll(context) {
            std::task::Poll::Ready(output) => std::task::Poll::Ready(Some(output)),
            std::task::Poll::Pending => std::task::Poll::Ready(None),
        })
        .await
    }

    /// Most bytes a handler's future may hold. The gate's futures are several KiB; a handler
    /// holding one inline is copied whole by each layer that moves it.
    const HANDLER_FUTURE_MAX: usize = 2 * 1024;

    /// The handlers that run the gate hold its work boxed ([`super::AppState::in_task`]),
    /// so that moving them between the connection, the router and the task copies a few
    /// hundred bytes rather than the gate's whole future.
    #[tokio::test]
    async fn handlers_that_run_the_gate_hold_its_work_boxed() {
        let fixture = Harness::new(FaultPlan::none());
        let state = state(fixture.gate.clone(), ServerOptions::default());
        let caller = || None::<Extension<Principal>>;
        let sizes = [
            (
                "grant",
                size_of_val(&intent_api::grant(
                    State(state.clone()),
                    Path("refund_order".to_owned()),
                    caller(),
                    HeaderMap::new(),
                    Ok(Bytes::new()),
                )),
            ),
            (
                "settle or renew",
                size_of_val(&intent_api::act_on_intent(
                    State(state.clone()),
                    Path(("1".to_owned(), "settle".to_owned())),
                    caller(),
                    Ok(Bytes::new()),
                )),
            ),
            (
                "call",
                size_of_val(&routes::call_tool(
                    State(Arc::clone(&state)),
                    Path("refund_order".to_owned()),
                    caller(),
                    HeaderMap::new(),
                    Ok(Bytes::new()),
                )),
            ),
        ];
        for (handler, size) in sizes {
            assert!(
                size <= HANDLER_FUTURE_MAX,
                "the {handler} handler's future is {size} bytes (at most {HANDLER_FUTURE_MAX})"
            );
        }
    }
}
