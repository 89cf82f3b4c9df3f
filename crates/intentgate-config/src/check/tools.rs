//! The checks of one tool, in named steps: its texts (description, owner, `once_per`), its
//! input schema and argument names, its definition as the engine builds it
//! (`ToolDefinition::new`, with each refusal reported at its field), its approval and
//! budgets (in `policies.rs`), its requests (in `requests.rs`), and what the gateway adds to
//! the definition from the config. Also where sensitive arguments may not go, and the hash
//! key they need.

use std::collections::BTreeMap;
use std::time::Duration;

use intentgate_config_file::at;
use intentgate_config_file::env::{self, EnvError};
use intentgate_config_file::file::{McpListing, ToolFile};
use intentgate_config_file::source_map::{Segment, segments};
use intentgate_config_file::{IdempotencyKeyHeader, OwnerConfig};
use intentgate_core::sensitive::{HASH_KEY_BYTES_MIN, HashKeyError, SensitiveError};
use intentgate_core::tool::{RETRY_BUDGET_MAX, TIMEOUT_MS_MAX};
use intentgate_core::{
    ArgumentPath, CallStatus, Effect, Executor, HashKey, KeyError, KeyTemplate, Messages,
    ToolDefinition, ToolError,
};
use intentgate_http::spec::{CallSpec, ListSpec, LookupSpec, UpstreamSpec};
use intentgate_http::template::Template;
use intentgate_http::{HttpTool, check_list_spec};
use serde_json::Value;

use super::mcp::{Forms, placeholders};
use super::policies::PolicyContext;
use super::upstreams::without_references;
use super::{Checker, names};
use crate::config::{McpToolConfig, McpUpstreamConfig, ToolConfig};
use crate::limits::*;
use crate::{HashKeySource, Secrets};

/// A tool's requests as checked, with their `${NAME}` references resolved.
struct Requests {
    /// None for a client tool, and for a gateway tool without one (reported).
    call: Option<CallSpec>,
    lookup: Option<LookupSpec>,
    list: Option<ListSpec>,
    /// The call's request uses `{intent_id}`: a re-send would need the application's id.
    call_uses_intent_id: bool,
}

