//! The checks of what reaches MCP servers: `kind: mcp` upstreams (how the server is started
//! or reached, `${NAME}` references resolved), the two forms of a tool's `call`, `lookup`
//! and `list` (an HTTP request, or with `tool:` a `tools/call` of an MCP upstream's tool), and
//! `imports`. What only the server can tell (which tools it lists, with which hints) is
//! checked when the gateway starts, by `crate::imports`.

use std::collections::BTreeMap;
use std::time::Duration;

use intentgate_config_file::at;
use intentgate_config_file::file::{
    CallFile, ImportFile, ListFile, LookupFile, UpstreamFile, UpstreamKind,
};
use intentgate_config_file::source_map::Segment;
use intentgate_core::Effect;
use intentgate_core::placeholder::{self, Format, Piece};
use intentgate_core::tool::TIMEOUT_MS_MAX;
use intentgate_http::LIST_PLACEHOLDERS;
use intentgate_http::spec::{
    CallSpec, ListRecords, ListSpec, LookupSpec, Method, UpstreamSpec, default_idempotency_header,
};
use intentgate_http::template::GATEWAY_VALUE_NAMES;
use intentgate_mcp_upstream::{McpList, McpLookup, McpServer, McpTool, McpToolCall, McpTransport};
use serde_json::Value;

use super::upstreams::check_url;
use super::{Checker, names, spec};
use crate::config::{ImportConfig, McpToolConfig, McpUpstreamConfig};
use crate::limits::*;

/// An MCP server's bound on one call when the config names none.
pub(crate) const MCP_TIMEOUT_MS_DEFAULT: u64 = 30_000;
const KEY_WINDOW_HOURS_DEFAULT: u32 = 24;
const RETRY_AFTER_CAP_MS_DEFAULT: u64 = 5_000;

/// A tool's requests in the form its `call` chose.
pub(super) enum Forms {
    /// No call (a client tool, or a gateway tool whose missing call is reported).
    None,
    Http {
        call: Option<CallSpec>,
        lookup: Option<LookupSpec>,
        list: Option<ListSpec>,
    },
    /// The MCP call, lookup and list, and the call's `result.external_id` pointer.
    Mcp(McpToolConfig, Option<String>),
}

impl Checker<'_, '_> {
    /// Splits `upstreams` into HTTP APIs and MCP servers, each checked and with its
    /// references resolved.
    pub(super) fn upstream_kinds(
        &mut self,
        upstreams: BTreeMap<String, UpstreamFile>,
    ) -> (
        BTreeMap<String, UpstreamSpec>,
        BTreeMap<String, McpUpstreamConfig>,
    ) {
        let mut http = BTreeMap::new();
        let mut mcp = BTreeMap::new();
        for (name, upstream) in upstreams {
            self.declared.insert(name.clone(), upstream.kind);
            match upstream.kind {
                UpstreamKind::Http => {
                    if let Some(spec) = self.http_upstream(&name, upstream) {
                        http.insert(name, spec);
                    }
                }
                UpstreamKind::Mcp => {
                    if let Some(config) = self.mcp_upstream(&name, upstream) {
                        mcp.insert(name, config);
                    }
                }
            }
        }
        (self.upstreams(http), mcp)
    }

