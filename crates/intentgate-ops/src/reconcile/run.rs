//! A reconciliation run over a config: every side-effecting tool's provider listing against
//! the ledger (through [`reconcile_tool`]), then what the run leaves behind: the run and its
//! first mismatches stored in the ledger, the mismatches counted in the gate's metrics, and
//! one notice per tool to its owner.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use intentgate_config::LoadedConfig;
use intentgate_core::{Effect, Executor, ToolDefinition};
use intentgate_gate::trace;
use intentgate_gate::{Clock, Metrics, SystemClock};
use intentgate_http::HttpUpstream;
use intentgate_http::spec::{ListFields, ListSpec, MatchField};
use intentgate_ledger::{Ledger, ReconciliationRun, StoredMismatch};
use intentgate_mcp_upstream::{McpConnection, McpList, McpRecordPager};
use serde::Serialize;
use serde_json::{Value, json};
use tracing::Instrument;

use super::{
    MISMATCHES_LISTED_MAX, MISMATCHES_STORED_MAX, Mismatch, MismatchKind, NOTICE_MISMATCHES_MAX,
    PROVIDER_PAGE, Pairing, ReconcileOptions, RecordSource, ToolReport, ToolToReconcile,
    reconcile_tool,
};
use crate::Severity;
use crate::notify::{Notice, Notifier};

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

/// A tool of the config as reconciliation sees it.
#[derive(Debug, Clone)]
struct ListedTool {
    name: String,
    /// A client-executed tool is skipped: the gateway has no request to list its records.
    executor: Executor,
    owner: Option<String>,
    /// How its provider's records are listed; `None` when the config has no `list`.
    listing: Option<Listing>,
    amount_argument: Option<String>,
    /// The currency whose minor units the records' amounts are in (checked by the config
    /// check; an unreadable one compares no amounts).
    amount_minor_units: Option<intentgate_core::currency::CurrencySource>,
    definition: Option<ToolDefinition>,
}

/// Where a tool's provider records come from.
#[derive(Debug, Clone)]
enum Listing {
    /// Pages of an HTTP API.
    Http(ListSpec),
    /// Results of a tool of the MCP server the tool calls (`upstream`).
    Mcp { upstream: String, list: McpList },
}

impl Listing {
    fn fields(&self) -> &ListFields {
        match self {
            Listing::Http(list) => &list.fields,
            Listing::Mcp { list, .. } => &list.records.fields,
        }
    }

    fn match_fields(&self) -> &BTreeMap<String, MatchField> {
        match self {
            Listing::Http(list) => &list.match_fields,
            Listing::Mcp { list, .. } => &list.records.match_fields,
        }
    }
}

/// Runs reconciliation for every side-effecting tool of a config: the provider listings,
/// the ledger, the stored run, the metrics and the owners' notices.
pub struct Reconciler {
    ledger: Arc<dyn Ledger>,
    upstream: HttpUpstream,
    /// The sessions of the config's MCP upstreams, by name, for MCP listings.
    mcp: BTreeMap<String, Arc<McpConnection>>,
    tools: Vec<ListedTool>,
    notifier: Arc<Notifier>,
    metrics: Option<Arc<Metrics>>,
    unknown_grace_ms: i64,
    settle_ms: i64,
}

impl Reconciler {
    /// A reconciler for `loaded`'s side-effecting tools. Their HTTP listings go through an
    /// HTTP client of their own (a slow listing never holds a connection a call needs); their
    /// MCP listings through `mcp`, the running sessions of the config's MCP upstreams by name
    /// (a tool whose server is missing there fails its part of each run, saying so).
    pub fn new(
        loaded: &LoadedConfig,
        ledger: Arc<dyn Ledger>,
        notifier: Arc<Notifier>,
        metrics: Option<Arc<Metrics>>,
        mcp: BTreeMap<String, Arc<McpConnection>>,
    ) -> Result<Reconciler, intentgate_http::HttpError> {
        let upstream =
            HttpUpstream::new(loaded.config.upstreams.clone(), loaded.config.http_tools())?;
        let tools = loaded
            .config
            .tools
            .iter()
            .filter(|tool| tool.effect == Effect::SideEffect)
            .map(|tool| {
                let listing = match &tool.mcp {
                    Some(mcp) => mcp.list.clone().map(|list| Listing::Mcp {
                        upstream: mcp.upstream.clone(),
                        list,
                    }),
                    None => tool.list.clone().map(Listing::Http),
                };
                ListedTool {
                    executor: tool.executor,
                    definition: loaded
                        .tools
                        .iter()
                        .find(|definition| definition.name == tool.name)
                        .cloned(),
                    name: tool.name.clone(),
                    owner: tool.owner.clone(),
                    amount_argument: listing.as_ref().and_then(|listing| {
                        let fields = listing.fields();
                        fields.amount.as_ref().map(|_| {
                            fields
                                .amount_argument
                                .clone()
                                .unwrap_or_else(|| "/amount".to_owned())
                        })
                    }),
                    amount_minor_units: listing.as_ref().and_then(|listing| {
                        let source = listing.fields().amount_minor_units.as_deref()?;
                        intentgate_core::currency::CurrencySource::parse(source).ok()
                    }),
                    listing,
                }
            })
            .collect();
        let settings = &loaded.config.reconcile;
        Ok(Reconciler {
            ledger,
            upstream,
            mcp,
            tools,
            notifier,
            metrics,
            unknown_grace_ms: i64::from(settings.unknown_grace_seconds) * 1000,
            settle_ms: i64::from(settings.settle_seconds) * 1000,
        })
    }

