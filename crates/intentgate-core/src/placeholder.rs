//! The placeholder syntax that intent keys and request templates share.
//!
//! Literal text with placeholders `{name}`, `{a.b}` (a field of an object argument),
//! `{name:.N}` (an exact decimal with N places) or `{name:minor(USD)}` (an exact decimal in
//! a currency's minor units, as an integer: `49.00` USD is `4900`; the currency is an ISO
//! 4217 code, or the argument that holds one: `{amount:minor(currency)}`); `{{` and `}}` are
//! literal braces. An intent
//! key and the upstream request built for the same call read one argument the same way, so the
//! syntax is parsed here once, and a value becomes text here once: a string as written, a
//! number as its exact decimal (`49.0` and `49` alike, never a float's `0.30000000000000004`),
//! a boolean as `true` or `false`, and with a format the decimal with exactly N places or in
//! minor units, refused rather than rounded when it has more places than that.
//!
//! What a name means is the caller's: keys know `{intent_id}`, requests the gateway's own
//! values too. Where a rendered value goes, and how it is escaped there, is the caller's as
//! well.

use serde_json::Value;

use crate::currency::{self, CurrencyError, CurrencySource};
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
    /// Its format, if it has one.
    pub format: Option<Format>,
}

/// How a placeholder writes a decimal.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Format {
    /// `{name:.N}`: exactly N decimal places (`49.00`).
    Places(u32),
    /// `{name:minor(USD)}` or `{name:minor(currency)}`: an integer in the currency's minor
    /// units (`4900`).
    MinorUnits(CurrencySource),
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

/// What is between the braces: `name`, `a.b`, `name:.N` or `name:minor(CODE)`.
fn parse_placeholder(position: usize, inner: &str) -> Result<Placeholder, &'static str> {
    let (name, format) = match inner.split_once(':') {
        Some((name, format)) => (name.trim(), Some(format.trim())),
        None => (inner.trim(), None),
    };
    if name.is_empty() {
        return Err("empty placeholder");
    }
    const FORMATS: &str =
        "a format must look like `.2` (decimal places) or `minor(USD)` (minor units of a currency)";
    let format = match format {
        None => None,
        Some(format) => {
            if let Some(inside) = format
                .strip_prefix("minor(")
                .and_then(|rest| rest.strip_suffix(')'))
            {
                Some(Format::MinorUnits(CurrencySource::parse(inside)?))
            } else {
                let digits = format.strip_prefix('.').ok_or(FORMATS)?;
                let places: u32 = digits.parse().map_err(|_| FORMATS)?;
                if places > DECIMAL_PLACES_MAX {
                    return Err("too many decimal places (at most 18)");
                }
                Some(Format::Places(places))
            }
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
        format,
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
    /// Minor units: the currency is unknown or missing, or the amount has more places than
    /// the currency.
    Currency(CurrencyError),
    /// A null, an array or an object: no text stands for it.
    NoText(&'static str),
}

/// A value as a placeholder's text (see the module's introduction). `arguments` are the
/// call's, for a currency taken from an argument (`{amount:minor(currency)}`), read with
/// `steps` as the placeholder's own path is.
pub fn render_value(
    value: &Value,
    format: Option<&Format>,
    arguments: &Value,
    steps: Steps,
) -> Result<String, ValueError> {
    match format {
        Some(Format::Places(places)) => {
            return Decimal::format_json(value, *places).map_err(ValueError::Decimal);
        }
        Some(Format::MinorUnits(source)) => {
            let currency_value = source
                .argument()
                .and_then(|path| resolve(arguments, path, steps));
            let (code, exponent) = source
                .resolve(currency_value)
                .map_err(ValueError::Currency)?;
            return currency::to_minor_units(value, &code, exponent).map_err(ValueError::Currency);
        }
        None => {}
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

    fn placeholder(path: &[&str], position: usize, format: Option<Format>) -> Piece {
        Piece::Placeholder(Placeholder {
            position,
            path: path.iter().map(|segment| (*segment).to_owned()).collect(),
            format,
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
                placeholder(&["n"], 13, Some(Format::Places(2))),
            ]
        );
        assert_eq!(
            parse("{amount:minor(USD)}/{a:minor(price.currency)}").unwrap(),
            [
                placeholder(
                    &["amount"],
                    0,
                    Some(Format::MinorUnits(CurrencySource::Code {
                        code: "USD",
                        exponent: 2
                    }))
                ),
                Piece::Literal("/".into()),
                placeholder(
                    &["a"],
                    20,
                    Some(Format::MinorUnits(CurrencySource::Argument(vec![
                        "price".into(),
                        "currency".into()
                    ])))
                ),
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
            (
                "{a:2}",
                0,
                "a format must look like `.2` (decimal places) or `minor(USD)` (minor units of a currency)",
            ),
            (
                "{a:minor(XYZ)}",
                0,
                "minor units name an unknown ISO 4217 currency code; write a known code such as USD, EUR or JPY, or an argument that holds the code",
            ),
            (
                "{a:minor()}",
                0,
                "minor units take a currency: an ISO 4217 code such as USD, or the argument that holds one (letters, digits, `_`, `-`, and `.` for a nested field)",
            ),
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

    fn render(value: &Value, format: Option<&Format>) -> Result<String, ValueError> {
        render_value(value, format, &json!({}), Steps::FieldsOnly)
    }

    #[test]
    fn values_render_as_exact_text() {
        assert_eq!(render(&json!(12.50), None).unwrap(), "12.5");
        assert_eq!(render(&json!("12.50"), None).unwrap(), "12.50");
        assert_eq!(
            render(&json!(49), Some(&Format::Places(2))).unwrap(),
            "49.00"
        );
        assert_eq!(render(&json!(false), None).unwrap(), "false");
        assert!(matches!(
            render(&json!(1.005), Some(&Format::Places(2))),
            Err(ValueError::Decimal(_))
        ));
        assert_eq!(
            render(&Value::Null, None),
            Err(ValueError::NoText("it is null"))
        );
    }

    #[test]
    fn minor_units_take_the_currency_from_the_format_or_an_argument() {
        let usd = Format::MinorUnits(CurrencySource::parse("USD").unwrap());
        for amount in ["49", "49.0", "\"49.00\""] {
            let amount: Value = serde_json::from_str(amount).unwrap();
            assert_eq!(render(&amount, Some(&usd)).unwrap(), "4900", "{amount}");
        }
        assert!(matches!(
            render(&json!("49.001"), Some(&usd)),
            Err(ValueError::Currency(CurrencyError::TooManyPlaces { .. }))
        ));
        let from_argument = Format::MinorUnits(CurrencySource::parse("price.currency").unwrap());
        let minor = |currency: Value| {
            render_value(
                &json!(4900),
                Some(&from_argument),
                &json!({"price": {"currency": currency}}),
                Steps::FieldsOnly,
            )
        };
        assert_eq!(minor(json!("jpy")).unwrap(), "4900");
        assert_eq!(minor(json!("BHD")).unwrap(), "4900000");
        assert!(matches!(
            minor(json!("ZZZ")),
            Err(ValueError::Currency(CurrencyError::UnknownCode { .. }))
        ));
        assert!(matches!(
            render(&json!(1), Some(&from_argument)),
            Err(ValueError::Currency(CurrencyError::NoCurrency { .. }))
        ));
    }
}
