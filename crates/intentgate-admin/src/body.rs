//! Reading requests and turning failures into problems: bodies, query strings, path ids and
//! ledger errors. Every admin handler goes through these, so one malformed request gets the
//! same answer on every route.

use axum::body::Bytes;
use axum::extract::Query;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::http::StatusCode;
use intentgate_ledger::{IntentId, LedgerError};
use intentgate_server::Problem;
use serde::de::DeserializeOwned;

use crate::BODY_LIMIT_BYTES;

/// A JSON body of type `T`, read as every route of the API reads one
/// (`intentgate_server::body`): 413 over the limit, 400 when it is not JSON, 422
/// `invalid-body` when it is JSON of the wrong shape (a missing or unknown field, a wrong
/// type).
pub(crate) fn json<T: DeserializeOwned>(
    body: Result<Bytes, BytesRejection>,
    shape: &str,
) -> Result<T, Problem> {
    intentgate_server::body::json(
        body,
        format!("an admin request body is at most {BODY_LIMIT_BYTES} bytes"),
        shape,
    )
}

/// The query string as `T`; an unknown or repeated parameter is a 400 (a misspelt filter
/// must not silently list everything).
pub(crate) fn query<T>(query: Result<Query<T>, QueryRejection>) -> Result<T, Problem> {
    query.map(|Query(query)| query).map_err(|rejection| {
        bad_request("bad-query", "Invalid query string", rejection.body_text())
    })
}

/// A `limit` parameter: absent means `default`, otherwise a whole number from 1 to `max`.
pub(crate) fn limit(text: Option<&str>, default: u32, max: u32) -> Result<u32, Problem> {
    let Some(text) = text.filter(|text| !text.is_empty()) else {
        return Ok(default);
    };
    match text.parse::<u32>() {
        Ok(limit) if (1..=max).contains(&limit) => Ok(limit),
        _ => Err(bad_request(
            "bad-query",
            "Invalid limit",
            format!("limit must be a whole number from 1 to {max}, not `{text}`"),
        )),
    }
}

/// An id in the path (`/v1/admin/intents/{id}`), a positive whole number.
pub(crate) fn id(text: &str, what: &str) -> Result<IntentId, Problem> {
    match text.parse::<IntentId>() {
        Ok(id) if id > 0 => Ok(id),
        _ => Err(bad_request(
            "bad-id",
            "Invalid id",
            format!("`{text}` is not {what} id; ids are positive whole numbers"),
        )),
    }
}

pub(crate) fn bad_request(kind: &'static str, title: &'static str, detail: String) -> Problem {
    Problem::new(StatusCode::BAD_REQUEST, kind, title, detail)
}

pub(crate) fn unprocessable(kind: &'static str, title: &'static str, detail: String) -> Problem {
    Problem::new(StatusCode::UNPROCESSABLE_ENTITY, kind, title, detail)
}

/// A ledger error as a problem. Storage failures are logged and hidden (the body never
/// carries paths or SQL).
pub(crate) fn ledger_problem(error: LedgerError) -> Problem {
    match error {
        LedgerError::NotFound(id) => Problem::new(
            StatusCode::NOT_FOUND,
            "unknown-intent",
            "No such intent",
            format!("no intent with id {id}; GET /v1/admin/intents lists them"),
        ),
        LedgerError::Transition(illegal) => Problem::new(
            StatusCode::CONFLICT,
            "illegal-transition",
            "The intent can't take this status",
            format!(
                "the intent is {} and can't become {}",
                illegal.from, illegal.to
            ),
        ),
        LedgerError::TooLarge { .. } => {
            unprocessable("too-long", "A value is too long", error.to_string())
        }
        LedgerError::Invalid { .. } => unprocessable(
            "invalid-value",
            "A value the ledger can't store",
            error.to_string(),
        ),
        LedgerError::Corrupt(_) => {
            tracing::error!(%error, "the admin API read a corrupt ledger row");
            Problem::internal(
                "the ledger holds a row this version can't read; see the gateway's log",
            )
        }
        // Storage, Open, Closed, and whatever a later version adds: an operating error.
        _ => {
            tracing::error!(%error, "the admin API's ledger operation failed");
            Problem::ledger_unavailable("nothing was changed")
        }
    }
}
