//! `GET /v1/admin/flags` and `PUT /v1/admin/flags/{tool}`: the kill switch.
//!
//! A flag is a row of the ledger, so every replica sharing the ledger reads it (the gate
//! every 500 ms); a switched-off tool answers `disabled` and executes nothing.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use intentgate_core::limits::{ACTOR_LENGTH_MAX, EVENT_DETAIL_LENGTH_MAX};
use intentgate_ledger::ToolFlag;
use intentgate_server::Problem;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::auth::ConsoleUser;
use crate::body::{self, unprocessable};
use crate::{AdminState, now_ms};

/// A tool's flag as the admin API shows it. A configured tool that was never switched has
/// no stored flag: it is enabled, with no reason, actor or time.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct FlagView {
    /// The tool's name.
    tool: String,
    /// The tool is in this gateway's config (false: a flag stored for a tool since removed).
    configured: bool,
    /// Whether the tool may be called; a switched-off tool answers `disabled`.
    enabled: bool,
    /// Why it was last switched (`null`: never switched).
    reason: Option<String>,
    /// Who last switched it (`null`: never switched).
    actor: Option<String>,
    /// When it was last switched, in milliseconds since the Unix epoch (`null`: never).
    updated_ms: Option<i64>,
}

/// The answer of `GET /v1/admin/flags`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct FlagList {
    /// Every configured tool's flag in config order, then the stored flags of tools no
    /// longer configured, by name.
    flags: Vec<FlagView>,
}

impl FlagView {
    fn stored(flag: ToolFlag, configured: bool) -> FlagView {
        FlagView {
            tool: flag.tool,
            configured,
            enabled: flag.enabled,
            reason: Some(flag.reason),
            actor: Some(flag.actor),
            updated_ms: Some(flag.updated_ms),
        }
    }
}

/// Every configured tool's kill-switch flag, and the stored flags of tools no longer
/// configured.
#[utoipa::path(
    get,
    path = "/v1/admin/flags",
    operation_id = "admin_list_flags",
    responses((status = 200, description = "The flags.", body = FlagList)),
)]
pub(crate) async fn list(State(state): State<Arc<AdminState>>) -> Result<Json<FlagList>, Problem> {
    let mut stored = state
        .ledger
        .tool_flags()
        .await
        .map_err(body::ledger_problem)?;
    stored.sort_by(|a, b| a.tool.cmp(&b.tool));
    let mut flags: Vec<FlagView> = Vec::with_capacity(state.tools.len() + stored.len());
    for tool in &state.tools {
        match stored.iter().position(|flag| &flag.tool == tool) {
            Some(index) => flags.push(FlagView::stored(stored.remove(index), true)),
            None => flags.push(FlagView {
                tool: tool.clone(),
                configured: true,
                enabled: true,
                reason: None,
                actor: None,
                updated_ms: None,
            }),
        }
    }
    flags.extend(stored.into_iter().map(|flag| FlagView::stored(flag, false)));
    Ok(Json(FlagList { flags }))
}

/// The body of `PUT /v1/admin/flags/{tool}`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct SetFlag {
    /// Whether the tool may be called. Required.
    enabled: Option<bool>,
    /// Why (the incident, the ticket): required to switch a tool off, at most 4096 bytes.
    reason: Option<String>,
    /// Who switches it; the console's user or the gateway's default when absent.
    actor: Option<String>,
}

const SET_FLAG_SHAPE: &str = r#"{"enabled": false, "reason": "why", "actor": "who (optional)"}"#;

/// Switches a configured tool off or on, for every replica that shares the ledger.
#[utoipa::path(
    put,
    path = "/v1/admin/flags/{tool}",
    operation_id = "admin_set_flag",
    params(("tool" = String, Path, description = "A configured tool's name.")),
    request_body(content = SetFlag, content_type = "application/json"),
    responses(
        (status = 200, description = "The flag as stored.", body = FlagView),
        (status = 400, description = "A body that is not JSON, or has unknown fields."),
        (status = 404, description = "No such tool in this gateway's config."),
        (status = 422, description = "No `enabled`, no reason to switch a tool off, or a value too long."),
    ),
)]
pub(crate) async fn set(
    State(state): State<Arc<AdminState>>,
    console: Option<Extension<ConsoleUser>>,
    Path(tool): Path<String>,
    request: Result<Bytes, BytesRejection>,
) -> Result<Json<FlagView>, Problem> {
    if !state.tools.contains(&tool) {
        return Err(Problem::new(
            StatusCode::NOT_FOUND,
            "unknown-tool",
            "Unknown tool",
            format!(
                "no tool named `{tool}` in this gateway's config; the tools are: {}",
                state.tools.join(", ")
            ),
        ));
    }
    let request: SetFlag = body::json(request, SET_FLAG_SHAPE)?;
    let Some(enabled) = request.enabled else {
        return Err(Problem::invalid_body(format!(
            "say whether the tool is on: the body must be {SET_FLAG_SHAPE}"
        )));
    };
    let reason = request.reason.unwrap_or_default().trim().to_owned();
    if !enabled && reason.is_empty() {
        return Err(unprocessable(
            "missing-reason",
            "A reason is required",
            "switching a tool off needs a reason (the incident, the ticket): it is stored with \
the flag and shown to whoever switches it back on"
                .to_owned(),
        ));
    }
    if reason.len() > EVENT_DETAIL_LENGTH_MAX {
        return Err(unprocessable(
            "too-long",
            "The reason is too long",
            format!(
                "the reason is {} bytes long; the limit is {EVENT_DETAIL_LENGTH_MAX}",
                reason.len()
            ),
        ));
    }
    let actor = actor(request.actor, &state.actor_default, console)?;
    let flag = ToolFlag {
        tool: tool.clone(),
        enabled,
        reason,
        actor,
        updated_ms: now_ms(),
    };
    state
        .ledger
        .set_tool_flag(flag.clone())
        .await
        .map_err(body::ledger_problem)?;
    tracing::warn!(
        tool = %flag.tool,
        enabled = flag.enabled,
        actor = %flag.actor,
        reason = %flag.reason,
        "tool flag set through the admin API"
    );
    // Answer the flag as stored (the ledger may have cut its text).
    let stored = state
        .ledger
        .tool_flags()
        .await
        .map_err(body::ledger_problem)?
        .into_iter()
        .find(|stored| stored.tool == tool)
        .unwrap_or(flag);
    Ok(Json(FlagView::stored(stored, true)))
}

/// The actor a request names, or the default; 422 when empty or over the ledger's limit. A
/// console user's change is recorded under the user who signed in, whatever the body says.
pub(crate) fn actor(
    asked: Option<String>,
    default: &str,
    console: Option<Extension<ConsoleUser>>,
) -> Result<String, Problem> {
    let actor = match (console, asked) {
        (Some(Extension(user)), _) => user.actor,
        (None, Some(actor)) => actor.trim().to_owned(),
        (None, None) => default.to_owned(),
    };
    if actor.is_empty() {
        return Err(Problem::invalid_body(
            "the actor (who makes the change) must not be empty; leave it out to use the \
default"
                .to_owned(),
        ));
    }
    if actor.len() > ACTOR_LENGTH_MAX {
        return Err(unprocessable(
            "too-long",
            "The actor is too long",
            format!(
                "the actor is {} bytes long; the limit is {ACTOR_LENGTH_MAX}",
                actor.len()
            ),
        ));
    }
    Ok(actor)
}
