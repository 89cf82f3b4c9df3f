//! Exact decimals for intent keys, request templates and fingerprints.
//!
//! A key must not depend on how a number happened to be written: `49`, `49.0` and `"49.00"`
//! are one refund. Floats can't promise that (0.1 + 0.2), so values are read from their
//! decimal text (an [`ExactNumber`]) into digits and a scale, and formatted exactly. JSON
//! numbers arrive as the text the caller sent (serde_json's `arbitrary_precision`: this module
//! reads [`serde_json::Number::as_str`], which exists only with it), so `49.9999999999999999`
//! is never 50. A value with more places than a template declares is refused rather than
//! rounded: rounding would merge two different amounts into one intent. A value is a
//! `Decimal` only within [`DECIMAL_DIGITS_MAX`] digits and [`DECIMAL_SCALE_MAX`] places, so
//! writing one out is always short.
//!
//! Written here rather than taken from a decimal crate because the core owns this canonical
//! form: intent keys and fingerprints depend on its exact text, and a ledger holds them for
//! as long as its intents live, so no outside crate's release may change how a value is
//! written (its rounding, its scale, its exponent form) under a stored key.

use std::fmt;

use serde_json::Value;

use crate::limits::{DECIMAL_DIGITS_MAX, DECIMAL_PLACES_MAX, DECIMAL_SCALE_MAX};
use crate::number::{ExactNumber, NumberError, quote};

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

/// Why a value is not an exact decimal. Every message quotes the value as the caller sent it
/// (bounded, control characters escaped), never a rounded or normalised form of it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecimalError {
    #[error(
        "`{0}` is not a decimal number (expected digits with an optional sign and point, like 49.00)"
    )]
    Syntax(String),
    #[error("`{0}` has more than {DECIMAL_DIGITS_MAX} digits")]
    TooLong(String),
    #[error(
        "`{0}` is too close to zero: an exact decimal has at most {DECIMAL_SCALE_MAX} decimal places"
    )]
    TooPrecise(String),
    #[error("`{value}` has more than {places} decimal places; it is refused rather than rounded")]
    TooManyPlaces { value: String, places: u32 },
    #[error("a JSON {0} is not a number")]
    NotANumber(&'static str),
}

impl Decimal {
    /// Parses decimal text: `-12`, `49.00`, `.5`, `1e3`, `2.5E-2`.
    pub fn parse(text: &str) -> Result<Decimal, DecimalError> {
        let number = ExactNumber::parse(text).map_err(|error| match error {
            NumberError::Syntax(quoted) => DecimalError::Syntax(quoted),
            NumberError::ExponentOutOfRange {
                text,
                towards_zero: false,
            } => DecimalError::TooLong(text),
            NumberError::ExponentOutOfRange {
                text,
                towards_zero: true,
            } => DecimalError::TooPrecise(text),
        })?;
        Decimal::from_exact(&number).map_err(|error| match error {
            Bound::Digits => DecimalError::TooLong(quote(text)),
            Bound::Scale => DecimalError::TooPrecise(quote(text)),
        })
    }

    /// The decimal of an exact number, when it is within the bounds.
    fn from_exact(number: &ExactNumber) -> Result<Decimal, Bound> {
        if number.is_zero() {
            return Ok(Decimal {
                negative: false,
                digits: "0".to_owned(),
                scale: 0,
            });
        }
        let significant = number.digits();
        let exponent = number.exponent();
        if exponent >= 0 {
            // Both terms are far below u128's range: the digits are bounded by the text.
            if significant.len() as u128 + exponent as u128 > DECIMAL_DIGITS_MAX as u128 {
                return Err(Bound::Digits);
            }
            let mut digits = significant.to_owned();
            digits.extend(std::iter::repeat_n('0', exponent as usize));
            return Ok(Decimal {
                negative: number.is_negative(),
                digits,
                scale: 0,
            });
        }
        let scale = exponent.unsigned_abs();
        if scale > u64::from(DECIMAL_SCALE_MAX) {
            return Err(Bound::Scale);
        }
        if significant.len() > DECIMAL_DIGITS_MAX {
            return Err(Bound::Digits);
        }
        Ok(Decimal {
            negative: number.is_negative(),
            digits: significant.to_owned(),
            scale: u32::try_from(scale).expect("at most DECIMAL_SCALE_MAX"),
        })
    }

