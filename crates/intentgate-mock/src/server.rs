//! The HTTP face of the provider: the API of `docs/mock-provider.md`, served with axum.
//!
//! [`MockProvider`] is the handle: it owns the shared [`crate::model`] (behind one mutex,
//! never held across an await), the HTTP fault plan and the updates of the read endpoints,
//! and lets tests and the demo read effect counts without HTTP. [`serve`] (or
//! [`serve_provider`] for a handle you keep) runs the accept loop; [`MockServer`] starts one
//! on `127.0.0.1:0` in process.
//!
//! Faults are acted out here: a decision's latency is a `tokio::time::sleep` (so a paused
//! runtime works), a `timeout` holds the connection for the plan's `timeout_hold_ms` and
//! then cuts it, and a `dropped` cuts it after the request was read. A cut is a response
//! marked [`CutConnection`]: the accept loop turns it into a service error, on which hyper
//! closes the connection without writing a byte, so the client sees the connection end
//! before any status. Served by something else (say `axum::serve` of [`MockProvider::router`])
//! the same response still breaks: its body fails on the first read, which makes hyper
//! abort the connection before flushing the headers; a server that flushed them first would
//! show a 500 whose body breaks, never a usable answer.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use intentgate_core::UpstreamObservation;
use intentgate_gate::{Clock, SystemClock};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot, watch};
use tokio::task::JoinSet;
use tower_service::Service as _;

use crate::model::{
    Decision, Effect, EffectKind, EffectRequest, ListFilter, Model, Plan, Scripted,
};
use crate::synthetic;
use crate::wire::{
    ClockAdvance, EffectCounts, EffectTotals, HttpFaultPlan, InvalidRequest, PlanError, Stats,
    check_identifier, list_body, normalise_effect,
};

/// Largest request body. The biggest legitimate body is an email; 64 KiB is far more than
/// any test sends and small enough that a flood can't exhaust memory.
pub const BODY_BYTES_MAX: usize = 64 * 1024;
/// How long a client may take to send a body once its headers arrived.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client may take to send a request's headers (also closes idle keep-alive
/// connections that start a request and stall).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once; further ones wait in the listen backlog. A storm of agents
/// in a demo opens a few hundred.
pub const CONNECTIONS_MAX: usize = 4096;
/// After the shutdown signal, how long connections in progress may finish (a held
/// `timeout` would otherwise keep the server up for `timeout_hold_ms`).
pub const SHUTDOWN_DRAIN_MAX: Duration = Duration::from_secs(5);
/// Most items in one page of a list (Stripe allows 100; reconciliation pages are larger).
pub const LIST_LIMIT_MAX: usize = 1000;
/// Items in a page when `limit` is not given.
pub const LIST_LIMIT_DEFAULT: usize = 100;
/// Most updated tickets and addresses remembered. Updates are the only state of the read
/// endpoints; past this, an update of a new id is refused with 507.
pub const UPDATES_MAX: usize = 1_000_000;
/// Longest help search query.
pub const HELP_QUERY_BYTES_MAX: usize = 1000;
/// Largest single move of the provider's clock: a hundred years, far past any key window,
/// and far from overflowing milliseconds.
pub const CLOCK_ADVANCE_MS_MAX: u64 = 100 * 365 * 24 * 60 * 60 * 1000;
/// Pause after a failed `accept` that is not about one connection (out of file
/// descriptors): retrying at once would spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// How to start a provider.
#[derive(Clone)]
pub struct MockOptions {
    /// The fault plan, including the seed of the fault generator.
    pub plan: HttpFaultPlan,
    /// The provider's clock before any `/admin/clock` move: the wall clock by default, a
    /// `TokioClock` in tests with a paused runtime.
    pub clock: Arc<dyn Clock>,
}

impl Default for MockOptions {
    fn default() -> MockOptions {
        MockOptions {
            plan: HttpFaultPlan::default(),
            clock: Arc::new(SystemClock),
        }
    }
}

impl MockOptions {
    /// A plan on the wall clock.
    pub fn new(plan: HttpFaultPlan) -> MockOptions {
        MockOptions {
            plan,
            clock: Arc::new(SystemClock),
        }
    }
}

