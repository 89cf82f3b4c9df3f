//! The Stripe dialect of the HTTP provider (`--dialect stripe`): what Stripe's v1 API reads
//! and writes for `/v1/refunds` and `/v1/payment_intents` (created, confirmed off-session,
//! listed by customer, cancelled), so a tool configured for Stripe runs unchanged against
//! the mock.
//!
//! Bodies are `application/x-www-form-urlencoded` in Stripe's bracket notation
//! (`metadata[intent_key]=...`, `expand[]=charge`); amounts are integers in the currency's
//! minor units; lists are newest first, paged by `starting_after` while `has_more`, and
//! windowed by `created[gte]`/`created[lt]` in Unix seconds. The key layer, the faults and
//! the effect log are the model's, as in the JSON dialect.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::model::{EffectKind, ListFilter};
use crate::wire::{InvalidRequest, NormalisedEffect, check_identifier, metadata};

/// Stripe's largest page of a list.
pub const STRIPE_LIST_LIMIT_MAX: usize = 100;
/// Stripe's page when `limit` is not given.
pub const STRIPE_LIST_LIMIT_DEFAULT: usize = 10;
/// Stripe's largest amount: eight digits of minor units (999,999.99 USD).
pub const STRIPE_AMOUNT_MAX: u64 = 99_999_999;
/// Longest metadata key and value Stripe takes.
pub const METADATA_KEY_CHARS_MAX: usize = 40;
pub const METADATA_VALUE_CHARS_MAX: usize = 500;
/// The reasons a Stripe refund may give.
pub const REFUND_REASONS: [&str; 3] = ["duplicate", "fraudulent", "requested_by_customer"];

/// Which API the provider speaks on its side effects (`/v1/refunds`, and in Stripe's
/// `/v1/payment_intents`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dialect {
    /// The mock's own: JSON bodies, decimal amounts with two places (`docs/mock-provider.md`).
    #[default]
    Json,
    /// Stripe's v1 API: form bodies in bracket notation, amounts in minor units, Stripe's
    /// lists, `Idempotent-Replayed: true` on replays.
    Stripe,
}

impl Dialect {
    /// The dialect named `name` (`json` or `stripe`), as the CLI flag takes it.
    pub fn parse(name: &str) -> Option<Dialect> {
        match name {
            "json" => Some(Dialect::Json),
            "stripe" => Some(Dialect::Stripe),
            _ => None,
        }
    }
}

/// Parses a form body (or query) in Stripe's bracket notation into a JSON object of
/// strings: `a=1&m[k]=v&e[]=x` is `{"a": "1", "m": {"k": "v"}, "e": ["x"]}`. A name given
/// twice (other than an `[]` array), or used both as a value and as an object, is refused.
pub fn parse_form(pairs: &[(String, String)]) -> Result<Map<String, Value>, InvalidRequest> {
    let mut root = Map::new();
    for (name, value) in pairs {
        let path = bracket_path(name)?;
        insert(&mut root, name, &path, value)?;
    }
    Ok(root)
}

/// The name's segments: `metadata[k]` is `["metadata", "k"]`, `expand[]` is `["expand", ""]`.
fn bracket_path(name: &str) -> Result<Vec<&str>, InvalidRequest> {
    let malformed = || InvalidRequest::new(name, format!("Invalid parameter name: `{name}`."));
    let (base, mut rest) = match name.find('[') {
        Some(open) => (&name[..open], &name[open..]),
        None => (name, ""),
    };
    if base.is_empty() || base.contains(']') {
        return Err(malformed());
    }
    let mut path = vec![base];
    while !rest.is_empty() {
        let inner = rest.strip_prefix('[').ok_or_else(malformed)?;
        let close = inner.find(']').ok_or_else(malformed)?;
        let segment = &inner[..close];
        if segment.contains('[') {
            return Err(malformed());
        }
        path.push(segment);
        rest = &inner[close + 1..];
    }
    // `[]` appends to an array of scalars: only as the last segment.
    if path[..path.len() - 1].contains(&"") {
        return Err(malformed());
    }
    Ok(path)
}

fn insert(
    object: &mut Map<String, Value>,
    name: &str,
    path: &[&str],
    value: &str,
) -> Result<(), InvalidRequest> {
    let twice = || InvalidRequest::new(name, format!("Parameter {name} is given twice."));
    let clash = || {
        InvalidRequest::new(
            name,
            format!("Invalid {name}: given both as a value and as an object or array."),
        )
    };
    match path {
        [] => unreachable!("a name has a base"),
        [last] => {
            if object.contains_key(*last) {
                return Err(twice());
            }
            object.insert((*last).to_owned(), Value::String(value.to_owned()));
        }
        [array, ""] => match object
            .entry((*array).to_owned())
            .or_insert_with(|| Value::Array(Vec::new()))
        {
            Value::Array(items) => items.push(Value::String(value.to_owned())),
            _ => return Err(clash()),
        },
        [first, rest @ ..] => match object
            .entry((*first).to_owned())
            .or_insert_with(|| Value::Object(Map::new()))
        {
            Value::Object(inner) => insert(inner, name, rest, value)?,
            _ => return Err(clash()),
        },
    }
    Ok(())
}

