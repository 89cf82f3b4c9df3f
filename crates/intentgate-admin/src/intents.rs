//! `GET /v1/admin/intents`, `GET /v1/admin/intents/{id}`,
//! `POST /v1/admin/intents/{id}/resolve` and `POST /v1/admin/erasures`.

use std::str::FromStr;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use intentgate_core::IntentStatus;
use intentgate_ledger::{Erase, IntentFilter, IntentRecord, Order};
use intentgate_server::Problem;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::body::{self, bad_request, unprocessable};
use crate::erasure::{check_erase, erase_all};
use crate::resolution::{ManualResolution, check_resolvable};
use crate::{AdminState, EVENTS_SHOWN_MAX, INTENTS_LIMIT_DEFAULT, INTENTS_LIMIT_MAX, now_ms};

/// The query of `GET /v1/admin/intents`. Every value is read as text so that a wrong one
/// gets a problem naming what is accepted; an empty value counts as absent.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    tool: Option<String>,
    status: Option<String>,
    tenant: Option<String>,
    key: Option<String>,
    order: Option<String>,
    cursor: Option<String>,
    limit: Option<String>,
}

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
    let filter = IntentFilter {
        tenant: present(query.tenant),
        tool: present(query.tool),
        key: present(query.key),
        status,
        ..IntentFilter::default()
    };
    // One more than the page: whether it exists says whether there is a next page.
    let mut intents = state
        .ledger
        .intents(&filter, order, cursor, limit + 1)
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
    let omitted = events.len().saturating_sub(EVENTS_SHOWN_MAX);
    events.drain(..omitted);
    Ok(Json(json!({
        "intent": intent,
        "events": events,
        "events_omitted": omitted,
    })))
}

/// The body of `POST /v1/admin/intents/{id}/resolve`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ResolveBody {
    status: Option<String>,
    external_id: Option<String>,
    reason: Option<String>,
    actor: Option<String>,
}

const RESOLVE_SHAPE: &str = r#"{"status": "done" or "not_executed", "external_id": "the provider's id (for done)", "reason": "why", "actor": "who (optional)"}"#;

pub(crate) async fn resolve(
    State(state): State<Arc<AdminState>>,
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
            return Err(unprocessable(
                "invalid-body",
                "Missing status",
                format!("the body must be {RESOLVE_SHAPE}"),
            ));
        }
    };
    let asked = ManualResolution {
        status,
        external_id: request.external_id,
        reason: request.reason.unwrap_or_default(),
        actor: crate::flags::actor(request.actor, &state.actor_default)?,
    };
    asked
        .check()
        .map_err(|detail| unprocessable("invalid-resolution", "Invalid resolution", detail))?;
    let intent = read(&state, &id.to_string()).await?;
    let now_ms = now_ms();
    check_resolvable(&intent, status, now_ms).map_err(|unresolvable| {
        Problem::new(
            StatusCode::CONFLICT,
            "not-resolvable",
            "The intent can't be resolved",
            format!(
                "current status: {}; {}",
                unresolvable.status(),
                unresolvable.message(id)
            ),
        )
    })?;
    let resolved = state
        .ledger
        .resolve(asked.to_resolve(id, now_ms))
        .await
        .map_err(body::ledger_problem)?;
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

/// The body of `POST /v1/admin/erasures`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EraseBody {
    tenant: String,
    tool: Option<String>,
    key: Option<String>,
    reason: Option<String>,
    actor: Option<String>,
    #[serde(default)]
    force: bool,
}

const ERASE_SHAPE: &str = r#"{"tenant": "whose data", "tool": "only this tool (optional)", "key": "only this intent key of the tool (optional)", "reason": "why", "actor": "who (optional)", "force": false}"#;

/// Erases a tenant's intents (or a tool's, or one key's), with their events and the
/// reconciliation mismatches that name them. 409 when a call holds one of them, or one is
/// not settled and `force` is not set.
pub(crate) async fn erase(
    State(state): State<Arc<AdminState>>,
    request: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, Problem> {
    let request: EraseBody = body::json(request, ERASE_SHAPE)?;
    let erase = Erase {
        tenant: request.tenant,
        tool: request.tool.filter(|tool| !tool.is_empty()),
        key: request.key.filter(|key| !key.is_empty()),
        force: request.force,
        actor: crate::flags::actor(request.actor, &state.actor_default)?,
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
