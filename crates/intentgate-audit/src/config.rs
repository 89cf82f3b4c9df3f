//! The config's findings: what the loader refuses, and what it accepts but should not be
//! left as it is (docs/design.md section 9).
//!
//! The loader keeps one line per tool (`ToolConfig::line`); the lines of fields inside a tool
//! (`key`, `timeout_ms`) are found here in the file's text, from the tool's line on, by
//! indentation. A tool written in flow style (`- {name: ..., ...}`) gets its own line.
//!
//! A lookup that proves nothing (neither `key` nor `match`) and a list that pairs records by
//! the intent key alone are refused by the loader, so the audit sees them as loader errors,
//! and gives them their own rules (`unproved-lookup`, `list-by-intent-key`). What the loader
//! accepts but the provider may not bear out is warned about here: a `key` pointer into the
//! part of a record the call's own body writes, when the call never sends the provider key.

use intentgate_config::{ConfigErrors, LoadedConfig, ToolConfig};
use intentgate_core::key::looks_per_attempt;
use intentgate_core::{Effect, Executor, ToolDefinition};
use serde_json::Value;

use super::{Finding, Severity};

/// Schema formats whose values are minted when the call is made, not chosen by the intent.
const PER_ATTEMPT_FORMATS: &[&str] = &["uuid", "date-time", "time"];

/// Every loader error is an error-level finding, with a finer rule where the message says
/// which check refused it.
pub fn from_errors(errors: &ConfigErrors, file: &str, findings: &mut Vec<Finding>) {
    for error in errors.iter() {
        let rule = if error.message.contains("changes on every attempt") {
            "per-attempt-key"
        } else if error.message.contains("has no effect") {
            "no-effect"
        } else if error
            .message
            .contains("the lookup has neither `key` nor `match`")
        {
            "unproved-lookup"
        } else if error.message.contains("by `fields.intent_key` alone") {
            "list-by-intent-key"
        } else {
            "config"
        };
        findings.push(Finding::new(
            Severity::Error,
            rule,
            file,
            (error.line, error.column),
            error.message.clone(),
            Some(error.fix.clone()),
        ));
    }
}

/// The findings of a config that loaded.
pub fn check(loaded: &LoadedConfig, text: &str, file: &str, findings: &mut Vec<Finding>) {
    let tools = &loaded.config.tools;
    let tools_line = text
        .lines()
        .position(|line| line.starts_with("tools:"))
        .map(|index| index as u64 + 1)
        .unwrap_or(0);
    findings.push(Finding::new(
        Severity::Note,
        "kill-switch",
        file,
        (tools_line, 1),
        format!(
            "all {} tools are behind the gateway: `intentgate flags disable TOOL` switches any \
             of them off for every gateway sharing the ledger",
            tools.len()
        ),
        None,
    ));
    for (tool, definition) in tools.iter().zip(&loaded.tools) {
        debug_assert_eq!(tool.name, definition.name);
        let at = tool_position(text, tool.line);
        findings.push(
            Finding::new(
                Severity::Note,
                "tool-classified",
                file,
                at,
                classification(tool),
                None,
            )
            .tool(&tool.name),
        );
        if tool.effect == Effect::SideEffect {
            side_effect_findings(loaded, tool, definition, at, text, file, findings);
        }
    }
}

/// The findings of one side-effecting tool, `at` its line and column: who executes it, how
/// its unknown outcomes are settled, who hears about it, how it is reconciled, its key and
/// sensitive arguments, and what its description tells the model.
fn side_effect_findings(
    loaded: &LoadedConfig,
    tool: &ToolConfig,
    definition: &ToolDefinition,
    at: (u64, u64),
    text: &str,
    file: &str,
    findings: &mut Vec<Finding>,
) {
    if tool.executor == Executor::Client {
        findings.push(
            Finding::new(
                Severity::Note,
                "client-executed",
                file,
                at,
                format!(
                    "`{}` is executed by the caller's code through the intent API \
                     (`executor: client`): the gateway keeps its intents, key and leases, \
                     but finding an effect after an unknown outcome (when granted \
                     `look_up`) and reconciling with the provider's records are the \
                     caller's, since the gateway can reach nothing of it",
                    tool.name
                ),
                None,
            )
            .tool(&tool.name),
        );
    }
    lookup_finding(tool, at, file, findings);
    owner_finding(tool, at, file, findings);
    list_findings(tool, at, file, findings);
    key_not_sent(loaded, tool, text, file, findings);
    key_arguments(tool, text, file, findings);
    sensitive_arguments(loaded, tool, definition, at, file, findings);
    description_finding(tool, definition, at, file, findings);
}

