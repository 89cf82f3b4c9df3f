//! Paging through the provider's records of a tool's effects, for reconciliation.
//!
//! A [`RecordPager`] asks for one page at a time and hands it over before asking for the
//! next, so memory stays bounded by one page however many records the window holds. A page
//! that fails leaves the pager where it was: calling [`RecordPager::next_page`] again asks
//! for the same page, so the caller decides how to retry.
//!
//! List templates may use `{since_ms}`, `{until_ms}`, `{limit}` and `{cursor}` (nothing else:
//! a list has no intent). On the first page there is no cursor, so a query parameter that
//! is exactly `{cursor}` is left out.

use std::time::Duration;

use reqwest::Client;
use serde_json::{Value, json};

use crate::error::HttpError;
use crate::request::{Body, CompiledUpstream, Exchange, RequestParts, RequestTemplate, exchange};
use crate::spec::{ListRecords, ListSpec, Method, UpstreamSpec};
use crate::template::{Absent, GatewayValues, Values};
use crate::upstream::check_pointer;

/// The placeholders a list template may use.
pub const LIST_PLACEHOLDERS: [&str; 4] = ["since_ms", "until_ms", "limit", "cursor"];
/// Most records asked for per page. Providers cap pages at 100 to 1000; this bounds the
/// memory of one page even for a provider that honours any limit.
pub const LIST_PAGE_RECORDS_MAX: u32 = 10_000;
/// Largest page body read: 10,000 records of about 2 KiB each, with room to spare. A larger
/// page is refused rather than held in memory.
pub const LIST_PAGE_BYTES_MAX: usize = 32 * 1024 * 1024;
/// Longest wait for one page. Reconciliation is not in a hurry, but must not hang on a
/// provider that stopped answering.
pub const LIST_PAGE_TIMEOUT: Duration = Duration::from_secs(30);
/// Most pages one listing reads: 100 million records at 1000 a page, beyond any window
/// reconciliation covers. Stops a provider whose cursors go round in a circle.
pub const LIST_PAGES_MAX: u32 = 100_000;

/// One provider record, with what reconciliation compares.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedRecord {
    /// The provider key the gateway sent with the effect (`fields.idempotency_key`); `None`
    /// when the effect was made without the gateway, or the list pairs records by `match`.
    pub provider_key: Option<String>,
    /// The intent key the record keeps (`fields.intent_key`), for the report only.
    pub intent_key: Option<String>,
    /// The provider's id for the effect.
    pub external_id: String,
    /// The amount as the provider wrote it (text of a string or number).
    pub amount: Option<String>,
    /// Who was affected (a customer or an order), for the report.
    pub subject: Option<String>,
    /// The whole record.
    pub raw: Value,
}

/// Pages through a [`ListSpec`] over a time window. Built by [`list_records`] or
/// [`HttpUpstream::list_records`](crate::HttpUpstream::list_records).
pub struct RecordPager {
    client: Client,
    upstream: CompiledUpstream,
    request: RequestTemplate,
    records: ListRecords,
    since_ms: i64,
    until_ms: i64,
    page_limit: u32,
    /// The cursor of the next page; `None` before the first page.
    cursor: Option<String>,
    pages_read: u32,
    finished: bool,
}

impl std::fmt::Debug for RecordPager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordPager")
            .field("since_ms", &self.since_ms)
            .field("until_ms", &self.until_ms)
            .field("page_limit", &self.page_limit)
            .field("pages_read", &self.pages_read)
            .field("finished", &self.finished)
            .finish_non_exhaustive()
    }
}

/// A pager over the records `spec` lists from `upstream` between `since_ms` (inclusive) and
/// `until_ms` (exclusive), `page_limit` records per page. Checks the spec; sends nothing
/// until [`RecordPager::next_page`].
pub fn list_records(
    client: &Client,
    upstream: &UpstreamSpec,
    spec: &ListSpec,
    since_ms: i64,
    until_ms: i64,
    page_limit: u32,
) -> Result<RecordPager, HttpError> {
    let upstream = CompiledUpstream::new(spec.upstream.as_deref().unwrap_or("list"), upstream)?;
    list_records_with(client, upstream, spec, since_ms, until_ms, page_limit)
}

