//! Property tests of the number parsers and the key renderer: whatever a caller sends, they
//! never panic, and every value they accept has one canonical form, however it was written.
//!
//! Numbers are generated as a value (sign, significant digits, power of ten) and then written
//! in several ways (exponent or not, point moved, leading and trailing zeros, `E+0`); every
//! spelling must parse to the same value, render the same key and fingerprint alike. Exponents
//! come from the whole 64-bit range and beyond, since the caller chooses them.

use std::mem::discriminant;

use intentgate_core::decimal::DecimalError;
use intentgate_core::{Decimal, ExactNumber, KeyError, KeyTemplate, fingerprint};
use proptest::prelude::*;
use serde_json::{Value, json};

/// A number as a value: `(-1)^negative × digits × 10^exponent`.
#[derive(Debug, Clone)]
struct Written {
    negative: bool,
    /// 1 to 45 digits, the first non-zero (so the value's digit count is known).
    digits: String,
    exponent: i128,
}

fn written() -> impl Strategy<Value = Written> {
    let exponent = prop_oneof![
        4 => -30i128..30,
        2 => -450i128..450,
        1 => (i64::MIN as i128 - 50)..(i64::MIN as i128 + 50),
        1 => (i64::MAX as i128 - 50)..(i64::MAX as i128 + 50),
        1 => any::<i64>().prop_map(i128::from),
    ];
    (any::<bool>(), "[1-9][0-9]{0,44}", exponent).prop_map(|(negative, digits, exponent)| Written {
        negative,
        digits,
        exponent,
    })
}

impl Written {
    fn sign(&self) -> &'static str {
        if self.negative { "-" } else { "" }
    }

    /// Spellings of this value that are valid JSON numbers.
    fn json_spellings(&self, trailing_zeros: usize, leading_zeros: usize) -> Vec<String> {
        let (sign, digits, exponent) = (self.sign(), &self.digits, self.exponent);
        let length = digits.len() as i128;
        let mut spellings = vec![
            format!("{sign}{digits}e{exponent}"),
            format!(
                "{sign}{digits}{}E{}",
                "0".repeat(trailing_zeros),
                exponent - trailing_zeros as i128
            ),
            format!(
                "{sign}0.{}{digits}e{}",
                "0".repeat(leading_zeros),
                exponent + length + leading_zeros as i128
            ),
        ];
        if digits.len() > 1 {
            let (whole, fraction) = digits.split_at(1);
            spellings.push(format!(
                "{sign}{whole}.{fraction}{}e{}",
                "0".repeat(trailing_zeros),
                exponent + length - 1
            ));
        }
        if exponent >= 0 {
            spellings.push(format!("{sign}{digits}e+0{exponent}"));
        }
        // Without an exponent, where the text stays short.
        if (0..=60).contains(&exponent) {
            spellings.push(format!("{sign}{digits}{}", "0".repeat(exponent as usize)));
        } else if (-60..0).contains(&exponent) {
            let places = (-exponent) as usize;
            let padded = format!("{digits:0>width$}", width = places + 1);
            let (whole, fraction) = padded.split_at(padded.len() - places);
            spellings.push(format!(
                "{sign}{whole}.{fraction}{}",
                "0".repeat(trailing_zeros)
            ));
        }
        spellings
    }
}

/// Text that looks like a number, with every part optional or odd.
fn number_like() -> impl Strategy<Value = String> {
    (
        "[-+]?",
        "[0-9]{0,50}",
        "(\\.[0-9]{0,50})?",
        prop_oneof![
            Just(String::new()),
            "[eE][-+]?[0-9]{0,25}",
            any::<i64>().prop_map(|exponent| format!("e{exponent}")),
        ],
        "[ ]{0,2}",
    )
        .prop_map(|(sign, whole, fraction, exponent, pad)| {
            format!("{pad}{sign}{whole}{fraction}{exponent}{pad}")
        })
}

fn key_results(template: &KeyTemplate, values: &[Value]) -> Vec<Result<String, KeyError>> {
    values
        .iter()
        .map(|value| template.render(&json!({ "n": value }), None))
        .collect()
}

