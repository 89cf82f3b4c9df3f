//! Exact numbers of any size, read from their text.
//!
//! A JSON number is decimal text, and the caller means exactly that text: `49.9999999999999999`
//! is not 50, and `100000.0000000000001` is above 100000. An `f64` can say neither, so numbers
//! are never read through one. [`ExactNumber`] holds any number as significant digits and a
//! power of ten, compares and tests divisibility without rounding, and has one canonical text
//! per value. Its work is linear in the written text, whatever the exponent says
//! (`1e-9223372036854775807` is 1 digit and an exponent, not a string of zeros).
//!
//! [`Decimal`](crate::Decimal) builds on it for values that keys and templates write out in
//! full, within bounds.

use std::cmp::Ordering;
use std::fmt;

use crate::limits::QUOTED_VALUE_LENGTH_MAX;

/// Most significant digits a `multipleOf` divisor may have: divisibility is decided with a
/// remainder below the divisor, and ten times that must fit in a `u128` (below 3.4 × 10^38).
/// Schemas use divisors such as `0.01` or `5`, with one or two digits.
pub const MULTIPLE_DIGITS_MAX: usize = 37;

/// Most digits of an exponent read as a number: an i128 holds 38. A longer exponent is at least
/// 10^38, which no shift by the digits of a text can bring back within an i64.
const EXPONENT_DIGITS_MAX: usize = 38;

/// Enough multiplications by ten to clear every factor 2 and 5 of a divisor below 10^37
/// (2^123 > 10^37): past that, more powers of ten can't change whether it divides.
const POWERS_OF_TEN_THAT_MATTER: i128 = 128;

/// A number, exactly: `(-1)^negative × digits × 10^exponent`. Normalised: `digits` has no
/// leading and no trailing zeros, so each value has one representation; zero has no digits,
/// exponent 0, and is never negative.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ExactNumber {
    negative: bool,
    /// ASCII digits, first and last non-zero; empty for zero.
    digits: String,
    exponent: i64,
}

/// Why text is not an exact number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NumberError {
    #[error(
        "`{0}` is not a number (expected digits with an optional sign, point and exponent, like 49.00 or 4.9e1)"
    )]
    Syntax(String),
    /// The exponent, once the point is moved, does not fit 64 bits: the magnitude is beyond
    /// 10^±9223372036854775807. `towards_zero` tells a tiny magnitude from a huge one.
    #[error("`{text}` has an exponent beyond ±9223372036854775807")]
    ExponentOutOfRange { text: String, towards_zero: bool },
}

impl ExactNumber {
    /// Reads a number: an optional sign, digits with an optional point (`49`, `49.00`, `.5`,
    /// `5.`), an optional exponent (`4.9e1`, `490E-1`). Whitespace around it is ignored
    /// (amounts sent as strings are often padded). JSON numbers are a subset of this.
    pub fn parse(text: &str) -> Result<ExactNumber, NumberError> {
        let syntax = || NumberError::Syntax(quote(text));
        let trimmed = text.trim();
        let (negative, unsigned) = match trimmed.as_bytes().first() {
            Some(b'-') => (true, &trimmed[1..]),
            Some(b'+') => (false, &trimmed[1..]),
            _ => (false, trimmed),
        };
        let (mantissa, exponent_text) = match unsigned.find(['e', 'E']) {
            Some(at) => (&unsigned[..at], Some(&unsigned[at + 1..])),
            None => (unsigned, None),
        };
        let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        if whole.is_empty() && fraction.is_empty() {
            return Err(syntax());
        }
        if !whole
            .bytes()
            .chain(fraction.bytes())
            .all(|byte| byte.is_ascii_digit())
        {
            return Err(syntax());
        }
        let all_zero = whole
            .bytes()
            .chain(fraction.bytes())
            .all(|byte| byte == b'0');
        let exponent: i128 = match exponent_text {
            None => 0,
            Some(exponent_text) => match parse_exponent(exponent_text).ok_or_else(syntax)? {
                Some(exponent) => exponent,
                // Zero times any power of ten is zero.
                None if all_zero => return Ok(ExactNumber::zero()),
                None => {
                    return Err(NumberError::ExponentOutOfRange {
                        text: quote(text),
                        towards_zero: exponent_text.starts_with('-'),
                    });
                }
            },
        };
        let all_digits: String = whole.chars().chain(fraction.chars()).collect();
        let significant = all_digits.trim_start_matches('0');
        let trimmed_digits = significant.trim_end_matches('0');
        if trimmed_digits.is_empty() {
            return Ok(ExactNumber::zero());
        }
        let trailing_zeros = significant.len() - trimmed_digits.len();
        // value = all_digits × 10^(exponent − fraction.len())
        //       = trimmed_digits × 10^(exponent − fraction.len() + trailing_zeros).
        // The exponent is below 10^38 and the lengths are bounded by the text, so i128 can't
        // overflow; whether the result fits i64 depends only on the value, not its spelling.
        let adjusted = exponent - fraction.len() as i128 + trailing_zeros as i128;
        let exponent = i64::try_from(adjusted).map_err(|_| NumberError::ExponentOutOfRange {
            text: quote(text),
            towards_zero: adjusted < 0,
        })?;
        Ok(ExactNumber {
            negative,
            digits: trimmed_digits.to_owned(),
            exponent,
        })
    }

