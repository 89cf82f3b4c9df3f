//! The REST API of the mock provider (`docs/mock-provider.md`): the side effects (refunds,
//! charges, emails) with Stripe-like idempotency keys, their lists and lookups, the read
//! endpoints over synthetic data, and the admin endpoints that set faults, move the clock and
//! count effects. A side-effecting request is checked here, decided by the model, and the
//! decision acted out: its latency is a `tokio::time::sleep` (so a paused runtime works),
//! and a `timeout` or `dropped` becomes a response marked for the accept loop to cut.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use intentgate_core::UpstreamObservation;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::MockProvider;
use super::connection::cut_connection;
use crate::model::{Decision, EffectKind, EffectRequest, ListFilter};
use crate::stripe::{self, Dialect};
use crate::synthetic;
use crate::wire::{
    ClockAdvance, HttpFaultPlan, InvalidRequest, check_identifier, list_body, normalise_effect,
};

/// Largest request body. The biggest legitimate body is an email; 64 KiB is far more than
/// any test sends and small enough that a flood can't exhaust memory.
pub const BODY_BYTES_MAX: usize = 64 * 1024;
/// How long a client may take to send a body once its headers arrived.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);
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

impl MockProvider {
    /// Every route of the API. Serve it with [`serve_provider`](super::serve_provider) for exact
    /// connection cuts.
    pub fn router(self: &Arc<Self>) -> Router {
        Router::new()
            .route("/v1/refunds", post(create_refund).get(list_refunds))
            .route("/v1/refunds/{id}", get(get_refund))
            .route("/v1/charges", post(create_charge).get(list_charges))
            .route("/v1/charges/{id}", get(get_charge))
            .route("/v1/emails", post(create_email).get(list_emails))
            .route("/v1/emails/{id}", get(get_email))
            .route(
                "/v1/payment_intents",
                post(create_payment_intent).get(list_payment_intents),
            )
            .route("/v1/payment_intents/{id}", get(get_payment_intent))
            .route(
                "/v1/payment_intents/{id}/cancel",
                post(cancel_payment_intent),
            )
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
}

/// An error answer, Stripe-like: `{"error": {"type", "message", "param"}}`.
#[derive(Debug)]
struct ApiError {
    status: StatusCode,
    kind: &'static str,
    message: String,
    param: Option<String>,
    /// Stripe's `code` of the error (`resource_missing`), where the Stripe dialect says one.
    code: Option<&'static str>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            kind,
            message: message.into(),
            param: None,
            code: None,
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
        if let Some(code) = self.code {
            error["code"] = Value::String(code.to_owned());
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

/// Sleeps for a drawn latency. No latency means no sleep at all: tokio rounds even a zero
/// sleep up to its next 1 ms tick, which would add a millisecond to every quiet request.
async fn pause(latency: Duration) {
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
}

/// How an answer is worded in the Stripe dialect.
#[derive(Debug, Clone, Copy)]
struct StripeWording {
    kind: EffectKind,
    /// `expand[]=charge`: a success shows the charge as an object.
    wants_charge: bool,
}

/// Acts out a decision: waits, then answers, or holds and cuts. In the Stripe dialect
/// (`stripe` given) errors are in Stripe's words and a replayed answer says so with
/// `Idempotent-Replayed: true`.
async fn act_out(
    decision: Decision,
    timeout_hold: Duration,
    stripe: Option<StripeWording>,
) -> Response {
    match decision.reply {
        UpstreamObservation::Response {
            status,
            retry_after_ms,
            body,
            ..
        } => {
            pause(decision.latency).await;
            let Some(wording) = stripe else {
                return json_response(status, retry_after_ms, body);
            };
            let body = match status {
                200 if wording.kind == EffectKind::PaymentIntent => {
                    stripe::with_latest_charge(body)
                }
                200 if wording.wants_charge => stripe::expand_charge(body),
                200 => body,
                _ => stripe::error_body(status, body),
            };
            let mut response = json_response(status, retry_after_ms, body);
            if decision.replayed {
                response
                    .headers_mut()
                    .insert("idempotent-replayed", HeaderValue::from_static("true"));
            }
            response
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
    if state.0.dialect() == Dialect::Stripe {
        return create_stripe_refund(state, headers, body).await;
    }
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
    let idempotency_key = idempotency_key(&headers)?;
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
            echo_key: true,
        });
        (decision, state.plan.timeout_hold())
    };
    Ok(act_out(decision, timeout_hold, None).await)
}

/// The request's `Idempotency-Key`, checked.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    match headers.get("idempotency-key") {
        None => Ok(None),
        Some(value) => {
            let key = value
                .to_str()
                .map_err(|_| ApiError::invalid("Invalid Idempotency-Key: must be ASCII text."))?;
            check_identifier("Idempotency-Key", key)?;
            Ok(Some(key.to_owned()))
        }
    }
}

