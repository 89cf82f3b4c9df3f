//! Errors of the HTTP upstream's setup and of listing provider records.
//!
//! Outcomes of a tool call are never errors: they are [`UpstreamObservation`]s and
//! [`LookupOutcome`]s. No message holds a header value or a full URL, since both may carry
//! secrets resolved from the environment.
//!
//! [`UpstreamObservation`]: intentgate_core::UpstreamObservation
//! [`LookupOutcome`]: intentgate_gate::LookupOutcome

use crate::template::TemplateError;

/// Why the HTTP upstream can't be built, or why a list page could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpError {
    /// A tool, lookup or list names an upstream that is not configured.
    #[error("{context} uses upstream `{upstream}`, which is not defined under `upstreams`")]
    UnknownUpstream { context: String, upstream: String },
    /// A list was asked for a tool that has no HTTP request.
    #[error("tool `{0}` is not an HTTP tool")]
    UnknownTool(String),
    /// A JSON pointer of a spec is malformed.
    #[error(
        "{context}, {field}: `{pointer}` is not a JSON pointer (it must be empty or start with `/`, like /data/0)"
    )]
    BadPointer {
        context: String,
        field: String,
        pointer: String,
    },
    /// A base URL does not parse, is not http(s), or carries a fragment.
    #[error("upstream `{upstream}`: base_url is not a usable http or https URL: {reason}")]
    BadBaseUrl { upstream: String, reason: String },
    #[error("{context}: `{name}` is not a valid header name")]
    BadHeaderName { context: String, name: String },
    /// The value is not shown: header values hold secrets.
    #[error(
        "{context}: the value of header `{name}` is not a valid header value (line breaks and \
         control characters are refused; the value is not shown since headers hold secrets)"
    )]
    BadHeaderValue { context: String, name: String },
    /// A template of a tool, lookup or list is malformed or names what it can't have.
    #[error("{context}, {field}: {error}")]
    Template {
        context: String,
        field: String,
        error: TemplateError,
    },
    /// A lookup with neither `key` nor `match`: it can't tell this intent's effect from
    /// another's, so whatever it answered first would settle the intent.
    #[error(
        "{0} has neither `key` nor `match`, so it can't tell this intent's effect from \
         another's: add `key: <pointer to the provider key the record carries>` (the body's \
         `{{idempotency_key}}`, e.g. /metadata/idempotency_key) or `match: {{<argument>: \
         {{record: <pointer>}}}}` for each business field (order, amount, recipient)"
    )]
    UnprovenLookup(String),
    /// A `minor_units` is neither a known ISO 4217 code nor an argument path.
    #[error("{context}, {field}: {reason}")]
    BadMinorUnits {
        context: String,
        field: String,
        reason: &'static str,
    },
    /// A lookup's `pages` is not usable.
    #[error("{context}, pages: {reason}")]
    BadLookupPages { context: String, reason: String },
    /// The HTTP client could not be built (TLS setup).
    #[error("could not build the HTTP client: {0}")]
    Client(String),
    /// A list was asked for more records per page than the limit.
    #[error("a list page of {0} records is outside 1..={max}", max = crate::spec::LIST_PAGE_RECORDS_MAX)]
    BadPageLimit(u32),
    /// The listing would go on past the page limit; the provider's cursor may loop.
    #[error("the listing went past {0} pages; the provider's cursor may loop")]
    TooManyPages(u32),
    /// A list spec can't page: how the next page is found, or `limit_max`.
    #[error("list: {0}")]
    BadList(String),
    /// A list page's request failed (could not connect, timed out, was cut).
    #[error("the list request failed: {0}")]
    ListRequest(String),
    /// The provider answered a list page with something other than 2xx.
    #[error("the list request answered HTTP {0}")]
    ListStatus(u16),
    /// A list page is not what the list spec says it is.
    #[error("the list page is unusable: {0}")]
    ListPage(String),
}

/// A JSON pointer (RFC 6901) is empty or starts with `/`.
pub(crate) fn check_pointer(context: &str, field: &str, pointer: &str) -> Result<(), HttpError> {
    if pointer.is_empty() || pointer.starts_with('/') {
        Ok(())
    } else {
        Err(HttpError::BadPointer {
            context: context.to_owned(),
            field: field.to_owned(),
            pointer: pointer.to_owned(),
        })
    }
}
