//! `GET /v1/admin/approvals`, `POST /v1/admin/approvals/{id}/approve` and
//! `POST /v1/admin/approvals/{id}/deny`: the intents held for approval, and an approver's
//! decision on one (docs/design.md section 13).
//!
//! These routes have their own credential check ([`crate::auth::require_access`]): besides
//! the admin API's credentials, a credential with the `approve` scope may read its own
//! tenant's held intents. Only an approver decides: a credential (or a console session
//! signed in with one) with the `approve` scope, which `admin` does not include, on an
//! intent of its own tenant, never one it asked for itself (the ledger refuses that). The
//! admin token names nobody and can't decide.
//!
//! A decision goes through [`Gate::decide`](intentgate_gate::Gate::decide): the ledger
//! records it, an approved intent counts against its budgets, and the gateway executes it at
//! once where it can rebuild the request from what the ledger keeps (otherwise at the
//! intent's next call, or the sweeper's next round).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use intentgate_core::IntentStatus;
use intentgate_core::sensitive::HASH_PREFIX;
use intentgate_gate::GateError;
use intentgate_ledger::{
    Approval, ApprovalFilter, ApprovalState, Decided, Decision, HeldIntent, IntentId, IntentRecord,
};
use intentgate_server::Problem;
use serde::Deserialize;
use serde_json::{Value, json};
use utoipa::{IntoParams, ToSchema};

use crate::auth::{Access, Approver};
use crate::body::{self, bad_request, unprocessable};
use crate::{AdminState, EVENTS_SHOWN_MAX, now_ms};

/// Held intents per page when the request names no `limit`.
pub const APPROVALS_LIMIT_DEFAULT: u32 = 50;
/// Most held intents per page: each is read with its event log, and an approver reads the
/// page card by card.
pub const APPROVALS_LIMIT_MAX: u32 = 200;
/// Most events shown with each held intent (the newest): its history up to the hold is a
/// few events, and a storm of repeated calls must not make one page large.
pub const APPROVAL_EVENTS_SHOWN_MAX: usize = 100;
/// Longest reason of a decision, in bytes: a denial's reason is read by the model and by the
/// person who asked, so a few sentences; far below the event log's limit.
pub const REASON_LENGTH_MAX: usize = 1024;
/// What stands in for a value the tool's schema marks sensitive but the ledger holds in
/// clear (kept before the mark was added, and hashed by no key this gateway has).
pub const REDACTED: &str = "redacted";

const _: () = assert!(APPROVAL_EVENTS_SHOWN_MAX <= EVENTS_SHOWN_MAX);
const _: () = assert!(REASON_LENGTH_MAX <= intentgate_core::limits::EVENT_DETAIL_LENGTH_MAX);

/// The query of `GET /v1/admin/approvals`. Every value is read as text so that a wrong one
/// gets a problem naming what is accepted; an empty value counts as absent.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListQuery {
    /// `open` (the default: nobody has decided yet), `approved` (approved, its attempt not
    /// started yet) or `closed` (decided or expired).
    state: Option<String>,
    /// Only this tool's held intents.
    tool: Option<String>,
    /// Only this tenant's; an approver without the `admin` scope reads only its own.
    tenant: Option<String>,
    /// The `next_cursor` of the previous page (an intent id).
    before: Option<String>,
    /// Held intents per page: 1 to 200, 50 by default.
    limit: Option<String>,
}

fn present(value: Option<String>) -> Option<String> {
    value.filter(|value| !value.is_empty())
}

