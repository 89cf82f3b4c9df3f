//! Matching, without I/O: the compact index of a window's intents by key, how a provider
//! record is claimed by one of them, and what each difference between the two is (the
//! [`MismatchKind`]s of the table in the `reconcile` module). What is read, resolved, stored
//! and told is the run's, in the modules around this one; here only what decides.

use std::collections::HashMap;

use intentgate_core::{Decimal, IntentStatus};
use intentgate_http::ListedRecord;
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
    /// The next intent of another tenant with the same key (`NONE` ends the chain).
    next_same_key: u32,
}

const NONE: u32 = u32::MAX;

/// The intents of one tool in the window, by key.
#[derive(Default)]
pub(super) struct Index {
    pub(super) entries: Vec<Entry>,
    by_key: HashMap<Box<str>, u32>,
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

    pub(super) fn insert(&mut self, intent: &IntentRecord, amount_argument: Option<&str>) {
        let tenant = self.tenant_index(&intent.tenant);
        let amount = amount_argument
            .and_then(|pointer| intent.arguments.pointer(pointer))
            .and_then(|value| Decimal::from_json(value).ok());
        let index = self.entries.len() as u32;
        let next_same_key = match self.by_key.get_mut(intent.key.as_str()) {
            // Another tenant's intent with the same key: chain them.
            Some(head) => std::mem::replace(head, index),
            None => {
                self.by_key.insert(intent.key.as_str().into(), index);
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

    /// The intent a record of `key` belongs to: the first of the key's tenants without a
    /// record yet, else the first.
    pub(super) fn claim(&self, key: &str) -> Option<u32> {
        let head = *self.by_key.get(key)?;
        let mut index = head;
        while index != NONE {
            if self.entries[index as usize].records == 0 {
                return Some(index);
            }
            index = self.entries[index as usize].next_same_key;
        }
        Some(head)
    }

    /// Counts `record` against entry `claimed`, and keeps what the end of the run needs:
    /// the first record's id and subject, the ids of the others, and an unknown intent's
    /// first record. Returns the mismatch of amounts, if any.
    pub(super) fn record(
        &mut self,
        tool: &str,
        claimed: u32,
        key: &str,
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
pub(super) fn no_intent(tool: &str, record: &ListedRecord) -> Mismatch {
    let detail = match &record.intent_key {
        None => format!(
            "the provider has {} with no intent key: it was made without the gateway (a direct API call, a dashboard, another service)",
            record.external_id
        ),
        Some(key) => format!(
            "the provider has {} with intent key {key}, which the ledger does not know: made around the gateway, or purged from the ledger",
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

/// The mismatch of a record whose amount is not the intent's, if it is not.
pub(super) fn amount_differs(
    tool: &str,
    expected: Option<&Decimal>,
    record: &ListedRecord,
    intent_id: IntentId,
    key: &str,
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
        intent_key: Some(key.to_owned()),
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
