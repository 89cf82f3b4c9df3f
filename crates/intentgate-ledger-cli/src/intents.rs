//! `intentgate intents`: list, show, resolve, reopen and erase intents, on the ledger
//! directly.
//!
//! The commands open the ledger the gateways use (a SQLite file or a PostgreSQL URL), so
//! they work whether or not a gateway is running. A resolution follows the same rules as
//! the admin API (`intentgate_admin::ManualResolution`, `check_resolvable`) and goes through
//! `Ledger::resolve`, which checks the transition and writes the event log entry with the
//! actor and the reason. A reopening (a `rejected` intent whose refusal was the gateway's own
//! error made `not_executed`) follows `intentgate_admin::ManualReopen` and
//! `check_reopenable`, through the same `Ledger::resolve`. An erasure goes through `intentgate_admin::erase_all`, as the admin
//! API's does. Arguments are shown as the ledger keeps them: sensitive ones as their keyed
//! hashes (`hmac-sha256:...`).

use std::fmt::Write as _;

use anyhow::{Context, anyhow, bail};
use clap::{Args, Subcommand, ValueEnum};
use intentgate_admin::{
    ManualReopen, ManualResolution, Unresolvable, check_erase, check_reopenable, check_resolvable,
    erase_all,
};
use intentgate_core::IntentStatus;
use intentgate_core::text::printable;
use intentgate_gate::{Clock, SystemClock};
use intentgate_ledger::{
    Erase, Event, IntentFilter, IntentId, IntentRecord, Ledger, LedgerError, Order,
};
use serde_json::json;

use intentgate_terminal::time::utc;

use crate::location::{IntentsLedgerArgs, open};

/// `intentgate intents`.
#[derive(Debug, Args)]
pub struct IntentsArgs {
    #[command(subcommand)]
    pub command: IntentsCommand,
}

/// What to do with intents. Each works on the ledger directly, whether or not a gateway is
/// running.
#[derive(Debug, Subcommand)]
pub enum IntentsCommand {
    /// List intents, newest first: id, tenant, tool, key, status, calls, attempts, when
    /// first seen (UTC) and the provider's external id.
    List(IntentsListArgs),
    /// Show one intent and its event log.
    Show(IntentsShowArgs),
    /// Resolve an intent by hand: `done` with the provider's external id, or `not_executed`.
    #[command(
        long_about = "Resolve an intent by hand: `done` with the provider's external id \
(the effect happened), or `not_executed` (it certainly did not).

Only an intent whose outcome is unknown (or left in_flight with an expired lease) can be \
resolved; a done or otherwise settled intent can't be changed. Check the provider first (its \
dashboard, or a lookup by the intent key). The change is written to the intent's event log with \
--actor and --reason, and every repeat of the call then gets the resolved answer: `done` \
replays the external id as already_done, `not_executed` lets the next call try again. A \
rejected intent is not resolved but reopened (`intentgate intents reopen`)."
    )]
    Resolve(IntentsResolveArgs),
    /// Reopen a rejected intent whose refusal was the gateway's own error (a wrong API key,
    /// a wrong route): it becomes `not_executed`, and the next call executes it.
    #[command(
        long_about = "Reopen a rejected intent whose stored refusal was wrong: the provider \
refused the gateway, not the customer's request (a wrong or expired API key answered 401, a \
key without a permission 403, a misconfigured route 404), and every repeat of the call has been \
answered with that refusal since.

Fix the gateway's config first (and restart it), then reopen: the intent becomes not_executed, \
its stored refusal is dropped and its provider idempotency key moves to a new epoch (`#2`, as \
a retry of a rejection does: the refused attempt did nothing, and a provider that stored its \
refusal under the old key would replay it). The next call of the tool with the same arguments \
then executes it, once. Only a rejected intent can be reopened; an unknown one is resolved \
(`intentgate intents resolve`), a done one is final.

The intent is named by its tool and key, as `intentgate intents list --status rejected` and the \
gateway's log lines show them, within --tenant. The change is written to the intent's event \
log (kind `reopen`) with --actor and --reason.

