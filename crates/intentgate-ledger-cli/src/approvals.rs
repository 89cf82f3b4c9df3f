//! `intentgate approvals`: list the intents held for approval, and approve or deny one, on
//! the ledger directly (docs/design.md section 13).
//!
//! For an operator with access to the ledger when the admin API is out of reach. A
//! decision goes through `Ledger::decide`, which refuses the subject that asked
//! (`--actor` equal to the request's `requested_by`), a request no longer open and one past
//! its deadline (which it settles), exactly as for the admin API. Two things the admin API
//! does are not done here, because they need the running gateway's gate: an approved intent
//! is not executed by this command (the gateway's sweeper starts it within its sweep
//! interval, or the intent's next call does), and it is not counted against the tool's
//! budgets (the command passes none). Arguments are shown as the ledger keeps them:
//! sensitive ones as their keyed hashes (`hmac-sha256:...`).

use std::sync::Arc;

use anyhow::{Context, bail};
use clap::{Args, Subcommand, ValueEnum};
use intentgate_core::text::printable;
use intentgate_gate::{Clock, SystemClock};
use intentgate_ledger::{
    Approval, ApprovalFilter, ApprovalState, Decide, Decided, HeldIntent, Ledger,
};
use serde_json::json;

use intentgate_terminal::Exit;
use intentgate_terminal::time::utc;

use crate::location::{IntentsLedgerArgs, open as open_location};

/// `intentgate approvals`.
#[derive(Debug, Args)]
pub struct ApprovalsArgs {
    #[command(subcommand)]
    pub command: ApprovalsCommand,
}

/// What to do with intents held for approval (docs/design.md section 13). Each works on the
/// ledger directly, whether or not a gateway is running.
#[derive(Debug, Subcommand)]
pub enum ApprovalsCommand {
    /// List held intents, newest first: id, tenant, tool, who asked, when (UTC), the
    /// deadline, the decision, what held it and the exact arguments.
    #[command(
        long_about = "List the intents held for approval, newest first: id, tenant, tool, who \
asked, when and the deadline (UTC), the decision, what held it (the approval policy, or a \
budget) and the exact arguments as the ledger keeps them (sensitive ones as their keyed \
hashes, `hmac-sha256:...`).

--state open (the default) lists the requests nobody has decided yet, approved those approved \
whose intent has not started yet, closed those decided or expired."
    )]
    List(ApprovalsListArgs),
    /// Approve a held intent, as --actor; the running gateway's sweeper then starts it.
    #[command(
        long_about = "Approve one held intent, recorded in the ledger under --actor \
(with --reason, if given) in the intent's event log.

Refused (exit status 1, saying why): when --actor is the subject that asked for the intent \
(nobody approves their own request), when the request is no longer open (decided already, or \
never held), and when its deadline has passed (the request is then settled: expired, the intent \
not_executed, and a new call of it is held again).

Unlike the admin API (POST /v1/admin/approvals/ID/approve) and the console, this command does \
not execute the intent and does not count it against the tool's budgets: it works on the \
ledger alone, without the gateway's gate. The running gateway's sweeper starts an approved \
intent within its sweep interval (or the intent's next call does), and it is not counted \
against the budgets that would have counted it had it been approved through the gateway. \
The command checks no scope and no tenant: whoever can open the ledger can decide. Prefer the \
admin API or the console, where only a credential with the `approve` scope of the intent's \
tenant decides."
    )]
    Approve(ApprovalsDecideArgs),
    /// Deny a held intent with --reason, as --actor: it is settled rejected.
    #[command(
        long_about = "Deny one held intent, recorded in the ledger under --actor with \
--reason (required) in the intent's event log. The intent is settled rejected, and every call \
of it, from any layer, is answered rejected with the reason, also for a tool that retries \
rejections.

Refused (exit status 1, saying why): when --actor is the subject that asked, when the request \
is no longer open, and when its deadline has passed (the request is then settled expired)."
    )]
    Deny(ApprovalsDecideArgs),
}

/// Which held intents `approvals list` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ApprovalStateArgument {
    /// Nobody has decided yet.
    Open,
    /// Approved, its attempt not started yet.
    Approved,
    /// Decided or expired.
    Closed,
}