    /// Reports each field of `present` at `base`, as belonging to the other form.
    fn misplaced(
        &mut self,
        base: &[Segment<'_>],
        present: &[(&str, bool)],
        message: &str,
        fix: &str,
    ) {
        for (field, is_present) in present {
            if *is_present {
                let mut path = base.to_vec();
                path.push(Segment::Key(field));
                self.push(
                    &path,
                    message.replace("{field}", field),
                    fix.replace("{field}", field),
                );
            }
        }
    }

    fn http_upstream(&mut self, name: &str, upstream: UpstreamFile) -> Option<UpstreamSpec> {
        let base = at!["upstreams", name];
        self.misplaced(
            &base,
            &[
                ("command", upstream.command.is_some()),
                ("args", !upstream.args.is_empty()),
                ("env", !upstream.env.is_empty()),
                ("url", upstream.url.is_some()),
                ("timeout_ms", upstream.timeout_ms.is_some()),
            ],
            &format!("upstream `{name}`: `{{field}}` is for MCP servers, and this upstream is an HTTP API"),
            "add `kind: mcp` if this upstream is an MCP server, or remove `{field}`",
        );
        let Some(base_url) = upstream.base_url else {
            self.push(
                &base,
                format!("upstream `{name}` has no `base_url`"),
                "add `base_url: https://api.example.com`, or `kind: mcp` with `command:` or `url:` for an MCP server",
            );
            return None;
        };
        Some(UpstreamSpec {
            base_url,
            headers: upstream.headers,
            idempotency_header: upstream
                .idempotency_header
                .unwrap_or_else(default_idempotency_header),
            honours_idempotency_keys: upstream.honours_idempotency_keys,
            key_window_hours: upstream
                .key_window_hours
                .unwrap_or(KEY_WINDOW_HOURS_DEFAULT),
            retry_after_cap_ms: upstream
                .retry_after_cap_ms
                .unwrap_or(RETRY_AFTER_CAP_MS_DEFAULT),
        })
    }

    fn mcp_upstream(&mut self, name: &str, upstream: UpstreamFile) -> Option<McpUpstreamConfig> {
        let base = at!["upstreams", name];
        self.misplaced(
            &base,
            &[
                ("base_url", upstream.base_url.is_some()),
                ("idempotency_header", upstream.idempotency_header.is_some()),
                ("retry_after_cap_ms", upstream.retry_after_cap_ms.is_some()),
            ],
            &format!("upstream `{name}`: `{{field}}` is for HTTP APIs, and this upstream is an MCP server (`kind: mcp`)"),
            "remove `{field}`: an MCP server is reached with `command:` (stdio) or `url:` (Streamable HTTP)",
        );
        let key_window_hours = upstream
            .key_window_hours
            .unwrap_or(KEY_WINDOW_HOURS_DEFAULT);
        self.range(
            &at!["upstreams", name, "key_window_hours"],
            key_window_hours.into(),
            1,
            KEY_WINDOW_HOURS_MAX.into(),
            "hours (the provider's documented key retention; Stripe: 24)",
        );
        let timeout_ms = upstream.timeout_ms.unwrap_or(MCP_TIMEOUT_MS_DEFAULT);
        self.range(
            &at!["upstreams", name, "timeout_ms"],
            timeout_ms,
            1,
            TIMEOUT_MS_MAX,
            "milliseconds",
        );
        let honours_idempotency_keys = upstream.honours_idempotency_keys;
        let transport = self.mcp_transport(name, upstream)?;
        Some(McpUpstreamConfig {
            server: McpServer {
                name: name.to_owned(),
                transport,
                timeout: Duration::from_millis(timeout_ms),
            },
            honours_idempotency_keys,
            key_window_hours,
        })
    }

    /// How the gateway reaches an MCP server: exactly one of `command` and `url`.
    fn mcp_transport(&mut self, name: &str, upstream: UpstreamFile) -> Option<McpTransport> {
        let base = at!["upstreams", name];
        match (upstream.command.clone(), upstream.url.clone()) {
            (Some(command), None) => self.stdio_transport(name, command, &upstream),
            (None, Some(url)) => self.http_transport(name, url, upstream),
            (Some(_), Some(_)) => {
                self.push(
                    &at!["upstreams", name, "url"],
                    format!("upstream `{name}` has both `command` and `url`"),
                    "keep `command:` for a server the gateway starts (stdio), or `url:` for one it reaches over Streamable HTTP",
                );
                None
            }
            (None, None) => {
                self.push(
                    &base,
                    format!("upstream `{name}` (`kind: mcp`) has neither `command` nor `url`"),
                    "add `command:` (and `args:`) for a server the gateway starts over stdio, or `url:` for a Streamable HTTP server",
                );
                None
            }
        }
    }

    /// An MCP server the gateway starts: `command` with `args` and `env`, references
    /// resolved.
    fn stdio_transport(
        &mut self,
        name: &str,
        command: String,
        upstream: &UpstreamFile,
    ) -> Option<McpTransport> {
        if !upstream.headers.is_empty() {
            self.push(
                &at!["upstreams", name, "headers"],
                format!("upstream `{name}`: `headers` go with HTTP requests, and this MCP server runs over stdio (`command`)"),
                "remove `headers`; pass a stdio server its secrets in `env`",
            );
        }
        let command = self
            .resolve_or_written(
                &at!["upstreams", name, "command"],
                &format!("upstreams.{name}.command"),
                &command,
            )
            .map(|(command, _)| command);
        if command
            .as_deref()
            .is_some_and(|command| command.trim().is_empty())
        {
            self.push(
                &at!["upstreams", name, "command"],
                format!("upstream `{name}`: `command` is empty"),
                "name the program that runs the server, e.g. `command: npx`",
            );
        }
        let mut args = Vec::with_capacity(upstream.args.len());
        for (position, arg) in upstream.args.iter().enumerate() {
            let field = format!("upstreams.{name}.args[{position}]");
            if let Some(arg) = self.resolve(&at!["upstreams", name, "args", position], &field, arg)
            {
                args.push(arg);
            }
        }
        let mut env = BTreeMap::new();
        for (key, value) in &upstream.env {
            if key.is_empty() || key.contains(['=', '\0']) {
                let at = self.map.key(&at!["upstreams", name, "env", key]);
                self.errors.push(
                    at,
                    format!(
                        "`{key}` in `upstreams.{name}.env` is not an environment variable name"
                    ),
                    "use a name without `=`, e.g. `API_KEY`",
                );
            }
            let field = format!("upstreams.{name}.env.{key}");
            if let Some(value) = self.resolve(&at!["upstreams", name, "env", key], &field, value) {
                env.insert(key.clone(), value);
            }
        }
        Some(McpTransport::Stdio {
            command: command?,
            args,
            env,
        })
    }

    /// An MCP server reached over Streamable HTTP at `url`, with its `headers`.
    fn http_transport(
        &mut self,
        name: &str,
        url: String,
        upstream: UpstreamFile,
    ) -> Option<McpTransport> {
        let base = at!["upstreams", name];
        self.misplaced(
            &base,
            &[("args", !upstream.args.is_empty()), ("env", !upstream.env.is_empty())],
            &format!("upstream `{name}`: `{{field}}` is for MCP servers the gateway starts (`command`), and this one is reached at `url`"),
            "remove `{field}`",
        );
        let field = format!("upstreams.{name}.url");
        let (resolved, unset) =
            self.resolve_or_written(&at!["upstreams", name, "url"], &field, &url)?;
        if let Err(reason) = check_url(&resolved)
            && !unset
        {
            self.push(
                &at!["upstreams", name, "url"],
                format!("`{field}` is not a usable URL: {reason}"),
                "write the server's Streamable HTTP endpoint, e.g. `url: http://127.0.0.1:9000/mcp`",
            );
        }
        let headers = self.headers(&base, &format!("upstreams.{name}"), upstream.headers, false);
        Some(McpTransport::Http {
            url: resolved,
            headers,
        })
    }

    /// Reads a tool's `call`, `lookup` and `list` in the form the call chose, reporting fields
    /// of the other form and upstreams of the wrong kind.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn forms(
        &mut self,
        index: usize,
        label: &str,
        effect: Option<Effect>,
        call: Option<CallFile>,
        lookup: Option<LookupFile>,
        list: Option<ListFile>,
        mcp_upstreams: &BTreeMap<String, McpUpstreamConfig>,
        arguments: &[String],
    ) -> Forms {
        let Some(call) = call else {
            return Forms::None;
        };
        let Some(tool) = call.tool.clone() else {
            return self.http_forms(index, label, call, lookup, list);
        };
        self.mcp_call(index, label, effect, &call, &tool, mcp_upstreams, arguments);
        let lookup = lookup
            .and_then(|lookup| self.mcp_lookup(index, label, &call.upstream, lookup, arguments));
        let list = list.and_then(|list| self.mcp_list(index, label, &call.upstream, list));
        let external_id = call.result.external_id;
        Forms::Mcp(
            McpToolConfig {
                upstream: call.upstream,
                tool: McpTool {
                    call: McpToolCall {
                        tool,
                        arguments: call.arguments,
                        idempotency_key_argument: call.idempotency_key_argument,
                        not_processed: call.not_processed,
                    },
                    lookup,
                },
                imported: None,
                list,
            },
            external_id,
        )
    }

