//! The admin HTTP API of intentgate, for operators: the kill switch, intents read and
//! resolved by hand, and reconciliation.
//!
//! | route | what it does |
//! |---|---|
//! | `GET /v1/admin/flags` | every configured tool's flag, and stored flags of tools no longer configured |
//! | `PUT /v1/admin/flags/{tool}` | switches a tool off or on: `{"enabled": false, "reason": "...", "actor": "..."}` |
//! | `GET /v1/admin/intents` | intents, filtered and paged: `tool`, `status`, `tenant`, `key`, `since`, `from_ms`, `until_ms`, `q`, `order`, `cursor`, `limit` |
//! | `GET /v1/admin/intents/{id}` | one intent and its event log (oldest first), with its provider key, amount, lease, the sweeper's plan and whether it can be resolved by hand now |
//! | `GET /v1/admin/unknown` | the unknown intents (and those being re-sent), each with what a person needs to resolve it |
//! | `POST /v1/admin/intents/{id}/resolve` | `done` (with the provider's external id) or `not_executed`, with a reason; 409 `lease-held` while a call or the sweeper holds the intent's lease |
//! | `POST /v1/admin/intents/{id}/reopen` | a `rejected` intent whose refusal was the gateway's own error becomes `not_executed`, with a reason; the next call executes it |
//! | `POST /v1/admin/erasures` | erases a tenant's intents (or a tool's, or one key's) on request: `{"tenant": "...", "reason": "..."}` |
//! | `POST /v1/admin/reconcile` | runs reconciliation over a window: `{"since": "1h"}` |
//! | `GET /v1/admin/reconciliations` | stored runs, newest first |
//! | `GET /v1/admin/reconciliations/{id}` | one run with its stored mismatches |
//! | `GET /v1/admin/reconciliations/{id}/mismatches.csv` | the run's mismatches and who they affected, as CSV: `kind`, `severity` |
//! | `GET /v1/admin/reconciliations/{id}/subjects.csv` | the subjects (customers, orders) the run's mismatches name, one row each, most provider records first |
//! | `GET /v1/admin/activity` | calls, repeats and statuses per tool over a window (`since`, default 1h), in buckets |
//! | `GET /v1/admin/alerts` | the notices this gateway sent lately (duplicate-call alerts, upstream errors that are the operator's, reconciliation), newest first |
//! | `GET /v1/admin/approvals` | intents held for approval with their requests, newest first: `state` (`open`, `approved`, `closed`), `tool`, `tenant`, `before`, `limit` |
//! | `POST /v1/admin/approvals/{id}/approve` | an approver approves a held intent (`{"reason": "..."}`, optional); the gateway executes it at once where it can |
//! | `POST /v1/admin/approvals/{id}/deny` | an approver denies it, with a reason (required): the intent is settled `rejected` |
//!
//! Each route is documented by its handler's `#[utoipa::path]`, and [`openapi()`] gives the
//! admin API's operations as an OpenAPI fragment that `intentgate serve` merges into the
//! document at `GET /openapi.json` (`ServerOptions::openapi_extra`) when the admin API is on.
//!
//! Every route needs `Authorization: Bearer <token>` (401 otherwise), a credential with the
//! `admin` scope, or the console's session (a [`ConsoleUser`] that the console's session
//! layer inserts after checking the cookie and, for a change, its CSRF token). A valid
//! credential without the `admin` scope is a 403; a source address that sent too many wrong
//! tokens gets 429 for its wrong tokens for a while, while the right token always works.
//! The approvals routes take the same credentials and also one with the `approve` scope
//! (its own tenant's held intents only); only such an approver decides, never the admin
//! token nor a credential with `admin` alone (`approvals.rs`).
//! With no token
//! configured the admin API is off, and every admin route answers 404 saying how to turn it
//! on. Errors are `application/problem+json` ([`intentgate_server::Problem`]). A flag is
//! stored in the ledger, so every replica that shares it honours the switch (the gate reads
//! flags again every 500 ms); a resolution goes through [`Ledger::resolve`], which checks
//! the transition and writes the event log entry with the actor and the reason.
//!
//! **API boundary:** the crate knows the ledger and the names of the configured tools, not
//! the config file and not reconciliation, which it reaches through the [`Reconciler`]
//! trait. [`parse_duration`], [`ManualResolution`] and [`erase_all`] are shared with the
//! command line, so `intentgate intents resolve` and `erase` and the API check the same
//! rules with the same messages.

