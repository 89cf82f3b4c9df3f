//! `GET /v1/admin/intents`, `GET /v1/admin/intents/{id}`,
//! `POST /v1/admin/intents/{id}/resolve`, `POST /v1/admin/intents/{id}/reopen` and
//! `POST /v1/admin/erasures`.
//!
//! The list narrows by tool, status, tenant, key and when an intent was first seen, along the
//! ledger's indexes; a search (`q`, text inside keys, arguments and provider ids) has no
//! index, so it reads intents newest first a page at a time, at most [`SEARCH_SCAN_MAX`] of
//! them per request, and says where it stopped.

use std::str::FromStr;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use intentgate_core::IntentStatus;
use intentgate_gate::{LeaseHolder, Resends};
use intentgate_ledger::{Erase, Event, IntentFilter, IntentRecord, LedgerError, Order};
use intentgate_server::Problem;
use serde::Deserialize;
use serde_json::{Value, json};
use utoipa::{IntoParams, ToSchema};

use crate::auth::ConsoleUser;
use crate::body::{self, bad_request, unprocessable};
use crate::erasure::{check_erase, erase_all};
use crate::resolution::{
    ManualReopen, ManualResolution, Unresolvable, check_reopenable, check_resolvable,
};
use crate::{
    AdminState, EVENTS_SHOWN_MAX, INTENTS_LIMIT_DEFAULT, INTENTS_LIMIT_MAX, now_ms, parse_duration,
};

/// The query of `GET /v1/admin/intents`. Every value is read as text so that a wrong one
/// gets a problem naming what is accepted; an empty value counts as absent.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListQuery {
    /// Only this tool's intents.
    tool: Option<String>,
    /// Only intents with this status: `pending`, `in_flight`, `done`, `rejected`, `not_executed`
    /// or `unknown`.
    status: Option<String>,
    /// Only this tenant's intents.
    tenant: Option<String>,
    /// Only the intent with this key (with `tool`).
    key: Option<String>,
    /// `newest` (the default) or `oldest` first.
    order: Option<String>,
    /// The `next_cursor` of the previous page.
    cursor: Option<String>,
    /// Intents per page: 1 to 1000, 50 by default.
    limit: Option<String>,
    /// Only intents first seen within this long before now (`15m`, `1h`, `7d`).
    since: Option<String>,
    /// Only intents first seen at or after this time (milliseconds since the Unix epoch).
    from_ms: Option<String>,
    /// Only intents first seen before this time (milliseconds since the Unix epoch).
    until_ms: Option<String>,
    /// Text to find, in any case, inside the key, the arguments or the provider's id.
    q: Option<String>,
}

/// Most intents one search (`q`) reads before it answers with what it found so far and a
/// cursor to go on from: the text is inside keys and arguments, which no index holds, and a
/// request must stay short.
pub const SEARCH_SCAN_MAX: u32 = 20_000;
/// Intents read from the ledger per page of a search.
const SEARCH_PAGE: u32 = 500;
/// Longest search text: a customer or order id, an email address, a key.
pub const SEARCH_LENGTH_MAX: usize = 256;

fn present(value: Option<String>) -> Option<String> {
    value.filter(|value| !value.is_empty())
}

