//! The audit behind `intentgate audit`: the checklist of docs/design.md section 9, as findings a CI job
//! can gate on.
//!
//! [`audit`] reads the config (and optionally prompt files, observed latencies and a live MCP server's
//! tool list) and reports findings, each with a severity, a stable rule id, where (file,
//! line, column when known), what is wrong and what to change. Nothing is called and nothing
//! is written: the audit only reads.
//!
//! - `config.rs`: the loader's errors as findings (a lookup that proves nothing, a list paired
//!   by the intent key alone, each under its own rule); every tool classified;
//!   side-effecting tools without lookup, owner or list; a lookup `key` where the call never
//!   writes the provider key; key arguments that look per-attempt.
//! - `latency.rs`: timeouts below the upstream's observed p99 (or p50), from `--latency`.
//! - `prompts.rs`: prompt lines that tell the model to retry a side-effecting tool.
//! - `mcp.rs`: an MCP server's tools: side-effecting by default, no once-per sentence, not
//!   behind the gateway (no kill switch).
//! - `report.rs`: text, JSON and SARIF 2.1.0 ([`render`]).
//!
//! An error-level finding is a verdict (the command exits 2); an error of [`audit`] is an
//! audit that could not run (an unreadable file, an MCP server that does not answer).

mod config;
mod imports;
mod latency;
mod mcp;
mod prompts;
mod report;

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Serialize;

/// What to audit: the config, and what else the caller has.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// The tool config (YAML).
    pub config: PathBuf,
    /// A folder of prompt files, or one file.
    pub prompts: Option<PathBuf>,
    /// An MCP server whose tools to list: an http(s) URL (Streamable HTTP), or a command
    /// line started as a child process speaking MCP on stdio.
    pub mcp_server: Option<String>,
    /// Observed latencies by tool (JSON), compared with each tool's `timeout_ms`.
    pub latency: Option<PathBuf>,
}

/// How findings are written out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `file:line:col: severity[rule] message`, with a fix line.
    Text,
    /// One JSON object: findings and summary.
    Json,
    /// SARIF 2.1.0, for code scanning in CI.
    Sarif,
}

/// How bad a finding is. Ordered from worst to mildest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Something that will cause a duplicate or unresolvable effect: CI fails.
    Error,
    /// Something that weakens a safeguard or probably misleads the model.
    Warning,
    /// What the audit saw (how each tool is classified); nothing to change.
    Note,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Note => "note",
        }
    }
}

/// One thing the audit found. Serialised as it is in `--format json`: the field names are a
/// promise to users.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub severity: Severity,
    /// One of [`RULES`]: short, kebab-case, stable across versions.
    pub rule: &'static str,
    /// The file (relative to the current folder when under it), the MCP server, or the
    /// latency file the finding is about.
    pub file: String,
    /// 1-based; 0 when the finding is about the whole file or server.
    pub line: u64,
    /// 1-based; 0 when unknown.
    pub column: u64,
    /// The tool the finding is about, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// What is wrong (or, for a note, what was seen).
    pub message: String,
    /// What to change; `None` for notes.
    pub fix: Option<String>,
}

impl Finding {
    pub fn new(
        severity: Severity,
        rule: &'static str,
        file: &str,
        (line, column): (u64, u64),
        message: impl Into<String>,
        fix: Option<String>,
    ) -> Finding {
        debug_assert!(
            RULES.iter().any(|known| known.id == rule),
            "rule {rule} is not in RULES"
        );
        Finding {
            severity,
            rule,
            file: file.to_owned(),
            line,
            column,
            tool: None,
            message: message.into(),
            fix,
        }
    }

    pub fn tool(mut self, name: &str) -> Finding {
        self.tool = Some(name.to_owned());
        self
    }
}

/// A rule the audit checks: its id, its usual severity, and what it is about (SARIF's
/// `rules`, so that code-scanning tools can explain a result).
pub struct Rule {
    pub id: &'static str,
    pub severity: Severity,
    pub short: &'static str,
    pub help: &'static str,
}

