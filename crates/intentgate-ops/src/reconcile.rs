//! Reconciliation: the ledger against the provider's own records (SPEC section 8).
//!
//! For one tool and one window, [`reconcile_tool`] reads the tool's intents first seen in
//! the window into a compact index (a few dozen bytes per intent: no arguments, no results),
//! then streams the provider's records page by page through a [`RecordSource`], matching
//! each by the intent key the gateway sent with the effect. Only one provider page is held
//! at a time, so memory is bounded by the number of intents in the window, whatever the
//! number of provider records. What does not match is a [`Mismatch`]:
//!
//! | kind | what it means | severity |
//! |---|---|---|
//! | `unknown_found` | an `unknown` intent the provider has: resolved to `done` here | info |
//! | `unknown_missing` | an `unknown` intent the provider lacks, older than the grace period: the owner decides | warning |
//! | `no_intent` | a provider record no intent explains: someone bypassed the gateway | warning |
//! | `missing_record` | a `done` intent with no provider record | warning |
//! | `duplicate` | more than one provider record for one intent: a customer affected twice | critical |
//! | `amount` | the provider's amount differs from the intent's | warning |
//! | `effect_despite_status` | the model was told `rejected` or `not_executed`, and the provider has the effect | critical |
//!
//! A record whose intent was first seen before the window (a late re-send) is matched by a
//! point lookup of its key, so it is not mistaken for a bypass. When a provider page can't
//! be read after retries, the tool's run stops with an error and draws no conclusion about
//! missing records: an incomplete listing proves nothing is missing.
//!
//! [`Reconciler`] runs every tool of a config, stores the run in the ledger, counts the
//! mismatches in the metrics and sends each owner one notice per run.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use intentgate_config::LoadedConfig;
use intentgate_core::{Decimal, Effect, IntentStatus, ToolDefinition};
use intentgate_gate::{Clock, Metrics, SystemClock};
use intentgate_http::{HttpUpstream, ListedRecord, RecordPager};
use intentgate_ledger::{
    IntentFilter, IntentId, IntentRecord, Ledger, LedgerError, Order, ReconciliationRun, Resolve,
    StoredMismatch,
};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::Severity;
use crate::notify::{Notice, Notifier};

/// Intents read from the ledger per page.
pub const LEDGER_PAGE: u32 = 10_000;
/// Provider records asked for per page (the mock and Stripe cap pages at 100 to 1000).
pub const PROVIDER_PAGE: u32 = 1_000;
/// Attempts at one provider page before the tool's run stops with an error.
pub const PAGE_ATTEMPTS: u32 = 4;
/// Pause before the first retry of a page; doubles per retry.
pub const PAGE_BACKOFF: Duration = Duration::from_millis(500);
/// Mismatches a report lists. Beyond it they are counted, not listed: a run that finds a
/// hundred thousand is an outage, and its first hundred thousand name the pattern.
pub const MISMATCHES_LISTED_MAX: usize = 100_000;
/// Mismatches one owner's notice carries (the rest are counted in it, and listed in the
/// report and the ledger).
pub const NOTICE_MISMATCHES_MAX: usize = 500;
/// Mismatches stored in the ledger per run.
pub const MISMATCHES_STORED_MAX: usize = 10_000;
/// Longest text of a provider's intent key that is looked up in the ledger; longer ones
/// can't be intent keys (the ledger's limit is 512 bytes).
const KEY_LOOKUP_LENGTH_MAX: usize = 512;

/// One page at a time of a provider's records.
#[async_trait]
pub trait RecordSource: Send {
    /// The next page, or `None` after the last. An error leaves the source where it was:
    /// calling again asks for the same page.
    async fn next_page(&mut self) -> Result<Option<Vec<ListedRecord>>, String>;
}

#[async_trait]
impl RecordSource for RecordPager {
    async fn next_page(&mut self) -> Result<Option<Vec<ListedRecord>>, String> {
        RecordPager::next_page(self)
            .await
            .map_err(|error| error.to_string())
    }
}

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