mod activity;
mod alerts;
mod approvals;
mod auth;
mod body;
mod client;
mod erasure;
mod export;
mod flags;
mod intents;
mod openapi;
mod reconcile;
mod resolution;
mod throttle;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::routing::any;
use intentgate_gate::{Clock, Gate, SystemClock};
use intentgate_ledger::Ledger;
use intentgate_server::Problem;
use tokio::sync::Semaphore;

pub use alerts::AlertLog;
pub use approvals::{
    APPROVAL_EVENTS_SHOWN_MAX, APPROVALS_LIMIT_DEFAULT, APPROVALS_LIMIT_MAX, REASON_LENGTH_MAX,
    REDACTED,
};
pub use auth::{Approver, ConsoleUser};
pub use erasure::{ERASE_ROUNDS_MAX, ErasureReport, Refusal, check_erase, erase_all};
pub use intentgate_core::duration::parse_duration;
pub use openapi::{ADMIN_TAG, openapi};
pub use resolution::{
    MANUAL_STATUSES, ManualReopen, ManualResolution, Unresolvable, check_reopenable,
    check_resolvable,
};
pub use throttle::{FAILURE_WINDOW_DEFAULT, FAILURES_MAX_DEFAULT, FailureLimit, SOURCES_MAX};

/// The environment variable that holds the admin token (read by `intentgate serve`).
pub const TOKEN_ENV: &str = "INTENTGATE_ADMIN_TOKEN";
/// Shortest admin token accepted, in bytes: the token guards the kill switch and manual
/// resolutions, so it must not be guessable. 32 random bytes written as hex (64 characters,
/// `openssl rand -hex 32`) are far past it; 32 characters of hex still carry 128 bits.
pub const TOKEN_LENGTH_MIN: usize = 32;
/// Largest admin request body: the largest legitimate one is a resolution with a reason at
/// the event log's limit (4 KiB) plus an actor and an external id.
pub const BODY_LIMIT_BYTES: usize = 16 * 1024;
/// Intents per page when the request names no `limit`.
pub const INTENTS_LIMIT_DEFAULT: u32 = 50;
/// Most intents per page: a page is read into memory and sent at once.
pub const INTENTS_LIMIT_MAX: u32 = 1000;
/// Most events shown with one intent (the newest); a storm of repeated calls logs one event
/// per call, and one answer must stay small.
pub const EVENTS_SHOWN_MAX: usize = 1000;
/// Reconciliation runs listed when the request names no `limit`.
pub const RUNS_LIMIT_DEFAULT: u32 = 20;
/// Most reconciliation runs listed at once.
pub const RUNS_LIMIT_MAX: u32 = 1000;
/// Mismatches shown with one run when the request names no `limit`.
pub const MISMATCHES_LIMIT_DEFAULT: u32 = 1000;
/// Most mismatches shown with one run: as many as the ledger keeps per run.
pub const MISMATCHES_LIMIT_MAX: u32 =
    intentgate_ledger::RECONCILIATION_MISMATCHES_STORED_MAX as u32;
/// Longest reconciliation window: a year. A wider window outlives any retention period
/// and only makes the run read more of the provider's history.
pub const RECONCILE_WINDOW_MAX: Duration = Duration::from_secs(366 * 24 * 60 * 60);

/// Settings of the admin API.
#[derive(Clone)]
pub struct AdminOptions {
    /// The bearer token every admin request must carry; `None` (or empty) turns the admin API
    /// off. Never logged, never printed (`Debug` hides it).
    pub token: Option<String>,
    /// The configured tools' names: the tools whose flags may be set.
    pub tools: Vec<String>,
    /// Who a change is attributed to when the request names no actor.
    pub actor_default: String,
    /// Wrong tokens a source address may send before its wrong tokens get 429 for a while.
    pub failure_limit: FailureLimit,
    /// Reverse proxies in front of the gateway (`gateway.trusted_proxies`): a request from one
    /// of them is counted under the client its `X-Forwarded-For` names, so callers behind one
    /// proxy are counted apart. Empty: the socket's peer is counted.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// Let in requests whose principal (decided by the server's edge from the caller's
    /// credential) has the `admin` scope, without the token; the admin API is then on even
    /// without a token. For gateways whose callers authenticate with keys or tokens.
    pub admin_scope: bool,
}

impl fmt::Debug for AdminOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdminOptions")
            .field("token", &self.token.as_ref().map(|_| "<hidden>"))
            .field("tools", &self.tools)
            .field("actor_default", &self.actor_default)
            .field("admin_scope", &self.admin_scope)
            .field("failure_limit", &self.failure_limit)
            .field("trusted_proxies", &self.trusted_proxies)
            .finish()
    }
}

