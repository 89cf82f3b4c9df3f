//! Reconciliation: the ledger against the provider's own records (docs/design.md section 8).
//!
//! For one tool and one window, [`reconcile_tool`] reads the tool's intents first seen in
//! the window into a compact index (a few dozen bytes per intent: no arguments, no results),
//! then streams the provider's records page by page through a [`RecordSource`], matching
//! each by the provider key the gateway sent with the effect (scoped by tenant and tool, so
//! one tenant's record never explains another's intent), or, for a provider that keeps no
//! key, by the business fields of the list's `match` ([`Pairing`], count-based: see
//! `matching.rs`). Only one provider page is held
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
//! point lookup of the tenant and intent key its provider key names, so it is not mistaken
//! for a bypass (paired by business fields, such a record has no key to look up, and is
//! reported as `no_intent` with that caveat). So is a record whose provider key names another
//! side-effecting tool of the config ([`ToolToReconcile::other_tools`]: two tools that refund
//! through one provider account each list the other's refunds): the intent of that tool found
//! by the point lookup must give the same provider key back, or the record stays `no_intent`.
//! Such records are counted apart ([`ToolReport::records_of_other_tools`]). A record paired by
//! a point lookup is compared as far as one record allows: its amount, the intent's status,
//! and a second record of the same intent in the pass (a `duplicate`).
//! When a provider page can't be read after retries, the tool's run stops with an error and draws no conclusion about
//! missing records: an incomplete listing proves nothing is missing.
//!
//! Three files, because they change for different reasons: `matching.rs` decides, without
//! I/O (the index, a record claimed by an intent, the mismatch kinds); this file is one
//! tool's pass, [`reconcile_tool`], which reads the ledger and the provider and resolves what
//! it proves; `run.rs` is the [`Reconciler`], which runs every tool of a config, stores the
//! run in the ledger, counts the mismatches in the metrics and sends each owner one notice
//! per run.

mod matching;
mod run;

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use intentgate_core::key::provider_key_readings;
use intentgate_core::{Decimal, IntentStatus, ToolDefinition};
use intentgate_http::{ListedRecord, RecordPager};
use intentgate_ledger::{
    IntentFilter, IntentId, IntentRecord, Ledger, LedgerError, Order, Resolve,
};
use intentgate_mcp_upstream::McpRecordPager;
use serde::Serialize;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::Severity;
pub use matching::AmountRule;
use matching::{Index, Verdict, amount_differs, no_intent, verdict};

pub use matching::{MatchFields, Mismatch, MismatchKind, Pairing};
pub use run::{Reconciler, Report};

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
/// Intents found by a point lookup (first seen before the window, or another tool's) whose
/// first record a pass remembers, so that a second record of one of them is a `duplicate`.
/// About 100 bytes each; beyond it a second record is compared like a first (its amount and
/// the intent's status), and not recognised as a duplicate.
pub const LOOKED_UP_INTENTS_MAX: usize = 200_000;

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