/// Validates and normalises a Stripe refund's form body: `payment_intent` or `charge`,
/// `amount` (an integer of minor units), optional `currency`, `reason`, `metadata[...]` and
/// `expand[]` (only `charge`). The answer's `wants_charge` is whether `expand[]=charge` asked
/// for the charge object in place of its id.
pub fn normalise_refund(
    fields: &Map<String, Value>,
    now_ms: i64,
) -> Result<(NormalisedEffect, bool), InvalidRequest> {
    const ALLOWED: [&str; 7] = [
        "payment_intent",
        "charge",
        "amount",
        "currency",
        "reason",
        "metadata",
        "expand",
    ];
    only_known(fields, &ALLOWED, "A refund")?;
    let (payment_intent, charge) = refunded_payment(fields)?;
    let amount = minor_units(fields.get("amount"))?;
    let currency = currency(fields, Some("usd"))?;
    let reason = refund_reason(fields)?;
    let metadata = stripe_metadata(fields)?;
    let wants_charge = refund_expands_charge(fields)?;
    let intent_key = metadata
        .get("intent_key")
        .and_then(Value::as_str)
        .map(str::to_owned);
    // What a key's requests are compared by: every parameter as Stripe read it.
    let mut parameters = Map::new();
    parameters.insert("payment_intent".into(), payment_intent.clone());
    parameters.insert("charge".into(), charge.clone().into());
    parameters.insert("amount".into(), amount.into());
    parameters.insert("currency".into(), currency.clone().into());
    parameters.insert("reason".into(), reason.clone());
    parameters.insert("metadata".into(), Value::Object(metadata.clone()));
    parameters.insert("expand".into(), json!(wants_charge));
    let mut object = Map::new();
    object.insert("object".into(), "refund".into());
    object.insert("amount".into(), amount.into());
    object.insert("currency".into(), currency.into());
    object.insert("payment_intent".into(), payment_intent);
    object.insert("charge".into(), charge.into());
    object.insert("reason".into(), reason);
    object.insert("status".into(), "succeeded".into());
    object.insert("metadata".into(), Value::Object(metadata));
    object.insert("created".into(), now_ms.div_euclid(1000).into());
    Ok((
        NormalisedEffect {
            parameters: Value::Object(parameters),
            object,
            intent_key,
        },
        wants_charge,
    ))
}

/// What a refund refunds: its `payment_intent` (a value or null) and the charge, given as
/// `charge` or, for `pi_X`, `ch_X`; exactly one of the two is given.
fn refunded_payment(fields: &Map<String, Value>) -> Result<(Value, String), InvalidRequest> {
    let payment_intent = prefixed(fields, "payment_intent", "pi_")?;
    let charge = prefixed(fields, "charge", "ch_")?;
    match (payment_intent, charge) {
        (Some(_), Some(_)) => Err(InvalidRequest::new(
            "charge",
            "Invalid charge: give payment_intent or charge, not both.",
        )),
        (None, None) => Err(InvalidRequest::new(
            "payment_intent",
            "Missing required param: payment_intent (or charge).",
        )),
        (Some(payment_intent), None) => {
            let charge = format!("ch_{}", &payment_intent["pi_".len()..]);
            Ok((Value::String(payment_intent), charge))
        }
        (None, Some(charge)) => Ok((Value::Null, charge)),
    }
}

/// A three-letter ISO `currency`, lowercased; absent, `default` (or refused as missing
/// without one).
fn currency(fields: &Map<String, Value>, default: Option<&str>) -> Result<String, InvalidRequest> {
    match text(fields, "currency")? {
        None => default
            .map(str::to_owned)
            .ok_or_else(|| InvalidRequest::new("currency", "Missing required param: currency.")),
        Some(code) if code.len() == 3 && code.bytes().all(|b| b.is_ascii_alphabetic()) => {
            Ok(code.to_ascii_lowercase())
        }
        Some(code) => Err(InvalidRequest::new(
            "currency",
            format!("Invalid currency: `{code}` is not a three-letter ISO code."),
        )),
    }
}

/// A refund's optional `reason`, one of Stripe's.
fn refund_reason(fields: &Map<String, Value>) -> Result<Value, InvalidRequest> {
    match text(fields, "reason")? {
        None => Ok(Value::Null),
        Some(reason) if REFUND_REASONS.contains(&reason.as_str()) => Ok(Value::String(reason)),
        Some(reason) => Err(InvalidRequest::new(
            "reason",
            format!(
                "Invalid reason: `{reason}`; it must be one of {}.",
                REFUND_REASONS.join(", ")
            ),
        )),
    }
}