struct ProviderState {
    model: Model,
    /// The plan as it was set, answered by `GET /admin/faults`.
    plan: HttpFaultPlan,
    /// Ticket statuses set by `PUT /v1/tickets/{id}/status`.
    ticket_statuses: HashMap<String, String>,
    /// Addresses set by `PUT /v1/customers/{id}/address`.
    addresses: HashMap<String, Value>,
}

/// The HTTP mock provider's state. Share it with `Arc`; serve it with [`serve_provider`]
/// or [`MockServer`].
pub struct MockProvider {
    state: Mutex<ProviderState>,
}

impl MockProvider {
    /// A provider with no effects, after checking the plan.
    pub fn new(options: MockOptions) -> Result<Arc<MockProvider>, PlanError> {
        options.plan.validate()?;
        let model = Model::new(options.plan.seed, Plan::from(&options.plan), options.clock);
        Ok(Arc::new(MockProvider {
            state: Mutex::new(ProviderState {
                model,
                plan: options.plan,
                ticket_statuses: HashMap::new(),
                addresses: HashMap::new(),
            }),
        }))
    }

    /// Every route of the API. Serve it with [`serve_provider`] for exact connection cuts.
    pub fn router(self: &Arc<Self>) -> Router {
        Router::new()
            .route("/v1/refunds", post(create_refund).get(list_refunds))
            .route("/v1/refunds/{id}", get(get_refund))
            .route("/v1/charges", post(create_charge).get(list_charges))
            .route("/v1/charges/{id}", get(get_charge))
            .route("/v1/emails", post(create_email).get(list_emails))
            .route("/v1/emails/{id}", get(get_email))
            .route("/v1/orders/{id}", get(get_order))
            .route("/v1/orders/{id}/refunds", get(get_order_refunds))
            .route("/v1/customers/{id}", get(get_customer))
            .route("/v1/customers/{id}/orders", get(get_customer_orders))
            .route(
                "/v1/customers/{id}/payment_methods",
                get(get_payment_methods),
            )
            .route("/v1/customers/{id}/address", put(put_address))
            .route("/v1/products/{id}", get(get_product))
            .route("/v1/shipments/{id}", get(get_shipment))
            .route("/v1/tickets/{id}", get(get_ticket))
            .route("/v1/tickets/{id}/status", put(put_ticket_status))
            .route("/v1/help/articles", get(search_help))
            .route("/admin/faults", get(get_faults).put(put_faults))
            .route("/admin/clock", post(post_clock))
            .route("/admin/stats", get(get_stats))
            .route("/admin/effects", get(get_effects))
            .route("/admin/reset", post(post_reset))
            .fallback(not_found)
            .method_not_allowed_fallback(method_not_allowed)
            .with_state(self.clone())
    }

    /// Every effect, in order.
    pub fn effects(&self) -> Vec<Effect> {
        self.lock().model.effects().to_vec()
    }

    /// Effects recorded for one intent key.
    pub fn effect_count(&self, intent_key: &str) -> usize {
        self.lock().model.effect_count(intent_key)
    }

    /// What `GET /admin/effects` answers: counts by intent key and order, duplicates.
    pub fn effect_counts(&self) -> EffectCounts {
        let state = self.lock();
        let model = &state.model;
        let by_intent_key: std::collections::BTreeMap<String, u64> = model
            .by_intent()
            .map(|(key, count)| (key.to_owned(), count as u64))
            .collect();
        let duplicates = by_intent_key
            .iter()
            .filter(|(_, count)| **count > 1)
            .map(|(key, _)| key.clone())
            .collect();
        EffectCounts {
            total: model.effects().len() as u64,
            by_intent_key,
            duplicates,
            by_order: model
                .by_order()
                .map(|(order, count)| (order.to_owned(), count as u64))
                .collect(),
        }
    }

    /// What `GET /admin/stats` answers.
    pub fn stats(&self) -> Stats {
        let state = self.lock();
        let model = &state.model;
        Stats {
            requests: model.requests(),
            lookups: model.lookups(),
            reads: model.reads(),
            effects: EffectTotals {
                refunds: model.count_of(EffectKind::Refund) as u64,
                charges: model.count_of(EffectKind::Charge) as u64,
                emails: model.count_of(EffectKind::Email) as u64,
            },
        }
    }

    pub fn plan(&self) -> HttpFaultPlan {
        self.lock().plan.clone()
    }