/// Every rule, in the order they are documented.
pub const RULES: &[Rule] = &[
    Rule {
        id: "config",
        severity: Severity::Error,
        short: "The config file is refused by the loader",
        help: "The gateway would refuse to start with this config; each finding says what to change.",
    },
    Rule {
        id: "no-effect",
        severity: Severity::Error,
        short: "A tool declares no effect",
        help: "Every tool declares `effect: read`, `idempotent` or `side_effect`, so that the gateway knows whether a retry is safe.",
    },
    Rule {
        id: "per-attempt-key",
        severity: Severity::Error,
        short: "An intent key changes on every attempt",
        help: "A key built from a tool call id, request id, timestamp or nonce gives every retry a new key, so the provider performs the effect again. Build it from the business intent, or from an intent id the application creates once.",
    },
    Rule {
        id: "per-attempt-argument",
        severity: Severity::Warning,
        short: "A key argument looks like a per-attempt value",
        help: "The loader accepted the key, but an argument's name or schema (format uuid or date-time) suggests a value minted per attempt. A key that changes per attempt makes every retry a new intent.",
    },
    Rule {
        id: "tool-classified",
        severity: Severity::Note,
        short: "How a tool is classified",
        help: "The tool's effect and, for a side effect, where its intent key comes from.",
    },
    Rule {
        id: "import-classified",
        severity: Severity::Note,
        short: "How a tool of an imported MCP server is classified",
        help: "Each tool an imported MCP server lists: exposed as a read (the server marks it readOnlyHint), with the effect the import's `effects` gives, as the call of an entry of `tools` (a side effect with its key and lookup), or excluded.",
    },
    Rule {
        id: "import-unclassified",
        severity: Severity::Error,
        short: "An imported MCP tool is not classified, or the config names a tool its server does not list",
        help: "The gateway refuses to start: a tool the server does not mark read-only must be classified (`effects`), called by a side-effecting entry of `tools`, or excluded; and every MCP call and lookup must name a tool the server lists.",
    },
    Rule {
        id: "unset-variable",
        severity: Severity::Warning,
        short: "A secret of the config is not set here",
        help: "The audit reads the config without its upstreams' secrets; the commands that call upstreams (serve, mcp, smoke, reconcile) refuse to start until every `${NAME}` without a default is set.",
    },
    Rule {
        id: "mcp-upstream-down",
        severity: Severity::Error,
        short: "An MCP upstream did not start",
        help: "The gateway starts every `kind: mcp` upstream before it serves, and refuses to start when one does not open a session: its tools could not be listed or called.",
    },
    Rule {
        id: "mcp-tools",
        severity: Severity::Error,
        short: "The MCP tools can't be served",
        help: "Starting the config's MCP upstreams failed for another reason; the message says which.",
    },
    Rule {
        id: "kill-switch",
        severity: Severity::Note,
        short: "Tools the kill switch covers",
        help: "Every tool behind the gateway can be switched off with `intentgate flags disable TOOL`.",
    },
    Rule {
        id: "no-lookup",
        severity: Severity::Error,
        short: "A side-effecting tool has no lookup",
        help: "After a timeout or a dropped connection the gateway asks the provider whether the effect happened; without a `lookup` the intent stays unknown until a person resolves it.",
    },
    Rule {
        id: "unproved-lookup",
        severity: Severity::Error,
        short: "A lookup can't tell this intent's effect from another's",
        help: "A lookup with neither `key` (the provider key the gateway sent, in a record) nor `match` (the business fields, equal to the intent's arguments) would settle an intent as done with the first record the provider answers: another tenant's, another customer's. The gateway refuses to start with it.",
    },
    Rule {
        id: "list-by-intent-key",
        severity: Severity::Error,
        short: "A list pairs provider records with intents by the intent key alone",
        help: "The intent key is not scoped by tenant: two tenants' records of one order and amount carry the same one. Pair by the provider key (`fields.idempotency_key`) or by business fields (`match`). The gateway refuses to start with it.",
    },
    Rule {
        id: "key-not-sent",
        severity: Severity::Warning,
        short: "A lookup or list reads the provider key where the call never writes it",
        help: "The lookup's `key` (or the list's `fields.idempotency_key`) points into what the call's body writes, and the call never sends `{idempotency_key}`: no record carries the provider key there, so the lookup finds nothing and reconciliation pairs nothing. Send it in the body, or point at the provider's echo of the idempotency header.",
    },
    Rule {
        id: "client-executed",
        severity: Severity::Note,
        short: "A side-effecting tool is executed by the caller's code",
        help: "A tool with `executor: client` runs in the caller's own code through the intent API: the gateway keeps its intents, key and leases, but has no lookup or list of it, so finding an effect after an unknown outcome and reconciling with the provider are the caller's.",
    },
    Rule {
        id: "no-owner",
        severity: Severity::Warning,
        short: "A side-effecting tool has no owner",
        help: "Reconciliation mismatches and duplicate-call alerts go to the tool's owner; without one nobody hears about them.",
    },
    Rule {
        id: "no-list",
        severity: Severity::Warning,
        short: "A side-effecting tool has no list",
        help: "Reconciliation compares the ledger with the provider's records through the tool's `list`; without one, effects made around the gateway go unnoticed.",
    },
    Rule {
        id: "reconcile-by-fields",
        severity: Severity::Note,
        short: "A side-effecting tool is reconciled by business fields",
        help: "Its list pairs provider records with intents by `match` fields, counting records per set of values: duplicates are found, but alike intents can't be told apart.",
    },
    Rule {
        id: "missing-once-per-sentence",
        severity: Severity::Warning,
        short: "A side-effecting tool's description lacks the once-per-intent sentence",
        help: "Models read descriptions as instructions; a side-effecting tool's should say it is safe to call once per intent and that repeated calls return the original result.",
    },
    Rule {
        id: "sensitive-arguments",
        severity: Severity::Note,
        short: "What the ledger keeps of a tool's sensitive arguments",
        help: "Arguments marked `sensitive: true` are kept in the ledger as keyed hashes only; an unknown intent of such a tool is resolved by its lookup, never re-sent, even where the upstream honours idempotency keys.",
    },
    Rule {
        id: "timeout-below-p50",
        severity: Severity::Error,
        short: "A tool's timeout is below the upstream's observed median",
        help: "Most calls would time out: for a side effect each becomes an unknown intent that needs a lookup, for a read a retry.",
    },
    Rule {
        id: "timeout-below-p99",
        severity: Severity::Warning,
        short: "A tool's timeout is below the upstream's observed p99",
        help: "Slow successes time out: for a side effect each becomes an unknown intent that needs a lookup, for a read a retry.",
    },
    Rule {
        id: "latency-unknown-tool",
        severity: Severity::Warning,
        short: "The latency file names a tool the config does not have",
        help: "Check the tool's name in the latency file.",
    },
    Rule {
        id: "prompt-retry-side-effect",
        severity: Severity::Error,
        short: "A prompt tells the model to retry a side-effecting tool",
        help: "A model told to retry after an error repeats a refund or a charge. Tell it to check the status instead; the gateway answers repeats with the original result anyway.",
    },
    Rule {
        id: "prompt-retry-generic",
        severity: Severity::Warning,
        short: "A prompt tells the model to retry, without naming a tool",
        help: "Generic retry advice applies to every tool, side-effecting ones included.",
    },
    Rule {
        id: "prompt-skipped",
        severity: Severity::Note,
        short: "A prompt file was not read",
        help: "Files over 1 MiB, that are not UTF-8 text, or beyond the first 10,000 are skipped.",
    },
    Rule {
        id: "mcp-side-effect-by-default",
        severity: Severity::Warning,
        short: "An MCP tool is side-effecting by default",
        help: "With neither readOnlyHint nor idempotentHint true, MCP clients must treat a tool as possibly destructive. Declare the hints, or put the tool behind intentgate with an effect class.",
    },
    Rule {
        id: "no-kill-switch",
        severity: Severity::Warning,
        short: "An MCP tool is not behind the gateway",
        help: "The tool is not in the config, so no kill switch covers it and its calls bypass the intent ledger.",
    },
    Rule {
        id: "mcp-listed",
        severity: Severity::Note,
        short: "The tools an MCP server lists",
        help: "How many tools the server listed, and how many of them the config fronts.",
    },
];

