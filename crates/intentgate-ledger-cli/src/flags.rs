//! `intentgate flags`: the kill switch (docs/design.md section 8).
//!
//! Works on the ledger directly, so it needs no running gateway and reaches every replica
//! that shares the ledger: each gateway re-reads the flags every 500 ms
//! (`intentgate_gate::FLAG_REFRESH`) and answers calls to a switched-off tool with status
//! `disabled`; `intentgate mcp` also tells its client that the tool list changed. The
//! config names the tools (an unknown name is refused, with the list) and, unless
//! `--ledger` is given, the ledger.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::{Args, Subcommand, ValueEnum};
use intentgate_config::{HashKeySource, LoadedConfig};
use intentgate_core::limits::{ACTOR_LENGTH_MAX, EVENT_DETAIL_LENGTH_MAX};
use intentgate_gate::{Clock, SystemClock};
use intentgate_ledger::{Durability, Ledger, ToolFlag};
use serde::Serialize;

use intentgate_runtime::load_reading;

/// `intentgate flags`.
#[derive(Debug, Args)]
pub struct FlagsArgs {
    #[command(subcommand)]
    pub command: FlagsCommand,
}

/// What to do with the kill-switch flags. Each works on the ledger directly, whether or
/// not a gateway is running.
#[derive(Debug, Subcommand)]
pub enum FlagsCommand {
    /// List every tool of the config as on or off, with the reason, who and when.
    #[command(
        long_about = "List every tool of the config as on or off, with the reason, who \
switched it and when (UTC), as stored in the ledger. Flags stored for tools that are no longer \
in the config are listed too, marked as such. A switch is honoured by every gateway sharing \
the ledger within a second."
    )]
    List(FlagsListArgs),
    /// Switch a tool off: every gateway sharing the ledger answers its calls with status
    /// `disabled` within a second.
    #[command(long_about = "Switch a tool off (the kill switch).

The flag is written to the ledger, so it is honoured by every gateway sharing the ledger within a \
second (`intentgate serve` replicas and `intentgate mcp`), whether or not one is running now: \
calls to the tool do nothing and return status `disabled` (the model is told a person will \
follow up), while the agent keeps running. MCP clients connected over stdio are told that the \
tool list changed. `intentgate flags enable TOOL` switches it back on.")]
    Disable(FlagsDisableArgs),
    /// Switch a tool back on: every gateway sharing the ledger runs its calls again within
    /// a second.
    #[command(long_about = "Switch a tool back on.

The flag is written to the ledger, so it is honoured by every gateway sharing the ledger within a \
second (`intentgate serve` replicas and `intentgate mcp`): calls to the tool run again. \
MCP clients connected over stdio are told that the tool list changed.")]
    Enable(FlagsEnableArgs),
}

/// Where the flags live: the config names the tools and, unless --ledger is given, the
/// ledger and its durability.
#[derive(Debug, Args)]
pub struct FlagsLedgerArgs {
    /// The tool config (YAML) of the gateways: its tool names, and its `gateway.ledger`.
    /// Its upstreams' secrets (`${NAME}`) need not be set: flags call no upstream.
    #[arg(long, env = "INTENTGATE_CONFIG")]
    pub config: PathBuf,
    /// The ledger (overrides `gateway.ledger`): a SQLite file, or a PostgreSQL URL. The
    /// one every gateway of the deployment uses. A relative path is read from the working
    /// directory (a relative `gateway.ledger`, from the config file's folder); the absolute
    /// one is printed on stderr.
    #[arg(long, env = "INTENTGATE_LEDGER")]
    pub ledger: Option<String>,
}

/// `intentgate flags list`.
#[derive(Debug, Args)]
pub struct FlagsListArgs {
    #[command(flatten)]
    pub location: FlagsLedgerArgs,
    /// `text` (a table) or `json` (one object).
    #[arg(long, value_enum, default_value_t = FlagsFormat::Text)]
    pub format: FlagsFormat,
}

/// `intentgate flags disable`.
#[derive(Debug, Args)]
pub struct FlagsDisableArgs {
    /// The tool to switch off, as named in the config.
    pub tool: String,
    /// Why it is switched off, for whoever reads the list next (stored in the ledger and
    /// its event log).
    #[arg(long)]
    pub reason: String,
    /// Who switches it off.
    #[arg(long, env = "USER", default_value = "cli")]
    pub actor: String,
    #[command(flatten)]
    pub location: FlagsLedgerArgs,
}