impl Checker<'_, '_> {
    pub(super) fn tool_list(&mut self, tools: &[ToolFile], imports: bool) {
        if tools.is_empty() && !imports {
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
    pub(super) fn tool(
        &mut self,
        index: usize,
        mut tool: ToolFile,
        upstreams: &BTreeMap<String, UpstreamSpec>,
        mcp_upstreams: &BTreeMap<String, McpUpstreamConfig>,
        owners: &BTreeMap<String, OwnerConfig>,
    ) -> Option<(ToolConfig, ToolDefinition)> {
        let label = format!("tool `{}`", tool.name);
        self.tool_texts(index, &label, &tool, owners);
        self.idempotency_key_header(index, &label, &tool);
        self.executor(index, &label, &mut tool);
        let messages = self.messages(index, &label, &tool.messages);
        let alerts = self.alerts(index, &label, tool.effect, tool.alerts.take());
        let schema_valid = self.input_schema(index, &label, &tool.input_schema);
        let arguments = argument_names(&tool.input_schema);
        self.arguments_known =
            schema_valid && tool.input_schema.get("type").and_then(Value::as_str) == Some("object");
        let definition = self.definition(index, &label, &tool, &arguments, schema_valid);
        let policies = self.policies(
            &PolicyContext {
                index,
                label: &label,
                effect: tool.effect,
                input_schema: &tool.input_schema,
                arguments: &arguments,
                sensitive: definition
                    .as_ref()
                    .map(|definition| definition.sensitive.as_slice()),
            },
            tool.approval.take(),
            std::mem::take(&mut tool.budgets),
        );
        let forms = self.forms(
            index,
            &label,
            tool.effect,
            tool.call.take(),
            tool.lookup.take(),
            tool.list.take(),
            mcp_upstreams,
            &arguments,
        );
        let (call, lookup, list, mut mcp, mcp_external_id) = match forms {
            Forms::None => (None, None, None, None, None),
            Forms::Http { call, lookup, list } => (call, lookup, list, None, None),
            Forms::Mcp(mcp, external_id) => (None, None, None, Some(mcp), external_id),
        };
        if let Some(mcp) = &mut mcp {
            self.mcp_requests(index, &label, &tool, mcp, definition.as_ref());
        }
        let requests = self.requests(
            index,
            &label,
            &tool,
            call,
            lookup,
            list,
            definition.as_ref(),
            upstreams,
            &arguments,
        );
        let mut definition = definition?;
        self.complete_definition(&mut definition, &tool, &requests, upstreams, &messages);
        definition.policies = policies;
        if let Some(mcp) = &mcp {
            complete_mcp_definition(&mut definition, mcp, mcp_external_id, mcp_upstreams);
        }
        let config = ToolConfig {
            name: tool.name,
            description: tool.description,
            effect: definition.effect,
            executor: definition.executor,
            listed_over_mcp: definition.listed_over_mcp,
            key_window_hours: tool.key_window_hours,
            owner: tool.owner,
            once_per: tool.once_per,
            input_schema: tool.input_schema,
            key: tool.key,
            timeout_ms: tool.timeout_ms,
            retry_budget: tool.retry_budget,
            retry_rejected: tool.retry_rejected,
            idempotency_key: tool.idempotency_key,
            destructive: tool.destructive,
            open_world: tool.open_world,
            messages,
            call: requests.call,
            mcp,
            lookup: requests.lookup,
            list: requests.list,
            alerts,
            line: self.position(&at!["tools", index]).line,
        };
        Some((config, definition))
    }

    /// The texts a model or an owner reads: the description, the owner's name, `once_per`.
    fn tool_texts(
        &mut self,
        index: usize,
        label: &str,
        tool: &ToolFile,
        owners: &BTreeMap<String, OwnerConfig>,
    ) {
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
    }

    /// `idempotency_key: required` only on a side-effecting tool: reads and idempotent tools
    /// record no intent, so the header means nothing there and requiring it would only
    /// refuse callers.
    fn idempotency_key_header(&mut self, index: usize, label: &str, tool: &ToolFile) {
        if tool.idempotency_key == IdempotencyKeyHeader::Required
            && matches!(tool.effect, Some(Effect::Read | Effect::Idempotent))
        {
            self.push(
                &at!["tools", index, "idempotency_key"],
                format!(
                    "{label} requires an Idempotency-Key header, but only side-effecting tools have intents to key"
                ),
                "remove `idempotency_key: required` from this tool, or make it `effect: side_effect`",
            );
        }
    }

    /// Who performs the tool, and what that rules out. A client tool (`executor: client`) is
    /// a side effect whose request the caller's code sends, so the gateway has nothing to
    /// send, look up or list: its `call`, `lookup` and `list` are refused, and then dropped
    /// so that nothing downstream checks them. A gateway tool needs its `call`, and takes its
    /// key window from the call's upstream, not from the tool.
    fn executor(&mut self, index: usize, label: &str, tool: &mut ToolFile) {
        match tool.executor {
            Executor::Client => self.client_executor(index, label, tool),
            Executor::Gateway => self.gateway_executor(index, label, tool),
        }
    }

    /// A client tool: a side effect, with no `call`, `lookup` or `list` (dropped once
    /// reported), and its own key window.
    fn client_executor(&mut self, index: usize, label: &str, tool: &mut ToolFile) {
        if let Some(effect) = tool.effect
            && effect != Effect::SideEffect
        {
            self.push(
                &at!["tools", index, "executor"],
                format!(
                    "{label} says `executor: client`, but it is `effect: {}`: only side \
                     effects are executed by the caller's code through the intent API",
                    effect.as_str()
                ),
                "remove `executor: client` and give the tool a `call`, or set \
                 `effect: side_effect` if calling it twice would act twice",
            );
            // Whether it should have a `call` depends on which of the two is meant.
            return;
        }
        let name = &tool.name;
        let refused = [
            (
                tool.call.is_some(),
                "call",
                "the gateway never sends its request: the caller's code performs it \
                 after `POST /v1/tools/{name}/intents` grants `execute`",
            ),
            (
                tool.lookup.is_some(),
                "lookup",
                "the gateway never looks its effects up: the caller's code checks with \
                 the provider when it is granted `look_up`",
            ),
            (
                tool.list.is_some(),
                "list",
                "the gateway never lists its effects: reconciling a client tool's \
                 effects with the provider is the caller's",
            ),
        ];
        for (present, field, why) in refused {
            if present {
                self.push(
                    &at!["tools", index, field],
                    format!(
                        "{label} is executed by the caller's code (`executor: client`), \
                         so it has no `{field}`: {}",
                        why.replace("{name}", name)
                    ),
                    format!(
                        "remove `{field}:` from this tool, or remove `executor: client` \
                         to have the gateway perform it"
                    ),
                );
            }
        }
        tool.call = None;
        tool.lookup = None;
        tool.list = None;
        if let Some(hours) = tool.key_window_hours {
            self.range(
                &at!["tools", index, "key_window_hours"],
                hours.into(),
                1,
                KEY_WINDOW_HOURS_MAX.into(),
                "hours (the provider's documented key retention; Stripe: 24)",
            );
        }
    }

    /// A gateway tool: its `call` is required, and its key window is its upstream's.
    fn gateway_executor(&mut self, index: usize, label: &str, tool: &ToolFile) {
        if tool.call.is_none() {
            self.push(
                &at!["tools", index],
                format!("{label} has no `call`, so the gateway has no request that performs it"),
                "add `call: {upstream: payments, method: POST, path: /v1/...}` (the \
                 request the gateway sends), or `executor: client` for a side effect \
                 that your own code performs through the intent API",
            );
        }
        if tool.key_window_hours.is_some() {
            let upstream = tool
                .call
                .as_ref()
                .map_or("its upstream".to_owned(), |call| {
                    format!("upstream `{}`", call.upstream)
                });
            self.push(
                &at!["tools", index, "key_window_hours"],
                format!(
                    "{label}: `key_window_hours` is for client tools (`executor: \
                     client`); the gateway's calls use the key window of their upstream"
                ),
                format!(
                    "remove it from the tool, and set `key_window_hours` (with \
                     `honours_idempotency_keys: true`) on {upstream}"
                ),
            );
        }
    }

    /// The engine's definition, as `ToolDefinition::new` builds it; each refusal is reported
    /// at its field.
    fn definition(
        &mut self,
        index: usize,
        label: &str,
        tool: &ToolFile,
        arguments: &[String],
        schema_valid: bool,
    ) -> Option<ToolDefinition> {
        let Some(effect) = tool.effect else {
            // Reported by `tools_have_effects`. Whether a key is required depends on the
            // effect, but a key that can't work is wrong whatever the effect turns out to be.
            if let Some(key) = &tool.key {
                let names: Vec<&str> = arguments.iter().map(String::as_str).collect();
                let checked =
                    KeyTemplate::parse(key).and_then(|template| template.check_arguments(&names));
                if let Err(error) = checked {
                    let (message, fix) = key_error(label, arguments, &error);
                    self.push(&at!["tools", index, "key"], message, fix);
                }
            }
            return None;
        };
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
                self.sensitive_error(index, label, &error);
                None
            }
            Err(error) => {
                self.tool_error(index, label, arguments, &error);
                None
            }
        }
    }

