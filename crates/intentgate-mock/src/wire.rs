//! What the HTTP mock provider reads and writes: the fault plan, the admin answers, and the
//! validation and normalisation of side-effecting request bodies.
//!
//! These shapes are documented in `docs/mock-provider.md` and are a promise to its users
//! (the CLI, the demo, tools' configs): they are kept apart from the model's own types.

use std::collections::BTreeMap;
use std::time::Duration;

use intentgate_core::Decimal;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::FaultPlan;
use crate::model::{EffectKind, Latency, Plan};

/// Parts per thousand: the unit of every odd in a plan.
pub const PER_THOUSAND: u32 = 1000;
/// Longest latency median or p95 a plan may ask for. A minute is already a broken API; more
/// would only hold connections open.
pub const LATENCY_MS_MAX: u64 = 60_000;
/// Largest latency scale. Scales exist to shrink latencies for demos (0.01); growing them a
/// hundredfold is plenty for a slow-motion run.
pub const LATENCY_SCALE_MAX: f64 = 100.0;
/// Longest Retry-After a plan may send: ten minutes, beyond any retry budget worth testing.
pub const RETRY_AFTER_MS_MAX: u64 = 600_000;
/// Longest a `timeout` shape holds a connection: ten minutes, beyond any tool's timeout.
pub const TIMEOUT_HOLD_MS_MAX: u64 = 600_000;
/// Most requests per idempotency key that `first_timeouts_per_key` times out. A retry budget
/// worth testing is a handful of attempts; a thousand is far past any, and keeps a typo (or a
/// negative number read as huge) from making a key time out for ever.
pub const FIRST_TIMEOUTS_PER_KEY_MAX: u32 = 1000;
/// Longest id, idempotency key, intent key or address field (Stripe caps keys at 255).
pub const ID_BYTES_MAX: usize = 255;
/// Most metadata entries on one effect (Stripe's limit).
pub const METADATA_ENTRIES_MAX: usize = 50;

/// The fault plan of the HTTP provider (`GET`/`PUT /admin/faults`), in parts per thousand of
/// side-effecting requests. A field left out of a `PUT` takes its default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpFaultPlan {
    /// 402 `card_error`, stored and replayed for the key.
    pub reject: u32,
    /// 429 with Retry-After, not processed.
    pub rate_limited: u32,
    /// 503 with Retry-After, not processed.
    pub unavailable: u32,
    /// No answer for `timeout_hold_ms`, then the connection is cut; committed is drawn.
    pub timeout: u32,
    /// The connection is cut after the request was read; committed is drawn.
    pub dropped: u32,
    /// 500, 502, 503 (no Retry-After) or 504, stored and replayed; committed is drawn.
    pub server_error: u32,
    /// Not a rate but a count: the first this many side-effecting requests carrying each
    /// `Idempotency-Key` time out (as `timeout`, held for `timeout_hold_ms`) without
    /// committing; later ones with that key are drawn as usual. Draws nothing.
    pub first_timeouts_per_key: u32,
    /// Per thousand ambiguous requests (timeout, dropped, server error) that commit anyway.
    pub commit_when_ambiguous: u32,
    /// Per thousand lookups and lists that fail with 500.
    pub lookup_failure: u32,
    /// Median latency of side effects, lookups and lists, before scaling.
    pub latency_p50_ms: u64,
    /// 95th percentile latency, before scaling; at least the median.
    pub latency_p95_ms: u64,
    /// Multiplies every drawn latency (demos use 0.01).
    pub latency_scale: f64,
    /// Retry-After of 429 and 503 (sent in whole seconds, rounded up, and in milliseconds).
    pub retry_after_ms: u64,
    /// How long a `timeout` holds the connection before cutting it (not scaled).
    pub timeout_hold_ms: u64,
    /// Seeds the fault generator; setting a plan re-seeds it.
    pub seed: u64,
}