Since calls that fail because the gateway is misconfigured now end not_executed rather than \
rejected, this is for refusals stored before that, or by an older gateway."
    )]
    Reopen(IntentsReopenArgs),
    /// Erase a tenant's intents (or one tool's, or one key's) on request, with their events.
    #[command(
        long_about = "Erase a tenant's intents (or one tool's, or one intent key's) on request, \
with their event log and the reconciliation mismatches that name them: for a customer who \
leaves, or a data-protection request.

Settled intents (done, rejected, not_executed) are erased. An intent that is not settled \
(pending, in flight, unknown) may have had its effect; once erased the gateway forgets it, and \
a repeat of its call would execute again: such intents are refused unless --force is given \
(resolve them first with `intentgate intents resolve`). An intent a call holds right now is \
never erased. A repeat of an erased intent's call is a new intent, so erase only what no agent \
will ask for again.

The erasure is written to the ledger's event log (kind `erased`: tenant, tool, counts, actor \
and reason, never what was erased) and to this command's log (stderr). Keep personal data out \
of --reason. SQLite overwrites deleted rows and truncates its WAL when it can; PostgreSQL keeps \
deleted rows until VACUUM reclaims them."
    )]
    Erase(IntentsEraseArgs),
}

/// `intentgate intents list`.
#[derive(Debug, Args)]
pub struct IntentsListArgs {
    /// Only this tool's intents.
    #[arg(long)]
    pub tool: Option<String>,
    /// Only intents in this status.
    #[arg(long, value_enum)]
    pub status: Option<StatusArgument>,
    /// Only this tenant's intents.
    #[arg(long)]
    pub tenant: Option<String>,
    /// Only the intent with this key.
    #[arg(long)]
    pub key: Option<String>,
    /// Most intents listed.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub limit: u32,
    /// Oldest first instead of newest first.
    #[arg(long)]
    pub oldest: bool,
    /// `text` (a table) or `json` (one object per line).
    #[arg(long, value_enum, default_value_t = IntentsFormat::Text)]
    pub format: IntentsFormat,
    #[command(flatten)]
    pub location: IntentsLedgerArgs,
}

/// `intentgate intents show`.
#[derive(Debug, Args)]
pub struct IntentsShowArgs {
    /// The intent's id (the first column of `intents list`).
    pub id: i64,
    /// `text` or `json` (one object: the intent and its events).
    #[arg(long, value_enum, default_value_t = IntentsFormat::Text)]
    pub format: IntentsFormat,
    #[command(flatten)]
    pub location: IntentsLedgerArgs,
}

/// `intentgate intents resolve`.
#[derive(Debug, Args)]
pub struct IntentsResolveArgs {
    /// The intent's id (the first column of `intents list`).
    pub id: i64,
    /// What happened: `done` (needs --external-id) or `not_executed`.
    #[arg(long, value_enum)]
    pub status: ManualStatusArgument,
    /// The provider's id for the effect (the refund's or charge's id); required for `done`.
    #[arg(long)]
    pub external_id: Option<String>,
    /// Why: what the provider or the customer showed. Written to the event log.
    #[arg(long)]
    pub reason: String,
    /// Who resolves it (written to the event log).
    #[arg(long, env = "USER", default_value = "cli")]
    pub actor: String,
    #[command(flatten)]
    pub location: IntentsLedgerArgs,
}

/// `intentgate intents reopen`.
#[derive(Debug, Args)]
pub struct IntentsReopenArgs {
    /// The intent's tool (the TOOL column of `intents list`).
    pub tool: String,
    /// The intent's key (the KEY column of `intents list`).
    pub key: String,
    /// The intent's tenant.
    #[arg(long, default_value = "default")]
    pub tenant: String,
    /// Why the stored refusal was wrong (the misconfiguration, and that it is fixed).
    /// Written to the event log.
    #[arg(long)]
    pub reason: String,
    /// Who reopens it (written to the event log).
    #[arg(long, env = "USER", default_value = "cli")]
    pub actor: String,
    #[command(flatten)]
    pub location: IntentsLedgerArgs,
}

