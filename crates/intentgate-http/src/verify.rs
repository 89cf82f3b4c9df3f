//! The proof that a record a provider answered with is this intent's effect (docs/configuration.md,
//! "Lookups: what counts as found").
//!
//! A lookup is the check behind "an error means unknown": what it finds settles an intent as
//! `done` and is replayed to every repeat, so a record is never taken because it came first.
//! Each candidate is judged against the intent:
//!
//! - by its **provider key** (`key`): the tenant-scoped key the gateway sent with the effect,
//!   wherever the provider keeps it. Another tenant's record, or another intent's, carries
//!   another key.
//! - by its **business fields** (`match`), for a provider that keeps no key: every field equal
//!   to the intent's argument, decimals by their exact value (`10.1`, `10.10` and `"10.10"`
//!   agree; nothing goes through a float). A field in minor units (`minor_units: USD`)
//!   holds an integer (`4900`) that is compared exactly with the intent's decimal in major
//!   units (`49`, `49.0`, `"49.00"`); an intent amount with more places than the currency
//!   has matches no record.
//!
//! With both configured both must hold; a record that passes one and fails the other is a
//! [`Judgement::Mismatch`], which settles nothing and is reported, because it means the
//! provider holds something the ledger can't explain. [`MatchFields`] is also how
//! reconciliation pairs records by business fields, so both compare alike.

use std::collections::BTreeMap;

use intentgate_core::ExactNumber;
use intentgate_core::currency::{CurrencySource, to_minor_units};
use intentgate_core::key::is_provider_key_of;
use intentgate_core::placeholder::{Steps, resolve};
use serde_json::Value;

use crate::spec::{MatchCompare, MatchField};

/// What one record is to one intent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    /// This intent's effect.
    Ours,
    /// Somebody else's record (another intent, tenant or customer): ignored.
    NotOurs,
    /// Half of the proof holds and half does not: never taken, always reported. The text
    /// says what differs, naming fields and keys, never the record's other values.
    Mismatch(String),
}

/// How a lookup proves a record is this intent's: its provider key, its business fields,
/// or both. [`Proof::new`] refuses neither, since such a lookup can't tell two intents apart
/// (the config check says so with a line and a fix).
#[derive(Debug, Clone, PartialEq)]
pub struct Proof {
    /// JSON pointer into a record to the provider key it carries.
    key: Option<String>,
    fields: Option<MatchFields>,
}

impl Proof {
    /// `None` when there is nothing to prove a record with.
    pub fn new(key: Option<&str>, match_fields: &BTreeMap<String, MatchField>) -> Option<Proof> {
        let fields = (!match_fields.is_empty()).then(|| MatchFields::new(match_fields));
        if key.is_none() && fields.is_none() {
            return None;
        }
        Some(Proof {
            key: key.map(str::to_owned),
            fields,
        })
    }

    /// True when the proof compares provider keys (and so needs one for every lookup).
    pub fn uses_key(&self) -> bool {
        self.key.is_some()
    }

    /// Judges `record` for `intent`. A proof by key with no provider key to compare proves
    /// nothing: the record is not ours.
    pub fn judge(&self, record: &Value, intent: &Intent<'_>) -> Judgement {
        let Intent {
            tool,
            provider_key,
            arguments,
        } = *intent;
        let differing = self
            .fields
            .as_ref()
            .map(|fields| fields.differing(record, arguments));
        let Some(pointer) = &self.key else {
            // Business fields alone (checked in `new`).
            return match differing {
                Some(differing) if differing.is_empty() => Judgement::Ours,
                _ => Judgement::NotOurs,
            };
        };
        let carried = match record.pointer(pointer) {
            Some(Value::String(text)) => Some(text.as_str()),
            _ => None,
        };
        let key_is_ours = provider_key.is_some() && carried == provider_key;
        match (key_is_ours, differing) {
            (true, None) => Judgement::Ours,
            (true, Some(differing)) if differing.is_empty() => Judgement::Ours,
            (true, Some(differing)) => Judgement::Mismatch(format!(
                "a record carries this intent's provider key but its {} differ{} from the \
                 intent's arguments",
                differing.join(", "),
                if differing.len() == 1 { "s" } else { "" }
            )),
            // Equal business fields under another key that the gateway sent for this tool:
            // two intents with one effect's fields, or an effect made under another tenant's
            // key. A record with no key, or another system's, was made without the gateway.
            (false, Some(differing))
                if differing.is_empty()
                    && carried.is_some_and(|key| is_provider_key_of(tool, key)) =>
            {
                Judgement::Mismatch(format!(
                    "a record holds this intent's {} but carries another provider key",
                    self.fields
                        .as_ref()
                        .map(MatchFields::arguments)
                        .unwrap_or_default()
                ))
            }
            (false, _) => Judgement::NotOurs,
        }
    }
}