impl Default for HttpFaultPlan {
    /// The documented defaults: no faults, a realistic latency (p95 4.8 s).
    fn default() -> HttpFaultPlan {
        HttpFaultPlan {
            reject: 0,
            rate_limited: 0,
            unavailable: 0,
            timeout: 0,
            dropped: 0,
            server_error: 0,
            first_timeouts_per_key: 0,
            commit_when_ambiguous: 500,
            lookup_failure: 0,
            latency_p50_ms: 300,
            latency_p95_ms: 4800,
            latency_scale: 1.0,
            retry_after_ms: 1000,
            timeout_hold_ms: 30_000,
            seed: 1,
        }
    }
}

/// Why a fault plan was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    #[error("`{field}` is {value} per thousand; it must be at most {PER_THOUSAND}")]
    OverAThousand { field: &'static str, value: u32 },
    #[error(
        "the fault shapes add up to {0} per thousand; reject, rate_limited, unavailable, timeout, dropped and server_error together must be at most {PER_THOUSAND}"
    )]
    ShapesOverAThousand(u32),
    #[error("`{field}` is {value}; it must be at most {max}")]
    TooMany {
        field: &'static str,
        value: u32,
        max: u32,
    },
    #[error("`latency_p95_ms` ({p95}) is below `latency_p50_ms` ({p50})")]
    PercentilesOutOfOrder { p50: u64, p95: u64 },
    #[error("`{field}` is {value}; it must be at most {max}")]
    TooLong {
        field: &'static str,
        value: u64,
        max: u64,
    },
    #[error("`latency_scale` is {0}; it must be a number from 0 to {LATENCY_SCALE_MAX}")]
    Scale(f64),
}

impl HttpFaultPlan {
    /// Every fault shape, often (about a third of side-effecting requests fail somehow),
    /// with the default latency: what demos and storms use.
    pub fn stormy() -> HttpFaultPlan {
        HttpFaultPlan {
            reject: 30,
            rate_limited: 50,
            unavailable: 30,
            timeout: 60,
            dropped: 40,
            server_error: 60,
            lookup_failure: 150,
            ..HttpFaultPlan::default()
        }
    }

    /// No faults and no latency: what tests start from.
    pub fn quiet() -> HttpFaultPlan {
        HttpFaultPlan {
            latency_p50_ms: 0,
            latency_p95_ms: 0,
            ..HttpFaultPlan::default()
        }
    }

    /// Checks every bound; a plan is only ever installed after this.
    pub fn validate(&self) -> Result<(), PlanError> {
        let odds = [
            ("reject", self.reject),
            ("rate_limited", self.rate_limited),
            ("unavailable", self.unavailable),
            ("timeout", self.timeout),
            ("dropped", self.dropped),
            ("server_error", self.server_error),
            ("commit_when_ambiguous", self.commit_when_ambiguous),
            ("lookup_failure", self.lookup_failure),
        ];
        for (field, value) in odds {
            if value > PER_THOUSAND {
                return Err(PlanError::OverAThousand { field, value });
            }
        }
        let shapes: u32 = odds[..6].iter().map(|(_, value)| value).sum();
        if shapes > PER_THOUSAND {
            return Err(PlanError::ShapesOverAThousand(shapes));
        }
        if self.first_timeouts_per_key > FIRST_TIMEOUTS_PER_KEY_MAX {
            return Err(PlanError::TooMany {
                field: "first_timeouts_per_key",
                value: self.first_timeouts_per_key,
                max: FIRST_TIMEOUTS_PER_KEY_MAX,
            });
        }
        let lengths = [
            ("latency_p50_ms", self.latency_p50_ms, LATENCY_MS_MAX),
            ("latency_p95_ms", self.latency_p95_ms, LATENCY_MS_MAX),
            ("retry_after_ms", self.retry_after_ms, RETRY_AFTER_MS_MAX),
            ("timeout_hold_ms", self.timeout_hold_ms, TIMEOUT_HOLD_MS_MAX),
        ];
        for (field, value, max) in lengths {
            if value > max {
                return Err(PlanError::TooLong { field, value, max });
            }
        }
        if self.latency_p95_ms < self.latency_p50_ms {
            return Err(PlanError::PercentilesOutOfOrder {
                p50: self.latency_p50_ms,
                p95: self.latency_p95_ms,
            });
        }
        if !(0.0..=LATENCY_SCALE_MAX).contains(&self.latency_scale) {
            return Err(PlanError::Scale(self.latency_scale));
        }
        Ok(())
    }

