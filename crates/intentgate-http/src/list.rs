//! Paging through the provider's records of a tool's effects, for reconciliation.
//!
//! A [`RecordPager`] asks for one page at a time and hands it over before asking for the
//! next, so memory stays bounded by one page however many records the window holds. A page
//! that fails leaves the pager where it was: calling [`RecordPager::next_page`] again asks
//! for the same page, so the caller decides how to retry.
//!
//! List templates may use `{since_ms}`, `{until_ms}`, their Unix-seconds forms `{since_s}`
//! (rounded down) and `{until_s}` (rounded up), `{limit}` and `{cursor}` (nothing else: a
//! list has no intent). On the first page there is no cursor, so a query parameter that is
//! exactly `{cursor}` is left out. The next page's cursor is the one the page names
//! (`next_cursor`), or, while the page says it has more (`has_more`), the last record's id.
//! A page that would have the listing ask for the same page again, or that says more follow
//! without a record to continue after, ends the listing with an error: a listing never
//! loops, and never stops early as though it were done.

use std::time::Duration;

use reqwest::Client;
use serde_json::{Value, json};

use crate::error::{HttpError, check_pointer};
use crate::request::{Body, CompiledUpstream, Exchange, RequestParts, RequestTemplate, exchange};
pub use crate::spec::LIST_PAGE_RECORDS_MAX;
use crate::spec::{ListRecords, ListSpec, ListSubject, Method, UpstreamSpec};
use crate::template::{Absent, GatewayValues, Template, Values};

/// The placeholders a list template may use.
pub const LIST_PLACEHOLDERS: [&str; 6] = [
    "since_ms", "until_ms", "since_s", "until_s", "limit", "cursor",
];
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
    /// Records asked for per page: the caller's page size, capped by `limit_max`.
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
        page_limit: spec
            .limit_max
            .map_or(page_limit, |limit_max| page_limit.min(limit_max)),
        cursor: None,
        pages_read: 0,
        finished: false,
    })
}

/// Checks a list spec when the config is loaded: templates (which may use only
/// [`LIST_PLACEHOLDERS`], and must carry `{cursor}`), pointers, paging and `limit_max`.
pub fn check_list_spec(spec: &ListSpec) -> Result<(), HttpError> {
    list_template(spec).map(|_| ())
}

/// True when the list's request carries `{cursor}` (in its path, a query value or a header
/// value), which is how every page after the first is asked for.
pub fn list_uses_cursor(spec: &ListSpec) -> bool {
    let uses = |template: &str| {
        Template::parse(template).is_ok_and(|template| {
            template
                .argument_paths()
                .any(|path| matches!(path, [name] if name == "cursor"))
        })
    };
    uses(&spec.path)
        || spec.query.values().any(|value| uses(value))
        || spec.headers.values().any(|value| uses(value))
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
        body_format: crate::spec::BodyFormat::Json,
        // The first page has no cursor: a parameter that is exactly `{cursor}` is left out.
        absent: Absent::LeaveOut,
    })?;
    request.check(&LIST_PLACEHOLDERS, false)?;
    spec.records().check()?;
    if !list_uses_cursor(spec) {
        return Err(HttpError::BadList(
            "the request has no `{cursor}`, so every page would be the first one: put it in \
             the query parameter that asks for the next page (`starting_after: \"{cursor}\"`)"
                .to_owned(),
        ));
    }
    if spec.limit_max == Some(0) {
        return Err(HttpError::BadList(
            "`limit_max` is 0; give the provider's largest page (Stripe: 100)".to_owned(),
        ));
    }
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
        let arguments = window_values(
            self.since_ms,
            self.until_ms,
            self.page_limit,
            self.cursor.as_deref(),
        );
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

/// The values a list template renders: the window in milliseconds and in seconds (since
/// rounded down, until rounded up, so the seconds window covers the milliseconds one), the
/// page size and the cursor (null on the first page). Shared with MCP listings.
pub fn window_values(since_ms: i64, until_ms: i64, limit: u32, cursor: Option<&str>) -> Value {
    json!({
        "since_ms": since_ms,
        "until_ms": until_ms,
        "since_s": since_ms.div_euclid(1000),
        "until_s": until_ms.div_euclid(1000) + i64::from(until_ms.rem_euclid(1000) != 0),
        "limit": limit,
        "cursor": cursor,
    })
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
        match (&self.next_cursor, &self.has_more) {
            (Some(pointer), None) => check_pointer("list", "next_cursor", pointer)?,
            (None, Some(pointer)) => check_pointer("list", "has_more", pointer)?,
            _ => {
                return Err(HttpError::BadList(
                    "give exactly one of `next_cursor` (a pointer to the next page's cursor) \
                     and `has_more` (a pointer to a boolean; the next page starts after the \
                     last record's id)"
                        .to_owned(),
                ));
            }
        }
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
        for subject in fields.subject.iter().flat_map(ListSubject::pointers) {
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
    /// so that page is refused, as is a page that says more follow (`has_more`) but holds no
    /// record to continue after. The error says what is wrong with the page.
    pub fn read_page(&self, page: Value, cursor: Option<&str>) -> Result<ListedPage, String> {
        let mut page = page;
        let next = match (&self.next_cursor, &self.has_more) {
            (Some(pointer), None) => Next::Cursor(pointer, page.pointer(pointer).cloned()),
            (None, Some(pointer)) => match page.pointer(pointer) {
                Some(Value::Bool(more)) => Next::AfterLast(pointer, *more),
                _ => {
                    return Err(format!(
                        "no boolean at `{pointer}` to say whether another page follows"
                    ));
                }
            },
            _ => {
                return Err(
                    "the list gives not exactly one of `next_cursor` and `has_more`".to_owned(),
                );
            }
        };
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
        let next_cursor = match next {
            Next::Cursor(_, None | Some(Value::Null)) => None,
            Next::Cursor(_, Some(Value::String(cursor))) if cursor.is_empty() => None,
            Next::Cursor(_, Some(Value::String(cursor))) => Some(cursor),
            Next::Cursor(_, Some(Value::Number(cursor))) => Some(cursor.to_string()),
            Next::Cursor(pointer, Some(_)) => {
                return Err(format!(
                    "the cursor at `{pointer}` is neither text nor a number"
                ));
            }
            Next::AfterLast(_, false) => None,
            Next::AfterLast(pointer, true) => match records.last() {
                Some(last) => Some(last.external_id.clone()),
                None => {
                    return Err(format!(
                        "the page says another follows (`{pointer}` is true) but holds no \
                         record to continue after; the listing can't go on, and is not done"
                    ));
                }
            },
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
            subject: fields.subject.as_ref().and_then(|subject| {
                let named: Vec<String> = subject
                    .pointers()
                    .iter()
                    .filter_map(|pointer| text(pointer))
                    .collect();
                (!named.is_empty()).then(|| named.join(" / "))
            }),
            raw: item,
        })
    }
}

/// Where a page says how the listing goes on.
enum Next<'a> {
    /// The page names the next cursor, at this pointer.
    Cursor(&'a str, Option<Value>),
    /// The boolean at this pointer says whether another page follows, after the last record.
    AfterLast(&'a str, bool),
}