/// The intent a record is judged for.
#[derive(Debug, Clone, Copy)]
pub struct Intent<'a> {
    /// The tool's name, which every provider key of the tool holds.
    pub tool: &'a str,
    /// The provider key the gateway sent with the intent's effect.
    pub provider_key: Option<&'a str>,
    /// The intent's arguments.
    pub arguments: &'a Value,
}

/// What a lookup's candidates add up to.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Tally {
    /// The first record that is ours (a copy: a listing's pages are dropped as it goes).
    pub ours: Option<Value>,
    /// Records that are ours beyond the first: the provider holds the effect more than once.
    pub more_ours: usize,
    /// The first mismatch's reason, and how many there were.
    pub mismatch: Option<String>,
    pub mismatches: usize,
    /// Records judged.
    pub judged: usize,
}

impl Tally {
    /// Judges every record of `records` and adds it to the tally.
    pub fn add<'v>(
        &mut self,
        proof: &Proof,
        records: impl IntoIterator<Item = &'v Value>,
        intent: &Intent<'_>,
    ) {
        for record in records {
            self.judged += 1;
            match proof.judge(record, intent) {
                Judgement::Ours if self.ours.is_none() => self.ours = Some(record.clone()),
                Judgement::Ours => self.more_ours += 1,
                Judgement::NotOurs => {}
                Judgement::Mismatch(reason) => {
                    self.mismatches += 1;
                    self.mismatch.get_or_insert(reason);
                }
            }
        }
    }
}

/// The records of an answer at `found`: one object, or the elements of an array that are
/// objects. Absent, null, `[]` and `{}` hold none.
pub fn candidates<'v>(body: &'v Value, found: &str) -> Vec<&'v Value> {
    match body.pointer(found) {
        Some(record @ Value::Object(members)) if !members.is_empty() => vec![record],
        Some(Value::Array(items)) => items.iter().filter(|item| item.is_object()).collect(),
        _ => Vec::new(),
    }
}

/// The business fields that tie a provider record to an intent (a lookup's or a list's
/// `match`): for each, the argument, where the record holds it, and how the two compare. Each
/// side reduces to one pairing value, so that a record and an intent pair exactly when their
/// values are equal: decimals by their exact value (`10.1`, `10.10` and `"10.10"` are one
/// value, never read through a float), text as it is, an absent or null field as absent.
#[derive(Debug, Clone, PartialEq)]
pub struct MatchFields {
    fields: Vec<Field>,
}

#[derive(Debug, Clone, PartialEq)]
struct Field {
    /// As the config names it: `order_id`, `customer.id`.
    argument: String,
    /// The same, as a JSON pointer into the arguments.
    argument_pointer: String,
    /// JSON pointer into the provider's record.
    record: String,
    compare: MatchCompare,
    /// The record holds the amount in minor units of this currency; `Err` for a
    /// `minor_units` that is neither a known code nor an argument path (a config the check
    /// refuses): such a field matches no record.
    minor_units: Option<Result<CurrencySource, &'static str>>,
}

impl MatchFields {
    /// The fields of a `match`, by argument name. A field without `compare` (which a loaded
    /// config never has) compares as text.
    pub fn new(fields: &BTreeMap<String, MatchField>) -> MatchFields {
        let fields = fields
            .iter()
            .map(|(argument, field)| Field {
                argument: argument.clone(),
                argument_pointer: argument
                    .split('.')
                    .map(|segment| format!("/{}", segment.replace('~', "~0").replace('/', "~1")))
                    .collect(),
                record: field.record.clone(),
                compare: field.compare.unwrap_or(MatchCompare::Text),
                minor_units: field.minor_units.as_deref().map(CurrencySource::parse),
            })
            .collect();
        MatchFields { fields }
    }

