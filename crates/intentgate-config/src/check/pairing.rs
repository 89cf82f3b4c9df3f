//! How a tool's `list` reads a page and pairs a provider record with an intent, the same for
//! an HTTP and an MCP listing: its pointers, and the pairing by the provider key the gateway
//! sent with the effect (`fields.idempotency_key`, scoped by tenant and tool) or, for a
//! provider that keeps no key, by business fields (`match`). Exactly one of the two; the
//! intent key alone (`fields.intent_key`) is refused, since two tenants share it. Each
//! `match` field (of a list or of a lookup) names an argument that exists and is not
//! sensitive, and gets its comparison from the input schema when the config does not say.
//! The amount compared must not be a sensitive argument either.

use std::collections::BTreeMap;

use intentgate_config_file::at;
use intentgate_config_file::source_map::Segment;
use intentgate_core::ArgumentPath;
use intentgate_core::currency::CurrencySource;
use intentgate_http::spec::{ListFields, ListRecords, ListSubject, MatchCompare, MatchField};
use serde_json::Value;

use super::Checker;
use super::tools::pointer_path;
use crate::limits::MATCH_FIELDS_MAX;

/// An example of `match` for the fixes, as the example config's refunds would write it.
const MATCH_EXAMPLE: &str = "`match: {order_id: {record: /order_id}, amount: {record: /amount}}`";

impl Checker<'_, '_> {
    /// Checks how `list` reads its pages and pairs records with intents, and sets every
    /// `match` field's comparison. `sensitive` is the tool's sensitive arguments (`None` when
    /// its definition could not be built, which is reported elsewhere).
    pub(super) fn list_records(
        &mut self,
        index: usize,
        label: &str,
        list: &mut ListRecords,
        input_schema: &Value,
        sensitive: Option<&[ArgumentPath]>,
    ) {
        for (field, pointer) in [
            ("items", Some(list.items.as_str())),
            ("next_cursor", list.next_cursor.as_deref()),
            ("has_more", list.has_more.as_deref()),
        ] {
            self.pointer(&at!["tools", index, "list", field], label, pointer);
        }
        self.list_paging(index, label, list);
        self.list_fields(index, label, &list.fields, input_schema);
        if let Some(sensitive) = sensitive {
            self.sensitive_amount(index, label, sensitive, list);
        }
        self.list_pairing(index, label, list);
        self.match_fields(
            index,
            "list",
            label,
            &mut list.match_fields,
            input_schema,
            sensitive,
        );
    }

    /// Checks the pointers of a list's `fields` and the currency of its amount.
    fn list_fields(
        &mut self,
        index: usize,
        label: &str,
        fields: &ListFields,
        input_schema: &Value,
    ) {
        for (field, pointer) in [
            ("idempotency_key", fields.idempotency_key.as_deref()),
            ("intent_key", fields.intent_key.as_deref()),
            ("external_id", Some(fields.external_id.as_str())),
            ("amount", fields.amount.as_deref()),
            ("amount_argument", fields.amount_argument.as_deref()),
        ] {
            self.pointer(
                &at!["tools", index, "list", "fields", field],
                label,
                pointer,
            );
        }
        self.minor_units(
            &at!["tools", index, "list", "fields", "amount_minor_units"],
            label,
            "list.fields.amount_minor_units",
            fields.amount_minor_units.as_deref(),
            input_schema,
        );
        match &fields.subject {
            Some(ListSubject::One(pointer)) => self.pointer(
                &at!["tools", index, "list", "fields", "subject"],
                label,
                Some(pointer),
            ),
            Some(ListSubject::Several(pointers)) if pointers.is_empty() => self.push(
                &at!["tools", index, "list", "fields", "subject"],
                format!("{label}: `list.fields.subject` is an empty list"),
                "name where a record keeps who was affected, e.g. `subject: /customer` or \
                 `subject: [/payment_intent, /charge/customer]`, or remove `subject`",
            ),
            Some(ListSubject::Several(pointers)) => {
                for (position, pointer) in pointers.iter().enumerate() {
                    self.pointer(
                        &at!["tools", index, "list", "fields", "subject", position],
                        label,
                        Some(pointer),
                    );
                }
            }
            None => {}
        }
    }