    /// Checks a `call` of an MCP upstream's tool `tool`: no HTTP fields, an MCP upstream,
    /// and arguments, idempotency key and not-processed texts that can be sent.
    #[allow(clippy::too_many_arguments)]
    fn mcp_call(
        &mut self,
        index: usize,
        label: &str,
        effect: Option<Effect>,
        call: &CallFile,
        tool: &str,
        mcp_upstreams: &BTreeMap<String, McpUpstreamConfig>,
        arguments: &[String],
    ) {
        let base = at!["tools", index, "call"];
        self.misplaced(
            &base,
            &[
                ("method", call.method.is_some()),
                ("path", call.path.is_some()),
                ("query", !call.query.is_empty()),
                ("headers", !call.headers.is_empty()),
                ("body", call.body.is_some()),
                ("body_format", !call.body_format.is_json()),
            ],
            &format!("{label}: `{{field}}` is for HTTP requests, and this call is a tool of an MCP server (`tool:`)"),
            "remove `{field}`; an MCP call's values go in `arguments:`",
        );
        if call.result.pointer.is_some() {
            self.push(
                &at!["tools", index, "call", "result", "pointer"],
                format!("{label}: `result.pointer` is for HTTP calls; an MCP tool's result is kept whole"),
                "remove `pointer:`",
            );
        }
        self.pointer(
            &at!["tools", index, "call", "result", "external_id"],
            label,
            call.result.external_id.as_deref(),
        );
        if self.declared.get(&call.upstream) != Some(&UpstreamKind::Mcp) {
            let fix = if self.declared.contains_key(&call.upstream) {
                format!(
                    "upstream `{}` is an HTTP API: call it with `method:` and `path:`, or name a `kind: mcp` upstream",
                    call.upstream
                )
            } else {
                format!(
                    "use one of the MCP upstreams ({}), or add `{}: {{kind: mcp, command: ...}}` under `upstreams:`",
                    names(mcp_upstreams.keys()),
                    call.upstream
                )
            };
            self.push(
                &at!["tools", index, "call", "upstream"],
                format!("{label} calls MCP tool `{tool}` of upstream `{}`, which is not an MCP server in `upstreams`", call.upstream),
                fix,
            );
        }
        self.mcp_tool_name(&at!["tools", index, "call", "tool"], label, tool);
        self.mcp_arguments(
            &at!["tools", index, "call", "arguments"],
            label,
            call.arguments.as_ref(),
            arguments,
        );
        if let Some(argument) = &call.idempotency_key_argument {
            if argument.is_empty() {
                self.push(
                    &at!["tools", index, "call", "idempotency_key_argument"],
                    format!("{label}: `idempotency_key_argument` is empty"),
                    "name the upstream tool's argument that takes the idempotency key, or remove the field to send it in `_meta`",
                );
            }
            if effect != Some(Effect::SideEffect) {
                self.push(
                    &at!["tools", index, "call", "idempotency_key_argument"],
                    format!("{label}: only side-effecting tools send an idempotency key"),
                    "remove `idempotency_key_argument`, or make the tool `effect: side_effect`",
                );
            }
        }
        for (position, text) in call.not_processed.iter().enumerate() {
            if text.trim().is_empty() {
                self.push(
                    &at!["tools", index, "call", "not_processed", position],
                    format!("{label}: an empty `not_processed` text would match every error"),
                    "write a text the server's not-processed errors contain, e.g. `rate limit`",
                );
            }
        }
    }