/// `intentgate intents erase`.
#[derive(Debug, Args)]
pub struct IntentsEraseArgs {
    /// Whose data: the tenant's intents.
    #[arg(long)]
    pub tenant: String,
    /// Only this tool's intents of the tenant.
    #[arg(long)]
    pub tool: Option<String>,
    /// Only the intent with this key (as `intents list` shows it); needs --tool.
    #[arg(long, requires = "tool")]
    pub key: Option<String>,
    /// Why: the request this answers. Kept in the event log, so name no personal data.
    #[arg(long)]
    pub reason: String,
    /// Who asks for it (written to the event log).
    #[arg(long, env = "USER", default_value = "cli")]
    pub actor: String,
    /// Also erase intents that are not settled (pending, in flight with an expired lease,
    /// unknown), whose effect may have happened.
    #[arg(long)]
    pub force: bool,
    /// `text` (one line) or `json` (one object with the counts).
    #[arg(long, value_enum, default_value_t = IntentsFormat::Text)]
    pub format: IntentsFormat,
    #[command(flatten)]
    pub location: IntentsLedgerArgs,
}

/// An intent status as a flag value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatusArgument {
    #[value(name = "pending")]
    Pending,
    #[value(name = "in_flight")]
    InFlight,
    #[value(name = "done")]
    Done,
    #[value(name = "rejected")]
    Rejected,
    #[value(name = "not_executed")]
    NotExecuted,
    #[value(name = "unknown")]
    Unknown,
}

impl From<StatusArgument> for IntentStatus {
    fn from(argument: StatusArgument) -> IntentStatus {
        match argument {
            StatusArgument::Pending => IntentStatus::Pending,
            StatusArgument::InFlight => IntentStatus::InFlight,
            StatusArgument::Done => IntentStatus::Done,
            StatusArgument::Rejected => IntentStatus::Rejected,
            StatusArgument::NotExecuted => IntentStatus::NotExecuted,
            StatusArgument::Unknown => IntentStatus::Unknown,
        }
    }
}

/// The statuses an operator may set by hand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ManualStatusArgument {
    /// The effect happened at the provider.
    #[value(name = "done")]
    Done,
    /// The effect certainly did not happen.
    #[value(name = "not_executed")]
    NotExecuted,
}

impl From<ManualStatusArgument> for IntentStatus {
    fn from(argument: ManualStatusArgument) -> IntentStatus {
        match argument {
            ManualStatusArgument::Done => IntentStatus::Done,
            ManualStatusArgument::NotExecuted => IntentStatus::NotExecuted,
        }
    }
}

/// How `intents list` and `intents show` print.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum IntentsFormat {
    /// A table.
    Text,
    /// JSON: one object per line.
    Json,
}

/// Intents read from the ledger at once while listing: a page in memory at a time.
const PAGE_LIMIT: u32 = 1000;
/// Widest column of the text table; longer values (keys, external ids) are cut with `…`.
const COLUMN_WIDTH_MAX: usize = 60;

pub async fn run(arguments: IntentsArgs) -> anyhow::Result<()> {
    match arguments.command {
        IntentsCommand::List(arguments) => list(arguments).await,
        IntentsCommand::Show(arguments) => show(arguments).await,
        IntentsCommand::Resolve(arguments) => resolve(arguments).await,
        IntentsCommand::Reopen(arguments) => reopen(arguments).await,
        IntentsCommand::Erase(arguments) => erase(arguments).await,
    }
}

async fn list(arguments: IntentsListArgs) -> anyhow::Result<()> {
    let (ledger, _) = open(&arguments.location).await?;
    let filter = IntentFilter {
        tenant: arguments.tenant,
        tool: arguments.tool,
        key: arguments.key,
        status: arguments.status.map(IntentStatus::from),
        ..IntentFilter::default()
    };
    let order = if arguments.oldest {
        Order::Oldest
    } else {
        Order::Newest
    };
    let mut intents: Vec<IntentRecord> = Vec::new();
    let mut cursor = None;
    while intents.len() < arguments.limit as usize {
        let page = (arguments.limit - intents.len() as u32).min(PAGE_LIMIT);
        let read = ledger
            .intents(&filter, order, cursor, page)
            .await
            .context("reading intents")?;
        let done = read.len() < page as usize;
        cursor = read.last().map(|intent| intent.id);
        intents.extend(read);
        if done {
            break;
        }
    }
    let mut out = String::new();
    match arguments.format {
        IntentsFormat::Json => {
            for intent in &intents {
                writeln!(out, "{}", serde_json::to_string(intent)?)?;
            }
        }
        IntentsFormat::Text if intents.is_empty() => {
            eprintln!("no intents match");
        }
        IntentsFormat::Text => {
            let header = COLUMNS.map(|(title, _)| title);
            let rows: Vec<Vec<String>> = intents
                .iter()
                .map(|intent| COLUMNS.iter().map(|(_, cell)| cell(intent)).collect())
                .collect();
            table(&mut out, &header, &rows);
        }
    }
    print!("{out}");
    Ok(())
}

