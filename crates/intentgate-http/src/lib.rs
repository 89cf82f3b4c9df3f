//! The HTTP upstream: tools whose effect is an HTTP request.
//!
//! A tool's [`spec::CallSpec`] says how to turn its arguments into a request (method, path
//! template, query, headers, JSON body template) and what to take from the response; its
//! [`spec::LookupSpec`] says how to find the effect afterwards without performing it, and
//! its [`spec::ListSpec`] how to page through the provider's records for reconciliation.
//!
//! - [`HttpUpstream`] implements the gate's `Upstream`: it renders a tool's request, sends
//!   it once with the intent's idempotency key (side effects only) and reports what the
//!   transport saw, in the shapes docs/design.md section 5 classifies: a response, not sent (connect,
//!   DNS or TLS failure), timeout, or dropped after sending. Its lookup finds an effect with
//!   a read-only request, page by page for a listing, and takes a record only once
//!   [`verify`] proves it is this intent's (its provider key, its business fields).
//! - [`RecordPager`] pages through a [`spec::ListSpec`], one bounded page at a time.
//! - [`template`] renders the templates; [`check_template`], [`check_body_template`],
//!   [`HttpTool::check`] and [`check_list_spec`] let the config loader refuse a bad config
//!   before the gateway starts.
//!
//! **Invariants:** an argument can never change which URL is called (path values are
//! encoded as one segment each; dot and empty segments are refused), nor add a header (CR
//! and LF are refused). A request that can't be built is never sent. Header values and base
//! URLs may hold secrets, so they are never logged, never in an error and never printed by
//! `Debug`. Redirects are not followed: a redirected POST could repeat its effect elsewhere.

mod error;
mod list;
mod request;
pub mod spec;
pub mod template;
mod upstream;
pub mod verify;

pub use error::HttpError;
pub use list::{
    LIST_PAGE_BYTES_MAX, LIST_PAGE_RECORDS_MAX, LIST_PAGE_TIMEOUT, LIST_PAGES_MAX,
    LIST_PLACEHOLDERS, ListedPage, ListedRecord, RecordPager, check_list_spec, list_records,
    list_uses_cursor, window_values,
};
pub use request::{
    CONNECT_TIMEOUT, NOT_BUILT_STATUS, POOL_IDLE_PER_HOST_MAX, POOL_IDLE_TIMEOUT,
    REASON_LENGTH_MAX, RESPONSE_BODY_BYTES_MAX, TEXT_BODY_BYTES_MAX, http_client,
};
pub use template::{TemplateError, check_body_template, check_template};
pub use upstream::{
    DEFAULT_EXTERNAL_ID_POINTER, HttpTool, HttpUpstream, LOOKUP_PAGES_DEFAULT, LOOKUP_PAGES_MAX,
};