pub(crate) fn list_records_with(
    client: &Client,
    upstream: CompiledUpstream,
    spec: &ListSpec,
    since_ms: i64,
    until_ms: i64,
    page_limit: u32,
) -> Result<RecordPager, HttpError> {
    if page_limit == 0 || page_limit > LIST_PAGE_RECORDS_MAX {
        return Err(HttpError::BadPageLimit(page_limit));
    }
    let request = list_template(spec)?;
    Ok(RecordPager {
        client: client.clone(),
        upstream,
        request,
        records: spec.records(),
        since_ms,
        until_ms,
        page_limit,
        cursor: None,
        pages_read: 0,
        finished: false,
    })
}

/// Checks a list spec when the config is loaded: templates (which may use only
/// [`LIST_PLACEHOLDERS`]) and pointers.
pub fn check_list_spec(spec: &ListSpec) -> Result<(), HttpError> {
    list_template(spec).map(|_| ())
}

fn list_template(spec: &ListSpec) -> Result<RequestTemplate, HttpError> {
    let request = RequestTemplate::new(RequestParts {
        context: "list".to_owned(),
        upstream: spec.upstream.as_deref().unwrap_or_default(),
        method: Method::Get,
        path: &spec.path,
        query: &spec.query,
        headers: &spec.headers,
        body: None,
        // The first page has no cursor: a parameter that is exactly `{cursor}` is left out.
        absent: Absent::LeaveOut,
    })?;
    request.check(&LIST_PLACEHOLDERS, false)?;
    spec.records().check()?;
    Ok(request)
}

impl RecordPager {
    /// The next page of records, or `None` once the provider has no more. On an error the
    /// pager stays where it was; calling again asks for the same page.
    pub async fn next_page(&mut self) -> Result<Option<Vec<ListedRecord>>, HttpError> {
        if self.finished {
            return Ok(None);
        }
        if self.pages_read >= LIST_PAGES_MAX {
            return Err(HttpError::TooManyPages(LIST_PAGES_MAX));
        }
        let arguments = json!({
            "since_ms": self.since_ms,
            "until_ms": self.until_ms,
            "limit": self.page_limit,
            "cursor": self.cursor,
        });
        let values = Values {
            arguments: &arguments,
            gateway: GatewayValues::default(),
        };
        let prepared = self
            .request
            .prepare(&self.upstream, &values, None)
            .map_err(|error| HttpError::Template {
                context: "list".to_owned(),
                field: "request".to_owned(),
                error,
            })?;
        let page = match exchange(
            &self.client,
            prepared,
            LIST_PAGE_TIMEOUT,
            LIST_PAGE_BYTES_MAX,
        )
        .await
        {
            Exchange::Response {
                status: 200..=299,
                body: Body::Json(page),
                ..
            } => page,
            Exchange::Response {
                status: 200..=299,
                body: Body::Text {
                    truncated: true, ..
                },
                ..
            } => {
                return Err(HttpError::ListPage(format!(
                    "the page is larger than {LIST_PAGE_BYTES_MAX} bytes; ask for fewer records per page"
                )));
            }
            Exchange::Response {
                status: 200..=299, ..
            } => return Err(HttpError::ListPage("the page is not JSON".to_owned())),
            Exchange::Response { status, .. } => return Err(HttpError::ListStatus(status)),
            Exchange::NotSent(not_sent) => return Err(HttpError::ListRequest(not_sent.reason)),
            Exchange::Dropped(reason) => return Err(HttpError::ListRequest(reason)),
            Exchange::Timeout => return Err(HttpError::ListRequest("timed out".to_owned())),
        };
        let page = self
            .records
            .read_page(page, self.cursor.as_deref())
            .map_err(HttpError::ListPage)?;
        self.pages_read += 1;
        self.finished = page.next_cursor.is_none();
        self.cursor = page.next_cursor;
        Ok(Some(page.records))
    }
}