    /// Refuses a `minor_units` that is neither a known ISO 4217 code nor an argument path,
    /// naming the argument of the field: `Err((argument, reason))`.
    pub fn check(fields: &BTreeMap<String, MatchField>) -> Result<(), (String, &'static str)> {
        for (argument, field) in fields {
            if let Some(source) = &field.minor_units {
                CurrencySource::parse(source).map_err(|reason| (argument.clone(), reason))?;
            }
        }
        Ok(())
    }

    /// The pairing value of an intent, from its arguments (as the ledger keeps them, or as
    /// the caller sent them: the fields are never sensitive, so both are the same).
    pub fn of_arguments(&self, arguments: &Value) -> String {
        let parts: Vec<Option<String>> = self
            .fields
            .iter()
            .map(|field| field.of_arguments(arguments))
            .collect();
        serde_json::to_string(&parts).expect("a list of texts serialises")
    }

    /// The pairing value of a provider record.
    pub fn of_record(&self, record: &Value) -> String {
        let parts: Vec<Option<String>> = self
            .fields
            .iter()
            .map(|field| field.of_record(record))
            .collect();
        serde_json::to_string(&parts).expect("a list of texts serialises")
    }

    /// The arguments whose values differ between `record` and `arguments`, in the fields'
    /// order; empty when every field agrees. A field absent on both sides agrees.
    pub fn differing(&self, record: &Value, arguments: &Value) -> Vec<&str> {
        self.fields
            .iter()
            .filter(|field| field.of_record(record) != field.of_arguments(arguments))
            .map(|field| field.argument.as_str())
            .collect()
    }

    /// The record's values of the fields, for a person: `order_id 8812, amount "10.10"`.
    pub fn describe_record(&self, record: &Value) -> String {
        let parts: Vec<String> = self
            .fields
            .iter()
            .map(|field| match record.pointer(&field.record) {
                None | Some(Value::Null) => format!("no {}", field.argument),
                Some(value) => format!("{} {value}", field.argument),
            })
            .collect();
        parts.join(", ")
    }

    /// The arguments the fields name, for a person: `order_id, amount`.
    pub fn arguments(&self) -> String {
        let names: Vec<&str> = self
            .fields
            .iter()
            .map(|field| field.argument.as_str())
            .collect();
        names.join(", ")
    }
}

impl Field {
    /// The canonical value of the record's field (see [`canonical`]); an amount in minor
    /// units is a decimal whatever `compare` says.
    fn of_record(&self, record: &Value) -> Option<String> {
        let compare = match self.minor_units {
            Some(_) => MatchCompare::Decimal,
            None => self.compare,
        };
        canonical(record.pointer(&self.record), compare)
    }

    /// The canonical value of the intent's argument. With minor units, the argument (a
    /// decimal in major units) is written in the currency's minor units first, exactly: the
    /// value of an argument that can't be (more places than the currency has, an unknown
    /// currency) is `x`, which no record's value is.
    fn of_arguments(&self, arguments: &Value) -> Option<String> {
        let value = arguments.pointer(&self.argument_pointer);
        let Some(source) = &self.minor_units else {
            return canonical(value, self.compare);
        };
        let value = value.filter(|value| !value.is_null())?;
        let Ok(source) = source else {
            return Some("x".to_owned());
        };
        let currency = source
            .argument()
            .and_then(|path| resolve(arguments, path, Steps::FieldsOnly));
        match source
            .resolve(currency)
            .and_then(|(code, exponent)| to_minor_units(value, &code, exponent))
        {
            Ok(minor) => canonical(Some(&Value::String(minor)), MatchCompare::Decimal),
            Err(_) => Some("x".to_owned()),
        }
    }
}

