//! How a tool maps onto HTTP requests. These types are deserialised from the tool config
//! (YAML) and published in its JSON Schema, so they are a promise to users.
//!
//! Templates. Path, query values, header values and the body may hold placeholders:
//! `{name}` (an argument; `{customer.id}` for a nested field), `{name:.2}` (an exact decimal
//! with 2 places), `{name:minor(USD)}` (an exact decimal in minor units, `4900` for 49.00
//! USD; the currency may be an argument: `{amount:minor(currency)}`), and the gateway's own
//! values `{intent_key}` (the intent's key),
//! `{idempotency_key}` (the key sent to the provider) and `{intent_id}` (the application's
//! intent id). In the path every value is percent-encoded as one path segment, so an
//! argument can never change which URL is called (`../`, `?`, `#`, `%2F` and newlines are
//! encoded, not interpreted). In the body, a string that is exactly one placeholder becomes
//! the argument's JSON value with its type (a number stays a number); any other string is
//! rendered as text. Secrets come from `${ENV}` references, resolved when the config is
//! loaded, and are never logged or returned: the `Debug` output of these types shows header
//! names only, and a base URL without its credentials or query.

use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Most records asked for per page. Providers cap pages at 100 to 1000; this bounds the
/// memory of one page even for a provider that honours any limit.
pub const LIST_PAGE_RECORDS_MAX: u32 = 10_000;

/// HTTP methods a tool may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum Method {
    Get,
    Post,
    Put,
    Patch,
    Delete,
}

/// A named upstream API: where it is and what every request to it carries.
#[derive(Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpstreamSpec {
    /// Base URL, e.g. `https://api.example.com` (may use `${ENV}`).
    pub base_url: String,
    /// Headers sent with every request to this upstream (e.g. `Authorization: Bearer
    /// ${PAYMENTS_API_KEY}`). Values are taken literally, not as templates (a secret may hold
    /// braces), and are never logged.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The header that carries the intent's idempotency key on side-effecting calls.
    #[serde(default = "default_idempotency_header")]
    pub idempotency_header: String,
    /// The upstream stores the first response for a key and replays it (Stripe-like). Lets
    /// the gateway re-send an unknown intent with the same key inside the key window.
    #[serde(default)]
    pub honours_idempotency_keys: bool,
    /// How long the upstream remembers an idempotency key, in hours (Stripe: 24).
    #[serde(default = "default_key_window_hours")]
    pub key_window_hours: u32,
    /// Longest `Retry-After` honoured, in milliseconds; a longer one ends the retries.
    #[serde(default = "default_retry_after_cap_ms")]
    pub retry_after_cap_ms: u64,
}

pub fn default_idempotency_header() -> String {
    "Idempotency-Key".to_owned()
}

fn default_key_window_hours() -> u32 {
    24
}

fn default_retry_after_cap_ms() -> u64 {
    5_000
}

/// The request that performs a tool.
#[derive(Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CallSpec {
    /// The name of an entry of `upstreams`.
    pub upstream: String,
    pub method: Method,
    /// Path template, appended to the upstream's base URL: `/v1/orders/{order_id}`.
    pub path: String,
    /// Query parameters; values are templates.
    #[serde(default)]
    pub query: BTreeMap<String, String>,
    /// Extra headers; values are templates.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Body template (none for GET and DELETE), written as JSON whatever `body_format` says.
    #[serde(default)]
    pub body: Option<Value>,
    /// How the body is sent: `json` (default) or `form` (Stripe's
    /// `application/x-www-form-urlencoded` with bracket notation for nested values).
    #[serde(default, skip_serializing_if = "BodyFormat::is_json")]
    pub body_format: BodyFormat,
    /// What to take from a successful response.
    #[serde(default)]
    pub result: ResultSpec,
}

/// How a request's body template is sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BodyFormat {
    /// `application/json`: the template rendered as JSON.
    #[default]
    Json,
    /// `application/x-www-form-urlencoded`, nested values in bracket notation:
    /// `metadata[intent_key]=...`, `expand[]=charge`, `items[0][price]=...`. Numbers are their
    /// exact decimal text, an explicit null an empty value (`name=`); a member whose
    /// placeholder has no value is left out. The body template must be a mapping.
    Form,
}