/// Whether a refund's `expand[]` asks for its charge, the one thing a refund expands.
fn refund_expands_charge(fields: &Map<String, Value>) -> Result<bool, InvalidRequest> {
    match fields.get("expand") {
        None => Ok(false),
        Some(Value::Array(items)) => {
            for item in items {
                if item.as_str() != Some("charge") {
                    return Err(InvalidRequest::new(
                        "expand",
                        format!(
                            "Invalid expand: {item} can't be expanded here; a refund expands charge."
                        ),
                    ));
                }
            }
            Ok(!items.is_empty())
        }
        Some(_) => Err(InvalidRequest::new(
            "expand",
            "Invalid expand: must be an array (`expand[]=charge`).",
        )),
    }
}

/// Refuses a parameter not in `allowed`, as Stripe does, naming what `what` takes.
fn only_known(
    fields: &Map<String, Value>,
    allowed: &[&str],
    what: &str,
) -> Result<(), InvalidRequest> {
    match fields.keys().find(|name| !allowed.contains(&name.as_str())) {
        Some(unknown) => Err(InvalidRequest::new(
            unknown,
            format!(
                "Received unknown parameter: {unknown}. {what} takes {}.",
                allowed.join(", ")
            ),
        )),
        None => Ok(()),
    }
}

/// An optional id that must start with `prefix`.
fn prefixed(
    fields: &Map<String, Value>,
    name: &str,
    prefix: &str,
) -> Result<Option<String>, InvalidRequest> {
    let Some(id) = text(fields, name)? else {
        return Ok(None);
    };
    check_identifier(name, &id)?;
    if !id.starts_with(prefix) || id.len() == prefix.len() {
        return Err(InvalidRequest::new(
            name,
            format!("Invalid {name}: `{id}` is not a {prefix}... id."),
        ));
    }
    Ok(Some(id))
}

/// A scalar form value; an empty one counts as absent (Stripe's "unset").
fn text(fields: &Map<String, Value>, name: &str) -> Result<Option<String>, InvalidRequest> {
    match fields.get(name) {
        None => Ok(None),
        Some(Value::String(text)) if text.is_empty() => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(_) => Err(InvalidRequest::new(
            name,
            format!("Invalid {name}: must be a single value."),
        )),
    }
}

/// A positive integer of minor units, as Stripe takes amounts: `4900`, never `49.00`.
fn minor_units(value: Option<&Value>) -> Result<u64, InvalidRequest> {
    let Some(Value::String(text)) = value else {
        return Err(match value {
            None => InvalidRequest::new("amount", "Missing required param: amount."),
            Some(_) => InvalidRequest::new("amount", "Invalid amount: must be a single value."),
        });
    };
    let invalid = || {
        InvalidRequest::new(
            "amount",
            format!(
                "Invalid integer: {text}. An amount is a positive integer in the currency's smallest unit (4900 for 49.00 USD)."
            ),
        )
    };
    if text.is_empty() || text.len() > 12 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid());
    }
    let amount: u64 = text.parse().map_err(|_| invalid())?;
    if amount == 0 {
        return Err(invalid());
    }
    if amount > STRIPE_AMOUNT_MAX {
        return Err(InvalidRequest::new(
            "amount",
            format!(
                "Invalid amount: {amount} is over the largest Stripe takes, {STRIPE_AMOUNT_MAX}."
            ),
        ));
    }
    Ok(amount)
}

/// Metadata as Stripe takes it: an object of strings (keys at most 40 characters, values at
/// most 500, 50 entries); `metadata=` (empty) is none.
fn stripe_metadata(fields: &Map<String, Value>) -> Result<Map<String, Value>, InvalidRequest> {
    if matches!(fields.get("metadata"), Some(Value::String(text)) if text.is_empty()) {
        return Ok(Map::new());
    }
    let metadata = metadata(fields)?;
    for (name, value) in &metadata {
        let value = value.as_str().unwrap_or_default();
        if name.chars().count() > METADATA_KEY_CHARS_MAX
            || value.chars().count() > METADATA_VALUE_CHARS_MAX
        {
            return Err(InvalidRequest::new(
                "metadata",
                format!(
                    "Invalid metadata[{name}]: keys are at most {METADATA_KEY_CHARS_MAX} characters, values at most {METADATA_VALUE_CHARS_MAX}."
                ),
            ));
        }
    }
    Ok(metadata)
}

/// A parsed Stripe list query of refunds.
#[derive(Debug)]
pub struct StripeListQuery {
    pub filter: ListFilter,
    pub limit: usize,
    /// `expand[]=data.charge`: each refund's charge as an object.
    pub wants_charge: bool,
}

