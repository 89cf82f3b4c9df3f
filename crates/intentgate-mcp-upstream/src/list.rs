//! Paging through an MCP server's records of a tool's effects, for reconciliation: the
//! [`McpList`] tool called once per page, and each result read the way the HTTP upstream
//! reads a page
//! ([`ListRecords::read_page`](intentgate_http::spec::ListRecords::read_page)), so both kinds of listing pair records with
//! intents alike.
//!
//! As with HTTP, one page is asked for at a time and handed over before the next, and a page
//! that fails leaves the pager where it was: calling [`McpRecordPager::next_page`] again asks
//! for the same page.

use std::sync::Arc;

use intentgate_core::UpstreamObservation;
use intentgate_http::{
    LIST_PAGE_RECORDS_MAX, LIST_PAGE_TIMEOUT, LIST_PAGES_MAX, ListedRecord, window_values,
};
use rmcp::model::CallToolRequestParams;
use serde_json::{Map, Value, json};

use crate::connection::McpConnection;
use crate::spec::McpList;
use crate::upstream::{call_tool, first_text, render, result_value};
use intentgate_http::template::{Absent, GatewayValues, Values};

/// The values a listing's `arguments` template may use.
const LIST_VALUE_NAMES: [&str; 4] = ["since_ms", "until_ms", "limit", "cursor"];

/// Pages through the records an [`McpList`] tool lists between `since_ms` (inclusive) and
/// `until_ms` (exclusive).
pub struct McpRecordPager {
    connection: Arc<McpConnection>,
    list: McpList,
    since_ms: i64,
    until_ms: i64,
    page_limit: u32,
    /// The cursor of the next page; `None` before the first page.
    cursor: Option<String>,
    pages_read: u32,
    finished: bool,
}

impl std::fmt::Debug for McpRecordPager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpRecordPager")
            .field("server", &self.connection.name())
            .field("tool", &self.list.call.tool)
            .field("since_ms", &self.since_ms)
            .field("until_ms", &self.until_ms)
            .field("pages_read", &self.pages_read)
            .field("finished", &self.finished)
            .finish_non_exhaustive()
    }
}

impl McpRecordPager {
    /// A pager over `list` on `connection`'s server, `page_limit` records per page (at most
    /// [`LIST_PAGE_RECORDS_MAX`]). Sends nothing until [`McpRecordPager::next_page`].
    pub fn new(
        connection: Arc<McpConnection>,
        list: McpList,
        since_ms: i64,
        until_ms: i64,
        page_limit: u32,
    ) -> Result<McpRecordPager, String> {
        if page_limit == 0 || page_limit > LIST_PAGE_RECORDS_MAX {
            return Err(format!(
                "a page of {page_limit} records is outside 1 to {LIST_PAGE_RECORDS_MAX}"
            ));
        }
        Ok(McpRecordPager {
            connection,
            list,
            since_ms,
            until_ms,
            page_limit,
            cursor: None,
            pages_read: 0,
            finished: false,
        })
    }

    /// The next page of records, or `None` once the server has no more. On an error the
    /// pager stays where it was; calling again asks for the same page.
    pub async fn next_page(&mut self) -> Result<Option<Vec<ListedRecord>>, String> {
        if self.finished {
            return Ok(None);
        }
        if self.pages_read >= LIST_PAGES_MAX {
            return Err(format!(
                "the listing ran past {LIST_PAGES_MAX} pages; the server's cursors may go round"
            ));
        }
        let tool = &self.list.call.tool;
        // A listing waits for a restarting server, as a lookup does: it performs nothing.
        let result = call_tool(&self.connection, self.request()?, LIST_PAGE_TIMEOUT, true)
            .await
            .map_err(|observation| {
                format!(
                    "listing tool `{tool}` of MCP server `{}` got no page: {}",
                    self.connection.name(),
                    describe(&observation)
                )
            })?;
        if result.is_error == Some(true) {
            return Err(format!(
                "listing tool `{tool}` answered an error: {}",
                first_text(&result).unwrap_or_default()
            ));
        }
        let page = self
            .list
            .records
            .read_page(result_value(&result), self.cursor.as_deref())
            .map_err(|error| format!("the page of listing tool `{tool}`: {error}"))?;
        self.pages_read += 1;
        self.finished = page.next_cursor.is_none();
        self.cursor = page.next_cursor;
        Ok(Some(page.records))
    }

    /// The `tools/call` of the next page. Without an `arguments` template the window in
    /// milliseconds, the limit and the cursor are sent as they are (the cursor only once
    /// there is one); a template may also use the window in seconds.
    fn request(&self) -> Result<CallToolRequestParams, String> {
        let values = window_values(
            self.since_ms,
            self.until_ms,
            self.page_limit,
            self.cursor.as_deref(),
        );
        let value_of = |name: &str| values.get(name).filter(|value| !value.is_null()).cloned();
        let arguments = match &self.list.call.arguments {
            Some(template) => {
                // Rendered as every template is; the values without the first page's cursor.
                let present: Map<String, Value> = LIST_VALUE_NAMES
                    .into_iter()
                    .filter_map(|name| Some((name.to_owned(), value_of(name)?)))
                    .collect();
                let present = Value::Object(present);
                let values = Values {
                    arguments: &present,
                    gateway: GatewayValues::default(),
                };
                Some(
                    render(template, &values, Absent::LeaveOut)
                        .map_err(|error| format!("the listing's arguments: {error}"))?,
                )
            }
            None => Some(Value::Object(
                LIST_VALUE_NAMES
                    .into_iter()
                    .filter_map(|name| Some((name.to_owned(), value_of(name)?)))
                    .collect::<Map<_, _>>(),
            )),
        };
        let params =
            json!({"name": self.list.call.tool, "arguments": arguments.unwrap_or(json!({}))});
        serde_json::from_value(params).map_err(|error| format!("building tools/call: {error}"))
    }
}

/// What a listing call that got no result saw, in words.
fn describe(observation: &UpstreamObservation) -> String {
    match observation {
        UpstreamObservation::Timeout => {
            format!("no answer within {} s", LIST_PAGE_TIMEOUT.as_secs())
        }
        UpstreamObservation::NotSent { reason } | UpstreamObservation::Dropped { reason } => {
            reason.clone()
        }
        UpstreamObservation::Response { body, .. } => body
            .pointer("/error/message")
            .and_then(Value::as_str)
            .unwrap_or("an error")
            .to_owned(),
    }
}
