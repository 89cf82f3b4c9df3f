//! ISO 4217 currencies and their minor units, for amounts a provider takes as integers.
//!
//! Stripe and most card APIs take `amount=4900` for 49.00 USD and `amount=4900` for 4,900
//! JPY: the amount in the currency's smallest unit. How many decimal places a currency has
//! (its exponent) is ISO 4217's, and an amount with more places than that can't be sent
//! without rounding, which would merge two different amounts into one; it is refused.
//!
//! The table is the set of known codes: every active ISO 4217 code (fund codes included),
//! each with its exponent. A code outside it is refused rather than given a guessed
//! exponent. Where the currency comes from (a code in the config, or an argument of the
//! call) is a [`CurrencySource`].

use std::fmt;

use serde_json::Value;

use crate::decimal::{Decimal, DecimalError};
use crate::number::quote;

/// Codes whose minor unit is the unit itself (no decimal places).
const EXPONENT_0: &[&str] = &[
    "BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG", "RWF", "UGX", "UYI", "VND",
    "VUV", "XAF", "XOF", "XPF",
];

/// Codes with three decimal places.
const EXPONENT_3: &[&str] = &["BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"];

/// Codes with four decimal places (units of account).
const EXPONENT_4: &[&str] = &["CLF", "UYW"];

/// Every other active code: two decimal places.
const EXPONENT_2: &[&str] = &[
    "AED", "AFN", "ALL", "AMD", "AOA", "ARS", "AUD", "AWG", "AZN", "BAM", "BBD", "BDT", "BGN",
    "BMD", "BND", "BOB", "BOV", "BRL", "BSD", "BTN", "BWP", "BYN", "BZD", "CAD", "CDF", "CHE",
    "CHF", "CHW", "CNY", "COP", "COU", "CRC", "CUP", "CVE", "CZK", "DKK", "DOP", "DZD", "EGP",
    "ERN", "ETB", "EUR", "FJD", "FKP", "GBP", "GEL", "GHS", "GIP", "GMD", "GTQ", "GYD", "HKD",
    "HNL", "HTG", "HUF", "IDR", "ILS", "INR", "IRR", "JMD", "KES", "KGS", "KHR", "KPW", "KYD",
    "KZT", "LAK", "LBP", "LKR", "LRD", "LSL", "MAD", "MDL", "MGA", "MKD", "MMK", "MNT", "MOP",
    "MRU", "MUR", "MVR", "MWK", "MXN", "MXV", "MYR", "MZN", "NAD", "NGN", "NIO", "NOK", "NPR",
    "NZD", "PAB", "PEN", "PGK", "PHP", "PKR", "PLN", "QAR", "RON", "RSD", "RUB", "SAR", "SBD",
    "SCR", "SDG", "SEK", "SGD", "SHP", "SLE", "SOS", "SRD", "SSP", "STN", "SVC", "SYP", "SZL",
    "THB", "TJS", "TMT", "TOP", "TRY", "TTD", "TWD", "TZS", "UAH", "USD", "USN", "UYU", "UZS",
    "VED", "VES", "WST", "XCD", "XCG", "YER", "ZAR", "ZMW", "ZWG",
];

/// The number of decimal places of an ISO 4217 code (`USD` 2, `JPY` 0, `BHD` 3), or `None`
/// for a code the table does not know. Exact: `usd` is not a code here; see
/// [`exponent_of_value`] for a value a caller sent.
pub fn exponent(code: &str) -> Option<u32> {
    [
        (EXPONENT_0, 0),
        (EXPONENT_2, 2),
        (EXPONENT_3, 3),
        (EXPONENT_4, 4),
    ]
    .into_iter()
    .find(|(codes, _)| codes.contains(&code))
    .map(|(_, exponent)| exponent)
}

/// True for text written as a code: exactly three uppercase ASCII letters.
pub fn looks_like_code(text: &str) -> bool {
    text.len() == 3 && text.bytes().all(|byte| byte.is_ascii_uppercase())
}

/// Why an amount can't be written in minor units.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CurrencyError {
    /// The currency argument's value is not a known ISO 4217 code.
    #[error(
        "`{value}` is not an ISO 4217 currency code this gateway knows (send a code such as \
         USD, EUR or JPY)"
    )]
    UnknownCode { value: String },
    /// The currency argument is absent or not text.
    #[error("the currency is taken from argument `{argument}`, which {reason}")]
    NoCurrency {
        argument: String,
        reason: &'static str,
    },
    /// The amount is not a decimal.
    #[error("{0}")]
    Decimal(DecimalError),
    /// More places than the currency has: refused, never rounded.
    #[error(
        "`{value}` has more decimal places than {currency} has ({places}); it is refused \
         rather than rounded"
    )]
    TooManyPlaces {
        value: String,
        currency: String,
        places: u32,
    },
}

