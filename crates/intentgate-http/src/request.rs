//! One HTTP exchange: the shared client, a request rendered from its templates, and what
//! came back, sorted into the shapes docs/design.md section 5 tells apart.
//!
//! The question every step answers is "could the provider have acted on this?". A request
//! that could not be built or never reached a connected socket was not sent; anything that
//! breaks after that is ambiguous. Nothing here retries: the gate decides that.

use std::error::Error as _;
use std::time::{Duration, SystemTime};

use intentgate_core::{ProviderSignals, Unreachable};
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use reqwest::{Client, Url};
use serde_json::Value;

use crate::error::HttpError;
use crate::spec::{BodyFormat, Method, UpstreamSpec};
use crate::template::{Absent, BodyTemplate, Template, TemplateError, Values};

/// Longest wait for a TCP (and TLS) connection. A connect that fails within it is reported
/// as "not sent", which the gate may retry with the same key; a tool timeout shorter than
/// this ends a slow connect as a timeout instead, which is ambiguous but safe. Connecting to
/// a healthy API takes well under a second, even across regions.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Idle connections kept per upstream host. Enough for the gateway's concurrency target (64
/// callers) to reuse warm connections without holding hundreds of idle sockets.
pub const POOL_IDLE_PER_HOST_MAX: usize = 32;
/// How long an idle connection is kept. Shorter than the usual server keep-alive (nginx 75 s,
/// cloud load balancers 60 s), so the gateway rarely sends on a connection the server is
/// closing at that moment: such a request would end as "dropped", which is ambiguous.
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest response body read for a tool call. Bounds the memory of one call; a longer body
/// is cut, which makes it unreadable as JSON (it is then kept as bounded text).
pub const RESPONSE_BODY_BYTES_MAX: usize = 1024 * 1024;
/// Longest text kept from a body that is not JSON (an HTML error page from a proxy): enough
/// to say what went wrong, small enough to store with an intent and show to a model.
pub const TEXT_BODY_BYTES_MAX: usize = 4 * 1024;
/// Longest transport error reason kept; reasons end up in the event log.
pub const REASON_LENGTH_MAX: usize = 512;

/// The status of the answer given for a request that could not be built from the call's
/// arguments (a missing argument, a line break in a header). A 4xx is what the gate
/// classifies as rejected: nothing was sent, and the model may correct the arguments.
pub const NOT_BUILT_STATUS: u16 = 400;