    /// Replaces the plan and re-seeds the fault generator with its seed (so setting the
    /// same plan again replays the same faults).
    pub fn set_plan(&self, plan: HttpFaultPlan) -> Result<(), PlanError> {
        plan.validate()?;
        let mut state = self.lock();
        state.model.set_plan(Plan::from(&plan));
        state.model.reseed(plan.seed);
        state.plan = plan;
        Ok(())
    }

    /// Forces the shapes of the next side-effecting requests, before drawn ones resume.
    pub fn script(&self, shapes: impl IntoIterator<Item = Scripted>) {
        self.lock().model.script(shapes);
    }

    /// Forces the next lookups and lists to fail (`false`) or answer (`true`).
    pub fn script_lookups(&self, answers: impl IntoIterator<Item = bool>) {
        self.lock().model.script_lookups(answers);
    }

    /// Moves the provider's clock forward; keys older than the window are forgotten.
    pub fn advance_clock(&self, by: Duration) {
        self.lock().model.advance(by);
    }

    /// The provider's clock, in milliseconds since the Unix epoch.
    pub fn now_ms(&self) -> i64 {
        self.lock().model.now_ms()
    }

    /// Forgets every effect, key, count, script and update, and re-seeds the generator with
    /// the plan's seed; keeps the plan and the clock.
    pub fn reset(&self) {
        let mut state = self.lock();
        let seed = state.plan.seed;
        state.model.reset();
        state.model.reseed(seed);
        state.ticket_statuses.clear();
        state.addresses.clear();
    }

    fn lock(&self) -> MutexGuard<'_, ProviderState> {
        self.state.lock().expect("mock provider lock")
    }
}

/// Serves a new provider until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    options: MockOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let provider = MockProvider::new(options)
        .map_err(|error| std::io::Error::new(std::io::ErrorKind::InvalidInput, error))?;
    serve_provider(listener, provider, shutdown).await
}

/// Serves `provider` until `shutdown` resolves, then lets connections in progress finish
/// for at most [`SHUTDOWN_DRAIN_MAX`].
pub async fn serve_provider(
    listener: TcpListener,
    provider: Arc<MockProvider>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let router = provider.router();
    let (stop, stopping) = watch::channel(false);
    let slots = Arc::new(Semaphore::new(CONNECTIONS_MAX));
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
            () = &mut shutdown => break,
        };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        while connections.try_join_next().is_some() {}
        match accepted {
            Ok((stream, _)) => {
                connections.spawn(serve_connection(
                    stream,
                    router.clone(),
                    stopping.clone(),
                    slot,
                ));
            }
            Err(error) if is_connection_error(&error) => {}
            Err(_) => tokio::time::sleep(ACCEPT_ERROR_PAUSE).await,
        }
    }
    drop(listener);
    let _ = stop.send(true);
    let drained = async { while connections.join_next().await.is_some() {} };
    let _ = tokio::time::timeout(SHUTDOWN_DRAIN_MAX, drained).await;
    connections.shutdown().await;
    Ok(())
}

/// Errors of `accept` that concern one connection, not the listener.
fn is_connection_error(error: &std::io::Error) -> bool {
    matches!(
        error.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}

/// Marks a response that must not be sent: the connection is cut instead.
#[derive(Debug, Clone, Copy)]
pub struct CutConnection;

/// The service error that makes hyper close a connection without answering.
#[derive(Debug)]
struct ConnectionCut;

impl std::fmt::Display for ConnectionCut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the mock provider cut the connection (fault injection)")
    }
}

impl std::error::Error for ConnectionCut {}

async fn serve_connection(
    stream: TcpStream,
    router: Router,
    mut stopping: watch::Receiver<bool>,
    _slot: OwnedSemaphorePermit,
) {
    let _ = stream.set_nodelay(true);
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let mut router = router.clone();
        async move {
            let response = match router.call(request).await {
                Ok(response) => response,
                Err(never) => match never {},
            };
            if response.extensions().get::<CutConnection>().is_some() {
                return Err(ConnectionCut);
            }
            Ok(response)
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    let mut connection = std::pin::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => return,
        _ = stopping.wait_for(|stop| *stop) => {}
    }
    connection.as_mut().graceful_shutdown();
    let _ = connection.await;
}