/// The exponent of a currency value a caller sent (`"usd"` and `"USD"` alike).
pub fn exponent_of_value(value: &Value, argument: &str) -> Result<(String, u32), CurrencyError> {
    let text = match value {
        Value::String(text) => text,
        Value::Null => {
            return Err(CurrencyError::NoCurrency {
                argument: argument.to_owned(),
                reason: "is null",
            });
        }
        _ => {
            return Err(CurrencyError::NoCurrency {
                argument: argument.to_owned(),
                reason: "is not text (a code such as \"USD\")",
            });
        }
    };
    let code = text.trim().to_ascii_uppercase();
    match exponent(&code) {
        Some(exponent) if looks_like_code(&code) => Ok((code, exponent)),
        _ => Err(CurrencyError::UnknownCode { value: quote(text) }),
    }
}

/// Where a minor-units amount takes its currency from: a code written in the config
/// (`minor(USD)`), or an argument of the call that holds one (`minor(currency)`,
/// `minor(price.currency)`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CurrencySource {
    /// A known code and its exponent.
    Code { code: &'static str, exponent: u32 },
    /// An argument path, split at its dots.
    Argument(Vec<String>),
}

impl CurrencySource {
    /// Reads what is between `minor(` and `)`, or a `minor_units` field: three uppercase
    /// letters are a code (which must be known), anything else an argument path.
    pub fn parse(text: &str) -> Result<CurrencySource, &'static str> {
        let text = text.trim();
        if looks_like_code(text) {
            let known = [EXPONENT_0, EXPONENT_2, EXPONENT_3, EXPONENT_4]
                .into_iter()
                .flatten()
                .find(|code| **code == text);
            return match (known, exponent(text)) {
                (Some(code), Some(exponent)) => Ok(CurrencySource::Code { code, exponent }),
                _ => Err(
                    "minor units name an unknown ISO 4217 currency code; write a known code \
                     such as USD, EUR or JPY, or an argument that holds the code",
                ),
            };
        }
        let path: Vec<String> = text.split('.').map(str::to_owned).collect();
        let valid = |segment: &String| {
            !segment.is_empty()
                && segment
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        };
        if !path.iter().all(valid) {
            return Err(
                "minor units take a currency: an ISO 4217 code such as USD, or the argument \
                 that holds one (letters, digits, `_`, `-`, and `.` for a nested field)",
            );
        }
        Ok(CurrencySource::Argument(path))
    }

    /// The argument path the currency comes from, if it comes from one.
    pub fn argument(&self) -> Option<&[String]> {
        match self {
            CurrencySource::Code { .. } => None,
            CurrencySource::Argument(path) => Some(path),
        }
    }

    /// The currency's code and exponent for one call; `currency_value` is the value of the
    /// argument the source names (`None` when the call lacks it).
    pub fn resolve(&self, currency_value: Option<&Value>) -> Result<(String, u32), CurrencyError> {
        match self {
            CurrencySource::Code { code, exponent } => Ok(((*code).to_owned(), *exponent)),
            CurrencySource::Argument(path) => {
                let argument = path.join(".");
                let value = currency_value.ok_or_else(|| CurrencyError::NoCurrency {
                    argument: argument.clone(),
                    reason: "the call did not provide",
                })?;
                exponent_of_value(value, &argument)
            }
        }
    }
}

impl fmt::Display for CurrencySource {
    /// As written in the config: `USD`, `price.currency`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CurrencySource::Code { code, .. } => f.write_str(code),
            CurrencySource::Argument(path) => f.write_str(&path.join(".")),
        }
    }
}

