//! Matching, without I/O: how a provider record pairs with an intent ([`Pairing`]: by the
//! intent key sent with the effect, or by business fields), the compact index of a window's
//! intents by that pairing value, how a record is claimed by one of them, and what each
//! difference between the two is (the [`MismatchKind`]s of the table in the `reconcile`
//! module). What is read, resolved, stored and told is the run's, in the modules around this
//! one; here only what decides.
//!
//! Pairing is count-based. Every intent of the window with one pairing value (one key seen
//! by several tenants, or several intents with the same business fields) is in one group,
//! ordered by how much its status expects a record: done first, then unsettled (unknown, in
//! flight, pending), then those the model was told did not happen (rejected, not executed),
//! oldest first within each. Records of that value claim the group's intents in that order,
//! one each; a record beyond the group's size goes to its first intent, which then has more
//! than one: a duplicate. So N intents and M records with the same value always make
//! min(N, M) pairs, and which of two alike intents a record is given never changes what is
//! reported: an unknown intent is found only by a record no done intent needs, and a
//! rejected one only by a record no other intent needs.

use std::collections::{BTreeMap, HashMap};

use intentgate_core::currency::{CurrencySource, to_minor_units};
use intentgate_core::key::provider_key;
use intentgate_core::placeholder::{Steps, resolve};
use intentgate_core::{Decimal, IntentStatus};
use intentgate_http::ListedRecord;
use intentgate_http::spec::MatchField;
pub use intentgate_http::verify::MatchFields;
use intentgate_ledger::{IntentId, IntentRecord};
use serde::Serialize;
use serde_json::Value;

use crate::Severity;

/// What a mismatch is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MismatchKind {
    UnknownFound,
    UnknownMissing,
    NoIntent,
    MissingRecord,
    Duplicate,
    Amount,
    EffectDespiteStatus,
}

impl MismatchKind {
    pub const ALL: [MismatchKind; 7] = [
        MismatchKind::UnknownFound,
        MismatchKind::UnknownMissing,
        MismatchKind::NoIntent,
        MismatchKind::MissingRecord,
        MismatchKind::Duplicate,
        MismatchKind::Amount,
        MismatchKind::EffectDespiteStatus,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            MismatchKind::UnknownFound => "unknown_found",
            MismatchKind::UnknownMissing => "unknown_missing",
            MismatchKind::NoIntent => "no_intent",
            MismatchKind::MissingRecord => "missing_record",
            MismatchKind::Duplicate => "duplicate",
            MismatchKind::Amount => "amount",
            MismatchKind::EffectDespiteStatus => "effect_despite_status",
        }
    }

    pub fn severity(self) -> Severity {
        match self {
            MismatchKind::UnknownFound => Severity::Info,
            MismatchKind::UnknownMissing
            | MismatchKind::NoIntent
            | MismatchKind::MissingRecord
            | MismatchKind::Amount => Severity::Warning,
            MismatchKind::Duplicate | MismatchKind::EffectDespiteStatus => Severity::Critical,
        }
    }
}

/// One difference between the ledger and the provider, with who was affected.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Mismatch {
    pub tool: String,
    pub kind: MismatchKind,
    pub severity: Severity,
    pub intent_id: Option<IntentId>,
    pub tenant: Option<String>,
    pub intent_key: Option<String>,
    /// The intent's status when it was compared (before any resolution here).
    pub intent_status: Option<IntentStatus>,
    /// The provider's ids of the records involved.
    pub external_ids: Vec<String>,
    /// Who was affected, as the provider record names them (a customer or an order).
    pub subject: Option<String>,
    /// The intent's arguments, which name who was affected on the ledger's side.
    pub arguments: Option<Value>,
    pub intent_amount: Option<String>,
    pub provider_amount: Option<String>,
    /// True when reconciliation settled the intent itself (`unknown_found`).
    pub resolved: bool,
    /// What was found and what to do, for a human.
    pub detail: String,
}

/// How a tool's provider records pair with its intents.
#[derive(Debug, Clone, PartialEq)]
pub enum Pairing {
    /// By the provider key the gateway sent with each effect (`list.fields.idempotency_key`):
    /// scoped by tenant and tool, so one tenant's record never explains another's intent.
    ProviderKey,
    /// By business fields (`list.match`), for a provider that keeps no key.
    Fields(MatchFields),
}