#[async_trait]
impl RecordSource for McpRecordPager {
    async fn next_page(&mut self) -> Result<Option<Vec<ListedRecord>>, String> {
        McpRecordPager::next_page(self).await
    }
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
    /// Records (of `records_checked`) whose provider key names another side-effecting tool
    /// of the config and whose intent of that tool gives the key back, by that tool: not a
    /// bypass, but effects of that tool made through the same provider account.
    pub records_of_other_tools: BTreeMap<String, u64>,
    /// Mismatches by kind.
    pub mismatches: BTreeMap<MismatchKind, u64>,
    /// Why the tool could not be reconciled, if it could not (no list, a provider error).
    pub error: Option<String>,
    /// Why the tool was left out on purpose, if it was: a client-executed tool, whose
    /// provider the gateway can't reach. Not an error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

impl ToolReport {
    fn new(tool: &str, owner: Option<&str>) -> ToolReport {
        ToolReport {
            tool: tool.to_owned(),
            owner: owner.map(str::to_owned),
            intents_checked: 0,
            records_checked: 0,
            unknown_pending: 0,
            records_of_other_tools: BTreeMap::new(),
            mismatches: BTreeMap::new(),
            error: None,
            skipped: None,
        }
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

/// What one tool needs for a run.
pub struct ToolToReconcile {
    pub tool: String,
    pub owner: Option<String>,
    /// Pointer into the intent's arguments to the amount to compare; `None` compares none.
    pub amount_argument: Option<String>,
    /// The records keep the amount in this currency's minor units (`list.fields.
    /// amount_minor_units`); `None`: in the argument's unit.
    pub amount_minor_units: Option<intentgate_core::currency::CurrencySource>,
    /// How its records pair with its intents.
    pub pairing: Pairing,
    pub source: Box<dyn RecordSource>,
    /// The tool's definition, so that a provider record that resolves an unknown intent is
    /// kept as the gate keeps an answer: echoes of sensitive arguments as their hashes (a
    /// record of a tool with sensitive arguments and no hash key is not kept at all). `None`
    /// keeps records as they are: for tools without sensitive arguments.
    pub definition: Option<ToolDefinition>,
    /// The config's other side-effecting tools. The provider's listing may hold their
    /// effects too (two tools against one provider account, one of them executed by the
    /// caller's own code); a record under one of their provider keys is paired with that
    /// tool's intent, not reported as a bypass. Only when pairing by provider key.
    pub other_tools: Vec<String>,
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
        amount_minor_units,
        pairing,
        source,
        definition,
        other_tools,
    } = tool;
    // Started first, so the first pages arrive while the ledger is read.
    let pages = fetch_ahead(name.clone(), source);
    let mut pass = Pass {
        ledger,
        options,
        report: ToolReport::new(&name, owner.as_deref()),
        name,
        amount: amount_argument.map(|argument| AmountRule {
            argument,
            minor_units: amount_minor_units,
        }),
        pairing,
        definition,
        other_tools,
        index: Index::default(),
        looked_up: HashMap::new(),
        found,
    };
    pass.index_window().await?;
    pass.match_records(pages).await?;
    pass.report_unexplained().await?;
    Ok(pass.report)
}

/// One tool's pass over the window: what it knows so far, and where mismatches go.
struct Pass<'a> {
    ledger: &'a Arc<dyn Ledger>,
    options: &'a ReconcileOptions,
    name: String,
    amount: Option<AmountRule>,
    pairing: Pairing,
    definition: Option<ToolDefinition>,
    other_tools: Vec<String>,
    index: Index,
    /// The first record's provider id of each intent found by a point lookup so far, up to
    /// [`LOOKED_UP_INTENTS_MAX`].
    looked_up: HashMap<IntentId, Box<str>>,
    report: ToolReport,
    found: &'a mut (dyn FnMut(Mismatch) + Send),
}

impl Pass<'_> {
    /// Counts a mismatch in the tool's report and hands it on.
    fn count(&mut self, mismatch: Mismatch) {
        *self.report.mismatches.entry(mismatch.kind).or_default() += 1;
        (self.found)(mismatch);
    }

    /// Step 1: the window's intents, compactly.
    async fn index_window(&mut self) -> Result<(), ReconcileError> {
        let filter = IntentFilter {
            tool: Some(self.name.clone()),
            first_seen_from_ms: Some(self.options.since_ms),
            first_seen_until_ms: Some(self.options.until_ms),
            ..IntentFilter::default()
        };
        let mut intents = read_ahead(self.ledger.clone(), filter);
        while let Some(page) = intents.recv().await {
            for intent in &page? {
                let value = self.pairing.of_intent(intent);
                self.index.insert(intent, &value, self.amount.as_ref());
            }
        }
        self.index.seal();
        self.report.intents_checked = self.index.entries.len() as u64;
        Ok(())
    }

