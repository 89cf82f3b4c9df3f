//! Argument fingerprints: the same key with other arguments is a `conflict`, not a retry.
//!
//! The fingerprint is the SHA-256 of the arguments' canonical JSON: object members sorted
//! by name, no insignificant whitespace, and numbers written as exact normalised decimals
//! (so `49` and `49.0` are one value). Strings stay strings: `"49"` is not `49`. Numbers are
//! read from the text the caller sent, never through a float, so `49.9999999999999999` and
//! `50` differ; a number outside [`Decimal`]'s bounds (`1e400`) is written as its
//! [`ExactNumber`] canonical text, which has an exponent and so never equals a decimal's.
//!
//! A tool's fingerprint ([`fingerprint_for`], what the gate records) first gives each value
//! its one spelling under the tool's input schema ([`canonical_arguments`]): every string in
//! NFC, and a string where the schema declares a decimal (`type: [string, number]`, an
//! `anyOf` with a number branch as Pydantic writes `Decimal`, `format: decimal`, or a
//! `pattern` of digits with a decimal point) read as
//! the number it spells, so `20`, `20.0` and `"20.00"` are one intent. Where the schema
//! declares only a string, the string is kept: `"0012"` and `"12"` may be two order ids.
//! Arguments that already have their one spelling fingerprint exactly as [`fingerprint`]
//! did before, so a ledger's older fingerprints still match them.

use std::borrow::Cow;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::decimal::Decimal;
use crate::number::ExactNumber;

/// A lowercase hex SHA-256 of the canonical arguments (64 characters).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Fingerprint(String);

impl Fingerprint {
    /// Wraps a fingerprint read back from the ledger.
    pub fn from_hex(hex: impl Into<String>) -> Fingerprint {
        Fingerprint(hex.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Fingerprints a call's arguments.
pub fn fingerprint(arguments: &Value) -> Fingerprint {
    let mut canonical = String::with_capacity(256);
    write_canonical(&mut canonical, arguments);
    Fingerprint(crate::hex::lower_hex(&Sha256::digest(canonical.as_bytes())))
}

/// Fingerprints a call's arguments under the tool's input schema: [`fingerprint`] of their
/// [`canonical_arguments`].
pub fn fingerprint_for(schema: &Value, arguments: &Value) -> Fingerprint {
    fingerprint(&canonical_arguments(schema, arguments))
}

/// How deep [`canonical_arguments`] follows a schema's `$ref`, `anyOf` and `oneOf` from one
/// node: a recursive schema must not recurse for ever, and real ones nest a few levels.
const SCHEMA_DEPTH_MAX: usize = 16;

/// `arguments` with each value in its one spelling under `schema`: strings in NFC, and
/// decimal text where the schema declares a decimal as that number (see the module
/// comment). Borrowed when nothing changes.
pub fn canonical_arguments<'a>(schema: &Value, arguments: &'a Value) -> Cow<'a, Value> {
    match canonical_value(schema, schema, arguments) {
        Some(canonical) => Cow::Owned(canonical),
        None => Cow::Borrowed(arguments),
    }
}

/// The schema of a value its parent's schema says nothing about: anything.
static ANY_SCHEMA: Value = Value::Bool(true);

/// Most schema nodes [`alternatives`] returns for one node, however its branches multiply.
const ALTERNATIVES_MAX: usize = 64;

/// `value` in its one spelling under the schema `node` (of the document `root`), or `None`
/// when it already is: nothing is built or copied for arguments already canonical, the
/// common case.
fn canonical_value(root: &Value, node: &Value, value: &Value) -> Option<Value> {
    let branching;
    let nodes: &[&Value] = if stands_for_others(node) {
        branching = alternatives(root, node);
        &branching
    } else if node.is_object() {
        std::slice::from_ref(&node)
    } else {
        &[]
    };
    match value {
        Value::String(text) => {
            if nodes.iter().any(|node| declares_decimal(node))
                && let Some(number) = decimal_number(text)
            {
                return Some(Value::Number(number));
            }
            match crate::text::nfc(text) {
                Cow::Owned(composed) => Some(Value::String(composed)),
                Cow::Borrowed(_) => None,
            }
        }
        Value::Object(members) => {
            let canonical = members.iter().map(|(name, member)| {
                let schema = nodes
                    .iter()
                    .find_map(|node| member_schema(node, name))
                    .unwrap_or(&ANY_SCHEMA);
                canonical_value(root, schema, member)
            });
            rebuilt(canonical, || members.values())
                .map(|values| Value::Object(members.keys().cloned().zip(values).collect()))
        }
        Value::Array(items) => {
            let schema = nodes
                .iter()
                .find_map(|node| node.get("items").filter(|items| items.is_object()))
                .unwrap_or(&ANY_SCHEMA);
            let canonical = items.iter().map(|item| canonical_value(root, schema, item));
            rebuilt(canonical, || items.iter()).map(Value::Array)
        }
        _ => None,
    }
}

/// The values of a collection once one of them changed: each `canonical` one that changed,
/// else a copy of the original (the collection's values, in order, from `originals`) in its
/// place; `None` when none changed.
fn rebuilt<'v, I: Iterator<Item = &'v Value>>(
    canonical: impl Iterator<Item = Option<Value>>,
    originals: impl Fn() -> I,
) -> Option<Vec<Value>> {
    let mut values: Option<Vec<Value>> = None;
    for (index, (canonical, original)) in canonical.zip(originals()).enumerate() {
        match (canonical, &mut values) {
            (None, None) => {}
            (Some(changed), None) => {
                let mut rebuilt: Vec<Value> = originals().take(index).cloned().collect();
                rebuilt.push(changed);
                values = Some(rebuilt);
            }
            (changed, Some(rebuilt)) => rebuilt.push(changed.unwrap_or_else(|| original.clone())),
        }
    }
    values
}

/// `node` and the schemas it stands for: the targets of its local `$ref`s and the branches
/// of its `anyOf`, `oneOf` and `allOf`, within [`SCHEMA_DEPTH_MAX`] and [`ALTERNATIVES_MAX`].
fn alternatives<'s>(root: &'s Value, node: &'s Value) -> Vec<&'s Value> {
    let mut found = Vec::new();
    let mut pending = vec![(node, 0)];
    while let Some((node, depth)) = pending.pop() {
        if found.len() >= ALTERNATIVES_MAX {
            break;
        }
        if !node.is_object() || depth > SCHEMA_DEPTH_MAX {
            continue;
        }
        found.push(node);
        if let Some(target) = node
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|reference| reference.strip_prefix('#'))
            .and_then(|pointer| root.pointer(pointer))
        {
            pending.push((target, depth + 1));
        }
        for keyword in ["anyOf", "oneOf", "allOf"] {
            if let Some(Value::Array(branches)) = node.get(keyword) {
                pending.extend(branches.iter().map(|branch| (branch, depth + 1)));
            }
        }
    }
    found
}

