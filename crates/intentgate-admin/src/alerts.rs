//! `GET /v1/admin/alerts`: the notices this gateway sent lately (duplicate-call alerts and
//! reconciliation notices), newest first, with the tools and intents they concern.
//!
//! The server that builds the admin API passes an [`AlertLog`]: the gateway's reads the
//! ledger's history of notices, so every replica on one ledger lists the same ones, and a
//! restart keeps them.

use std::sync::Arc;

use async_trait::async_trait;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use intentgate_ledger::LedgerError;
use intentgate_server::Problem;
use serde_json::{Value, json};

use crate::AdminState;

/// Most notices `GET /v1/admin/alerts` lists: as many as the ledger's history keeps.
pub const ALERTS_LISTED_MAX: u32 = intentgate_ledger::ALERTS_KEPT_MAX;

/// The notices a gateway sent lately, for `GET /v1/admin/alerts`.
#[async_trait]
pub trait AlertLog: Send + Sync {
    /// The kept notices, newest first, at most `limit`, each a JSON object with at least
    /// `at_ms`, `kind`, `tool`, `severity`, `summary` and `details` (an alert's intent id
    /// and key); an error when the store that keeps them can't be read.
    async fn recent(&self, limit: u32) -> Result<Vec<Value>, LedgerError>;
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
        (status = 503, description = "The ledger that keeps the notices could not be read."),
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
    match alerts.recent(ALERTS_LISTED_MAX).await {
        Ok(recent) => Ok(Json(json!({ "alerts": recent }))),
        Err(error) => {
            tracing::error!(%error, "the notice history could not be read");
            Err(Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "ledger-unavailable",
                "Alerts can't be read",
                "the ledger that keeps the history of notices could not be read; try again, \
and see the gateway's log",
            ))
        }
    }
}