/// The client every request of one [`HttpUpstream`](crate::HttpUpstream) shares: pooled
/// connections, no redirects, a connect timeout. Installs rustls' ring crypto provider
/// first, since reqwest is built without one (the default, aws-lc-rs, doubles a clean build).
pub fn http_client() -> Result<Client, HttpError> {
    // An error only means a provider is installed already, which is what we need.
    let _ = rustls::crypto::ring::default_provider().install_default();
    Client::builder()
        // A redirect of a POST may repeat its effect at another URL, and a 3xx proves nothing
        // about whether the first URL acted: the gate sees the 3xx itself.
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(CONNECT_TIMEOUT)
        .pool_max_idle_per_host(POOL_IDLE_PER_HOST_MAX)
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .user_agent(concat!("intentgate/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|error| HttpError::Client(reason(&error)))
}

/// A named upstream, checked: its base URL parsed and its headers turned into header values
/// marked sensitive (never shown by `Debug`, never indexed by HTTP/2 header compression).
#[derive(Clone)]
pub(crate) struct CompiledUpstream {
    pub base: Url,
    pub headers: HeaderMap,
    pub idempotency_header: HeaderName,
}

impl CompiledUpstream {
    pub fn new(name: &str, spec: &UpstreamSpec) -> Result<CompiledUpstream, HttpError> {
        let bad_url = |reason: &str| HttpError::BadBaseUrl {
            upstream: name.to_owned(),
            reason: reason.to_owned(),
        };
        // The parse error never holds the URL, which may carry a secret.
        let base = Url::parse(&spec.base_url).map_err(|error| bad_url(&error.to_string()))?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(bad_url("the scheme must be http or https"));
        }
        if base.host().is_none() || base.cannot_be_a_base() {
            return Err(bad_url("it has no host"));
        }
        if base.fragment().is_some() {
            return Err(bad_url("it has a fragment (`#...`)"));
        }
        let context = format!("upstream `{name}`");
        let mut headers = HeaderMap::new();
        for (header, value) in &spec.headers {
            let header_name = header_name(&context, header)?;
            let mut value =
                HeaderValue::from_str(value).map_err(|_| HttpError::BadHeaderValue {
                    context: context.clone(),
                    name: header.clone(),
                })?;
            value.set_sensitive(true);
            headers.insert(header_name, value);
        }
        Ok(CompiledUpstream {
            base,
            headers,
            idempotency_header: header_name(&context, &spec.idempotency_header)?,
        })
    }
}

fn header_name(context: &str, name: &str) -> Result<HeaderName, HttpError> {
    HeaderName::from_bytes(name.as_bytes()).map_err(|_| HttpError::BadHeaderName {
        context: context.to_owned(),
        name: name.to_owned(),
    })
}

/// A request's templates, parsed and checked once when the tools are loaded.
#[derive(Debug, Clone)]
pub(crate) struct RequestTemplate {
    /// What the request is for, in errors: "tool `refund_order` call".
    pub context: String,
    /// The name of its upstream.
    pub upstream: String,
    pub method: reqwest::Method,
    pub path: Template,
    pub query: Vec<(String, Template)>,
    /// Each header's name as sent, its name as configured (for errors), its template.
    pub headers: Vec<(HeaderName, String, Template)>,
    pub body: Option<BodyTemplate>,
    /// How the body is sent.
    pub body_format: BodyFormat,
    /// What a query or header that is exactly one placeholder without a value does.
    pub absent: Absent,
    /// The path has no placeholder (a fixed route such as `/v1/refunds`): a 404 to it can
    /// only mean the route is wrong (`intentgate_core::outcome::route_not_found`), while a
    /// path that names a resource by a value may be answered 404 for that value.
    pub fixed_path: bool,
}

/// The templates of one request as configured.
pub(crate) struct RequestParts<'a> {
    pub context: String,
    pub upstream: &'a str,
    pub method: Method,
    pub path: &'a str,
    pub query: &'a std::collections::BTreeMap<String, String>,
    pub headers: &'a std::collections::BTreeMap<String, String>,
    pub body: Option<&'a Value>,
    pub body_format: BodyFormat,
    pub absent: Absent,
}

impl RequestTemplate {
    pub fn new(parts: RequestParts<'_>) -> Result<RequestTemplate, HttpError> {
        let context = parts.context;
        let template_error = |field: String, error| HttpError::Template {
            context: context.clone(),
            field,
            error,
        };
        let path = Template::parse(parts.path)
            .and_then(|path| path.check_path().map(|()| path))
            .map_err(|error| template_error("path".to_owned(), error))?;
        // Parsed above, so it parses: a path is fixed when it is one literal piece.
        let fixed_path = intentgate_core::placeholder::parse(parts.path).is_ok_and(|pieces| {
            pieces
                .iter()
                .all(|piece| matches!(piece, intentgate_core::placeholder::Piece::Literal(_)))
        });
        let mut query = Vec::with_capacity(parts.query.len());
        for (name, value) in parts.query {
            let template = Template::parse(value)
                .map_err(|error| template_error(format!("query `{name}`"), error))?;
            query.push((name.clone(), template));
        }
        let mut headers = Vec::with_capacity(parts.headers.len());
        for (name, value) in parts.headers {
            let template = Template::parse(value)
                .map_err(|error| template_error(format!("header `{name}`"), error))?;
            headers.push((header_name(&context, name)?, name.clone(), template));
        }
        let body = parts
            .body
            .map(BodyTemplate::parse)
            .transpose()
            .map_err(|error| template_error("body".to_owned(), error))?;
        if parts.body_format == BodyFormat::Form
            && let Some(body) = &body
            && !body.can_be_form()
        {
            return Err(template_error(
                "body".to_owned(),
                TemplateError::FormNotMapping,
            ));
        }
        Ok(RequestTemplate {
            upstream: parts.upstream.to_owned(),
            method: method(parts.method),
            path,
            query,
            headers,
            body,
            body_format: parts.body_format,
            context,
            absent: parts.absent,
            fixed_path,
        })
    }

