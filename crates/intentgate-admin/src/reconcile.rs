//! `POST /v1/admin/reconcile`, `GET /v1/admin/reconciliations` and
//! `GET /v1/admin/reconciliations/{id}` (its CSV exports are `export.rs`).
//!
//! A run is the [`Reconciler`](crate::Reconciler)'s: this module checks the request, runs
//! one reconciliation at a time, in a task of its own (a client that goes away does not cut
//! a run short), and reads stored runs back from the ledger.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use intentgate_core::text::cut;
use intentgate_server::Problem;
use serde::Deserialize;
use serde_json::{Value, json};
use utoipa::{IntoParams, ToSchema};

use crate::auth::ConsoleUser;
use crate::body::{self, unprocessable};
use crate::{
    AdminState, MISMATCHES_LIMIT_DEFAULT, MISMATCHES_LIMIT_MAX, RECONCILE_WINDOW_MAX,
    RUNS_LIMIT_DEFAULT, RUNS_LIMIT_MAX, parse_duration,
};

/// Longest error message of a failed run passed on to the client.
const ERROR_LENGTH_MAX: usize = 4096;

/// The body of `POST /v1/admin/reconcile`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct ReconcileBody {
    /// How far back to reconcile (`30s`, `15m`, `1h`, `2d`), at most a year. Required.
    since: Option<String>,
    /// Who runs it; the console's user or the gateway's default when absent.
    actor: Option<String>,
}

const RECONCILE_SHAPE: &str = r#"{"since": "1h", "actor": "who (optional)"}"#;

/// Runs reconciliation over the window that ends now, one run at a time, and answers its
/// report.
#[utoipa::path(
    post,
    path = "/v1/admin/reconcile",
    operation_id = "admin_reconcile",
    request_body(content = ReconcileBody, content_type = "application/json"),
    responses(
        (status = 200, description = "The run's report, as `intentgate reconcile --json` prints it.",
         body = Object),
        (status = 400, description = "A body that is not JSON."),
        (status = 409, description = "A reconciliation is already running."),
        (status = 422, description = "A body of the wrong shape, or no `since` or an invalid one."),
        (status = 500, description = "The reconciliation failed; the detail says why."),
        (status = 501, description = "This gateway has no reconciler."),
    ),
)]
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
        return Err(Problem::invalid_body(format!(
            "say how far back to reconcile (30s, 15m, 1h, 2d): the body must be \
{RECONCILE_SHAPE}"
        )));
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
            Err(Problem::internal(
                "the reconciliation failed inside the gateway; see its log",
            ))
        }
    }
}

#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct LimitQuery {
    /// How many to show: runs (20 by default, at most 1000) or a run's mismatches (1000 by
    /// default and at most).
    limit: Option<String>,
}

/// The stored reconciliation runs, newest first.
#[utoipa::path(
    get,
    path = "/v1/admin/reconciliations",
    operation_id = "admin_list_reconciliations",
    params(LimitQuery),
    responses(
        (status = 200, description = "`{\"reconciliations\": [run...]}`.", body = Object),
        (status = 400, description = "An unknown query parameter or a `limit` out of range."),
    ),
)]
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

/// One reconciliation run with its stored mismatches.
#[utoipa::path(
    get,
    path = "/v1/admin/reconciliations/{id}",
    operation_id = "admin_get_reconciliation",
    params(("id" = String, Path, description = "The run's id."), LimitQuery),
    responses(
        (status = 200, description = "`{\"reconciliation\": run, \"mismatches\": [mismatch...], \
         \"mismatches_not_shown\": number}`; a mismatch that names an intent carries its `amount` \
         (the arguments its tool's key writes as decimals; for the first 500 such, else null).", body = Object),
        (status = 400, description = "An id that is not a number, an unknown query parameter or a `limit` out of range."),
        (status = 404, description = "No such run."),
    ),
)]
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
    let mut amounts_read = 0;
    let mut shown = Vec::with_capacity(mismatches.len());
    for mismatch in mismatches {
        // The amount of the intent a mismatch names, for the first ones that name one.
        let amount = match mismatch.intent_id {
            Some(intent_id) if amounts_read < MISMATCH_AMOUNTS_MAX => {
                amounts_read += 1;
                state
                    .ledger
                    .get_by_id(intent_id)
                    .await
                    .map_err(body::ledger_problem)?
                    .and_then(|intent| crate::intents::amount(&state, &intent))
            }
            _ => None,
        };
        let mut mismatch = json!(mismatch);
        mismatch["amount"] = amount.unwrap_or(Value::Null);
        shown.push(mismatch);
    }
    Ok(Json(json!({
        "reconciliation": run,
        "mismatches": shown,
        "mismatches_not_shown": not_shown,
    })))
}

/// Most intents one run's answer reads to show the amounts of its mismatches: one read each,
/// and the mismatches a person reads first are the first ones (the rest show none).
pub const MISMATCH_AMOUNTS_MAX: usize = 500;

/// The 404 of a reconciliation run that does not exist.
pub(crate) fn unknown_run(id: i64) -> Problem {
    Problem::new(
        StatusCode::NOT_FOUND,
        "unknown-reconciliation",
        "No such reconciliation",
        format!("no reconciliation run with id {id}; GET /v1/admin/reconciliations lists them"),
    )
}
