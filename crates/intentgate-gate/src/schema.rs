//! Input schemas: the validator every tool call's arguments go through first.
//!
//! [`validator`] is the one place a tool's input schema becomes a validator: the gate builds
//! one per tool, and the config check builds the same, so a schema the gate would refuse is
//! refused when the config loads. It differs from `jsonschema`'s defaults in two ways:
//!
//! - **`format` is asserted** (`email`, `date-time`, `uri`, `uuid`, `ipv4`, ...): a schema
//!   that says `format: email` gets an email address, never `""` or an address with a line
//!   break in it, whatever its draft says about formats being annotations.
//! - **Numeric bounds are exact.** `minimum`, `maximum`, `exclusiveMinimum`,
//!   `exclusiveMaximum` and `multipleOf` compare the text the caller sent as an
//!   [`ExactNumber`]: `100000.0000000000001` is above `maximum: 100000`, and
//!   `49.9999999999999999` is not a multiple of `0.01`. `jsonschema` compares fractional bounds
//!   through an `f64`, which rounds both of those onto the bound, so these keywords are
//!   replaced with exact ones. (`type: integer`, `enum` and `const` are exact already, through
//!   the `arbitrary-precision` feature of `jsonschema-value`.)
//!
//! Draft 4's boolean `exclusiveMinimum`/`exclusiveMaximum` modify `minimum`/`maximum` as that
//! draft says.
//!
//! The errors go back to the caller as `invalid_arguments`, and `jsonschema`'s messages quote
//! the value they judge (`"bob@@example.com" is not a "email"`). [`error_message`] and
//! [`unreadable_numbers`] show the value of a `sensitive` argument, or of anything holding
//! one, as [`SENSITIVE_PLACEHOLDER`]: the ledger keeps such a value only as a keyed hash,
//! and an answer, a log line or a model's context must not hold it either.

use intentgate_core::ExactNumber;
use intentgate_core::number::{MULTIPLE_DIGITS_MAX, quote};
use intentgate_core::sensitive::ArgumentPath;
use jsonschema::paths::Location;
use jsonschema::{Keyword, ValidationError, Validator};
use serde_json::{Map, Value};

/// Builds the validator of a tool's input schema: formats asserted, numeric bounds exact.
pub fn validator(schema: &Value) -> Result<Validator, ValidationError<'_>> {
    jsonschema::options()
        .should_validate_formats(true)
        .with_keyword("minimum", |parent, value, _| {
            bound(parent, value, Bound::Minimum)
        })
        .with_keyword("maximum", |parent, value, _| {
            bound(parent, value, Bound::Maximum)
        })
        .with_keyword("exclusiveMinimum", |parent, value, _| {
            bound(parent, value, Bound::ExclusiveMinimum)
        })
        .with_keyword("exclusiveMaximum", |parent, value, _| {
            bound(parent, value, Bound::ExclusiveMaximum)
        })
        .with_keyword("multipleOf", multiple_of)
        .build(schema)
}

/// What a `sensitive` argument's value is shown as in a validation error.
pub const SENSITIVE_PLACEHOLDER: &str = "<sensitive>";

/// A validation error as the caller reads it, `pointer: message` (the message alone at the
/// root), with the value of a `sensitive` argument never quoted: an error at, inside or
/// around one of `sensitive` shows the value it judges as [`SENSITIVE_PLACEHOLDER`].
pub fn error_message(error: &ValidationError<'_>, sensitive: &[ArgumentPath]) -> String {
    let pointer = error.instance_path().to_string();
    let message = if touches_sensitive(&pointer, sensitive) {
        let masked = error.masked_with(SENSITIVE_PLACEHOLDER).to_string();
        // The exact keywords' own messages (`custom` errors) quote the number they judge.
        match error.instance().as_ref() {
            Value::Number(number) => redact_number(&masked, number.as_str()),
            _ => masked,
        }
    } else {
        error.to_string()
    };
    if pointer.is_empty() {
        message
    } else {
        format!("{pointer}: {message}")
    }
}

/// True when the value at JSON pointer `pointer` is a sensitive argument, lies inside one or
/// holds one.
fn touches_sensitive(pointer: &str, sensitive: &[ArgumentPath]) -> bool {
    if sensitive.is_empty() {
        return false;
    }
    let segments: Vec<String> = pointer
        .split('/')
        .skip(1)
        .map(|token| token.replace("~1", "/").replace("~0", "~"))
        .collect();
    sensitive.iter().any(|path| path.overlaps(&segments))
}