fn status_names() -> String {
    IntentStatus::ALL
        .iter()
        .map(|status| status.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Intents, filtered and paged, newest first unless `order` says otherwise.
#[utoipa::path(
    get,
    path = "/v1/admin/intents",
    operation_id = "admin_list_intents",
    params(ListQuery),
    responses(
        (status = 200, description = "A page of intents: `{\"intents\": [intent...], \"next_cursor\": id or null}`; \
         with `q`, also `scanned` (intents read) and `scan_stopped` (the scan stopped at its limit \
         before the end: `next_cursor` goes on from there).", body = Object),
        (status = 400, description = "An unknown query parameter or a value out of range; the detail names what is accepted."),
    ),
)]
pub(crate) async fn list(
    State(state): State<Arc<AdminState>>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<Value>, Problem> {
    let query = body::query(query)?;
    let status = match present(query.status) {
        None => None,
        Some(text) => Some(IntentStatus::from_str(&text).map_err(|_| {
            bad_request(
                "bad-query",
                "Invalid status",
                format!(
                    "`{text}` is not an intent status; one of {}",
                    status_names()
                ),
            )
        })?),
    };
    let order = match present(query.order).as_deref() {
        None | Some("newest") => Order::Newest,
        Some("oldest") => Order::Oldest,
        Some(other) => {
            return Err(bad_request(
                "bad-query",
                "Invalid order",
                format!("order must be newest (the default) or oldest, not `{other}`"),
            ));
        }
    };
    let cursor = match present(query.cursor) {
        None => None,
        Some(text) => Some(body::id(&text, "an intent").map_err(|_| {
            bad_request(
                "bad-query",
                "Invalid cursor",
                format!(
                    "cursor must be the next_cursor of the previous page (an intent id), not \
`{text}`"
                ),
            )
        })?),
    };
    let limit = body::limit(
        query.limit.as_deref(),
        INTENTS_LIMIT_DEFAULT,
        INTENTS_LIMIT_MAX,
    )?;
    let now = now_ms();
    let from_ms = match (present(query.since), present(query.from_ms)) {
        (Some(_), Some(_)) => {
            return Err(bad_request(
                "bad-query",
                "Two starts",
                "give either since (a duration back from now) or from_ms, not both".to_owned(),
            ));
        }
        (Some(since), None) => {
            let since = parse_duration(&since).map_err(|detail| {
                bad_request("bad-query", "Invalid since", format!("since: {detail}"))
            })?;
            Some(now.saturating_sub(i64::try_from(since.as_millis()).unwrap_or(i64::MAX)))
        }
        (None, Some(text)) => Some(time_ms(&text, "from_ms")?),
        (None, None) => None,
    };
    let until_ms = present(query.until_ms)
        .map(|text| time_ms(&text, "until_ms"))
        .transpose()?;
    let search = present(query.q).map(|text| text.trim().to_lowercase());
    if let Some(search) = &search
        && search.len() > SEARCH_LENGTH_MAX
    {
        return Err(bad_request(
            "bad-query",
            "Search text too long",
            format!(
                "q is {} bytes long; search for at most {SEARCH_LENGTH_MAX} bytes (an id, a key)",
                search.len()
            ),
        ));
    }
    let filter = IntentFilter {
        tenant: present(query.tenant),
        tool: present(query.tool),
        key: present(query.key),
        status,
        first_seen_from_ms: from_ms,
        first_seen_until_ms: until_ms,
    };
    match search.filter(|search| !search.is_empty()) {
        None => page(&state, &filter, order, cursor, limit).await,
        Some(search) => find(&state, &filter, order, cursor, limit, &search).await,
    }
}

/// A time parameter: whole milliseconds since the Unix epoch.
fn time_ms(text: &str, name: &str) -> Result<i64, Problem> {
    text.parse::<i64>()
        .ok()
        .filter(|ms| *ms >= 0)
        .ok_or_else(|| {
            bad_request(
                "bad-query",
                "Invalid time",
                format!("{name} must be milliseconds since the Unix epoch, not `{text}`"),
            )
        })
}

/// One page of the filtered intents, from the ledger's indexes.
async fn page(
    state: &AdminState,
    filter: &IntentFilter,
    order: Order,
    cursor: Option<i64>,
    limit: u32,
) -> Result<Json<Value>, Problem> {
    // One more than the page: whether it exists says whether there is a next page.
    let mut intents = state
        .ledger
        .intents(filter, order, cursor, limit + 1)
        .await
        .map_err(body::ledger_problem)?;
    let next_cursor = if intents.len() > limit as usize {
        intents.truncate(limit as usize);
        intents.last().map(|intent| intent.id)
    } else {
        None
    };
    Ok(Json(
        json!({ "intents": intents, "next_cursor": next_cursor }),
    ))
}

/// The filtered intents whose key, arguments or provider id hold `search` (lowercase), read
/// a page at a time until `limit` are found or [`SEARCH_SCAN_MAX`] were read. `next_cursor`
/// goes on after the last intent read when the scan stopped early (`scan_stopped`).
async fn find(
    state: &AdminState,
    filter: &IntentFilter,
    order: Order,
    mut cursor: Option<i64>,
    limit: u32,
    search: &str,
) -> Result<Json<Value>, Problem> {
    let mut found: Vec<IntentRecord> = Vec::new();
    let mut scanned: u32 = 0;
    let mut exhausted = false;
    while found.len() <= limit as usize && scanned < SEARCH_SCAN_MAX {
        let batch = state
            .ledger
            .intents(
                filter,
                order,
                cursor,
                SEARCH_PAGE.min(SEARCH_SCAN_MAX - scanned),
            )
            .await
            .map_err(body::ledger_problem)?;
        let Some(last) = batch.last() else {
            exhausted = true;
            break;
        };
        cursor = Some(last.id);
        let complete = batch.len() < SEARCH_PAGE as usize;
        for intent in batch {
            scanned += 1;
            if found.len() <= limit as usize && holds(&intent, search) {
                found.push(intent);
            }
        }
        if complete {
            exhausted = true;
            break;
        }
    }
    let (next_cursor, stopped) = if found.len() > limit as usize {
        found.truncate(limit as usize);
        (found.last().map(|intent| intent.id), false)
    } else if exhausted {
        (None, false)
    } else {
        // The scan's budget ran out: go on from the last intent read.
        (cursor, true)
    };
    Ok(Json(json!({
        "intents": found,
        "next_cursor": next_cursor,
        "scanned": scanned,
        "scan_stopped": stopped,
    })))
}

/// Whether the intent's key, external id or any argument value holds `search` (lowercase).
fn holds(intent: &IntentRecord, search: &str) -> bool {
    fn value_holds(value: &Value, search: &str) -> bool {
        match value {
            Value::String(text) => text.to_lowercase().contains(search),
            Value::Number(number) => number.to_string().contains(search),
            Value::Array(items) => items.iter().any(|item| value_holds(item, search)),
            Value::Object(fields) => fields.values().any(|item| value_holds(item, search)),
            Value::Bool(_) | Value::Null => false,
        }
    }
    intent.key.to_lowercase().contains(search)
        || intent
            .external_id
            .as_deref()
            .is_some_and(|id| id.to_lowercase().contains(search))
        || value_holds(&intent.arguments, search)
}

async fn read(state: &AdminState, id: &str) -> Result<IntentRecord, Problem> {
    let id = body::id(id, "an intent")?;
    state
        .ledger
        .get_by_id(id)
        .await
        .map_err(body::ledger_problem)?
        .ok_or_else(|| {
            Problem::new(
                StatusCode::NOT_FOUND,
                "unknown-intent",
                "No such intent",
                format!("no intent with id {id}; GET /v1/admin/intents lists them"),
            )
        })
}

/// One intent, the idempotency key the provider received for its current attempt, and its
/// event log (the newest 1000 events).
#[utoipa::path(
    get,
    path = "/v1/admin/intents/{id}",
    operation_id = "admin_get_intent",
    params(("id" = String, Path, description = "The intent's id.")),
    responses(
        (status = 200, description = "`{\"intent\": intent, \"provider_key\": string, \"events\": [event...], \
         \"events_omitted\": number, \"amount\", \"unknown_since_ms\", \"last_error\", \"lease\", \
         \"sweeper\", \"resolvable\"}`: the events oldest first (the newest 1000); the other fields as \
         `GET /v1/admin/unknown` describes them (null where they don't apply).", body = Object),
        (status = 400, description = "An id that is not a number."),
        (status = 404, description = "No such intent."),
    ),
)]
pub(crate) async fn show(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, Problem> {
    let intent = read(&state, &id).await?;
    let mut events = state
        .ledger
        .events(intent.id)
        .await
        .map_err(body::ledger_problem)?;
    let facts = unsettled_facts(&state, &intent, &events, now_ms());
    let omitted = events.len().saturating_sub(EVENTS_SHOWN_MAX);
    events.drain(..omitted);
    let mut answer = json!({
        "intent": intent,
        "events": events,
        "events_omitted": omitted,
    });
    merge(&mut answer, facts);
    Ok(Json(answer))
}

/// Most intents `GET /v1/admin/unknown` answers with, of each of its two kinds (`unknown`,
/// and `in_flight` past its first attempt or with an expired lease): each is read with its
/// event log, and the list a person on call works through must stay short to be read at all.
pub const UNKNOWN_SHOWN_MAX: u32 = 200;

/// The longest last error shown with an intent: an event detail can hold 4 KiB, a card a few
/// lines.
const LAST_ERROR_LENGTH_MAX: usize = 512;

/// The unknown intents, each with what a person needs to resolve it: the amount, the
/// provider key to search for in the provider's dashboard, since when it is unknown, the last
/// error, the sweeper's plan and whether a resolution by hand is possible now. Intents being
/// re-sent right now (`in_flight` past their first attempt) and those whose attempt's lease ran
/// out (`in_flight`, unknown in effect) are listed too: they are the same incident.
#[utoipa::path(
    get,
    path = "/v1/admin/unknown",
    operation_id = "admin_list_unknown",
    responses(
        (status = 200, description = "`{\"intents\": [unknown...], \"more\": bool}`, oldest first \
         seen first, at most 200 of each status (`more` says some were left out). Each entry is \
         the intent's `GET /v1/admin/intents/{id}` answer without its event log: `intent`, \
         `provider_key`, `amount` (the arguments its key writes as decimals, numbers as their exact \
         text such as `\"49.00\"`, sensitive ones as their keyed hashes; null when there are none), `unknown_since_ms`, `last_error`, \
         `lease` (`{holder: sweeper|call|client, owner, expires_ms}` while one lives, else null), \
         `sweeper` (`{next_step_ms, resends: active|lookups_only|stopped, resend_until_ms, \
         why}`, null when this gateway does not run the intent's tool) and `resolvable` \
         (`{now: bool, reason, retry_after_ms}`).", body = Object),
    ),
)]
pub(crate) async fn unknown(State(state): State<Arc<AdminState>>) -> Result<Json<Value>, Problem> {
    let now_ms = now_ms();
    let mut listed = Vec::new();
    let mut more = false;
    for status in [IntentStatus::Unknown, IntentStatus::InFlight] {
        let filter = IntentFilter {
            status: Some(status),
            ..IntentFilter::default()
        };
        let mut page = state
            .ledger
            .intents(&filter, Order::Oldest, None, UNKNOWN_SHOWN_MAX + 1)
            .await
            .map_err(body::ledger_problem)?;
        more |= page.len() > UNKNOWN_SHOWN_MAX as usize;
        page.truncate(UNKNOWN_SHOWN_MAX as usize);
        // A first attempt still running is an ordinary call, not something to resolve.
        listed.extend(page.into_iter().filter(|intent| {
            intent.status == IntentStatus::Unknown
                || intent.attempt > 1
                || !intent.lease_live(now_ms)
        }));
    }
    listed.sort_by_key(|intent| (intent.first_seen_ms, intent.id));
    let mut answers = Vec::with_capacity(listed.len());
    for intent in listed {
        let events = state
            .ledger
            .events(intent.id)
            .await
            .map_err(body::ledger_problem)?;
        let mut answer = json!({ "intent": intent });
        merge(
            &mut answer,
            unsettled_facts(&state, &intent, &events, now_ms),
        );
        answers.push(answer);
    }
    Ok(Json(json!({ "intents": answers, "more": more })))
}