    fn http_forms(
        &mut self,
        index: usize,
        label: &str,
        call: CallFile,
        lookup: Option<LookupFile>,
        list: Option<ListFile>,
    ) -> Forms {
        let base = at!["tools", index, "call"];
        self.misplaced(
            &base,
            &[
                ("arguments", call.arguments.is_some()),
                ("idempotency_key_argument", call.idempotency_key_argument.is_some()),
                ("not_processed", !call.not_processed.is_empty()),
            ],
            &format!("{label}: `{{field}}` is for calls of an MCP server's tool, and this call has no `tool:`"),
            "add `tool:` (the MCP tool's name) if the upstream is an MCP server, or remove `{field}`",
        );
        if self.declared.get(&call.upstream) == Some(&UpstreamKind::Mcp) {
            self.push(
                &at!["tools", index, "call", "upstream"],
                format!(
                    "{label}: upstream `{}` is an MCP server, and this call is an HTTP request",
                    call.upstream
                ),
                "call one of its tools: `call: {upstream: NAME, tool: TOOL, arguments: {...}}`",
            );
            return Forms::Http {
                call: None,
                lookup: None,
                list: None,
            };
        }
        let mut missing = |field: &str, example: &str| {
            self.push(
                &base,
                format!("{label}: `call` has no `{field}`"),
                format!("add {example}, or `tool:` to call a tool of an MCP upstream"),
            );
        };
        let (Some(method), Some(path)) = (call.method, call.path.clone()) else {
            if call.method.is_none() {
                missing("method", "`method: POST`");
            }
            if call.path.is_none() {
                missing("path", "`path: /v1/...`");
            }
            return Forms::Http {
                call: None,
                lookup: None,
                list: None,
            };
        };
        let http_call = CallSpec {
            upstream: call.upstream,
            method: spec::method(method),
            path,
            query: call.query,
            headers: call.headers,
            body: call.body,
            body_format: spec::body_format(call.body_format),
            result: spec::result(call.result),
        };
        let lookup = lookup.and_then(|lookup| self.http_lookup(index, label, lookup));
        let list = list.and_then(|list| self.http_list(index, label, list));
        Forms::Http {
            call: Some(http_call),
            lookup,
            list,
        }
    }