    /// Step 2: the provider's records, a page at a time, each claimed by an intent of the
    /// window, found as an earlier intent, or explained by none.
    async fn match_records(
        &mut self,
        mut pages: mpsc::Receiver<Result<Vec<ListedRecord>, String>>,
    ) -> Result<(), ReconcileError> {
        while let Some(page) = pages.recv().await {
            for record in page.map_err(ReconcileError::Provider)? {
                self.report.records_checked += 1;
                // Borrowed by key: a listing of a million records copies no key.
                let key: Option<Cow<'_, str>> = match &self.pairing {
                    Pairing::ProviderKey => record.provider_key.as_deref().map(Cow::Borrowed),
                    Pairing::Fields(fields) => Some(Cow::Owned(fields.of_record(&record.raw))),
                };
                let by_provider_key = matches!(self.pairing, Pairing::ProviderKey);
                let claimed = key.as_deref().and_then(|key| self.index.claim(key));
                match (claimed, key) {
                    (Some(claimed), _) => {
                        // The index keeps no intent key; a mismatch reads it by id.
                        if let Some(mismatch) =
                            self.index.record(&self.name, claimed, None, &record)
                        {
                            let mismatch = self.with_intent_key(mismatch).await?;
                            self.count(mismatch);
                        }
                    }
                    // Only a key can be looked up: business fields may be any intent's.
                    (None, Some(key)) if by_provider_key => {
                        self.match_earlier(&key, &record).await?
                    }
                    (None, _) => self.count(no_intent(&self.name, &record, &self.pairing)),
                }
            }
        }
        Ok(())
    }

    /// A record whose provider key is not in the window: an intent first seen earlier (a
    /// late re-send), an intent of another tool of the config, or no intent at all. The
    /// provider key names its tool, tenant and intent key (`provider_key`'s form); the intent
    /// found by them must give the same provider key back, or the record is not its (a
    /// hashed provider key can't be read back: such a record is reported as having no
    /// intent). A forged key of another tool whose intent does not exist stays a bypass.
    async fn match_earlier(
        &mut self,
        provider_key: &str,
        record: &ListedRecord,
    ) -> Result<(), ReconcileError> {
        let Some(intent) = self.intent_of_provider_key(provider_key).await? else {
            self.count(no_intent(&self.name, record, &self.pairing));
            return Ok(());
        };
        if intent.tool != self.name {
            *self
                .report
                .records_of_other_tools
                .entry(intent.tool.clone())
                .or_default() += 1;
        }
        if let Some(first) = self.looked_up.get(&intent.id) {
            let first = first.to_string();
            for mismatch in
                another_record(&self.name, &intent, &first, record, self.amount.as_ref())
            {
                self.count(mismatch);
            }
            return Ok(());
        }
        if self.looked_up.len() < LOOKED_UP_INTENTS_MAX {
            self.looked_up
                .insert(intent.id, record.external_id.as_str().into());
        }
        // Only the tool's own definition says how its records may be kept; another tool's
        // intent is resolved with the provider's id and no result.
        let result = if intent.tool == self.name {
            kept_record(
                self.definition.as_ref(),
                record.raw.clone(),
                &intent.arguments,
            )
        } else {
            None
        };
        let mismatches = earlier_intent(
            self.ledger.as_ref(),
            &self.name,
            intent,
            record,
            result,
            self.amount.as_ref(),
            self.options,
        )
        .await?;
        for mismatch in mismatches {
            self.count(mismatch);
        }
        Ok(())
    }

    /// The intent whose provider key `provider_key` is: of this tool first, then of the
    /// config's other tools, looked up by each tenant and intent key the key can be read as.
    /// (`&mut self`, though it changes nothing: a shared borrow held across the ledger's
    /// await would need the pass, and its `found`, to be `Sync`.)
    async fn intent_of_provider_key(
        &mut self,
        provider_key: &str,
    ) -> Result<Option<IntentRecord>, ReconcileError> {
        for tool in std::iter::once(&self.name).chain(&self.other_tools) {
            for (tenant, key) in provider_key_readings(tool, provider_key) {
                if key.len() > KEY_LOOKUP_LENGTH_MAX {
                    continue;
                }
                let filter = IntentFilter {
                    tool: Some(tool.clone()),
                    tenant: Some(tenant.to_owned()),
                    key: Some(key.to_owned()),
                    ..IntentFilter::default()
                };
                let found = self
                    .ledger
                    .intents(&filter, Order::Oldest, None, 1)
                    .await?
                    .into_iter()
                    .find(|intent| self.pairing.of_intent(intent) == provider_key);
                if found.is_some() {
                    return Ok(found);
                }
            }
        }
        Ok(None)
    }

    /// A mismatch of a paired record names the intent by id only (the index keeps no intent
    /// key): the intent's key is read for it, so the report says which intent.
    async fn with_intent_key(
        &mut self,
        mut mismatch: Mismatch,
    ) -> Result<Mismatch, ReconcileError> {
        if mismatch.intent_key.is_none()
            && let Some(id) = mismatch.intent_id
            && let Some(intent) = self.ledger.get_by_id(id).await?
        {
            mismatch.intent_key = Some(intent.key);
        }
        Ok(mismatch)
    }

    /// Step 3: what the ledger has and the provider does not, or has more than once.
    async fn report_unexplained(&mut self) -> Result<(), ReconcileError> {
        for position in 0..self.index.entries.len() as u32 {
            let entry = &self.index.entries[position as usize];
            let (kind, duplicate) =
                match verdict(entry, self.options.now_ms, self.options.unknown_grace_ms) {
                    Verdict::Fine => continue,
                    Verdict::Pending => {
                        self.report.unknown_pending += 1;
                        continue;
                    }
                    Verdict::Mismatch { kind, duplicate } => (kind, duplicate),
                };
            let Some(intent) = self.ledger.get_by_id(entry.id).await? else {
                continue; // Purged since it was read: nothing left to compare.
            };
            let entry = &self.index.entries[position as usize];
            let records = entry.records;
            let external_ids = self.index.external_ids(position);
            let base = Mismatch {
                tool: self.name.clone(),
                kind: MismatchKind::MissingRecord,
                severity: Severity::Warning,
                intent_id: Some(intent.id),
                tenant: Some(intent.tenant.clone()),
                intent_key: Some(intent.key.clone()),
                intent_status: Some(entry.status),
                external_ids: external_ids.clone(),
                subject: self.index.subject(position),
                arguments: Some(intent.arguments.clone()),
                intent_amount: entry.amount.as_ref().map(|amount| amount.to_string()),
                provider_amount: None,
                resolved: false,
                detail: String::new(),
            };
            if let Some(kind) = kind {
                let mismatch = Mismatch {
                    kind,
                    severity: kind.severity(),
                    ..base.clone()
                };
                // An unknown intent settled meanwhile (a lookup, an operator) is no mismatch.
                let Some(mismatch) = self.explain(mismatch, position, &intent).await? else {
                    continue;
                };
                self.count(mismatch);
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
                self.count(mismatch);
            }
        }
        Ok(())
    }

    /// Says what `mismatch` (of entry `position`, read again as `intent`) means and what to
    /// do; an unknown intent the provider has is resolved to done first. `None` when it was
    /// settled meanwhile: nothing to resolve.
    async fn explain(
        &mut self,
        mut mismatch: Mismatch,
        position: u32,
        intent: &IntentRecord,
    ) -> Result<Option<Mismatch>, ReconcileError> {
        let entry = &self.index.entries[position as usize];
        let external_ids = &mismatch.external_ids;
        match mismatch.kind {
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
                    (self.options.now_ms - entry.updated_ms) / 1000,
                    intent.id
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
            MismatchKind::UnknownFound => {
                let external_id = external_ids.first().cloned();
                let result = self.index.take_found_record(position).and_then(|record| {
                    kept_record(self.definition.as_ref(), record, &intent.arguments)
                });
                let resolved = resolve_found(
                    self.ledger.as_ref(),
                    intent.id,
                    external_id.clone(),
                    result,
                    self.options,
                )
                .await?;
                if !resolved {
                    return Ok(None);
                }
                mismatch.resolved = true;
                mismatch.detail = format!(
                    "unknown, and the provider has it ({}): resolved to done; repeats now get already_done",
                    external_id.as_deref().unwrap_or("")
                );
            }
            _ => {}
        }
        Ok(Some(mismatch))
    }
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
        // Settled meanwhile, or a caller or the sweeper holds the lease right now: what it
        // learns settles the intent, or the next run finds the record again.
        Err(LedgerError::Transition(_) | LedgerError::LeaseHeld { .. }) => Ok(false),
        Err(error) => Err(error.into()),
    }
}