    pub fn timeout_hold(&self) -> Duration {
        Duration::from_millis(self.timeout_hold_ms)
    }
}

impl From<&HttpFaultPlan> for Plan {
    fn from(plan: &HttpFaultPlan) -> Plan {
        Plan {
            faults: FaultPlan {
                reject: plan.reject,
                rate_limited: plan.rate_limited,
                unavailable: plan.unavailable,
                // A listening server can't refuse a connection: that row needs a closed port.
                not_sent: 0,
                timeout: plan.timeout,
                dropped: plan.dropped,
                server_error: plan.server_error,
                first_timeouts_per_key: plan.first_timeouts_per_key,
                commit_when_ambiguous: plan.commit_when_ambiguous,
                lookup_failure: plan.lookup_failure,
                // Not read: `latency` below is what this face draws.
                latency_min: Duration::ZERO,
                latency_max: Duration::ZERO,
                retry_after: Duration::from_millis(plan.retry_after_ms),
            },
            latency: Latency::LogNormal {
                p50: Duration::from_millis(plan.latency_p50_ms),
                p95: Duration::from_millis(plan.latency_p95_ms),
                scale: plan.latency_scale,
            },
        }
    }
}

/// `GET /admin/stats`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Side-effecting requests that reached the model (valid ones, faults included).
    pub requests: u64,
    /// Lookups and lists of effects.
    pub lookups: u64,
    /// Reads and idempotent updates of synthetic data.
    pub reads: u64,
    pub effects: EffectTotals,
}

/// Effects by kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EffectTotals {
    pub refunds: u64,
    pub charges: u64,
    pub emails: u64,
    /// PaymentIntents created (the Stripe dialect's `POST /v1/payment_intents`).
    #[serde(default)]
    pub payment_intents: u64,
}

/// `GET /admin/effects`: the counts exactly-once checks compare.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EffectCounts {
    /// Every effect, of every kind.
    pub total: u64,
    /// Effects per intent key (only effects whose metadata carried one).
    pub by_intent_key: BTreeMap<String, u64>,
    /// Intent keys with more than one effect: each is a duplicate, sorted.
    pub duplicates: Vec<String>,
    /// Refunds per order id.
    pub by_order: BTreeMap<String, u64>,
}

/// `POST /admin/clock`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClockAdvance {
    pub advance_ms: u64,
}

/// A request field that is missing or wrong, with the message the client sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidRequest {
    pub param: Option<String>,
    pub message: String,
}

impl InvalidRequest {
    pub fn new(param: &str, message: impl Into<String>) -> InvalidRequest {
        InvalidRequest {
            param: Some(param.to_owned()),
            message: message.into(),
        }
    }

    pub fn general(message: impl Into<String>) -> InvalidRequest {
        InvalidRequest {
            param: None,
            message: message.into(),
        }
    }
}

/// A side-effecting request after validation: what is fingerprinted and logged, and the
/// object answered on success (without its id).
#[derive(Debug, Clone)]
pub struct NormalisedEffect {
    pub parameters: Value,
    pub object: Map<String, Value>,
    pub intent_key: Option<String>,
}