/// True when `node` stands for other schemas too ([`alternatives`]): a `$ref`, `anyOf`,
/// `oneOf` or `allOf`. Most don't, and are their own one alternative.
fn stands_for_others(node: &Value) -> bool {
    node.as_object().is_some_and(|keywords| {
        keywords
            .keys()
            .any(|keyword| matches!(keyword.as_str(), "$ref" | "anyOf" | "oneOf" | "allOf"))
    })
}

/// True when one schema node itself says its value is a number: `type` `number` or
/// `integer` (alone or among others), or `format: decimal`.
fn declares_decimal(node: &Value) -> bool {
    let numeric = |name: &Value| matches!(name.as_str(), Some("number" | "integer"));
    let typed = match node.get("type") {
        Some(Value::Array(names)) => names.iter().any(numeric),
        Some(name) => numeric(name),
        None => false,
    };
    typed
        || node.get("format").and_then(Value::as_str) == Some("decimal")
        || node
            .get("pattern")
            .and_then(Value::as_str)
            .is_some_and(is_decimal_pattern)
}

/// True for a `pattern` that can match only decimal text with a fractional part, such as
/// `^[0-9]+(\.[0-9]{1,2})?$`: built of digits, digit classes, signs, anchors, groups and
/// quantifiers only, with an escaped point. A pattern without a point (`^\d+$`) is an id's:
/// `"0012"` and `"12"` stay two values under it.
fn is_decimal_pattern(pattern: &str) -> bool {
    let has_point = pattern.contains("\\.") || pattern.contains("[.]");
    let numeric = pattern
        .replace("\\d", "")
        .replace("\\.", "")
        .chars()
        .all(|c| c.is_ascii_digit() || "^$[]-+?*(){},|.".contains(c));
    has_point && numeric
}