/// `no-lookup`: a tool the gateway executes with no way to ask whether its effect happened.
fn lookup_finding(tool: &ToolConfig, at: (u64, u64), file: &str, findings: &mut Vec<Finding>) {
    let mcp_lookup = tool
        .mcp
        .as_ref()
        .is_some_and(|mcp| mcp.tool.lookup.is_some());
    if tool.executor == Executor::Gateway && tool.lookup.is_none() && !mcp_lookup {
        findings.push(
            Finding::new(
                Severity::Error,
                "no-lookup",
                file,
                at,
                format!(
                    "side-effecting tool `{}` has no `lookup`: after a timeout or a dropped \
                     connection the gateway can't ask whether the effect happened, so the \
                     intent stays unknown until a person resolves it",
                    tool.name
                ),
                Some(
                    "add a `lookup:` request that finds the effect and proves it is this \
                     intent's by the provider key the gateway sent (`key`, where a record \
                     carries `{idempotency_key}`) and by its business fields (`match`), \
                     e.g. `lookup: {path: /v1/refunds, query: {idempotency_key: \
                     \"{idempotency_key}\"}, found: /data, key: /idempotency_key, match: \
                     {order_id: {record: /order_id}, amount: {record: /amount}}}`; where the \
                     provider does not keep the idempotency header's value, send \
                     `metadata: {idempotency_key: \"{idempotency_key}\"}` in the call's body \
                     and use `key: /metadata/idempotency_key`"
                        .to_owned(),
                ),
            )
            .tool(&tool.name),
        );
    }
}

/// `no-owner`: a tool whose alerts reach nobody.
fn owner_finding(tool: &ToolConfig, at: (u64, u64), file: &str, findings: &mut Vec<Finding>) {
    if tool.owner.is_none() {
        findings.push(
            Finding::new(
                Severity::Warning,
                "no-owner",
                file,
                at,
                format!(
                    "side-effecting tool `{}` has no `owner`: nobody hears about its {}",
                    tool.name,
                    match tool.executor {
                        Executor::Gateway => {
                            "reconciliation mismatches and duplicate-call alerts"
                        }
                        // Its reconciliation is the caller's.
                        Executor::Client => "duplicate-call alerts",
                    }
                ),
                Some(
                    "add `owner: NAME` naming an entry of `owners:` (with a webhook, or \
                     `log: true`)"
                        .to_owned(),
                ),
            )
            .tool(&tool.name),
        );
    }
}

/// `no-list` (reconciliation can't see the provider's records) and `reconcile-by-fields`
/// (it sees them, but pairs them by business fields, which tells alike intents apart poorly).
fn list_findings(tool: &ToolConfig, at: (u64, u64), file: &str, findings: &mut Vec<Finding>) {
    let records = tool.list_records();
    if let Some(mcp) = tool.mcp.as_ref().filter(|_| records.is_none()) {
        findings.push(
            Finding::new(
                Severity::Warning,
                "no-list",
                file,
                at,
                format!(
                    "side-effecting tool `{}` has no `list`: reconciliation can't compare \
                     the ledger with the records of MCP upstream `{}`, so effects made \
                     around the gateway go unnoticed (its unknown intents are still settled \
                     by its lookup)",
                    tool.name, mcp.upstream
                ),
                Some(
                    "add a `list:` that calls a read-only tool of the same server a page at \
                     a time (`tool`, `arguments` with {since_ms}, {until_ms} or {since_s}, \
                     {until_s}, {cursor} and {limit}, `items`, `next_cursor` or `has_more`, \
                     `fields`)"
                        .to_owned(),
                ),
            )
            .tool(&tool.name),
        );
    } else if tool.executor == Executor::Gateway && records.is_none() {
        findings.push(
            Finding::new(
                Severity::Warning,
                "no-list",
                file,
                at,
                format!(
                    "side-effecting tool `{}` has no `list`: reconciliation can't compare \
                     the ledger with the provider's records, so effects made around the \
                     gateway go unnoticed",
                    tool.name
                ),
                Some(
                    "add a `list:` request that pages through the provider's records over \
                     a window (`path`, `query` with {since_ms}, {until_ms} or {since_s}, \
                     {until_s} in Unix seconds, {cursor} and {limit}, `items`, \
                     `next_cursor` or `has_more`, `fields`), pairing records with \
                     intents by the provider key the gateway sent \
                     (`fields.idempotency_key`) or, for a provider that keeps no key, by \
                     business fields (`match: {order_id: {record: /order_id}, amount: \
                     {record: /amount}}`)"
                        .to_owned(),
                ),
            )
            .tool(&tool.name),
        );
    }
    if let Some(list) = records
        .as_ref()
        .filter(|list| !list.match_fields.is_empty())
    {
        let fields: Vec<&str> = list.match_fields.keys().map(String::as_str).collect();
        findings.push(
            Finding::new(
                Severity::Note,
                "reconcile-by-fields",
                file,
                at,
                format!(
                    "`{}`: reconciliation pairs provider records with intents by {} (the \
                     provider keeps no provider key): it counts records per set of values, so \
                     a record beyond the intents with those values is a duplicate, but which \
                     of two alike intents a record belongs to, and whether a record is a \
                     late re-send of an intent first seen before the window or a bypass, \
                     can't be told",
                    tool.name,
                    fields.join(", ")
                ),
                None,
            )
            .tool(&tool.name),
        );
    }
}

