//! The placeholder syntax that intent keys and request templates share.
//!
//! Literal text with placeholders `{name}`, `{a.b}` (a field of an object argument) or
//! `{name:.N}` (an exact decimal with N places); `{{` and `}}` are literal braces. An intent
//! key and the upstream request built for the same call read one argument the same way, so the
//! syntax is parsed here once, and a value becomes text here once: a string as written, a
//! number as its exact decimal (`49.0` and `49` alike, never a float's `0.30000000000000004`),
//! a boolean as `true` or `false`, and with a format the decimal with exactly N places,
//! refused rather than rounded.
//!
//! What a name means is the caller's: keys know `{intent_id}`, requests the gateway's own
//! values too. Where a rendered value goes, and how it is escaped there, is the caller's as
//! well.

use serde_json::Value;

use crate::decimal::{Decimal, DecimalError};
use crate::limits::DECIMAL_PLACES_MAX;

/// One piece of a parsed template, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Text kept as it is (braces already unescaped).
    Literal(String),
    Placeholder(Placeholder),
}

/// A placeholder as written: the argument path it names and its format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placeholder {
    /// Where its `{` stands in the template (a byte offset), for errors found later.
    pub position: usize,
    /// The name split at its dots: `["customer", "id"]` for `{customer.id}`.
    pub path: Vec<String>,
    /// The decimal places of a `{name:.N}` format.
    pub places: Option<u32>,
}

impl Placeholder {
    /// The dotted name, as written in the template.
    pub fn name(&self) -> String {
        self.path.join(".")
    }

    /// True when the placeholder is exactly `{name}`'s one-word name (a reserved value such
    /// as `{intent_id}`), with or without a format.
    pub fn is_named(&self, name: &str) -> bool {
        matches!(self.path.as_slice(), [only] if only == name)
    }
}

/// A malformed template: what is wrong, and at which byte offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyntaxError {
    pub position: usize,
    pub reason: &'static str,
}

/// Parses a template into its pieces. Checks syntax only: which names exist is the caller's
/// to say.
pub fn parse(template: &str) -> Result<Vec<Piece>, SyntaxError> {
    let syntax = |position, reason| SyntaxError { position, reason };
    let mut pieces = Vec::new();
    let mut literal = String::new();
    let mut chars = template.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        match c {
            '{' if chars.peek().map(|(_, c)| *c) == Some('{') => {
                chars.next();
                literal.push('{');
            }
            '}' if chars.peek().map(|(_, c)| *c) == Some('}') => {
                chars.next();
                literal.push('}');
            }
            '}' => return Err(syntax(at, "unmatched `}` (write `}}` for a literal brace)")),
            '{' => {
                let mut inner = String::new();
                loop {
                    match chars.next() {
                        Some((_, '}')) => break,
                        Some((_, '{')) => return Err(syntax(at, "`{` inside a placeholder")),
                        Some((_, c)) => inner.push(c),
                        None => return Err(syntax(at, "unclosed `{`")),
                    }
                }
                if !literal.is_empty() {
                    pieces.push(Piece::Literal(std::mem::take(&mut literal)));
                }
                let placeholder =
                    parse_placeholder(at, &inner).map_err(|reason| syntax(at, reason))?;
                pieces.push(Piece::Placeholder(placeholder));
            }
            c => literal.push(c),
        }
    }
    if !literal.is_empty() {
        pieces.push(Piece::Literal(literal));
    }
    Ok(pieces)
}

/// What is between the braces: `name`, `a.b` or `name:.N`.
fn parse_placeholder(position: usize, inner: &str) -> Result<Placeholder, &'static str> {
    let (name, format) = match inner.split_once(':') {
        Some((name, format)) => (name.trim(), Some(format.trim())),
        None => (inner.trim(), None),
    };
    if name.is_empty() {
        return Err("empty placeholder");
    }
    let places = match format {
        None => None,
        Some(format) => {
            let digits = format
                .strip_prefix('.')
                .ok_or("a format must look like `.2` (decimal places)")?;
            let places: u32 = digits
                .parse()
                .map_err(|_| "a format must look like `.2` (decimal places)")?;
            if places > DECIMAL_PLACES_MAX {
                return Err("too many decimal places (at most 18)");
            }
            Some(places)
        }
    };
    let path: Vec<String> = name.split('.').map(str::to_owned).collect();
    let valid = |segment: &String| {
        !segment.is_empty()
            && segment
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    };
    if !path.iter().all(valid) {
        return Err(
            "a placeholder names an argument: letters, digits, `_`, `-`, and `.` for a nested field",
        );
    }
    Ok(Placeholder {
        position,
        path,
        places,
    })
}