async fn show(arguments: IntentsShowArgs) -> anyhow::Result<()> {
    let (ledger, shown) = open(&arguments.location).await?;
    let intent = read(&*ledger, arguments.id, &shown).await?;
    let events = ledger
        .events(intent.id)
        .await
        .context("reading the event log")?;
    let mut out = String::new();
    match arguments.format {
        IntentsFormat::Json => {
            writeln!(out, "{}", json!({ "intent": intent, "events": events }))?;
        }
        IntentsFormat::Text => describe(&mut out, &intent, &events, SystemClock.now_ms())?,
    }
    print!("{out}");
    Ok(())
}

async fn resolve(arguments: IntentsResolveArgs) -> anyhow::Result<()> {
    let asked = ManualResolution {
        status: arguments.status.into(),
        external_id: arguments.external_id,
        reason: arguments.reason,
        actor: arguments.actor,
    };
    asked.check().map_err(|message| anyhow!(message))?;
    let (ledger, shown) = open(&arguments.location).await?;
    let id = arguments.id;
    let before = read(&*ledger, id, &shown).await?;
    let now_ms = SystemClock.now_ms();
    check_resolvable(&before, asked.status, now_ms).map_err(|why| anyhow!(why.message(id)))?;
    let after = match ledger.resolve(asked.to_resolve(id, now_ms)).await {
        Ok(after) => after,
        // Changed between the read and the write (a gateway settled it meanwhile).
        Err(LedgerError::Transition(illegal)) => bail!(
            "intent {id} became {} while it was being resolved; nothing was changed \
(`intentgate intents show {id}` shows what happened)",
            illegal.from
        ),
        // A gateway took the lease after the check above read the intent.
        Err(error @ LedgerError::LeaseHeld { .. }) => {
            let refused = Unresolvable::from_ledger(&error, before.status, now_ms)
                .expect("a lease refusal reads as one");
            bail!("{}; nothing was changed", refused.message(id))
        }
        Err(error) => return Err(error).context("resolving the intent"),
    };
    let mut out = String::new();
    writeln!(
        out,
        "intent {id}: {} {} (tenant {})",
        printable(&after.tool),
        printable(&after.key),
        printable(&after.tenant)
    )?;
    writeln!(out, "  before: {}", before.status)?;
    let external = after
        .external_id
        .as_deref()
        .map(|external_id| format!(" (external id {})", printable(external_id)))
        .unwrap_or_default();
    writeln!(
        out,
        "  after:  {}{external}, resolved by {}: {}",
        after.status,
        printable(&asked.actor),
        printable(asked.reason.trim())
    )?;
    print!("{out}");
    Ok(())
}