impl Pairing {
    /// The pairing a `list` configures: its `match` fields when it has any, else the
    /// provider key.
    pub fn of_match(match_fields: &BTreeMap<String, MatchField>) -> Pairing {
        if match_fields.is_empty() {
            Pairing::ProviderKey
        } else {
            Pairing::Fields(MatchFields::new(match_fields))
        }
    }

    /// The value an intent pairs by: its provider key (of its current epoch: an earlier
    /// epoch's attempt was refused, so it made no record), or its business fields.
    pub fn of_intent(&self, intent: &IntentRecord) -> String {
        match self {
            Pairing::ProviderKey => {
                provider_key(&intent.tenant, &intent.tool, &intent.key, intent.epoch)
            }
            Pairing::Fields(fields) => fields.of_arguments(&intent.arguments),
        }
    }
}

/// How much an intent of `status` expects a provider record: records of a pairing value
/// claim the lowest first.
fn claim_rank(status: IntentStatus) -> u8 {
    match status {
        IntentStatus::Done => 0,
        IntentStatus::Unknown | IntentStatus::InFlight | IntentStatus::Pending => 1,
        IntentStatus::Rejected | IntentStatus::NotExecuted => 2,
    }
}

/// One intent of the window, as compactly as matching allows (arguments and results are
/// read again, by id, only for the intents that end up in a mismatch).
pub(super) struct Entry {
    pub(super) id: IntentId,
    tenant: u32,
    pub(super) status: IntentStatus,
    pub(super) updated_ms: i64,
    pub(super) amount: Option<Decimal>,
    /// Provider records matched to it so far.
    pub(super) records: u32,
    first_record: Option<Box<str>>,
    first_subject: Option<Box<str>>,
    /// The next intent with the same pairing value, in claiming order once the index is
    /// sealed (`NONE` ends the chain).
    next_same_key: u32,
}

const NONE: u32 = u32::MAX;

/// The intents that records of one pairing value may claim: a chain through the entries.
struct Group {
    /// The first intent, which records beyond the group's size go to.
    head: u32,
    /// The next intent no record has claimed yet (`NONE` once all have one).
    unclaimed: u32,
}

/// The intents of one tool in the window, by pairing value (the intent key, or the business
/// fields' value).
#[derive(Default)]
pub(super) struct Index {
    pub(super) entries: Vec<Entry>,
    by_key: HashMap<Box<str>, Group>,
    tenants: Vec<String>,
    /// The ids of an intent's records after its first, by entry: duplicates.
    extra_records: HashMap<u32, Vec<String>>,
    /// The first record of an `unknown` intent, kept whole: it may become its result.
    found_records: HashMap<u32, Value>,
}

impl Index {
    fn tenant_index(&mut self, tenant: &str) -> u32 {
        match self.tenants.iter().position(|known| known == tenant) {
            Some(index) => index as u32,
            None => {
                self.tenants.push(tenant.to_owned());
                (self.tenants.len() - 1) as u32
            }
        }
    }

    /// Adds `intent`, whose records have the pairing value `key`.
    pub(super) fn insert(&mut self, intent: &IntentRecord, key: &str, amount: Option<&AmountRule>) {
        let tenant = self.tenant_index(&intent.tenant);
        let amount = amount.and_then(|rule| rule.expected(&intent.arguments));
        let index = self.entries.len() as u32;
        let next_same_key = match self.by_key.get_mut(key) {
            // Another intent with the same value (another tenant's, or alike business
            // fields): chain them.
            Some(group) => std::mem::replace(&mut group.head, index),
            None => {
                self.by_key.insert(
                    key.into(),
                    Group {
                        head: index,
                        unclaimed: NONE,
                    },
                );
                NONE
            }
        };
        self.entries.push(Entry {
            id: intent.id,
            tenant,
            status: intent.status,
            updated_ms: intent.updated_ms,
            amount,
            records: 0,
            first_record: None,
            first_subject: None,
            next_same_key,
        });
    }