    /// Checks that every placeholder names one of `names`, or a gateway value when
    /// `gateway_allowed`.
    pub fn check(&self, names: &[&str], gateway_allowed: bool) -> Result<(), HttpError> {
        let template_error = |field: String, error| HttpError::Template {
            context: self.context.clone(),
            field,
            error,
        };
        self.path
            .check_names(names, gateway_allowed)
            .map_err(|error| template_error("path".to_owned(), error))?;
        for (name, template) in &self.query {
            template
                .check_names(names, gateway_allowed)
                .map_err(|error| template_error(format!("query `{name}`"), error))?;
        }
        for (_, name, template) in &self.headers {
            template
                .check_names(names, gateway_allowed)
                .map_err(|error| template_error(format!("header `{name}`"), error))?;
        }
        if let Some(body) = &self.body {
            body.check_names(names, gateway_allowed)
                .map_err(|error| template_error("body".to_owned(), error))?;
        }
        Ok(())
    }

    /// True when the application's intent id (`{intent_id}`) is anywhere in the request.
    pub fn uses_intent_id(&self) -> bool {
        self.path.uses_intent_id()
            || self
                .query
                .iter()
                .any(|(_, template)| template.uses_intent_id())
            || self
                .headers
                .iter()
                .any(|(_, _, template)| template.uses_intent_id())
            || self.body.as_ref().is_some_and(BodyTemplate::uses_intent_id)
    }

    /// Renders the request for one call. Upstream headers first, then the request's own
    /// (which replace an upstream header of the same name), then the idempotency key.
    pub fn prepare(
        &self,
        upstream: &CompiledUpstream,
        values: &Values<'_>,
        idempotency_key: Option<&str>,
    ) -> Result<PreparedRequest, TemplateError> {
        let path = self.path.render_path(values)?;
        let mut url = upstream.base.clone();
        let full_path = format!("{}{path}", upstream.base.path().trim_end_matches('/'));
        url.set_path(&full_path);
        // The rendered path holds only checked literal text and encoded values, so the URL
        // parser has nothing to change; if it did, the request would go somewhere else.
        if url.path() != full_path {
            return Err(TemplateError::BadPath(
                "URL parsing would change the rendered path; refused so that an argument can't \
                 change which URL is called",
            ));
        }
        let mut query = Vec::with_capacity(self.query.len());
        for (name, template) in &self.query {
            match template.render_query(name, values)? {
                Some(pairs) => query.extend(pairs),
                None if self.absent == Absent::Refuse => return Err(template.missing()),
                None => {}
            }
        }
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        let mut headers = upstream.headers.clone();
        for (name, configured_name, template) in &self.headers {
            let Some(text) = template.render_header(configured_name, values)? else {
                if self.absent == Absent::Refuse {
                    return Err(template.missing());
                }
                continue;
            };
            let mut value = HeaderValue::from_str(&text)
                .map_err(|_| TemplateError::BadHeaderValue(configured_name.clone()))?;
            value.set_sensitive(true);
            headers.insert(name.clone(), value);
        }
        if let Some(key) = idempotency_key {
            let header = &upstream.idempotency_header;
            let value = HeaderValue::from_str(key)
                .map_err(|_| TemplateError::BadHeaderValue(header.as_str().to_owned()))?;
            headers.insert(header.clone(), value);
        }
        let body = match (&self.body, self.body_format) {
            (Some(template), BodyFormat::Json) => {
                let body = template.render_with(values, self.absent)?;
                if !headers.contains_key(CONTENT_TYPE) {
                    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                }
                Some(serde_json::to_vec(&body).expect("a JSON value always serialises"))
            }
            (Some(template), BodyFormat::Form) => {
                let body = template.render_form(values, self.absent)?;
                if !headers.contains_key(CONTENT_TYPE) {
                    headers.insert(
                        CONTENT_TYPE,
                        HeaderValue::from_static("application/x-www-form-urlencoded"),
                    );
                }
                Some(body.into_bytes())
            }
            (None, _) => None,
        };
        Ok(PreparedRequest {
            method: self.method.clone(),
            url,
            headers,
            body,
        })
    }
}