/// Why an admin token can't be used. The token itself is never part of the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Shorter than [`TOKEN_LENGTH_MIN`] bytes: guessable.
    #[error(
        "the admin token is {length} bytes long, shorter than {TOKEN_LENGTH_MIN}; use a random \
one of at least {TOKEN_LENGTH_MIN} bytes, for example the output of `openssl rand -hex 32`"
    )]
    TooShort { length: usize },
    /// Holds characters an `Authorization` header can't carry.
    #[error(
        "the admin token contains whitespace or control characters, which an Authorization \
header can't carry; use letters, digits and punctuation only, for example the output of \
`openssl rand -hex 32`"
    )]
    Unprintable,
}

/// Checks an admin token before a server starts with it.
pub fn check_token(token: &str) -> Result<(), TokenError> {
    if token.len() < TOKEN_LENGTH_MIN {
        return Err(TokenError::TooShort {
            length: token.len(),
        });
    }
    if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(TokenError::Unprintable);
    }
    Ok(())
}

/// Runs reconciliation for the admin API. The admin crate does not know how: the server
/// that builds the router passes one in (or none, and `POST /v1/admin/reconcile` says so).
#[async_trait]
pub trait Reconciler: Send + Sync {
    /// Reconciles the window that ends now and began `since` ago, attributed to `actor`, and
    /// returns the run's report. An error is a message for the operator.
    async fn reconcile(&self, since: Duration, actor: &str) -> Result<serde_json::Value, String>;
}

/// What every admin handler shares.
pub(crate) struct AdminState {
    pub ledger: Arc<dyn Ledger>,
    /// SHA-256 of the token: compared in constant time, and the token itself is not kept.
    /// `None` when the API is on only for principals with the `admin` scope.
    pub token_digest: Option<[u8; 32]>,
    /// Whether principals with the `admin` scope are let in.
    pub admin_scope: bool,
    /// The configured tools, in config order, without repeats.
    pub tools: Vec<String>,
    pub actor_default: String,
    pub reconciler: Option<Arc<dyn Reconciler>>,
    /// One reconciliation at a time: a second request is refused while one runs.
    pub reconciling: Arc<Semaphore>,
    /// Wrong tokens counted per source address.
    pub throttle: throttle::Throttle,
    /// Whose `X-Forwarded-For` names the client address that is counted.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// The notices sent lately, when the server keeps them.
    pub alerts: Option<Arc<dyn AlertLog>>,
    /// The gate of this gateway, when the admin API is served beside one
    /// ([`Admin::with_gate`]): what its sweeper plans for an unknown intent, and which
    /// arguments of a tool are its amounts. Without it those fields are null.
    pub gate: Option<Arc<Gate>>,
}

/// The admin API, built once: its router, and the credential check that the console's
/// sign-in shares with it (the same token, the same scope, the same count of wrong tokens).
#[derive(Clone)]
pub struct Admin {
    /// `None`: the admin API is off (no token, and no credential can carry the scope).
    state: Option<Arc<AdminState>>,
}

impl Admin {
    /// The admin API over `ledger`; `reconciler` runs `POST /v1/admin/reconcile` and
    /// `alerts` answers `GET /v1/admin/alerts` (each answers 501 when absent).
    pub fn new(
        ledger: Arc<dyn Ledger>,
        options: AdminOptions,
        reconciler: Option<Arc<dyn Reconciler>>,
        alerts: Option<Arc<dyn AlertLog>>,
    ) -> Admin {
        let token = options.token.filter(|token| !token.is_empty());
        if token.is_none() && !options.admin_scope {
            return Admin { state: None };
        }
        let mut tools: Vec<String> = Vec::with_capacity(options.tools.len());
        for tool in options.tools {
            if !tools.contains(&tool) {
                tools.push(tool);
            }
        }
        let state = Arc::new(AdminState {
            ledger,
            token_digest: token.as_deref().map(auth::digest),
            admin_scope: options.admin_scope,
            tools,
            actor_default: options.actor_default,
            reconciler,
            reconciling: Arc::new(Semaphore::new(1)),
            throttle: throttle::Throttle::new(options.failure_limit),
            trusted_proxies: options.trusted_proxies,
            alerts,
            gate: None,
        });
        Admin { state: Some(state) }
    }