    /// Reads a JSON number, or a string holding one (amounts often travel as strings).
    pub fn from_json(value: &Value) -> Result<Decimal, DecimalError> {
        match value {
            Value::Number(number) => Decimal::parse(number.as_str()),
            Value::String(text) => Decimal::parse(text),
            Value::Null => Err(DecimalError::NotANumber("null")),
            Value::Bool(_) => Err(DecimalError::NotANumber("boolean")),
            Value::Array(_) => Err(DecimalError::NotANumber("array")),
            Value::Object(_) => Err(DecimalError::NotANumber("object")),
        }
    }

    /// Reads a JSON number or numeric string and formats it with exactly `places` places
    /// (`{amount:.2}`), refusing to drop a non-zero digit. Errors quote the value as sent:
    /// `49.0049999999999999`, not a shorter form of it.
    pub fn format_json(value: &Value, places: u32) -> Result<String, DecimalError> {
        Decimal::from_json(value)?
            .format_places(places)
            .map_err(|error| match (error, value) {
                (DecimalError::TooManyPlaces { places, .. }, Value::Number(number)) => {
                    DecimalError::TooManyPlaces {
                        value: quote(number.as_str()),
                        places,
                    }
                }
                (DecimalError::TooManyPlaces { places, .. }, Value::String(text)) => {
                    DecimalError::TooManyPlaces {
                        value: quote(text),
                        places,
                    }
                }
                (error, _) => error,
            })
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
}

impl Decimal {
    /// The value in whole units of `10^-places`, rounded up: `49.001` in cents is `4901`.
    /// A negative value is 0; `None` beyond what a `u64` holds. For counting against a limit,
    /// where rounding down could let an amount pass it.
    pub fn units_rounded_up(&self, places: u32) -> Option<u64> {
        if self.negative || self.digits == "0" {
            return Some(0);
        }
        if self.scale <= places {
            let mut digits = self.digits.clone();
            digits.extend(std::iter::repeat_n('0', (places - self.scale) as usize));
            return digits.parse().ok();
        }
        // Normalised, so the last digit is not zero: dropping any digit drops a non-zero one.
        let dropped = (self.scale - places) as usize;
        let kept = &self.digits[..self.digits.len().saturating_sub(dropped)];
        let whole: u64 = if kept.is_empty() {
            0
        } else {
            kept.parse().ok()?
        };
        whole.checked_add(1)
    }

    /// The decimal in minor units of a currency with `exponent` decimal places, as integer
    /// text (`49` with 2 places is `4900`, `-0.05` is `-5`), refusing a value with more places
    /// than that rather than rounding it.
    pub fn minor_units(&self, exponent: u32) -> Result<String, DecimalError> {
        if self.scale > exponent {
            return Err(DecimalError::TooManyPlaces {
                value: self.to_string(),
                places: exponent,
            });
        }
        if self.digits == "0" {
            return Ok("0".to_owned());
        }
        let mut text = String::with_capacity(self.digits.len() + exponent as usize + 1);
        if self.negative {
            text.push('-');
        }
        text.push_str(&self.digits);
        text.extend(std::iter::repeat_n('0', (exponent - self.scale) as usize));
        Ok(text)
    }

    /// The decimal that `self`, an amount in minor units of a currency with `exponent`
    /// decimal places, stands for: `4900` with 2 places is `49`. Exact; `None` only beyond
    /// the bounds of a `Decimal` (more than [`DECIMAL_SCALE_MAX`] places).
    pub fn from_minor_units(&self, exponent: u32) -> Option<Decimal> {
        if self.digits == "0" {
            return Some(self.clone());
        }
        let mut digits = self.digits.clone();
        let mut scale = self.scale.checked_add(exponent)?;
        // Normalised again: no trailing zeros after the point.
        while scale > 0 && digits.len() > 1 && digits.ends_with('0') {
            digits.pop();
            scale -= 1;
        }
        (scale <= DECIMAL_SCALE_MAX).then_some(Decimal {
            negative: self.negative,
            digits,
            scale,
        })
    }
}

/// Which bound an exact number is outside of.
enum Bound {
    Digits,
    Scale,
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