/// `missing-once-per-sentence`: the published description does not tell the model that one
/// call per intent is enough.
fn description_finding(
    tool: &ToolConfig,
    definition: &ToolDefinition,
    at: (u64, u64),
    file: &str,
    findings: &mut Vec<Finding>,
) {
    let published = definition.published_description();
    if !has_once_per_sentence(&published) {
        findings.push(
            Finding::new(
                Severity::Warning,
                "missing-once-per-sentence",
                file,
                at,
                format!(
                    "the description of side-effecting tool `{}` does not tell the model \
                     that one call per intent is enough",
                    tool.name
                ),
                Some(format!(
                    "end the description with \"{}\"",
                    definition.once_per_sentence()
                )),
            )
            .tool(&tool.name),
        );
    }
}

/// A lookup's `key` (or a list's `fields.idempotency_key`) that points into a part of the
/// provider's record that the call's own body writes (a member of the body, or `metadata`),
/// while the call sends `{idempotency_key}` nowhere (body, query, headers): the provider
/// keeps there only what the body sent, so no record carries the provider key at that
/// pointer, and the lookup never finds an effect (every ambiguous failure stays unknown) or
/// the list pairs no record. A pointer elsewhere may be the provider's echo of the
/// idempotency header, which the audit can't tell from the config: `intentgate smoke` does.
/// HTTP calls only: an MCP call always carries the provider key (an argument or `_meta`).
fn key_not_sent(
    loaded: &LoadedConfig,
    tool: &ToolConfig,
    text: &str,
    file: &str,
    findings: &mut Vec<Finding>,
) {
    let Some(call) = &tool.call else {
        return;
    };
    let sends_key = call
        .body
        .as_ref()
        .is_some_and(|body| body.to_string().contains("{idempotency_key}"))
        || call.path.contains("{idempotency_key}")
        || call
            .query
            .values()
            .chain(call.headers.values())
            .any(|value| value.contains("{idempotency_key}"));
    if sends_key {
        return;
    }
    let body_members: Vec<&str> = call
        .body
        .as_ref()
        .and_then(Value::as_object)
        .map(|members| members.keys().map(String::as_str).collect())
        .unwrap_or_default();
    let written_by_body = |pointer: &str| {
        let first = pointer
            .strip_prefix('/')
            .and_then(|rest| rest.split('/').next())
            .map(|segment| segment.replace("~1", "/").replace("~0", "~"));
        first.is_some_and(|first| first == "metadata" || body_members.contains(&first.as_str()))
    };
    let header = loaded
        .config
        .upstreams
        .get(&call.upstream)
        .map_or("Idempotency-Key", |upstream| {
            upstream.idempotency_header.as_str()
        });
    let mut pointers: Vec<(&str, &str, &str)> = Vec::new();
    if let Some(pointer) = tool
        .lookup
        .as_ref()
        .and_then(|lookup| lookup.key.as_deref())
    {
        pointers.push(("lookup", "key", pointer));
    }
    if let Some(pointer) = tool
        .list
        .as_ref()
        .and_then(|list| list.fields.idempotency_key.as_deref())
    {
        pointers.push(("list", "fields.idempotency_key", pointer));
    }
    for (section, field, pointer) in pointers {
        if !written_by_body(pointer) {
            continue;
        }
        let consequence = match section {
            "lookup" => {
                "so the lookup never finds an effect, and every ambiguous failure stays unknown \
                 until a person resolves it"
            }
            _ => "so reconciliation pairs no record with an intent",
        };
        findings.push(
            Finding::new(
                Severity::Warning,
                "key-not-sent",
                file,
                field_position(text, tool.line, section),
                format!(
                    "`{}`: the {section}'s `{field}: {pointer}` points into what the call's body \
                     writes, and the call never sends `{{idempotency_key}}` (only the `{header}` \
                     header carries it): the provider keeps there what the body sent, not the \
                     provider key, {consequence}",
                    tool.name
                ),
                Some(format!(
                    "send the provider key in the call's body where `{pointer}` reads it (e.g. \
                     `metadata: {{intent_key: \"{{intent_key}}\", idempotency_key: \
                     \"{{idempotency_key}}\"}}` for `/metadata/idempotency_key`), or point \
                     `{field}` at the provider's echo of the `{header}` header if it keeps \
                     one{}",
                    if section == "lookup" {
                        "; `intentgate smoke` shows whether the lookup finds each intent's own \
                         effect"
                    } else {
                        ""
                    }
                )),
            )
            .tool(&tool.name),
        );
    }
}