fn method(method: Method) -> reqwest::Method {
    match method {
        Method::Get => reqwest::Method::GET,
        Method::Post => reqwest::Method::POST,
        Method::Put => reqwest::Method::PUT,
        Method::Patch => reqwest::Method::PATCH,
        Method::Delete => reqwest::Method::DELETE,
    }
}

/// A rendered request, ready to send.
pub(crate) struct PreparedRequest {
    pub method: reqwest::Method,
    pub url: Url,
    pub headers: HeaderMap,
    pub body: Option<Vec<u8>>,
}

/// What one exchange ended in.
#[derive(Debug)]
pub(crate) enum Exchange {
    /// A status and a whole (or deliberately cut) body arrived.
    Response {
        status: u16,
        retry_after_ms: Option<u64>,
        body: Body,
        /// What the provider's headers said beyond the status ([`provider_signals`]).
        signals: ProviderSignals,
    },
    /// Nothing left this process: connect, DNS or TLS failure, or a request reqwest refused
    /// to build.
    NotSent(NotSent),
    /// The timeout passed, before or while the response arrived.
    Timeout,
    /// The connection broke after the request was sent, or the body was cut short.
    Dropped(String),
}

/// Why nothing left this process: the reason (without the URL), and, for a connection that
/// could not be made, which kind of failure it was. Shown as its reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NotSent {
    pub reason: String,
    /// `None` for a request that reqwest refused to build.
    pub unreachable: Option<Unreachable>,
}

impl std::fmt::Display for NotSent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