/// One page of a listing, as read.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedPage {
    pub records: Vec<ListedRecord>,
    /// The cursor of the next page; `None` after the last.
    pub next_cursor: Option<String>,
}

impl ListRecords {
    /// Checks every pointer.
    pub fn check(&self) -> Result<(), HttpError> {
        check_pointer("list", "items", &self.items)?;
        check_pointer("list", "next_cursor", &self.next_cursor)?;
        let fields = &self.fields;
        if let Some(provider_key) = &fields.idempotency_key {
            check_pointer("list", "fields.idempotency_key", provider_key)?;
        }
        if let Some(intent_key) = &fields.intent_key {
            check_pointer("list", "fields.intent_key", intent_key)?;
        }
        check_pointer("list", "fields.external_id", &fields.external_id)?;
        if let Some(amount) = &fields.amount {
            check_pointer("list", "fields.amount", amount)?;
        }
        if let Some(subject) = &fields.subject {
            check_pointer("list", "fields.subject", subject)?;
        }
        if let Some(argument) = &fields.amount_argument {
            check_pointer("list", "fields.amount_argument", argument)?;
        }
        for (argument, field) in &self.match_fields {
            check_pointer("list", &format!("match.{argument}.record"), &field.record)?;
        }
        Ok(())
    }

    /// Reads one page a listing answered with. `cursor` is the one the page was asked for
    /// with: a provider that answers with it again would have the listing go round forever,
    /// so that page is refused. The error says what is wrong with the page.
    pub fn read_page(&self, page: Value, cursor: Option<&str>) -> Result<ListedPage, String> {
        let mut page = page;
        let next_cursor = page.pointer(&self.next_cursor).cloned();
        // The records are moved out of the page, not copied: a page holds up to
        // LIST_PAGE_RECORDS_MAX of them.
        let items = match page.pointer_mut(&self.items).map(Value::take) {
            Some(Value::Array(items)) => items,
            _ => return Err(format!("no array of records at `{}`", self.items)),
        };
        let records = items
            .into_iter()
            .enumerate()
            .map(|(index, item)| self.record(index, item))
            .collect::<Result<Vec<_>, _>>()?;
        let next_cursor = match next_cursor.as_ref() {
            None | Some(Value::Null) => None,
            Some(Value::String(cursor)) if cursor.is_empty() => None,
            Some(Value::String(cursor)) => Some(cursor.clone()),
            Some(Value::Number(cursor)) => Some(cursor.to_string()),
            Some(_) => {
                return Err(format!(
                    "the cursor at `{}` is neither text nor a number",
                    self.next_cursor
                ));
            }
        };
        if next_cursor.is_some() && next_cursor.as_deref() == cursor {
            return Err(
                "the provider answered with the cursor it was given; the listing would loop"
                    .to_owned(),
            );
        }
        Ok(ListedPage {
            records,
            next_cursor,
        })
    }

    fn record(&self, index: usize, item: Value) -> Result<ListedRecord, String> {
        let text = |pointer: &str| match item.pointer(pointer) {
            Some(Value::String(text)) => Some(text.clone()),
            Some(Value::Number(number)) => Some(number.to_string()),
            _ => None,
        };
        let fields = &self.fields;
        let external_id = text(&fields.external_id).ok_or_else(|| {
            format!(
                "record {index} of the page has no id at `{}`",
                fields.external_id
            )
        })?;
        Ok(ListedRecord {
            provider_key: fields.idempotency_key.as_deref().and_then(text),
            intent_key: fields.intent_key.as_deref().and_then(text),
            external_id,
            amount: fields.amount.as_deref().and_then(text),
            subject: fields.subject.as_deref().and_then(text),
            raw: item,
        })
    }
}
