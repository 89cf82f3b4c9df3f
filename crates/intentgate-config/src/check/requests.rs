//! The checks of a tool's upstream requests (`call`, `lookup`, `list`): methods, path,
//! query, header and body templates with the HTTP crate's own parser, so the config is
//! refused for exactly what would make a request impossible to build, and the JSON pointers
//! that read the answers.

use std::collections::BTreeMap;

use intentgate_config_file::at;
use intentgate_config_file::env;
use intentgate_config_file::source_map::{Segment, segments};
use intentgate_http::spec::{
    BodyFormat, CallSpec, ListSpec, LookupPages, LookupSpec, MatchField, Method, UpstreamSpec,
};
use intentgate_http::template::{
    GATEWAY_VALUE_NAMES, Template, TemplateError, check_body_template, check_template,
};
use intentgate_http::{
    HttpError, LIST_PLACEHOLDERS, LOOKUP_PAGES_DEFAULT, LOOKUP_PAGES_MAX, check_list_spec,
    list_uses_cursor,
};
use serde_json::Value;

use super::tools::pointer_path;
use super::{Checker, names};

impl Checker<'_, '_> {
    pub(super) fn call(
        &mut self,
        index: usize,
        label: &str,
        mut call: CallSpec,
        upstreams: &BTreeMap<String, UpstreamSpec>,
        arguments: &[String],
    ) -> CallSpec {
        self.upstream_exists(
            &at!["tools", index, "call", "upstream"],
            label,
            &call.upstream,
            upstreams,
        );
        if matches!(call.method, Method::Get | Method::Delete) && call.body.is_some() {
            self.push(
                &at!["tools", index, "call", "body"],
                format!(
                    "{label}: a {} request carries no body",
                    method_name(call.method)
                ),
                "remove `body:`, or pass the values in `query:` or the path",
            );
        }
        self.pointer(
            &at!["tools", index, "call", "result", "external_id"],
            label,
            call.result.external_id.as_deref(),
        );
        self.pointer(
            &at!["tools", index, "call", "result", "pointer"],
            label,
            call.result.pointer.as_deref(),
        );
        if self.arguments_known {
            let names: Vec<&str> = arguments.iter().map(String::as_str).collect();
            self.templates(
                index,
                "call",
                label,
                &call.path,
                &call.query,
                &call.headers,
                &names,
            );
            if let Some(body) = &call.body {
                self.body_template(index, "call", label, body, &names);
            }
        }
        self.form_body(index, "call", label, call.body.as_ref(), call.body_format);
        let headers = std::mem::take(&mut call.headers);
        call.headers = self.headers(
            &at!["tools", index, "call"],
            &format!("tools[{index}].call"),
            headers,
            true,
        );
        call
    }

    pub(super) fn lookup(
        &mut self,
        index: usize,
        label: &str,
        mut lookup: LookupSpec,
        upstreams: &BTreeMap<String, UpstreamSpec>,
        arguments: &[String],
    ) -> LookupSpec {
        // Without `upstream:` a lookup uses the call's, which `call` checks.
        if let Some(upstream) = &lookup.upstream {
            self.upstream_exists(
                &at!["tools", index, "lookup", "upstream"],
                label,
                upstream,
                upstreams,
            );
        }
        if self.arguments_known {
            let names: Vec<&str> = arguments.iter().map(String::as_str).collect();
            self.templates(
                index,
                "lookup",
                label,
                &lookup.path,
                &lookup.query,
                &lookup.headers,
                &names,
            );
            if let Some(body) = &lookup.body {
                self.body_template(index, "lookup", label, body, &names);
            }
        }
        if matches!(lookup.method, Method::Get | Method::Delete) && lookup.body.is_some() {
            self.push(
                &at!["tools", index, "lookup", "body"],
                format!(
                    "{label}: a {} lookup carries no body",
                    method_name(lookup.method)
                ),
                "remove `body:`, or pass the filter in `query:` (or make the lookup a POST \
                 search, if the provider has one)",
            );
        }
        self.form_body(
            index,
            "lookup",
            label,
            lookup.body.as_ref(),
            lookup.body_format,
        );
        self.pointer(
            &at!["tools", index, "lookup", "found"],
            label,
            Some(&lookup.found),
        );
        self.pointer(
            &at!["tools", index, "lookup", "external_id"],
            label,
            lookup.external_id.as_deref(),
        );
        self.lookup_proof(index, label, lookup.key.as_deref(), &lookup.match_fields);
        if let Some(pages) = &lookup.pages {
            self.lookup_pages(index, label, pages);
        }
        for (position, status) in lookup.not_found_statuses.iter().enumerate() {
            if !(100..=599).contains(status) {
                self.push(
                    &at!["tools", index, "lookup", "not_found_statuses", position],
                    format!("{label}: {status} is not an HTTP status"),
                    "list the statuses that mean \"not found\", e.g. `not_found_statuses: [404]`",
                );
            }
        }
        let headers = std::mem::take(&mut lookup.headers);
        lookup.headers = self.headers(
            &at!["tools", index, "lookup"],
            &format!("tools[{index}].lookup"),
            headers,
            true,
        );
        lookup
    }