/// Held intents with their requests for approval, newest intent first: each with its exact
/// arguments as the ledger keeps them (sensitive ones as keyed hashes), who asked and when,
/// the deadline, what held it, the decision, its event log and whether this caller may
/// decide on it now.
#[utoipa::path(
    get,
    path = "/v1/admin/approvals",
    operation_id = "admin_list_approvals",
    params(ListQuery),
    responses(
        (status = 200, description = "`{\"approvals\": [held...], \"next_cursor\": id or null}`. Each \
         held intent: `intent_id`, `tool`, `tenant`, `key`, `status` (the intent's), `arguments` (as \
         the ledger keeps them: numbers as written, sensitive values as `hmac-sha256:` keyed hashes), \
         `requested_by`, `requested_ms`, `deadline_ms`, `held_by`, `application_intent_id`, \
         `decision` (`approved`, `denied`, `expired` or null while open), `decided_by`, \
         `decided_ms`, `reason`, `console_url`, `events` (oldest first, the newest 100), \
         `events_omitted` and `decidable` (`{now: bool, reason}`: whether this caller may decide \
         on it now, and why not).", body = Object),
        (status = 400, description = "An unknown query parameter or a value out of range; the detail names what is accepted."),
        (status = 403, description = "A credential with neither the `approve` nor the `admin` scope \
         (`missing-scope`), or an approver asking for another tenant's (`other-tenant`)."),
    ),
)]
pub(crate) async fn list(
    State(state): State<Arc<AdminState>>,
    Extension(access): Extension<Access>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<Value>, Problem> {
    let query = body::query(query)?;
    let approval_state = match present(query.state).as_deref() {
        None | Some("open") => ApprovalState::Open,
        Some("approved") => ApprovalState::Approved,
        Some("closed") => ApprovalState::Closed,
        Some(other) => {
            return Err(bad_request(
                "bad-query",
                "Invalid state",
                format!("state must be open (the default), approved or closed, not `{other}`"),
            ));
        }
    };
    let mut tenant = present(query.tenant);
    if !access.admin {
        // Let in by `require_access`: an approver, reading its own tenant's only.
        let approver = access
            .approver
            .as_ref()
            .expect("require_access lets in only admins and approvers");
        if let Some(asked) = tenant.as_ref().filter(|asked| **asked != approver.tenant) {
            return Err(other_tenant(approver, asked, "read the held intents of"));
        }
        tenant = Some(approver.tenant.clone());
    }
    let before = match present(query.before) {
        None => None,
        Some(text) => Some(body::id(&text, "an intent").map_err(|_| {
            bad_request(
                "bad-query",
                "Invalid before",
                format!(
                    "before must be the next_cursor of the previous page (an intent id), not \
`{text}`"
                ),
            )
        })?),
    };
    let limit = body::limit(
        query.limit.as_deref(),
        APPROVALS_LIMIT_DEFAULT,
        APPROVALS_LIMIT_MAX,
    )?;
    let filter = ApprovalFilter {
        tenant,
        tool: present(query.tool),
        state: Some(approval_state),
    };
    // One more than the page: whether it exists says whether there is a next page.
    let mut held = state
        .ledger
        .approvals(&filter, before, limit + 1)
        .await
        .map_err(body::ledger_problem)?;
    let next_cursor = if held.len() > limit as usize {
        held.truncate(limit as usize);
        held.last().map(|held| held.intent.id)
    } else {
        None
    };
    let now_ms = now_ms();
    let mut approvals = Vec::with_capacity(held.len());
    for held in held {
        let mut events = state
            .ledger
            .events(held.intent.id)
            .await
            .map_err(body::ledger_problem)?;
        let omitted = events.len().saturating_sub(APPROVAL_EVENTS_SHOWN_MAX);
        events.drain(..omitted);
        let mut entry = view(&state, &held, now_ms);
        if let Value::Object(fields) = &mut entry {
            fields.insert("events".to_owned(), json!(events));
            fields.insert("events_omitted".to_owned(), json!(omitted));
            fields.insert(
                "decidable".to_owned(),
                decidable(&access, &held.approval, &held.intent, now_ms),
            );
        }
        approvals.push(entry);
    }
    Ok(Json(
        json!({ "approvals": approvals, "next_cursor": next_cursor }),
    ))
}

/// A held intent as the approvals routes show it (without its events).
fn view(state: &AdminState, held: &HeldIntent, now_ms: i64) -> Value {
    let (intent, approval) = (&held.intent, &held.approval);
    json!({
        "intent_id": intent.id,
        "tool": intent.tool,
        "tenant": intent.tenant,
        "key": intent.key,
        "status": intent.status,
        "arguments": redacted_arguments(state, intent),
        "requested_by": approval.requested_by,
        "requested_ms": approval.requested_ms,
        "deadline_ms": approval.deadline_ms,
        "overdue": approval.decision.is_none() && now_ms >= approval.deadline_ms,
        "held_by": approval.held_by,
        "application_intent_id": approval.intent_id,
        "decision": approval.decision,
        "decided_by": approval.decided_by,
        "decided_ms": approval.decided_ms,
        "reason": approval.reason,
        "console_url": format!("{}/intents/{}", intentgate_server::edge::CONSOLE_PATH, intent.id),
    })
}

/// The intent's arguments as the ledger keeps them, with any value the tool's schema (as
/// this gateway has it) marks sensitive that is not already a keyed hash hashed now (or,
/// without a hash key, replaced by [`REDACTED`]): a mark added after the intent was stored
/// hides its value here too.
fn redacted_arguments(state: &AdminState, intent: &IntentRecord) -> Value {
    let mut arguments = intent.arguments.clone();
    let Some(tool) = state.gate.as_ref().and_then(|gate| gate.tool(&intent.tool)) else {
        return arguments;
    };
    for path in &tool.sensitive {
        let slot = path
            .segments()
            .iter()
            .try_fold(&mut arguments, |value, name| {
                value.as_object_mut()?.get_mut(name)
            });
        let Some(slot) = slot else { continue };
        if slot
            .as_str()
            .is_some_and(|text| text.starts_with(HASH_PREFIX))
        {
            continue;
        }
        *slot = Value::String(match &tool.hash_key {
            Some(key) => key.hash_value(slot),
            None => REDACTED.to_owned(),
        });
    }
    arguments
}

/// Whether the caller may decide on this held intent now, and if not, why (the refusal a
/// decision would get), for the console to show instead of its buttons.
fn decidable(access: &Access, approval: &Approval, intent: &IntentRecord, now_ms: i64) -> Value {
    let why = match &access.approver {
        None => Some(scope_required_detail()),
        Some(approver) if approver.tenant != intent.tenant => Some(format!(
            "intent {} belongs to tenant `{}`; you approve for tenant `{}` only",
            intent.id, intent.tenant, approver.tenant
        )),
        Some(approver) if approver.subject == approval.requested_by => Some(format!(
            "`{}` asked for intent {} itself, and nobody approves their own request; another \
approver must decide",
            approval.requested_by, intent.id
        )),
        Some(_) if approval.decision.is_some() || intent.status != IntentStatus::Pending => {
            Some(format!("intent {} is not awaiting a decision", intent.id))
        }
        Some(_) if now_ms >= approval.deadline_ms => Some(format!(
            "the request's deadline has passed; intent {} is settled not_executed at the next \
sweep, and a new call of it is held again",
            intent.id
        )),
        Some(_) => None,
    };
    json!({ "now": why.is_none(), "reason": why })
}

/// The body of `POST /v1/admin/approvals/{id}/approve` and `.../deny`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct DecisionBody {
    /// Why: optional for an approval, required for a denial (the model that asked reads it).
    /// At most 1024 bytes.
    reason: Option<String>,
}