    /// An HTTP tool's `lookup`: a `path` with `query`, not an MCP tool.
    fn http_lookup(&mut self, index: usize, label: &str, lookup: LookupFile) -> Option<LookupSpec> {
        let base = at!["tools", index, "lookup"];
        self.misplaced(
            &base,
            &[
                ("tool", lookup.tool.is_some()),
                ("arguments", lookup.arguments.is_some()),
            ],
            &format!("{label}: `lookup.{{field}}` is for lookups of an MCP call, and this tool's call is an HTTP request"),
            "remove `{field}`; an HTTP lookup is a `path` with `query`",
        );
        let Some(path) = lookup.path else {
            self.push(
                &base,
                format!("{label}: `lookup` has no `path`"),
                "add `path: /v1/...` (a read-only request that finds the effect)",
            );
            return None;
        };
        Some(LookupSpec {
            upstream: lookup.upstream,
            method: lookup.method.map(spec::method).unwrap_or(Method::Get),
            path,
            query: lookup.query,
            headers: lookup.headers,
            body: lookup.body,
            body_format: spec::body_format(lookup.body_format),
            found: lookup.found,
            not_found_statuses: lookup.not_found_statuses.unwrap_or_else(|| vec![404]),
            external_id: lookup.external_id,
            key: lookup.key,
            match_fields: spec::match_fields(lookup.match_fields),
            pages: lookup.pages.map(spec::lookup_pages),
        })
    }

    /// An HTTP tool's `list`: a `path` with `query`, not an MCP tool.
    fn http_list(&mut self, index: usize, label: &str, list: ListFile) -> Option<ListSpec> {
        let base = at!["tools", index, "list"];
        self.misplaced(
            &base,
            &[
                ("tool", list.tool.is_some()),
                ("arguments", list.arguments.is_some()),
            ],
            &format!("{label}: `list.{{field}}` is for listings of an MCP call, and this tool's call is an HTTP request"),
            "remove `{field}`; an HTTP listing is a `path` with `query`",
        );
        let Some(path) = list.path else {
            self.push(
                &base,
                format!("{label}: `list` has no `path`"),
                "add `path: /v1/...` (a read-only request that lists the provider's records, a page at a time)",
            );
            return None;
        };
        Some(ListSpec {
            upstream: list.upstream,
            path,
            query: list.query,
            headers: list.headers,
            items: list.items,
            next_cursor: list.next_cursor,
            has_more: list.has_more,
            limit_max: list.limit_max,
            fields: spec::list_fields(list.fields),
            match_fields: spec::match_fields(list.match_fields),
        })
    }