/// Adds `extra`'s fields to the object `answer`.
fn merge(answer: &mut Value, extra: Value) {
    if let (Value::Object(answer), Value::Object(extra)) = (answer, extra) {
        answer.extend(extra);
    }
}

/// What an intent's answers carry beside the record (`events`: its whole event log, oldest
/// first): the provider key, the amount, and for an unsettled intent since when, its last
/// error, its lease, the sweeper's plan and whether it can be resolved by hand now.
fn unsettled_facts(
    state: &AdminState,
    intent: &IntentRecord,
    events: &[Event],
    now_ms: i64,
) -> Value {
    // The idempotency key the provider received for the intent's current attempt.
    let provider_key =
        intentgate_core::key::provider_key(&intent.tenant, &intent.tool, &intent.key, intent.epoch);
    let lease = if intent.lease_live(now_ms) {
        let owner = intent.lease_owner.clone().unwrap_or_default();
        json!({
            "holder": LeaseHolder::of(&owner).as_str(),
            "owner": owner,
            "expires_ms": intent.lease_expires_ms,
        })
    } else {
        Value::Null
    };
    let unsettled = matches!(
        intent.status,
        IntentStatus::Unknown | IntentStatus::InFlight
    );
    let resolvable = if unsettled {
        match check_resolvable(intent, IntentStatus::NotExecuted, now_ms) {
            Ok(()) => json!({ "now": true, "reason": null, "retry_after_ms": null }),
            Err(refused) => json!({
                "now": false,
                "reason": refused.message(intent.id),
                "retry_after_ms": match &refused {
                    Unresolvable::LeaseHeld { remaining_ms, .. } => Some(*remaining_ms),
                    Unresolvable::Settled { .. } => None,
                },
            }),
        }
    } else {
        Value::Null
    };
    json!({
        "provider_key": provider_key,
        "amount": amount(state, intent),
        "unknown_since_ms": if unsettled { unknown_since_ms(events) } else { None },
        "last_error": if unsettled { last_error(events) } else { None },
        "lease": lease,
        "sweeper": sweeper(state, intent),
        "resolvable": resolvable,
    })
}