/// The schema of member `name` that `node` gives: its `properties` entry, else an object
/// `additionalProperties`.
fn member_schema<'s>(node: &'s Value, name: &str) -> Option<&'s Value> {
    node.get("properties")
        .and_then(|properties| properties.get(name))
        .or_else(|| node.get("additionalProperties").filter(|a| a.is_object()))
}

/// The number that decimal text spells, in its canonical text; `None` for text that is no
/// number (`"abc"`, `" 20"`), which stays a string.
fn decimal_number(text: &str) -> Option<serde_json::Number> {
    let canonical = if let Ok(decimal) = Decimal::parse(text) {
        decimal.to_string()
    } else {
        ExactNumber::parse(text).ok()?.to_string()
    };
    canonical.parse().ok()
}

/// Writes the canonical JSON of `value`.
pub fn write_canonical(out: &mut String, value: &Value) {
    match value {
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_unstable_by_key(|(name, _)| *name);
            out.push('{');
            for (index, (name, member)) in members.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                push_json_string(out, name);
                out.push(':');
                write_canonical(out, member);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_canonical(out, item);
            }
            out.push(']');
        }
        Value::Number(number) => push_canonical_number(out, number.as_str()),
        Value::String(text) => push_json_string(out, text),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Null => out.push_str("null"),
    }
}

/// Writes `text` as a JSON string, as `serde_json` writes it: as it is between quotes when
/// nothing in it needs escaping (no quote, backslash or control character), else escaped by
/// `serde_json` itself.
fn push_json_string(out: &mut String, text: &str) {
    if text
        .bytes()
        .any(|byte| byte < 0x20 || byte == b'"' || byte == b'\\')
    {
        out.push_str(&serde_json::to_string(text).expect("a string serializes to JSON"));
    } else {
        out.push('"');
        out.push_str(text);
        out.push('"');
    }
}

/// Writes the one text of a numeric value: the [`Decimal`] form where it has one (as
/// fingerprints have always been written), else the [`ExactNumber`] form. Only text that is
/// no number at all, or whose exponent passes 64 bits (the gate refuses such arguments
/// before fingerprinting), is kept as it is.
fn push_canonical_number(out: &mut String, text: &str) {
    use std::fmt::Write as _;
    // Writing to a `String` can't fail.
    let _ = if let Ok(decimal) = Decimal::parse(text) {
        write!(out, "{decimal}")
    } else if let Ok(number) = ExactNumber::parse(text) {
        write!(out, "{number}")
    } else {
        out.write_str(text)
    };
}

/// The dotted paths at which two argument objects differ, sorted, for a `conflict` message
/// that says what changed ("amount" rather than "the arguments").
pub fn differing_fields(stored: &Value, requested: &Value) -> Vec<String> {
    let mut paths = Vec::new();
    collect_differences(stored, requested, &mut String::new(), &mut paths);
    paths.sort();
    paths
}

fn collect_differences(a: &Value, b: &Value, path: &mut String, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(left), Value::Object(right)) => {
            let mut names: Vec<&String> = left.keys().chain(right.keys()).collect();
            names.sort();
            names.dedup();
            for name in names {
                let length = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(name);
                match (left.get(name), right.get(name)) {
                    (Some(x), Some(y)) => collect_differences(x, y, path, out),
                    _ => out.push(path.clone()),
                }
                path.truncate(length);
            }
        }
        _ => {
            if canonical(a) != canonical(b) {
                out.push(if path.is_empty() {
                    "(arguments)".to_owned()
                } else {
                    path.clone()
                });
            }
        }
    }
}

