//! Errors as `application/problem+json` (RFC 9457): a type, a title and a detail that
//! says what to change. Internals (paths, SQL, secrets) never reach the body.
//!
//! The problems more than one route answers are built here, once: an unknown tool, a ledger
//! that failed, the concurrency limit, a missing scope, a body of the wrong shape
//! ([`Problem::invalid_body`], the one kind for every route of the API and the admin API),
//! and the gate's errors (`From<GateError>`).

use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use intentgate_core::{Principal, Scope};
use intentgate_gate::GateError;

use crate::wire::ProblemBody;

/// Seconds a caller refused for a passing reason (the concurrency limit, a ledger that
/// failed) is asked to wait: long enough not to hammer, short enough for a model's turn.
pub const RETRY_AFTER_SECONDS: u64 = 1;
/// The kind of a request body that is JSON of the wrong shape: a field missing, unknown or
/// of the wrong type, or not the object the route reads.
pub const INVALID_BODY: &str = "invalid-body";
/// The kind of a request body that is not JSON.
pub const MALFORMED_JSON: &str = "malformed-json";

/// One problem response.
#[derive(Debug, Clone)]
pub struct Problem {
    pub status: StatusCode,
    /// A stable, short identifier (`unknown-tool`), sent as `urn:intentgate:problem:<kind>`.
    pub kind: &'static str,
    pub title: &'static str,
    pub detail: String,
    /// Seconds after which a retry may succeed (503).
    pub retry_after_seconds: Option<u64>,
}

impl Problem {
    pub fn new(
        status: StatusCode,
        kind: &'static str,
        title: &'static str,
        detail: impl Into<String>,
    ) -> Problem {
        Problem {
            status,
            kind,
            title,
            detail: detail.into(),
            retry_after_seconds: None,
        }
    }

    /// A request body that could not be read: 413 saying `too_large` when it is over the
    /// limit, otherwise the rejection's own status and text.
    pub fn unreadable_body(rejection: BytesRejection, too_large: impl Into<String>) -> Problem {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            Problem::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body-too-large",
                "Request body too large",
                too_large,
            )
        } else {
            Problem::new(
                rejection.status(),
                "bad-body",
                "Unreadable body",
                rejection.body_text(),
            )
        }
    }

    /// 422 for a body that is JSON of the wrong shape; `detail` names what is wrong and the
    /// shape the route reads.
    pub fn invalid_body(detail: impl Into<String>) -> Problem {
        Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            INVALID_BODY,
            "Invalid request body",
            detail,
        )
    }

    /// 400 for a body that is not JSON at all.
    pub fn malformed_json(detail: impl Into<String>) -> Problem {
        Problem::new(
            StatusCode::BAD_REQUEST,
            MALFORMED_JSON,
            "Malformed JSON",
            detail,
        )
    }

    /// 404 for a tool name the gateway does not serve.
    pub fn unknown_tool(name: &str) -> Problem {
        Problem::new(
            StatusCode::NOT_FOUND,
            "unknown-tool",
            "Unknown tool",
            format!("no tool named `{name}`; GET /v1/tools lists the tools"),
        )
    }

    /// 503 for a ledger that failed: `what` says what did not happen.
    pub fn ledger_unavailable(what: &str) -> Problem {
        let mut problem = Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "ledger-unavailable",
            "The intent ledger is unavailable",
            format!("{what}; try again shortly"),
        );
        problem.retry_after_seconds = Some(RETRY_AFTER_SECONDS);
        problem
    }

    /// 503 for a request refused at the concurrency limit: nothing was executed.
    pub fn overloaded() -> Problem {
        let mut problem = Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "overloaded",
            "Too many calls at once",
            "the gateway is at its concurrency limit; nothing was executed, try again shortly",
        );
        problem.retry_after_seconds = Some(RETRY_AFTER_SECONDS);
        problem
    }

    /// 500 for a bug or a failure inside the gateway; `detail` says what failed, never why
    /// (the log does).
    pub fn internal(detail: impl Into<String>) -> Problem {
        Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "Internal error",
            detail,
        )
    }

    /// 403 for a principal without the scope a route needs.
    pub fn missing_scope(principal: &Principal, scope: Scope) -> Problem {
        Problem::new(
            StatusCode::FORBIDDEN,
            "missing-scope",
            "Missing scope",
            format!(
                "this needs the `{scope}` scope; the credential of `{}` has {}",
                principal.subject,
                if principal.scopes.is_empty() {
                    "none".to_owned()
                } else {
                    format!("`{}`", principal.scopes)
                }
            ),
        )
    }

    /// 409 for a call of a tool the caller's own code executes.
    pub fn client_executed(name: &str) -> Problem {
        Problem::new(
            StatusCode::CONFLICT,
            "client-executed",
            "Tool executed by the caller",
            format!(
                "tool `{name}` is executed by the caller's own code: ask for a grant with \
                 POST /v1/tools/{name}/intents (see the intent API), then settle what happened"
            ),
        )
    }

    /// 409 for a grant of a tool the gateway executes itself.
    pub fn not_client_executed(name: &str) -> Problem {
        Problem::new(
            StatusCode::CONFLICT,
            "not-client-executed",
            "Tool executed by the gateway",
            format!(
                "tool `{name}` is executed by the gateway itself: call it with POST /v1/tools/{name}/call"
            ),
        )
    }

    /// The same `Idempotency-Key` with another payload (`GateError::IdempotencyKeyReused`):
    /// the draft's 422, naming the intent the key was first used for, the one these
    /// arguments name when it is another, and the arguments that differ from the first
    /// intent's, as the `conflict` outcome does.
    pub fn idempotency_key_reused(
        key: &str,
        first_intent_key: &str,
        intent_key: &str,
        differing_fields: &[String],
    ) -> Problem {
        let fields = if differing_fields.is_empty() {
            "the arguments".to_owned()
        } else {
            differing_fields
                .iter()
                .map(|field| format!("`{field}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let intents = if first_intent_key == intent_key {
            format!(
                "intent `{}` with other arguments",
                first_intent_key.escape_default()
            )
        } else {
            format!(
                "intent `{}`, and these arguments name intent `{}`",
                first_intent_key.escape_default(),
                intent_key.escape_default()
            )
        };
        Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "idempotency-key-reused",
            "Idempotency-Key reused with another payload",
            format!(
                "the Idempotency-Key `{}` was first used for {intents} (differing: {fields}); nothing was executed. Repeat the first call's arguments to get its answer, or send a new key for a new operation",
                key.escape_default()
            ),
        )
    }
}