/// A provider served on `127.0.0.1` on a free port, in this process: for tests and the demo.
pub struct MockServer {
    provider: Arc<MockProvider>,
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl MockServer {
    /// Binds `127.0.0.1:0` and serves `provider` on a spawned task.
    pub async fn start(provider: Arc<MockProvider>) -> std::io::Result<MockServer> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve_provider(listener, provider.clone(), async move {
            let _ = stopped.await;
        }));
        Ok(MockServer {
            provider,
            addr,
            stop: Some(stop),
            task,
        })
    }

    pub fn provider(&self) -> &Arc<MockProvider> {
        &self.provider
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, without a trailing slash.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting, drains (bounded) and waits for the server to end.
    pub async fn stop(mut self) -> std::io::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.task).await.map_err(std::io::Error::other)?
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        if self.stop.is_some() {
            self.task.abort();
        }
    }
}

/// An error answer, Stripe-like: `{"error": {"type", "message", "param"}}`.
#[derive(Debug)]
struct ApiError {
    status: StatusCode,
    kind: &'static str,
    message: String,
    param: Option<String>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            kind,
            message: message.into(),
            param: None,
        }
    }

    fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }
}

impl From<InvalidRequest> for ApiError {
    fn from(invalid: InvalidRequest) -> ApiError {
        ApiError {
            param: invalid.param,
            ..ApiError::invalid(invalid.message)
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut error = json!({"type": self.kind, "message": self.message});
        if let Some(param) = self.param {
            error["param"] = Value::String(param);
        }
        (self.status, axum::Json(json!({ "error": error }))).into_response()
    }
}

type Answer = Result<Response, ApiError>;
/// A query string as name-value pairs, or why it could not be parsed.
type Pairs = Result<Query<Vec<(String, String)>>, QueryRejection>;

fn query_pairs(query: Pairs) -> Result<Vec<(String, String)>, ApiError> {
    query
        .map(|Query(pairs)| pairs)
        .map_err(|rejection| ApiError::invalid(rejection.body_text()))
}
type Shared = State<Arc<MockProvider>>;

fn json_response(status: u16, retry_after_ms: Option<u64>, body: Value) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, axum::Json(body)).into_response();
    if let Some(ms) = retry_after_ms {
        // Retry-After is in whole seconds; round up so a client never comes back early.
        let headers = response.headers_mut();
        headers.insert("retry-after", HeaderValue::from(ms.div_ceil(1000)));
        headers.insert("retry-after-ms", HeaderValue::from(ms));
    }
    response
}

/// A body that fails when read: what a cut looks like if the response is sent anyway.
struct BrokenBody;

impl http_body::Body for BrokenBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, std::io::Error>>> {
        Poll::Ready(Some(Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            ConnectionCut.to_string(),
        ))))
    }
}

fn cut_connection() -> Response {
    let mut response = Response::new(Body::new(BrokenBody));
    *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    response.extensions_mut().insert(CutConnection);
    response
}

/// Sleeps for a drawn latency. No latency means no sleep at all: tokio rounds even a zero
/// sleep up to its next 1 ms tick, which would add a millisecond to every quiet request.
async fn pause(latency: Duration) {
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
}

/// Acts out a decision: waits, then answers, or holds and cuts.
async fn act_out(decision: Decision, timeout_hold: Duration) -> Response {
    match decision.reply {
        UpstreamObservation::Response {
            status,
            retry_after_ms,
            body,
        } => {
            pause(decision.latency).await;
            json_response(status, retry_after_ms, body)
        }
        UpstreamObservation::Timeout => {
            tokio::time::sleep(timeout_hold).await;
            cut_connection()
        }
        UpstreamObservation::Dropped { .. } => {
            pause(decision.latency).await;
            cut_connection()
        }
        // Only a script can ask for it: cut at once, nothing was processed.
        UpstreamObservation::NotSent { .. } => cut_connection(),
    }
}