/// A note on what the ledger keeps of a tool's sensitive arguments, and, where its
/// upstream honours idempotency keys, why its unknown intents are still never re-sent.
fn sensitive_arguments(
    loaded: &LoadedConfig,
    tool: &ToolConfig,
    definition: &intentgate_core::ToolDefinition,
    at: (u64, u64),
    file: &str,
    findings: &mut Vec<Finding>,
) {
    if definition.sensitive.is_empty() {
        return;
    }
    let names: Vec<String> = definition
        .sensitive
        .iter()
        .map(|path| format!("`{path}`"))
        .collect();
    let mut message = format!(
        "`{}`: the ledger keeps {} as keyed hashes (gateway.hash_key), never the values",
        tool.name,
        names.join(", ")
    );
    // A client tool is re-sent by the caller, with the values in hand: nothing to add.
    let honours_keys = tool
        .call
        .as_ref()
        .and_then(|call| loaded.config.upstreams.get(&call.upstream))
        .is_some_and(|upstream| upstream.honours_idempotency_keys);
    if honours_keys {
        message.push_str(
            "; its upstream honours idempotency keys, but an unknown intent is never re-sent \
             (the ledger has only the hashes to send): its lookup, reconciliation or an \
             operator resolves it",
        );
    }
    findings.push(
        Finding::new(
            Severity::Note,
            "sensitive-arguments",
            file,
            at,
            message,
            None,
        )
        .tool(&tool.name),
    );
}

/// True when a description says a repeat is unnecessary ("once per", "repeated calls
/// return").
pub fn has_once_per_sentence(description: &str) -> bool {
    let lower = description.to_lowercase();
    lower.contains("once per") || lower.contains("repeated calls return")
}

/// "read: retried freely (bounded)", or where a side effect's key comes from.
fn classification(tool: &ToolConfig) -> String {
    match tool.effect {
        Effect::Read => format!("`{}`: read; retried on failure, bounded", tool.name),
        Effect::Idempotent => format!(
            "`{}`: idempotent; retried with the same arguments, bounded",
            tool.name
        ),
        Effect::SideEffect => {
            let key = tool.key.as_deref().unwrap_or_default();
            let parsed = intentgate_core::KeyTemplate::parse(key).ok();
            let mut sources: Vec<String> = parsed
                .as_ref()
                .map(|template| {
                    template
                        .argument_names()
                        .map(|name| format!("argument `{name}`"))
                        .collect()
                })
                .unwrap_or_default();
            if parsed
                .as_ref()
                .is_some_and(|template| template.uses_intent_id())
            {
                sources.push("the application's intent id".to_owned());
            }
            let executed = match tool.executor {
                Executor::Gateway => "",
                Executor::Client => ", executed by the caller's code (intent API)",
            };
            format!(
                "`{}`: side_effect through the intent ledger{executed}; key `{key}` from {}",
                tool.name,
                sources.join(", ")
            )
        }
    }
}

