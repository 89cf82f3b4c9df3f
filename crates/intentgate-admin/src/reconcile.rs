//! `POST /v1/admin/reconcile`, `GET /v1/admin/reconciliations`,
//! `GET /v1/admin/reconciliations/{id}` and its mismatches as CSV,
//! `GET /v1/admin/reconciliations/{id}/mismatches.csv`.
//!
//! A run is the [`Reconciler`](crate::Reconciler)'s: this module checks the request, runs
//! one reconciliation at a time, in a task of its own (a client that goes away does not cut
//! a run short), and reads stored runs back from the ledger.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use intentgate_core::text::cut;
use intentgate_ledger::{MISMATCH_KIND_LENGTH_MAX, MISMATCH_SEVERITIES, StoredMismatch};
use intentgate_server::Problem;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::auth::ConsoleUser;
use crate::body::{self, bad_request, unprocessable};
use crate::{
    AdminState, MISMATCHES_LIMIT_DEFAULT, MISMATCHES_LIMIT_MAX, RECONCILE_WINDOW_MAX,
    RUNS_LIMIT_DEFAULT, RUNS_LIMIT_MAX, parse_duration,
};

/// Longest error message of a failed run passed on to the client.
const ERROR_LENGTH_MAX: usize = 4096;

/// The body of `POST /v1/admin/reconcile`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReconcileBody {
    since: Option<String>,
    actor: Option<String>,
}

const RECONCILE_SHAPE: &str = r#"{"since": "1h", "actor": "who (optional)"}"#;