impl BodyFormat {
    /// True for the default, JSON.
    pub fn is_json(&self) -> bool {
        *self == BodyFormat::Json
    }
}

/// What to take from a successful response.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResultSpec {
    /// JSON pointer to the provider's id for the effect (default `/id`).
    #[serde(default)]
    pub external_id: Option<String>,
    /// JSON pointer to the part of the body returned to the model (default: all of it).
    #[serde(default)]
    pub pointer: Option<String>,
}

/// A read-only request that finds a side effect after an ambiguous outcome, without
/// performing it, and the proof that what it found is this intent's effect.
///
/// The request may answer one record or a list of candidates (`found` points at an object or
/// an array); a listing may continue over pages (`pages`). Each candidate is judged on its
/// own: it is this intent's effect only when it carries this intent's provider key at `key`,
/// or, for a provider that keeps no key, when every `match` field equals the intent's
/// argument exactly. With both, both must hold, and a record that passes one and fails the
/// other is a mismatch the owner is told about. A config gives at least one of the two: the
/// first record of an answer is somebody else's as often as not.
#[derive(Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LookupSpec {
    /// Defaults to the tool's upstream.
    #[serde(default)]
    pub upstream: Option<String>,
    #[serde(default = "default_get")]
    pub method: Method,
    pub path: String,
    /// Query templates. Every placeholder must have a value: a lookup whose filter would be
    /// empty fails rather than list everything.
    #[serde(default)]
    pub query: BTreeMap<String, String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Body template, for a lookup that is a POST (a search). Like the query, every
    /// placeholder must have a value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Value>,
    /// How the body is sent: `json` (default) or `form` (see the call's `body_format`).
    #[serde(default, skip_serializing_if = "BodyFormat::is_json")]
    pub body_format: BodyFormat,
    /// JSON pointer to what the provider found: one record (an object) or the candidates (an
    /// array, `/data`); absent, null, `[]` or `{}` there means none.
    pub found: String,
    /// Statuses that mean "not found" rather than "the lookup failed" (default 404).
    #[serde(default = "default_not_found_statuses")]
    pub not_found_statuses: Vec<u16>,
    /// JSON pointer, inside a record, to the provider's id (default `/id`).
    #[serde(default)]
    pub external_id: Option<String>,
    /// JSON pointer, inside a record, to the provider key the gateway sent with the effect
    /// (`{idempotency_key}`: the tenant-scoped key, wherever the provider keeps it: an
    /// idempotency field it echoes, or a metadata field the call's body set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Business fields, by argument (`order_id`, `customer.id`), that a record must hold with
    /// exactly the intent's values (decimals compared exactly).
    #[serde(default, rename = "match", skip_serializing_if = "BTreeMap::is_empty")]
    pub match_fields: BTreeMap<String, MatchField>,
    /// How a listing continues past its first page; absent, only the first page is read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pages: Option<LookupPages>,
}

/// How a lookup that lists reads its next page: the cursor comes from the answer
/// (`next_cursor`), or is the last record's id while the answer says it has more
/// (`has_more`, Stripe's form). Exactly one of the two.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LookupPages {
    /// The query parameter that carries the cursor (`starting_after`, `cursor`).
    pub query: String,
    /// JSON pointer to the next page's cursor; absent, null or empty ends the listing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
    /// JSON pointer to a boolean that says another page follows; the next page then starts
    /// after the last record's id (`external_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub has_more: Option<String>,
    /// Most pages read, the first included (default 5, at most 50). A listing with more
    /// pages fails the lookup: the effect may be on one not read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<u32>,
}

fn default_get() -> Method {
    Method::Get
}

fn default_not_found_statuses() -> Vec<u16> {
    vec![404]
}