/// Reads the whole body, bounded in size and time.
async fn read_body(body: Body) -> Result<Bytes, ApiError> {
    match tokio::time::timeout(
        BODY_READ_TIMEOUT,
        axum::body::to_bytes(body, BODY_BYTES_MAX),
    )
    .await
    {
        Err(_) => Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "invalid_request_error",
            format!(
                "The request body did not arrive within {} s.",
                BODY_READ_TIMEOUT.as_secs()
            ),
        )),
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(error)) => {
            let too_large = error
                .into_inner()
                .downcast_ref::<http_body_util::LengthLimitError>()
                .is_some();
            if too_large {
                Err(ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "invalid_request_error",
                    format!("The request body is larger than {BODY_BYTES_MAX} bytes."),
                ))
            } else {
                Err(ApiError::invalid("The request body could not be read."))
            }
        }
    }
}

async fn read_json<T: DeserializeOwned>(body: Body) -> Result<T, ApiError> {
    let bytes = read_body(body).await?;
    serde_json::from_slice(&bytes)
        .map_err(|error| ApiError::invalid(format!("The request body is not valid: {error}.")))
}

async fn create_refund(state: Shared, headers: HeaderMap, body: Body) -> Answer {
    create(state, EffectKind::Refund, headers, body).await
}

async fn create_charge(state: Shared, headers: HeaderMap, body: Body) -> Answer {
    create(state, EffectKind::Charge, headers, body).await
}

async fn create_email(state: Shared, headers: HeaderMap, body: Body) -> Answer {
    create(state, EffectKind::Email, headers, body).await
}

/// A side effect: validated first (a refused request is not stored for its key, as with
/// Stripe), then decided by the model, then acted out.
async fn create(
    State(provider): Shared,
    kind: EffectKind,
    headers: HeaderMap,
    body: Body,
) -> Answer {
    let idempotency_key = match headers.get("idempotency-key") {
        None => None,
        Some(value) => {
            let key = value
                .to_str()
                .map_err(|_| ApiError::invalid("Invalid Idempotency-Key: must be ASCII text."))?;
            check_identifier("Idempotency-Key", key)?;
            Some(key.to_owned())
        }
    };
    let body: Value = read_json(body).await?;
    let (decision, timeout_hold) = {
        let mut state = provider.lock();
        let normalised = normalise_effect(kind, &body, state.model.now_ms())?;
        let decision = state.model.side_effect(EffectRequest {
            kind,
            tool: kind.object(),
            parameters: &normalised.parameters,
            object: normalised.object,
            idempotency_key: idempotency_key.as_deref(),
            intent_key: normalised.intent_key.as_deref(),
            attempt: 0,
        });
        (decision, state.plan.timeout_hold())
    };
    Ok(act_out(decision, timeout_hold).await)
}

async fn list_refunds(state: Shared, query: Pairs) -> Answer {
    list(state, EffectKind::Refund, query).await
}

async fn list_charges(state: Shared, query: Pairs) -> Answer {
    list(state, EffectKind::Charge, query).await
}

async fn list_emails(state: Shared, query: Pairs) -> Answer {
    list(state, EffectKind::Email, query).await
}

/// The field a kind's list filters on besides the intent key.
fn subject_field(kind: EffectKind) -> &'static str {
    match kind {
        EffectKind::Refund => "order_id",
        EffectKind::Charge => "customer_id",
        EffectKind::Email => "to",
    }
}