/// The arguments the tool's key writes as exact decimals (its amounts), with a `currency`
/// argument beside them when there is one, as the ledger keeps them (a number as its exact
/// text, a sensitive one as its keyed hash); `None` when the tool's key has no decimal or this gateway lacks the tool.
pub(crate) fn amount(state: &AdminState, intent: &IntentRecord) -> Option<Value> {
    let gate = state.gate.as_ref()?;
    let template = gate.tool(&intent.tool)?.key.as_ref()?;
    let mut fields = serde_json::Map::new();
    for name in template.decimal_names() {
        let pointer = format!("/{}", name.replace('.', "/"));
        if let Some(value) = intent.arguments.pointer(&pointer) {
            fields.insert(name, exact_text(value));
        }
    }
    if fields.is_empty() {
        return None;
    }
    if let Some(currency) = intent.arguments.get("currency") {
        fields.insert("currency".to_owned(), currency.clone());
    }
    Some(Value::Object(fields))
}

/// A number as its exact text (`49.00`, never `49`: most JSON readers, a browser's included,
/// read a number through a float and lose how it was written); any other value as it is.
fn exact_text(value: &Value) -> Value {
    match value {
        Value::Number(number) => Value::String(number.as_str().to_owned()),
        other => other.clone(),
    }
}