/// `findings` written out in `format`.
pub fn render(findings: &[Finding], format: Format) -> String {
    match format {
        Format::Text => report::text(findings),
        Format::Json => report::json(findings),
        Format::Sarif => report::sarif(findings),
    }
}

/// One warning per unset `${NAME}` of the config. True when an MCP upstream uses one: its
/// server can't be started, so its tools are not listed.
fn unset_findings(
    loaded: &intentgate_config::LoadedConfig,
    file: &str,
    findings: &mut Vec<Finding>,
) -> bool {
    let mut mcp_needs_secret = false;
    for unset in &loaded.unset {
        let mcp = loaded.config.mcp_upstreams.keys().any(|name| {
            unset
                .field
                .strip_prefix(&format!("upstreams.{name}."))
                .is_some()
        });
        mcp_needs_secret |= mcp;
        let consequence = if mcp {
            "; the MCP server was not started, so its tools are not audited"
        } else {
            ""
        };
        findings.push(Finding::new(
            Severity::Warning,
            "unset-variable",
            file,
            (unset.line, unset.column),
            format!(
                "environment variable `{}` (used in `{}`) is not set: serve, mcp, smoke and \
                 reconcile refuse to start without it{consequence}",
                unset.name, unset.field
            ),
            Some(format!("export {} where the gateway runs", unset.name)),
        ));
    }
    mcp_needs_secret
}