/// Parses a list's query. Unknown parameters are refused: a misspelt `intent_key` must not
/// turn a lookup into "list everything" (whose first item would look found). Empty
/// pagination and time parameters count as absent (templates render a missing cursor as
/// empty); an empty filter value matches nothing.
fn list_query(
    kind: EffectKind,
    pairs: Vec<(String, String)>,
) -> Result<(ListFilter, usize), ApiError> {
    let mut filter = ListFilter::default();
    let mut limit = LIST_LIMIT_DEFAULT;
    let subject = subject_field(kind);
    let mut seen: Vec<String> = Vec::new();
    for (name, value) in pairs {
        if seen.contains(&name) {
            return Err(
                InvalidRequest::new(&name, format!("Parameter {name} is given twice.")).into(),
            );
        }
        seen.push(name.clone());
        let number = |name: &str, value: &str| -> Result<i64, ApiError> {
            value.parse().map_err(|_| {
                InvalidRequest::new(
                    name,
                    format!("Invalid {name}: `{value}` is not an integer."),
                )
                .into()
            })
        };
        match name.as_str() {
            "intent_key" => filter.intent_key = Some(value),
            field if field == subject => filter.field = Some((subject, value)),
            _ if value.is_empty() => {}
            "created_gte_ms" => filter.created_gte_ms = Some(number(&name, &value)?),
            "created_lt_ms" => filter.created_lt_ms = Some(number(&name, &value)?),
            "limit" => {
                limit = value
                    .parse::<usize>()
                    .ok()
                    .filter(|limit| (1..=LIST_LIMIT_MAX).contains(limit))
                    .ok_or_else(|| {
                        InvalidRequest::new(
                            "limit",
                            format!(
                                "Invalid limit: `{value}`; it must be an integer from 1 to {LIST_LIMIT_MAX}."
                            ),
                        )
                    })?;
            }
            "starting_after" => {
                filter.after_sequence = kind.sequence_of(&value).ok_or_else(|| {
                    InvalidRequest::new(
                        "starting_after",
                        format!(
                            "Invalid starting_after: `{value}` is not a {} id.",
                            kind.object()
                        ),
                    )
                })?;
            }
            _ => {
                return Err(InvalidRequest::new(
                    &name,
                    format!(
                        "Received unknown parameter: {name}. Lists take intent_key, {subject}, created_gte_ms, created_lt_ms, limit and starting_after."
                    ),
                )
                .into());
            }
        }
    }
    Ok((filter, limit))
}

/// A list of effects: a lookup, so it may fail (500) at the plan's `lookup_failure` rate.
async fn list(State(provider): Shared, kind: EffectKind, query: Pairs) -> Answer {
    let pairs = query_pairs(query)?;
    let (filter, limit) = list_query(kind, pairs)?;
    let (draw, page) = {
        let mut state = provider.lock();
        let draw = state.model.draw_lookup();
        let page = draw.answers.then(|| state.model.list(kind, &filter, limit));
        (draw, page)
    };
    tokio::time::sleep(draw.latency).await;
    match page {
        None => Err(lookup_failed()),
        Some(page) => Ok(axum::Json(list_body(page.data, page.has_more)).into_response()),
    }
}

fn lookup_failed() -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "api_error",
        "An internal error occurred while listing.",
    )
}

async fn get_refund(state: Shared, id: Path<String>) -> Answer {
    get_effect(state, EffectKind::Refund, id).await
}

async fn get_charge(state: Shared, id: Path<String>) -> Answer {
    get_effect(state, EffectKind::Charge, id).await
}

async fn get_email(state: Shared, id: Path<String>) -> Answer {
    get_effect(state, EffectKind::Email, id).await
}

/// One effect by id: a lookup too.
async fn get_effect(State(provider): Shared, kind: EffectKind, Path(id): Path<String>) -> Answer {
    check_identifier("id", &id)?;
    let (draw, found) = {
        let mut state = provider.lock();
        let draw = state.model.draw_lookup();
        let found = draw.answers.then(|| {
            state
                .model
                .effect(kind, &id)
                .map(|effect| effect.object.clone())
        });
        (draw, found)
    };
    tokio::time::sleep(draw.latency).await;
    match found {
        None => Err(lookup_failed()),
        Some(None) => Err(ApiError {
            param: Some("id".into()),
            ..ApiError::new(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                format!("No such {}: '{id}'", kind.object()),
            )
        }),
        Some(Some(object)) => Ok(axum::Json(object).into_response()),
    }
}

/// Counts a read and checks its id.
fn read(provider: &MockProvider, id: &str) -> Result<(), ApiError> {
    check_identifier("id", id)?;
    provider.lock().model.count_read();
    Ok(())
}

fn ok(body: Value) -> Answer {
    Ok(axum::Json(body).into_response())
}

async fn get_order(State(provider): Shared, Path(id): Path<String>) -> Answer {
    read(&provider, &id)?;
    ok(synthetic::order(&id))
}

/// The order's refunds: the same objects as the refunds list (real effects), first page.
async fn get_order_refunds(State(provider): Shared, Path(id): Path<String>) -> Answer {
    read(&provider, &id)?;
    let filter = ListFilter {
        field: Some(("order_id", id)),
        ..ListFilter::default()
    };
    let page = provider
        .lock()
        .model
        .list(EffectKind::Refund, &filter, LIST_LIMIT_MAX);
    ok(list_body(page.data, page.has_more))
}