    /// Orders every group for claiming (see the module's note), once every intent of the
    /// window is in. Records are claimed only after this.
    pub(super) fn seal(&mut self) {
        let mut members = Vec::new();
        for group in self.by_key.values_mut() {
            members.clear();
            let mut index = group.head;
            while index != NONE {
                members.push(index);
                index = self.entries[index as usize].next_same_key;
            }
            members.sort_by_key(|&index| (claim_rank(self.entries[index as usize].status), index));
            for pair in members.windows(2) {
                self.entries[pair[0] as usize].next_same_key = pair[1];
            }
            let last = *members.last().expect("a group has an intent");
            self.entries[last as usize].next_same_key = NONE;
            group.head = members[0];
            group.unclaimed = members[0];
        }
    }

    /// The intent a record of pairing value `key` belongs to: the group's next unclaimed
    /// intent, else (a record more than the group has intents) its first.
    pub(super) fn claim(&mut self, key: &str) -> Option<u32> {
        let group = self.by_key.get_mut(key)?;
        if group.unclaimed == NONE {
            return Some(group.head);
        }
        let claimed = group.unclaimed;
        group.unclaimed = self.entries[claimed as usize].next_same_key;
        Some(claimed)
    }

    /// Counts `record` against entry `claimed`, and keeps what the end of the run needs:
    /// the first record's id and subject, the ids of the others, and an unknown intent's
    /// first record. Returns the mismatch of amounts, if any.
    pub(super) fn record(
        &mut self,
        tool: &str,
        claimed: u32,
        key: Option<&str>,
        record: &ListedRecord,
    ) -> Option<Mismatch> {
        let entry = &mut self.entries[claimed as usize];
        entry.records += 1;
        if entry.records == 1 {
            entry.first_record = Some(record.external_id.as_str().into());
            entry.first_subject = record.subject.as_deref().map(Into::into);
            if entry.status == IntentStatus::Unknown {
                self.found_records.insert(claimed, record.raw.clone());
            }
        } else {
            self.extra_records
                .entry(claimed)
                .or_default()
                .push(record.external_id.clone());
        }
        amount_differs(
            tool,
            entry.amount.as_ref(),
            record,
            entry.id,
            key,
            &self.tenants[entry.tenant as usize],
            entry.status,
        )
    }

    /// The provider's ids of entry `position`'s records, the first first.
    pub(super) fn external_ids(&self, position: u32) -> Vec<String> {
        let entry = &self.entries[position as usize];
        let mut external_ids: Vec<String> =
            entry.first_record.iter().map(|id| id.to_string()).collect();
        external_ids.extend(
            self.extra_records
                .get(&position)
                .into_iter()
                .flatten()
                .cloned(),
        );
        external_ids
    }

    /// Who entry `position`'s first record names as affected.
    pub(super) fn subject(&self, position: u32) -> Option<String> {
        self.entries[position as usize]
            .first_subject
            .as_deref()
            .map(str::to_owned)
    }

    /// The first record of the unknown entry `position`, taken (it is kept once).
    pub(super) fn take_found_record(&mut self, position: u32) -> Option<Value> {
        self.found_records.remove(&position)
    }
}

/// What the end of matching says of an intent of the window that the provider's records
/// did not explain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Nothing to report.
    Fine,
    /// `unknown` with no record yet, inside the grace period.
    Pending,
    /// A difference, and whether its records make it a duplicate too.
    Mismatch {
        kind: Option<MismatchKind>,
        duplicate: bool,
    },
}

/// The verdict on `entry` once every record was matched, `now_ms` being the run's now.
pub(super) fn verdict(entry: &Entry, now_ms: i64, unknown_grace_ms: i64) -> Verdict {
    let records = entry.records;
    let kind = match (entry.status, records) {
        (IntentStatus::Done, 0) => Some(MismatchKind::MissingRecord),
        (IntentStatus::Unknown, 0) => {
            if now_ms - entry.updated_ms >= unknown_grace_ms {
                Some(MismatchKind::UnknownMissing)
            } else {
                return Verdict::Pending;
            }
        }
        (IntentStatus::Unknown, _) => Some(MismatchKind::UnknownFound),
        (IntentStatus::Rejected | IntentStatus::NotExecuted, 1..) => {
            Some(MismatchKind::EffectDespiteStatus)
        }
        _ => None,
    };
    let duplicate = records > 1;
    if kind.is_none() && !duplicate {
        return Verdict::Fine;
    }
    Verdict::Mismatch { kind, duplicate }
}