/// How a path steps into arrays: an intent key names object fields only; a request may also
/// take an array's element by its index (`{items.0}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Steps {
    FieldsOnly,
    FieldsAndIndexes,
}

/// The value `path` names in `arguments`, or `None` when the call does not have it.
pub fn resolve<'a>(arguments: &'a Value, path: &[String], steps: Steps) -> Option<&'a Value> {
    path.iter()
        .try_fold(arguments, |value, field| match (value, steps) {
            (Value::Object(members), _) => members.get(field),
            (Value::Array(items), Steps::FieldsAndIndexes) => field
                .parse::<usize>()
                .ok()
                .and_then(|index| items.get(index)),
            _ => None,
        })
}

/// Why a value can't be written as a placeholder's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValueError {
    /// Not a decimal, or one with more places than the format allows.
    Decimal(DecimalError),
    /// A null, an array or an object: no text stands for it.
    NoText(&'static str),
}

/// A value as a placeholder's text (see the module's introduction).
pub fn render_value(value: &Value, places: Option<u32>) -> Result<String, ValueError> {
    if let Some(places) = places {
        return Decimal::format_json(value, places).map_err(ValueError::Decimal);
    }
    match value {
        Value::String(text) => Ok(text.clone()),
        Value::Number(_) => Decimal::from_json(value)
            .map(|decimal| decimal.to_string())
            .map_err(ValueError::Decimal),
        Value::Bool(flag) => Ok(flag.to_string()),
        Value::Null => Err(ValueError::NoText("it is null")),
        Value::Array(_) | Value::Object(_) => Err(ValueError::NoText(
            "it is an array or object; use one of its fields, like {customer.id}",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn placeholder(path: &[&str], position: usize, places: Option<u32>) -> Piece {
        Piece::Placeholder(Placeholder {
            position,
            path: path.iter().map(|segment| (*segment).to_owned()).collect(),
            places,
        })
    }

    #[test]
    fn pieces_keep_literal_braces_and_placeholder_positions() {
        assert_eq!(
            parse("r:{a.b}:{{x}}{n:.2}").unwrap(),
            [
                Piece::Literal("r:".into()),
                placeholder(&["a", "b"], 2, None),
                Piece::Literal(":{x}".into()),
                placeholder(&["n"], 13, Some(2)),
            ]
        );
    }

    #[test]
    fn malformed_placeholders_name_the_reason_and_position() {
        for (template, position, reason) in [
            ("ab{c", 2, "unclosed `{`"),
            ("a}", 1, "unmatched `}` (write `}}` for a literal brace)"),
            ("{a{b}", 0, "`{` inside a placeholder"),
            ("x{ }", 1, "empty placeholder"),
            ("{a:2}", 0, "a format must look like `.2` (decimal places)"),
            ("{a:.19}", 0, "too many decimal places (at most 18)"),
            (
                "{a..b}",
                0,
                "a placeholder names an argument: letters, digits, `_`, `-`, and `.` for a nested field",
            ),
        ] {
            assert_eq!(
                parse(template),
                Err(SyntaxError { position, reason }),
                "{template}"
            );
        }
    }

    #[test]
    fn paths_step_into_arrays_only_when_asked() {
        let arguments = json!({"items": [{"id": 7}]});
        let path = ["items".to_owned(), "0".to_owned(), "id".to_owned()];
        assert_eq!(resolve(&arguments, &path, Steps::FieldsOnly), None);
        assert_eq!(
            resolve(&arguments, &path, Steps::FieldsAndIndexes),
            Some(&json!(7))
        );
    }

    #[test]
    fn values_render_as_exact_text() {
        assert_eq!(render_value(&json!(12.50), None).unwrap(), "12.5");
        assert_eq!(render_value(&json!("12.50"), None).unwrap(), "12.50");
        assert_eq!(render_value(&json!(49), Some(2)).unwrap(), "49.00");
        assert_eq!(render_value(&json!(false), None).unwrap(), "false");
        assert!(matches!(
            render_value(&json!(1.005), Some(2)),
            Err(ValueError::Decimal(_))
        ));
        assert_eq!(
            render_value(&Value::Null, None),
            Err(ValueError::NoText("it is null"))
        );
    }
}