/// Parses `GET /v1/refunds`'s query: `payment_intent`, `charge`, `limit` (1 to 100, 10 by
/// default), `starting_after` (a refund id: the page holds older ones), `created` and
/// `created[gte|gt|lt|lte]` in Unix seconds, `expand[]=data.charge`. Unknown parameters are
/// refused, as Stripe does; an empty `starting_after`, `limit` or `created[...]` counts as
/// absent (a template renders a missing cursor as empty).
pub fn list_query(
    kind: EffectKind,
    pairs: &[(String, String)],
) -> Result<StripeListQuery, InvalidRequest> {
    let fields = parse_form(pairs)?;
    let mut filter = ListFilter {
        newest_first: true,
        ..ListFilter::default()
    };
    let mut limit = STRIPE_LIST_LIMIT_DEFAULT;
    let mut wants_charge = false;
    for (name, value) in &fields {
        match (name.as_str(), value) {
            ("payment_intent" | "charge", Value::String(id)) if kind == EffectKind::Refund => {
                let field = if name == "charge" {
                    "charge"
                } else {
                    "payment_intent"
                };
                if filter.field.is_some() {
                    return Err(InvalidRequest::new(
                        name,
                        "Invalid filter: give payment_intent or charge, not both.",
                    ));
                }
                filter.field = Some((field, id.clone()));
            }
            ("customer", Value::String(id)) if kind == EffectKind::PaymentIntent => {
                filter.field = Some(("customer", id.clone()));
            }
            (_, Value::String(empty)) if empty.is_empty() => {}
            ("limit", Value::String(text)) => limit = list_limit(text)?,
            ("starting_after", Value::String(id)) => {
                filter.after_sequence = kind.sequence_of(id).ok_or_else(|| {
                    InvalidRequest::new(
                        "starting_after",
                        format!("Invalid starting_after: no such {}: '{id}'.", kind.object()),
                    )
                })?;
            }
            ("created", Value::String(seconds)) => {
                let at = seconds_of("created", seconds)?;
                bound_from(&mut filter, at.saturating_mul(1000));
                bound_before(&mut filter, at.saturating_add(1).saturating_mul(1000));
            }
            ("created", Value::Object(bounds)) => created_bounds(&mut filter, bounds)?,
            ("expand", Value::Array(items)) if kind == EffectKind::Refund => {
                wants_charge = list_expands_charge(items)?;
            }
            _ => {
                return Err(InvalidRequest::new(
                    name,
                    format!(
                        "Received unknown parameter: {name}. A list of {} takes {}.",
                        kind.plural(),
                        match kind {
                            EffectKind::PaymentIntent =>
                                "customer, created, limit and starting_after",
                            _ =>
                                "payment_intent, charge, created, limit, starting_after and expand[]",
                        }
                    ),
                ));
            }
        }
    }
    Ok(StripeListQuery {
        filter,
        limit,
        wants_charge,
    })
}

/// A list's `limit`: an integer from 1 to `STRIPE_LIST_LIMIT_MAX`.
fn list_limit(text: &str) -> Result<usize, InvalidRequest> {
    text.parse::<usize>()
        .ok()
        .filter(|limit| (1..=STRIPE_LIST_LIMIT_MAX).contains(limit))
        .ok_or_else(|| {
            InvalidRequest::new(
                "limit",
                format!(
                    "Invalid limit: `{text}`; it must be an integer from 1 to {STRIPE_LIST_LIMIT_MAX}."
                ),
            )
        })
}