/// Validates and normalises a side-effecting body: required fields present and typed,
/// amounts as decimal strings with two places, unknown fields refused (a typo must not be
/// ignored silently).
pub fn normalise_effect(
    kind: EffectKind,
    body: &Value,
    now_ms: i64,
) -> Result<NormalisedEffect, InvalidRequest> {
    let Value::Object(fields) = body else {
        return Err(InvalidRequest::general(
            "The request body must be a JSON object.",
        ));
    };
    let allowed: &[&str] = match kind {
        EffectKind::Refund => &["order_id", "amount", "currency", "reason", "metadata"],
        EffectKind::Charge => &["customer_id", "amount", "currency", "metadata"],
        EffectKind::Email => &["to", "subject", "body", "metadata"],
        EffectKind::PaymentIntent => {
            return Err(InvalidRequest::general(
                "PaymentIntents are Stripe's: they are served in the Stripe dialect only.",
            ));
        }
    };
    if let Some(unknown) = fields.keys().find(|name| !allowed.contains(&name.as_str())) {
        return Err(InvalidRequest::new(
            unknown,
            format!(
                "Received unknown parameter: {unknown}. A {} takes {}.",
                kind.object(),
                allowed.join(", ")
            ),
        ));
    }
    let metadata = metadata(fields)?;
    let intent_key = metadata
        .get("intent_key")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let mut parameters = Map::new();
    match kind {
        EffectKind::Refund => {
            parameters.insert("order_id".into(), identifier(fields, "order_id")?.into());
            parameters.insert("amount".into(), amount(fields)?.into());
            parameters.insert("currency".into(), currency(fields)?.into());
            if let Some(reason) = optional_text(fields, "reason")? {
                parameters.insert("reason".into(), reason.into());
            }
        }
        EffectKind::Charge => {
            parameters.insert(
                "customer_id".into(),
                identifier(fields, "customer_id")?.into(),
            );
            parameters.insert("amount".into(), amount(fields)?.into());
            parameters.insert("currency".into(), currency(fields)?.into());
        }
        EffectKind::Email => {
            parameters.insert("to".into(), identifier(fields, "to")?.into());
            parameters.insert("subject".into(), required_text(fields, "subject")?.into());
            parameters.insert("body".into(), required_text(fields, "body")?.into());
        }
        EffectKind::PaymentIntent => unreachable!("refused above"),
    }
    parameters.insert("metadata".into(), Value::Object(metadata));
    let mut object = parameters.clone();
    if kind == EffectKind::Email {
        // The object names the message; its body stays in the effect log only.
        object.remove("body");
    }
    object.insert("object".into(), kind.object().into());
    object.insert("status".into(), "succeeded".into());
    object.insert("created_ms".into(), now_ms.into());
    Ok(NormalisedEffect {
        parameters: Value::Object(parameters),
        object,
        intent_key,
    })
}

/// An id-like field: a non-empty string (or an integer, written as one), bounded.
fn identifier(fields: &Map<String, Value>, name: &str) -> Result<String, InvalidRequest> {
    let text = match fields.get(name) {
        None | Some(Value::Null) => {
            return Err(InvalidRequest::new(
                name,
                format!("Missing required param: {name}."),
            ));
        }
        Some(Value::String(text)) => text.clone(),
        Some(Value::Number(number)) if number.is_u64() || number.is_i64() => number.to_string(),
        Some(_) => {
            return Err(InvalidRequest::new(
                name,
                format!("Invalid {name}: must be a string."),
            ));
        }
    };
    check_identifier(name, &text)?;
    Ok(text)
}

/// Non-empty, at most [`ID_BYTES_MAX`] bytes, no control characters.
pub fn check_identifier(name: &str, text: &str) -> Result<(), InvalidRequest> {
    if text.trim().is_empty() {
        return Err(InvalidRequest::new(
            name,
            format!("Invalid {name}: must not be empty."),
        ));
    }
    if text.len() > ID_BYTES_MAX {
        return Err(InvalidRequest::new(
            name,
            format!("Invalid {name}: longer than {ID_BYTES_MAX} bytes."),
        ));
    }
    if text.chars().any(char::is_control) {
        return Err(InvalidRequest::new(
            name,
            format!("Invalid {name}: contains control characters."),
        ));
    }
    Ok(())
}