impl Problem {
    /// The gate's refusal of a `request` (`call`, `grant`), which happens before anything
    /// is done: `undone` says what was not (`executed`, `granted`). Operating errors (the
    /// ledger) are logged here and answered without their internals; any other error is a
    /// bug or a broken config, answered as a 500.
    pub fn refused_by_gate(error: GateError, request: &str, undone: &str) -> Problem {
        match error {
            GateError::IdempotencyKeyReused {
                caller_key,
                first_intent_key,
                intent_key,
                differing_fields,
            } => Problem::idempotency_key_reused(
                &caller_key,
                &first_intent_key,
                &intent_key,
                &differing_fields,
            ),
            GateError::UnknownTool(name) => Problem::unknown_tool(&name),
            GateError::ClientExecuted(name) => Problem::client_executed(&name),
            GateError::NotClientExecuted(name) => Problem::not_client_executed(&name),
            GateError::InvalidTenant(error) => Problem::new(
                StatusCode::BAD_REQUEST,
                "bad-tenant",
                "Invalid tenant",
                format!("{error}; nothing was recorded or {undone}"),
            ),
            GateError::Ledger(error) => {
                tracing::error!(%error, request, "the ledger failed before anything was done");
                Problem::ledger_unavailable(&format!("nothing was {undone}"))
            }
            error => {
                tracing::error!(%error, request, "gate error");
                Problem::internal(format!(
                    "the {request} failed inside the gateway; nothing was {undone}"
                ))
            }
        }
    }
}

/// The gate's refusal of a call: [`Problem::refused_by_gate`].
impl From<GateError> for Problem {
    fn from(error: GateError) -> Problem {
        Problem::refused_by_gate(error, "call", "executed")
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let body = ProblemBody {
            kind: format!("urn:intentgate:problem:{}", self.kind),
            title: self.title.to_owned(),
            status: self.status.as_u16(),
            detail: self.detail,
        };
        let text = serde_json::to_string(&body).expect("a problem body is plain JSON");
        let mut response = (self.status, text).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if let Some(seconds) = self.retry_after_seconds {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if self.status == StatusCode::PAYLOAD_TOO_LARGE {
            // The rest of the body was never read, so the server closes the connection: say
            // so, or a client that reuses it fails its next request on a closed socket.
            headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}