async fn reopen(arguments: IntentsReopenArgs) -> anyhow::Result<()> {
    let asked = ManualReopen {
        reason: arguments.reason,
        actor: arguments.actor,
    };
    asked.check().map_err(|message| anyhow!(message))?;
    let (ledger, shown) = open(&arguments.location).await?;
    let before = ledger
        .get(&arguments.tenant, &arguments.tool, &arguments.key)
        .await
        .context("reading the intent")?
        .ok_or_else(|| {
            anyhow!(
                "no intent of tool {} with key {} in tenant {} in the ledger at {shown}; \
`intentgate intents list --status rejected` shows the rejected ones",
                printable(&arguments.tool),
                printable(&arguments.key),
                printable(&arguments.tenant)
            )
        })?;
    let id = before.id;
    check_reopenable(&before).map_err(|message| anyhow!(message))?;
    let after = match ledger
        .resolve(asked.to_resolve(id, SystemClock.now_ms()))
        .await
    {
        Ok(after) => after,
        Err(LedgerError::Transition(illegal)) => bail!(
            "intent {id} became {} while it was being reopened; nothing was changed \
(`intentgate intents show {id}` shows what happened)",
            illegal.from
        ),
        Err(error) => return Err(error).context("reopening the intent"),
    };
    let mut out = String::new();
    writeln!(
        out,
        "intent {id}: {} {} (tenant {})",
        printable(&after.tool),
        printable(&after.key),
        printable(&after.tenant)
    )?;
    writeln!(out, "  before: {}", before.status)?;
    writeln!(
        out,
        "  after:  {} (provider key epoch {}), reopened by {}: {}",
        after.status,
        after.epoch,
        printable(&asked.actor),
        printable(asked.reason.trim())
    )?;
    writeln!(
        out,
        "  the next call of {} with the same arguments executes it",
        printable(&after.tool)
    )?;
    print!("{out}");
    Ok(())
}

async fn erase(arguments: IntentsEraseArgs) -> anyhow::Result<()> {
    let erase = Erase {
        tenant: arguments.tenant,
        tool: arguments.tool,
        key: arguments.key,
        force: arguments.force,
        actor: arguments.actor,
        reason: arguments.reason,
        now_ms: SystemClock.now_ms(),
    };
    check_erase(&erase).map_err(|message| anyhow!(message))?;
    let (ledger, shown) = open(&arguments.location).await?;
    let report = erase_all(&*ledger, &erase)
        .await
        .context("erasing from the ledger")?;
    let erased = &report.erased;
    let counts = format!(
        "{} intents, {} events, {} reconciliation mismatches",
        erased.intents, erased.events, erased.mismatches
    );
    if let Some(refused) = &report.refused {
        bail!(
            "{}; erased before this: {counts} (from the ledger at {shown})",
            refused.message()
        );
    }
    let mut out = String::new();
    match arguments.format {
        IntentsFormat::Json => writeln!(out, "{}", serde_json::to_string(erased)?)?,
        IntentsFormat::Text => {
            let scope = match (&erase.tool, &erase.key) {
                (Some(tool), Some(_)) => format!(", tool {}, one key", printable(tool)),
                (Some(tool), None) => format!(", tool {}", printable(tool)),
                _ => String::new(),
            };
            writeln!(
                out,
                "erased from the ledger at {shown}: {counts} (tenant {}{scope}){}",
                printable(&erase.tenant),
                if erased.more {
                    "; more remain (intents keep arriving?): run it again"
                } else {
                    ""
                }
            )?;
        }
    }
    print!("{out}");
    Ok(())
}

async fn read(ledger: &dyn Ledger, id: IntentId, shown: &str) -> anyhow::Result<IntentRecord> {
    ledger
        .get_by_id(id)
        .await
        .context("reading the intent")?
        .ok_or_else(|| {
            anyhow!(
                "no intent with id {id} in the ledger at {shown}; `intentgate intents list` \
shows the ids"
            )
        })
}