/// When the intent's current stretch of not knowing began: the first move into `unknown`
/// after its last settled status (a re-send goes `unknown` to `in_flight` and back, and stays
/// in the stretch).
fn unknown_since_ms(events: &[Event]) -> Option<i64> {
    let settled = |status: &str| !matches!(status, "unknown" | "in_flight");
    let start = events
        .iter()
        .rposition(|event| event.to_status.as_deref().is_some_and(settled))
        .map_or(0, |index| index + 1);
    events[start..]
        .iter()
        .find(|event| event.to_status.as_deref() == Some("unknown"))
        .map(|event| event.at_ms)
}

/// What the newest attempt or step that left the intent unknown said: the detail of the
/// newest event written by one (they carry who learned it: `lookup`, `sweeper`, ...).
fn last_error(events: &[Event]) -> Option<String> {
    events
        .iter()
        .rev()
        .find(|event| {
            event.to_status.as_deref() == Some("unknown")
                && event.actor.is_some()
                && event
                    .detail
                    .as_deref()
                    .is_some_and(|detail| !detail.is_empty())
        })
        .and_then(|event| event.detail.as_deref())
        .map(|detail| intentgate_core::text::cut(detail, LAST_ERROR_LENGTH_MAX).to_owned())
}

/// The sweeper's plan for an `unknown` intent, as this gateway's gate computes it; `None`
/// without a gate, or for an intent in another status.
fn sweeper(state: &AdminState, intent: &IntentRecord) -> Option<Value> {
    let plan = state.gate.as_ref()?.unknown_plan(intent)?;
    let (resends, until_ms, why) = match plan.resends {
        Resends::Active { until_ms } => ("active", Some(until_ms), None),
        Resends::LookupsOnly { why } => ("lookups_only", None, Some(why)),
        Resends::Stopped { why } => ("stopped", None, Some(why)),
    };
    Some(json!({
        "next_step_ms": plan.next_step_ms,
        "resends": resends,
        "resend_until_ms": until_ms,
        "why": why,
    }))
}

