//! The checks that follow parsing: everything a YAML parser can't know is wrong.
//!
//! Each check reports at the line of the offending field and keeps going, so one run shows
//! every mistake of a file. The order is: tool effects (on the raw tree, so a tool without
//! one is reported even when the typed parse fails), then, on the typed file, the gateway
//! settings, upstreams and owners, then each tool: its definition as the engine checks it
//! (`ToolDefinition::new`), its input schema, the names it refers to, its request templates
//! and its `${NAME}` references. Templates are checked with the HTTP crate's own parser
//! (`intentgate_http::template::check_template`, `check_body_template`, `check_list_spec`),
//! so the config is refused for exactly what would make a request impossible to build.
//! Last, the hash key of sensitive arguments: required when a tool marks one, read from the
//! environment as the caller of the loader asks ([`HashKeySource`]).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use intentgate_core::sensitive::{HASH_KEY_BYTES_MIN, HashKeyError, SensitiveError};
use intentgate_core::tool::{RETRY_BUDGET_MAX, TIMEOUT_MS_MAX};
use intentgate_core::{
    ArgumentPath, CallStatus, Effect, HashKey, KeyError, KeyTemplate, Messages, ToolDefinition,
    ToolError,
};
use intentgate_http::spec::{CallSpec, ListFields, ListSpec, LookupSpec, Method, UpstreamSpec};
use intentgate_http::template::{
    GATEWAY_VALUE_NAMES, Template, TemplateError, check_body_template, check_template,
};
use intentgate_http::{HttpError, HttpTool, LIST_PLACEHOLDERS, check_list_spec};
use serde_json::Value;

use crate::HashKeySource;
use crate::config::{AlertRule, Config, GatewayConfig, OwnerConfig, ReconcileConfig, ToolConfig};
use crate::env::{self, EnvError, Lookup};
use crate::error::Errors;
use crate::file::{ConfigFile, ToolFile};
use crate::limits::*;
use crate::source_map::{Position, Segment, SourceMap, at, segments};

/// Reports every tool that lacks `effect`. Runs on the raw tree, before the typed parse,
/// because this is the error the gateway exists to catch and it must not hide behind a typo
/// elsewhere in the file.
pub(crate) fn tools_have_effects(map: &SourceMap, errors: &mut Errors<'_>) {
    for index in 0..map.len(&at!["tools"]) {
        if map.has_value(&at!["tools", index, "effect"]) {
            continue;
        }
        let name = map
            .text(&at!["tools", index, "name"])
            .map(|name| format!("tool `{name}`"))
            .unwrap_or_else(|| format!("tool {}", index + 1));
        errors.push(
            map.value(&at!["tools", index]),
            format!("{name} has no effect, so the gateway can't tell whether a retry is safe"),
            "add `effect: read`, `idempotent` or `side_effect` (side_effect if calling it twice \
             would act twice: refunds, charges, emails)",
        );
    }
}

/// What the checks build: the config, the engine's tool definitions (with the hash key
/// attached) and the hash key.
pub(crate) type Checked = (Config, Vec<ToolDefinition>, Option<HashKey>);

/// Checks the parsed file, resolves its references and builds the config and the engine's
/// tool definitions. Returns `None` when anything was reported.
pub(crate) fn check(
    file: ConfigFile,
    map: &SourceMap,
    lookup: Lookup<'_>,
    hash_key_source: &HashKeySource,
    errors: &mut Errors<'_>,
) -> Option<Checked> {
    let mut checker = Checker {
        map,
        lookup,
        errors,
        arguments_known: true,
    };
    checker.gateway(&file.gateway);
    checker.auth(&file.auth.0);
    let upstreams = checker.upstreams(file.upstreams);
    checker.owners(&file.owners);
    checker.reconcile(&file.reconcile);
    checker.tool_list(&file.tools);
    let tool_count = file.tools.len();
    let mut tools = Vec::with_capacity(file.tools.len());
    let mut definitions = Vec::with_capacity(file.tools.len());
    let mut first_seen: HashMap<String, Position> = HashMap::new();
    // The first tool with a sensitive argument, where a missing hash key is reported.
    let mut first_sensitive: Option<(usize, ToolDefinition)> = None;
    for (index, tool) in file.tools.into_iter().enumerate() {
        let name_at = map.value(&at!["tools", index, "name"]);
        if let Some(first) = first_seen.get(&tool.name) {
            checker.errors.push(
                name_at,
                format!(
                    "tool name `{}` is already used by the tool at line {}",
                    tool.name, first.line
                ),
                "rename one of the two tools; names must be unique because models call tools by name",
            );
        } else {
            first_seen.insert(tool.name.clone(), name_at);
        }
        if let Some((tool, definition)) = checker.tool(index, tool, &upstreams, &file.owners) {
            if first_sensitive.is_none() && !definition.sensitive.is_empty() {
                first_sensitive = Some((index, definition.clone()));
            }
            tools.push(tool);
            definitions.push(definition);
        }
    }
    let hash_key = checker.hash_key(
        file.gateway.hash_key.as_deref(),
        first_sensitive.as_ref(),
        hash_key_source,
    );
    for definition in &mut definitions {
        definition.hash_key = hash_key.clone();
    }
    if !checker.errors.is_empty() {
        return None;
    }
    // Every tool that was not built has an error above; a tool dropped silently would be a
    // tool the gateway does not serve although the config names it.
    assert_eq!(
        tools.len(),
        tool_count,
        "a tool was dropped without an error"
    );
    let config = Config {
        gateway: file.gateway,
        auth: file.auth.0,
        upstreams,
        owners: file.owners,
        reconcile: file.reconcile,
        tools,
    };
    Some((config, definitions, hash_key))
}

pub(crate) struct Checker<'c, 'e> {
    map: &'c SourceMap,
    lookup: Lookup<'c>,
    errors: &'c mut Errors<'e>,
    /// Whether the current tool's input schema is an object schema, so that its argument
    /// names are known. Without them every placeholder would be reported as unknown: one
    /// mistake in the schema would bury the file under errors that are not.
    arguments_known: bool,
}