/// Narrows `filter`'s window by `created[gte|gt|lt|lte]`, each in Unix seconds (an empty
/// one counts as absent).
fn created_bounds(
    filter: &mut ListFilter,
    bounds: &Map<String, Value>,
) -> Result<(), InvalidRequest> {
    for (operator, seconds) in bounds {
        let name = format!("created[{operator}]");
        let Value::String(seconds) = seconds else {
            return Err(InvalidRequest::new(
                &name,
                format!("Invalid {name}: must be a single value."),
            ));
        };
        if seconds.is_empty() {
            continue;
        }
        let at = seconds_of(&name, seconds)?;
        // `created` is whole seconds of the effect's millisecond stamp, so a
        // bound in seconds is one in milliseconds.
        match operator.as_str() {
            "gte" => bound_from(filter, at.saturating_mul(1000)),
            "gt" => bound_from(filter, at.saturating_add(1).saturating_mul(1000)),
            "lt" => bound_before(filter, at.saturating_mul(1000)),
            "lte" => bound_before(filter, at.saturating_add(1).saturating_mul(1000)),
            _ => {
                return Err(InvalidRequest::new(
                    &name,
                    format!(
                        "Received unknown parameter: {name}. created takes gte, gt, lt and lte."
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Whether a list of refunds' `expand[]` asks for each refund's charge (`data.charge`, the
/// one thing it expands).
fn list_expands_charge(items: &[Value]) -> Result<bool, InvalidRequest> {
    for item in items {
        if item.as_str() != Some("data.charge") {
            return Err(InvalidRequest::new(
                "expand",
                format!(
                    "Invalid expand: {item} can't be expanded here; a list of refunds expands data.charge."
                ),
            ));
        }
    }
    Ok(!items.is_empty())
}

fn seconds_of(name: &str, text: &str) -> Result<i64, InvalidRequest> {
    text.parse::<i64>().map_err(|_| {
        InvalidRequest::new(
            name,
            format!("Invalid {name}: `{text}` is not an integer of Unix seconds."),
        )
    })
}

/// Narrows the window's start to `ms` (the later of two starts wins).
fn bound_from(filter: &mut ListFilter, ms: i64) {
    filter.created_gte_ms = Some(filter.created_gte_ms.map_or(ms, |gte| gte.max(ms)));
}

/// Narrows the window's end to `ms` (the earlier of two ends wins).
fn bound_before(filter: &mut ListFilter, ms: i64) {
    filter.created_lt_ms = Some(filter.created_lt_ms.map_or(ms, |lt| lt.min(ms)));
}

/// The types of payment method a PaymentIntent of the mock may name: cards only.
pub const PAYMENT_METHOD_TYPES: [&str; 1] = ["card"];
/// The reasons a PaymentIntent's cancellation may give.
pub const CANCELLATION_REASONS: [&str; 4] = [
    "duplicate",
    "fraudulent",
    "requested_by_customer",
    "abandoned",
];
/// The statuses from which a PaymentIntent may be cancelled.
const CANCELLABLE: [&str; 5] = [
    "requires_payment_method",
    "requires_capture",
    "requires_confirmation",
    "requires_action",
    "processing",
];

/// Validates and normalises a Stripe PaymentIntent's form body: `amount` (minor units) and
/// `currency` required; optional `customer` (`cus_...`), `payment_method` (`pm_...`),
/// `payment_method_types[]` (cards only), `confirm`, `off_session` (with `confirm=true`
/// only), `capture_method` (`automatic` or `manual`), `description` and `metadata[...]`.
/// Confirmed, it has `succeeded` (or, captured manually, `requires_capture`); a decline is
/// the fault plan's, decided by the model like every side effect.
pub fn normalise_payment_intent(
    fields: &Map<String, Value>,
    now_ms: i64,
) -> Result<NormalisedEffect, InvalidRequest> {
    const ALLOWED: [&str; 10] = [
        "amount",
        "currency",
        "customer",
        "payment_method",
        "payment_method_types",
        "confirm",
        "off_session",
        "capture_method",
        "description",
        "metadata",
    ];
    only_known(fields, &ALLOWED, "A PaymentIntent")?;
    let amount = minor_units(fields.get("amount"))?;
    let currency = currency(fields, None)?;
    let customer = prefixed(fields, "customer", "cus_")?;
    let payment_method = prefixed(fields, "payment_method", "pm_")?;
    let types = payment_method_types(fields)?;
    let (confirm, off_session) = confirmation(fields, payment_method.as_deref())?;
    let capture_method = capture_method(fields)?;
    let description = text(fields, "description")?;
    let metadata = stripe_metadata(fields)?;
    let status = match (confirm, capture_method.as_str(), &payment_method) {
        (true, "manual", _) => "requires_capture",
        (true, _, _) => "succeeded",
        (false, _, Some(_)) => "requires_confirmation",
        (false, _, None) => "requires_payment_method",
    };
    let intent_key = metadata
        .get("intent_key")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let optional = |value: Option<String>| value.map_or(Value::Null, Value::String);
    let mut parameters = Map::new();
    parameters.insert("amount".into(), amount.into());
    parameters.insert("currency".into(), currency.clone().into());
    parameters.insert("customer".into(), optional(customer.clone()));
    parameters.insert("payment_method".into(), optional(payment_method.clone()));
    parameters.insert("payment_method_types".into(), Value::Array(types.clone()));
    parameters.insert("confirm".into(), confirm.into());
    parameters.insert("off_session".into(), off_session.into());
    parameters.insert("capture_method".into(), capture_method.clone().into());
    parameters.insert("description".into(), optional(description.clone()));
    parameters.insert("metadata".into(), Value::Object(metadata.clone()));
    let received = if status == "succeeded" { amount } else { 0 };
    let mut object = Map::new();
    object.insert("object".into(), "payment_intent".into());
    object.insert("amount".into(), amount.into());
    object.insert("amount_received".into(), received.into());
    object.insert("currency".into(), currency.into());
    object.insert("customer".into(), optional(customer));
    object.insert("payment_method".into(), optional(payment_method));
    object.insert("payment_method_types".into(), Value::Array(types));
    object.insert("capture_method".into(), capture_method.into());
    object.insert("description".into(), optional(description));
    object.insert("status".into(), status.into());
    object.insert("canceled_at".into(), Value::Null);
    object.insert("cancellation_reason".into(), Value::Null);
    object.insert("livemode".into(), false.into());
    object.insert("metadata".into(), Value::Object(metadata));
    object.insert("created".into(), now_ms.div_euclid(1000).into());
    Ok(NormalisedEffect {
        parameters: Value::Object(parameters),
        object,
        intent_key,
    })
}

/// A PaymentIntent's `payment_method_types[]`: cards only, and cards when absent.
fn payment_method_types(fields: &Map<String, Value>) -> Result<Vec<Value>, InvalidRequest> {
    match fields.get("payment_method_types") {
        None => Ok(vec![Value::String("card".into())]),
        Some(Value::Array(items)) => {
            for item in items {
                if !item
                    .as_str()
                    .is_some_and(|name| PAYMENT_METHOD_TYPES.contains(&name))
                {
                    return Err(InvalidRequest::new(
                        "payment_method_types",
                        format!(
                            "Invalid payment_method_types: {item}; this provider takes {}.",
                            PAYMENT_METHOD_TYPES.join(", ")
                        ),
                    ));
                }
            }
            Ok(items.clone())
        }
        Some(_) => Err(InvalidRequest::new(
            "payment_method_types",
            "Invalid payment_method_types: must be an array (`payment_method_types[]=card`).",
        )),
    }
}

/// A PaymentIntent's `confirm` and `off_session`: off session only when confirmed, and
/// confirmed only with a payment method.
fn confirmation(
    fields: &Map<String, Value>,
    payment_method: Option<&str>,
) -> Result<(bool, bool), InvalidRequest> {
    let confirm = flag(fields, "confirm")?;
    let off_session = flag(fields, "off_session")?;
    if off_session && !confirm {
        return Err(InvalidRequest::new(
            "off_session",
            "Invalid off_session: it can only be used with confirm=true.",
        ));
    }
    if confirm && payment_method.is_none() {
        return Err(InvalidRequest::new(
            "payment_method",
            "You cannot confirm this PaymentIntent because it's missing a payment method.",
        ));
    }
    Ok((confirm, off_session))
}

/// A PaymentIntent's `capture_method`: `automatic` (when absent) or `manual`.
fn capture_method(fields: &Map<String, Value>) -> Result<String, InvalidRequest> {
    match text(fields, "capture_method")? {
        None => Ok("automatic".to_owned()),
        Some(method) if method == "automatic" || method == "manual" => Ok(method),
        Some(method) => Err(InvalidRequest::new(
            "capture_method",
            format!("Invalid capture_method: `{method}`; it must be automatic or manual."),
        )),
    }
}

/// The charge of a PaymentIntent made here: `pi_000007` charged `ch_000007` once it
/// succeeded (ids of the synthetic charges of refunds, `ch_X` for `pi_X`).
pub fn with_latest_charge(mut payment_intent: Value) -> Value {
    let charge = match (
        payment_intent["status"].as_str(),
        payment_intent["id"].as_str(),
    ) {
        (Some("succeeded" | "requires_capture"), Some(id)) => {
            Value::String(format!("ch_{}", &id["pi_".len().min(id.len())..]))
        }
        _ => Value::Null,
    };
    payment_intent["latest_charge"] = charge;
    payment_intent
}

/// A `true`/`false` form value; absent or empty is `false`.
fn flag(fields: &Map<String, Value>, name: &str) -> Result<bool, InvalidRequest> {
    match text(fields, name)?.as_deref() {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(other) => Err(InvalidRequest::new(
            name,
            format!("Invalid boolean: {other}. {name} is true or false."),
        )),
    }
}

/// A PaymentIntent the mock did not make, for a well-formed `pi_X` id: a succeeded payment
/// of customer `cus_X` whose charge is `ch_X` (the ids a refund of `pi_X` names), with an
/// amount drawn from the id. It is what `GET /v1/payment_intents/{id}` shows for payments
/// made before the mock started, as the JSON dialect's orders are.
pub fn synthetic_payment_intent(id: &str) -> Option<Value> {
    let suffix = id.strip_prefix("pi_").filter(|suffix| !suffix.is_empty())?;
    if check_identifier("id", id).is_err() {
        return None;
    }
    // FNV-1a of the id: the same payment for the same id, on every run.
    let hash = id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    });
    let amount = [4900, 1250, 999, 10_000, 2500][(hash % 5) as usize];
    Some(json!({
        "id": id,
        "object": "payment_intent",
        "amount": amount,
        "amount_received": amount,
        "currency": "usd",
        "customer": format!("cus_{suffix}"),
        "payment_method": format!("pm_{suffix}"),
        "payment_method_types": ["card"],
        "capture_method": "automatic",
        "description": null,
        "status": "succeeded",
        "canceled_at": null,
        "cancellation_reason": null,
        "latest_charge": format!("ch_{suffix}"),
        "livemode": false,
        "metadata": {},
        "created": 1_700_000_000,
    }))
}

/// Why a PaymentIntent can't be cancelled, in Stripe's words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnexpectedState(pub String);

/// Cancels `payment_intent` (its object, changed in place) with the form `fields`
/// (`cancellation_reason`, optional): from a status that allows it, `canceled` with the time
/// and reason; from any other (`succeeded`, `canceled`), Stripe's
/// `payment_intent_unexpected_state`, and nothing changes.
pub fn cancel(
    payment_intent: &mut Value,
    fields: &Map<String, Value>,
    now_ms: i64,
) -> Result<Result<(), UnexpectedState>, InvalidRequest> {
    if let Some(unknown) = fields
        .keys()
        .find(|name| name.as_str() != "cancellation_reason")
    {
        return Err(InvalidRequest::new(
            unknown,
            format!(
                "Received unknown parameter: {unknown}. A cancellation takes cancellation_reason."
            ),
        ));
    }
    let reason = match text(fields, "cancellation_reason")? {
        None => Value::Null,
        Some(reason) if CANCELLATION_REASONS.contains(&reason.as_str()) => Value::String(reason),
        Some(reason) => {
            return Err(InvalidRequest::new(
                "cancellation_reason",
                format!(
                    "Invalid cancellation_reason: `{reason}`; it must be one of {}.",
                    CANCELLATION_REASONS.join(", ")
                ),
            ));
        }
    };
    let status = payment_intent["status"].as_str().unwrap_or_default();
    if !CANCELLABLE.contains(&status) {
        return Ok(Err(UnexpectedState(format!(
            "You cannot cancel this PaymentIntent because it has a status of {status}. Only a PaymentIntent with one of the following statuses may be canceled: {}.",
            CANCELLABLE.join(", ")
        ))));
    }
    payment_intent["status"] = "canceled".into();
    payment_intent["canceled_at"] = now_ms.div_euclid(1000).into();
    payment_intent["cancellation_reason"] = reason;
    Ok(Ok(()))
}

/// A refund with its `charge` expanded into a (synthetic) charge object: the charge of
/// payment intent `pi_X` is `ch_X`, its customer `cus_X`.
pub fn expand_charge(mut refund: Value) -> Value {
    let Some(charge) = refund.get("charge").and_then(Value::as_str) else {
        return refund;
    };
    let suffix = &charge["ch_".len().min(charge.len())..];
    let expanded = json!({
        "id": charge,
        "object": "charge",
        "amount_refunded": refund.get("amount").cloned().unwrap_or(Value::Null),
        "currency": refund.get("currency").cloned().unwrap_or(Value::Null),
        "customer": format!("cus_{suffix}"),
        "payment_intent": refund.get("payment_intent").cloned().unwrap_or(Value::Null),
    });
    refund["charge"] = expanded;
    refund
}

/// A list page as Stripe answers it.
pub fn list_body(kind: EffectKind, data: Vec<Value>, has_more: bool) -> Value {
    let url = format!("/v1/{}", kind.plural());
    json!({"object": "list", "url": url, "has_more": has_more, "data": data})
}

/// An error body in Stripe's words: the mock's 409 for a key in progress is Stripe's
/// `invalid_request_error` with code `idempotency_key_in_use`.
pub fn error_body(status: u16, mut body: Value) -> Value {
    // A decline names its code, as Stripe's do: what a client branches on.
    if status == 402 && body["error"]["type"] == "card_error" && body["error"].get("code").is_none()
    {
        body["error"]["code"] = "card_declined".into();
        body["error"]["decline_code"] = "generic_decline".into();
        return body;
    }
    if status == 409 && body["error"]["type"] == "idempotency_error" {
        return json!({"error": {
            "type": "invalid_request_error",
            "code": "idempotency_key_in_use",
            "message": "There is currently another in-progress request using this Idempotent Key (that probably means you submitted twice, and the other request is still going through): please try again later.",
        }});
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect()
    }

    #[test]
    fn bracket_notation_nests_objects_and_arrays() {
        let form = parse_form(&pairs(&[
            ("amount", "4900"),
            ("metadata[intent_key]", "refund:o1"),
            ("metadata[intentgate_key]", "t:refund:o1"),
            ("expand[]", "charge"),
            ("expand[]", "balance_transaction"),
            ("a[b][c]", "d"),
        ]))
        .unwrap();
        assert_eq!(
            Value::Object(form),
            json!({"amount": "4900", "metadata": {"intent_key": "refund:o1", "intentgate_key": "t:refund:o1"},
                   "expand": ["charge", "balance_transaction"], "a": {"b": {"c": "d"}}})
        );
        for bad in [
            pairs(&[("amount", "1"), ("amount", "2")]),
            pairs(&[("metadata", "x"), ("metadata[k]", "v")]),
            pairs(&[("metadata[k]", "v"), ("metadata", "x")]),
            pairs(&[("a[", "1")]),
            pairs(&[("a]b", "1")]),
            pairs(&[("[a]", "1")]),
            pairs(&[("a[][b]", "1")]),
            pairs(&[("a[b]c", "1")]),
        ] {
            assert!(parse_form(&bad).is_err(), "{bad:?}");
        }
    }

    fn refund(list: &[(&str, &str)]) -> Result<(NormalisedEffect, bool), InvalidRequest> {
        normalise_refund(&parse_form(&pairs(list)).unwrap(), 1_700_000_000_999)
    }

    #[test]
    fn a_refund_takes_minor_units_and_answers_stripes_object() {
        let (effect, wants_charge) = refund(&[
            ("payment_intent", "pi_123"),
            ("amount", "4900"),
            ("metadata[intent_key]", "refund:pi_123:49.00"),
            ("expand[]", "charge"),
        ])
        .unwrap();
        assert!(wants_charge);
        assert_eq!(effect.intent_key.as_deref(), Some("refund:pi_123:49.00"));
        let object = Value::Object(effect.object);
        assert_eq!(object["amount"], 4900);
        assert_eq!(object["currency"], "usd");
        assert_eq!(object["payment_intent"], "pi_123");
        assert_eq!(object["charge"], "ch_123");
        assert_eq!(object["created"], 1_700_000_000);
        assert_eq!(object["status"], "succeeded");
        assert_eq!(expand_charge(object)["charge"]["customer"], "cus_123");
        for (bad, param) in [
            (
                vec![("payment_intent", "pi_1"), ("amount", "49.00")],
                "amount",
            ),
            (vec![("payment_intent", "pi_1"), ("amount", "0")], "amount"),
            (vec![("payment_intent", "pi_1"), ("amount", "-5")], "amount"),
            (
                vec![("payment_intent", "pi_1"), ("amount", "100000000")],
                "amount",
            ),
            (vec![("payment_intent", "pi_1")], "amount"),
            (vec![("amount", "5")], "payment_intent"),
            (
                vec![("payment_intent", "ch_1"), ("amount", "5")],
                "payment_intent",
            ),
            (
                vec![
                    ("payment_intent", "pi_1"),
                    ("charge", "ch_1"),
                    ("amount", "5"),
                ],
                "charge",
            ),
            (
                vec![
                    ("payment_intent", "pi_1"),
                    ("amount", "5"),
                    ("reason", "bored"),
                ],
                "reason",
            ),
            (
                vec![("payment_intent", "pi_1"), ("amount", "5"), ("amuont", "5")],
                "amuont",
            ),
            (
                vec![
                    ("payment_intent", "pi_1"),
                    ("amount", "5"),
                    ("expand[]", "customer"),
                ],
                "expand",
            ),
            (
                vec![
                    ("payment_intent", "pi_1"),
                    ("amount", "5"),
                    ("currency", "dollars"),
                ],
                "currency",
            ),
        ] {
            let error = refund(&bad).unwrap_err();
            assert_eq!(
                error.param.as_deref(),
                Some(param),
                "{bad:?}: {}",
                error.message
            );
        }
        let long_key = "k".repeat(METADATA_KEY_CHARS_MAX + 1);
        let name = format!("metadata[{long_key}]");
        assert!(refund(&[("payment_intent", "pi_1"), ("amount", "5"), (&name, "v")]).is_err());
    }

    #[test]
    fn list_queries_read_stripes_parameters() {
        let query = list_query(
            EffectKind::Refund,
            &pairs(&[
                ("payment_intent", "pi_1"),
                ("limit", "100"),
                ("starting_after", "re_000007"),
                ("created[gte]", "1700000000"),
                ("created[lt]", "1700000060"),
                ("expand[]", "data.charge"),
            ]),
        )
        .unwrap();
        assert_eq!(query.limit, 100);
        assert!(query.wants_charge);
        assert!(query.filter.newest_first);
        assert_eq!(query.filter.after_sequence, 7);
        assert_eq!(
            query.filter.field,
            Some(("payment_intent", "pi_1".to_owned()))
        );
        assert_eq!(query.filter.created_gte_ms, Some(1_700_000_000_000));
        assert_eq!(query.filter.created_lt_ms, Some(1_700_000_060_000));
        let query = list_query(
            EffectKind::Refund,
            &pairs(&[("created[gt]", "10"), ("created[lte]", "20")]),
        )
        .unwrap();
        assert_eq!(query.filter.created_gte_ms, Some(11_000));
        assert_eq!(query.filter.created_lt_ms, Some(21_000));
        assert_eq!(query.limit, STRIPE_LIST_LIMIT_DEFAULT);
        let empty = list_query(
            EffectKind::Refund,
            &pairs(&[("starting_after", ""), ("limit", "")]),
        )
        .unwrap();
        assert_eq!(empty.filter.after_sequence, 0);
        for bad in [
            pairs(&[("limit", "101")]),
            pairs(&[("limit", "0")]),
            pairs(&[("starting_after", "ch_000001")]),
            pairs(&[("created[since]", "1")]),
            pairs(&[("created[gte]", "soon")]),
            pairs(&[("intent_key", "k")]),
            pairs(&[("payment_intent", "pi_1"), ("charge", "ch_1")]),
            pairs(&[("expand[]", "data.customer")]),
        ] {
            assert!(list_query(EffectKind::Refund, &bad).is_err(), "{bad:?}");
        }
    }
}