/// `message` with the number `text` (as quoted, or whole) shown as the placeholder.
fn redact_number(message: &str, text: &str) -> String {
    let quoted = quote(text);
    if message.contains(&quoted) {
        return message.replacen(&quoted, SENSITIVE_PLACEHOLDER, 1);
    }
    message.replace(text, SENSITIVE_PLACEHOLDER)
}

/// Every number in `arguments` that is not an exact number at all (an exponent beyond 64
/// bits, such as `1e99999999999999999999`), as `pointer: reason`, whatever the schema says;
/// a number at or inside a `sensitive` argument is not quoted. Such a number has no canonical
/// form to fingerprint and no value to compare, so the gate refuses it as
/// `invalid_arguments` rather than guessing.
pub fn unreadable_numbers(arguments: &Value, sensitive: &[ArgumentPath]) -> Vec<String> {
    let mut errors = Vec::new();
    collect_unreadable(arguments, &mut Vec::new(), &mut errors);
    errors
        .into_iter()
        .map(|(pointer, text, message)| {
            let message = if touches_sensitive(&pointer, sensitive) {
                redact_number(&message, &text)
            } else {
                message
            };
            let at = if pointer.is_empty() { "/" } else { &pointer };
            format!("{at}: {message}")
        })
        .collect()
}

/// Collects `(pointer, number text, reason)` of every unreadable number. `path` is where
/// `value` sits, written out as a JSON pointer only for a number found unreadable.
fn collect_unreadable<'v>(
    value: &'v Value,
    path: &mut Vec<Step<'v>>,
    errors: &mut Vec<(String, String, String)>,
) {
    match value {
        Value::Number(number) => {
            if let Err(error) = ExactNumber::parse(number.as_str()) {
                errors.push((pointer(path), number.as_str().to_owned(), error.to_string()));
            }
        }
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                path.push(Step::Index(index));
                collect_unreadable(item, path, errors);
                path.pop();
            }
        }
        Value::Object(members) => {
            for (key, member) in members {
                path.push(Step::Member(key));
                collect_unreadable(member, path, errors);
                path.pop();
            }
        }
        Value::Null | Value::Bool(_) | Value::String(_) => {}
    }
}

/// One step down into a JSON value.
enum Step<'v> {
    Member(&'v str),
    Index(usize),
}

/// `path` as a JSON pointer (RFC 6901: `~` written `~0`, `/` written `~1`).
fn pointer(path: &[Step<'_>]) -> String {
    let mut pointer = String::new();
    for step in path {
        pointer.push('/');
        match step {
            Step::Member(key) => pointer.push_str(&key.replace('~', "~0").replace('/', "~1")),
            Step::Index(index) => pointer.push_str(&index.to_string()),
        }
    }
    pointer
}

/// Which numeric bound a keyword sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bound {
    Minimum,
    Maximum,
    ExclusiveMinimum,
    ExclusiveMaximum,
}

impl Bound {
    fn keyword(self) -> &'static str {
        match self {
            Bound::Minimum => "minimum",
            Bound::Maximum => "maximum",
            Bound::ExclusiveMinimum => "exclusiveMinimum",
            Bound::ExclusiveMaximum => "exclusiveMaximum",
        }
    }
}

/// A compiled bound: the instance must be above (or below) `limit`, or equal when not strict.
struct ExactBound {
    limit: ExactNumber,
    /// The limit as written in the schema, for messages.
    limit_text: String,
    below: bool,
    strict: bool,
}

/// A keyword that checks nothing: draft 4's boolean `exclusiveMinimum`/`exclusiveMaximum`,
/// which [`bound`] reads beside `minimum`/`maximum`.
struct NoCheck;