/// The body of `POST /v1/admin/intents/{id}/resolve`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct ResolveBody {
    /// `done` or `not_executed`. Required.
    status: Option<String>,
    /// The provider's id for the effect: required for `done`, refused otherwise.
    external_id: Option<String>,
    /// Why (what the provider's dashboard or the customer says). Required.
    reason: Option<String>,
    /// Who resolves it; the console's user or the gateway's default when absent.
    actor: Option<String>,
}

const RESOLVE_SHAPE: &str = r#"{"status": "done" or "not_executed", "external_id": "the provider's id (for done)", "reason": "why", "actor": "who (optional)"}"#;

/// Resolves an intent by hand: `done` (the provider performed it) or `not_executed`.
#[utoipa::path(
    post,
    path = "/v1/admin/intents/{id}/resolve",
    operation_id = "admin_resolve_intent",
    params(("id" = String, Path, description = "The intent's id.")),
    request_body(content = ResolveBody, content_type = "application/json"),
    responses(
        (status = 200, description = "The intent as resolved.", body = Object),
        (status = 400, description = "An id that is not a number, or a body that is not JSON."),
        (status = 404, description = "No such intent."),
        (status = 409, description = "The intent can't be resolved now: settled (`not-resolvable`), or a call \
         or the sweeper holds its lease (`lease-held`: the detail names the holder and the lease's end, \
         and `Retry-After` says in how many seconds to try again)."),
        (status = 422, description = "A body of the wrong shape, a status an operator can't set, or a missing reason."),
    ),
)]
pub(crate) async fn resolve(
    State(state): State<Arc<AdminState>>,
    console: Option<Extension<ConsoleUser>>,
    Path(id): Path<String>,
    request: Result<Bytes, BytesRejection>,
) -> Result<Json<IntentRecord>, Problem> {
    let id = body::id(&id, "an intent")?;
    let request: ResolveBody = body::json(request, RESOLVE_SHAPE)?;
    let status = match request.status.as_deref() {
        Some("done") => IntentStatus::Done,
        Some("not_executed") => IntentStatus::NotExecuted,
        Some(other) => {
            return Err(unprocessable(
                "invalid-status",
                "Not a status an operator can set",
                format!(
                    "an intent can be resolved by hand only as done or not_executed, not \
`{other}`"
                ),
            ));
        }
        None => {
            return Err(Problem::invalid_body(format!(
                "the body must be {RESOLVE_SHAPE}"
            )));
        }
    };
    let asked = ManualResolution {
        status,
        external_id: request.external_id,
        reason: request.reason.unwrap_or_default(),
        actor: crate::flags::actor(request.actor, &state.actor_default, console)?,
    };
    asked
        .check()
        .map_err(|detail| unprocessable("invalid-resolution", "Invalid resolution", detail))?;
    let intent = read(&state, &id.to_string()).await?;
    let now_ms = now_ms();
    check_resolvable(&intent, status, now_ms).map_err(|refused| not_resolvable(id, &refused))?;
    let resolved = match state.ledger.resolve(asked.to_resolve(id, now_ms)).await {
        Ok(resolved) => resolved,
        // A lease taken after the read above: the ledger refused inside its transaction.
        Err(error) => {
            return Err(
                match Unresolvable::from_ledger(&error, intent.status, now_ms) {
                    Some(refused) => not_resolvable(id, &refused),
                    None => body::ledger_problem(error),
                },
            );
        }
    };
    tracing::warn!(
        intent = id,
        tool = %resolved.tool,
        from = %intent.status,
        to = %resolved.status,
        actor = %asked.actor,
        "intent resolved by hand through the admin API"
    );
    Ok(Json(resolved))
}