/// A provider record no intent explains.
pub(super) fn no_intent(tool: &str, record: &ListedRecord, pairing: &Pairing) -> Mismatch {
    let detail = match (&record.provider_key, pairing) {
        (_, Pairing::Fields(fields)) => format!(
            "the provider has {} ({}), and no intent of the window has those {}: made without the gateway (a direct API call, a dashboard, another service), or a late re-send of an intent first seen before the window, which a provider that keeps no key can't tell apart",
            record.external_id,
            fields.describe_record(&record.raw),
            fields.arguments()
        ),
        (None, Pairing::ProviderKey) => format!(
            "the provider has {} with no provider key: it was made without the gateway (a direct API call, a dashboard, another service)",
            record.external_id
        ),
        (Some(key), Pairing::ProviderKey) => format!(
            "the provider has {} with provider key {key}, which no intent of the ledger was sent with: made around the gateway, or purged from the ledger",
            record.external_id
        ),
    };
    Mismatch {
        tool: tool.to_owned(),
        kind: MismatchKind::NoIntent,
        severity: MismatchKind::NoIntent.severity(),
        intent_id: None,
        tenant: None,
        intent_key: record.intent_key.clone(),
        intent_status: None,
        external_ids: vec![record.external_id.clone()],
        subject: record.subject.clone(),
        arguments: None,
        intent_amount: None,
        provider_amount: record.amount.clone(),
        resolved: false,
        detail,
    }
}

/// Which argument holds an intent's amount, and in which unit the provider's records keep
/// it.
#[derive(Debug, Clone, PartialEq)]
pub struct AmountRule {
    /// JSON pointer into the intent's arguments (`/amount`).
    pub argument: String,
    /// The records keep the amount as an integer in this currency's minor units (Stripe's
    /// `4900` for 49.00 USD); `None`: in the same unit as the argument.
    pub minor_units: Option<CurrencySource>,
}

impl AmountRule {
    /// The amount a record of the intent with `arguments` should hold, in the record's unit:
    /// the argument's exact decimal, or that decimal in minor units (`49`, `49.0` and
    /// `"49.00"` USD are `4900`). `None` when the arguments have no decimal there, or (minor
    /// units) no known currency, or more places than the currency has: the gateway refuses
    /// such a call before it is sent, so no record of it can exist to compare.
    pub fn expected(&self, arguments: &Value) -> Option<Decimal> {
        let value = arguments.pointer(&self.argument)?;
        let Some(source) = &self.minor_units else {
            return Decimal::from_json(value).ok();
        };
        let currency = source
            .argument()
            .and_then(|path| resolve(arguments, path, Steps::FieldsOnly));
        let (code, exponent) = source.resolve(currency).ok()?;
        Decimal::parse(&to_minor_units(value, &code, exponent).ok()?).ok()
    }
}