/// How to page through the provider's records of a tool's effects over a time window.
#[derive(Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListSpec {
    #[serde(default)]
    pub upstream: Option<String>,
    pub path: String,
    /// Query templates; may use `{since_ms}`, `{until_ms}` (the window in Unix milliseconds),
    /// `{since_s}`, `{until_s}` (in Unix seconds: since rounded down, until rounded up, so
    /// the seconds cover the whole window), `{cursor}` and `{limit}`. `{cursor}` must be in
    /// the request: it is how the next page is asked for.
    #[serde(default)]
    pub query: BTreeMap<String, String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// JSON pointer to the array of records in a page (`/data`).
    pub items: String,
    /// JSON pointer to the next page's cursor; absent, null or empty ends the listing. Give
    /// this or `has_more`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
    /// JSON pointer to a boolean that says another page follows (Stripe's `/has_more`); the
    /// next page's `{cursor}` is then the last record's id (`fields.external_id`). Give this
    /// or `next_cursor`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub has_more: Option<String>,
    /// The provider's largest page (Stripe: 100): `{limit}` is the smaller of the page size
    /// reconciliation asks for and this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_max: Option<u32>,
    /// Pointers inside one record.
    pub fields: ListFields,
    /// For a provider that keeps no key: the business fields that pair a record with an
    /// intent, by argument (`order_id`, or `customer.id` for a nested one), in place of
    /// `fields.idempotency_key`. A config gives exactly one of the two.
    #[serde(default, rename = "match", skip_serializing_if = "BTreeMap::is_empty")]
    pub match_fields: BTreeMap<String, MatchField>,
}

impl ListSpec {
    /// How the listing's pages are read, apart from the request that fetches them.
    pub fn records(&self) -> ListRecords {
        ListRecords {
            items: self.items.clone(),
            next_cursor: self.next_cursor.clone(),
            has_more: self.has_more.clone(),
            fields: self.fields.clone(),
            match_fields: self.match_fields.clone(),
        }
    }
}

/// How reconciliation reads a page of provider records and pairs each with an intent: the
/// part of a `list` that is the same whether its pages come from an HTTP API ([`ListSpec`])
/// or from a tool of an MCP server.
#[derive(Debug, Clone, PartialEq)]
pub struct ListRecords {
    /// JSON pointer to the array of records in a page (`/data`).
    pub items: String,
    /// JSON pointer to the next page's cursor; absent, null or empty ends the listing.
    /// Exactly one of this and `has_more`.
    pub next_cursor: Option<String>,
    /// JSON pointer to a boolean that says another page follows, which then starts after the
    /// last record's id. Exactly one of this and `next_cursor`.
    pub has_more: Option<String>,
    /// Pointers inside one record.
    pub fields: ListFields,
    /// The business fields that pair a record with an intent, in place of
    /// `fields.idempotency_key` (see [`ListSpec::match_fields`]).
    pub match_fields: BTreeMap<String, MatchField>,
}

/// Where a provider record holds one argument of the intent, and how the two are compared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MatchField {
    /// JSON pointer into the record (`/order_id`, `/metadata/order`).
    pub record: String,
    /// `decimal` compares exact decimals (`10.1`, `10.10` and `"10.10"` agree), `text` the
    /// text. Default: `decimal` for an argument the input schema types as a number or an
    /// integer, `text` otherwise; a loaded config always has it set.
    #[serde(default)]
    pub compare: Option<MatchCompare>,
    /// The record holds the amount as an integer in a currency's minor units (Stripe's
    /// `amount: 4900` for 49.00 USD): an ISO 4217 code (`USD`), or the argument that holds
    /// the intent's currency (`currency`, `price.currency`). The intent's argument is a
    /// decimal in major units and is compared exactly: `49`, `49.0` and `"49.00"` USD match
    /// a record's `4900`; `49.001` USD matches none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minor_units: Option<String>,
}

/// How a `match` field's values are compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MatchCompare {
    /// As exact decimals, never floats.
    Decimal,
    /// As text (a number as it is written).
    Text,
}