    /// A list pairs provider records with intents one way: by the provider key
    /// (`fields.idempotency_key`) or by business fields (`match`).
    fn list_pairing(&mut self, index: usize, label: &str, list: &ListRecords) {
        match (
            list.fields.idempotency_key.is_some(),
            list.match_fields.is_empty(),
        ) {
            (false, true) if list.fields.intent_key.is_some() => self.push(
                &at!["tools", index, "list", "fields", "intent_key"],
                format!(
                    "{label}: the list pairs provider records with intents by \
                     `fields.intent_key` alone, and an intent key is not scoped by tenant: \
                     two tenants' records of one order and amount carry the same one, so one \
                     tenant's record would explain another's intent"
                ),
                format!(
                    "send the provider key with the effect (`{{idempotency_key}}`, scoped by \
                     tenant and tool) and pair by it: `idempotency_key: <pointer>` under \
                     `fields` (e.g. /metadata/idempotency_key); for a provider that keeps no \
                     key, pair by business fields instead, e.g. {MATCH_EXAMPLE}"
                ),
            ),
            (false, true) => self.push(
                &at!["tools", index, "list", "fields"],
                format!(
                    "{label}: the list does not say how a provider record pairs with an intent: \
                     it has neither `fields.idempotency_key` nor `match`"
                ),
                format!(
                    "when the effect carries the provider key (`{{idempotency_key}}` in its \
                     metadata, or the provider's echo of the Idempotency-Key header), add \
                     `idempotency_key: <pointer>` under `fields`; when the provider keeps no \
                     key, name the business fields that pair a record with an intent, e.g. \
                     {MATCH_EXAMPLE}"
                ),
            ),
            (true, false) => self.push(
                &at!["tools", index, "list", "match"],
                format!(
                    "{label}: the list pairs records with intents both by \
                     `fields.idempotency_key` and by `match`; it must say one way"
                ),
                "keep `fields.idempotency_key` when the provider keeps the provider key the \
                 gateway sends (it tells intents apart exactly, tenants included), and remove \
                 `match:`; keep `match` only for a provider that keeps no key",
            ),
            _ => {}
        }
    }

    /// A list says how its next page is found: by the cursor a page names (`next_cursor`),
    /// or after the last record while a flag says more follow (`has_more`). Exactly one.
    fn list_paging(&mut self, index: usize, label: &str, list: &ListRecords) {
        let (at, message) = match (&list.next_cursor, &list.has_more) {
            (Some(_), Some(_)) => (
                at!["tools", index, "list", "has_more"].to_vec(),
                format!(
                    "{label}: the list gives both `next_cursor` and `has_more`; it must say one \
                     way to find the next page"
                ),
            ),
            (None, None) => (
                at!["tools", index, "list"].to_vec(),
                format!(
                    "{label}: the list does not say how its next page is found: it has neither \
                     `next_cursor` nor `has_more`"
                ),
            ),
            _ => return,
        };
        self.push(
            &at,
            message,
            "give `next_cursor: <pointer to the next page's cursor>` when each page names the \
             next, or `has_more: <pointer to a boolean>` when the next page starts after the \
             last record's id (Stripe: `has_more: /has_more` with `starting_after: \"{cursor}\"` \
             in `query`), not both",
        );
    }

    /// Checks the `match` fields of a tool's `section` (`list` or `lookup`): each names an
    /// argument that exists and is not sensitive (the ledger and the sweeper have only its
    /// hash), and gets its comparison from the input schema when the config gives none.
    pub(super) fn match_fields(
        &mut self,
        index: usize,
        section: &'static str,
        label: &str,
        match_fields: &mut BTreeMap<String, MatchField>,
        input_schema: &Value,
        sensitive: Option<&[ArgumentPath]>,
    ) {
        if match_fields.len() > MATCH_FIELDS_MAX {
            self.push(
                &at!["tools", index, section, "match"],
                format!(
                    "{label}: `match` has {} fields; the limit is {MATCH_FIELDS_MAX}",
                    match_fields.len()
                ),
                "pair records by the few fields that identify an effect, such as the order and \
                 the amount",
            );
        }
        for (argument, field) in match_fields.iter_mut() {
            self.match_field(
                index,
                section,
                label,
                argument,
                field,
                input_schema,
                sensitive,
            );
        }
    }