    /// A lookup must prove that a record is this intent's effect: by the provider key the
    /// record carries (`key`), by business fields (`match`), or both. One that proves by
    /// neither takes whatever the provider answered first, and settles the intent with it.
    pub(super) fn lookup_proof(
        &mut self,
        index: usize,
        label: &str,
        key: Option<&str>,
        match_fields: &BTreeMap<String, MatchField>,
    ) {
        self.pointer(&at!["tools", index, "lookup", "key"], label, key);
        if key.is_none() && match_fields.is_empty() {
            self.push(
                &at!["tools", index, "lookup"],
                format!(
                    "{label}: the lookup has neither `key` nor `match`, so it can't tell this \
                     intent's effect from another's: the first record of its answer (another \
                     tenant's, another customer's) would settle the intent as done"
                ),
                "send the provider key with the effect (`{idempotency_key}`, scoped by tenant \
                 and tool, e.g. in the body's metadata) and add `key: <pointer to it in a \
                 record>` (e.g. `key: /metadata/idempotency_key`); for a provider that keeps no \
                 key, add `match: {<argument>: {record: <pointer>}}` for every business field \
                 (order, amount, currency, recipient)",
            );
        }
    }

    /// A listing lookup's paging: exactly one way to find the next page, a bounded count.
    fn lookup_pages(&mut self, index: usize, label: &str, pages: &LookupPages) {
        let base = at!["tools", index, "lookup", "pages"];
        match (&pages.next_cursor, &pages.has_more) {
            (Some(_), Some(_)) | (None, None) => self.push(
                &base,
                format!(
                    "{label}: `lookup.pages` must say how the next page is found: exactly one \
                     of `next_cursor` and `has_more`"
                ),
                "give `next_cursor: <pointer to the next page's cursor>`, or `has_more: \
                 <pointer to a boolean>` when the next page starts after the last record's id \
                 (Stripe: `has_more: /has_more` with `query: starting_after`)",
            ),
            _ => {}
        }
        self.pointer(
            &at!["tools", index, "lookup", "pages", "next_cursor"],
            label,
            pages.next_cursor.as_deref(),
        );
        self.pointer(
            &at!["tools", index, "lookup", "pages", "has_more"],
            label,
            pages.has_more.as_deref(),
        );
        if let Some(max) = pages.max
            && !(1..=LOOKUP_PAGES_MAX).contains(&max)
        {
            self.push(
                &at!["tools", index, "lookup", "pages", "max"],
                format!("{label}: `lookup.pages.max` is {max}; it must be 1 to {LOOKUP_PAGES_MAX}"),
                format!(
                    "read at most {LOOKUP_PAGES_MAX} pages (the default is \
                     {LOOKUP_PAGES_DEFAULT}); a lookup that needs more should filter by the \
                     payment or the recipient"
                ),
            );
        }
        if pages.query.is_empty() {
            self.push(
                &at!["tools", index, "lookup", "pages", "query"],
                format!("{label}: `lookup.pages.query` is empty"),
                "name the query parameter that carries the cursor, e.g. `query: starting_after`",
            );
        }
    }

    pub(super) fn list(
        &mut self,
        index: usize,
        label: &str,
        mut list: ListSpec,
        upstreams: &BTreeMap<String, UpstreamSpec>,
    ) -> ListSpec {
        if let Some(upstream) = &list.upstream {
            self.upstream_exists(
                &at!["tools", index, "list", "upstream"],
                label,
                upstream,
                upstreams,
            );
        }
        self.list_templates(index, label, &list);
        if !list_uses_cursor(&list) {
            let at = if list.query.is_empty() {
                at!["tools", index, "list"].to_vec()
            } else {
                at!["tools", index, "list", "query"].to_vec()
            };
            self.push(
                &at,
                format!(
                    "{label}: the list's request has no `{{cursor}}`, so every page it asks for \
                     would be the first one"
                ),
                "add the query parameter that asks for the next page, e.g. `starting_after: \
                 \"{cursor}\"` (left out of the first page; with `has_more` it is the last \
                 record's id)",
            );
        }
        if list.limit_max == Some(0) {
            self.push(
                &at!["tools", index, "list", "limit_max"],
                format!("{label}: `list.limit_max` is 0, so no page could hold a record"),
                "give the provider's largest page (Stripe: `limit_max: 100`), or remove \
                 `limit_max` when the provider takes any page size",
            );
        }
        let headers = std::mem::take(&mut list.headers);
        list.headers = self.headers(
            &at!["tools", index, "list"],
            &format!("tools[{index}].list"),
            headers,
            true,
        );
        list
    }