/// Every finding, sorted by file, line and column (stable: one position keeps the order the
/// checks found them in).
pub async fn audit(inputs: &Inputs) -> anyhow::Result<Vec<Finding>> {
    let mut findings = Vec::new();
    let config_path = &inputs.config;
    // Missing is "could not run" (status 1), not a finding: CI must not read it as a verdict.
    std::fs::metadata(config_path)
        .with_context(|| format!("--config {}", config_path.display()))?;
    let config_file = display_path(config_path);
    // The audit hashes nothing: it needs no hash key (it still checks that one is named).
    // Nor does it call an HTTP upstream, so it runs without their secrets (CI has none).
    let loaded = match intentgate_config::load_file_as(
        config_path,
        &intentgate_config::HashKeySource::NotNeeded,
        intentgate_config::Secrets::Optional,
    ) {
        Ok(mut loaded) => {
            let text = std::fs::read_to_string(config_path)
                .with_context(|| format!("reading {}", config_path.display()))?;
            // The MCP servers are asked what they list, as `serve` does, so that the
            // imported tools are classified and audited like the others; a server can't
            // be started without its secrets, and the finding says which.
            let _servers = if unset_findings(&loaded, &config_file, &mut findings) {
                None
            } else {
                imports::expand(&mut loaded, &text, &config_file, &mut findings).await
            };
            config::check(&loaded, &text, &config_file, &mut findings);
            Some((loaded, text))
        }
        Err(errors) => {
            config::from_errors(&errors, &config_file, &mut findings);
            None
        }
    };
    let tools = loaded
        .as_ref()
        .map(|(loaded, _)| loaded.config.tools.as_slice())
        .unwrap_or_default();
    match (&inputs.latency, &loaded) {
        (Some(path), Some((_, text))) => {
            let observed = latency::read(path)?;
            latency::check(
                &observed,
                tools,
                text,
                &config_file,
                &display_path(path),
                &mut findings,
            );
        }
        (Some(path), None) => {
            // Checked for readability anyway, so a broken file is noticed now.
            latency::read(path)?;
        }
        (None, _) => {}
    }
    if let Some(folder) = &inputs.prompts {
        prompts::scan(folder, tools, &mut findings)?;
    }
    if let Some(server) = &inputs.mcp_server {
        let listed = mcp::list(server).await?;
        mcp::check(server, &listed, tools, &mut findings);
    }
    findings.sort_by(|a, b| (&a.file, a.line, a.column).cmp(&(&b.file, b.line, b.column)));
    Ok(findings)
}

/// `path` relative to the current folder when it is under it, else as given.
pub fn display_path(path: &Path) -> String {
    let relative = std::env::current_dir()
        .ok()
        .and_then(|current| {
            let current = current.canonicalize().ok()?;
            let absolute: PathBuf = path.canonicalize().ok()?;
            absolute.strip_prefix(&current).ok().map(Path::to_path_buf)
        })
        .unwrap_or_else(|| path.to_path_buf());
    relative.display().to_string()
}