/// `intentgate approvals list`.
#[derive(Debug, Args)]
pub struct ApprovalsListArgs {
    /// Which requests: open, approved or closed.
    #[arg(long, value_enum, default_value_t = ApprovalStateArgument::Open)]
    pub state: ApprovalStateArgument,
    /// Only this tool's held intents.
    #[arg(long)]
    pub tool: Option<String>,
    /// Only this tenant's held intents.
    #[arg(long)]
    pub tenant: Option<String>,
    /// Most held intents listed.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub limit: u32,
    /// `text` (a table) or `json` (one object per line).
    #[arg(long, value_enum, default_value_t = ApprovalsFormat::Text)]
    pub format: ApprovalsFormat,
    #[command(flatten)]
    pub location: IntentsLedgerArgs,
}

/// `intentgate approvals approve` and `intentgate approvals deny`.
#[derive(Debug, Args)]
pub struct ApprovalsDecideArgs {
    /// The held intent's id (the first column of `approvals list`).
    pub id: i64,
    /// Who decides, as the event log records it: never the subject that asked.
    #[arg(long)]
    pub actor: String,
    /// Why: optional for an approval, required for a denial (the model that asked reads
    /// it). At most 1024 bytes.
    #[arg(long)]
    pub reason: Option<String>,
    #[command(flatten)]
    pub location: IntentsLedgerArgs,
}

/// How `approvals list` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ApprovalsFormat {
    /// A table.
    Text,
    /// JSON: one object per line.
    Json,
}

/// Widest column of the text table; longer values (keys, arguments) are cut with `…`.
const COLUMN_WIDTH_MAX: usize = 60;

pub async fn run(arguments: ApprovalsArgs) -> anyhow::Result<()> {
    match arguments.command {
        ApprovalsCommand::List(arguments) => list(arguments).await,
        ApprovalsCommand::Approve(arguments) => decide(arguments, true).await,
        ApprovalsCommand::Deny(arguments) => decide(arguments, false).await,
    }
}

/// Opens the ledger named by `--ledger`, or by the config's `gateway.ledger`, as
/// `intentgate intents` does. A SQLite file must exist already.
async fn open(location: &IntentsLedgerArgs) -> anyhow::Result<Arc<dyn Ledger>> {
    Ok(open_location(location).await?.0)
}

async fn list(arguments: ApprovalsListArgs) -> anyhow::Result<()> {
    let ledger = open(&arguments.location).await?;
    let filter = ApprovalFilter {
        tenant: arguments.tenant,
        tool: arguments.tool,
        state: Some(match arguments.state {
            ApprovalStateArgument::Open => ApprovalState::Open,
            ApprovalStateArgument::Approved => ApprovalState::Approved,
            ApprovalStateArgument::Closed => ApprovalState::Closed,
        }),
    };
    let held = ledger
        .approvals(&filter, None, arguments.limit)
        .await
        .context("reading the intents held for approval")?;
    match arguments.format {
        ApprovalsFormat::Json => {
            for held in &held {
                println!("{}", serde_json::to_string(&entry(held))?);
            }
        }
        ApprovalsFormat::Text if held.is_empty() => eprintln!("no held intents match"),
        ApprovalsFormat::Text => print!("{}", table(&held)),
    }
    Ok(())
}

/// One held intent as `--format json` prints it: the fields of the admin API's
/// `GET /v1/admin/approvals`, without its event log.
fn entry(held: &HeldIntent) -> serde_json::Value {
    let (intent, approval) = (&held.intent, &held.approval);
    json!({
        "intent_id": intent.id,
        "tool": intent.tool,
        "tenant": intent.tenant,
        "key": intent.key,
        "status": intent.status,
        "arguments": intent.arguments,
        "requested_by": approval.requested_by,
        "requested_ms": approval.requested_ms,
        "deadline_ms": approval.deadline_ms,
        "held_by": approval.held_by,
        "application_intent_id": approval.intent_id,
        "decision": approval.decision,
        "decided_by": approval.decided_by,
        "decided_ms": approval.decided_ms,
        "reason": approval.reason,
    })
}