/// Whose intent a mismatch of `tool`'s run names, for its detail: nothing for the tool's
/// own, the other tool for another's.
fn of_other_tool(tool: &str, intent: &IntentRecord) -> String {
    if intent.tool == tool {
        String::new()
    } else {
        format!(
            " (an intent of {}, whose provider key the record carries)",
            intent.tool
        )
    }
}

/// The amount mismatch of a record an intent was found for by a point lookup, saying whose
/// intent it is when it is another tool's.
fn looked_up_amount_differs(
    tool: &str,
    intent: &IntentRecord,
    expected: Option<&Decimal>,
    record: &ListedRecord,
    whose: &str,
) -> Option<Mismatch> {
    let mismatch = amount_differs(
        tool,
        expected,
        record,
        intent.id,
        Some(&intent.key),
        &intent.tenant,
        intent.status,
    )?;
    Some(Mismatch {
        detail: format!("{}{whose}", mismatch.detail),
        ..mismatch
    })
}

/// The first record of an intent found by a point lookup (first seen before the window, or
/// another tool's): compare what can be compared from one record (the intent's other records
/// are outside the window, or in another tool's listing). `result` is what an unknown intent
/// keeps as its result when the record resolves it.
async fn earlier_intent(
    ledger: &dyn Ledger,
    tool: &str,
    intent: IntentRecord,
    record: &ListedRecord,
    result: Option<Value>,
    amount: Option<&AmountRule>,
    options: &ReconcileOptions,
) -> Result<Vec<Mismatch>, ReconcileError> {
    let whose = of_other_tool(tool, &intent);
    let mut mismatches = Vec::new();
    let expected = amount.and_then(|rule| rule.expected(&intent.arguments));
    mismatches.extend(looked_up_amount_differs(
        tool,
        &intent,
        expected.as_ref(),
        record,
        &whose,
    ));
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
                result,
                options,
            )
            .await?;
            if resolved {
                mismatches.push(Mismatch {
                    resolved: true,
                    detail: format!(
                        "unknown, and the provider has it ({}): resolved to done{whose}",
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
                "the model was told {} but the provider has the effect ({}){whose}",
                intent.status, record.external_id
            ),
            ..base
        }),
        _ => {}
    }
    Ok(mismatches)
}