const APPROVE_SHAPE: &str = r#"{"reason": "why (optional)"} or no body"#;
const DENY_SHAPE: &str = r#"{"reason": "why it is denied (the model reads it)"}"#;

/// Approves a held intent: the ledger records the approval (counting the intent against its
/// budgets) and the gateway executes the intent at once, through its usual key, lease,
/// lookup and classification, where it can rebuild the request from what the ledger keeps;
/// otherwise the intent runs at its next call. Repeats of the intent are then answered from
/// the ledger.
#[utoipa::path(
    post,
    path = "/v1/admin/approvals/{id}/approve",
    operation_id = "admin_approve_intent",
    params(("id" = String, Path, description = "The held intent's id.")),
    request_body(content = DecisionBody, content_type = "application/json"),
    responses(
        (status = 200, description = "`{\"decision\": \"approved\", \"approval\": held, \"intent\": intent, \
         \"outcome\": outcome or null, \"runs\": \"executed\" or \"at_next_call\"}`: the held intent \
         as `GET /v1/admin/approvals` shows it, the intent as it now stands, and the outcome of the \
         call the gateway made (its `status`: `done`, `rejected`, `unknown`, ...), or null when the \
         intent runs at its next call (sensitive arguments, a client-executed tool, a tool switched \
         off).", body = Object),
        (status = 400, description = "An id that is not a number, or a body that is not JSON."),
        (status = 403, description = "Not an approver (`approve-scope-required`: the admin token and \
         credentials without the `approve` scope can't decide), an intent of another tenant \
         (`other-tenant`), or the approver is the caller that asked (`own-request`)."),
        (status = 404, description = "No such intent."),
        (status = 409, description = "Not awaiting a decision (`not-awaiting`: decided already, \
         expired, or never held), or its deadline had passed (`expired`: the request is now \
         expired and the intent not_executed)."),
        (status = 422, description = "A body of the wrong shape, or a reason over 1024 bytes."),
        (status = 501, description = "This admin API is served without a gate, which decides."),
    ),
)]
pub(crate) async fn approve(
    State(state): State<Arc<AdminState>>,
    Extension(access): Extension<Access>,
    Path(id): Path<String>,
    request: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, Problem> {
    decide(&state, &access, &id, request, true).await
}

/// Denies a held intent: it is settled `rejected` with the approver's reason, which the
/// model that asked reads at its next call, and stays so even for a tool that retries
/// rejections.
#[utoipa::path(
    post,
    path = "/v1/admin/approvals/{id}/deny",
    operation_id = "admin_deny_intent",
    params(("id" = String, Path, description = "The held intent's id.")),
    request_body(content = DecisionBody, content_type = "application/json"),
    responses(
        (status = 200, description = "`{\"decision\": \"denied\", \"approval\": held, \"intent\": intent, \
         \"outcome\": null, \"runs\": \"never\"}`: the intent is `rejected`.", body = Object),
        (status = 400, description = "An id that is not a number, or a body that is not JSON."),
        (status = 403, description = "Not an approver (`approve-scope-required`), an intent of \
         another tenant (`other-tenant`), or the approver is the caller that asked (`own-request`)."),
        (status = 404, description = "No such intent."),
        (status = 409, description = "Not awaiting a decision (`not-awaiting`), or its deadline \
         had passed (`expired`)."),
        (status = 422, description = "A body of the wrong shape, or no reason (`reason-required`), or \
         a reason over 1024 bytes."),
        (status = 501, description = "This admin API is served without a gate, which decides."),
    ),
)]
pub(crate) async fn deny(
    State(state): State<Arc<AdminState>>,
    Extension(access): Extension<Access>,
    Path(id): Path<String>,
    request: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, Problem> {
    decide(&state, &access, &id, request, false).await
}

/// Both decisions: who may decide is checked before the body is read, the intent's tenant
/// before anything is written.
async fn decide(
    state: &AdminState,
    access: &Access,
    id: &str,
    request: Result<Bytes, BytesRejection>,
    approve: bool,
) -> Result<Json<Value>, Problem> {
    let id = body::id(id, "an intent")?;
    let Some(approver) = &access.approver else {
        return Err(Problem::new(
            StatusCode::FORBIDDEN,
            "approve-scope-required",
            "The approve scope is required",
            scope_required_detail(),
        ));
    };
    let shape = if approve { APPROVE_SHAPE } else { DENY_SHAPE };
    let request: DecisionBody = match request {
        // An approval needs no reason, so no body at all is `{}`.
        Ok(bytes) if approve && bytes.iter().all(u8::is_ascii_whitespace) => {
            DecisionBody { reason: None }
        }
        request => body::json(request, shape)?,
    };
    let reason = request.reason.unwrap_or_default().trim().to_owned();
    check_reason(&reason, approve)?;
    let Some(gate) = state.gate.clone() else {
        return Err(Problem::new(
            StatusCode::NOT_IMPLEMENTED,
            "no-gate",
            "Decisions are not served here",
            "this admin API is served without the gateway's gate, which records a decision, \
counts the intent against its budgets and executes it; decide through `intentgate serve`'s \
admin API, or with `intentgate approvals` on the ledger",
        ));
    };
    let intent = state
        .ledger
        .get_by_id(id)
        .await
        .map_err(body::ledger_problem)?
        .ok_or_else(|| unknown_intent(id))?;
    if intent.tenant != approver.tenant {
        return Err(other_tenant(approver, &intent.tenant, "decide on"));
    }
    let outcome = gate
        .decide(id, approve, &approver.subject, &reason)
        .await
        .map_err(gate_problem)?;
    let executed = outcome.executed.map(|outcome| outcome.to_json());
    let (decision, held) = match outcome.decided {
        Decided::Approved(intent, approval) => {
            (Decision::Approved, HeldIntent { approval, intent })
        }
        Decided::Denied(intent, approval) => (Decision::Denied, HeldIntent { approval, intent }),
        Decided::Expired(_, approval) => return Err(expired(id, &approval)),
        Decided::OwnRequest(_, approval) => return Err(own_request(id, &approval)),
        Decided::NotAwaiting(intent, approval) => {
            return Err(not_awaiting(&intent, approval.as_ref()));
        }
    };
    tracing::warn!(
        intent = id,
        tool = %held.intent.tool,
        tenant = %held.intent.tenant,
        approver = %approver.subject,
        decision = decision.as_str(),
        "held intent decided through the admin API"
    );
    // The intent as it now stands: an approval the gateway executed has settled it since.
    let now = state
        .ledger
        .get_by_id(id)
        .await
        .map_err(body::ledger_problem)?
        .unwrap_or_else(|| held.intent.clone());
    let runs = match (decision, &executed) {
        (Decision::Approved, Some(_)) => "executed",
        (Decision::Approved, None) => "at_next_call",
        _ => "never",
    };
    Ok(Json(json!({
        "decision": decision,
        "approval": view(state, &held, now_ms()),
        "intent": now,
        "outcome": executed,
        "runs": runs,
    })))
}

/// A decision's reason: required for a denial, and at most [`REASON_LENGTH_MAX`] bytes.
fn check_reason(reason: &str, approve: bool) -> Result<(), Problem> {
    if !approve && reason.is_empty() {
        return Err(unprocessable(
            "reason-required",
            "A denial needs a reason",
            format!(
                "say why the intent is denied: the model that asked reads the reason, and so \
does the person it works for; the body must be {DENY_SHAPE}"
            ),
        ));
    }
    if reason.len() > REASON_LENGTH_MAX {
        return Err(unprocessable(
            "too-long",
            "The reason is too long",
            format!(
                "the reason is {} bytes long; the limit is {REASON_LENGTH_MAX}: a few sentences \
(a ticket number links the rest)",
                reason.len()
            ),
        ));
    }
    Ok(())
}

fn scope_required_detail() -> String {
    "deciding on a held intent needs a credential with the `approve` scope, which is separate \
from `admin`: the admin token names nobody, and an admin credential is not thereby allowed to \
approve; use an API key or token whose scopes include `approve` (in the console, sign in with \
one)"
        .to_owned()
}

fn other_tenant(approver: &Approver, tenant: &str, doing: &str) -> Problem {
    Problem::new(
        StatusCode::FORBIDDEN,
        "other-tenant",
        "Another tenant's intent",
        format!(
            "`{}` approves for tenant `{}` only and can't {doing} tenant `{tenant}`; an approver \
of that tenant must",
            approver.subject, approver.tenant
        ),
    )
}

fn unknown_intent(id: IntentId) -> Problem {
    Problem::new(
        StatusCode::NOT_FOUND,
        "unknown-intent",
        "No such intent",
        format!("no intent with id {id}; GET /v1/admin/approvals lists the held ones"),
    )
}

fn expired(id: IntentId, approval: &Approval) -> Problem {
    Problem::new(
        StatusCode::CONFLICT,
        "expired",
        "The request for approval has expired",
        format!(
            "nobody decided on intent {id} by its deadline ({}), so nothing was decided: the \
request is now expired and the intent not_executed; if it is still wanted, a new call of it is \
held again with a new request",
            crate::resolution::utc(approval.deadline_ms)
        ),
    )
}

fn own_request(id: IntentId, approval: &Approval) -> Problem {
    Problem::new(
        StatusCode::FORBIDDEN,
        "own-request",
        "Nobody approves their own request",
        format!(
            "`{}` asked for intent {id} itself, so it can't decide on it; nothing was changed: \
another approver of the tenant must decide",
            approval.requested_by
        ),
    )
}

fn not_awaiting(intent: &IntentRecord, approval: Option<&Approval>) -> Problem {
    let detail = match approval {
        None => format!(
            "intent {} was never held for approval (it is {}); nothing was changed",
            intent.id, intent.status
        ),
        Some(approval) => match approval.decision {
            Some(decision) => format!(
                "intent {} is not awaiting a decision: its request was {}{}{}; nothing was \
changed",
                intent.id,
                decision.as_str(),
                approval
                    .decided_by
                    .as_deref()
                    .map(|by| format!(" by `{by}`"))
                    .unwrap_or_default(),
                approval
                    .decided_ms
                    .map(|ms| format!(" at {}", crate::resolution::utc(ms)))
                    .unwrap_or_default(),
            ),
            None => format!(
                "intent {} is {}, not awaiting a decision; nothing was changed",
                intent.id, intent.status
            ),
        },
    };
    Problem::new(
        StatusCode::CONFLICT,
        "not-awaiting",
        "Not awaiting a decision",
        detail,
    )
}

fn gate_problem(error: GateError) -> Problem {
    match error {
        GateError::Ledger(error) => body::ledger_problem(error),
        other => {
            tracing::error!(error = %other, "a decision on a held intent failed in the gate");
            Problem::internal(
                "the gateway failed to carry out the decision; see its log, and read the intent \
(GET /v1/admin/approvals?state=closed) before deciding again",
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_denial_needs_a_reason_and_every_reason_is_bounded() {
        assert!(check_reason("", true).is_ok());
        assert_eq!(
            check_reason("", false).unwrap_err().status,
            StatusCode::UNPROCESSABLE_ENTITY
        );
        assert!(check_reason("the order was refunded by hand", false).is_ok());
        let long = "a".repeat(REASON_LENGTH_MAX + 1);
        assert_eq!(
            check_reason(&long, true).unwrap_err().status,
            StatusCode::UNPROCESSABLE_ENTITY
        );
    }
}
