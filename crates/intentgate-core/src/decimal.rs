//! Exact decimals for intent keys and fingerprints.
//!
//! A key must not depend on how a number happened to be written: `49`, `49.0` and `"49.00"`
//! are one refund. Floats can't promise that (0.1 + 0.2), so values are parsed from their
//! decimal text into digits and a scale, and formatted exactly. A value with more places
//! than a template declares is refused rather than rounded: rounding would merge two
//! different amounts into one intent.

use std::fmt;

use crate::limits::{DECIMAL_DIGITS_MAX, DECIMAL_PLACES_MAX};

/// An exact decimal: `digits × 10^-scale`, with a sign. Always normalised: no leading zeros
/// in `digits` and no trailing zeros after the decimal point (`scale` is as small as it can
/// be), and zero is never negative.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Decimal {
    negative: bool,
    /// Significant digits, ASCII, without leading zeros; `"0"` for zero.
    digits: String,
    /// How many of `digits` are after the decimal point.
    scale: u32,
}

/// Why a value is not an exact decimal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecimalError {
    #[error(
        "`{0}` is not a decimal number (expected digits with an optional sign and point, like 49.00)"
    )]
    Syntax(String),
    #[error("`{0}` has more than {DECIMAL_DIGITS_MAX} significant digits")]
    TooLong(String),
    #[error("{value} has more than {places} decimal places; the key would have to round it")]
    TooManyPlaces { value: String, places: u32 },
    #[error("a JSON {0} is not a number")]
    NotANumber(&'static str),
}

impl Decimal {
    /// Parses decimal text: `-12`, `49.00`, `.5`, `1e3`, `2.5E-2`.
    pub fn parse(text: &str) -> Result<Decimal, DecimalError> {
        let syntax = || DecimalError::Syntax(text.to_owned());
        let trimmed = text.trim();
        let (negative, unsigned) = match trimmed.as_bytes().first() {
            Some(b'-') => (true, &trimmed[1..]),
            Some(b'+') => (false, &trimmed[1..]),
            _ => (false, trimmed),
        };
        let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
            Some(at) => {
                let exponent: i64 = unsigned[at + 1..].parse().map_err(|_| syntax())?;
                (&unsigned[..at], exponent)
            }
            None => (unsigned, 0),
        };
        let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        if whole.is_empty() && fraction.is_empty() {
            return Err(syntax());
        }
        if !whole
            .bytes()
            .chain(fraction.bytes())
            .all(|b| b.is_ascii_digit())
        {
            return Err(syntax());
        }
        let mut digits: String = whole.chars().chain(fraction.chars()).collect();
        let mut scale = fraction.len() as i64 - exponent;
        if scale < 0 {
            if -scale > DECIMAL_DIGITS_MAX as i64 {
                return Err(DecimalError::TooLong(text.to_owned()));
            }
            digits.extend(std::iter::repeat_n('0', (-scale) as usize));
            scale = 0;
        }
        let mut decimal = Decimal {
            negative,
            digits,
            scale: 0,
        };
        decimal.scale = u32::try_from(scale).map_err(|_| DecimalError::TooLong(text.to_owned()))?;
        decimal.normalise();
        if decimal.digits.len() > DECIMAL_DIGITS_MAX {
            return Err(DecimalError::TooLong(text.to_owned()));
        }
        Ok(decimal)
    }

    /// Reads a JSON number, or a string holding one (amounts often travel as strings).
    pub fn from_json(value: &serde_json::Value) -> Result<Decimal, DecimalError> {
        match value {
            serde_json::Value::Number(number) => Decimal::parse(&number.to_string()),
            serde_json::Value::String(text) => Decimal::parse(text),
            serde_json::Value::Null => Err(DecimalError::NotANumber("null")),
            serde_json::Value::Bool(_) => Err(DecimalError::NotANumber("boolean")),
            serde_json::Value::Array(_) => Err(DecimalError::NotANumber("array")),
            serde_json::Value::Object(_) => Err(DecimalError::NotANumber("object")),
        }
    }

    /// Formats with exactly `places` decimal places, refusing to drop a non-zero digit.
    pub fn format_places(&self, places: u32) -> Result<String, DecimalError> {
        assert!(
            places <= DECIMAL_PLACES_MAX,
            "places checked when the template was parsed"
        );
        if self.scale > places {
            return Err(DecimalError::TooManyPlaces {
                value: self.to_string(),
                places,
            });
        }
        let mut digits = self.digits.clone();
        digits.extend(std::iter::repeat_n('0', (places - self.scale) as usize));
        Ok(render(self.negative, &digits, places))
    }

    fn normalise(&mut self) {
        while self.scale > 0 && self.digits.ends_with('0') {
            self.digits.pop();
            self.scale -= 1;
        }
        let significant = self.digits.trim_start_matches('0');
        if significant.is_empty() {
            *self = Decimal {
                negative: false,
                digits: "0".to_owned(),
                scale: 0,
            };
        } else {
            self.digits = significant.to_owned();
        }
    }
}