    /// Checks the path, query values and header values of one request (`part` is `call`,
    /// `lookup` or `list`) with the HTTP crate's template parser, each at its own line.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn templates(
        &mut self,
        index: usize,
        part: &str,
        label: &str,
        request_path: &str,
        query: &BTreeMap<String, String>,
        headers: &BTreeMap<String, String>,
        names: &[&str],
    ) {
        let checked = Template::parse(request_path)
            .and_then(|template| template.check_path().and_then(|()| template.check(names)));
        if let Err(error) = checked {
            self.template_error(
                &at!["tools", index, part, "path"],
                label,
                &format!("{part}.path"),
                &error,
                names,
            );
        }
        for (key, value) in query {
            if let Err(error) = check_template(value, names) {
                let field = format!("{part}.query.{key}");
                self.template_error(
                    &at!["tools", index, part, "query", key],
                    label,
                    &field,
                    &error,
                    names,
                );
            }
        }
        for (key, value) in headers {
            // Checked without its `${NAME}` references: their values are secrets, not
            // templates, and are resolved later.
            if let Err(error) = check_template(&env::without_references(value), names) {
                let field = format!("{part}.headers.{key}");
                self.template_error(
                    &at!["tools", index, part, "headers", key],
                    label,
                    &field,
                    &error,
                    names,
                );
            }
        }
    }

    /// Checks a list's path, query values and header values, each at its own line. A listing
    /// runs outside any call: no arguments and no intent, only the window and paging
    /// placeholders. Each template goes through the HTTP crate's own list check, alone in a
    /// spec, so that the rules are the ones the listing will run with.
    pub(super) fn list_templates(&mut self, index: usize, label: &str, list: &ListSpec) {
        let alone =
            |path: &str, query: BTreeMap<String, String>, headers: BTreeMap<String, String>| {
                // Its other fields are the list's own: a template error is reported before
                // any other, and only template errors are taken here.
                let spec = ListSpec {
                    upstream: None,
                    path: path.to_owned(),
                    query,
                    headers,
                    ..list.clone()
                };
                match check_list_spec(&spec) {
                    Err(HttpError::Template { error, .. }) => Some(error),
                    _ => None,
                }
            };
        // A path that checks alone, so that a query or header is checked on its own merits.
        const ROOT: &str = "/";
        if let Some(error) = alone(&list.path, BTreeMap::new(), BTreeMap::new()) {
            self.template_error(
                &at!["tools", index, "list", "path"],
                label,
                "list.path",
                &error,
                &LIST_PLACEHOLDERS,
            );
        }
        for (key, value) in &list.query {
            let query = BTreeMap::from([(key.clone(), value.clone())]);
            if let Some(error) = alone(ROOT, query, BTreeMap::new()) {
                let field = format!("list.query.{key}");
                self.template_error(
                    &at!["tools", index, "list", "query", key],
                    label,
                    &field,
                    &error,
                    &LIST_PLACEHOLDERS,
                );
            }
        }
        for (key, value) in &list.headers {
            let headers = BTreeMap::from([(key.clone(), env::without_references(value))]);
            if let Some(error) = alone(ROOT, BTreeMap::new(), headers) {
                let field = format!("list.headers.{key}");
                self.template_error(
                    &at!["tools", index, "list", "headers", key],
                    label,
                    &field,
                    &error,
                    &LIST_PLACEHOLDERS,
                );
            }
        }
    }

    /// A form body is named fields: its template must be a mapping (or one placeholder of
    /// an object argument); `body_format: form` without a body sends none.
    fn form_body(
        &mut self,
        index: usize,
        part: &str,
        label: &str,
        body: Option<&Value>,
        format: BodyFormat,
    ) {
        let Some(body) = body else { return };
        let whole_placeholder = body
            .as_str()
            .and_then(|text| intentgate_core::placeholder::parse(text).ok())
            .is_some_and(|pieces| {
                matches!(
                    pieces.as_slice(),
                    [intentgate_core::placeholder::Piece::Placeholder(_)]
                )
            });
        if format == BodyFormat::Form && !body.is_object() && !whole_placeholder {
            self.push(
                &at!["tools", index, part, "body"],
                format!("{label}: `{part}.body` is sent as a form (`body_format: form`), and a form is a mapping of field names to values"),
                "write the body as a mapping, e.g. `body: {amount: \"{amount:minor(USD)}\", metadata: {intent_key: \"{intent_key}\"}}`, or use `body_format: json`",
            );
        }
    }

    /// Checks a call's or lookup's (`part`) body template, at the line of the offending
    /// string.
    pub(super) fn body_template(
        &mut self,
        index: usize,
        part: &str,
        label: &str,
        body: &Value,
        names: &[&str],
    ) {
        let Err(error) = check_body_template(body, names) else {
            return;
        };
        let (pointer, inner) = match &error {
            TemplateError::InBody { pointer, error } => (pointer.as_str(), error.as_ref()),
            other => ("", other),
        };
        let prefix = [
            "tools".to_owned(),
            index.to_string(),
            part.to_owned(),
            "body".to_owned(),
        ];
        let owned = pointer_path(&prefix, pointer);
        let field = if pointer.is_empty() || pointer == "/" {
            format!("{part}.body")
        } else {
            format!("{part}.body at `{pointer}`")
        };
        self.template_error(&segments(&owned), label, &field, inner, names);
    }

    pub(super) fn template_error(
        &mut self,
        path: &[Segment<'_>],
        label: &str,
        field: &str,
        error: &TemplateError,
        names: &[&str],
    ) {
        let available = |names: &[&str]| {
            if names.is_empty() {
                "the tool has no arguments".to_owned()
            } else {
                format!("the names available are {}", self::names(names))
            }
        };
        let fix = match error {
            TemplateError::UnknownName { name } => format!(
                "use one of the tool's arguments or a gateway value ({}), or add `{name}` to \
                 input_schema.properties; {}",
                self::names(GATEWAY_VALUE_NAMES.iter().map(|name| format!("{{{name}}}"))),
                available(names)
            ),
            TemplateError::NotAvailableHere { .. } => format!(
                "a list request runs outside any call, so it may use only {}",
                self::names(LIST_PLACEHOLDERS.iter().map(|name| format!("{{{name}}}")))
            ),
            TemplateError::UnknownCurrencyArgument { name, .. } => format!(
                "take the currency from an argument that holds an ISO 4217 code \
                 (`{{{name}:minor(currency)}}`), or write the code (`{{{name}:minor(USD)}}`); {}",
                available(names)
            ),
            TemplateError::BadPath(_) => {
                "write an absolute path such as `/v1/refunds/{refund_id}`, and put query \
                 parameters under `query:`"
                    .to_owned()
            }
            _ => format!(
                "write `{{argument}}` for an argument, `{{argument:.2}}` for an exact decimal, \
                 `{{argument:minor(USD)}}` for an amount in a currency's minor units, and \
                 `{{{{` or `}}}}` for a literal brace; {}",
                available(names)
            ),
        };
        // The error never holds template text (a header template may hold a secret).
        self.push(path, format!("{label}: `{field}`: {error}"), fix);
    }

    pub(super) fn pointer(&mut self, path: &[Segment<'_>], label: &str, pointer: Option<&str>) {
        let Some(pointer) = pointer else { return };
        if is_json_pointer(pointer) {
            return;
        }
        self.push(
            path,
            format!("{label}: `{pointer}` is not a JSON pointer"),
            "write a JSON pointer: empty for the whole document, or `/` followed by keys and \
             indexes, e.g. `/data/0` or `/metadata/intent_key`",
        );
    }
}

/// An RFC 6901 JSON pointer: empty, or `/`-separated tokens where `~` is only `~0` or `~1`.
pub(super) fn is_json_pointer(pointer: &str) -> bool {
    if pointer.is_empty() {
        return true;
    }
    let Some(rest) = pointer.strip_prefix('/') else {
        return false;
    };
    let mut chars = rest.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return false;
        }
    }
    true
}

pub(super) fn method_name(method: Method) -> &'static str {
    match method {
        Method::Get => "GET",
        Method::Post => "POST",
        Method::Put => "PUT",
        Method::Patch => "PATCH",
        Method::Delete => "DELETE",
    }
}