fn required_text(fields: &Map<String, Value>, name: &str) -> Result<String, InvalidRequest> {
    optional_text(fields, name)?
        .ok_or_else(|| InvalidRequest::new(name, format!("Missing required param: {name}.")))
}

fn optional_text(
    fields: &Map<String, Value>,
    name: &str,
) -> Result<Option<String>, InvalidRequest> {
    match fields.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(_) => Err(InvalidRequest::new(
            name,
            format!("Invalid {name}: must be a string."),
        )),
    }
}

/// The amount as a decimal string with two places: `49`, `49.0` and `"49.00"` are one
/// amount. Refused when malformed, with more places than cents, or not positive.
fn amount(fields: &Map<String, Value>) -> Result<String, InvalidRequest> {
    let value = fields
        .get("amount")
        .filter(|value| !value.is_null())
        .ok_or_else(|| InvalidRequest::new("amount", "Missing required param: amount."))?;
    let invalid = |why: String| InvalidRequest::new("amount", format!("Invalid amount: {why}."));
    let decimal = Decimal::from_json(value).map_err(|error| invalid(error.to_string()))?;
    let text = decimal
        .format_places(2)
        .map_err(|error| invalid(error.to_string()))?;
    if text.starts_with('-') || text == "0.00" {
        return Err(invalid(format!("{text} is not a positive amount")));
    }
    Ok(text)
}

/// A three-letter ISO currency code, lowercased; `usd` when absent.
fn currency(fields: &Map<String, Value>) -> Result<String, InvalidRequest> {
    match optional_text(fields, "currency")? {
        None => Ok("usd".to_owned()),
        Some(code) if code.len() == 3 && code.bytes().all(|b| b.is_ascii_alphabetic()) => {
            Ok(code.to_ascii_lowercase())
        }
        Some(code) => Err(InvalidRequest::new(
            "currency",
            format!("Invalid currency: `{code}` is not a three-letter ISO code."),
        )),
    }
}

/// An object of string values (Stripe's rule), at most [`METADATA_ENTRIES_MAX`] entries.
pub(crate) fn metadata(fields: &Map<String, Value>) -> Result<Map<String, Value>, InvalidRequest> {
    let metadata = match fields.get("metadata") {
        None | Some(Value::Null) => return Ok(Map::new()),
        Some(Value::Object(metadata)) => metadata,
        Some(_) => {
            return Err(InvalidRequest::new(
                "metadata",
                "Invalid metadata: must be an object of strings.",
            ));
        }
    };
    if metadata.len() > METADATA_ENTRIES_MAX {
        return Err(InvalidRequest::new(
            "metadata",
            format!("Invalid metadata: more than {METADATA_ENTRIES_MAX} entries."),
        ));
    }
    for (name, value) in metadata {
        let Value::String(text) = value else {
            return Err(InvalidRequest::new(
                "metadata",
                format!("Invalid metadata[{name}]: must be a string."),
            ));
        };
        if name == "intent_key" {
            check_identifier("metadata[intent_key]", text)?;
        }
    }
    Ok(metadata.clone())
}