/// Which kind of connect failure `error` is: the host name did not resolve, the TLS
/// handshake failed (a `rustls::Error` somewhere in its causes), or no connection was made
/// (refused, unreachable, the connect timeout).
pub(crate) fn unreachable_kind(error: &reqwest::Error) -> Unreachable {
    if error.is_dns() {
        return Unreachable::Dns;
    }
    let mut source = error.source();
    while let Some(cause) = source {
        // An `io::Error` hands out only its inner error's source, so the inner errors of
        // nested ones (hyper's `Other` around tokio-rustls' `InvalidData` around the
        // `rustls::Error`) are looked into one by one.
        let mut layer: Option<&(dyn std::error::Error + 'static)> = Some(cause);
        while let Some(error) = layer {
            if error.is::<rustls::Error>() {
                return Unreachable::Tls;
            }
            layer = error
                .downcast_ref::<std::io::Error>()
                .and_then(std::io::Error::get_ref)
                .map(|inner| inner as &(dyn std::error::Error + 'static));
        }
        source = cause.source();
    }
    Unreachable::Connect
}

/// A response body, as far as it was read.
#[derive(Debug)]
pub(crate) enum Body {
    Empty,
    Json(Value),
    /// Not JSON, or cut at the read limit: the start of it as text.
    Text {
        text: String,
        truncated: bool,
    },
}

impl Body {
    /// The body as the gate stores it: JSON as it is, `null` when empty, otherwise
    /// `{"text": ...}` (with `"truncated": true` when it was cut).
    pub fn into_value(self) -> Value {
        match self {
            Body::Empty => Value::Null,
            Body::Json(value) => value,
            Body::Text { text, truncated } => {
                let mut object = serde_json::Map::new();
                object.insert("text".to_owned(), Value::String(text));
                if truncated {
                    object.insert("truncated".to_owned(), Value::Bool(true));
                }
                Value::Object(object)
            }
        }
    }
}

/// Sends a request once and reads its response, reading at most `body_bytes_max`.
pub(crate) async fn exchange(
    client: &Client,
    request: PreparedRequest,
    timeout: Duration,
    body_bytes_max: usize,
) -> Exchange {
    let mut builder = client
        .request(request.method, request.url)
        .headers(request.headers)
        // Covers connecting, sending, waiting and reading the body.
        .timeout(timeout);
    if let Some(body) = request.body {
        builder = builder.body(body);
    }
    let mut response = match builder.send().await {
        Ok(response) => response,
        // A connect timeout is a timeout *and* a connect error; nothing was sent, so the
        // connect check comes first.
        Err(error) if error.is_connect() => {
            return Exchange::NotSent(NotSent {
                reason: reason(&error),
                unreachable: Some(unreachable_kind(&error)),
            });
        }
        Err(error) if error.is_timeout() => return Exchange::Timeout,
        Err(error) if error.is_builder() => {
            return Exchange::NotSent(NotSent {
                reason: reason(&error),
                unreachable: None,
            });
        }
        Err(error) => return Exchange::Dropped(reason(&error)),
    };
    let status = response.status().as_u16();
    let retry_after_ms = response
        .headers()
        .get(RETRY_AFTER)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| parse_retry_after(value, SystemTime::now()));
    let signals = provider_signals(response.headers());
    let mut bytes = Vec::new();
    let mut cut = false;
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let room = body_bytes_max - bytes.len();
                if chunk.len() > room {
                    bytes.extend_from_slice(&chunk[..room]);
                    cut = true;
                    // Dropping the response closes the connection; the rest is not read.
                    break;
                }
                bytes.extend_from_slice(&chunk);
            }
            Ok(None) => break,
            // The status arrived, but the body was cut: the response is not whole, so it is
            // not a success the gate could store.
            Err(error) if error.is_timeout() => return Exchange::Timeout,
            Err(error) => return Exchange::Dropped(reason(&error)),
        }
    }
    Exchange::Response {
        status,
        retry_after_ms,
        body: parse_body(&bytes, cut),
        signals,
    }
}

/// The header that says the provider replayed the answer it stored for the request's
/// idempotency key (Stripe's; `true` when it did).
pub const REPLAYED_HEADER: &str = "idempotent-replayed";
/// The header with the provider's advice on retrying the request (Stripe's; `true` or
/// `false`).
pub const SHOULD_RETRY_HEADER: &str = "stripe-should-retry";

/// What a response's headers say beyond its status: a replayed answer, the provider's retry
/// advice. A value other than `true` or `false` (any case) says nothing.
pub(crate) fn provider_signals(headers: &HeaderMap) -> ProviderSignals {
    let flag = |name: &str| {
        let value = headers.get(name)?.to_str().ok()?.trim();
        if value.eq_ignore_ascii_case("true") {
            Some(true)
        } else if value.eq_ignore_ascii_case("false") {
            Some(false)
        } else {
            None
        }
    };
    ProviderSignals {
        replayed: flag(REPLAYED_HEADER) == Some(true),
        should_retry: flag(SHOULD_RETRY_HEADER),
    }
}

fn parse_body(bytes: &[u8], cut: bool) -> Body {
    if bytes.is_empty() {
        return Body::Empty;
    }
    if !cut && let Ok(value) = serde_json::from_slice(bytes) {
        return Body::Json(value);
    }
    let text = String::from_utf8_lossy(bytes);
    let mut end = text.len().min(TEXT_BODY_BYTES_MAX);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Body::Text {
        text: text[..end].to_owned(),
        truncated: cut || end < text.len(),
    }
}