impl Checker<'_, '_> {
    fn position(&self, path: &[Segment<'_>]) -> Position {
        self.map.value(path)
    }

    pub(crate) fn push(
        &mut self,
        path: &[Segment<'_>],
        message: impl Into<String>,
        fix: impl Into<String>,
    ) {
        let at = self.position(path);
        self.errors.push(at, message, fix);
    }

    fn gateway(&mut self, gateway: &GatewayConfig) {
        if let Err(error) = intentgate_core::Tenant::parse(&gateway.tenant) {
            self.push(
                &at!["gateway", "tenant"],
                format!("`tenant`: {error}"),
                "write a short identifier, e.g. `tenant: default`",
            );
        }
        for (index, origin) in gateway.allowed_origins.iter().enumerate() {
            if let Err(reason) = check_origin(origin) {
                self.push(
                    &at!["gateway", "allowed_origins", index],
                    format!("`{origin}` is not a web origin: {reason}"),
                    "write a scheme, host and optional port, e.g. https://console.example.com",
                );
            }
        }
        if gateway.ledger.trim().is_empty() {
            self.push(
                &at!["gateway", "ledger"],
                "`ledger` is empty",
                "write the path of the SQLite file, e.g. `ledger: intentgate.db`",
            );
        }
        self.range(
            &at!["gateway", "retention_days"],
            gateway.retention_days.into(),
            1,
            RETENTION_DAYS_MAX.into(),
            "days (intents must outlive the provider's key window; 30 is the default)",
        );
        self.range(
            &at!["gateway", "body_limit_bytes"],
            gateway.body_limit_bytes,
            BODY_LIMIT_BYTES_MIN,
            BODY_LIMIT_BYTES_MAX,
            "bytes (1048576 is the default)",
        );
        self.range(
            &at!["gateway", "concurrency_limit"],
            gateway.concurrency_limit.into(),
            1,
            CONCURRENCY_LIMIT_MAX.into(),
            "requests (256 is the default)",
        );
        self.range(
            &at!["gateway", "shutdown_grace_ms"],
            gateway.shutdown_grace_ms,
            0,
            SHUTDOWN_GRACE_MS_MAX,
            "milliseconds (30000 is the default)",
        );
        self.range(
            &at!["gateway", "header_read_timeout_ms"],
            gateway.header_read_timeout_ms,
            HEADER_READ_TIMEOUT_MS_MIN,
            HEADER_READ_TIMEOUT_MS_MAX,
            "milliseconds (10000 is the default)",
        );
        self.range(
            &at!["gateway", "idle_timeout_ms"],
            gateway.idle_timeout_ms,
            IDLE_TIMEOUT_MS_MIN,
            IDLE_TIMEOUT_MS_MAX,
            "milliseconds (60000 is the default)",
        );
        self.range(
            &at!["gateway", "connection_limit"],
            gateway.connection_limit.into(),
            1,
            CONNECTION_LIMIT_MAX.into(),
            "connections (4096 is the default)",
        );
    }

    /// Reports `value` outside `min..=max` at `path`.
    fn reconcile(&mut self, reconcile: &ReconcileConfig) {
        for (field, value, min) in [
            ("every_seconds", reconcile.every_seconds, 0),
            ("window_seconds", reconcile.window_seconds, 1),
            ("unknown_grace_seconds", reconcile.unknown_grace_seconds, 0),
            ("settle_seconds", reconcile.settle_seconds, 0),
        ] {
            self.range(
                &at!["reconcile", field],
                value.into(),
                min,
                RECONCILE_SECONDS_MAX.into(),
                "seconds",
            );
        }
        if reconcile.every_seconds > 0 && reconcile.window_seconds < reconcile.every_seconds {
            self.push(
                &at!["reconcile", "window_seconds"],
                format!(
                    "`window_seconds` is {}, shorter than `every_seconds` ({}): effects between two runs would never be compared",
                    reconcile.window_seconds, reconcile.every_seconds
                ),
                format!(
                    "set `window_seconds` to at least {}",
                    reconcile.every_seconds
                ),
            );
        }
    }

    /// Checks a tool's alert rules and fills in the defaults.
    fn alerts(
        &mut self,
        index: usize,
        label: &str,
        effect: Option<Effect>,
        alerts: Option<Vec<AlertRule>>,
    ) -> Vec<AlertRule> {
        let Some(rules) = alerts else {
            return match effect {
                Some(Effect::SideEffect) => AlertRule::defaults(),
                _ => Vec::new(),
            };
        };
        if !rules.is_empty() && matches!(effect, Some(Effect::Read | Effect::Idempotent)) {
            self.push(
                &at!["tools", index, "alerts"],
                format!("{label} has alert rules, but only side-effecting tools have intents whose calls repeat"),
                "remove `alerts:` from this tool",
            );
        }
        if rules.len() > ALERT_RULES_MAX {
            self.push(
                &at!["tools", index, "alerts"],
                format!(
                    "{label} has {} alert rules; at most {ALERT_RULES_MAX}",
                    rules.len()
                ),
                "keep one or two rules per scope",
            );
        }
        let mut names = std::collections::HashSet::new();
        for (rule_index, rule) in rules.iter().enumerate() {
            self.range(
                &at!["tools", index, "alerts", rule_index, "threshold"],
                rule.threshold.into(),
                1,
                ALERT_THRESHOLD_MAX.into(),
                "repeated calls",
            );
            self.range(
                &at!["tools", index, "alerts", rule_index, "window_seconds"],
                rule.window_seconds.into(),
                1,
                ALERT_WINDOW_SECONDS_MAX.into(),
                "seconds",
            );
            let name = rule.name();
            let valid = !name.is_empty()
                && name.len() <= 64
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
            if !valid {
                self.push(
                    &at!["tools", index, "alerts", rule_index, "name"],
                    format!("{label}: alert rule name `{name}` is not 1 to 64 letters, digits, `_`, `-` or `.`"),
                    "name the rule with a short identifier, e.g. `name: refund-storm`",
                );
            } else if !names.insert(name.clone()) {
                self.push(
                    &at!["tools", index, "alerts", rule_index],
                    format!("{label} has two alert rules named `{name}`"),
                    "give each rule its own `name:`",
                );
            }
        }
        rules
    }

    pub(crate) fn range(
        &mut self,
        path: &[Segment<'_>],
        value: u64,
        min: u64,
        max: u64,
        unit: &str,
    ) {
        if (min..=max).contains(&value) {
            return;
        }
        let field = match path.last() {
            Some(Segment::Key(key)) => *key,
            _ => "value",
        };
        self.push(
            path,
            format!("`{field}` is {value}, outside {min} to {max}"),
            format!("set `{field}` between {min} and {max} {unit}"),
        );
    }

    fn upstreams(
        &mut self,
        upstreams: BTreeMap<String, UpstreamSpec>,
    ) -> BTreeMap<String, UpstreamSpec> {
        let mut resolved = BTreeMap::new();
        for (name, mut upstream) in upstreams {
            let base = at!["upstreams", &name];
            let field = format!("upstreams.{name}.base_url");
            if let Some(url) = self.resolve(
                &at!["upstreams", &name, "base_url"],
                &field,
                &upstream.base_url,
            ) {
                if let Err(reason) = check_url(&url) {
                    let written = &upstream.base_url;
                    let message = if env::has_reference(written) {
                        format!(
                            "`{field}` (`{written}`, resolved from the environment) is not a usable URL: {reason}"
                        )
                    } else {
                        format!("`{field}` `{written}` is not a usable URL: {reason}")
                    };
                    self.push(
                        &at!["upstreams", &name, "base_url"],
                        message,
                        "write an http or https URL with a host, e.g. `base_url: https://api.example.com`",
                    );
                }
                upstream.base_url = url;
            }
            let headers = std::mem::take(&mut upstream.headers);
            upstream.headers = self.headers(&base, &format!("upstreams.{name}"), headers, false);
            if !is_token(&upstream.idempotency_header) {
                self.push(
                    &at!["upstreams", &name, "idempotency_header"],
                    format!("`{}` is not a header name", upstream.idempotency_header),
                    "write a header name such as `Idempotency-Key`",
                );
            }
            self.range(
                &at!["upstreams", &name, "key_window_hours"],
                upstream.key_window_hours.into(),
                1,
                KEY_WINDOW_HOURS_MAX.into(),
                "hours (the provider's documented key retention; Stripe: 24)",
            );
            self.range(
                &at!["upstreams", &name, "retry_after_cap_ms"],
                upstream.retry_after_cap_ms,
                0,
                RETRY_AFTER_CAP_MS_MAX,
                "milliseconds",
            );
            resolved.insert(name, upstream);
        }
        resolved
    }

    fn owners(&mut self, owners: &BTreeMap<String, OwnerConfig>) {
        for (name, owner) in owners {
            if let Some(webhook) = &owner.webhook
                && let Err(reason) = check_url(webhook)
            {
                self.push(
                    &at!["owners", name, "webhook"],
                    format!("webhook of owner `{name}` is not a usable URL: {reason}"),
                    "write an http or https URL, e.g. `webhook: https://hooks.example.com/intentgate`",
                );
            }
            if owner.webhook.is_none() && !owner.log {
                self.push(
                    &at!["owners", name],
                    format!("owner `{name}` would hear about nothing: it has no webhook and `log: false`"),
                    "add `webhook: https://...` or set `log: true`",
                );
            }
        }
    }

    fn tool_list(&mut self, tools: &[ToolFile]) {
        if tools.is_empty() {
            self.push(
                &at!["tools"],
                "the config has no tools",
                "add at least one tool under `tools:` with a name, description, effect, input_schema and call",
            );
        }
        if tools.len() > TOOLS_MAX {
            self.push(
                &at!["tools", TOOLS_MAX],
                format!(
                    "the config has {} tools; the limit is {TOOLS_MAX}",
                    tools.len()
                ),
                "split the tools across gateways, one per agent",
            );
        }
    }

    /// Checks one tool and builds its config and definition (`None` when it can't be built).
    fn tool(
        &mut self,
        index: usize,
        tool: ToolFile,
        upstreams: &BTreeMap<String, UpstreamSpec>,
        owners: &BTreeMap<String, OwnerConfig>,
    ) -> Option<(ToolConfig, ToolDefinition)> {
        let name = tool.name.clone();
        let label = format!("tool `{name}`");
        let base = at!["tools", index];

        if tool.description.trim().is_empty() {
            self.push(
                &at!["tools", index, "description"],
                format!("{label} has an empty description"),
                "say what the tool does and when to use it; models choose tools by their description",
            );
        } else if tool.description.chars().count() > DESCRIPTION_LENGTH_MAX {
            self.push(
                &at!["tools", index, "description"],
                format!(
                    "{label}: the description is longer than {DESCRIPTION_LENGTH_MAX} characters"
                ),
                "shorten it; models read every tool's description on every turn",
            );
        }
        if let Some(owner) = &tool.owner
            && !owners.contains_key(owner)
        {
            let known = names(owners.keys());
            self.push(
                &at!["tools", index, "owner"],
                format!("{label} names owner `{owner}`, which is not in `owners`"),
                format!(
                    "add `{owner}: {{log: true}}` (or a webhook) under `owners:`, or use one of: {known}"
                ),
            );
        }
        if let Some(once_per) = &tool.once_per {
            let fits = !once_per.trim().is_empty()
                && once_per.chars().count() <= ONCE_PER_LENGTH_MAX
                && !once_per.chars().any(char::is_control);
            if !fits {
                self.push(
                    &at!["tools", index, "once_per"],
                    format!("{label}: `once_per` must be a short noun on one line, at most {ONCE_PER_LENGTH_MAX} characters"),
                    "write what one intent is once per, e.g. `once_per: order`",
                );
            }
        }
        let messages = self.messages(index, &label, &tool.messages);
        let alerts = self.alerts(index, &label, tool.effect, tool.alerts);

        let schema_valid = self.input_schema(index, &label, &tool.input_schema);
        let arguments = argument_names(&tool.input_schema);
        self.arguments_known =
            schema_valid && tool.input_schema.get("type").and_then(Value::as_str) == Some("object");

        let definition = match tool.effect {
            // Reported by `tools_have_effects`. Whether a key is required depends on the
            // effect, but a key that can't work is wrong whatever the effect turns out to be.
            None => {
                if let Some(key) = &tool.key {
                    let names: Vec<&str> = arguments.iter().map(String::as_str).collect();
                    let checked = KeyTemplate::parse(key)
                        .and_then(|template| template.check_arguments(&names));
                    if let Err(error) = checked {
                        let (message, fix) = key_error(&label, &arguments, &error);
                        self.push(&at!["tools", index, "key"], message, fix);
                    }
                }
                None
            }
            Some(effect) => {
                let result = ToolDefinition::new(
                    &tool.name,
                    &tool.description,
                    effect,
                    tool.input_schema.clone(),
                    tool.key.as_deref(),
                    Duration::from_millis(tool.timeout_ms),
                    tool.retry_budget,
                );
                match result {
                    Ok(definition) => Some(definition),
                    // Already reported, at the exact keyword, by `input_schema`.
                    Err(ToolError::BadSchema(_)) if !schema_valid => None,
                    Err(ToolError::Sensitive { error, .. }) => {
                        self.sensitive_error(index, &label, &error);
                        None
                    }
                    Err(error) => {
                        self.tool_error(index, &label, &arguments, &error);
                        None
                    }
                }
            }
        };

        // The HTTP crate's own checks of the whole request specs run last, as a backstop for
        // anything the field-by-field checks above don't cover (they report at the field).
        // Header values go without their `${NAME}` references, which are not templates.
        let backstop_tool = HttpTool {
            call: CallSpec {
                headers: without_references(&tool.call.headers),
                ..tool.call.clone()
            },
            lookup: tool.lookup.as_ref().map(|lookup| LookupSpec {
                headers: without_references(&lookup.headers),
                ..lookup.clone()
            }),
        };
        let backstop_list = tool.list.as_ref().map(|list| ListSpec {
            headers: without_references(&list.headers),
            ..list.clone()
        });
        let reported = self.errors.len();

        if let Some(definition) = &definition
            && !definition.sensitive.is_empty()
        {
            self.sensitive_uses(
                index,
                &label,
                &definition.sensitive,
                tool.lookup.as_ref(),
                tool.list.as_ref(),
            );
        }
        let call = self.call(index, &label, tool.call, upstreams, &arguments);
        let lookup = tool
            .lookup
            .map(|lookup| self.lookup(index, &label, lookup, upstreams, &arguments));
        let list = tool
            .list
            .map(|list| self.list(index, &label, list, upstreams));

        if self.errors.len() == reported && self.arguments_known {
            let names: Vec<&str> = arguments.iter().map(String::as_str).collect();
            if let Err(error) = backstop_tool.check(&name, &names) {
                self.push(
                    &at!["tools", index, "call"],
                    format!("{label}: {error}"),
                    "correct the request spec so that the HTTP upstream can build it",
                );
            }
            if let Some(Err(error)) = backstop_list.as_ref().map(check_list_spec) {
                self.push(
                    &at!["tools", index, "list"],
                    format!("{label}: {error}"),
                    "correct the list spec so that the HTTP upstream can build it",
                );
            }
        }

        let call_uses_intent_id = backstop_tool.call_uses_intent_id(&name);
        let mut definition = definition?;
        definition.resend_window = resend_window(
            &definition,
            upstreams.get(&call.upstream),
            call_uses_intent_id,
        );
        definition.owner = tool.owner.clone();
        definition.messages = messages.clone();
        definition.retry_rejected = tool.retry_rejected;
        if let Some(once_per) = &tool.once_per {
            definition.once_per = once_per.clone();
        }
        if let Some(pointer) = &call.result.external_id {
            definition.external_id_pointer = pointer.clone();
        }
        let config = ToolConfig {
            name,
            description: tool.description,
            effect: definition.effect,
            owner: tool.owner,
            once_per: tool.once_per,
            input_schema: tool.input_schema,
            key: tool.key,
            timeout_ms: tool.timeout_ms,
            retry_budget: tool.retry_budget,
            retry_rejected: tool.retry_rejected,
            destructive: tool.destructive,
            open_world: tool.open_world,
            messages,
            call,
            lookup,
            list,
            alerts,
            line: self.position(&base).line,
        };
        Some((config, definition))
    }

    /// Reports a `sensitive` mark the gateway can't honour, at the schema that holds it.
    fn sensitive_error(&mut self, index: usize, label: &str, error: &SensitiveError) {
        let pointer = match error {
            SensitiveError::NotOnProperty { pointer } | SensitiveError::NotBoolean { pointer } => {
                pointer.as_str()
            }
        };
        let prefix = [
            "tools".to_owned(),
            index.to_string(),
            "input_schema".to_owned(),
        ];
        let owned = pointer_path(&prefix, pointer);
        let fix = match error {
            SensitiveError::NotOnProperty { .. } => {
                "put `sensitive: true` on the property that holds the value (an array or object \
                 property is then kept hashed whole), e.g. `to: {type: string, sensitive: true}`"
            }
            SensitiveError::NotBoolean { .. } => "write `sensitive: true`",
        };
        self.push(
            &segments(&owned),
            format!("{label}: input_schema: {error}"),
            fix,
        );
    }

    /// Refuses a lookup or a reconciliation amount that reads a sensitive argument. Both run
    /// from what the ledger keeps (the sweeper's lookups, reconciliation), where the value is
    /// only a hash: the request would carry the hash, the amount would never match.
    fn sensitive_uses(
        &mut self,
        index: usize,
        label: &str,
        sensitive: &[ArgumentPath],
        lookup: Option<&LookupSpec>,
        list: Option<&ListSpec>,
    ) {
        let sensitive_in = |template: &str| -> Option<String> {
            let template = Template::parse(&env::without_references(template)).ok()?;
            template.argument_paths().find_map(|path| {
                sensitive
                    .iter()
                    .find(|argument| argument.overlaps(path))
                    .map(|argument| argument.to_string())
            })
        };
        if let Some(lookup) = lookup {
            let mut found: Vec<(Vec<Segment<'_>>, String, String)> = Vec::new();
            if let Some(name) = sensitive_in(&lookup.path) {
                found.push((
                    at!["tools", index, "lookup", "path"].to_vec(),
                    "lookup.path".to_owned(),
                    name,
                ));
            }
            for (key, value) in &lookup.query {
                if let Some(name) = sensitive_in(value) {
                    found.push((
                        at!["tools", index, "lookup", "query", key].to_vec(),
                        format!("lookup.query.{key}"),
                        name,
                    ));
                }
            }
            for (key, value) in &lookup.headers {
                if let Some(name) = sensitive_in(value) {
                    found.push((
                        at!["tools", index, "lookup", "headers", key].to_vec(),
                        format!("lookup.headers.{key}"),
                        name,
                    ));
                }
            }
            for (path, field, name) in found {
                self.push(
                    &path,
                    format!(
                        "{label}: `{field}` uses sensitive argument `{name}`; the ledger keeps only \
                         its keyed hash, so a lookup of an intent left unknown (by the sweeper, \
                         from the ledger) would send the hash"
                    ),
                    "find the effect by what the ledger keeps: the intent key (`{intent_key}`, \
                     sent with the effect in metadata) or arguments that are not sensitive",
                );
            }
        }
        if let Some(list) = list
            && list.fields.amount.is_some()
        {
            let pointer = list.fields.amount_argument.as_deref().unwrap_or("/amount");
            let path: Vec<String> = pointer_path(&[], pointer);
            if let Some(argument) = sensitive.iter().find(|argument| argument.overlaps(&path)) {
                self.push(
                    &at!["tools", index, "list", "fields"],
                    format!(
                        "{label}: reconciliation compares the provider's amount with argument \
                         `{argument}` (`amount_argument` {pointer}), which is sensitive: the \
                         ledger keeps only its keyed hash, so the amounts would never match"
                    ),
                    "remove `sensitive: true` from the amount, or remove `fields.amount` so that \
                     reconciliation compares no amounts",
                );
            }
        }
    }

    /// The hash key of sensitive arguments: required when `first_sensitive` names a tool
    /// with one, written as a `${NAME}` reference, resolved as `source` says.
    fn hash_key(
        &mut self,
        written: Option<&str>,
        first_sensitive: Option<&(usize, ToolDefinition)>,
        source: &HashKeySource,
    ) -> Option<HashKey> {
        const FIX: &str = "export INTENTGATE_HASH_KEY=$(openssl rand -hex 32) where the gateway \
                           runs, and keep it for as long as intents are kept (every stored hash \
                           depends on it)";
        let path = at!["gateway", "hash_key"];
        let Some(written) = written else {
            if let Some((index, definition)) = first_sensitive {
                let names: Vec<String> = definition
                    .sensitive
                    .iter()
                    .map(|path| format!("`{path}`"))
                    .collect();
                self.push(
                    &at!["tools", *index, "input_schema"],
                    format!(
                        "tool `{}` marks {} as sensitive, which the ledger keeps as keyed hashes, \
                         but `gateway.hash_key` is not set",
                        definition.name,
                        names.join(", ")
                    ),
                    format!("add `hash_key: ${{INTENTGATE_HASH_KEY}}` under `gateway:`, and {FIX}"),
                );
            }
            return None;
        };
        if !env::has_reference(written) {
            self.push(
                &path,
                "`gateway.hash_key` is written in the file: a key in the config is in every copy \
                 of it",
                format!("write `hash_key: ${{INTENTGATE_HASH_KEY}}`, and {FIX}"),
            );
            return None;
        }
        let ephemeral = match source {
            HashKeySource::NotNeeded => return None,
            HashKeySource::Environment => None,
            HashKeySource::EnvironmentOrEphemeral(key) => Some(key),
        };
        let value = match env::resolve(written, self.lookup) {
            Ok(value) => value,
            Err(EnvError::Unset { name }) => {
                if let Some(key) = ephemeral {
                    return Some(key.clone());
                }
                self.push(
                    &path,
                    format!(
                        "environment variable `{name}` (used in `gateway.hash_key`) is not set"
                    ),
                    FIX.replace("INTENTGATE_HASH_KEY", &name),
                );
                return None;
            }
            Err(error) => {
                let (message, fix) = error.describe("`gateway.hash_key`");
                self.push(&path, message, fix);
                return None;
            }
        };
        match HashKey::new(value.as_bytes()) {
            Ok(key) => Some(key),
            Err(HashKeyError::TooShort(bytes)) => {
                // The length only: the value is a secret.
                self.push(
                    &path,
                    format!(
                        "`gateway.hash_key` (from the environment) is {bytes} bytes long; it must \
                         be at least {HASH_KEY_BYTES_MIN}"
                    ),
                    FIX,
                );
                None
            }
        }
    }

    fn messages(
        &mut self,
        index: usize,
        label: &str,
        written: &BTreeMap<String, String>,
    ) -> Messages {
        let mut messages = Messages::default();
        for (key, text) in written {
            let at = self.map.key(&at!["tools", index, "messages", key]);
            match CallStatus::ALL.iter().find(|status| status.as_str() == key) {
                Some(status) => {
                    if text.chars().count() > MESSAGE_LENGTH_MAX {
                        self.errors.push(
                            at,
                            format!("{label}: the `{key}` message is longer than {MESSAGE_LENGTH_MAX} characters"),
                            "shorten it to the instruction the model needs",
                        );
                    }
                    messages.0.insert(*status, text.clone());
                }
                None => {
                    let statuses: Vec<&str> = CallStatus::ALL.iter().map(|s| s.as_str()).collect();
                    self.errors.push(
                        at,
                        format!("{label}: `{key}` in `messages` is not a call status"),
                        format!("use one of {}", names(statuses)),
                    );
                }
            }
        }
        messages
    }

    /// Reports an input schema that is not a valid JSON Schema, at the offending keyword.
    /// Returns whether it is valid.
    fn input_schema(&mut self, index: usize, label: &str, schema: &Value) -> bool {
        let Err(error) = intentgate_gate::schema::validator(schema) else {
            return true;
        };
        let pointer = error.instance_path().to_string();
        let prefix = [
            "tools".to_owned(),
            index.to_string(),
            "input_schema".to_owned(),
        ];
        let owned = pointer_path(&prefix, &pointer);
        let segments = segments(&owned);
        let at = self.map.value(&segments);
        let place = if pointer.is_empty() {
            String::new()
        } else {
            format!(" at `{pointer}`")
        };
        self.errors.push(
            at,
            format!("{label}: input_schema is not a valid JSON Schema{place}: {error}"),
            "correct it to JSON Schema (draft 2020-12), e.g. `{type: object, properties: \
             {order_id: {type: string}}, required: [order_id], additionalProperties: false}`",
        );
        false
    }

    /// Maps what `ToolDefinition::new` refused to the field at fault.
    fn tool_error(&mut self, index: usize, label: &str, arguments: &[String], error: &ToolError) {
        let (field, message, fix): (&str, String, String) = match error {
            ToolError::BadName(name) => (
                "name",
                format!("tool name `{name}` is not a tool name"),
                format!(
                    "use 1 to {} letters, digits, `_`, `-` or `.`, e.g. `refund_order`",
                    intentgate_core::limits::TOOL_NAME_LENGTH_MAX
                ),
            ),
            ToolError::MissingKey(_) => (
                "effect",
                format!("{label} is a side effect but has no intent key, so retries can't be recognised as one intent"),
                "add a `key:` built from the arguments that identify the intent, e.g. \
                 `key: \"refund:{order_id}:{amount:.2}\"`, or from `{intent_id}` when the \
                 application creates one per intent"
                    .to_owned(),
            ),
            ToolError::UnexpectedKey(_) => (
                "key",
                format!("{label} has a key, but only side-effecting tools take an intent key"),
                "remove `key:`, or set `effect: side_effect` if calling the tool twice would act twice"
                    .to_owned(),
            ),
            ToolError::Key { error, .. } => {
                let (message, fix) = key_error(label, arguments, error);
                ("key", message, fix)
            }
            ToolError::BadSchema(_) => (
                "input_schema",
                format!("{label}: input_schema must be an object schema (\"type\": \"object\")"),
                "write `input_schema: {type: object, properties: {...}, required: [...]}`".to_owned(),
            ),
            ToolError::BadTimeout { timeout_ms, .. } => (
                "timeout_ms",
                format!("{label}: timeout_ms is {timeout_ms}, outside 1 to {TIMEOUT_MS_MAX}"),
                format!(
                    "set `timeout_ms` between 1 and {TIMEOUT_MS_MAX}, from the real API's p99 latency (e.g. 10000 for a refund)"
                ),
            ),
            ToolError::Sensitive { error, .. } => (
                "input_schema",
                format!("{label}: input_schema: {error}"),
                "put `sensitive: true` on the property that holds the value".to_owned(),
            ),
            ToolError::MissingHashKey { .. } => (
                "input_schema",
                format!("{label}: {error}"),
                "add `hash_key: ${INTENTGATE_HASH_KEY}` under `gateway:`".to_owned(),
            ),
            ToolError::BadRetryBudget { budget, .. } => (
                "retry_budget",
                format!("{label}: retry_budget is {budget}, above the limit of {RETRY_BUDGET_MAX}"),
                format!(
                    "set `retry_budget` between 0 and {RETRY_BUDGET_MAX}; the agent's other layers retry too"
                ),
            ),
        };
        self.push(&at!["tools", index, field], message, fix);
    }

    fn call(
        &mut self,
        index: usize,
        label: &str,
        mut call: CallSpec,
        upstreams: &BTreeMap<String, UpstreamSpec>,
        arguments: &[String],
    ) -> CallSpec {
        self.upstream_exists(
            &at!["tools", index, "call", "upstream"],
            label,
            &call.upstream,
            upstreams,
        );
        if matches!(call.method, Method::Get | Method::Delete) && call.body.is_some() {
            self.push(
                &at!["tools", index, "call", "body"],
                format!(
                    "{label}: a {} request carries no body",
                    method_name(call.method)
                ),
                "remove `body:`, or pass the values in `query:` or the path",
            );
        }
        self.pointer(
            &at!["tools", index, "call", "result", "external_id"],
            label,
            call.result.external_id.as_deref(),
        );
        self.pointer(
            &at!["tools", index, "call", "result", "pointer"],
            label,
            call.result.pointer.as_deref(),
        );
        if self.arguments_known {
            let names: Vec<&str> = arguments.iter().map(String::as_str).collect();
            self.templates(
                index,
                "call",
                label,
                &call.path,
                &call.query,
                &call.headers,
                &names,
            );
            if let Some(body) = &call.body {
                self.body_template(index, label, body, &names);
            }
        }
        let headers = std::mem::take(&mut call.headers);
        call.headers = self.headers(
            &at!["tools", index, "call"],
            &format!("tools[{index}].call"),
            headers,
            true,
        );
        call
    }

    fn lookup(
        &mut self,
        index: usize,
        label: &str,
        mut lookup: LookupSpec,
        upstreams: &BTreeMap<String, UpstreamSpec>,
        arguments: &[String],
    ) -> LookupSpec {
        // Without `upstream:` a lookup uses the call's, which `call` checks.
        if let Some(upstream) = &lookup.upstream {
            self.upstream_exists(
                &at!["tools", index, "lookup", "upstream"],
                label,
                upstream,
                upstreams,
            );
        }
        if self.arguments_known {
            let names: Vec<&str> = arguments.iter().map(String::as_str).collect();
            self.templates(
                index,
                "lookup",
                label,
                &lookup.path,
                &lookup.query,
                &lookup.headers,
                &names,
            );
        }
        self.pointer(
            &at!["tools", index, "lookup", "found"],
            label,
            Some(&lookup.found),
        );
        self.pointer(
            &at!["tools", index, "lookup", "external_id"],
            label,
            lookup.external_id.as_deref(),
        );
        for (position, status) in lookup.not_found_statuses.iter().enumerate() {
            if !(100..=599).contains(status) {
                self.push(
                    &at!["tools", index, "lookup", "not_found_statuses", position],
                    format!("{label}: {status} is not an HTTP status"),
                    "list the statuses that mean \"not found\", e.g. `not_found_statuses: [404]`",
                );
            }
        }
        let headers = std::mem::take(&mut lookup.headers);
        lookup.headers = self.headers(
            &at!["tools", index, "lookup"],
            &format!("tools[{index}].lookup"),
            headers,
            true,
        );
        lookup
    }

    fn list(
        &mut self,
        index: usize,
        label: &str,
        mut list: ListSpec,
        upstreams: &BTreeMap<String, UpstreamSpec>,
    ) -> ListSpec {
        if let Some(upstream) = &list.upstream {
            self.upstream_exists(
                &at!["tools", index, "list", "upstream"],
                label,
                upstream,
                upstreams,
            );
        }
        self.list_templates(index, label, &list);
        for (field, pointer) in [
            ("items", Some(list.items.as_str())),
            ("next_cursor", Some(list.next_cursor.as_str())),
        ] {
            self.pointer(&at!["tools", index, "list", field], label, pointer);
        }
        for (field, pointer) in [
            ("intent_key", Some(list.fields.intent_key.as_str())),
            ("external_id", Some(list.fields.external_id.as_str())),
            ("amount", list.fields.amount.as_deref()),
            ("amount_argument", list.fields.amount_argument.as_deref()),
            ("subject", list.fields.subject.as_deref()),
        ] {
            self.pointer(
                &at!["tools", index, "list", "fields", field],
                label,
                pointer,
            );
        }
        let headers = std::mem::take(&mut list.headers);
        list.headers = self.headers(
            &at!["tools", index, "list"],
            &format!("tools[{index}].list"),
            headers,
            true,
        );
        list
    }

    fn upstream_exists(
        &mut self,
        path: &[Segment<'_>],
        label: &str,
        upstream: &str,
        upstreams: &BTreeMap<String, UpstreamSpec>,
    ) {
        if upstreams.contains_key(upstream) {
            return;
        }
        let fix = if upstreams.is_empty() {
            format!(
                "add an upstream under `upstreams:`, e.g. `{upstream}: {{base_url: https://api.example.com}}`"
            )
        } else {
            format!(
                "use one of: {}, or add `{upstream}:` under `upstreams:`",
                names(upstreams.keys())
            )
        };
        self.push(
            path,
            format!("{label} uses upstream `{upstream}`, which is not in `upstreams`"),
            fix,
        );
    }

    /// Checks the path, query values and header values of one request (`part` is `call`,
    /// `lookup` or `list`) with the HTTP crate's template parser, each at its own line.
    #[allow(clippy::too_many_arguments)]
    fn templates(
        &mut self,
        index: usize,
        part: &str,
        label: &str,
        request_path: &str,
        query: &BTreeMap<String, String>,
        headers: &BTreeMap<String, String>,
        names: &[&str],
    ) {
        let checked = Template::parse(request_path)
            .and_then(|template| template.check_path().and_then(|()| template.check(names)));
        if let Err(error) = checked {
            self.template_error(
                &at!["tools", index, part, "path"],
                label,
                &format!("{part}.path"),
                &error,
                names,
            );
        }
        for (key, value) in query {
            if let Err(error) = check_template(value, names) {
                let field = format!("{part}.query.{key}");
                self.template_error(
                    &at!["tools", index, part, "query", key],
                    label,
                    &field,
                    &error,
                    names,
                );
            }
        }
        for (key, value) in headers {
            // Checked without its `${NAME}` references: their values are secrets, not
            // templates, and are resolved later.
            if let Err(error) = check_template(&env::without_references(value), names) {
                let field = format!("{part}.headers.{key}");
                self.template_error(
                    &at!["tools", index, part, "headers", key],
                    label,
                    &field,
                    &error,
                    names,
                );
            }
        }
    }

    /// Checks a list's path, query values and header values, each at its own line. A listing
    /// runs outside any call: no arguments and no intent, only the window and paging
    /// placeholders. Each template goes through the HTTP crate's own list check, alone in a
    /// spec, so that the rules are the ones the listing will run with.
    fn list_templates(&mut self, index: usize, label: &str, list: &ListSpec) {
        let alone =
            |path: &str, query: BTreeMap<String, String>, headers: BTreeMap<String, String>| {
                let spec = ListSpec {
                    upstream: None,
                    path: path.to_owned(),
                    query,
                    headers,
                    items: String::new(),
                    next_cursor: String::new(),
                    fields: ListFields {
                        intent_key: String::new(),
                        external_id: String::new(),
                        amount: None,
                        amount_argument: None,
                        subject: None,
                    },
                };
                match check_list_spec(&spec) {
                    Err(HttpError::Template { error, .. }) => Some(error),
                    _ => None,
                }
            };
        // A path that checks alone, so that a query or header is checked on its own merits.
        const ROOT: &str = "/";
        if let Some(error) = alone(&list.path, BTreeMap::new(), BTreeMap::new()) {
            self.template_error(
                &at!["tools", index, "list", "path"],
                label,
                "list.path",
                &error,
                &LIST_PLACEHOLDERS,
            );
        }
        for (key, value) in &list.query {
            let query = BTreeMap::from([(key.clone(), value.clone())]);
            if let Some(error) = alone(ROOT, query, BTreeMap::new()) {
                let field = format!("list.query.{key}");
                self.template_error(
                    &at!["tools", index, "list", "query", key],
                    label,
                    &field,
                    &error,
                    &LIST_PLACEHOLDERS,
                );
            }
        }
        for (key, value) in &list.headers {
            let headers = BTreeMap::from([(key.clone(), env::without_references(value))]);
            if let Some(error) = alone(ROOT, BTreeMap::new(), headers) {
                let field = format!("list.headers.{key}");
                self.template_error(
                    &at!["tools", index, "list", "headers", key],
                    label,
                    &field,
                    &error,
                    &LIST_PLACEHOLDERS,
                );
            }
        }
    }

    /// Checks a call's body template, at the line of the offending string.
    fn body_template(&mut self, index: usize, label: &str, body: &Value, names: &[&str]) {
        let Err(error) = check_body_template(body, names) else {
            return;
        };
        let (pointer, inner) = match &error {
            TemplateError::InBody { pointer, error } => (pointer.as_str(), error.as_ref()),
            other => ("", other),
        };
        let prefix = [
            "tools".to_owned(),
            index.to_string(),
            "call".to_owned(),
            "body".to_owned(),
        ];
        let owned = pointer_path(&prefix, pointer);
        let field = if pointer.is_empty() || pointer == "/" {
            "call.body".to_owned()
        } else {
            format!("call.body at `{pointer}`")
        };
        self.template_error(&segments(&owned), label, &field, inner, names);
    }

    fn template_error(
        &mut self,
        path: &[Segment<'_>],
        label: &str,
        field: &str,
        error: &TemplateError,
        names: &[&str],
    ) {
        let available = |names: &[&str]| {
            if names.is_empty() {
                "the tool has no arguments".to_owned()
            } else {
                format!("the names available are {}", self::names(names))
            }
        };
        let fix = match error {
            TemplateError::UnknownName { name } => format!(
                "use one of the tool's arguments or a gateway value ({}), or add `{name}` to \
                 input_schema.properties; {}",
                self::names(GATEWAY_VALUE_NAMES.iter().map(|name| format!("{{{name}}}"))),
                available(names)
            ),
            TemplateError::NotAvailableHere { .. } => format!(
                "a list request runs outside any call, so it may use only {}",
                self::names(LIST_PLACEHOLDERS.iter().map(|name| format!("{{{name}}}")))
            ),
            TemplateError::BadPath(_) => {
                "write an absolute path such as `/v1/refunds/{refund_id}`, and put query \
                 parameters under `query:`"
                    .to_owned()
            }
            _ => format!(
                "write `{{argument}}` for an argument, `{{argument:.2}}` for an exact decimal, \
                 and `{{{{` or `}}}}` for a literal brace; {}",
                available(names)
            ),
        };
        // The error never holds template text (a header template may hold a secret).
        self.push(path, format!("{label}: `{field}`: {error}"), fix);
    }

    fn pointer(&mut self, path: &[Segment<'_>], label: &str, pointer: Option<&str>) {
        let Some(pointer) = pointer else { return };
        if is_json_pointer(pointer) {
            return;
        }
        self.push(
            path,
            format!("{label}: `{pointer}` is not a JSON pointer"),
            "write a JSON pointer: empty for the whole document, or `/` followed by keys and \
             indexes, e.g. `/data/0` or `/metadata/intent_key`",
        );
    }

    /// Resolves `${NAME}` references in one value, reporting failures at `path`.
    fn resolve(&mut self, path: &[Segment<'_>], field: &str, text: &str) -> Option<String> {
        match env::resolve(text, self.lookup) {
            Ok(value) => Some(value),
            Err(error) => {
                let (message, fix) = error.describe(&format!("`{field}`"));
                self.push(path, message, fix);
                None
            }
        }
    }

    /// Checks header names and resolves header values. `base` is the path of the mapping
    /// that holds `headers`; `templates` is true for a tool's headers, which are templates.
    fn headers(
        &mut self,
        base: &[Segment<'_>],
        field: &str,
        headers: BTreeMap<String, String>,
        templates: bool,
    ) -> BTreeMap<String, String> {
        let mut resolved = BTreeMap::new();
        for (name, written) in headers {
            let mut path: Vec<Segment<'_>> = base.to_vec();
            path.push(Segment::Key("headers"));
            path.push(Segment::Key(&name));
            if !is_token(&name) {
                let at = self.map.key(&path);
                self.errors.push(
                    at,
                    format!("`{name}` in `{field}.headers` is not a header name"),
                    "use letters, digits and `-`, e.g. `Authorization`",
                );
            }
            let field = format!("{field}.headers.{name}");
            let Some(value) = self.resolve(&path, &field, &written) else {
                continue;
            };
            if value.chars().any(|c| c.is_control() && c != '\t') {
                self.push(
                    &path,
                    format!("`{field}` contains a line break or control character"),
                    "header values are one line: check the value (and any variable it uses)",
                );
            } else if templates && braces(&value) > braces(&env::without_references(&written)) {
                // The value would be read as a template, so a brace in a secret would be
                // taken for a placeholder (and could end up in an error message).
                self.push(
                    &path,
                    format!("a variable used in `{field}` holds `{{` or `}}`, which the header template would read as a placeholder"),
                    "use a value without braces, or move the header to the upstream's `headers`",
                );
            }
            resolved.insert(name, value);
        }
        resolved
    }
}

/// How long the sweeper may re-send an unknown intent of `definition` with its provider key
/// (`ToolDefinition::resend_window`): the key window of its call's upstream less
/// [`RESEND_WINDOW_MARGIN`], when that upstream honours idempotency keys. None for a tool
/// whose request uses `{intent_id}` while its key does not: the ledger keeps the key, so
/// the sweeper could not send that request the way the first attempt did; and none for a
/// tool with sensitive arguments, whose request the sweeper would have to build from their
/// hashes. Nothing is refused here: a tool without a window only never has its unknown
/// intents re-sent.
fn resend_window(
    definition: &ToolDefinition,
    upstream: Option<&UpstreamSpec>,
    call_uses_intent_id: bool,
) -> Option<Duration> {
    let upstream = upstream.filter(|upstream| upstream.honours_idempotency_keys)?;
    let key_has_intent_id = definition
        .key
        .as_ref()
        .is_some_and(KeyTemplate::uses_intent_id);
    if definition.effect != Effect::SideEffect
        || (call_uses_intent_id && !key_has_intent_id)
        || !definition.sensitive.is_empty()
    {
        return None;
    }
    let window = Duration::from_secs(u64::from(upstream.key_window_hours) * 60 * 60);
    window
        .checked_sub(RESEND_WINDOW_MARGIN)
        .filter(|left| !left.is_zero())
}

/// The message and fix for a key template the core refused.
fn key_error(label: &str, arguments: &[String], error: &KeyError) -> (String, String) {
    let available = if arguments.is_empty() {
        "the tool has no arguments yet".to_owned()
    } else {
        format!("its arguments are {}", names(arguments))
    };
    match error {
        KeyError::PerAttempt { name } => (
            format!(
                "{label}: the key uses `{{{name}}}`, which changes on every attempt, so each retry \
                 would look like a new intent and could act again"
            ),
            format!(
                "build the key from the business fields that identify the intent (e.g. \
                 `refund:{{order_id}}:{{amount:.2}}`), or from `{{intent_id}}` created once by the \
                 application; remove `{{{name}}}`"
            ),
        ),
        KeyError::NotAnArgument { name } => (
            format!("{label}: the key uses `{{{name}}}`, which is not an argument of the tool"),
            format!(
                "use only the tool's arguments and `{{intent_id}}` ({available}), or add `{name}` \
                 to input_schema.properties"
            ),
        ),
        KeyError::Syntax { .. } => (
            format!("{label}: {error}"),
            "write placeholders like `{order_id}` or `{amount:.2}`, and `{{` or `}}` for a literal brace"
                .to_owned(),
        ),
        KeyError::Constant(_) => (
            format!("{label}: the key has no placeholder, so every call would be the same intent"),
            format!("add the arguments that identify the intent, e.g. `refund:{{order_id}}:{{amount:.2}}` ({available})"),
        ),
        other => (
            format!("{label}: {other}"),
            "correct the key template".to_owned(),
        ),
    }
}

/// The path of `pointer` (a JSON pointer, RFC 6901) below `prefix`, as keys and indexes.
fn pointer_path(prefix: &[String], pointer: &str) -> Vec<String> {
    let mut path = prefix.to_vec();
    path.extend(
        pointer
            .split('/')
            .skip(1)
            .filter(|segment| !segment.is_empty())
            .map(|segment| segment.replace("~1", "/").replace("~0", "~")),
    );
    path
}

/// The top-level property names of an object schema: what templates and keys may use.
fn argument_names(schema: &Value) -> Vec<String> {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|properties| properties.keys().cloned().collect())
        .unwrap_or_default()
}

/// Why `text` can't serve as a base URL or webhook. The reason never quotes the URL (the
/// parser's messages don't either): it may come from the environment and hold a secret.
/// A web origin as browsers send it: `scheme://host[:port]`, nothing after.
fn check_origin(text: &str) -> Result<(), String> {
    let url = reqwest::Url::parse(text).map_err(|error| error.to_string())?;
    if !matches!(url.scheme(), "http" | "https") || !url.has_host() {
        return Err("it needs an http or https scheme and a host".to_owned());
    }
    if text.trim_end_matches('/') != url.origin().ascii_serialization() {
        return Err("it has a path, query, user or other part an origin lacks".to_owned());
    }
    Ok(())
}

fn check_url(text: &str) -> Result<(), String> {
    let url = reqwest::Url::parse(text).map_err(|error| error.to_string())?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("its scheme is not http or https".to_owned());
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("it has no host".to_owned());
    }
    if url.fragment().is_some() {
        return Err("it has a `#` fragment, which is never sent".to_owned());
    }
    Ok(())
}

/// Header values with their `${NAME}` references removed.
fn without_references(headers: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    headers
        .iter()
        .map(|(name, value)| (name.clone(), env::without_references(value)))
        .collect()
}

fn braces(text: &str) -> usize {
    text.chars().filter(|c| matches!(c, '{' | '}')).count()
}

/// An HTTP header name (RFC 9110 token).
fn is_token(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// An RFC 6901 JSON pointer: empty, or `/`-separated tokens where `~` is only `~0` or `~1`.
fn is_json_pointer(pointer: &str) -> bool {
    if pointer.is_empty() {
        return true;
    }
    let Some(rest) = pointer.strip_prefix('/') else {
        return false;
    };
    let mut chars = rest.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return false;
        }
    }
    true
}

fn method_name(method: Method) -> &'static str {
    match method {
        Method::Get => "GET",
        Method::Post => "POST",
        Method::Put => "PUT",
        Method::Patch => "PATCH",
        Method::Delete => "DELETE",
    }
}

/// "`a`, `b`, `c`" (or "none").
fn names<S: AsRef<str>>(names: impl IntoIterator<Item = S>) -> String {
    let names: Vec<String> = names
        .into_iter()
        .map(|name| format!("`{}`", name.as_ref()))
        .collect();
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_urls_and_header_names() {
        assert!(is_json_pointer(""));
        assert!(is_json_pointer("/data/0"));
        assert!(is_json_pointer("/a~1b"));
        assert!(!is_json_pointer("data"));
        assert!(!is_json_pointer("/a~2"));
        assert!(check_url("http://127.0.0.1:8090").is_ok());
        assert!(check_url("https://api.example.com/v1").is_ok());
        assert!(check_url("ftp://x").is_err());
        assert!(check_url("localhost:8090").is_err());
        assert!(check_url("not a url").is_err());
        assert!(is_token("Idempotency-Key"));
        assert!(!is_token("Bad Header"));
        assert!(!is_token(""));
    }
}