pub(crate) async fn run(
    State(state): State<Arc<AdminState>>,
    console: Option<Extension<ConsoleUser>>,
    request: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, Problem> {
    let Some(reconciler) = state.reconciler.clone() else {
        return Err(Problem::new(
            StatusCode::NOT_IMPLEMENTED,
            "no-reconciler",
            "Reconciliation is not available here",
            "this gateway was built without a reconciler, so it can't run reconciliation; \
GET /v1/admin/reconciliations still lists the runs stored in the ledger",
        ));
    };
    let request: ReconcileBody = body::json(request, RECONCILE_SHAPE)?;
    let Some(since) = request.since else {
        return Err(unprocessable(
            "invalid-body",
            "Missing since",
            format!(
                "say how far back to reconcile (30s, 15m, 1h, 2d): the body must be \
{RECONCILE_SHAPE}"
            ),
        ));
    };
    let since = parse_duration(&since)
        .map_err(|detail| unprocessable("invalid-duration", "Invalid duration", detail))?;
    if since > RECONCILE_WINDOW_MAX {
        return Err(unprocessable(
            "invalid-duration",
            "Window too long",
            format!(
                "reconciliation looks back at most {} days",
                RECONCILE_WINDOW_MAX.as_secs() / 86_400
            ),
        ));
    }
    let actor = crate::flags::actor(request.actor, &state.actor_default, console)?;
    let permit = state.reconciling.clone().try_acquire_owned().map_err(|_| {
        Problem::new(
            StatusCode::CONFLICT,
            "reconcile-running",
            "A reconciliation is already running",
            "one reconciliation runs at a time; try again when it ends (GET \
/v1/admin/reconciliations lists finished runs)",
        )
    })?;
    tracing::info!(since_s = since.as_secs(), %actor, "reconciliation started through the admin API");
    let task = tokio::spawn(async move {
        let report = reconciler.reconcile(since, &actor).await;
        drop(permit);
        report
    });
    match task.await {
        Ok(Ok(report)) => Ok(Json(report)),
        Ok(Err(message)) => {
            tracing::warn!(%message, "reconciliation through the admin API failed");
            Err(Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "reconcile-failed",
                "Reconciliation failed",
                cut(&message, ERROR_LENGTH_MAX).to_owned(),
            ))
        }
        Err(error) => {
            tracing::error!(%error, "bug: the reconciliation task failed");
            Err(Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "Internal error",
                "the reconciliation failed inside the gateway; see its log",
            ))
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LimitQuery {
    limit: Option<String>,
}

pub(crate) async fn list(
    State(state): State<Arc<AdminState>>,
    query: Result<Query<LimitQuery>, QueryRejection>,
) -> Result<Json<Value>, Problem> {
    let query = body::query(query)?;
    let limit = body::limit(query.limit.as_deref(), RUNS_LIMIT_DEFAULT, RUNS_LIMIT_MAX)?;
    let runs = state
        .ledger
        .reconciliations(limit)
        .await
        .map_err(body::ledger_problem)?;
    Ok(Json(json!({ "reconciliations": runs })))
}

pub(crate) async fn show(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
    query: Result<Query<LimitQuery>, QueryRejection>,
) -> Result<Json<Value>, Problem> {
    let id = body::id(&id, "a reconciliation")?;
    let query = body::query(query)?;
    let limit = body::limit(
        query.limit.as_deref(),
        MISMATCHES_LIMIT_DEFAULT,
        MISMATCHES_LIMIT_MAX,
    )?;
    let run = state
        .ledger
        .reconciliation(id)
        .await
        .map_err(body::ledger_problem)?
        .ok_or_else(|| unknown_run(id))?;
    let mismatches = state
        .ledger
        .reconciliation_mismatches(id, limit)
        .await
        .map_err(body::ledger_problem)?;
    // Beyond the limit, or never stored (the ledger keeps the first ones of a run).
    let not_shown = run.mismatches.saturating_sub(mismatches.len() as u64);
    Ok(Json(json!({
        "reconciliation": run,
        "mismatches": mismatches,
        "mismatches_not_shown": not_shown,
    })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CsvQuery {
    kind: Option<String>,
    severity: Option<String>,
}

/// The columns of the CSV export, in order.
const CSV_COLUMNS: [&str; 10] = [
    "run_id",
    "tool",
    "kind",
    "severity",
    "subject",
    "tenant",
    "intent_id",
    "intent_key",
    "external_ids",
    "detail",
];

/// A run's stored mismatches (of one kind or severity when asked) as CSV, one row each, with
/// who was affected (`subject`: the customer or order) and the provider's ids, for whoever
/// contacts the customers or reverses the payments.
pub(crate) async fn csv(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
    query: Result<Query<CsvQuery>, QueryRejection>,
) -> Result<Response, Problem> {
    let id = body::id(&id, "a reconciliation")?;
    let query = body::query(query)?;
    let severity = query.severity.filter(|text| !text.is_empty());
    if let Some(severity) = &severity
        && !MISMATCH_SEVERITIES.contains(&severity.as_str())
    {
        return Err(bad_request(
            "bad-query",
            "Invalid severity",
            format!(
                "`{severity}` is not a severity; one of {}",
                MISMATCH_SEVERITIES.join(", ")
            ),
        ));
    }
    let kind = query.kind.filter(|text| !text.is_empty());
    if let Some(kind) = &kind
        && (kind.len() > MISMATCH_KIND_LENGTH_MAX
            || !kind.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
    {
        return Err(bad_request(
            "bad-query",
            "Invalid kind",
            format!(
                "`{kind}` is not a mismatch kind: kinds are lowercase words joined by _, such \
as duplicate or no_intent"
            ),
        ));
    }
    if state
        .ledger
        .reconciliation(id)
        .await
        .map_err(body::ledger_problem)?
        .is_none()
    {
        return Err(unknown_run(id));
    }
    let mismatches = state
        .ledger
        .reconciliation_mismatches(id, MISMATCHES_LIMIT_MAX)
        .await
        .map_err(body::ledger_problem)?;
    let mut text = CSV_COLUMNS.join(",");
    text.push_str("\r\n");
    for mismatch in mismatches.iter().filter(|mismatch| {
        kind.as_ref().is_none_or(|kind| &mismatch.kind == kind)
            && severity
                .as_ref()
                .is_none_or(|severity| &mismatch.severity == severity)
    }) {
        csv_row(&mut text, mismatch);
    }
    let mut response = text.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/csv; charset=utf-8"),
    );
    if let Ok(disposition) = HeaderValue::from_str(&format!(
        "attachment; filename=\"reconciliation-{id}-mismatches.csv\""
    )) {
        headers.insert(header::CONTENT_DISPOSITION, disposition);
    }
    Ok(response)
}

fn csv_row(text: &mut String, mismatch: &StoredMismatch) {
    let fields = [
        mismatch.run_id.to_string(),
        mismatch.tool.clone(),
        mismatch.kind.clone(),
        mismatch.severity.clone(),
        mismatch.subject.clone().unwrap_or_default(),
        mismatch.tenant.clone().unwrap_or_default(),
        mismatch
            .intent_id
            .map(|id| id.to_string())
            .unwrap_or_default(),
        mismatch.intent_key.clone().unwrap_or_default(),
        mismatch.external_ids.join(" "),
        mismatch.detail.clone(),
    ];
    for (index, field) in fields.iter().enumerate() {
        if index > 0 {
            text.push(',');
        }
        csv_field(text, field);
    }
    text.push_str("\r\n");
}

/// One CSV field (RFC 4180), quoted, with its quotes doubled. A field that a spreadsheet
/// would run as a formula (it starts with `=`, `+`, `-`, `@`, a tab or a carriage return; a
/// subject comes from the provider's records or a caller's arguments) gets a leading `'`,
/// so it is shown as text.
fn csv_field(text: &mut String, field: &str) {
    text.push('"');
    if field.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        text.push('\'');
    }
    text.push_str(&field.replace('"', "\"\""));
    text.push('"');
}

fn unknown_run(id: i64) -> Problem {
    Problem::new(
        StatusCode::NOT_FOUND,
        "unknown-reconciliation",
        "No such reconciliation",
        format!("no reconciliation run with id {id}; GET /v1/admin/reconciliations lists them"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_are_quoted_and_formulas_are_shown_as_text() {
        let mut text = String::new();
        csv_field(&mut text, r#"say "hi", then go"#);
        assert_eq!(text, r#""say ""hi"", then go""#);
        for formula in ["=1+1", "+1", "-1", "@SUM(A1)", "\tx", "\rx"] {
            let mut text = String::new();
            csv_field(&mut text, formula);
            assert_eq!(text, format!("\"'{formula}\""), "{formula:?}");
        }
    }
}