/// `POST /v1/refunds` in the Stripe dialect: a form body in bracket notation, the amount in
/// minor units; validated first, then decided by the model like every side effect.
async fn create_stripe_refund(state: Shared, headers: HeaderMap, body: Body) -> Answer {
    create_stripe(state, EffectKind::Refund, headers, body).await
}

/// `POST /v1/payment_intents` (Stripe dialect only): a PaymentIntent created, and confirmed
/// when asked (`confirm=true`, `off_session=true`); the key layer and the fault plan as for
/// every side effect, a decline being the plan's `reject` (Stripe's 402 `card_error`).
async fn create_payment_intent(state: Shared, uri: Uri, headers: HeaderMap, body: Body) -> Answer {
    if state.0.dialect() != Dialect::Stripe {
        return Err(not_found(Method::POST, uri).await);
    }
    create_stripe(state, EffectKind::PaymentIntent, headers, body).await
}

/// A side effect in the Stripe dialect: a form body in bracket notation, amounts in minor
/// units; validated first, then decided by the model like every side effect.
async fn create_stripe(
    State(provider): Shared,
    kind: EffectKind,
    headers: HeaderMap,
    body: Body,
) -> Answer {
    let idempotency_key = idempotency_key(&headers)?;
    let is_json = headers
        .get("content-type")
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.trim_start().starts_with("application/json"));
    if is_json {
        return Err(ApiError::invalid(
            "This provider speaks Stripe's API: send the body as application/x-www-form-urlencoded, nested values in bracket notation (metadata[intent_key]=...).",
        ));
    }
    let bytes = read_body(body).await?;
    let pairs: Vec<(String, String)> = form_urlencoded::parse(&bytes).into_owned().collect();
    let fields = stripe::parse_form(&pairs)?;
    let (decision, timeout_hold, wants_charge) = {
        let mut state = provider.lock();
        let now_ms = state.model.now_ms();
        let (normalised, wants_charge) = match kind {
            EffectKind::PaymentIntent => {
                (stripe::normalise_payment_intent(&fields, now_ms)?, false)
            }
            _ => stripe::normalise_refund(&fields, now_ms)?,
        };
        let decision = state.model.side_effect(EffectRequest {
            kind,
            tool: kind.object(),
            parameters: &normalised.parameters,
            object: normalised.object,
            idempotency_key: idempotency_key.as_deref(),
            intent_key: normalised.intent_key.as_deref(),
            attempt: 0,
            echo_key: false,
        });
        (decision, state.plan.timeout_hold(), wants_charge)
    };
    let wording = StripeWording { kind, wants_charge };
    Ok(act_out(decision, timeout_hold, Some(wording)).await)
}

async fn list_refunds(state: Shared, query: Pairs) -> Answer {
    if state.0.dialect() == Dialect::Stripe {
        return list_stripe(state, EffectKind::Refund, query).await;
    }
    list(state, EffectKind::Refund, query).await
}

/// `GET /v1/payment_intents` (Stripe dialect only): as the refunds' list, by `customer`.
async fn list_payment_intents(state: Shared, query: Pairs, uri: Uri) -> Answer {
    if state.0.dialect() != Dialect::Stripe {
        return Err(not_found(Method::GET, uri).await);
    }
    list_stripe(state, EffectKind::PaymentIntent, query).await
}

/// A list in the Stripe dialect (`GET /v1/refunds`, `GET /v1/payment_intents`): newest
/// first, `starting_after` and `has_more`, `created[...]` in Unix seconds. A lookup like
/// every list (it may fail with a 500).
async fn list_stripe(State(provider): Shared, kind: EffectKind, query: Pairs) -> Answer {
    let pairs = query_pairs(query)?;
    let query = stripe::list_query(kind, &pairs)?;
    let (draw, page) = {
        let mut state = provider.lock();
        let draw = state.model.draw_lookup();
        let page = draw
            .answers
            .then(|| state.model.list(kind, &query.filter, query.limit));
        (draw, page)
    };
    tokio::time::sleep(draw.latency).await;
    match page {
        None => Err(lookup_failed()),
        Some(page) => {
            let data = match kind {
                EffectKind::PaymentIntent => page
                    .data
                    .into_iter()
                    .map(stripe::with_latest_charge)
                    .collect(),
                _ if query.wants_charge => {
                    page.data.into_iter().map(stripe::expand_charge).collect()
                }
                _ => page.data,
            };
            Ok(axum::Json(stripe::list_body(kind, data, page.has_more)).into_response())
        }
    }
}