/// The intent's fields and its event log, as `intents show` prints them.
fn describe(
    out: &mut String,
    intent: &IntentRecord,
    events: &[Event],
    now_ms: i64,
) -> std::fmt::Result {
    let or_dash = |value: Option<&str>| value.map(printable).unwrap_or_else(|| "-".to_owned());
    writeln!(
        out,
        "intent {}: {} {} (tenant {})",
        intent.id,
        printable(&intent.tool),
        printable(&intent.key),
        printable(&intent.tenant)
    )?;
    writeln!(out, "  status:       {}", intent.status)?;
    writeln!(
        out,
        "  attempts:     {} (provider key epoch {})",
        intent.attempt, intent.epoch
    )?;
    if let Some(stop) = intent.resend_stopped {
        // Only lookups move it on now: say why, so nobody waits for a re-send.
        writeln!(out, "  re-sends:     stopped: {}", stop.describe())?;
    }
    writeln!(out, "  calls:        {}", intent.call_count)?;
    writeln!(out, "  first seen:   {} UTC", utc(intent.first_seen_ms))?;
    writeln!(out, "  last seen:    {} UTC", utc(intent.last_seen_ms))?;
    writeln!(out, "  updated:      {} UTC", utc(intent.updated_ms))?;
    let lease = match (&intent.lease_owner, intent.lease_expires_ms) {
        (Some(owner), Some(expiry)) => format!(
            "{} until {} UTC{}",
            printable(owner),
            utc(expiry),
            if intent.lease_live(now_ms) {
                ""
            } else {
                " (expired)"
            }
        ),
        _ => "-".to_owned(),
    };
    writeln!(out, "  lease:        {lease}")?;
    writeln!(
        out,
        "  external id:  {}",
        or_dash(intent.external_id.as_deref())
    )?;
    writeln!(
        out,
        "  resolved by:  {}",
        or_dash(intent.resolved_by.as_deref())
    )?;
    writeln!(
        out,
        "  arguments:    {}",
        printable(&intent.arguments.to_string())
    )?;
    let result = intent.result.as_ref().map(|result| result.to_string());
    writeln!(out, "  result:       {}", or_dash(result.as_deref()))?;
    writeln!(out)?;
    writeln!(out, "events, oldest first:")?;
    let rows: Vec<Vec<String>> = events
        .iter()
        .map(|event| {
            let change = match (&event.from_status, &event.to_status) {
                (None, None) => "-".to_owned(),
                (from, to) => format!("{} → {}", or_dash(from.as_deref()), or_dash(to.as_deref())),
            };
            vec![
                utc(event.at_ms),
                printable(&event.kind),
                change,
                or_dash(event.actor.as_deref()),
                // The detail is the last column: never cut.
                or_dash(event.detail.as_deref()),
            ]
        })
        .collect();
    table(
        out,
        &["TIME (UTC)", "KIND", "FROM → TO", "ACTOR", "DETAIL"],
        &rows,
    );
    Ok(())
}

/// How an intent fills one column of `intents list`.
type Cell = fn(&IntentRecord) -> String;

/// The columns of `intents list`: a title, and how an intent fills it.
const COLUMNS: [(&str, Cell); 9] = [
    ("ID", |intent| intent.id.to_string()),
    ("TENANT", |intent| printable(&intent.tenant)),
    ("TOOL", |intent| printable(&intent.tool)),
    ("KEY", |intent| printable(&intent.key)),
    ("STATUS", |intent| intent.status.to_string()),
    ("CALLS", |intent| intent.call_count.to_string()),
    ("ATTEMPTS", |intent| intent.attempt.to_string()),
    ("FIRST SEEN (UTC)", |intent| utc(intent.first_seen_ms)),
    ("EXTERNAL ID", |intent| {
        let external_id = intent.external_id.as_deref();
        external_id.map(printable).unwrap_or_else(|| "-".to_owned())
    }),
];

/// Writes a table with aligned columns; every column but the last is cut at
/// [`COLUMN_WIDTH_MAX`] characters.
fn table(out: &mut String, header: &[&str], rows: &[Vec<String>]) {
    let last = header.len() - 1;
    let cells = |row: &[String]| -> Vec<String> {
        row.iter()
            .enumerate()
            .map(|(column, cell)| {
                if column < last {
                    cut(cell, COLUMN_WIDTH_MAX)
                } else {
                    cell.clone()
                }
            })
            .collect()
    };
    let header: Vec<String> = header.iter().map(|title| (*title).to_owned()).collect();
    let rows = std::iter::once(header).chain(rows.iter().map(|row| cells(row)));
    out.push_str(&intentgate_terminal::table::render(rows, &[]));
}

/// `text` cut to `width` characters, the last one `…` when cut.
fn cut(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(width - 1).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_long_cells_cut() {
        assert_eq!(printable("a\nb\u{1b}[31m"), "a\\nb\\u{1b}[31m");
        assert_eq!(cut("abcdef", 4), "abc…");
        assert_eq!(cut("abc", 4), "abc");
    }
}