/// The mismatch of a record whose amount is not the intent's, if it is not.
pub(super) fn amount_differs(
    tool: &str,
    expected: Option<&Decimal>,
    record: &ListedRecord,
    intent_id: IntentId,
    key: Option<&str>,
    tenant: &str,
    status: IntentStatus,
) -> Option<Mismatch> {
    let expected = expected?;
    let text = record.amount.as_deref()?;
    if Decimal::parse(text).is_ok_and(|actual| actual == *expected) {
        return None;
    }
    Some(Mismatch {
        tool: tool.to_owned(),
        kind: MismatchKind::Amount,
        severity: MismatchKind::Amount.severity(),
        intent_id: Some(intent_id),
        tenant: Some(tenant.to_owned()),
        intent_key: key.map(str::to_owned),
        intent_status: Some(status),
        external_ids: vec![record.external_id.clone()],
        subject: record.subject.clone(),
        arguments: None,
        intent_amount: Some(expected.to_string()),
        provider_amount: Some(text.to_owned()),
        resolved: false,
        detail: format!(
            "the intent asked for {expected}, the provider's record {} says {text}",
            record.external_id
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use intentgate_http::spec::MatchCompare;

    /// `order_id` as text and `amount` as a decimal, as a refunds provider without metadata
    /// is configured.
    fn refund_fields() -> MatchFields {
        MatchFields::new(&BTreeMap::from([
            (
                "order_id".to_owned(),
                MatchField {
                    record: "/order_id".to_owned(),
                    compare: Some(MatchCompare::Text),
                    minor_units: None,
                },
            ),
            (
                "amount".to_owned(),
                MatchField {
                    record: "/amount".to_owned(),
                    compare: Some(MatchCompare::Decimal),
                    minor_units: None,
                },
            ),
        ]))
    }

    fn intent(id: IntentId, status: IntentStatus, order: &str, amount: &str) -> IntentRecord {
        let arguments: Value =
            serde_json::from_str(&format!(r#"{{"order_id": "{order}", "amount": {amount}}}"#))
                .unwrap();
        IntentRecord {
            id,
            tenant: "default".to_owned(),
            tool: "refund_order".to_owned(),
            key: format!("refund:{order}:{id}"),
            fingerprint: String::new(),
            arguments,
            status,
            attempt: 1,
            epoch: 0,
            lease_owner: None,
            lease_expires_ms: None,
            result: None,
            external_id: None,
            resolved_by: None,
            call_count: 1,
            first_seen_ms: 0,
            last_seen_ms: 0,
            updated_ms: 0,
            last_lookup_ms: None,
            resend_stopped: None,
        }
    }

    fn record(id: &str, order: &str, amount: Value) -> ListedRecord {
        ListedRecord {
            provider_key: None,
            intent_key: None,
            external_id: id.to_owned(),
            amount: None,
            subject: None,
            raw: serde_json::json!({"id": id, "order_id": order, "amount": amount}),
        }
    }

    /// `count` refunds of "10.00" on order 8812.
    fn refunds_of_ten(count: usize) -> Vec<ListedRecord> {
        (1..=count)
            .map(|number| record(&format!("re_{number}"), "8812", Value::from("10.00")))
            .collect()
    }

    /// An index of `intents` paired by the refund fields, sealed, with `records` claimed;
    /// then each entry's verdict, in the order of `intents`.
    fn verdicts(intents: &[IntentRecord], records: &[ListedRecord]) -> Vec<Verdict> {
        let fields = refund_fields();
        let mut index = Index::default();
        for intent in intents {
            index.insert(intent, &fields.of_arguments(&intent.arguments), None);
        }
        index.seal();
        for record in records {
            match index.claim(&fields.of_record(&record.raw)) {
                Some(claimed) => {
                    index.record("refund_order", claimed, None, record);
                }
                None => panic!("record {} paired with no intent", record.external_id),
            }
        }
        index
            .entries
            .iter()
            .map(|entry| verdict(entry, 0, 0))
            .collect()
    }

    fn mismatch(kind: MismatchKind) -> Verdict {
        Verdict::Mismatch {
            kind: Some(kind),
            duplicate: false,
        }
    }

    const DUPLICATE: Verdict = Verdict::Mismatch {
        kind: None,
        duplicate: true,
    };

    #[test]
    fn decimals_pair_by_exact_value_never_by_a_rounded_one() {
        let fields = refund_fields();
        let intent = fields.of_arguments(
            &serde_json::from_str(r#"{"order_id": "8812", "amount": 10.10}"#).unwrap(),
        );
        for same in [
            json_number("10.1"),
            json_number("10.10"),
            Value::from("10.10"),
            Value::from(" 1.01e1"),
        ] {
            let record = serde_json::json!({"order_id": "8812", "amount": same});
            assert_eq!(fields.of_record(&record), intent, "{record}");
        }
        for other in [
            json_number("10.11"),
            Value::from("10.11"),
            // A float would call these equal to 10.1.
            json_number("10.100000000000000001"),
            Value::from("10.09999999999999999999"),
            Value::from("ten"),
            Value::Null,
        ] {
            let record = serde_json::json!({"order_id": "8812", "amount": other});
            assert_ne!(fields.of_record(&record), intent, "{record}");
        }
        let no_amount = serde_json::json!({"order_id": "8812"});
        assert_ne!(fields.of_record(&no_amount), intent);
    }

    fn json_number(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn text_fields_pair_by_their_text_and_values_of_other_fields_never_run_together() {
        let fields = refund_fields();
        let intent = fields.of_arguments(&serde_json::json!({"order_id": "8812", "amount": "1"}));
        // An order id written as a number is the same text.
        let record = serde_json::json!({"order_id": 8812, "amount": "1.00"});
        assert_eq!(fields.of_record(&record), intent);
        let record = serde_json::json!({"order_id": "8812 ", "amount": "1.00"});
        assert_ne!(fields.of_record(&record), intent);
        // Field values are kept apart: no separator inside a value can move one into the
        // next field.
        let left = fields.of_record(&serde_json::json!({"order_id": "a\",\"b", "amount": "1"}));
        let right = fields.of_record(&serde_json::json!({"order_id": "a", "amount": "b"}));
        assert_ne!(left, right);
    }

    #[test]
    fn nested_arguments_are_read_through_their_dotted_name() {
        let fields = MatchFields::new(&BTreeMap::from([(
            "customer.id".to_owned(),
            MatchField {
                record: "/customer".to_owned(),
                compare: Some(MatchCompare::Text),
                minor_units: None,
            },
        )]));
        let intent = fields.of_arguments(&serde_json::json!({"customer": {"id": "cus_1"}}));
        assert_eq!(
            fields.of_record(&serde_json::json!({"customer": "cus_1"})),
            intent
        );
        assert_eq!(
            fields.describe_record(&serde_json::json!({"customer": "cus_1"})),
            "customer.id \"cus_1\""
        );
    }

    #[test]
    fn one_record_per_intent_is_fine_and_a_second_for_one_intent_is_a_duplicate() {
        let intents = [intent(1, IntentStatus::Done, "8812", "10.10")];
        let one = [record("re_1", "8812", Value::from("10.1"))];
        assert_eq!(verdicts(&intents, &one), [Verdict::Fine]);
        let two = [
            record("re_1", "8812", Value::from("10.10")),
            record("re_2", "8812", json_number("10.1")),
        ];
        assert_eq!(verdicts(&intents, &two), [DUPLICATE]);
    }

    #[test]
    fn alike_intents_are_paired_by_count_whatever_order_the_records_come_in() {
        // Two refunds of 10.00 on one order, asked for as two intents (the application's
        // intent ids): two records are no duplicate, three are one.
        let intents = [
            intent(1, IntentStatus::Done, "8812", "10.00"),
            intent(2, IntentStatus::Done, "8812", "10"),
        ];
        assert_eq!(
            verdicts(&intents, &refunds_of_ten(2)),
            [Verdict::Fine, Verdict::Fine]
        );
        assert_eq!(
            verdicts(&intents, &refunds_of_ten(3)),
            [DUPLICATE, Verdict::Fine]
        );
        assert_eq!(
            verdicts(&intents, &refunds_of_ten(1)),
            [Verdict::Fine, mismatch(MismatchKind::MissingRecord)]
        );
    }

    #[test]
    fn records_go_to_done_intents_before_unknown_ones_and_to_rejected_ones_last() {
        // Inserted with the rejected and unknown intents first, so that insertion order
        // would give them the record.
        let intents = [
            intent(1, IntentStatus::Rejected, "8812", "10.00"),
            intent(2, IntentStatus::Unknown, "8812", "10.00"),
            intent(3, IntentStatus::Done, "8812", "10.00"),
        ];
        assert_eq!(
            verdicts(&intents, &refunds_of_ten(1)),
            [
                Verdict::Fine,
                mismatch(MismatchKind::UnknownMissing),
                Verdict::Fine
            ]
        );
        // A second record is one no done intent needs: the unknown intent happened.
        assert_eq!(
            verdicts(&intents, &refunds_of_ten(2)),
            [
                Verdict::Fine,
                mismatch(MismatchKind::UnknownFound),
                Verdict::Fine
            ]
        );
        // A third is one only the rejected intent could explain.
        assert_eq!(
            verdicts(&intents, &refunds_of_ten(3)),
            [
                mismatch(MismatchKind::EffectDespiteStatus),
                mismatch(MismatchKind::UnknownFound),
                Verdict::Fine
            ]
        );
    }

    #[test]
    fn another_amount_or_order_pairs_with_nothing() {
        let fields = refund_fields();
        let mut index = Index::default();
        let done = intent(1, IntentStatus::Done, "8812", "10.10");
        index.insert(&done, &fields.of_arguments(&done.arguments), None);
        index.seal();
        for other in [
            record("re_1", "8812", Value::from("10.11")),
            record("re_2", "8813", Value::from("10.10")),
        ] {
            assert_eq!(
                index.claim(&fields.of_record(&other.raw)),
                None,
                "{other:?}"
            );
        }
        assert_eq!(
            verdict(&index.entries[0], 0, 0),
            mismatch(MismatchKind::MissingRecord)
        );
        let detail = no_intent(
            "refund_order",
            &record("re_1", "8812", Value::from("10.11")),
            &Pairing::Fields(fields),
        )
        .detail;
        assert!(
            detail.contains(r#"amount "10.11", order_id "8812""#),
            "{detail}"
        );
    }

    #[test]
    fn a_records_amount_in_minor_units_is_compared_exactly_with_the_intents_decimal() {
        let usd = AmountRule {
            argument: "/amount".to_owned(),
            minor_units: Some(CurrencySource::parse("USD").unwrap()),
        };
        let pairing = Pairing::ProviderKey;
        let with_amount = |amount: &str| {
            let mut record = record("re_1", "8812", Value::Null);
            record.amount = Some(amount.to_owned());
            record
        };
        for (intent_amount, record_amount, differs) in [
            ("49", "4900", false),
            ("49.0", "4900", false),
            ("\"49.00\"", "4900", false),
            ("49", "4901", true),
            ("49", "49", true),
            ("0.05", "5", false),
        ] {
            let mut index = Index::default();
            let done = intent(1, IntentStatus::Done, "8812", intent_amount);
            index.insert(&done, &pairing.of_intent(&done), Some(&usd));
            index.seal();
            let mismatch = index.record("refund_order", 0, None, &with_amount(record_amount));
            assert_eq!(
                mismatch.is_some(),
                differs,
                "{intent_amount} vs {record_amount}: {mismatch:?}"
            );
            if let Some(mismatch) = mismatch {
                assert_eq!(mismatch.kind, MismatchKind::Amount);
                assert_eq!(mismatch.intent_amount.as_deref(), Some("4900"));
            }
        }
        // Zero places, and a currency taken from the intent's own argument.
        let by_argument = AmountRule {
            argument: "/amount".to_owned(),
            minor_units: Some(CurrencySource::parse("currency").unwrap()),
        };
        let yen = serde_json::json!({"amount": 4900, "currency": "jpy"});
        assert_eq!(by_argument.expected(&yen), Decimal::parse("4900").ok());
        let dinar = serde_json::json!({"amount": "1.234", "currency": "BHD"});
        assert_eq!(by_argument.expected(&dinar), Decimal::parse("1234").ok());
        // Never rounded into an amount a record could hold.
        let precise = serde_json::json!({"amount": "49.001", "currency": "USD"});
        assert_eq!(by_argument.expected(&precise), None);
    }

    #[test]
    fn by_provider_key_two_tenants_with_one_intent_key_never_share_a_record() {
        let mut index = Index::default();
        let mut first = intent(1, IntentStatus::Done, "8812", "10");
        first.key = "refund:8812:10.00".to_owned();
        let mut second = first.clone();
        second.id = 2;
        second.tenant = "other".to_owned();
        let pairing = Pairing::ProviderKey;
        for intent in [&first, &second] {
            index.insert(intent, &pairing.of_intent(intent), None);
        }
        index.seal();
        // Two records of the other tenant's key: both its own (a duplicate), none the first's.
        let other = pairing.of_intent(&second);
        let claims: Vec<Option<u32>> = (0..2).map(|_| index.claim(&other)).collect();
        assert_eq!(claims, [Some(1), Some(1)]);
        assert_eq!(
            index.claim("refund:8812:10.00"),
            None,
            "the bare intent key pairs nothing"
        );
    }
}