/// Where a listed record keeps what reconciliation compares.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListFields {
    /// The provider key the gateway sent with the effect (`{idempotency_key}`, tenant-scoped),
    /// wherever the record keeps it: how records pair with intents. Absent when the list
    /// pairs records by `match`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// The intent key sent with the effect (metadata), shown in reports. It names the
    /// business intent but not its tenant, so records are never paired by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intent_key: Option<String>,
    pub external_id: String,
    /// The amount, when the tool moves money.
    #[serde(default)]
    pub amount: Option<String>,
    /// JSON pointer into the intent's arguments to the amount compared with `amount`
    /// (default `/amount`). Compared as exact decimals: `49`, `49.0` and `"49.00"` agree.
    #[serde(default)]
    pub amount_argument: Option<String>,
    /// The record's `amount` is an integer in a currency's minor units (`4900` for 49.00
    /// USD): an ISO 4217 code (`USD`), or the argument that holds the intent's currency
    /// (`currency`). The intent's amount, in major units, is compared with it exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amount_minor_units: Option<String>,
    /// Who was affected (customer or order), for the report: one pointer, or several
    /// (`[/payment_intent, /charge/customer]`), each one the record holds named, joined with
    /// ` / `.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<ListSubject>,
}

/// Where a listed record names who was affected: one JSON pointer or several.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ListSubject {
    One(String),
    Several(#[schemars(length(min = 1))] Vec<String>),
}

impl ListSubject {
    /// The pointers, in the order given.
    pub fn pointers(&self) -> &[String] {
        match self {
            ListSubject::One(pointer) => std::slice::from_ref(pointer),
            ListSubject::Several(pointers) => pointers,
        }
    }
}

impl From<&str> for ListSubject {
    fn from(pointer: &str) -> ListSubject {
        ListSubject::One(pointer.to_owned())
    }
}

/// Header names with their values hidden: values hold secrets.
struct RedactedHeaders<'a>(&'a BTreeMap<String, String>);

impl fmt::Debug for RedactedHeaders<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.keys().map(|name| (name, "<redacted>")))
            .finish()
    }
}

/// A base URL without credentials, query or fragment, which may hold secrets.
struct RedactedUrl<'a>(&'a str);

impl fmt::Debug for RedactedUrl<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match reqwest::Url::parse(self.0) {
            Ok(url) => write!(
                f,
                "\"{}://{}{}{}\"",
                url.scheme(),
                url.host_str().unwrap_or_default(),
                url.port()
                    .map(|port| format!(":{port}"))
                    .unwrap_or_default(),
                url.path()
            ),
            Err(_) => f.write_str("<unparseable>"),
        }
    }
}

impl fmt::Debug for UpstreamSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpstreamSpec")
            .field("base_url", &RedactedUrl(&self.base_url))
            .field("headers", &RedactedHeaders(&self.headers))
            .field("idempotency_header", &self.idempotency_header)
            .field("honours_idempotency_keys", &self.honours_idempotency_keys)
            .field("key_window_hours", &self.key_window_hours)
            .field("retry_after_cap_ms", &self.retry_after_cap_ms)
            .finish()
    }
}

/// `Debug` for a request spec: its fields as they are, in this order, but its headers by name
/// only (their values may hold secrets).
macro_rules! debug_with_redacted_headers {
    ($spec:ident: $($before:ident),*; $($after:ident),*) => {
        impl fmt::Debug for $spec {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($spec))
                    $(.field(stringify!($before), &self.$before))*
                    .field("headers", &RedactedHeaders(&self.headers))
                    $(.field(stringify!($after), &self.$after))*
                    .finish()
            }
        }
    };
}

debug_with_redacted_headers!(CallSpec: upstream, method, path, query; body, body_format, result);
debug_with_redacted_headers!(
    LookupSpec: upstream, method, path, query;
    body, body_format, found, not_found_statuses, external_id, key, match_fields, pages
);
debug_with_redacted_headers!(
    ListSpec: upstream, path, query; items, next_cursor, has_more, limit_max, fields, match_fields
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_hides_header_values_and_url_secrets() {
        let spec = UpstreamSpec {
            base_url: "https://user:sk_live_1@api.example.com:8443/v2?key=sk_live_2".to_owned(),
            headers: BTreeMap::from([("Authorization".to_owned(), "Bearer sk_live_3".to_owned())]),
            idempotency_header: default_idempotency_header(),
            honours_idempotency_keys: true,
            key_window_hours: 24,
            retry_after_cap_ms: 5000,
        };
        let text = format!("{spec:?}");
        assert!(!text.contains("sk_live"), "{text}");
        assert!(text.contains("https://api.example.com:8443/v2"), "{text}");
        assert!(text.contains("Authorization"), "{text}");
    }
}