    fn zero() -> ExactNumber {
        ExactNumber {
            negative: false,
            digits: String::new(),
            exponent: 0,
        }
    }

    pub fn is_zero(&self) -> bool {
        self.digits.is_empty()
    }

    pub fn is_negative(&self) -> bool {
        self.negative
    }

    /// The significant digits, without leading or trailing zeros (empty for zero).
    pub fn digits(&self) -> &str {
        &self.digits
    }

    /// The power of ten the digits are multiplied by.
    pub fn exponent(&self) -> i64 {
        self.exponent
    }

    /// True for whole numbers (`49`, `4.9e1`, `1e400`).
    pub fn is_integer(&self) -> bool {
        self.exponent >= 0
    }

    /// True when `self / divisor` is a whole number (JSON Schema's `multipleOf`). `None` when
    /// `divisor` is zero, negative or has more than [`MULTIPLE_DIGITS_MAX`] significant digits.
    pub fn is_multiple_of(&self, divisor: &ExactNumber) -> Option<bool> {
        if divisor.is_zero() || divisor.negative || divisor.digits.len() > MULTIPLE_DIGITS_MAX {
            return None;
        }
        if self.is_zero() {
            return Some(true);
        }
        let modulus: u128 = divisor
            .digits
            .parse()
            .expect("at most 37 digits fit a u128");
        // self / divisor = (a / b) × 10^shift with a, b the digit strings. For shift < 0 the
        // quotient needs `a` to end in a zero, which a normalised `a` never does.
        let shift = i128::from(self.exponent) - i128::from(divisor.exponent);
        if shift < 0 {
            return Some(false);
        }
        let mut remainder = self.digits.bytes().fold(0u128, |remainder, digit| {
            (remainder * 10 + u128::from(digit - b'0')) % modulus
        });
        for _ in 0..shift.min(POWERS_OF_TEN_THAT_MATTER) {
            if remainder == 0 {
                break;
            }
            remainder = remainder * 10 % modulus;
        }
        Some(remainder == 0)
    }

    /// How far left of the point the leading digit sits: `123` is 3, `0.05` is -1. Orders
    /// magnitudes; i128 because digits and exponent together may pass i64.
    fn leading_position(&self) -> i128 {
        self.digits.len() as i128 + i128::from(self.exponent)
    }
}

impl Ord for ExactNumber {
    fn cmp(&self, other: &ExactNumber) -> Ordering {
        let sign = |number: &ExactNumber| match (number.is_zero(), number.negative) {
            (true, _) => 0,
            (false, true) => -1,
            (false, false) => 1,
        };
        sign(self).cmp(&sign(other)).then_with(|| {
            // Same sign, both non-zero (or both zero, where the digits are equal): the leading
            // digit's position orders magnitudes, then the digits do, since neither has a
            // trailing zero that could make a prefix equal to a longer string.
            let magnitude = self
                .leading_position()
                .cmp(&other.leading_position())
                .then_with(|| self.digits.cmp(&other.digits));
            if self.negative {
                magnitude.reverse()
            } else {
                magnitude
            }
        })
    }
}

impl PartialOrd for ExactNumber {
    fn partial_cmp(&self, other: &ExactNumber) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for ExactNumber {
    /// The canonical text: `0`, or the digits and the exponent (`49e0`, `15e-1`, `1e400`). One
    /// text per value, and never a decimal point, so it can't be mistaken for a
    /// [`Decimal`](crate::Decimal)'s canonical text.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_zero() {
            return f.write_str("0");
        }
        let sign = if self.negative { "-" } else { "" };
        write!(f, "{sign}{}e{}", self.digits, self.exponent)
    }
}

/// An exponent's text (`5`, `+5`, `-05`): `None` when it is malformed, `Some(None)` when it is
/// well formed but has more than [`EXPONENT_DIGITS_MAX`] digits, so that a huge exponent is
/// told apart from a typo.
fn parse_exponent(text: &str) -> Option<Option<i128>> {
    let (negative, digits) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if digits.is_empty() || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    let magnitude = digits.trim_start_matches('0');
    if magnitude.len() > EXPONENT_DIGITS_MAX {
        return Some(None);
    }
    let magnitude: i128 = if magnitude.is_empty() {
        0
    } else {
        magnitude
            .parse()
            .expect("at most 38 ASCII digits fit an i128")
    };
    Some(Some(if negative { -magnitude } else { magnitude }))
}