    // Found by attack: JSON numbers went through an f64, so `49.9999999999999999` under
    // `{amount:.2}` became 50.00 (a refund was executed) and the refusal of
    // `49.0049999999999999` quoted `49.005`, a value the caller never sent.
    #[test]
    fn json_numbers_are_read_from_their_text_and_quoted_as_sent() {
        let sent = |text: &str| -> Value { serde_json::from_str(text).unwrap() };
        assert_eq!(
            Decimal::format_json(&sent("49.9999999999999999"), 2),
            Err(DecimalError::TooManyPlaces {
                value: "49.9999999999999999".into(),
                places: 2
            })
        );
        let error = Decimal::format_json(&sent("49.0049999999999999"), 2).unwrap_err();
        assert_eq!(
            error.to_string(),
            "`49.0049999999999999` has more than 2 decimal places; it is refused rather than rounded"
        );
        assert_eq!(
            Decimal::format_json(&json!("49.00500"), 2),
            Err(DecimalError::TooManyPlaces {
                value: "49.00500".into(),
                places: 2
            })
        );
        assert_eq!(
            Decimal::format_json(&sent("12345678901234567890.10"), 2).unwrap(),
            "12345678901234567890.10"
        );
        assert_eq!(
            Decimal::parse("0.1000000000000000055511151231257827")
                .unwrap()
                .to_string(),
            "0.1000000000000000055511151231257827"
        );
    }

    #[test]
    fn bounds_depend_on_the_value_not_its_spelling() {
        for text in ["0e50", "0.0e41", "-0e-99999999999999999999"] {
            assert_eq!(canonical(text), "0", "{text}");
        }
        assert_eq!(canonical("0.0000000001e45"), format!("1{}", "0".repeat(35)));
        assert_eq!(
            canonical(&format!("1e{}", DECIMAL_DIGITS_MAX - 1)).len(),
            40
        );
        assert!(matches!(
            Decimal::parse("1e40"),
            Err(DecimalError::TooLong(_))
        ));
        assert!(matches!(
            Decimal::parse("100e38"),
            Err(DecimalError::TooLong(_))
        ));
        assert_eq!(canonical("1e-400"), format!("0.{}1", "0".repeat(399)));
        assert!(matches!(
            Decimal::parse("1e-401"),
            Err(DecimalError::TooPrecise(_))
        ));
        assert!(matches!(
            Decimal::parse("0.1e-400"),
            Err(DecimalError::TooPrecise(_))
        ));
    }

    #[test]
    fn minor_units_are_exact_both_ways() {
        let minor = |text: &str, exponent| Decimal::parse(text).unwrap().minor_units(exponent);
        assert_eq!(minor("49", 2).unwrap(), "4900");
        assert_eq!(minor("49.5", 2).unwrap(), "4950");
        assert_eq!(minor("4900", 0).unwrap(), "4900");
        assert_eq!(minor("1.234", 3).unwrap(), "1234");
        assert_eq!(minor("-0.05", 2).unwrap(), "-5");
        assert_eq!(minor("0", 3).unwrap(), "0");
        assert!(matches!(
            minor("49.001", 2),
            Err(DecimalError::TooManyPlaces { places: 2, .. })
        ));
        let major = |text: &str, exponent| {
            Decimal::parse(text)
                .unwrap()
                .from_minor_units(exponent)
                .unwrap()
                .to_string()
        };
        assert_eq!(major("4900", 2), "49");
        assert_eq!(major("4901", 2), "49.01");
        assert_eq!(major("4900", 0), "4900");
        assert_eq!(major("1234", 3), "1.234");
        assert_eq!(major("-5", 2), "-0.05");
        assert_eq!(major("0", 2), "0");
        assert_eq!(
            Decimal::parse("4900").unwrap().from_minor_units(2),
            Some(Decimal::parse("49.00").unwrap())
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