    /// This admin API with the gate it is served beside, so that an unknown intent's answers
    /// say what the gate's sweeper will do with it and which arguments are its amounts. Called
    /// once, right after [`Admin::new`].
    pub fn with_gate(mut self, gate: Arc<Gate>) -> Admin {
        if let Some(state) = self.state.as_mut() {
            Arc::get_mut(state)
                .expect("with_gate is called before the admin API is shared")
                .gate = Some(gate);
        }
        self
    }

    /// Who may sign in to the console with this request's credential: its
    /// `Authorization: Bearer` admin token (`admin-token`), or the subject of a principal
    /// with the `admin` scope that the server's edge authenticated. Otherwise the answer the
    /// admin API would give (403 for a valid credential without the `admin` scope, 401, 429
    /// for wrong tokens past the limit, 404 when it is off).
    pub fn sign_in(
        &self,
        request: &axum::extract::Request,
    ) -> Result<String, Box<axum::response::Response>> {
        use axum::response::IntoResponse;
        match &self.state {
            None => Err(Box::new(admin_off_problem().into_response())),
            Some(state) => auth::credential(state, request),
        }
    }

    /// The admin routes, to merge beside the HTTP API (`intentgate_server::run_with`). The
    /// router defines no fallback: an unknown admin path is answered by its own catch-all
    /// route, everything else by the API's fallback.
    pub fn router(&self) -> axum::Router {
        let Some(state) = self.state.clone() else {
            return axum::Router::new()
                .route("/v1/admin", any(admin_off))
                .route("/v1/admin/", any(admin_off))
                .route("/v1/admin/{*rest}", any(admin_off));
        };
        // The approvals routes take approvers besides the admin API's credentials: their own
        // check, outermost as the admin routes' is, and merged beside them.
        let (approvals, _document) = openapi::approval_routes().split_for_parts();
        let approvals = approvals
            .method_not_allowed_fallback(method_not_allowed)
            .layer(DefaultBodyLimit::max(BODY_LIMIT_BYTES))
            .layer(axum::middleware::from_fn_with_state(
                state.clone(),
                auth::require_access,
            ))
            .with_state(state.clone());
        // The documented routes: the one list is `openapi::routes`.
        let (routes, _document) = openapi::routes().split_for_parts();
        routes
            .method_not_allowed_fallback(method_not_allowed)
            .route("/v1/admin", any(no_such_route))
            .route("/v1/admin/", any(no_such_route))
            .route("/v1/admin/{*rest}", any(no_such_route))
            .layer(DefaultBodyLimit::max(BODY_LIMIT_BYTES))
            // Outermost: nothing of a request is looked at before its token is checked.
            .layer(axum::middleware::from_fn_with_state(
                state.clone(),
                auth::require_token,
            ))
            .with_state(state)
            .merge(approvals)
    }
}

/// The admin routes, to merge beside the HTTP API: [`Admin::router`] of an admin API that
/// keeps no alerts.
pub fn router(
    ledger: Arc<dyn Ledger>,
    options: AdminOptions,
    reconciler: Option<Arc<dyn Reconciler>>,
) -> axum::Router {
    Admin::new(ledger, options, reconciler, None).router()
}

async fn admin_off() -> Problem {
    admin_off_problem()
}

fn admin_off_problem() -> Problem {
    Problem::new(
        StatusCode::NOT_FOUND,
        "admin-off",
        "The admin API is off",
        format!(
            "this gateway was started without an admin token; set {TOKEN_ENV} (or \
--admin-token) to a random token of at least {TOKEN_LENGTH_MIN} bytes (`openssl rand -hex \
32`) and restart it to turn the admin API on"
        ),
    )
}

async fn no_such_route() -> Problem {
    Problem::new(
        StatusCode::NOT_FOUND,
        "not-found",
        "No such admin route",
        "the admin routes are /v1/admin/flags, /v1/admin/intents, /v1/admin/unknown, \
/v1/admin/erasures, /v1/admin/reconcile, /v1/admin/reconciliations, /v1/admin/activity, /v1/admin/alerts \
and /v1/admin/approvals",
    )
}

async fn method_not_allowed() -> Problem {
    Problem::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method-not-allowed",
        "Method not allowed",
        "this admin route exists but not with this method: reads are GET, a flag is set with \
PUT, a resolution, an erasure, a reconciliation and a decision on a held intent are POST",
    )
}

/// Milliseconds since the Unix epoch: when a flag is set or an intent resolved.
pub(crate) fn now_ms() -> i64 {
    SystemClock.now_ms()
}