fn bound<'a>(
    parent: &'a Map<String, Value>,
    value: &'a Value,
    bound: Bound,
) -> Result<Box<dyn for<'i> Keyword<'i>>, ValidationError<'a>> {
    let limit_text = match value {
        Value::Number(number) => number.as_str(),
        // Draft 4: `exclusiveMaximum: true` makes `maximum` strict; `maximum` reads it.
        Value::Bool(_) if matches!(bound, Bound::ExclusiveMinimum | Bound::ExclusiveMaximum) => {
            return Ok(Box::new(NoCheck));
        }
        _ => {
            return Err(ValidationError::schema(format!(
                "`{}` must be a number",
                bound.keyword()
            )));
        }
    };
    let limit = ExactNumber::parse(limit_text)
        .map_err(|error| ValidationError::schema(format!("`{}`: {error}", bound.keyword())))?;
    let draft4_strict = |modifier: &str| parent.get(modifier) == Some(&Value::Bool(true));
    let (below, strict) = match bound {
        Bound::Minimum => (false, draft4_strict("exclusiveMinimum")),
        Bound::Maximum => (true, draft4_strict("exclusiveMaximum")),
        Bound::ExclusiveMinimum => (false, true),
        Bound::ExclusiveMaximum => (true, true),
    };
    Ok(Box::new(ExactBound {
        limit,
        limit_text: limit_text.to_owned(),
        below,
        strict,
    }))
}

/// `None` for an instance that is not a number (another keyword's business), else the number
/// read exactly, or why it can't be.
fn exact_instance(instance: &Value) -> Option<Result<ExactNumber, String>> {
    let Value::Number(number) = instance else {
        return None;
    };
    Some(ExactNumber::parse(number.as_str()).map_err(|error| error.to_string()))
}

impl ExactBound {
    /// `None` for an instance that is not a number (another keyword's business), else whether
    /// it is within the bound, or why it can't be compared.
    fn check(&self, instance: &Value) -> Option<Result<bool, String>> {
        let value = exact_instance(instance)?;
        Some(value.map(|value| {
            let ordering = value.cmp(&self.limit);
            match (self.below, self.strict) {
                (true, false) => ordering.is_le(),
                (true, true) => ordering.is_lt(),
                (false, false) => ordering.is_ge(),
                (false, true) => ordering.is_gt(),
            }
        }))
    }

    fn message(&self, instance: &Value) -> String {
        let sent = match instance {
            Value::Number(number) => quote(number.as_str()),
            other => other.to_string(),
        };
        let relation = match (self.below, self.strict) {
            (true, false) => "greater than the maximum of",
            (true, true) => "greater than or equal to the exclusive maximum of",
            (false, false) => "less than the minimum of",
            (false, true) => "less than or equal to the exclusive minimum of",
        };
        format!("{sent} is {relation} {}", self.limit_text)
    }
}

impl<'i> Keyword<'i> for ExactBound {
    fn validate(&self, instance: &'i Value) -> Result<(), ValidationError<'i>> {
        match self.check(instance) {
            None | Some(Ok(true)) => Ok(()),
            Some(Ok(false)) => Err(ValidationError::custom(self.message(instance))),
            Some(Err(reason)) => Err(ValidationError::custom(reason)),
        }
    }

    fn is_valid(&self, instance: &'i Value) -> bool {
        matches!(self.check(instance), None | Some(Ok(true)))
    }
}

impl<'i> Keyword<'i> for NoCheck {
    fn validate(&self, _instance: &'i Value) -> Result<(), ValidationError<'i>> {
        Ok(())
    }

    fn is_valid(&self, _instance: &'i Value) -> bool {
        true
    }
}

/// A compiled `multipleOf`.
struct ExactMultipleOf {
    divisor: ExactNumber,
    divisor_text: String,
}

fn multiple_of<'a>(
    _parent: &'a Map<String, Value>,
    value: &'a Value,
    _location: Location,
) -> Result<Box<dyn for<'i> Keyword<'i>>, ValidationError<'a>> {
    let Value::Number(number) = value else {
        return Err(ValidationError::schema("`multipleOf` must be a number"));
    };
    let divisor = ExactNumber::parse(number.as_str())
        .map_err(|error| ValidationError::schema(format!("`multipleOf`: {error}")))?;
    if divisor.is_zero() || divisor.is_negative() {
        return Err(ValidationError::schema(
            "`multipleOf` must be greater than 0",
        ));
    }
    if divisor.digits().len() > MULTIPLE_DIGITS_MAX {
        return Err(ValidationError::schema(format!(
            "`multipleOf` may have at most {MULTIPLE_DIGITS_MAX} significant digits, like 0.01"
        )));
    }
    Ok(Box::new(ExactMultipleOf {
        divisor,
        divisor_text: number.as_str().to_owned(),
    }))
}

impl ExactMultipleOf {
    fn check(&self, instance: &Value) -> Option<Result<bool, String>> {
        let value = exact_instance(instance)?;
        Some(value.map(|value| {
            value
                .is_multiple_of(&self.divisor)
                .expect("the divisor was checked when the schema was compiled")
        }))
    }
}