    /// The tool's requests, checked field by field (`requests.rs`), where its sensitive
    /// arguments may not go, and then whole by the HTTP crate's own checks: a backstop for
    /// anything the field-by-field checks don't cover (they report at the field).
    #[allow(clippy::too_many_arguments)]
    fn requests(
        &mut self,
        index: usize,
        label: &str,
        tool: &ToolFile,
        call: Option<CallSpec>,
        lookup: Option<LookupSpec>,
        list: Option<ListSpec>,
        definition: Option<&ToolDefinition>,
        upstreams: &BTreeMap<String, UpstreamSpec>,
        arguments: &[String],
    ) -> Requests {
        // A client tool has none (dropped by `executor`); a gateway tool without a call is
        // reported there, and its lookup and list can't be checked without it. An MCP
        // tool's requests are checked by `mcp_requests`.
        let Some(tool_call) = &call else {
            return Requests {
                call: None,
                lookup: None,
                list: None,
                call_uses_intent_id: false,
            };
        };
        // Header values go to the backstop without their `${NAME}` references, which are not
        // templates.
        let backstop_tool = HttpTool {
            call: CallSpec {
                headers: without_references(&tool_call.headers),
                ..tool_call.clone()
            },
            lookup: lookup.as_ref().map(|lookup| LookupSpec {
                headers: without_references(&lookup.headers),
                ..lookup.clone()
            }),
        };
        let backstop_list = list.as_ref().map(|list| ListSpec {
            headers: without_references(&list.headers),
            ..list.clone()
        });
        let reported = self.errors.len();

        if let Some(definition) = definition
            && !definition.sensitive.is_empty()
        {
            self.sensitive_uses(index, label, &definition.sensitive, lookup.as_ref());
        }
        let call = self.call(index, label, tool_call.clone(), upstreams, arguments);
        let sensitive = definition.map(|definition| definition.sensitive.as_slice());
        let lookup = lookup.map(|lookup| {
            let mut lookup = self.lookup(index, label, lookup, upstreams, arguments);
            // The checks set each `match` field's comparison.
            self.match_fields(
                index,
                "lookup",
                label,
                &mut lookup.match_fields,
                &tool.input_schema,
                sensitive,
            );
            lookup
        });
        let list = list.map(|list| {
            let mut list = self.list(index, label, list, upstreams);
            let mut records = list.records();
            self.list_records(index, label, &mut records, &tool.input_schema, sensitive);
            // The checks set each `match` field's comparison.
            list.match_fields = records.match_fields;
            list
        });

        if self.errors.len() == reported && self.arguments_known {
            let names: Vec<&str> = arguments.iter().map(String::as_str).collect();
            if let Err(error) = backstop_tool.check(&tool.name, &names) {
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
        Requests {
            call_uses_intent_id: backstop_tool.call_uses_intent_id(&tool.name),
            call: Some(call),
            lookup,
            list,
        }
    }

    /// What the gateway adds to the engine's definition from the config: who executes the
    /// tool and whether MCP lists it, the resend window, the owner, the messages, and the
    /// tool's own words for its intents and results.
    fn complete_definition(
        &self,
        definition: &mut ToolDefinition,
        tool: &ToolFile,
        requests: &Requests,
        upstreams: &BTreeMap<String, UpstreamSpec>,
        messages: &Messages,
    ) {
        definition.executor = tool.executor;
        definition.listed_over_mcp = match tool.mcp {
            Some(McpListing::Listed) => true,
            Some(McpListing::Hidden) => false,
            // An MCP client can only call tools, and a client tool is not called.
            None => tool.executor == Executor::Gateway,
        };
        definition.resend_window = match tool.executor {
            Executor::Gateway => resend_window(
                definition,
                requests
                    .call
                    .as_ref()
                    .and_then(|call| upstreams.get(&call.upstream))
                    .filter(|upstream| upstream.honours_idempotency_keys)
                    .map(|upstream| upstream.key_window_hours),
                requests.call_uses_intent_id,
            ),
            Executor::Client => tool.key_window_hours.and_then(window_less_margin),
        };
        definition.owner = tool.owner.clone();
        definition.messages = messages.clone();
        definition.retry_rejected = tool.retry_rejected;
        if let Some(once_per) = &tool.once_per {
            definition.once_per = once_per.clone();
        }
        if let Some(pointer) = requests
            .call
            .as_ref()
            .and_then(|call| call.result.external_id.as_ref())
        {
            definition.external_id_pointer = pointer.clone();
        }
    }

    /// Reports a `sensitive` mark the gateway can't honour, at the schema that holds it.
    pub(super) fn sensitive_error(&mut self, index: usize, label: &str, error: &SensitiveError) {
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

    /// Refuses a lookup that reads a sensitive argument. The sweeper looks up from what the
    /// ledger keeps, where the value is only a hash: the request would carry the hash. (The
    /// amount reconciliation compares is checked with the rest of the list, `pairing.rs`.)
    pub(super) fn sensitive_uses(
        &mut self,
        index: usize,
        label: &str,
        sensitive: &[ArgumentPath],
        lookup: Option<&LookupSpec>,
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
                    "find the effect by what the ledger keeps: the provider key \
                     (`{idempotency_key}`, which the provider keeps or the call sends in \
                     metadata) or arguments that are not sensitive",
                );
            }
        }
    }