fn table(held: &[HeldIntent]) -> String {
    let cut = |text: String| -> String {
        if text.chars().count() <= COLUMN_WIDTH_MAX {
            text
        } else {
            let mut shown: String = text.chars().take(COLUMN_WIDTH_MAX - 1).collect();
            shown.push('…');
            shown
        }
    };
    let header = [
        "ID",
        "TENANT",
        "TOOL",
        "REQUESTED BY",
        "REQUESTED (UTC)",
        "DEADLINE (UTC)",
        "DECISION",
        "HELD BY",
        "ARGUMENTS",
    ]
    .map(str::to_owned);
    let mut rows = vec![header.to_vec()];
    for HeldIntent { intent, approval } in held {
        rows.push(vec![
            intent.id.to_string(),
            printable(&intent.tenant),
            printable(&intent.tool),
            printable(&approval.requested_by),
            utc(approval.requested_ms),
            utc(approval.deadline_ms),
            decision(approval),
            cut(printable(&approval.held_by)),
            // The last column is never cut: the exact arguments are what is approved.
            printable(&intent.arguments.to_string()),
        ]);
    }
    intentgate_terminal::table::render(rows, &[])
}

fn decision(approval: &Approval) -> String {
    match (approval.decision, &approval.decided_by) {
        (None, _) => "open".to_owned(),
        (Some(decision), Some(by)) => format!("{} by {}", decision.as_str(), printable(by)),
        (Some(decision), None) => decision.as_str().to_owned(),
    }
}

async fn decide(arguments: ApprovalsDecideArgs, approve: bool) -> anyhow::Result<()> {
    let reason = arguments.reason.unwrap_or_default().trim().to_owned();
    if !approve && reason.is_empty() {
        bail!(
            "a denial needs --reason: the model that asked reads it, and so does the person it works for"
        );
    }
    if reason.len() > intentgate_admin::REASON_LENGTH_MAX {
        bail!(
            "--reason is {} bytes long; the limit is {}: a few sentences (a ticket number \
links the rest)",
            reason.len(),
            intentgate_admin::REASON_LENGTH_MAX
        );
    }
    let ledger = open(&arguments.location).await?;
    let decided = ledger
        .decide(Decide {
            id: arguments.id,
            approve,
            actor: arguments.actor.clone(),
            reason,
            now_ms: SystemClock.now_ms(),
            // Budgets are the gate's to compute, from the tool's config: not counted here.
            budgets: Vec::new(),
        })
        .await
        .with_context(|| format!("recording the decision on intent {}", arguments.id))?;
    let id = arguments.id;
    match decided {
        Decided::Approved(intent, _) => {
            println!(
                "intent {id} ({} of tenant {}) approved by {}: the gateway's sweeper starts it \
within its sweep interval, or its next call does; it was not counted against the tool's \
budgets",
                printable(&intent.tool),
                printable(&intent.tenant),
                printable(&arguments.actor)
            );
            Ok(())
        }
        Decided::Denied(intent, _) => {
            println!(
                "intent {id} ({} of tenant {}) denied by {}: it is rejected, and every call of \
it is answered with the reason",
                printable(&intent.tool),
                printable(&intent.tenant),
                printable(&arguments.actor)
            );
            Ok(())
        }
        Decided::Expired(_, approval) => Err(refused(format!(
            "refused: nobody decided on intent {id} by its deadline ({} UTC); its request is \
now expired and the intent not_executed, and a new call of it is held again",
            utc(approval.deadline_ms)
        ))),
        Decided::OwnRequest(_, approval) => Err(refused(format!(
            "refused: `{}` asked for intent {id} itself, and nobody approves their own \
request; another approver must decide",
            printable(&approval.requested_by)
        ))),
        Decided::NotAwaiting(intent, approval) => Err(refused(
            match approval
                .and_then(|approval| approval.decision.map(|decision| (decision, approval)))
            {
                Some((decision, approval)) => format!(
                    "refused: intent {id} is not awaiting a decision: its request was {}{}",
                    decision.as_str(),
                    approval
                        .decided_by
                        .map(|by| format!(" by {}", printable(&by)))
                        .unwrap_or_default()
                ),
                None => format!(
                    "refused: intent {id} is {}, not awaiting a decision",
                    intent.status
                ),
            },
        )),
    }
}

/// A decision the ledger refused: exit status 1 with the message.
fn refused(message: String) -> anyhow::Error {
    anyhow::Error::new(Exit::new(1, message))
}