/// A JSON amount (number or numeric string, in major units) as an integer text in minor
/// units: `49`, `49.0` and `"49.00"` USD are `4900`; `4900` JPY is `4900`; `1.234` BHD is
/// `1234`. More places than `currency` has is an error, never a rounding.
pub fn to_minor_units(
    value: &Value,
    currency: &str,
    exponent: u32,
) -> Result<String, CurrencyError> {
    let decimal = Decimal::from_json(value).map_err(CurrencyError::Decimal)?;
    decimal.minor_units(exponent).map_err(|error| match error {
        DecimalError::TooManyPlaces { .. } => CurrencyError::TooManyPlaces {
            value: match value {
                Value::Number(number) => quote(number.as_str()),
                Value::String(text) => quote(text),
                other => quote(&other.to_string()),
            },
            currency: currency.to_owned(),
            places: exponent,
        },
        other => CurrencyError::Decimal(other),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sent(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn the_table_knows_each_exponent_and_each_code_once() {
        assert_eq!(exponent("USD"), Some(2));
        assert_eq!(exponent("EUR"), Some(2));
        assert_eq!(exponent("JPY"), Some(0));
        assert_eq!(exponent("KRW"), Some(0));
        assert_eq!(exponent("BHD"), Some(3));
        assert_eq!(exponent("KWD"), Some(3));
        assert_eq!(exponent("CLF"), Some(4));
        assert_eq!(exponent("usd"), None);
        assert_eq!(exponent("XXX"), None);
        let all: Vec<&str> = [EXPONENT_0, EXPONENT_2, EXPONENT_3, EXPONENT_4]
            .into_iter()
            .flatten()
            .copied()
            .collect();
        let mut unique = all.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), all.len(), "a code is listed twice");
        assert!(all.iter().all(|code| looks_like_code(code)));
    }

    #[test]
    fn amounts_written_three_ways_are_one_minor_units_amount() {
        for amount in [json!(49), sent("49.0"), json!("49.00"), json!("49")] {
            assert_eq!(
                to_minor_units(&amount, "USD", 2).unwrap(),
                "4900",
                "{amount}"
            );
        }
        assert_eq!(to_minor_units(&json!(4900), "JPY", 0).unwrap(), "4900");
        assert_eq!(to_minor_units(&json!("1.234"), "BHD", 3).unwrap(), "1234");
        assert_eq!(to_minor_units(&sent("0.05"), "USD", 2).unwrap(), "5");
        assert_eq!(to_minor_units(&json!(0), "USD", 2).unwrap(), "0");
        assert_eq!(to_minor_units(&json!("-0.00"), "USD", 2).unwrap(), "0");
        assert_eq!(to_minor_units(&sent("-12.5"), "USD", 2).unwrap(), "-1250");
        assert_eq!(to_minor_units(&json!("1e2"), "USD", 2).unwrap(), "10000");
        // Far beyond an i64: the text is exact.
        assert_eq!(
            to_minor_units(&sent("123456789012345678901234567890.12"), "USD", 2).unwrap(),
            "12345678901234567890123456789012"
        );
    }

    #[test]
    fn more_places_than_the_currency_has_are_refused_never_rounded() {
        let error = to_minor_units(&sent("49.001"), "USD", 2).unwrap_err();
        assert_eq!(
            error,
            CurrencyError::TooManyPlaces {
                value: "49.001".into(),
                currency: "USD".into(),
                places: 2
            }
        );
        assert!(error.to_string().contains("rounded"), "{error}");
        assert!(matches!(
            to_minor_units(&json!("4900.5"), "JPY", 0),
            Err(CurrencyError::TooManyPlaces { places: 0, .. })
        ));
        assert!(to_minor_units(&sent("49.9999999999999999"), "USD", 2).is_err());
        // Trailing zeros are not places.
        assert_eq!(
            to_minor_units(&json!("4900.000"), "JPY", 0).unwrap(),
            "4900"
        );
        assert!(matches!(
            to_minor_units(&json!("forty"), "USD", 2),
            Err(CurrencyError::Decimal(_))
        ));
    }

    #[test]
    fn a_source_is_a_known_code_or_an_argument() {
        assert_eq!(
            CurrencySource::parse("USD"),
            Ok(CurrencySource::Code {
                code: "USD",
                exponent: 2
            })
        );
        assert!(CurrencySource::parse("XYZ").is_err());
        assert_eq!(
            CurrencySource::parse("price.currency"),
            Ok(CurrencySource::Argument(vec![
                "price".into(),
                "currency".into()
            ]))
        );
        // Not three uppercase letters: an argument, even when it reads like a code.
        assert_eq!(
            CurrencySource::parse("usd"),
            Ok(CurrencySource::Argument(vec!["usd".into()]))
        );
        assert!(CurrencySource::parse("").is_err());
        assert!(CurrencySource::parse("a..b").is_err());
    }

    #[test]
    fn a_currency_argument_is_read_case_insensitively_and_must_be_known() {
        let source = CurrencySource::parse("currency").unwrap();
        assert_eq!(
            source.resolve(Some(&json!("usd"))).unwrap(),
            ("USD".to_owned(), 2)
        );
        assert_eq!(
            source.resolve(Some(&json!("JPY"))).unwrap(),
            ("JPY".to_owned(), 0)
        );
        let error = source.resolve(Some(&json!("usdollar"))).unwrap_err();
        assert!(error.to_string().contains("usdollar"), "{error}");
        assert!(matches!(
            source.resolve(None),
            Err(CurrencyError::NoCurrency { .. })
        ));
        assert!(matches!(
            source.resolve(Some(&json!(840))),
            Err(CurrencyError::NoCurrency { .. })
        ));
    }
}