    /// An MCP tool's `list`: another tool of the call's server, whose `arguments` may use the
    /// window and paging values only (a listing runs outside any call). Its pointers and
    /// pairing are checked with the tool's other checks, as an HTTP list's are.
    fn mcp_list(
        &mut self,
        index: usize,
        label: &str,
        upstream: &str,
        list: ListFile,
    ) -> Option<McpList> {
        let base = at!["tools", index, "list"];
        self.misplaced(
            &base,
            &[
                ("path", list.path.is_some()),
                ("query", !list.query.is_empty()),
                ("headers", !list.headers.is_empty()),
                ("limit_max", list.limit_max.is_some()),
            ],
            &format!("{label}: `list.{{field}}` is for HTTP listings, and this tool calls an MCP server"),
            "remove `{field}`; an MCP listing is another tool of the same server: `tool:` and `arguments:`",
        );
        if let Some(other) = &list.upstream
            && other != upstream
        {
            self.push(
                &at!["tools", index, "list", "upstream"],
                format!("{label}: the list names upstream `{other}`, but an MCP listing calls a tool of the call's own server (`{upstream}`)"),
                "remove `upstream:` from the list",
            );
        }
        let arguments_path = at!["tools", index, "list", "arguments"];
        match &list.arguments {
            Some(template) if !template.is_object() => self.push(
                &arguments_path,
                format!("{label}: `list.arguments` is not a mapping"),
                "write the listing tool's arguments as a mapping, e.g. `arguments: {created_after_ms: \"{since_ms}\", cursor: \"{cursor}\"}`",
            ),
            Some(template) => {
                let mut unknown = Vec::new();
                let mut cursor = false;
                placeholders(template, &mut |name| {
                    cursor |= name == "cursor";
                    if !LIST_PLACEHOLDERS.contains(&name) {
                        unknown.push(name.to_owned());
                    }
                });
                if !cursor {
                    self.push(
                        &arguments_path,
                        format!("{label}: `list.arguments` has no `{{cursor}}`, so every page the listing asks for would be the first one"),
                        "add the argument that asks for the next page, e.g. `cursor: \"{cursor}\"` (left out of the first page)",
                    );
                }
                for name in unknown {
                    self.push(
                        &arguments_path,
                        format!("{label}: `list.arguments` uses `{{{name}}}`; a listing runs outside any call, so it has no arguments or intent"),
                        format!(
                            "use the window and paging values ({}); write `{{{{{name}}}}}` for the literal text",
                            names(LIST_PLACEHOLDERS.map(|value| format!("{{{value}}}")))
                        ),
                    );
                }
            }
            None => {}
        }
        let Some(tool) = list.tool else {
            self.push(
                &base,
                format!("{label}: the list of an MCP call has no `tool`"),
                "add `tool:`, a read-only tool of the same server that lists the effects a page at a time (e.g. `tool: list_refunds`)",
            );
            return None;
        };
        self.mcp_tool_name(&at!["tools", index, "list", "tool"], label, &tool);
        Some(McpList {
            call: McpToolCall {
                arguments: list.arguments,
                ..McpToolCall::new(tool)
            },
            records: ListRecords {
                items: list.items,
                next_cursor: list.next_cursor,
                has_more: list.has_more,
                fields: spec::list_fields(list.fields),
                match_fields: spec::match_fields(list.match_fields),
            },
        })
    }