async fn get_customer(State(provider): Shared, Path(id): Path<String>) -> Answer {
    read(&provider, &id)?;
    let address = provider.lock().addresses.get(&id).cloned();
    ok(synthetic::customer(&id, address.as_ref()))
}

async fn get_customer_orders(State(provider): Shared, Path(id): Path<String>) -> Answer {
    read(&provider, &id)?;
    ok(list_body(synthetic::customer_orders(&id), false))
}

async fn get_payment_methods(State(provider): Shared, Path(id): Path<String>) -> Answer {
    read(&provider, &id)?;
    ok(list_body(synthetic::payment_methods(&id), false))
}

async fn get_product(State(provider): Shared, Path(id): Path<String>) -> Answer {
    read(&provider, &id)?;
    ok(synthetic::product(&id))
}

async fn get_shipment(State(provider): Shared, Path(id): Path<String>) -> Answer {
    read(&provider, &id)?;
    ok(synthetic::shipment(&id))
}

async fn get_ticket(State(provider): Shared, Path(id): Path<String>) -> Answer {
    read(&provider, &id)?;
    let status = provider.lock().ticket_statuses.get(&id).cloned();
    ok(synthetic::ticket(&id, status.as_deref()))
}

async fn search_help(State(provider): Shared, query: Pairs) -> Answer {
    let query: HashMap<String, String> = query_pairs(query)?.into_iter().collect();
    if let Some(unknown) = query.keys().find(|name| name.as_str() != "q") {
        return Err(InvalidRequest::new(
            unknown,
            format!("Received unknown parameter: {unknown}. The search takes q."),
        )
        .into());
    }
    let q = query.get("q").map(String::as_str).unwrap_or_default();
    if q.trim().is_empty() {
        return Err(InvalidRequest::new("q", "Missing required param: q.").into());
    }
    if q.len() > HELP_QUERY_BYTES_MAX {
        return Err(InvalidRequest::new(
            "q",
            format!("Invalid q: longer than {HELP_QUERY_BYTES_MAX} bytes."),
        )
        .into());
    }
    provider.lock().model.count_read();
    ok(list_body(synthetic::help_articles(q), false))
}

/// Refuses a body with other fields than `allowed` or a missing one.
fn fields<'a>(
    body: &'a Value,
    required: &[&str],
    optional: &[&str],
) -> Result<&'a serde_json::Map<String, Value>, ApiError> {
    let Value::Object(fields) = body else {
        return Err(ApiError::invalid("The request body must be a JSON object."));
    };
    if let Some(unknown) = fields
        .keys()
        .find(|name| !required.contains(&name.as_str()) && !optional.contains(&name.as_str()))
    {
        return Err(InvalidRequest::new(
            unknown,
            format!(
                "Received unknown parameter: {unknown}. This takes {}.",
                required.join(", ")
            ),
        )
        .into());
    }
    for name in required {
        match fields.get(*name) {
            Some(Value::String(text)) => check_identifier(name, text)?,
            Some(_) => {
                return Err(InvalidRequest::new(
                    name,
                    format!("Invalid {name}: must be a string."),
                )
                .into());
            }
            None => {
                return Err(
                    InvalidRequest::new(name, format!("Missing required param: {name}.")).into(),
                );
            }
        }
    }
    for name in optional {
        match fields.get(*name) {
            None | Some(Value::Null) => {}
            Some(Value::String(text)) => check_identifier(name, text)?,
            Some(_) => {
                return Err(InvalidRequest::new(
                    name,
                    format!("Invalid {name}: must be a string."),
                )
                .into());
            }
        }
    }
    Ok(fields)
}

/// Stores an update for `id`, refusing a new id once [`UPDATES_MAX`] are kept.
fn remember<T>(updates: &mut HashMap<String, T>, id: String, value: T) -> Result<(), ApiError> {
    if !updates.contains_key(&id) && updates.len() >= UPDATES_MAX {
        return Err(ApiError::new(
            StatusCode::INSUFFICIENT_STORAGE,
            "api_error",
            format!("The provider keeps at most {UPDATES_MAX} updates; reset it."),
        ));
    }
    updates.insert(id, value);
    Ok(())
}