impl<'i> Keyword<'i> for ExactMultipleOf {
    fn validate(&self, instance: &'i Value) -> Result<(), ValidationError<'i>> {
        match self.check(instance) {
            None | Some(Ok(true)) => Ok(()),
            Some(Ok(false)) => {
                let Value::Number(number) = instance else {
                    unreachable!("check answers Some only for numbers")
                };
                Err(ValidationError::custom(format!(
                    "{} is not a multiple of {}",
                    quote(number.as_str()),
                    self.divisor_text
                )))
            }
            Some(Err(reason)) => Err(ValidationError::custom(reason)),
        }
    }

    fn is_valid(&self, instance: &'i Value) -> bool {
        matches!(self.check(instance), None | Some(Ok(true)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Parses `text` as the server does, keeping every number's text.
    fn arguments(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    fn errors(schema: &Value, instance: &Value) -> Vec<String> {
        validator(schema)
            .unwrap()
            .iter_errors(instance)
            .map(|error| error.to_string())
            .collect()
    }

    // Found by attack: `100000.0000000000001` passed `maximum: 100000`, and
    // `49.9999999999999999` passed `multipleOf: 0.01`, because both were compared as the f64
    // they round to.
    #[test]
    fn bounds_and_multiples_compare_the_text_exactly() {
        let schema = json!({"type": "object", "properties": {"amount": {
            "type": "number", "exclusiveMinimum": 0, "maximum": 100000, "multipleOf": 0.01
        }}});
        for (text, expected) in [
            (
                r#"{"amount": 100000.0000000000001}"#,
                vec![
                    "100000.0000000000001 is greater than the maximum of 100000",
                    "100000.0000000000001 is not a multiple of 0.01",
                ],
            ),
            (
                r#"{"amount": 49.9999999999999999}"#,
                vec!["49.9999999999999999 is not a multiple of 0.01"],
            ),
            (
                r#"{"amount": 1.5e-9223372036854775807}"#,
                vec!["1.5e-9223372036854775807 is not a multiple of 0.01"],
            ),
            (
                r#"{"amount": 0}"#,
                vec!["0 is less than or equal to the exclusive minimum of 0"],
            ),
            (r#"{"amount": 100000}"#, vec![]),
            (r#"{"amount": 100000.000}"#, vec![]),
            (r#"{"amount": 49.99}"#, vec![]),
            (r#"{"amount": 0.01}"#, vec![]),
        ] {
            let instance = arguments(text);
            assert_eq!(errors(&schema, &instance), expected, "{text}");
            assert_eq!(
                validator(&schema).unwrap().is_valid(&instance),
                expected.is_empty(),
                "{text}"
            );
        }
    }

    #[test]
    fn fractional_bounds_are_exact_too() {
        let schema = json!({"minimum": 0.1, "exclusiveMaximum": 99.99});
        for (text, valid) in [
            ("0.1", true),
            ("0.0999999999999999999", false),
            ("99.9899999999999999", true),
            ("99.99", false),
            ("99.9900000000000001", false),
            ("1e-400", false),
            ("1e400", false),
        ] {
            assert_eq!(
                validator(&schema).unwrap().is_valid(&arguments(text)),
                valid,
                "{text}"
            );
        }
    }

    #[test]
    fn draft4_boolean_exclusive_bounds_make_the_bound_strict() {
        let schema = json!({
            "$schema": "http://json-schema.org/draft-04/schema#",
            "maximum": 10, "exclusiveMaximum": true, "minimum": 0
        });
        let validator = validator(&schema).unwrap();
        assert!(!validator.is_valid(&arguments("10")));
        assert!(validator.is_valid(&arguments("9.9999999999999999999")));
        assert!(validator.is_valid(&arguments("0")));
    }

    #[test]
    fn numbers_beyond_any_exponent_are_refused_not_misread() {
        let schema = json!({"maximum": 100000});
        let errors = errors(&schema, &arguments("1e99999999999999999999"));
        assert_eq!(errors.len(), 1);
        assert!(errors[0].contains("exponent"), "{errors:?}");
    }

    #[test]
    fn numbers_beyond_64_bit_exponents_are_found_wherever_they_are() {
        let arguments = arguments(
            r#"{"amount": 1e5, "meta": {"a/b": [1, 1e-99999999999999999999]}, "n": 1E99999999999999999999}"#,
        );
        assert_eq!(
            unreadable_numbers(&arguments, &[]),
            [
                "/meta/a~1b/1: `1e-99999999999999999999` has an exponent beyond ±9223372036854775807",
                // serde_json keeps the digits as sent and writes the exponent as `e+`.
                "/n: `1e+99999999999999999999` has an exponent beyond ±9223372036854775807",
            ]
        );
        assert!(unreadable_numbers(&json!({"amount": 49.5, "zero": 0}), &[]).is_empty());
    }

    fn path(segments: &[&str]) -> ArgumentPath {
        ArgumentPath::new(segments.iter().map(|segment| segment.to_string()).collect())
    }

    /// Regression: an `invalid_arguments` answer quoted a sensitive value back to the caller
    /// (`"bob@@example.com" is not a "email"`).
    #[test]
    fn errors_never_quote_a_sensitive_value() {
        let schema = json!({
            "type": "object",
            "properties": {
                "customer": {
                    "type": "object",
                    "properties": {"email": {"type": "string", "format": "email"}},
                },
                "pin": {"type": "number", "maximum": 9999},
                "note": {"type": "string", "format": "email"},
            },
        });
        let sensitive = [path(&["customer", "email"]), path(&["pin"])];
        let messages = |instance: &Value| -> Vec<String> {
            validator(&schema)
                .unwrap()
                .iter_errors(instance)
                .map(|error| error_message(&error, &sensitive))
                .collect()
        };
        let sent = arguments(
            r#"{"customer": {"email": "bob@@example.com"}, "pin": 123456, "note": "not-mail"}"#,
        );
        let mut said = messages(&sent);
        said.sort();
        assert_eq!(
            said,
            [
                r#"/customer/email: <sensitive> is not a "email""#,
                r#"/note: "not-mail" is not a "email""#,
                "/pin: <sensitive> is greater than the maximum of 9999",
            ]
        );
        // An error about the object that holds a sensitive value masks the object.
        let around = messages(&json!({"customer": ["bob@@example.com"]}));
        assert_eq!(
            around,
            [r#"/customer: <sensitive> is not of type "object""#]
        );
        let mut unreadable = unreadable_numbers(
            &arguments(r#"{"pin": 1e99999999999999999999, "n": 1e99999999999999999999}"#),
            &sensitive,
        );
        unreadable.sort();
        assert_eq!(
            unreadable,
            [
                "/n: `1e+99999999999999999999` has an exponent beyond ±9223372036854775807",
                "/pin: `<sensitive>` has an exponent beyond ±9223372036854775807",
            ]
        );
    }

    #[test]
    fn bad_numeric_keywords_are_refused_when_the_schema_is_built() {
        for schema in [
            json!({"multipleOf": 0}),
            json!({"multipleOf": -1}),
            json!({"multipleOf": "0.01"}),
            json!({"multipleOf": format!("0.{}", "1".repeat(38)).parse::<serde_json::Number>().unwrap()}),
            json!({"maximum": "10"}),
        ] {
            assert!(validator(&schema).is_err(), "{schema}");
        }
    }

    // Found by attack: `format: email` was an annotation only, so "not-an-email", "" and an
    // address followed by a CRLF and a Bcc header all passed validation.
    #[test]
    fn formats_are_asserted() {
        let schema = json!({"type": "object", "properties": {
            "email": {"type": "string", "format": "email"},
            "at": {"type": "string", "format": "date-time"},
            "id": {"type": "string", "format": "uuid"},
            "site": {"type": "string", "format": "uri"},
        }});
        let validator = validator(&schema).unwrap();
        for email in [
            "not-an-email",
            "",
            "a@example.com\r\nBcc: x@evil.com",
            "a@example.com\n",
        ] {
            assert!(
                !validator.is_valid(&json!({ "email": email })),
                "{email:?} passed as an email"
            );
        }
        assert!(validator.is_valid(&json!({
            "email": "smoke+refund@example.com",
            "at": "2026-03-01T12:00:00Z",
            "id": "7c9e6679-7425-40de-944b-e07fc1f90ae7",
            "site": "https://example.com/a?b=c",
        })));
        for invalid in [
            json!({"at": "yesterday"}),
            json!({"id": "not-a-uuid"}),
            json!({"site": "no scheme"}),
        ] {
            assert!(!validator.is_valid(&invalid), "{invalid}");
        }
    }
}