/// The 409 of a resolution refused: the intent is settled, or a lease lives (then with
/// `Retry-After`, the lease's end).
fn not_resolvable(id: i64, refused: &Unresolvable) -> Problem {
    let (kind, title) = match refused {
        Unresolvable::LeaseHeld { .. } => ("lease-held", "The intent is leased right now"),
        Unresolvable::Settled { .. } => ("not-resolvable", "The intent can't be resolved"),
    };
    let mut problem = Problem::new(
        StatusCode::CONFLICT,
        kind,
        title,
        format!(
            "current status: {}; {}",
            refused.status(),
            refused.message(id)
        ),
    );
    problem.retry_after_seconds = refused.retry_after_seconds();
    problem
}

/// The body of `POST /v1/admin/intents/{id}/reopen`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct ReopenBody {
    /// Why the stored refusal was wrong (the misconfiguration that caused it, now fixed).
    /// Required.
    reason: Option<String>,
    /// Who reopens it; the console's user or the gateway's default when absent.
    actor: Option<String>,
}

const REOPEN_SHAPE: &str =
    r#"{"reason": "why the stored refusal was wrong", "actor": "who (optional)"}"#;

/// Reopens a `rejected` intent whose refusal was wrong (the gateway's own error, such as a
/// wrong API key answered 401): it becomes `not_executed`, with a new provider-key epoch, and
/// the next call of the tool executes it. The event log keeps who and why (kind `reopen`).
#[utoipa::path(
    post,
    path = "/v1/admin/intents/{id}/reopen",
    operation_id = "admin_reopen_intent",
    params(("id" = String, Path, description = "The intent's id.")),
    request_body(content = ReopenBody, content_type = "application/json"),
    responses(
        (status = 200, description = "The intent as reopened (`not_executed`).", body = Object),
        (status = 400, description = "An id that is not a number, or a body that is not JSON."),
        (status = 404, description = "No such intent."),
        (status = 409, description = "The intent is not rejected (done, unknown, not_executed, ...)."),
        (status = 422, description = "A body of the wrong shape, or a missing reason."),
    ),
)]
pub(crate) async fn reopen(
    State(state): State<Arc<AdminState>>,
    console: Option<Extension<ConsoleUser>>,
    Path(id): Path<String>,
    request: Result<Bytes, BytesRejection>,
) -> Result<Json<IntentRecord>, Problem> {
    let id = body::id(&id, "an intent")?;
    let request: ReopenBody = body::json(request, REOPEN_SHAPE)?;
    let asked = ManualReopen {
        reason: request.reason.unwrap_or_default(),
        actor: crate::flags::actor(request.actor, &state.actor_default, console)?,
    };
    asked
        .check()
        .map_err(|detail| unprocessable("invalid-reopen", "Invalid reopening", detail))?;
    let intent = read(&state, &id.to_string()).await?;
    let not_reopenable = |detail: String| {
        Problem::new(
            StatusCode::CONFLICT,
            "not-reopenable",
            "The intent can't be reopened",
            detail,
        )
    };
    check_reopenable(&intent).map_err(not_reopenable)?;
    let reopened = match state.ledger.resolve(asked.to_resolve(id, now_ms())).await {
        Ok(reopened) => reopened,
        // Changed between the read and the write (a retry_rejected call started an attempt).
        Err(LedgerError::Transition(illegal)) => {
            return Err(not_reopenable(format!(
                "intent {id} became {} while it was being reopened; nothing was changed",
                illegal.from
            )));
        }
        Err(error) => return Err(body::ledger_problem(error)),
    };
    tracing::warn!(
        intent = id,
        tool = %reopened.tool,
        actor = %asked.actor,
        "rejected intent reopened by hand through the admin API; the next call executes it"
    );
    Ok(Json(reopened))
}