/// `intentgate flags enable`.
#[derive(Debug, Args)]
pub struct FlagsEnableArgs {
    /// The tool to switch back on, as named in the config.
    pub tool: String,
    /// Why it is switched back on (stored in the ledger and its event log).
    #[arg(long)]
    pub reason: Option<String>,
    /// Who switches it on.
    #[arg(long, env = "USER", default_value = "cli")]
    pub actor: String,
    #[command(flatten)]
    pub location: FlagsLedgerArgs,
}

/// How `flags list` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FlagsFormat {
    /// A table.
    Text,
    /// One JSON object.
    Json,
}

/// Most characters of a reason shown in the text table; `--format json` shows all of it.
const REASON_SHOWN_MAX: usize = 80;
/// What every switch promises, printed after it.
const HONOURED: &str = "every gateway sharing this ledger honours it within a second";

pub async fn run(arguments: FlagsArgs) -> anyhow::Result<()> {
    match arguments.command {
        FlagsCommand::List(arguments) => list(arguments).await,
        FlagsCommand::Disable(arguments) => disable(arguments).await,
        FlagsCommand::Enable(arguments) => enable(arguments).await,
    }
}

/// The config and where its ledger is.
struct Place {
    loaded: LoadedConfig,
    config_path: String,
    /// A SQLite path (absolute) or a PostgreSQL URL.
    ledger: String,
    durability: Durability,
}

impl Place {
    fn resolve(arguments: &FlagsLedgerArgs) -> anyhow::Result<Place> {
        // Flags hash nothing and call no upstream: no hash key and no secret needed.
        let loaded = load_reading(&arguments.config, &HashKeySource::NotNeeded)?;
        let ledger = intentgate_runtime::ledger_location(
            arguments.ledger.as_deref(),
            &loaded.config.gateway.ledger,
        );
        // On stderr, so that the listing on stdout stays what a script reads.
        eprintln!("ledger: {}", intentgate_ledger::display_location(&ledger));
        let durability = intentgate_runtime::durability(loaded.config.gateway.durability);
        Ok(Place {
            loaded,
            config_path: arguments.config.display().to_string(),
            ledger,
            durability,
        })
    }

    /// The ledger as it may be shown (a URL without its password).
    fn ledger_shown(&self) -> String {
        intentgate_ledger::display_location(&self.ledger)
    }

    /// False for a SQLite file that does not exist yet (no gateway has used it).
    fn ledger_exists(&self) -> bool {
        intentgate_ledger::Location::parse(&self.ledger).exists()
    }

    async fn open(&self) -> anyhow::Result<Arc<dyn Ledger>> {
        intentgate_ledger::open(&self.ledger, self.durability)
            .await
            .with_context(|| format!("opening the intent ledger {}", self.ledger_shown()))
    }

    /// The config's tool names, in file order.
    fn tool_names(&self) -> Vec<&str> {
        self.loaded
            .tools
            .iter()
            .map(|tool| tool.name.as_str())
            .collect()
    }

    /// Refuses a tool the config does not have, naming the ones it has.
    fn check_tool(&self, tool: &str) -> anyhow::Result<()> {
        if self.tool_names().contains(&tool) {
            return Ok(());
        }
        bail!(
            "no tool named `{tool}` in {}; its tools are: {}",
            self.config_path,
            self.tool_names().join(", ")
        )
    }
}

/// One tool's line of `flags list`.
#[derive(Debug, Serialize)]
struct Row {
    tool: String,
    /// `on` or `off`.
    state: &'static str,
    enabled: bool,
    /// False for a flag stored for a tool the config no longer has.
    configured: bool,
    /// The stored flag's reason, actor and time; absent for a tool never switched.
    reason: Option<String>,
    actor: Option<String>,
    updated_ms: Option<i64>,
    /// `updated_ms` as UTC, RFC 3339.
    updated_at: Option<String>,
}