    /// Checks one `match` field of a tool's `section`, and sets its comparison when the config
    /// gives none.
    #[allow(clippy::too_many_arguments)]
    fn match_field(
        &mut self,
        index: usize,
        section: &'static str,
        label: &str,
        argument: &str,
        field: &mut MatchField,
        input_schema: &Value,
        sensitive: Option<&[ArgumentPath]>,
    ) {
        let path: Vec<String> = argument.split('.').map(str::to_owned).collect();
        let schema = if self.arguments_known {
            match argument_schema(input_schema, &path) {
                Some(schema) => Some(schema),
                None => {
                    self.push_at_match_key(
                        index,
                        section,
                        argument,
                        format!(
                            "{label}: `match` names `{argument}`, which is not an argument \
                             of the tool"
                        ),
                        format!(
                            "name an argument as a key template does (`order_id`, or \
                             `customer.id` for a nested property); the arguments are {}",
                            super::names(super::tools::argument_names(input_schema))
                        ),
                    );
                    return;
                }
            }
        } else {
            None
        };
        if let Some(sensitive) =
            sensitive.and_then(|paths| paths.iter().find(|marked| marked.overlaps(&path)))
        {
            self.push_at_match_key(
                index,
                section,
                argument,
                format!(
                    "{label}: `match` uses sensitive argument `{sensitive}`; the ledger keeps \
                     only its keyed hash, so the {section} would never find the provider's \
                     value in it"
                ),
                "match by arguments that are not sensitive (an order, a reference, an \
                 amount), or send the provider key (`{idempotency_key}`) with the effect and \
                 prove records by it (`key:` of a lookup, `fields.idempotency_key` of a list)",
            );
        }
        self.pointer(
            &at!["tools", index, section, "match", argument, "record"],
            label,
            Some(&field.record),
        );
        let types = schema.map(schema_types).unwrap_or_default();
        let numeric = types
            .iter()
            .any(|kind| kind == "number" || kind == "integer");
        match field.compare {
            None => {
                field.compare = Some(if numeric {
                    MatchCompare::Decimal
                } else {
                    MatchCompare::Text
                });
            }
            Some(MatchCompare::Decimal)
                if !types.is_empty() && !numeric && !types.iter().any(|kind| kind == "string") =>
            {
                self.push(
                    &at!["tools", index, section, "match", argument, "compare"],
                    format!(
                        "{label}: `match.{argument}` compares as a decimal, but the input \
                         schema types `{argument}` as {}",
                        types.join(" or ")
                    ),
                    "compare numbers (or amounts written as strings) as `decimal`; use \
                     `compare: text` for anything else",
                );
            }
            Some(_) => {}
        }
        self.minor_units(
            &at!["tools", index, section, "match", argument, "minor_units"],
            label,
            &format!("match.{argument}.minor_units"),
            field.minor_units.as_deref(),
            input_schema,
        );
    }

    /// A `minor_units` (of a `match` field or of a list's amount) is an ISO 4217 code the
    /// table knows or an argument of the tool that holds one.
    pub(super) fn minor_units(
        &mut self,
        path: &[Segment<'_>],
        label: &str,
        field: &str,
        minor_units: Option<&str>,
        input_schema: &Value,
    ) {
        let Some(text) = minor_units else { return };
        match CurrencySource::parse(text) {
            Err(reason) => self.push(
                path,
                format!("{label}: `{field}` is `{}`: {reason}", text.escape_debug()),
                "write the currency's ISO 4217 code in capitals (`minor_units: USD`, `JPY`, \
                 `BHD`), or the argument that holds the intent's currency (`minor_units: \
                 currency`)",
            ),
            Ok(CurrencySource::Argument(argument))
                if self.arguments_known && argument_schema(input_schema, &argument).is_none() =>
            {
                let name = argument.join(".");
                self.push(
                    path,
                    format!(
                        "{label}: `{field}` takes the currency from `{name}`, which is neither \
                         a known ISO 4217 code nor an argument of the tool"
                    ),
                    format!(
                        "write a code in capitals (`USD`), or name the argument that holds the \
                         currency; the arguments are {}",
                        super::names(super::tools::argument_names(input_schema))
                    ),
                );
            }
            Ok(_) => {}
        }
    }

    /// Reports an error of the `match` field of `argument`, at its name (the argument is
    /// what is wrong, not where the record holds it).
    /// Reconciliation compares the provider's amount with an argument the ledger must keep
    /// as it was: a sensitive one is only a keyed hash there, so the amounts would never match.
    fn sensitive_amount(
        &mut self,
        index: usize,
        label: &str,
        sensitive: &[ArgumentPath],
        list: &ListRecords,
    ) {
        if list.fields.amount.is_none() {
            return;
        }
        let pointer = list.fields.amount_argument.as_deref().unwrap_or("/amount");
        let path: Vec<String> = pointer_path(&[], pointer);
        if let Some(argument) = sensitive.iter().find(|argument| argument.overlaps(&path)) {
            self.push(
                &at!["tools", index, "list", "fields"],
                format!(
                    "{label}: reconciliation compares the provider's amount with argument \
                     `{argument}` (`amount_argument` {pointer}), which is sensitive: the \
                     ledger keeps only its keyed hash, so the amounts would never match"
                ),
                "remove `sensitive: true` from the amount, or remove `fields.amount` so that \
                 reconciliation compares no amounts",
            );
        }
    }

    fn push_at_match_key(
        &mut self,
        index: usize,
        section: &'static str,
        argument: &str,
        message: String,
        fix: impl Into<String>,
    ) {
        let at = self
            .map
            .key(&at!["tools", index, section, "match", argument]);
        self.errors.push(at, message, fix);
    }
}

/// The schema of the argument at `path`, following `properties` down from the input schema.
fn argument_schema<'a>(input_schema: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(input_schema, |schema, segment| {
        schema.get("properties")?.get(segment)
    })
}

/// The types a schema declares (`type: number`, `type: [string, number]`); empty when it
/// declares none.
fn schema_types(schema: &Value) -> Vec<String> {
    match schema.get("type") {
        Some(Value::String(kind)) => vec![kind.clone()],
        Some(Value::Array(kinds)) => kinds
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    }
}