/// Reads `Retry-After` (RFC 9110): delta-seconds, or an HTTP date taken relative to `now`
/// (a date in the past means "now"). Anything else is ignored. The cap is the gate's.
pub(crate) fn parse_retry_after(value: &str, now: SystemTime) -> Option<u64> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Too many digits for a u64 is "very long", which the gate's cap turns into a stop.
        let seconds: u64 = value.parse().unwrap_or(u64::MAX);
        return Some(seconds.saturating_mul(1000));
    }
    let date = httpdate::parse_http_date(value).ok()?;
    let wait = date.duration_since(now).unwrap_or(Duration::ZERO);
    Some(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX))
}

/// A transport error's reason, without its URL (which may carry a secret) and bounded.
pub(crate) fn reason(error: &reqwest::Error) -> String {
    // reqwest's own message names the URL; its sources (hyper, io, rustls) do not.
    let mut text = if error.is_connect() {
        "could not connect".to_owned()
    } else if error.is_timeout() {
        "timed out".to_owned()
    } else if error.is_body() || error.is_decode() {
        "the response body was cut".to_owned()
    } else if error.is_builder() {
        "the request could not be built".to_owned()
    } else {
        "the request failed".to_owned()
    };
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    bounded(text, REASON_LENGTH_MAX)
}

fn bounded(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_read_as_seconds_or_as_a_date() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(parse_retry_after("2", now), Some(2000));
        assert_eq!(parse_retry_after(" 0 ", now), Some(0));
        assert_eq!(
            parse_retry_after("99999999999999999999999", now),
            Some(u64::MAX)
        );
        let later = httpdate::fmt_http_date(now + Duration::from_secs(30));
        assert_eq!(parse_retry_after(&later, now), Some(30_000));
        let earlier = httpdate::fmt_http_date(now - Duration::from_secs(30));
        assert_eq!(parse_retry_after(&earlier, now), Some(0));
        for junk in ["", "-1", "1.5", "soon", "Mon, 99 Foo 2024"] {
            assert_eq!(parse_retry_after(junk, now), None, "{junk:?}");
        }
    }

    #[test]
    fn stripes_replay_and_retry_headers_are_read_and_anything_else_says_nothing() {
        let headers = |pairs: &[(&'static str, &'static str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.insert(*name, HeaderValue::from_static(value));
            }
            provider_signals(&map)
        };
        assert_eq!(headers(&[]), ProviderSignals::default());
        assert_eq!(
            headers(&[
                ("Idempotent-Replayed", "true"),
                ("Stripe-Should-Retry", "false")
            ]),
            ProviderSignals {
                replayed: true,
                should_retry: Some(false),
            }
        );
        assert_eq!(
            headers(&[
                ("idempotent-replayed", "False"),
                ("stripe-should-retry", "TRUE")
            ]),
            ProviderSignals {
                replayed: false,
                should_retry: Some(true),
            }
        );
        assert_eq!(
            headers(&[
                ("Idempotent-Replayed", "yes"),
                ("Stripe-Should-Retry", "maybe")
            ]),
            ProviderSignals::default()
        );
    }

    #[test]
    fn bodies_are_json_null_or_bounded_text() {
        assert!(matches!(parse_body(b"", false), Body::Empty));
        assert_eq!(
            parse_body(br#"{"id":"re_1"}"#, false).into_value(),
            serde_json::json!({"id": "re_1"})
        );
        assert_eq!(
            parse_body(b"<html>bad gateway</html>", false).into_value(),
            serde_json::json!({"text": "<html>bad gateway</html>"})
        );
        let long = "é".repeat(TEXT_BODY_BYTES_MAX);
        let value = parse_body(long.as_bytes(), false).into_value();
        let text = value["text"].as_str().unwrap();
        assert!(text.len() <= TEXT_BODY_BYTES_MAX && text.len() > TEXT_BODY_BYTES_MAX - 2);
        assert_eq!(value["truncated"], true);
        // A cut JSON body is not taken as JSON even if its start parses.
        assert_eq!(parse_body(b"12345", true).into_value()["truncated"], true);
    }
}