/// `GET /v1/payment_intents/{id}` (Stripe dialect only): a lookup. A PaymentIntent made
/// here as it is now; any other well-formed `pi_...` id a synthetic succeeded payment.
async fn get_payment_intent(State(provider): Shared, Path(id): Path<String>, uri: Uri) -> Answer {
    if provider.dialect() != Dialect::Stripe {
        return Err(not_found(Method::GET, uri).await);
    }
    check_identifier("id", &id)?;
    let (draw, found) = {
        let mut state = provider.lock();
        let draw = state.model.draw_lookup();
        let found = draw.answers.then(|| {
            state
                .model
                .effect(EffectKind::PaymentIntent, &id)
                .map(|effect| stripe::with_latest_charge(effect.object.clone()))
                .or_else(|| {
                    // An id of the mock's own sequence that it never made is missing.
                    (EffectKind::PaymentIntent.sequence_of(&id).is_none())
                        .then(|| stripe::synthetic_payment_intent(&id))
                        .flatten()
                })
        });
        (draw, found)
    };
    tokio::time::sleep(draw.latency).await;
    match found {
        None => Err(lookup_failed()),
        Some(None) => Err(no_such_payment_intent(&id)),
        Some(Some(object)) => Ok(axum::Json(object).into_response()),
    }
}

fn no_such_payment_intent(id: &str) -> ApiError {
    ApiError {
        param: Some("intent".into()),
        code: Some("resource_missing"),
        ..ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!("No such payment_intent: '{id}'"),
        )
    }
}

/// `POST /v1/payment_intents/{id}/cancel` (Stripe dialect only): an idempotent update, like
/// the JSON dialect's ticket statuses (counted as a read, no faults drawn). A second
/// cancellation, or one of a succeeded payment, is Stripe's 400
/// `payment_intent_unexpected_state`, and nothing changes.
async fn cancel_payment_intent(
    State(provider): Shared,
    Path(id): Path<String>,
    uri: Uri,
    body: Body,
) -> Answer {
    if provider.dialect() != Dialect::Stripe {
        return Err(not_found(Method::POST, uri).await);
    }
    check_identifier("id", &id)?;
    let bytes = read_body(body).await?;
    let pairs: Vec<(String, String)> = form_urlencoded::parse(&bytes).into_owned().collect();
    let fields = stripe::parse_form(&pairs)?;
    let mut state = provider.lock();
    state.model.count_read();
    let now_ms = state.model.now_ms();
    let mut synthetic;
    let object = match state
        .model
        .effect_object_mut(EffectKind::PaymentIntent, &id)
    {
        Some(object) => object,
        None => {
            synthetic = EffectKind::PaymentIntent
                .sequence_of(&id)
                .is_none()
                .then(|| stripe::synthetic_payment_intent(&id))
                .flatten()
                .ok_or_else(|| no_such_payment_intent(&id))?;
            &mut synthetic
        }
    };
    match stripe::cancel(object, &fields, now_ms)? {
        Ok(()) => ok(stripe::with_latest_charge(object.clone())),
        Err(stripe::UnexpectedState(message)) => Err(ApiError {
            code: Some("payment_intent_unexpected_state"),
            ..ApiError::invalid(message)
        }),
    }
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
        EffectKind::PaymentIntent => "customer",
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
            "idempotency_key" => filter.idempotency_key = Some(value),
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
                        "Received unknown parameter: {name}. Lists take idempotency_key, intent_key, {subject}, created_gte_ms, created_lt_ms, limit and starting_after."
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
    let required_names = required.iter().map(|name| (*name, true));
    let optional_names = optional.iter().map(|name| (*name, false));
    for (name, required) in required_names.chain(optional_names) {
        match (fields.get(name), required) {
            (Some(Value::String(text)), _) => check_identifier(name, text)?,
            (None | Some(Value::Null), false) => {}
            (None, true) => {
                return Err(
                    InvalidRequest::new(name, format!("Missing required param: {name}.")).into(),
                );
            }
            (Some(_), _) => {
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
