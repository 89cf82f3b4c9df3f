//! `intentgate reconcile`: one reconciliation run, from the command line.
//!
//! Glue only: load the config, open the ledger, run `intentgate_ops::Reconciler` over the
//! window, print the report (a table, or JSON lines), wait for the owners' webhooks, and
//! exit non-zero when a critical mismatch exists (so a scheduled job or CI step fails) or a
//! tool could not be reconciled.

use std::fmt::Write as _;
use std::sync::Arc;

use anyhow::Context;
use intentgate_gate::{Clock, SystemClock};
use intentgate_ops::{Mismatch, Notifier, Reconciler, Report};
use serde_json::json;

use crate::cli::{OutputFormat, ReconcileArgs};
use intentgate_runtime::{McpUpstreams, load};

/// Exit status when the run found a critical mismatch (a duplicate effect, or an effect the
/// model was told did not happen).
pub const EXIT_CRITICAL: u8 = 2;
/// Exit status when a tool could not be reconciled (its provider listing failed).
pub const EXIT_INCOMPLETE: u8 = 3;

pub async fn run(arguments: ReconcileArgs) -> anyhow::Result<()> {
    let loaded = load(&arguments.config)?;
    let window = intentgate_admin::parse_duration(&arguments.since)
        .map_err(|error| anyhow::anyhow!("--since {}: {error}", arguments.since))?;
    let location = intentgate_runtime::ledger_location(
        arguments.ledger.as_deref(),
        &loaded.config.gateway.ledger,
    );
    // On stderr, so that the report on stdout stays what a script reads.
    eprintln!("ledger: {}", intentgate_ledger::display_location(&location));
    let ledger = intentgate_ledger::open(
        &location,
        intentgate_runtime::durability(loaded.config.gateway.durability),
    )
    .await
    .context("opening the intent ledger")?;
    // Its notices join the ledger's history, which the console of every replica lists.
    let notifier =
        Arc::new(Notifier::new(loaded.config.owners.clone()).with_history(ledger.clone()));
    // The MCP servers are started only when a tool lists its records through one.
    let mcp = if loaded
        .config
        .tools
        .iter()
        .any(|tool| tool.mcp.as_ref().is_some_and(|mcp| mcp.list.is_some()))
    {
        McpUpstreams::start(&loaded)
            .await
            .context("starting the MCP upstreams that list records")?
    } else {
        McpUpstreams::default()
    };
    let reconciler = Reconciler::new(&loaded, ledger, notifier.clone(), None, mcp.connections())
        .context("the upstreams of the config")?;
    let report = reconciler
        .run(window, SystemClock.now_ms(), &arguments.actor)
        .await;
    drop(reconciler);
    match arguments.format {
        OutputFormat::Text => print!("{}", text(&report)),
        OutputFormat::Json => {
            for mismatch in &report.mismatches {
                let mut line = serde_json::to_value(mismatch)?;
                line["type"] = json!("mismatch");
                println!("{line}");
            }
            let mut summary = serde_json::to_value(&report)?;
            if let Some(object) = summary.as_object_mut() {
                object.remove("mismatches");
                object.insert("type".to_owned(), json!("summary"));
            }
            println!("{summary}");
        }
    }
    // Every webhook is posted (or given up) before the process ends.
    if let Some(notifier) = Arc::into_inner(notifier) {
        let delivered = notifier.close().await;
        if delivered.failed > 0 || delivered.dropped > 0 {
            eprintln!(
                "{} owner webhook(s) could not be posted; the notices are in the log",
                delivered.failed + delivered.dropped
            );
        }
    }
    if report.critical > 0 {
        return Err(intentgate_terminal::Exit::new(
            EXIT_CRITICAL,
            format!(
                "{} critical mismatch(es): a customer was affected twice or told something untrue; see the report",
                report.critical
            ),
        )
        .into());
    }
    if report.has_errors() {
        return Err(intentgate_terminal::Exit::new(
            EXIT_INCOMPLETE,
            "some tools could not be reconciled; see the report's errors".to_owned(),
        )
        .into());
    }
    Ok(())
}

/// The report as a human reads it: the window, one line per tool, then every mismatch.
pub fn text(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "reconciliation {}by {}: {} .. {} ({} s)",
        report
            .run_id
            .map(|id| format!("run {id} "))
            .unwrap_or_default(),
        report.actor,
        intentgate_terminal::time::utc(report.since_ms),
        intentgate_terminal::time::utc(report.until_ms),
        (report.until_ms - report.since_ms) / 1000
    );
    let _ = writeln!(
        out,
        "{:<22} {:>10} {:>10} {:>10}  result",
        "tool", "intents", "records", "mismatches"
    );
    for tool in &report.tools {
        let mismatches: u64 = tool.mismatches.values().sum();
        let result = match &tool.error {
            Some(error) => format!("NOT RECONCILED: {error}"),
            None if let Some(reason) = &tool.skipped => format!("skipped: {reason}"),
            None if mismatches == 0 && tool.unknown_pending == 0 => "ok".to_owned(),
            None => {
                let mut parts: Vec<String> = tool
                    .mismatches
                    .iter()
                    .map(|(kind, count)| format!("{count} {}", kind.as_str()))
                    .collect();
                if tool.unknown_pending > 0 {
                    parts.push(format!(
                        "{} unknown within grace period",
                        tool.unknown_pending
                    ));
                }
                parts.join(", ")
            }
        };
        // Not mismatches: records of the config's other tools, paired with their intents.
        let others: Vec<String> = tool
            .records_of_other_tools
            .iter()
            .map(|(other, count)| format!("{count} paired with {other}'s intents"))
            .collect();
        let result = if others.is_empty() {
            result
        } else {
            format!("{result}; records: {}", others.join(", "))
        };
        let _ = writeln!(
            out,
            "{:<22} {:>10} {:>10} {:>10}  {result}",
            tool.tool, tool.intents_checked, tool.records_checked, mismatches
        );
    }
    if !report.mismatches.is_empty() {
        let _ = writeln!(out);
        for mismatch in &report.mismatches {
            let _ = writeln!(out, "{}", mismatch_line(mismatch));
        }
    }
    if report.mismatches_not_listed > 0 {
        let _ = writeln!(
            out,
            "... and {} more mismatches, counted above but not listed",
            report.mismatches_not_listed
        );
    }
    let _ = writeln!(
        out,
        "\n{} mismatches, {} critical",
        report.mismatches_total, report.critical
    );
    out
}

fn mismatch_line(mismatch: &Mismatch) -> String {
    let mut who = Vec::new();
    if let Some(subject) = &mismatch.subject {
        who.push(subject.clone());
    }
    if let Some(key) = &mismatch.intent_key {
        who.push(format!("key {key}"));
    }
    if let Some(id) = mismatch.intent_id {
        who.push(format!("intent {id}"));
    }
    if let Some(tenant) = mismatch.tenant.as_deref().filter(|t| *t != "default") {
        who.push(format!("tenant {tenant}"));
    }
    if !mismatch.external_ids.is_empty() {
        who.push(format!("provider {}", mismatch.external_ids.join(", ")));
    }
    format!(
        "{:<8} {:<22} {:<14} {}: {}",
        mismatch.severity.as_str().to_uppercase(),
        mismatch.kind.as_str(),
        mismatch.tool,
        who.join(", "),
        mismatch.detail
    )
}