/// A list page as the API answers it.
pub fn list_body(data: Vec<Value>, has_more: bool) -> Value {
    let next_cursor = if has_more {
        data.last().and_then(|last| last.get("id")).cloned()
    } else {
        None
    };
    json!({"object": "list", "data": data, "has_more": has_more, "next_cursor": next_cursor})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_plan_is_the_documented_one_and_valid() {
        let documented: HttpFaultPlan = serde_json::from_str(
            r#"{"reject": 0, "rate_limited": 0, "unavailable": 0, "timeout": 0, "dropped": 0,
             "server_error": 0, "first_timeouts_per_key": 0, "commit_when_ambiguous": 500,
             "lookup_failure": 0,
             "latency_p50_ms": 300, "latency_p95_ms": 4800, "latency_scale": 1.0,
             "retry_after_ms": 1000, "timeout_hold_ms": 30000, "seed": 1}"#,
        )
        .unwrap();
        assert_eq!(documented, HttpFaultPlan::default());
        assert_eq!(HttpFaultPlan::default().validate(), Ok(()));
        let partial: HttpFaultPlan = serde_json::from_str(r#"{"timeout": 1000}"#).unwrap();
        assert_eq!(partial.timeout, 1000);
        assert_eq!(partial.latency_p95_ms, 4800);
        assert!(serde_json::from_str::<HttpFaultPlan>(r#"{"timeot": 1}"#).is_err());
    }

    #[test]
    fn plans_out_of_bounds_are_refused() {
        let bad = [
            HttpFaultPlan {
                reject: 1001,
                ..HttpFaultPlan::quiet()
            },
            HttpFaultPlan {
                reject: 600,
                dropped: 600,
                ..HttpFaultPlan::quiet()
            },
            HttpFaultPlan {
                latency_p50_ms: 500,
                latency_p95_ms: 100,
                ..HttpFaultPlan::quiet()
            },
            HttpFaultPlan {
                first_timeouts_per_key: FIRST_TIMEOUTS_PER_KEY_MAX + 1,
                ..HttpFaultPlan::quiet()
            },
            HttpFaultPlan {
                timeout_hold_ms: TIMEOUT_HOLD_MS_MAX + 1,
                ..HttpFaultPlan::quiet()
            },
            HttpFaultPlan {
                latency_scale: -1.0,
                ..HttpFaultPlan::quiet()
            },
            HttpFaultPlan {
                latency_scale: f64::NAN,
                ..HttpFaultPlan::quiet()
            },
        ];
        for plan in bad {
            assert!(plan.validate().is_err(), "{plan:?}");
        }
    }

    #[test]
    fn amounts_are_normalised_to_two_places() {
        for amount in [
            json!(49),
            json!(49.0),
            json!("49.00"),
            json!("49"),
            json!("4.9e1"),
        ] {
            let body = json!({"order_id": "o1", "amount": amount});
            let effect = normalise_effect(EffectKind::Refund, &body, 0).unwrap();
            assert_eq!(effect.parameters["amount"], "49.00", "{amount}");
            assert_eq!(effect.object["amount"], "49.00");
        }
        for (amount, why) in [
            (json!("49.005"), "more than 2 decimal places"),
            (json!("abc"), "not a decimal number"),
            (json!(true), "not a number"),
            (json!(-5), "not a positive amount"),
            (json!(0), "not a positive amount"),
        ] {
            let body = json!({"order_id": "o1", "amount": amount});
            let error = normalise_effect(EffectKind::Refund, &body, 0).unwrap_err();
            assert_eq!(error.param.as_deref(), Some("amount"));
            assert!(error.message.contains(why), "{amount}: {}", error.message);
        }
    }

    #[test]
    fn missing_and_unknown_fields_are_named() {
        let error = normalise_effect(EffectKind::Charge, &json!({"amount": 5}), 0).unwrap_err();
        assert_eq!(error.message, "Missing required param: customer_id.");
        let error = normalise_effect(EffectKind::Email, &json!({"to": "a@b", "subject": "s"}), 0)
            .unwrap_err();
        assert_eq!(error.message, "Missing required param: body.");
        let error = normalise_effect(
            EffectKind::Refund,
            &json!({"order_id": "o", "amount": 1, "amuont": 2}),
            0,
        )
        .unwrap_err();
        assert!(
            error.message.contains("unknown parameter: amuont"),
            "{}",
            error.message
        );
        let error = normalise_effect(
            EffectKind::Refund,
            &json!({"order_id": "o", "amount": 1, "metadata": {"n": 1}}),
            0,
        )
        .unwrap_err();
        assert!(error.message.contains("metadata[n]"), "{}", error.message);
    }
}