/// One tool's part of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolReport {
    pub tool: String,
    pub owner: Option<String>,
    pub intents_checked: u64,
    pub records_checked: u64,
    /// Unknown intents with no record yet, still inside the grace period.
    pub unknown_pending: u64,
    /// Mismatches by kind.
    pub mismatches: BTreeMap<MismatchKind, u64>,
    /// Why the tool could not be reconciled, if it could not (no list, a provider error).
    pub error: Option<String>,
}

impl ToolReport {
    fn new(tool: &str, owner: Option<&str>) -> ToolReport {
        ToolReport {
            tool: tool.to_owned(),
            owner: owner.map(str::to_owned),
            intents_checked: 0,
            records_checked: 0,
            unknown_pending: 0,
            mismatches: BTreeMap::new(),
            error: None,
        }
    }
}

/// A whole run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// The run's id in the ledger, once stored.
    pub run_id: Option<i64>,
    pub actor: String,
    pub since_ms: i64,
    pub until_ms: i64,
    pub started_ms: i64,
    pub finished_ms: i64,
    pub tools: Vec<ToolReport>,
    /// Every mismatch, up to [`MISMATCHES_LISTED_MAX`].
    pub mismatches: Vec<Mismatch>,
    pub mismatches_total: u64,
    /// Mismatches counted but not listed (beyond [`MISMATCHES_LISTED_MAX`]).
    pub mismatches_not_listed: u64,
    pub critical: u64,
}

impl Report {
    /// True when a tool could not be reconciled.
    pub fn has_errors(&self) -> bool {
        self.tools.iter().any(|tool| tool.error.is_some())
    }
}

/// The window and rules of one run.
#[derive(Debug, Clone)]
pub struct ReconcileOptions {
    /// Provider records created, and intents first seen, in `[since_ms, until_ms)`.
    pub since_ms: i64,
    pub until_ms: i64,
    /// Now, for the grace period of unknown intents and the resolution's timestamp.
    pub now_ms: i64,
    /// An `unknown` intent with no record is reported once it has been unknown this long.
    pub unknown_grace_ms: i64,
    /// Who resolves what is proved ("reconcile"), in the event log.
    pub actor: String,
}

/// Why a tool's run stopped.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("the ledger failed: {0}")]
    Ledger(#[from] LedgerError),
    #[error("the provider's list failed after {PAGE_ATTEMPTS} attempts at one page: {0}")]
    Provider(String),
}

/// One intent of the window, as compactly as matching allows (arguments and results are
/// read again, by id, only for the intents that end up in a mismatch).
struct Entry {
    id: IntentId,
    tenant: u32,
    status: IntentStatus,
    updated_ms: i64,
    amount: Option<Decimal>,
    records: u32,
    first_record: Option<Box<str>>,
    first_subject: Option<Box<str>>,
    /// The next intent of another tenant with the same key (`NONE` ends the chain).
    next_same_key: u32,
}

const NONE: u32 = u32::MAX;

/// The intents of one tool in the window, by key.
struct Index {
    entries: Vec<Entry>,
    by_key: HashMap<Box<str>, u32>,
    tenants: Vec<String>,
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