/// The body of `POST /v1/admin/erasures`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct EraseBody {
    /// Whose data to erase.
    tenant: String,
    /// Only this tool's intents.
    tool: Option<String>,
    /// Only this intent key of the tool.
    key: Option<String>,
    /// Why (the request it answers). Required.
    reason: Option<String>,
    /// Who asks; the console's user or the gateway's default when absent.
    actor: Option<String>,
    /// Erase intents that are not settled too.
    #[serde(default)]
    force: bool,
}

const ERASE_SHAPE: &str = r#"{"tenant": "whose data", "tool": "only this tool (optional)", "key": "only this intent key of the tool (optional)", "reason": "why", "actor": "who (optional)", "force": false}"#;

/// Erases a tenant's intents (or a tool's, or one key's), with their events and the
/// reconciliation mismatches that name them. 409 when a call holds one of them, or one is
/// not settled and `force` is not set.
#[utoipa::path(
    post,
    path = "/v1/admin/erasures",
    operation_id = "admin_erase",
    request_body(content = EraseBody, content_type = "application/json"),
    responses(
        (status = 200, description = "What was erased: `{\"erased\": {\"intents\": n, \"events\": n, \
         \"mismatches\": n}}`.", body = Object),
        (status = 400, description = "A body that is not JSON."),
        (status = 409, description = "A call holds one of the intents, or one is not settled and `force` is not set; the detail says what was erased before."),
        (status = 422, description = "A body of the wrong shape, or no tenant, reason or actor."),
    ),
)]
pub(crate) async fn erase(
    State(state): State<Arc<AdminState>>,
    console: Option<Extension<ConsoleUser>>,
    request: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, Problem> {
    let request: EraseBody = body::json(request, ERASE_SHAPE)?;
    let erase = Erase {
        tenant: request.tenant,
        tool: request.tool.filter(|tool| !tool.is_empty()),
        key: request.key.filter(|key| !key.is_empty()),
        force: request.force,
        actor: crate::flags::actor(request.actor, &state.actor_default, console)?,
        reason: request.reason.unwrap_or_default(),
        now_ms: now_ms(),
    };
    check_erase(&erase)
        .map_err(|detail| unprocessable("invalid-erasure", "Invalid erasure", detail))?;
    let report = erase_all(state.ledger.as_ref(), &erase)
        .await
        .map_err(body::ledger_problem)?;
    if let Some(refused) = &report.refused {
        let erased = &report.erased;
        return Err(Problem::new(
            StatusCode::CONFLICT,
            "not-erasable",
            "Not everything could be erased",
            format!(
                "{}; erased before this: {} intents, {} events, {} reconciliation mismatches",
                refused.message(),
                erased.intents,
                erased.events,
                erased.mismatches
            ),
        ));
    }
    Ok(Json(json!({ "erased": report.erased })))
}