/// Sets a ticket's status: the same request twice leaves the same ticket.
async fn put_ticket_status(State(provider): Shared, Path(id): Path<String>, body: Body) -> Answer {
    read(&provider, &id)?;
    let body: Value = read_json(body).await?;
    let fields = fields(&body, &["status"], &[])?;
    let status = fields["status"].as_str().unwrap_or_default().to_owned();
    if !synthetic::TICKET_STATUSES.contains(&status.as_str()) {
        return Err(InvalidRequest::new(
            "status",
            format!(
                "Invalid status: `{status}`; it must be one of {}.",
                synthetic::TICKET_STATUSES.join(", ")
            ),
        )
        .into());
    }
    remember(
        &mut provider.lock().ticket_statuses,
        id.clone(),
        status.clone(),
    )?;
    ok(synthetic::ticket(&id, Some(&status)))
}

/// Replaces a customer's address: the same request twice leaves the same customer.
async fn put_address(State(provider): Shared, Path(id): Path<String>, body: Body) -> Answer {
    read(&provider, &id)?;
    let body: Value = read_json(body).await?;
    let fields = fields(
        &body,
        &["line1", "city", "postal_code", "country"],
        &["line2"],
    )?;
    let address: serde_json::Map<String, Value> = fields
        .iter()
        .filter(|(_, value)| !value.is_null())
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect();
    let address = Value::Object(address);
    remember(&mut provider.lock().addresses, id.clone(), address.clone())?;
    ok(synthetic::customer(&id, Some(&address)))
}

async fn get_faults(State(provider): Shared) -> Answer {
    ok(serde_json::to_value(provider.plan()).expect("a plan serialises"))
}

async fn put_faults(State(provider): Shared, body: Body) -> Answer {
    let plan: HttpFaultPlan = read_json(body).await?;
    provider
        .set_plan(plan)
        .map_err(|error| ApiError::invalid(error.to_string()))?;
    get_faults(State(provider)).await
}

async fn post_clock(State(provider): Shared, body: Body) -> Answer {
    let advance: ClockAdvance = read_json(body).await?;
    if advance.advance_ms > CLOCK_ADVANCE_MS_MAX {
        return Err(InvalidRequest::new(
            "advance_ms",
            format!("Invalid advance_ms: at most {CLOCK_ADVANCE_MS_MAX}."),
        )
        .into());
    }
    provider.advance_clock(Duration::from_millis(advance.advance_ms));
    ok(json!({"now_ms": provider.now_ms()}))
}

async fn get_stats(State(provider): Shared) -> Answer {
    ok(serde_json::to_value(provider.stats()).expect("stats serialise"))
}

async fn get_effects(State(provider): Shared) -> Answer {
    ok(serde_json::to_value(provider.effect_counts()).expect("counts serialise"))
}

async fn post_reset(State(provider): Shared) -> Answer {
    provider.reset();
    ok(json!({"reset": true}))
}

async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        format!("Unrecognized request URL ({method}: {}).", uri.path()),
    )
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "invalid_request_error",
        format!("{method} is not allowed on {}.", uri.path()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_queries_are_checked() {
        let pairs = |list: &[(&str, &str)]| -> Vec<(String, String)> {
            list.iter()
                .map(|(name, value)| (name.to_string(), value.to_string()))
                .collect()
        };
        let (filter, limit) = list_query(
            EffectKind::Refund,
            pairs(&[
                ("order_id", "o1"),
                ("limit", "5"),
                ("starting_after", "re_000003"),
                ("created_gte_ms", ""),
            ]),
        )
        .unwrap();
        assert_eq!(limit, 5);
        assert_eq!(filter.after_sequence, 3);
        assert_eq!(filter.field, Some(("order_id", "o1".to_owned())));
        assert_eq!(filter.created_gte_ms, None);
        for bad in [
            pairs(&[("limit", "1001")]),
            pairs(&[("limit", "0")]),
            pairs(&[("starting_after", "ch_000001")]),
            pairs(&[("intent_ky", "k")]),
            pairs(&[("customer_id", "c")]),
            pairs(&[("created_lt_ms", "soon")]),
            pairs(&[("intent_key", "a"), ("intent_key", "b")]),
        ] {
            assert!(
                list_query(EffectKind::Refund, bad.clone()).is_err(),
                "{bad:?}"
            );
        }
    }
}