    fn mcp_lookup(
        &mut self,
        index: usize,
        label: &str,
        upstream: &str,
        lookup: LookupFile,
        arguments: &[String],
    ) -> Option<McpLookup> {
        let base = at!["tools", index, "lookup"];
        self.misplaced(
            &base,
            &[
                ("method", lookup.method.is_some()),
                ("path", lookup.path.is_some()),
                ("query", !lookup.query.is_empty()),
                ("headers", !lookup.headers.is_empty()),
                ("body", lookup.body.is_some()),
                ("body_format", !lookup.body_format.is_json()),
                ("not_found_statuses", lookup.not_found_statuses.is_some()),
            ],
            &format!("{label}: `lookup.{{field}}` is for HTTP lookups, and this tool calls an MCP server"),
            "remove `{field}`; an MCP lookup is another tool of the same server: `tool:` and `arguments:`",
        );
        if let Some(other) = &lookup.upstream
            && other != upstream
        {
            self.push(
                &at!["tools", index, "lookup", "upstream"],
                format!("{label}: the lookup names upstream `{other}`, but an MCP lookup calls a tool of the call's own server (`{upstream}`)"),
                "remove `upstream:` from the lookup",
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
        self.mcp_arguments(
            &at!["tools", index, "lookup", "arguments"],
            label,
            lookup.arguments.as_ref(),
            arguments,
        );
        let Some(tool) = lookup.tool else {
            self.push(
                &base,
                format!("{label}: the lookup of an MCP call has no `tool`"),
                "add `tool:`, a read-only tool of the same server that finds the effect (e.g. `tool: find_refund`)",
            );
            return None;
        };
        self.mcp_tool_name(&at!["tools", index, "lookup", "tool"], label, &tool);
        self.misplaced(
            &base,
            &[("pages", lookup.pages.is_some())],
            &format!("{label}: `lookup.{{field}}` pages through an HTTP listing, and this tool's lookup is a call of an MCP tool"),
            "remove `{field}`; give the lookup tool arguments that narrow its answer to one intent's records",
        );
        let match_fields = spec::match_fields(lookup.match_fields);
        self.lookup_proof(index, label, lookup.key.as_deref(), &match_fields);
        Some(McpLookup {
            call: McpToolCall {
                arguments: lookup.arguments,
                ..McpToolCall::new(tool)
            },
            found: lookup.found,
            external_id: lookup.external_id,
            key: lookup.key,
            match_fields,
        })
    }

    fn mcp_tool_name(&mut self, path: &[Segment<'_>], label: &str, tool: &str) {
        if tool.is_empty() || tool.chars().any(char::is_control) {
            self.push(
                path,
                format!("{label}: `{}` is not an MCP tool name", tool.escape_debug()),
                "write the tool's name as the server lists it",
            );
        }
    }

    /// An `arguments` template: an object, whose whole-value placeholders name arguments of
    /// the tool or the gateway's own values.
    fn mcp_arguments(
        &mut self,
        path: &[Segment<'_>],
        label: &str,
        template: Option<&Value>,
        arguments: &[String],
    ) {
        let Some(template) = template else { return };
        if !template.is_object() {
            self.push(
                path,
                format!("{label}: `arguments` is not a mapping"),
                "write the upstream tool's arguments as a mapping, e.g. `arguments: {order_id: \"{order_id}\"}`",
            );
            return;
        }
        if let Err(error) = intentgate_http::template::BodyTemplate::parse(template) {
            self.push(
                path,
                format!("{label}: `arguments`: {error}"),
                "write `{argument}` for an argument, `{argument:.2}` for an exact decimal, \
                 `{argument:minor(USD)}` for an amount in a currency's minor units, and `{{` or \
                 `}}` for a literal brace",
            );
            return;
        }
        if !self.arguments_known {
            return;
        }
        let mut unknown = Vec::new();
        placeholders(template, &mut |name| {
            let first = name.split('.').next().unwrap_or(name);
            if !arguments.iter().any(|argument| argument == first)
                && !GATEWAY_VALUE_NAMES.contains(&first)
            {
                unknown.push(name.to_owned());
            }
        });
        for name in unknown {
            self.push(
                path,
                format!("{label}: `arguments` uses `{{{name}}}`, which is not an argument of the tool"),
                format!(
                    "use one of the tool's arguments ({}) or the gateway's values ({}); write `{{{{{name}}}}}` for the literal text",
                    names(arguments),
                    names(GATEWAY_VALUE_NAMES)
                ),
            );
        }
    }

    /// Checks `imports`: each names a `kind: mcp` upstream once, with a usable prefix, and
    /// classifies no tool as a side effect (that needs a key and a lookup: a tool entry).
    pub(super) fn imports(
        &mut self,
        imports: Vec<ImportFile>,
        mcp_upstreams: &BTreeMap<String, McpUpstreamConfig>,
    ) -> Vec<ImportConfig> {
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        let mut checked = Vec::with_capacity(imports.len());
        for (index, import) in imports.into_iter().enumerate() {
            let label = format!("import of `{}`", import.upstream);
            if self.declared.get(&import.upstream) != Some(&UpstreamKind::Mcp) {
                let fix = if self.declared.contains_key(&import.upstream) {
                    "only MCP servers can be imported; an HTTP API's tools are entries of `tools:`"
                        .to_owned()
                } else {
                    format!(
                        "use one of the MCP upstreams ({}), or add `{}: {{kind: mcp, command: ...}}` under `upstreams:`",
                        names(mcp_upstreams.keys()),
                        import.upstream
                    )
                };
                self.push(
                    &at!["imports", index, "upstream"],
                    format!(
                        "{label}: `{}` is not an MCP server in `upstreams`",
                        import.upstream
                    ),
                    fix,
                );
            }
            if let Some(first) = seen.insert(import.upstream.clone(), index) {
                self.push(
                    &at!["imports", index, "upstream"],
                    format!(
                        "upstream `{}` is imported twice (also by import {})",
                        import.upstream,
                        first + 1
                    ),
                    "merge the two imports into one",
                );
            }
            let prefix_fits = import.prefix.len() <= 32
                && import
                    .prefix
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
            if !prefix_fits {
                self.push(
                    &at!["imports", index, "prefix"],
                    format!(
                        "{label}: prefix `{}` can't start a tool name",
                        import.prefix.escape_debug()
                    ),
                    "use at most 32 letters, digits, `_`, `-` or `.`, e.g. `prefix: memory_`",
                );
            }
            for (tool, effect) in &import.effects {
                if *effect == Effect::SideEffect {
                    self.push(
                        &at!["imports", index, "effects", tool],
                        format!("{label}: `{tool}` is classified `side_effect`, which needs an intent key and a lookup"),
                        format!(
                            "add an entry to `tools:` with `effect: side_effect`, a `key`, `call: {{upstream: {}, tool: {tool}}}` and a `lookup`; it takes the place of the imported tool",
                            import.upstream
                        ),
                    );
                }
                if import.exclude.contains(tool) {
                    self.push(
                        &at!["imports", index, "effects", tool],
                        format!("{label}: `{tool}` is both classified and excluded"),
                        "keep it in `effects` to expose it, or in `exclude` to hide it",
                    );
                }
            }
            checked.push(ImportConfig {
                upstream: import.upstream,
                prefix: import.prefix,
                effects: import.effects,
                exclude: import.exclude,
                line: self.position(&at!["imports", index]).line,
            });
        }
        checked
    }
}

/// Calls `each` with the name (dotted path) of every placeholder in a template's strings,
/// and of every argument a minor-units placeholder takes its currency from.
pub(super) fn placeholders(template: &Value, each: &mut dyn FnMut(&str)) {
    match template {
        // The shared parser, as the request is rendered: `{amount:.2}` names `amount`, and
        // `{amount:minor(currency)}` names `currency` too. A malformed string names nothing
        // here; its syntax is reported by the caller's template check.
        Value::String(text) => {
            for piece in placeholder::parse(text).unwrap_or_default() {
                let Piece::Placeholder(found) = piece else {
                    continue;
                };
                each(&found.name());
                if let Some(Format::MinorUnits(source)) = &found.format
                    && let Some(argument) = source.argument()
                {
                    each(&argument.join("."));
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| placeholders(item, each)),
        Value::Object(members) => members.values().for_each(|value| placeholders(value, each)),
        _ => {}
    }
}
