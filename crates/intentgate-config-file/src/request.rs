//! The request fields of a tool as the file writes them: methods, body formats, what to take
//! from an answer, a lookup's pages, `match` fields and a list's record pointers.
//!
//! The HTTP upstream (intentgate-http's `spec`) has its own types for these; intentgate-config
//! turns these into those once checked. These are what the file promises users, so their
//! names, fields and documentation are the published JSON Schema's. They implement
//! `Serialize` only so that the schema shows each field's default, as the spec's types do.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