/// A second (or later) record of an intent found by a point lookup, whose first record of
/// the pass was `first`: a duplicate, and its amount compared. The intent's status was
/// judged with the first record.
fn another_record(
    tool: &str,
    intent: &IntentRecord,
    first: &str,
    record: &ListedRecord,
    amount: Option<&AmountRule>,
) -> Vec<Mismatch> {
    let whose = of_other_tool(tool, intent);
    let expected = amount.and_then(|rule| rule.expected(&intent.arguments));
    let mut mismatches = Vec::new();
    mismatches.extend(looked_up_amount_differs(
        tool,
        intent,
        expected.as_ref(),
        record,
        &whose,
    ));
    mismatches.push(Mismatch {
        tool: tool.to_owned(),
        kind: MismatchKind::Duplicate,
        severity: MismatchKind::Duplicate.severity(),
        intent_id: Some(intent.id),
        tenant: Some(intent.tenant.clone()),
        intent_key: Some(intent.key.clone()),
        intent_status: Some(intent.status),
        external_ids: vec![first.to_owned(), record.external_id.clone()],
        subject: record.subject.clone(),
        arguments: Some(intent.arguments.clone()),
        intent_amount: expected.as_ref().map(ToString::to_string),
        provider_amount: record.amount.clone(),
        resolved: false,
        detail: format!(
            "more than one provider record for one intent ({first}, {}): the effect happened more than once; reverse all but {first}{whose}",
            record.external_id
        ),
    });
    mismatches
}