/// The canonical text of one field's value, tagged by what it is so that values of different
/// kinds never meet: `d` and an [`ExactNumber`]'s canonical text for a decimal, `t` and the
/// text for text (a number as written, a boolean as `true`/`false`), `j` and compact JSON for
/// an object or array; `None` for absent or null.
fn canonical(value: Option<&Value>, compare: MatchCompare) -> Option<String> {
    let text = match value? {
        Value::Null => return None,
        Value::String(text) => text.clone(),
        Value::Number(number) => number.to_string(),
        Value::Bool(flag) => return Some(format!("t{flag}")),
        other => return Some(format!("j{other}")),
    };
    match compare {
        MatchCompare::Decimal => match ExactNumber::parse(&text) {
            Ok(number) => Some(format!("d{number}")),
            // Not a number: it can equal only the same text, never a decimal.
            Err(_) => Some(format!("t{text}")),
        },
        MatchCompare::Text => Some(format!("t{text}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(pairs: &[(&str, &str, MatchCompare)]) -> BTreeMap<String, MatchField> {
        pairs
            .iter()
            .map(|(argument, record, compare)| {
                (
                    (*argument).to_owned(),
                    MatchField {
                        record: (*record).to_owned(),
                        compare: Some(*compare),
                        minor_units: None,
                    },
                )
            })
            .collect()
    }

    fn refund_fields() -> BTreeMap<String, MatchField> {
        fields(&[
            ("order_id", "/order_id", MatchCompare::Text),
            ("amount", "/amount", MatchCompare::Decimal),
        ])
    }

    fn intent<'a>(provider_key: Option<&'a str>, arguments: &'a Value) -> Intent<'a> {
        Intent {
            tool: "refund",
            provider_key,
            arguments,
        }
    }

    #[test]
    fn a_proof_needs_a_key_or_fields() {
        assert_eq!(Proof::new(None, &BTreeMap::new()), None);
        assert!(Proof::new(Some("/key"), &BTreeMap::new()).is_some());
        assert!(Proof::new(None, &refund_fields()).is_some());
    }

    #[test]
    fn by_key_only_the_record_carrying_this_intents_provider_key_is_ours() {
        let proof = Proof::new(Some("/metadata/idempotency_key"), &BTreeMap::new()).unwrap();
        let arguments = json!({"order_id": "8812"});
        let ours = json!({"id": "re_1", "metadata": {"idempotency_key": "acme/refund:8812"}});
        let theirs = json!({"id": "re_2", "metadata": {"idempotency_key": "evil/refund:8812"}});
        let keyless = json!({"id": "re_3"});
        let key = Some("acme/refund:8812");
        assert_eq!(
            proof.judge(&ours, &intent(key, &arguments)),
            Judgement::Ours
        );
        assert_eq!(
            proof.judge(&theirs, &intent(key, &arguments)),
            Judgement::NotOurs
        );
        assert_eq!(
            proof.judge(&keyless, &intent(key, &arguments)),
            Judgement::NotOurs
        );
        // No provider key to compare proves nothing, even against a keyless record.
        assert_eq!(
            proof.judge(&keyless, &intent(None, &arguments)),
            Judgement::NotOurs
        );
    }

    #[test]
    fn by_fields_decimals_agree_exactly_and_any_difference_is_not_ours() {
        let proof = Proof::new(None, &refund_fields()).unwrap();
        let arguments = json!({"order_id": "8812", "amount": 49});
        for amount in [json!("49.00"), json!(49.0), json!("49")] {
            let record = json!({"order_id": "8812", "amount": amount});
            assert_eq!(
                proof.judge(&record, &intent(None, &arguments)),
                Judgement::Ours
            );
        }
        for record in [
            json!({"order_id": "8812", "amount": "49.01"}),
            json!({"order_id": "8813", "amount": "49.00"}),
            json!({"order_id": "8812"}),
        ] {
            assert_eq!(
                proof.judge(&record, &intent(None, &arguments)),
                Judgement::NotOurs
            );
        }
    }

    fn minor_units_fields(minor_units: &str) -> BTreeMap<String, MatchField> {
        BTreeMap::from([(
            "amount".to_owned(),
            MatchField {
                record: "/amount".to_owned(),
                compare: Some(MatchCompare::Decimal),
                minor_units: Some(minor_units.to_owned()),
            },
        )])
    }

    #[test]
    fn a_record_in_minor_units_matches_the_intents_decimal_exactly() {
        let proof = Proof::new(None, &minor_units_fields("USD")).unwrap();
        let record = json!({"id": "re_1", "amount": 4900});
        for amount in ["49", "49.0", "\"49.00\"", "\"49\""] {
            let arguments: Value =
                serde_json::from_str(&format!(r#"{{"amount": {amount}}}"#)).unwrap();
            assert_eq!(
                proof.judge(&record, &intent(None, &arguments)),
                Judgement::Ours,
                "{amount}"
            );
        }
        let arguments = json!({"amount": "49.00"});
        for other in [json!(4901), json!(49), json!("4900.5"), json!(null)] {
            let record = json!({"amount": other});
            assert_eq!(
                proof.judge(&record, &intent(None, &arguments)),
                Judgement::NotOurs,
                "{other}"
            );
        }
        // A string record holding the integer agrees too.
        assert_eq!(
            proof.judge(&json!({"amount": "4900"}), &intent(None, &arguments)),
            Judgement::Ours
        );
        // More places than cents: never rounded into a match.
        let precise = json!({"amount": "49.001"});
        for record in [json!({"amount": 4900}), json!({"amount": 4900.1})] {
            assert_eq!(
                proof.judge(&record, &intent(None, &precise)),
                Judgement::NotOurs
            );
        }
        // Zero places, and a currency taken from the intent's argument.
        let yen = Proof::new(None, &minor_units_fields("JPY")).unwrap();
        assert_eq!(
            yen.judge(
                &json!({"amount": 4900}),
                &intent(None, &json!({"amount": 4900}))
            ),
            Judgement::Ours
        );
        let by_argument = MatchFields::new(&minor_units_fields("currency"));
        let record = json!({"amount": 1234});
        assert!(
            by_argument
                .differing(&record, &json!({"amount": "1.234", "currency": "bhd"}))
                .is_empty()
        );
        assert_eq!(
            by_argument.differing(&record, &json!({"amount": "12.34", "currency": "BHD"})),
            ["amount"]
        );
        assert!(
            by_argument
                .differing(&record, &json!({"amount": "12.34", "currency": "usd"}))
                .is_empty()
        );
        assert_eq!(
            by_argument.differing(&record, &json!({"amount": "12.34", "currency": "ZZZ"})),
            ["amount"]
        );
        assert_eq!(
            by_argument.of_record(&record),
            by_argument.of_arguments(&json!({"amount": 12.34, "currency": "USD"}))
        );
        assert!(MatchFields::check(&minor_units_fields("XYZ")).is_err());
        assert!(MatchFields::check(&minor_units_fields("currency")).is_ok());
    }

    #[test]
    fn half_a_proof_is_a_mismatch_never_ours() {
        let proof = Proof::new(Some("/key"), &refund_fields()).unwrap();
        let arguments = json!({"order_id": "8812", "amount": "50.00"});
        let key = Some("a/refund:8812:50.00");
        let our_key_other_amount =
            json!({"key": "a/refund:8812:50.00", "order_id": "8812", "amount": "0.01"});
        let Judgement::Mismatch(reason) =
            proof.judge(&our_key_other_amount, &intent(key, &arguments))
        else {
            panic!("a record with this intent's key and another amount must be a mismatch");
        };
        assert!(reason.contains("amount differs"), "{reason}");
        let other_key_same_fields =
            json!({"key": "b/refund:8812:50.00", "order_id": "8812", "amount": "50"});
        assert!(matches!(
            proof.judge(&other_key_same_fields, &intent(key, &arguments)),
            Judgement::Mismatch(_)
        ));
        let both = json!({"key": "a/refund:8812:50.00", "order_id": "8812", "amount": 50});
        assert_eq!(
            proof.judge(&both, &intent(key, &arguments)),
            Judgement::Ours
        );
        // The same fields without any key: made without the gateway, not this intent's.
        let keyless = json!({"order_id": "8812", "amount": "50.00"});
        assert_eq!(
            proof.judge(&keyless, &intent(key, &arguments)),
            Judgement::NotOurs
        );
    }

    #[test]
    fn candidates_are_one_object_or_the_objects_of_an_array() {
        let body = json!({"data": [{"id": 1}, "junk", {"id": 2}], "one": {"id": 3}, "none": {}});
        assert_eq!(candidates(&body, "/data").len(), 2);
        assert_eq!(candidates(&body, "/one").len(), 1);
        assert!(candidates(&body, "/none").is_empty());
        assert!(candidates(&body, "/absent").is_empty());
        assert!(candidates(&json!({"data": null}), "/data").is_empty());
    }

    #[test]
    fn a_tally_takes_the_first_of_ours_counts_the_rest_and_keeps_mismatches() {
        let proof = Proof::new(Some("/key"), &BTreeMap::new()).unwrap();
        let records = [
            json!({"id": "x", "key": "other"}),
            json!({"id": "a", "key": "k"}),
            json!({"id": "b", "key": "k"}),
        ];
        let mut tally = Tally::default();
        tally.add(&proof, records.iter(), &intent(Some("k"), &json!({})));
        assert_eq!(
            tally.ours.as_ref().and_then(|record| record.get("id")),
            Some(&json!("a"))
        );
        assert_eq!((tally.more_ours, tally.mismatches, tally.judged), (1, 0, 3));
    }
}