/// Key arguments the loader accepted whose name or schema still suggests a per-attempt
/// value: a camelCase name (`callTimestamp`) or a name that starts with a per-attempt word
/// (`nonce_value`), checked with the core's own list; or `format: uuid` / `date-time`.
fn key_arguments(tool: &ToolConfig, text: &str, file: &str, findings: &mut Vec<Finding>) {
    let Some(key) = tool.key.as_deref() else {
        return;
    };
    let Ok(template) = intentgate_core::KeyTemplate::parse(key) else {
        return;
    };
    let at = field_position(text, tool.line, "key");
    let mut seen = Vec::new();
    for name in template.argument_names() {
        if seen.contains(&name) {
            continue;
        }
        seen.push(name);
        let schema = tool
            .input_schema
            .get("properties")
            .and_then(|properties| properties.get(name));
        let format = schema
            .and_then(|schema| schema.get("format"))
            .and_then(Value::as_str);
        let reason = if name_looks_per_attempt(name) {
            Some(format!("its name `{name}` suggests"))
        } else {
            format
                .filter(|format| PER_ATTEMPT_FORMATS.contains(format))
                .map(|format| format!("its schema's `format: {format}` suggests"))
        };
        if let Some(reason) = reason {
            findings.push(
                Finding::new(
                    Severity::Warning,
                    "per-attempt-argument",
                    file,
                    at,
                    format!(
                        "the key of `{}` uses argument `{name}`, and {reason} a value minted \
                         per attempt (an id, a time): if the caller makes a new one per call, \
                         every retry is a new intent and acts again",
                        tool.name
                    ),
                    Some(format!(
                        "build the key from the business fields that identify the intent, or \
                         from {{intent_id}} created once by the application; keep `{name}` \
                         only if it is created once per intent (an order's own id), and then \
                         say so in its description"
                    )),
                )
                .tool(&tool.name),
            );
        }
    }
}

/// The core's per-attempt check, applied to what the loader does not try: the snake_case
/// form of a camelCase name, and every leading run of its words (`nonce_value` starts with
/// `nonce`). Exact names and `_suffix` forms are the loader's, already refused.
fn name_looks_per_attempt(name: &str) -> bool {
    let mut snake = String::new();
    for (index, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && index > 0 {
            snake.push('_');
        }
        snake.push(c.to_ascii_lowercase());
    }
    let words: Vec<&str> = snake
        .split(['_', '-', '.'])
        .filter(|w| !w.is_empty())
        .collect();
    (1..=words.len()).any(|end| {
        // Every contiguous run of words that starts at the first one or ends at the last.
        looks_per_attempt(&words[..end].join("_")) || looks_per_attempt(&words[end - 1..].join("_"))
    })
}

/// The line of a tool (`- name: ...`) and the column of its first field.
pub fn tool_position(text: &str, line: u64) -> (u64, u64) {
    let Some(content) = line_text(text, line) else {
        return (line, 0);
    };
    let indent = content.len() - content.trim_start().len();
    let after_dash = content.trim_start().strip_prefix("- ").map(|rest| {
        let inner = rest.len() - rest.trim_start().len();
        indent + 2 + inner
    });
    (line, after_dash.unwrap_or(indent) as u64 + 1)
}

/// The line and column of `field:` inside the tool that starts at `tool_line`, or the tool's
/// own position when the field is not on a line of its own.
pub fn field_position(text: &str, tool_line: u64, field: &str) -> (u64, u64) {
    let start = tool_position(text, tool_line);
    if start.1 == 0 {
        return start;
    }
    let field_indent = (start.1 - 1) as usize;
    let prefix = format!("{field}:");
    let lines = text.lines().enumerate().skip(tool_line as usize - 1);
    for (index, content) in lines {
        let number = index as u64 + 1;
        let trimmed = content.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let indent = content.len() - trimmed.len();
        if number == tool_line {
            let first = &content[field_indent.min(content.len())..];
            if first.starts_with(&prefix) {
                return (number, field_indent as u64 + 1);
            }
            continue;
        }
        if indent < field_indent {
            break;
        }
        if indent == field_indent && trimmed.starts_with(&prefix) {
            return (number, indent as u64 + 1);
        }
    }
    start
}

fn line_text(text: &str, line: u64) -> Option<&str> {
    text.lines()
        .nth(usize::try_from(line).ok()?.checked_sub(1)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_loader_accepts_but_look_per_attempt() {
        assert!(name_looks_per_attempt("callTimestamp"));
        assert!(name_looks_per_attempt("nonce_value"));
        assert!(name_looks_per_attempt("requestUuid"));
        assert!(!name_looks_per_attempt("order_id"));
        assert!(!name_looks_per_attempt("amount"));
        assert!(!name_looks_per_attempt("customerId"));
    }

    #[test]
    fn fields_are_found_inside_their_tool_only() {
        let text = "tools:\n  - name: a\n    effect: read\n    # key: no\n  - name: b\n    key: \"k:{x}\"\n";
        assert_eq!(tool_position(text, 2), (2, 5));
        assert_eq!(field_position(text, 5, "key"), (6, 5));
        assert_eq!(field_position(text, 2, "key"), (2, 5));
        assert_eq!(field_position(text, 2, "name"), (2, 5));
    }
}