/// What `flags list --format json` prints: the admin API's `GET /v1/admin/flags` shape
/// (`flags`, each with `tool`, `configured`, `enabled`, `reason`, `actor`, `updated_ms`),
/// plus the ledger, a `state` word and the time in UTC.
#[derive(Debug, Serialize)]
struct Listing {
    ledger: String,
    flags: Vec<Row>,
}

async fn list(arguments: FlagsListArgs) -> anyhow::Result<()> {
    let place = Place::resolve(&arguments.location)?;
    let flags = if place.ledger_exists() {
        place
            .open()
            .await?
            .tool_flags()
            .await
            .context("reading the tool flags")?
    } else {
        // Listing must not create a ledger at a mistyped path.
        eprintln!(
            "no ledger at {} yet: no tool has been switched off there",
            place.ledger_shown()
        );
        Vec::new()
    };
    let rows = rows(&place.tool_names(), flags);
    match arguments.format {
        FlagsFormat::Json => {
            let listing = Listing {
                ledger: place.ledger_shown(),
                flags: rows,
            };
            println!("{}", serde_json::to_string_pretty(&listing)?);
        }
        FlagsFormat::Text => print!("{}", table(&rows)),
    }
    Ok(())
}

/// Every tool of the config (in file order), then flags of tools it no longer has.
fn rows(tools: &[&str], flags: Vec<ToolFlag>) -> Vec<Row> {
    let mut flags: BTreeMap<String, ToolFlag> = flags
        .into_iter()
        .map(|flag| (flag.tool.clone(), flag))
        .collect();
    let row = |tool: String, flag: Option<ToolFlag>, configured: bool| {
        let enabled = flag.as_ref().is_none_or(|flag| flag.enabled);
        Row {
            tool,
            state: if enabled { "on" } else { "off" },
            enabled,
            configured,
            reason: flag.as_ref().map(|flag| flag.reason.clone()),
            actor: flag.as_ref().map(|flag| flag.actor.clone()),
            updated_ms: flag.as_ref().map(|flag| flag.updated_ms),
            updated_at: flag
                .as_ref()
                .map(|flag| intentgate_terminal::time::utc_rfc3339(flag.updated_ms)),
        }
    };
    let mut rows: Vec<Row> = tools
        .iter()
        .map(|tool| row((*tool).to_owned(), flags.remove(*tool), true))
        .collect();
    rows.extend(
        flags
            .into_iter()
            .map(|(tool, flag)| row(tool, Some(flag), false)),
    );
    rows
}

/// The text table of `flags list`.
fn table(rows: &[Row]) -> String {
    let header = ["TOOL", "STATE", "SINCE", "BY", "REASON"];
    let cells: Vec<[String; 5]> = rows
        .iter()
        .map(|row| {
            let mut tool = row.tool.clone();
            if !row.configured {
                tool.push_str(" (not in the config)");
            }
            [
                tool,
                row.state.to_owned(),
                row.updated_at.clone().unwrap_or_default(),
                row.actor.clone().unwrap_or_default(),
                row.reason.as_deref().map(shown_reason).unwrap_or_default(),
            ]
        })
        .collect();
    let header = header.map(str::to_owned);
    intentgate_terminal::table::render(std::iter::once(header).chain(cells), &[])
}

/// A reason on one line of the table: whitespace runs as single spaces, cut at
/// [`REASON_SHOWN_MAX`] characters.
fn shown_reason(reason: &str) -> String {
    let line = reason.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= REASON_SHOWN_MAX {
        return line;
    }
    let cut: String = line.chars().take(REASON_SHOWN_MAX - 1).collect();
    format!("{cut}…")
}

async fn disable(arguments: FlagsDisableArgs) -> anyhow::Result<()> {
    let reason = arguments.reason.trim();
    if reason.is_empty() {
        bail!(
            "--reason is empty: say why {} is switched off (whoever finds it off next needs to know)",
            arguments.tool
        );
    }
    switch(
        &arguments.location,
        &arguments.tool,
        false,
        reason,
        &arguments.actor,
    )
    .await
}

async fn enable(arguments: FlagsEnableArgs) -> anyhow::Result<()> {
    let reason = arguments.reason.as_deref().map(str::trim).unwrap_or("");
    switch(
        &arguments.location,
        &arguments.tool,
        true,
        reason,
        &arguments.actor,
    )
    .await
}