/// All Ok and equal, or all the same kind of error (messages quote the spelling, so differ).
fn agree(results: &[Result<String, KeyError>]) -> Result<(), String> {
    let kind = |result: &Result<String, KeyError>| match result {
        Ok(key) => Ok(key.clone()),
        Err(KeyError::Decimal { error, .. }) => Err(Some(discriminant(error))),
        Err(_) => Err(None),
    };
    let first = kind(&results[0]);
    for result in results {
        if kind(result) != first {
            return Err(format!("{:?} vs {:?}", results[0], result));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn no_text_makes_a_parser_panic(text in any::<String>()) {
        let _ = ExactNumber::parse(&text);
        let _ = Decimal::parse(&text);
    }

    #[test]
    fn accepted_numbers_round_trip_to_one_canonical_form(text in number_like()) {
        if let Ok(number) = ExactNumber::parse(&text) {
            let canonical = number.to_string();
            prop_assert_eq!(ExactNumber::parse(&canonical), Ok(number.clone()), "{}", canonical);
        }
        if let Ok(decimal) = Decimal::parse(&text) {
            let canonical = decimal.to_string();
            prop_assert_eq!(Decimal::parse(&canonical), Ok(decimal.clone()), "{}", canonical);
            // A decimal is an exact number too, and the same one.
            prop_assert_eq!(ExactNumber::parse(&canonical), ExactNumber::parse(&text));
        }
    }

    #[test]
    fn equal_values_written_differently_are_one_value(
        value in written(),
        trailing_zeros in 0usize..5,
        leading_zeros in 0usize..5,
    ) {
        let spellings = value.json_spellings(trailing_zeros, leading_zeros);
        let numbers: Vec<_> = spellings.iter().map(|text| ExactNumber::parse(text)).collect();
        let decimals: Vec<_> = spellings.iter().map(|text| Decimal::parse(text)).collect();
        for (text, (number, decimal)) in spellings.iter().zip(numbers.iter().zip(&decimals)) {
            match (number, &numbers[0]) {
                (Ok(a), Ok(b)) => prop_assert_eq!(a, b, "{} vs {}", text, spellings[0]),
                (Err(_), Err(_)) => {}
                _ => prop_assert!(false, "{} and {} disagree: {:?}", text, spellings[0], numbers),
            }
            match (decimal, &decimals[0]) {
                (Ok(a), Ok(b)) => prop_assert_eq!(a, b, "{} vs {}", text, spellings[0]),
                (Err(a), Err(b)) => prop_assert_eq!(discriminant(a), discriminant(b), "{:?}", decimals),
                _ => prop_assert!(false, "{} and {} disagree: {:?}", text, spellings[0], decimals),
            }
        }

        // As JSON numbers (their text kept) and as strings, under both kinds of placeholder.
        let json_numbers: Vec<Value> = spellings
            .iter()
            .map(|text| serde_json::from_str(text).expect("a JSON number"))
            .collect();
        let strings: Vec<Value> = spellings.iter().map(|text| json!(text)).collect();
        for template in ["k:{n}", "k:{n:.2}", "k:{n:.0}", "k:{n:.18}"] {
            let template = KeyTemplate::parse(template).unwrap();
            let results = key_results(&template, &json_numbers);
            prop_assert!(agree(&results).is_ok(), "{}: {:?}", spellings[0], agree(&results));
            if template.as_str() != "k:{n}" {
                // A decimal format reads strings too, to the same key.
                let from_strings = key_results(&template, &strings);
                prop_assert!(agree(&from_strings).is_ok(), "{:?}", agree(&from_strings));
                if let (Ok(a), Ok(b)) = (&results[0], &from_strings[0]) {
                    prop_assert_eq!(a, b);
                }
            }
        }

        if numbers[0].is_ok() {
            let first = fingerprint(&json!({ "n": json_numbers[0] }));
            for value in &json_numbers {
                prop_assert_eq!(&fingerprint(&json!({ "n": value })), &first, "{}", value);
            }
        }
    }

    #[test]
    fn comparisons_agree_with_integer_arithmetic(
        a in -999_999_999i128..999_999_999,
        a_exponent in -14i32..14,
        b in -999_999_999i128..999_999_999,
        b_exponent in -14i32..14,
    ) {
        let number = |mantissa: i128, exponent: i32| {
            ExactNumber::parse(&format!("{mantissa}e{exponent}")).unwrap()
        };
        // Both scaled to the smaller exponent: at most 10^9 × 10^28, within i128.
        let low = a_exponent.min(b_exponent);
        let scaled = |mantissa: i128, exponent: i32| mantissa * 10i128.pow((exponent - low) as u32);
        prop_assert_eq!(
            number(a, a_exponent).cmp(&number(b, b_exponent)),
            scaled(a, a_exponent).cmp(&scaled(b, b_exponent))
        );
    }

    #[test]
    fn multiple_of_agrees_with_integer_arithmetic(
        a in -999_999_999i128..999_999_999,
        a_exponent in -14i32..14,
        b in 1i128..9_999,
        b_exponent in -14i32..14,
    ) {
        let low = a_exponent.min(b_exponent);
        let scaled = |mantissa: i128, exponent: i32| mantissa * 10i128.pow((exponent - low) as u32);
        let value = ExactNumber::parse(&format!("{a}e{a_exponent}")).unwrap();
        let divisor = ExactNumber::parse(&format!("{b}e{b_exponent}")).unwrap();
        prop_assert_eq!(
            value.is_multiple_of(&divisor),
            Some(scaled(a, a_exponent) % scaled(b, b_exponent) == 0)
        );
    }

    #[test]
    fn the_key_renderer_never_panics(
        text in prop_oneof![number_like(), any::<String>()],
        as_number in any::<bool>(),
        template in prop_oneof![
            Just("k:{n}"), Just("k:{n:.2}"), Just("k:{n:.18}"), Just("{n}/{m.x}:{n:.0}")
        ],
    ) {
        let value = if as_number {
            // Only text serde_json takes as a number; otherwise the string itself.
            serde_json::from_str::<Value>(&text)
                .ok()
                .filter(Value::is_number)
                .unwrap_or(json!(text))
        } else {
            json!(text)
        };
        let template = KeyTemplate::parse(template).unwrap();
        let arguments = json!({"n": value, "m": {"x": value}});
        if let Ok(key) = template.render(&arguments, None) {
            prop_assert!(key.len() <= intentgate_core::limits::INTENT_KEY_LENGTH_MAX);
            // The same arguments always render the same key.
            prop_assert_eq!(template.render(&arguments, None), Ok(key));
        }
        let _ = fingerprint(&arguments);
    }

    #[test]
    fn formatted_decimals_read_back_as_the_same_value(text in number_like(), places in 0u32..=18) {
        if let Ok(decimal) = Decimal::parse(&text)
            && let Ok(formatted) = decimal.format_places(places)
        {
            prop_assert_eq!(Decimal::parse(&formatted), Ok(decimal));
            let point = formatted.find('.').map_or(0, |at| formatted.len() - at - 1);
            prop_assert_eq!(point, places as usize, "{}", formatted);
        }
    }
}

// Found by attack: each of these made the old parser wrap an i64 (and then allocate 2^63
// characters) or hand a tiny value to a renderer that wrote it out digit by digit. Every one
// must now be a refusal that quotes the text, quickly.
#[test]
fn hostile_amounts_are_refused_with_the_text_quoted() {
    for text in [
        "1.5e-9223372036854775807",
        "1e-9223372036854775808",
        "1.5e9223372036854775807",
        "1e99999999999999999999999999999999999999999",
        "1e-4000000000",
        "1e401",
    ] {
        let error = Decimal::parse(text).unwrap_err();
        assert!(
            matches!(
                error,
                DecimalError::TooLong(_) | DecimalError::TooPrecise(_)
            ),
            "{text}: {error:?}"
        );
        assert!(error.to_string().contains(text), "{error}");
        let template = KeyTemplate::parse("refund:{amount:.2}").unwrap();
        let error = template
            .render(&json!({ "amount": text }), None)
            .unwrap_err();
        assert!(error.to_string().contains("amount"), "{error}");
    }
}