    fn insert(&mut self, intent: &IntentRecord, amount_argument: Option<&str>) {
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
    fn claim(&self, key: &str) -> Option<u32> {
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
}

/// What one tool needs for a run.
pub struct ToolToReconcile {
    pub tool: String,
    pub owner: Option<String>,
    /// Pointer into the intent's arguments to the amount to compare; `None` compares none.
    pub amount_argument: Option<String>,
    pub source: Box<dyn RecordSource>,
    /// The tool's definition, so that a provider record that resolves an unknown intent is
    /// kept as the gate keeps an answer: echoes of sensitive arguments as their hashes (a
    /// record of a tool with sensitive arguments and no hash key is not kept at all). `None`
    /// keeps records as they are: for tools without sensitive arguments.
    pub definition: Option<ToolDefinition>,
}

/// Reconciles one tool over the window. Every mismatch goes to `found` as it is decided.
///
/// Reading overlaps matching: the ledger's next page is read on another task while this one
/// indexes the last, and the provider's pages are fetched by a task of their own, up to
/// [`PROVIDER_PAGES_AHEAD`] ahead (from the start, so the first pages arrive while the
/// ledger is being read). Memory stays bounded by the index and that many pages.
pub async fn reconcile_tool(
    ledger: &Arc<dyn Ledger>,
    tool: ToolToReconcile,
    options: &ReconcileOptions,
    found: &mut (dyn FnMut(Mismatch) + Send),
) -> Result<ToolReport, ReconcileError> {
    let ToolToReconcile {
        tool: name,
        owner,
        amount_argument,
        source,
        definition,
    } = tool;
    let mut report = ToolReport::new(&name, owner.as_deref());
    let mut count = |report: &mut ToolReport, mismatch: Mismatch| {
        *report.mismatches.entry(mismatch.kind).or_default() += 1;
        found(mismatch);
    };
    let amount_argument = amount_argument.as_deref();
    let mut pages = fetch_ahead(name.clone(), source);

    // 1. The window's intents, compactly.
    let mut index = Index {
        entries: Vec::new(),
        by_key: HashMap::new(),
        tenants: Vec::new(),
    };
    let filter = IntentFilter {
        tool: Some(name.clone()),
        first_seen_from_ms: Some(options.since_ms),
        first_seen_until_ms: Some(options.until_ms),
        ..IntentFilter::default()
    };
    let mut intents = read_ahead(ledger.clone(), filter);
    while let Some(page) = intents.recv().await {
        for intent in &page? {
            index.insert(intent, amount_argument);
        }
    }
    report.intents_checked = index.entries.len() as u64;

    // 2. The provider's records, a page at a time.
    let mut extra_records: HashMap<u32, Vec<String>> = HashMap::new();
    let mut found_raw: HashMap<u32, Value> = HashMap::new();
    while let Some(page) = pages.recv().await {
        let page = page.map_err(ReconcileError::Provider)?;
        for record in page {
            report.records_checked += 1;
            let Some(key) = record.intent_key.as_deref() else {
                count(&mut report, no_intent(&name, &record));
                continue;
            };
            match index.claim(key) {
                Some(claimed) => {
                    let entry = &mut index.entries[claimed as usize];
                    entry.records += 1;
                    if entry.records == 1 {
                        entry.first_record = Some(record.external_id.as_str().into());
                        entry.first_subject = record.subject.as_deref().map(Into::into);
                        if entry.status == IntentStatus::Unknown {
                            found_raw.insert(claimed, record.raw.clone());
                        }
                    } else {
                        extra_records
                            .entry(claimed)
                            .or_default()
                            .push(record.external_id.clone());
                    }
                    if let Some(mismatch) = amount_differs(
                        &name,
                        entry.amount.as_ref(),
                        &record,
                        entry.id,
                        key,
                        &index.tenants[entry.tenant as usize],
                        entry.status,
                    ) {
                        count(&mut report, mismatch);
                    }
                }
                None => {
                    // Not in the window: an intent first seen earlier (a late re-send), or
                    // no intent at all.
                    let earlier = if key.len() <= KEY_LOOKUP_LENGTH_MAX {
                        let filter = IntentFilter {
                            tool: Some(name.clone()),
                            key: Some(key.to_owned()),
                            ..IntentFilter::default()
                        };
                        ledger.intents(&filter, Order::Oldest, None, 1).await?
                    } else {
                        Vec::new()
                    };
                    match earlier.into_iter().next() {
                        None => count(&mut report, no_intent(&name, &record)),
                        Some(intent) => {
                            for mismatch in earlier_intent(
                                ledger.as_ref(),
                                &name,
                                intent,
                                &record,
                                amount_argument,
                                options,
                            )
                            .await?
                            {
                                count(&mut report, mismatch);
                            }
                        }
                    }
                }
            }
        }
    }

    // 3. What the ledger has and the provider does not, or has more than once.
    for position in 0..index.entries.len() {
        let entry = &index.entries[position];
        let records = entry.records;
        let kind = match (entry.status, records) {
            (IntentStatus::Done, 0) => Some(MismatchKind::MissingRecord),
            (IntentStatus::Unknown, 0) => {
                if options.now_ms - entry.updated_ms >= options.unknown_grace_ms {
                    Some(MismatchKind::UnknownMissing)
                } else {
                    report.unknown_pending += 1;
                    None
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
            continue;
        }
        let Some(intent) = ledger.get_by_id(entry.id).await? else {
            continue; // Purged since it was read: nothing left to compare.
        };
        let mut external_ids: Vec<String> =
            entry.first_record.iter().map(|id| id.to_string()).collect();
        external_ids.extend(
            extra_records
                .get(&(position as u32))
                .into_iter()
                .flatten()
                .cloned(),
        );
        let subject = entry.first_subject.as_deref().map(str::to_owned);
        let base = Mismatch {
            tool: name.clone(),
            kind: MismatchKind::MissingRecord,
            severity: Severity::Warning,
            intent_id: Some(intent.id),
            tenant: Some(intent.tenant.clone()),
            intent_key: Some(intent.key.clone()),
            intent_status: Some(entry.status),
            external_ids: external_ids.clone(),
            subject,
            arguments: Some(intent.arguments.clone()),
            intent_amount: entry.amount.as_ref().map(|amount| amount.to_string()),
            provider_amount: None,
            resolved: false,
            detail: String::new(),
        };
        if let Some(kind) = kind {
            let mut mismatch = Mismatch {
                kind,
                severity: kind.severity(),
                ..base.clone()
            };
            match kind {
                MismatchKind::MissingRecord => {
                    mismatch.detail = format!(
                        "the ledger says done (provider id {}), but the provider lists no record for it in the window: check the provider for {}",
                        intent.external_id.as_deref().unwrap_or("unknown"),
                        intent.key
                    );
                }
                MismatchKind::UnknownMissing => {
                    mismatch.detail = format!(
                        "unknown for {} s and the provider has no record: decide with `intentgate intents resolve {} --status not_executed` (or done, with the provider's id, if you find the effect)",
                        (options.now_ms - entry.updated_ms) / 1000,
                        intent.id
                    );
                }
                MismatchKind::UnknownFound => {
                    let external_id = external_ids.first().cloned();
                    let result = found_raw.remove(&(position as u32)).and_then(|record| {
                        kept_record(definition.as_ref(), record, &intent.arguments)
                    });
                    let resolved = resolve_found(
                        ledger.as_ref(),
                        intent.id,
                        external_id.clone(),
                        result,
                        options,
                    )
                    .await?;
                    // Settled meanwhile (a lookup, an operator): nothing to resolve.
                    if !resolved {
                        continue;
                    }
                    mismatch.resolved = true;
                    mismatch.detail = format!(
                        "unknown, and the provider has it ({}): resolved to done; repeats now get already_done",
                        external_id.as_deref().unwrap_or("")
                    );
                }
                MismatchKind::EffectDespiteStatus => {
                    mismatch.detail = format!(
                        "the model was told {} but the provider has the effect ({}): tell the customer, and correct the intent with `intentgate intents show {}`",
                        entry.status,
                        external_ids.join(", "),
                        intent.id
                    );
                }
                _ => {}
            }
            count(&mut report, mismatch);
        }
        if duplicate {
            let mismatch = Mismatch {
                kind: MismatchKind::Duplicate,
                severity: Severity::Critical,
                detail: format!(
                    "{} provider records for one intent ({}): the effect happened {} times; reverse all but {}",
                    records,
                    external_ids.join(", "),
                    records,
                    external_ids.first().map(String::as_str).unwrap_or("one")
                ),
                ..base
            };
            count(&mut report, mismatch);
        }
    }
    Ok(report)
}

/// Intent pages read ahead of the indexing: one, so reading the next page overlaps indexing
/// this one without holding more than two pages.
const LEDGER_PAGES_AHEAD: usize = 1;
/// Provider pages fetched ahead of the matching: a few thousand records at most.
pub const PROVIDER_PAGES_AHEAD: usize = 4;

/// The intents of `filter`, page by page, read on a task of their own. A failure ends the
/// pages with the error.
fn read_ahead(
    ledger: Arc<dyn Ledger>,
    filter: IntentFilter,
) -> mpsc::Receiver<Result<Vec<IntentRecord>, LedgerError>> {
    let (pages, receiver) = mpsc::channel(LEDGER_PAGES_AHEAD);
    tokio::spawn(async move {
        let mut cursor = None;
        loop {
            let page = ledger
                .intents(&filter, Order::Oldest, cursor, LEDGER_PAGE)
                .await;
            let (last, full) = match &page {
                Ok(page) => (
                    page.last().map(|intent| intent.id),
                    page.len() == LEDGER_PAGE as usize,
                ),
                Err(_) => (None, false),
            };
            if pages.send(page).await.is_err() || !full {
                return;
            }
            cursor = last;
        }
    });
    receiver
}

/// The provider's pages, fetched on a task of their own, each retried up to
/// [`PAGE_ATTEMPTS`] times with backoff; a page that still fails ends the pages with its
/// error. The task stops when the receiver is dropped.
fn fetch_ahead(
    tool: String,
    mut source: Box<dyn RecordSource>,
) -> mpsc::Receiver<Result<Vec<ListedRecord>, String>> {
    let (pages, receiver) = mpsc::channel(PROVIDER_PAGES_AHEAD);
    tokio::spawn(async move {
        let mut failures = 0;
        let mut pause = PAGE_BACKOFF;
        loop {
            let page = match source.next_page().await {
                Ok(Some(page)) => page,
                Ok(None) => return,
                Err(error) => {
                    failures += 1;
                    if failures >= PAGE_ATTEMPTS {
                        let _ = pages.send(Err(error)).await;
                        return;
                    }
                    tracing::warn!(%tool, %error, "a provider page failed; asking again");
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                    continue;
                }
            };
            failures = 0;
            pause = PAGE_BACKOFF;
            if pages.send(Ok(page)).await.is_err() {
                return;
            }
        }
    });
    receiver
}

fn no_intent(tool: &str, record: &ListedRecord) -> Mismatch {
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

fn amount_differs(
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

/// A provider record as the ledger may keep it as an intent's result: with the echoes of
/// sensitive arguments (found by their hashes in the intent's stored arguments) as those
/// hashes; `None` when the tool has sensitive arguments and no hash key to find them with.
fn kept_record(
    definition: Option<&ToolDefinition>,
    record: Value,
    stored_arguments: &Value,
) -> Option<Value> {
    match definition {
        Some(definition) => definition.stored_result(record, stored_arguments).ok(),
        None => Some(record),
    }
}

/// Resolves an `unknown` intent the provider has to `done`, as proved by its record. False
/// when the intent was settled meanwhile (a lookup, an operator): nothing to resolve.
async fn resolve_found(
    ledger: &dyn Ledger,
    id: IntentId,
    external_id: Option<String>,
    result: Option<Value>,
    options: &ReconcileOptions,
) -> Result<bool, ReconcileError> {
    let reason = format!(
        "reconciliation found the provider's record {}",
        external_id.as_deref().unwrap_or("")
    );
    let resolved = ledger
        .resolve(Resolve {
            id,
            status: IntentStatus::Done,
            external_id,
            result,
            actor: options.actor.clone(),
            reason,
            now_ms: options.now_ms,
        })
        .await;
    match resolved {
        Ok(_) => Ok(true),
        Err(LedgerError::Transition(_)) => Ok(false),
        Err(error) => Err(error.into()),
    }
}

/// A record of an intent first seen before the window: compare what can be compared from
/// one record (the intent's other records are outside the window).
async fn earlier_intent(
    ledger: &dyn Ledger,
    tool: &str,
    intent: IntentRecord,
    record: &ListedRecord,
    amount_argument: Option<&str>,
    options: &ReconcileOptions,
) -> Result<Vec<Mismatch>, ReconcileError> {
    let mut mismatches = Vec::new();
    let expected = amount_argument
        .and_then(|pointer| intent.arguments.pointer(pointer))
        .and_then(|value| Decimal::from_json(value).ok());
    if let Some(mismatch) = amount_differs(
        tool,
        expected.as_ref(),
        record,
        intent.id,
        &intent.key,
        &intent.tenant,
        intent.status,
    ) {
        mismatches.push(mismatch);
    }
    let base = Mismatch {
        tool: tool.to_owned(),
        kind: MismatchKind::UnknownFound,
        severity: Severity::Info,
        intent_id: Some(intent.id),
        tenant: Some(intent.tenant.clone()),
        intent_key: Some(intent.key.clone()),
        intent_status: Some(intent.status),
        external_ids: vec![record.external_id.clone()],
        subject: record.subject.clone(),
        arguments: Some(intent.arguments.clone()),
        intent_amount: expected.as_ref().map(ToString::to_string),
        provider_amount: record.amount.clone(),
        resolved: false,
        detail: String::new(),
    };
    match intent.status {
        IntentStatus::Unknown => {
            let resolved = resolve_found(
                ledger,
                intent.id,
                Some(record.external_id.clone()),
                Some(record.raw.clone()),
                options,
            )
            .await?;
            if resolved {
                mismatches.push(Mismatch {
                    resolved: true,
                    detail: format!(
                        "unknown, and the provider has it ({}): resolved to done",
                        record.external_id
                    ),
                    ..base
                });
            }
        }
        IntentStatus::Rejected | IntentStatus::NotExecuted => mismatches.push(Mismatch {
            kind: MismatchKind::EffectDespiteStatus,
            severity: MismatchKind::EffectDespiteStatus.severity(),
            detail: format!(
                "the model was told {} but the provider has the effect ({})",
                intent.status, record.external_id
            ),
            ..base
        }),
        _ => {}
    }
    Ok(mismatches)
}

/// A tool of the config as reconciliation sees it.
#[derive(Debug, Clone)]
struct ListedTool {
    name: String,
    owner: Option<String>,
    list: Option<intentgate_http::spec::ListSpec>,
    amount_argument: Option<String>,
    definition: Option<ToolDefinition>,
}

/// Runs reconciliation for every side-effecting tool of a config: the provider listings,
/// the ledger, the stored run, the metrics and the owners' notices.
pub struct Reconciler {
    ledger: Arc<dyn Ledger>,
    upstream: HttpUpstream,
    tools: Vec<ListedTool>,
    notifier: Arc<Notifier>,
    metrics: Option<Arc<Metrics>>,
    unknown_grace_ms: i64,
    settle_ms: i64,
}

impl Reconciler {
    /// A reconciler for `loaded`'s side-effecting tools. Their listings go through an HTTP
    /// client of their own (a slow listing never holds a connection a call needs).
    pub fn new(
        loaded: &LoadedConfig,
        ledger: Arc<dyn Ledger>,
        notifier: Arc<Notifier>,
        metrics: Option<Arc<Metrics>>,
    ) -> Result<Reconciler, intentgate_http::HttpError> {
        let upstream =
            HttpUpstream::new(loaded.config.upstreams.clone(), loaded.config.http_tools())?;
        let tools = loaded
            .config
            .tools
            .iter()
            .filter(|tool| tool.effect == Effect::SideEffect)
            .map(|tool| ListedTool {
                definition: loaded
                    .tools
                    .iter()
                    .find(|definition| definition.name == tool.name)
                    .cloned(),
                name: tool.name.clone(),
                owner: tool.owner.clone(),
                list: tool.list.clone(),
                amount_argument: tool.list.as_ref().and_then(|list| {
                    list.fields.amount.as_ref().map(|_| {
                        list.fields
                            .amount_argument
                            .clone()
                            .unwrap_or_else(|| "/amount".to_owned())
                    })
                }),
            })
            .collect();
        let settings = &loaded.config.reconcile;
        Ok(Reconciler {
            ledger,
            upstream,
            tools,
            notifier,
            metrics,
            unknown_grace_ms: i64::from(settings.unknown_grace_seconds) * 1000,
            settle_ms: i64::from(settings.settle_seconds) * 1000,
        })
    }

    /// Reconciles the `window` that ends the settle time before `now_ms`, as `actor`.
    pub async fn run(&self, window: Duration, now_ms: i64, actor: &str) -> Report {
        let until_ms = now_ms - self.settle_ms;
        let since_ms = until_ms - window.as_millis() as i64;
        let options = ReconcileOptions {
            since_ms,
            until_ms,
            now_ms,
            unknown_grace_ms: self.unknown_grace_ms,
            actor: actor.to_owned(),
        };
        let mut report = Report {
            run_id: None,
            actor: actor.to_owned(),
            since_ms,
            until_ms,
            started_ms: now_ms,
            finished_ms: now_ms,
            tools: Vec::new(),
            mismatches: Vec::new(),
            mismatches_total: 0,
            mismatches_not_listed: 0,
            critical: 0,
        };
        for tool in &self.tools {
            let tool_report = self.run_tool(tool, &options, &mut report).await;
            report.tools.push(tool_report);
        }
        report.finished_ms = report.started_ms.max(SystemClock.now_ms());
        self.store(&mut report).await;
        self.count(&report);
        self.tell_owners(&report);
        report
    }

    async fn run_tool(
        &self,
        tool: &ListedTool,
        options: &ReconcileOptions,
        report: &mut Report,
    ) -> ToolReport {
        let Some(list) = &tool.list else {
            let mut empty = ToolReport::new(&tool.name, tool.owner.as_deref());
            empty.error = Some(
                "the tool has no `list`, so its provider records can't be compared: add one to the config".to_owned(),
            );
            return empty;
        };
        let pager = match self.upstream.list_records(
            &tool.name,
            list,
            options.since_ms,
            options.until_ms,
            PROVIDER_PAGE,
        ) {
            Ok(pager) => pager,
            Err(error) => {
                let mut failed = ToolReport::new(&tool.name, tool.owner.as_deref());
                failed.error = Some(error.to_string());
                return failed;
            }
        };
        let to_reconcile = ToolToReconcile {
            tool: tool.name.clone(),
            owner: tool.owner.clone(),
            amount_argument: tool.amount_argument.clone(),
            source: Box::new(pager),
            definition: tool.definition.clone(),
        };
        let mut collect = |mismatch: Mismatch| {
            report.mismatches_total += 1;
            if mismatch.severity == Severity::Critical {
                report.critical += 1;
            }
            if report.mismatches.len() < MISMATCHES_LISTED_MAX {
                report.mismatches.push(mismatch);
            } else {
                report.mismatches_not_listed += 1;
            }
        };
        match reconcile_tool(&self.ledger, to_reconcile, options, &mut collect).await {
            Ok(tool_report) => tool_report,
            Err(error) => {
                let mut failed = ToolReport::new(&tool.name, tool.owner.as_deref());
                failed.error = Some(error.to_string());
                failed
            }
        }
    }

    /// Stores the run; a ledger that fails here loses the record of the run, not its
    /// report or notices.
    async fn store(&self, report: &mut Report) {
        let mut summary = serde_json::Map::new();
        for kind in MismatchKind::ALL {
            let count: u64 = report
                .tools
                .iter()
                .filter_map(|tool| tool.mismatches.get(&kind))
                .sum();
            if count > 0 {
                summary.insert(kind.as_str().to_owned(), json!(count));
            }
        }
        let errors: Vec<Value> = report
            .tools
            .iter()
            .filter_map(|tool| {
                tool.error
                    .as_ref()
                    .map(|error| json!({"tool": tool.tool, "error": error}))
            })
            .collect();
        if !errors.is_empty() {
            summary.insert("errors".to_owned(), Value::Array(errors));
        }
        let run = ReconciliationRun {
            id: 0,
            started_ms: report.started_ms,
            finished_ms: report.finished_ms,
            since_ms: report.since_ms,
            until_ms: report.until_ms,
            actor: report.actor.clone(),
            intents_checked: report.tools.iter().map(|tool| tool.intents_checked).sum(),
            records_checked: report.tools.iter().map(|tool| tool.records_checked).sum(),
            mismatches: report.mismatches_total,
            critical: report.critical,
            summary: Value::Object(summary),
        };
        let stored: Vec<StoredMismatch> = report
            .mismatches
            .iter()
            .take(MISMATCHES_STORED_MAX)
            .map(|mismatch| StoredMismatch {
                run_id: 0,
                tool: mismatch.tool.clone(),
                kind: mismatch.kind.as_str().to_owned(),
                severity: mismatch.severity.as_str().to_owned(),
                intent_id: mismatch.intent_id,
                tenant: mismatch.tenant.clone(),
                intent_key: mismatch.intent_key.clone(),
                external_ids: mismatch.external_ids.clone(),
                subject: mismatch.subject.clone(),
                detail: mismatch.detail.clone(),
            })
            .collect();
        match self.ledger.record_reconciliation(&run, &stored).await {
            Ok(id) => report.run_id = Some(id),
            Err(error) => {
                tracing::error!(%error, "could not store the reconciliation run in the ledger")
            }
        }
    }

    fn count(&self, report: &Report) {
        let Some(metrics) = &self.metrics else { return };
        for tool in &report.tools {
            for (kind, count) in &tool.mismatches {
                metrics.reconcile_mismatches(&tool.tool, kind.as_str(), *count);
            }
        }
    }

    /// One notice per tool with mismatches (or an error), to its owner.
    fn tell_owners(&self, report: &Report) {
        for tool in &report.tools {
            let total: u64 = tool.mismatches.values().sum();
            if total == 0 && tool.error.is_none() {
                continue;
            }
            let mismatches: Vec<&Mismatch> = report
                .mismatches
                .iter()
                .filter(|mismatch| mismatch.tool == tool.tool)
                .take(NOTICE_MISMATCHES_MAX)
                .collect();
            let severity = mismatches
                .iter()
                .map(|mismatch| mismatch.severity)
                .max()
                .unwrap_or(Severity::Warning);
            let counts: Vec<String> = tool
                .mismatches
                .iter()
                .map(|(kind, count)| format!("{count} {}", kind.as_str()))
                .collect();
            let summary = match &tool.error {
                Some(error) => format!(
                    "reconciliation of {} could not complete: {error}",
                    tool.tool
                ),
                None => format!(
                    "reconciliation of {} found {total} mismatches ({})",
                    tool.tool,
                    counts.join(", ")
                ),
            };
            let notice = Notice {
                kind: "reconciliation",
                tool: tool.tool.clone(),
                severity,
                summary,
                details: json!({
                    "run_id": report.run_id,
                    "since_ms": report.since_ms,
                    "until_ms": report.until_ms,
                    "counts": tool.mismatches,
                    "error": tool.error,
                    "mismatches": mismatches,
                    "mismatches_not_in_notice": total.saturating_sub(mismatches.len() as u64),
                }),
            };
            self.notifier.notify(tool.owner.as_deref(), &notice);
        }
    }
}