fn canonical(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(&mut out, value);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn member_order_and_number_spelling_do_not_change_the_fingerprint() {
        let a = fingerprint(
            &json!({"order_id": "8812", "amount": 49, "meta": {"x": 1, "y": [1.50, 2]}}),
        );
        let b = fingerprint(
            &json!({"meta": {"y": [1.5, 2.0], "x": 1.0}, "amount": 49.0, "order_id": "8812"}),
        );
        assert_eq!(a, b);
        assert_eq!(a.as_str().len(), 64);
    }

    /// Fingerprints are stored with every intent and compared with every later call's: the
    /// canonical text and digest of these arguments, as every release before wrote them, must
    /// never change (escaped and non-ASCII names and strings, numbers in several spellings,
    /// nesting, decimals a schema declares, strings it does not).
    #[test]
    fn fingerprints_are_the_ones_stored_by_earlier_releases() {
        let schema = json!({"type": "object", "properties": {
            "amount": {"type": "number"},
            "items": {"type": "array", "items": {"type": "object", "properties": {
                "price": {"type": "string", "pattern": "^[0-9]+\\.[0-9]{2}$"}}}}}});
        let cases = [
            (json!({}), json!({})),
            (json!({"order_id": "8812", "amount": 49}), json!({})),
            (
                json!({"a\"b": "q\"u\\o\nte\t\u{1}\u{7f}", "é": "cafe\u{301}", "z": "日本 🎉"}),
                json!({}),
            ),
            (
                json!({"n": [0, -0.0, 1.50, 1e3, -12.340, 123456789012345678901234567890u128, 0.1]}),
                json!({}),
            ),
            (
                json!({"t": true, "f": false, "nil": null, "e": [], "o": {}}),
                json!({}),
            ),
            (
                json!({"amount": "20.00", "items": [{"price": "3.50", "name": "Cafe\u{301}"}]}),
                schema.clone(),
            ),
            (json!({"amount": 20, "items": [{"price": 3.5}]}), schema),
        ];
        let found: Vec<(String, String)> = cases
            .iter()
            .map(|(arguments, schema)| {
                let canonical_arguments = canonical_arguments(schema, arguments);
                (
                    canonical(&canonical_arguments),
                    fingerprint_for(schema, arguments).as_str().to_owned(),
                )
            })
            .collect();
        let stored = [
            (
                "{}",
                "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
            ),
            (
                "{\"amount\":49,\"order_id\":\"8812\"}",
                "d821341c5d707a43300df209da9a13fce95e090e46e8ae648a1bde1a7f3d673e",
            ),
            (
                "{\"a\\\"b\":\"q\\\"u\\\\o\\nte\\t\\u0001\u{7f}\",\"z\":\"日本 🎉\",\"é\":\"café\"}",
                "a60e0370c863d1c5b115593f50d6a22d63716fb07996d53c05acb4daface6e92",
            ),
            (
                "{\"n\":[0,0,1.5,1000,-12.34,123456789012345678901234567890,0.1]}",
                "6558eb2abf974202e197717d95ddae53b51c74bfeaf8f1cbfd8302d5fc25e815",
            ),
            (
                "{\"e\":[],\"f\":false,\"nil\":null,\"o\":{},\"t\":true}",
                "97afb26076ac57e14c57ea1e32550a6d4f6a336b3ff879f69b48cb44607e0665",
            ),
            (
                "{\"amount\":20,\"items\":[{\"name\":\"Café\",\"price\":3.5}]}",
                "a003f9b2a351e40c431fb1a2731e5e8137562f36ab22ab90a67cbd86cf332321",
            ),
            (
                "{\"amount\":20,\"items\":[{\"price\":3.5}]}",
                "b4d8cd96adab67149d956cacd634480c3a1291f8271152d4d69c4198a5087d05",
            ),
        ];
        let stored: Vec<(String, String)> = stored
            .iter()
            .map(|(text, digest)| (text.to_string(), digest.to_string()))
            .collect();
        assert_eq!(found, stored);
    }

    #[test]
    fn any_change_of_value_or_type_changes_the_fingerprint() {
        let base = fingerprint(&json!({"order_id": "8812", "amount": 49}));
        for other in [
            json!({"order_id": "8812", "amount": 50}),
            json!({"order_id": "8812", "amount": "49"}),
            json!({"order_id": "8813", "amount": 49}),
            json!({"order_id": "8812", "amount": 49, "reason": "x"}),
        ] {
            assert_ne!(fingerprint(&other), base, "{other}");
        }
    }

    fn fingerprint_of_amount(schema: Value, amount: Value) -> Fingerprint {
        let schema = json!({"type": "object", "properties": {"order_id": {"type": "string"}, "amount": schema}});
        fingerprint_for(&schema, &json!({"order_id": "8812", "amount": amount}))
    }

    #[test]
    fn an_amount_declared_as_number_or_string_is_one_value_however_written() {
        // Under LangGraph a model wrote 20.0, then "20.00": the key agreed, the fingerprint
        // did not, and the second call was a conflict.
        let either = json!({"type": ["string", "number"]});
        let first = fingerprint_of_amount(either.clone(), json!(20));
        for amount in [json!(20.0), json!("20.00"), json!("20"), json!("2e1")] {
            assert_eq!(
                fingerprint_of_amount(either.clone(), amount.clone()),
                first,
                "{amount}"
            );
        }
        assert_ne!(fingerprint_of_amount(either, json!("20.01")), first);
        // Pydantic's `Decimal`, and a string that says it is a decimal.
        let pydantic = json!({"anyOf": [{"type": "number"}, {"type": "string", "pattern": "^-?\\d*\\.?\\d*$"}]});
        assert_eq!(fingerprint_of_amount(pydantic, json!("20.00")), first);
        let pattern = json!({"type": "string", "pattern": "^[0-9]+(\\.[0-9]{1,2})?$"});
        assert_eq!(fingerprint_of_amount(pattern, json!("20.0")), first);
        let id_pattern = json!({"type": "string", "pattern": "^\\d+$"});
        assert_ne!(
            fingerprint_of_amount(id_pattern.clone(), json!("0012")),
            fingerprint_of_amount(id_pattern, json!("12"))
        );
        let format = json!({"type": "string", "format": "decimal"});
        assert_eq!(fingerprint_of_amount(format, json!("20.0")), first);
        // The fingerprint the ledger has always written for a plain number.
        assert_eq!(
            first,
            fingerprint(&json!({"order_id": "8812", "amount": 20}))
        );
    }

    #[test]
    fn a_string_declared_only_as_a_string_is_kept_as_written() {
        let text = json!({"type": "string"});
        assert_ne!(
            fingerprint_of_amount(text.clone(), json!("0012")),
            fingerprint_of_amount(text.clone(), json!("12"))
        );
        // Text that spells no number stays a string, even where a number is allowed.
        let either = json!({"type": ["string", "number"]});
        assert_ne!(
            fingerprint_of_amount(either.clone(), json!("twenty")),
            fingerprint_of_amount(either, json!(20))
        );
    }

    #[test]
    fn decimals_are_found_through_refs_arrays_and_nested_objects() {
        let schema = json!({
            "type": "object",
            "$defs": {"Line": {"type": "object", "properties": {"price": {"$ref": "#/$defs/Money"}}},
                      "Money": {"anyOf": [{"type": "number"}, {"type": "string"}]}},
            "properties": {"lines": {"type": "array", "items": {"$ref": "#/$defs/Line"}}}
        });
        assert_eq!(
            fingerprint_for(&schema, &json!({"lines": [{"price": "1.50"}]})),
            fingerprint_for(&schema, &json!({"lines": [{"price": 1.5}]}))
        );
        // A schema that refers to itself ends.
        let looping = json!({"type": "object", "$defs": {"A": {"anyOf": [{"$ref": "#/$defs/A"}]}},
                             "properties": {"a": {"$ref": "#/$defs/A"}}});
        fingerprint_for(&looping, &json!({"a": "1"}));
    }

    #[test]
    fn composed_and_decomposed_strings_have_one_fingerprint() {
        let schema = json!({"type": "object"});
        let composed = json!({"note": "caf\u{e9}", "tags": ["caf\u{e9}"]});
        let decomposed = json!({"note": "cafe\u{301}", "tags": ["cafe\u{301}"]});
        assert_eq!(
            fingerprint_for(&schema, &decomposed),
            fingerprint_for(&schema, &composed)
        );
        // Already in its one spelling: the fingerprint of old, and nothing copied.
        assert_eq!(fingerprint_for(&schema, &composed), fingerprint(&composed));
        assert!(matches!(
            canonical_arguments(&schema, &composed),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn a_conflict_names_the_fields_that_differ() {
        let stored = json!({"order_id": "8812", "amount": 49, "reason": "late", "meta": {"agent": "a", "n": 1}});
        let requested = json!({"order_id": "8812", "amount": 59.0, "meta": {"agent": "b", "n": 1.0}, "note": "x"});
        assert_eq!(
            differing_fields(&stored, &requested),
            ["amount", "meta.agent", "note", "reason"]
        );
        assert!(differing_fields(&stored, &stored).is_empty());
    }
}