/// `text` as an error message quotes it: at most [`QUOTED_VALUE_LENGTH_MAX`] characters (then
/// `…`), control characters escaped (`\n`), so a value can't add lines to a message or a log.
pub fn quote(text: &str) -> String {
    let mut quoted = String::new();
    for (count, c) in text.chars().enumerate() {
        if count == QUOTED_VALUE_LENGTH_MAX {
            quoted.push('…');
            break;
        }
        if c.is_control() {
            quoted.extend(c.escape_default());
        } else {
            quoted.push(c);
        }
    }
    quoted
}

#[cfg(test)]
mod tests {
    use super::*;

    fn number(text: &str) -> ExactNumber {
        ExactNumber::parse(text).unwrap()
    }

    #[test]
    fn one_value_has_one_representation() {
        for text in [
            "49", "49.0", "4.9e1", "490E-1", "0049.000", "+49", " 49 ", "0.49e+2",
        ] {
            assert_eq!(number(text).to_string(), "49e0", "{text}");
        }
        for text in [
            "0",
            "-0",
            "0.000",
            "0e99999999999999999999999",
            "-0.0e-5",
            ".0",
        ] {
            assert_eq!(number(text), number("0"), "{text}");
            assert!(!number(text).is_negative());
        }
        assert_eq!(
            number("1.5e-9223372036854775807").to_string(),
            "15e-9223372036854775808"
        );
        assert_eq!(number("-120").to_string(), "-12e1");
    }

    // Found by attack: `"1.5e-9223372036854775807"` made the old parser compute
    // `fraction.len() - exponent` in i64, which wrapped and then asked for a 2^63-character
    // string. Exponents now fit or are refused, never wrap.
    #[test]
    fn exponents_beyond_64_bits_are_refused_not_wrapped() {
        for (text, towards_zero) in [
            ("1.55e-9223372036854775807", true),
            ("1e-9223372036854775809", true),
            ("1e9223372036854775808", false),
            ("150e9223372036854775807", false),
            ("1e99999999999999999999999999999999", false),
        ] {
            assert_eq!(
                ExactNumber::parse(text),
                Err(NumberError::ExponentOutOfRange {
                    text: text.to_owned(),
                    towards_zero
                }),
                "{text}"
            );
        }
        assert_eq!(number("1e-9223372036854775808").exponent(), i64::MIN);
        assert_eq!(number("1e9223372036854775807").exponent(), i64::MAX);
    }

    #[test]
    fn malformed_text_is_refused() {
        for text in [
            "", "abc", "1.2.3", "--1", "1e", "1e+", "0x10", "1,5", ".", "e5", "1e5.0", "1 2",
            "NaN", "inf",
        ] {
            assert!(
                matches!(ExactNumber::parse(text), Err(NumberError::Syntax(_))),
                "{text}"
            );
        }
    }

    #[test]
    fn comparison_is_exact_at_every_magnitude() {
        let ascending = [
            "-1e400",
            "-100000.0000000000001",
            "-100000",
            "-0.5",
            "-1e-400",
            "0",
            "1.5e-9223372036854775807",
            "1e-400",
            "0.1",
            "49.9999999999999999",
            "50",
            "100000",
            "100000.0000000000001",
            "1e400",
        ];
        for (i, a) in ascending.iter().enumerate() {
            for (j, b) in ascending.iter().enumerate() {
                assert_eq!(number(a).cmp(&number(b)), i.cmp(&j), "{a} vs {b}");
            }
        }
        assert_eq!(number("49.00").cmp(&number("4.9e1")), Ordering::Equal);
    }

    #[test]
    fn multiple_of_is_exact() {
        let cents = number("0.01");
        for (text, expected) in [
            ("49.99", true),
            ("49.9999999999999999", false),
            ("50", true),
            ("0", true),
            ("-0.05", true),
            ("0.005", false),
            ("1e400", true),
            ("1.5e-9223372036854775807", false),
        ] {
            assert_eq!(
                number(text).is_multiple_of(&cents),
                Some(expected),
                "{text}"
            );
        }
        assert_eq!(number("1e400").is_multiple_of(&number("7")), Some(false));
        assert_eq!(number("7e400").is_multiple_of(&number("7")), Some(true));
        assert_eq!(number("1e400").is_multiple_of(&number("1024")), Some(true));
        assert_eq!(number("1").is_multiple_of(&number("0.3")), Some(false));
        assert_eq!(number("0.9").is_multiple_of(&number("0.3")), Some(true));
        assert_eq!(number("1").is_multiple_of(&number("0")), None);
        assert_eq!(number("1").is_multiple_of(&number(&"7".repeat(38))), None);
    }

    #[test]
    fn quotes_are_bounded_and_printable() {
        assert_eq!(quote("49.0049999999999999"), "49.0049999999999999");
        assert_eq!(quote("a\r\nb"), "a\\r\\nb");
        let long = "9".repeat(1000);
        let quoted = quote(&long);
        assert_eq!(quoted.chars().count(), QUOTED_VALUE_LENGTH_MAX + 1);
        assert!(quoted.ends_with('…'));
    }
}