/// Places the decimal point `scale` digits from the right, padding with zeros.
fn render(negative: bool, digits: &str, scale: u32) -> String {
    let scale = scale as usize;
    let padded = if digits.len() <= scale {
        format!("{digits:0>width$}", width = scale + 1)
    } else {
        digits.to_owned()
    };
    let (whole, fraction) = padded.split_at(padded.len() - scale);
    let sign = if negative { "-" } else { "" };
    if fraction.is_empty() {
        format!("{sign}{whole}")
    } else {
        format!("{sign}{whole}.{fraction}")
    }
}

impl fmt::Display for Decimal {
    /// The canonical form: shortest exact text (`49`, `0.5`, `-12.25`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&render(self.negative, &self.digits, self.scale))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn canonical(text: &str) -> String {
        Decimal::parse(text).unwrap().to_string()
    }

    #[test]
    fn equal_values_written_differently_are_one_decimal() {
        for text in ["49", "49.0", "49.00", "+49", "4.9e1", "490E-1", "049.000"] {
            assert_eq!(canonical(text), "49", "{text}");
        }
        assert_eq!(canonical("0.50"), "0.5");
        assert_eq!(canonical(".05"), "0.05");
        assert_eq!(canonical("-0.00"), "0");
        assert_eq!(canonical("-12.250"), "-12.25");
        assert_eq!(canonical("1e3"), "1000");
    }

    #[test]
    fn json_numbers_and_strings_format_to_the_same_places() {
        for value in [json!(49), json!(49.0), json!("49.00"), json!("49")] {
            let decimal = Decimal::from_json(&value).unwrap();
            assert_eq!(decimal.format_places(2).unwrap(), "49.00", "{value}");
        }
        assert_eq!(
            Decimal::from_json(&json!(0.1))
                .unwrap()
                .format_places(2)
                .unwrap(),
            "0.10"
        );
        assert_eq!(
            Decimal::from_json(&json!(-3))
                .unwrap()
                .format_places(0)
                .unwrap(),
            "-3"
        );
        assert_eq!(
            Decimal::from_json(&json!(0.05))
                .unwrap()
                .format_places(4)
                .unwrap(),
            "0.0500"
        );
    }

    #[test]
    fn extra_places_are_refused_not_rounded() {
        let error = Decimal::parse("49.005")
            .unwrap()
            .format_places(2)
            .unwrap_err();
        assert_eq!(
            error,
            DecimalError::TooManyPlaces {
                value: "49.005".into(),
                places: 2
            }
        );
        assert!(error.to_string().contains("round"));
        // Trailing zeros are not extra places.
        assert_eq!(
            Decimal::parse("49.0000").unwrap().format_places(2).unwrap(),
            "49.00"
        );
    }

    #[test]
    fn malformed_values_are_refused_with_the_reason() {
        for text in ["", "abc", "1.2.3", "--1", "1e", "0x10", "1,5", "."] {
            assert!(
                matches!(Decimal::parse(text), Err(DecimalError::Syntax(_))),
                "{text}"
            );
        }
        assert!(matches!(
            Decimal::from_json(&json!(true)),
            Err(DecimalError::NotANumber("boolean"))
        ));
        assert!(matches!(
            Decimal::parse("1e400"),
            Err(DecimalError::TooLong(_))
        ));
        assert!(matches!(
            Decimal::parse(&"9".repeat(41)),
            Err(DecimalError::TooLong(_))
        ));
    }
}