    /// The hash key of sensitive arguments: required when `first_sensitive` names a tool
    /// with one, written as a `${NAME}` reference, resolved as `source` says.
    pub(super) fn hash_key(
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
                if self.secrets == Secrets::Optional {
                    self.warn_unset(&path, "gateway.hash_key", name);
                    return None;
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

    pub(super) fn messages(
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
    pub(super) fn input_schema(&mut self, index: usize, label: &str, schema: &Value) -> bool {
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
    pub(super) fn tool_error(
        &mut self,
        index: usize,
        label: &str,
        arguments: &[String],
        error: &ToolError,
    ) {
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
}

/// How long the sweeper may re-send an unknown intent of `definition` with its provider key
/// (`ToolDefinition::resend_window`): the key window of its call's upstream less
/// [`RESEND_WINDOW_MARGIN`], when that upstream honours idempotency keys. None for a tool
/// whose request uses `{intent_id}` while its key does not: the ledger keeps the key, so
/// the sweeper could not send that request the way the first attempt did; and none for a
/// tool with sensitive arguments, whose request the sweeper would have to build from their
/// hashes. Nothing is refused here: a tool without a window only never has its unknown
/// intents re-sent.
/// The window in which an unknown intent may be re-sent with the same key:
/// `key_window_hours` is the upstream's, when it honours idempotency keys.
pub(super) fn resend_window(
    definition: &ToolDefinition,
    key_window_hours: Option<u32>,
    call_uses_intent_id: bool,
) -> Option<Duration> {
    let key_window_hours = key_window_hours?;
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
    window_less_margin(key_window_hours)
}

/// A provider key window of `hours`, less [`RESEND_WINDOW_MARGIN`]; None when nothing is
/// left. A client tool's window (`key_window_hours` on the tool) is this too: the caller
/// re-sends with the arguments it holds, so neither `{intent_id}` nor sensitive arguments
/// stand in its way, but the provider's clock is just as far from the gateway's.
fn window_less_margin(hours: u32) -> Option<Duration> {
    Duration::from_secs(u64::from(hours) * 60 * 60)
        .checked_sub(RESEND_WINDOW_MARGIN)
        .filter(|left| !left.is_zero())
}

/// The message and fix for a key template the core refused.
pub(super) fn key_error(label: &str, arguments: &[String], error: &KeyError) -> (String, String) {
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

/// The top-level property names of an object schema: what templates and keys may use.
pub(super) fn argument_names(schema: &Value) -> Vec<String> {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|properties| properties.keys().cloned().collect())
        .unwrap_or_default()
}

/// The path of `pointer` (a JSON pointer, RFC 6901) below `prefix`, as keys and indexes.
pub(super) fn pointer_path(prefix: &[String], pointer: &str) -> Vec<String> {
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

impl Checker<'_, '_> {
    /// What only an MCP tool's requests can get wrong beyond their fields (`mcp.rs`): how its
    /// `list` reads pages and pairs records (as for HTTP), and a lookup that would carry a
    /// sensitive argument. The sweeper looks up from what the ledger keeps, where such a
    /// value is only a hash.
    fn mcp_requests(
        &mut self,
        index: usize,
        label: &str,
        tool: &ToolFile,
        mcp: &mut McpToolConfig,
        definition: Option<&ToolDefinition>,
    ) {
        let sensitive = definition.map(|definition| definition.sensitive.as_slice());
        if let Some(list) = &mut mcp.list {
            self.list_records(
                index,
                label,
                &mut list.records,
                &tool.input_schema,
                sensitive,
            );
        }
        // A lookup's `match` as an HTTP lookup's: its comparisons set from the input schema,
        // a sensitive argument refused.
        if let Some(lookup) = &mut mcp.tool.lookup {
            self.match_fields(
                index,
                "lookup",
                label,
                &mut lookup.match_fields,
                &tool.input_schema,
                sensitive,
            );
        }
        let (Some(definition), Some(lookup)) = (definition, &mcp.tool.lookup) else {
            return;
        };
        if definition.sensitive.is_empty() {
            return;
        }
        let mut used = Vec::new();
        match &lookup.call.arguments {
            Some(template) => placeholders(template, &mut |name| used.push(name.to_owned())),
            None => used.extend(definition.sensitive.iter().map(ToString::to_string)),
        }
        let sensitive = used.iter().find_map(|name| {
            let path: Vec<String> = name.split('.').map(str::to_owned).collect();
            definition
                .sensitive
                .iter()
                .find(|argument| argument.overlaps(&path))
                .map(ToString::to_string)
        });
        if let Some(argument) = sensitive {
            let (path, fix) = match &lookup.call.arguments {
                Some(_) => (
                    at!["tools", index, "lookup", "arguments"].to_vec(),
                    "look the effect up by arguments that are not sensitive (an order id)",
                ),
                None => (
                    at!["tools", index, "lookup"].to_vec(),
                    "give the lookup `arguments:` without the sensitive argument (it sends all the tool's arguments otherwise)",
                ),
            };
            self.push(
                &path,
                format!(
                    "{label}: the lookup would send sensitive argument `{argument}`, which the ledger keeps only as a hash"
                ),
                fix,
            );
        }
    }
}

/// What an MCP call adds to the engine's definition: the resend window of its upstream
/// (when the server's tools replay per key) and the result's external-id pointer.
fn complete_mcp_definition(
    definition: &mut ToolDefinition,
    mcp: &McpToolConfig,
    external_id: Option<String>,
    mcp_upstreams: &BTreeMap<String, McpUpstreamConfig>,
) {
    let upstream = mcp_upstreams.get(&mcp.upstream);
    let uses_intent_id = mcp
        .tool
        .call
        .arguments
        .as_ref()
        .is_some_and(|template| template.to_string().contains("{intent_id}"));
    let key_window_hours = upstream
        .filter(|upstream| upstream.honours_idempotency_keys)
        .map(|upstream| upstream.key_window_hours);
    definition.resend_window = resend_window(definition, key_window_hours, uses_intent_id);
    if let Some(pointer) = external_id {
        definition.external_id_pointer = pointer;
    }
}
