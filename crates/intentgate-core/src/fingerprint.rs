//! Argument fingerprints: the same key with other arguments is a `conflict`, not a retry.
//!
//! The fingerprint is the SHA-256 of the arguments' canonical JSON: object members sorted
//! by name, no insignificant whitespace, and numbers written as exact normalised decimals
//! (so `49` and `49.0` are one value). Strings stay strings: `"49"` is not `49`. Numbers are
//! read from the text the caller sent, never through a float, so `49.9999999999999999` and
//! `50` differ; a number outside [`Decimal`]'s bounds (`1e400`) is written as its
//! [`ExactNumber`] canonical text, which has an exponent and so never equals a decimal's.

use std::fmt::Write as _;

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
    let mut canonical = String::new();
    write_canonical(&mut canonical, arguments);
    let digest = Sha256::digest(canonical.as_bytes());
    let mut hex = String::with_capacity(64);
    for byte in digest.iter() {
        write!(hex, "{byte:02x}").expect("writing to a String can't fail");
    }
    Fingerprint(hex)
}

/// Writes the canonical JSON of `value`.
pub fn write_canonical(out: &mut String, value: &Value) {
    match value {
        Value::Object(map) => {
            let mut names: Vec<&String> = map.keys().collect();
            names.sort();
            out.push('{');
            for (index, name) in names.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(name.clone()).to_string());
                out.push(':');
                write_canonical(out, &map[name]);
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
        Value::Number(number) => out.push_str(&canonical_number(number.as_str())),
        other => out.push_str(&other.to_string()),
    }
}

/// One text per numeric value: the [`Decimal`] form where it has one (as fingerprints have
/// always been written), else the [`ExactNumber`] form. Only text that is no number at all,
/// or whose exponent passes 64 bits (the gate refuses such arguments before fingerprinting),
/// is kept as it is.
fn canonical_number(text: &str) -> String {
    if let Ok(decimal) = Decimal::parse(text) {
        return decimal.to_string();
    }
    match ExactNumber::parse(text) {
        Ok(number) => number.to_string(),
        Err(_) => text.to_owned(),
    }
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
