//! `GET /v1/admin/alerts`: the notices this gateway sent lately (duplicate-call alerts and
//! reconciliation notices), newest first, with the tools and intents they concern.
//!
//! Notices are not stored in the ledger: the server that builds the admin API passes an
//! [`AlertLog`] that keeps the most recent ones in memory. Each replica shows its own.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use intentgate_server::Problem;
use serde_json::{Value, json};

use crate::AdminState;

/// The notices a gateway sent lately, for `GET /v1/admin/alerts`.
pub trait AlertLog: Send + Sync {
    /// The kept notices, newest first, each a JSON object with at least `at_ms`, `kind`,
    /// `tool`, `severity`, `summary` and `details` (an alert's intent id and key).
    fn recent(&self) -> Vec<Value>;
}

/// The notices this gateway sent lately, newest first.
#[utoipa::path(
    get,
    path = "/v1/admin/alerts",
    operation_id = "admin_alerts",
    responses(
        (status = 200, description = "`{\"alerts\": [notice...]}`, each notice an object with at \
         least `at_ms`, `kind`, `tool`, `severity`, `summary` and `details`.", body = Object),
        (status = 501, description = "This gateway keeps no log of its notices."),
    ),
)]
pub(crate) async fn list(State(state): State<Arc<AdminState>>) -> Result<Json<Value>, Problem> {
    let Some(alerts) = &state.alerts else {
        return Err(Problem::new(
            StatusCode::NOT_IMPLEMENTED,
            "no-alert-log",
            "Alerts are not kept here",
            "this gateway keeps no log of the notices it sent; they are in its log lines and \
the owners' webhooks",
        ));
    };
    Ok(Json(json!({ "alerts": alerts.recent() })))
}