/// Stores `tool`'s flag and says what changed.
async fn switch(
    location: &FlagsLedgerArgs,
    tool: &str,
    enabled: bool,
    reason: &str,
    actor: &str,
) -> anyhow::Result<()> {
    // Checked here, before anything is opened: the ledger would cut a long reason.
    check_text("--reason", reason, EVENT_DETAIL_LENGTH_MAX)?;
    let actor = actor.trim();
    if actor.is_empty() {
        bail!("--actor is empty: name who switches the tool (it defaults to $USER)");
    }
    check_text("--actor", actor, ACTOR_LENGTH_MAX)?;
    let place = Place::resolve(location)?;
    place.check_tool(tool)?;
    if !place.ledger_exists() {
        eprintln!(
            "note: no ledger at {} yet; creating it. Only gateways using this ledger honour the \
             switch: check --ledger or gateway.ledger in {}",
            place.ledger_shown(),
            place.config_path
        );
    }
    let ledger = place.open().await?;
    let was_enabled = ledger
        .tool_flags()
        .await
        .context("reading the tool flags")?
        .into_iter()
        .find(|flag| flag.tool == tool)
        .is_none_or(|flag| flag.enabled);
    ledger
        .set_tool_flag(ToolFlag {
            tool: tool.to_owned(),
            enabled,
            reason: reason.to_owned(),
            actor: actor.to_owned(),
            updated_ms: SystemClock.now_ms(),
        })
        .await
        .with_context(|| format!("storing the flag of {tool}"))?;
    let state = |enabled: bool| if enabled { "on" } else { "off" };
    if was_enabled == enabled {
        println!(
            "{tool} was already {}; the new reason and actor are recorded.",
            state(enabled)
        );
    } else {
        println!(
            "{tool} is now {} (it was {}).",
            state(enabled),
            state(was_enabled)
        );
    }
    if !reason.is_empty() {
        println!("  reason: {reason}");
    }
    println!("  by:     {actor}");
    println!("  ledger: {}", place.ledger_shown());
    if enabled {
        println!(
            "Its calls run again: {HONOURED}. MCP clients connected over stdio are told the tool \
             list changed."
        );
    } else {
        println!(
            "Its calls now do nothing and return status `disabled`: {HONOURED}. MCP clients \
             connected over stdio are told the tool list changed. `intentgate flags enable {tool}` \
             switches it back on."
        );
    }
    Ok(())
}

/// Refuses a text longer than the ledger stores, rather than let it be cut.
fn check_text(flag: &str, text: &str, limit: usize) -> anyhow::Result<()> {
    if text.len() > limit {
        bail!(
            "{flag} is {} bytes long; the ledger stores at most {limit}: shorten it",
            text.len()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flag(tool: &str, enabled: bool) -> ToolFlag {
        ToolFlag {
            tool: tool.to_owned(),
            enabled,
            reason: "duplicate refunds".to_owned(),
            actor: "alice".to_owned(),
            updated_ms: 1_777_628_400_000,
        }
    }

    #[test]
    fn every_config_tool_is_listed_then_flags_of_tools_no_longer_in_it() {
        let rows = rows(
            &["get_order", "refund_order"],
            vec![flag("refund_order", false), flag("old_tool", false)],
        );
        let summary: Vec<(&str, &str, bool)> = rows
            .iter()
            .map(|row| (row.tool.as_str(), row.state, row.configured))
            .collect();
        assert_eq!(
            summary,
            [
                ("get_order", "on", true),
                ("refund_order", "off", true),
                ("old_tool", "off", false)
            ]
        );
        assert_eq!(rows[0].reason, None);
        assert_eq!(rows[1].actor.as_deref(), Some("alice"));
        let text = table(&rows);
        assert!(text.contains("old_tool (not in the config)"), "{text}");
        assert!(text.lines().all(|line| line == line.trim_end()), "{text}");
    }

    #[test]
    fn a_long_reason_is_cut_on_one_line_in_the_table() {
        let reason = format!("line one\nline two {}", "x".repeat(200));
        let shown = shown_reason(&reason);
        assert!(shown.starts_with("line one line two x"), "{shown}");
        assert_eq!(shown.chars().count(), REASON_SHOWN_MAX);
        assert!(shown.ends_with('…'));
    }
}