    /// Reconciles the `window` that ends the settle time before `now_ms`, as `actor`. When
    /// traces are on, the run is a trace of its own: a `reconcile` root span with a
    /// `reconcile.tool` span per tool.
    pub async fn run(&self, window: Duration, now_ms: i64, actor: &str) -> Report {
        if !trace::enabled() {
            return self.run_untraced(window, now_ms, actor).await;
        }
        let span = tracing::info_span!(
            target: trace::PHASE_TARGET,
            parent: None,
            "reconcile",
            intentgate.actor = %actor,
            intentgate.window_ms = window.as_millis() as i64
        );
        let report = self
            .run_untraced(window, now_ms, actor)
            .instrument(span.clone())
            .await;
        trace::set_attribute(
            &span,
            "intentgate.mismatches",
            report.mismatches_total as i64,
        );
        trace::set_attribute(&span, "intentgate.critical", report.critical as i64);
        report
    }

    async fn run_untraced(&self, window: Duration, now_ms: i64, actor: &str) -> Report {
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
            let span = intentgate_gate::phase!("reconcile.tool", intentgate.tool = %tool.name);
            let tool_report = self
                .run_tool(tool, &options, &mut report)
                .instrument(span)
                .await;
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
        if tool.executor == Executor::Client {
            let mut skipped = ToolReport::new(&tool.name, tool.owner.as_deref());
            skipped.skipped = Some(
                "executed by the caller's code (`executor: client`): the gateway can't list its \
                 provider's records, so reconciling them is the caller's"
                    .to_owned(),
            );
            return skipped;
        }
        let Some(listing) = &tool.listing else {
            let mut empty = ToolReport::new(&tool.name, tool.owner.as_deref());
            empty.error = Some(
                "the tool has no `list`, so its provider records can't be compared: add one to the config".to_owned(),
            );
            return empty;
        };
        let source = match self.source(&tool.name, listing, options) {
            Ok(source) => source,
            Err(error) => {
                let mut failed = ToolReport::new(&tool.name, tool.owner.as_deref());
                failed.error = Some(error);
                return failed;
            }
        };
        let to_reconcile = ToolToReconcile {
            tool: tool.name.clone(),
            owner: tool.owner.clone(),
            amount_argument: tool.amount_argument.clone(),
            amount_minor_units: tool.amount_minor_units.clone(),
            pairing: Pairing::of_match(listing.match_fields()),
            source,
            definition: tool.definition.clone(),
            // Every other side-effecting tool, whoever executes it: a tool executed by the
            // caller's code has no listing of its own, and its effects often share this one's.
            other_tools: self
                .tools
                .iter()
                .filter(|other| other.name != tool.name)
                .map(|other| other.name.clone())
                .collect(),
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

    /// The pager over `tool`'s provider records in the run's window.
    fn source(
        &self,
        tool: &str,
        listing: &Listing,
        options: &ReconcileOptions,
    ) -> Result<Box<dyn RecordSource>, String> {
        match listing {
            Listing::Http(list) => self
                .upstream
                .list_records(
                    tool,
                    list,
                    options.since_ms,
                    options.until_ms,
                    PROVIDER_PAGE,
                )
                .map(|pager| Box::new(pager) as Box<dyn RecordSource>)
                .map_err(|error| error.to_string()),
            Listing::Mcp { upstream, list } => {
                let connection = self.mcp.get(upstream).ok_or_else(|| {
                    format!(
                        "MCP upstream `{upstream}` is not running here, so its records can't be listed"
                    )
                })?;
                McpRecordPager::new(
                    connection.clone(),
                    list.clone(),
                    options.since_ms,
                    options.until_ms,
                    PROVIDER_PAGE,
                )
                .map(|pager| Box::new(pager) as Box<dyn RecordSource>)
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
