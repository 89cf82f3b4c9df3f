//! Tool definitions as the engine sees them, checked once when they are loaded.

use std::borrow::Cow;
use std::time::Duration;

use serde_json::Value;

use crate::effect::{Effect, Executor};
use crate::fingerprint::{Fingerprint, fingerprint_for};
use crate::key::{KeyError, KeyTemplate};
use crate::limits::TOOL_NAME_LENGTH_MAX;
use crate::policy::ToolPolicies;
use crate::sensitive::{ArgumentPath, HashKey, Redaction, SensitiveError};
use crate::status::Messages;

/// Longest tool timeout. A call held longer than this holds its lease too long for a
/// waiting caller to be answered in reasonable time.
pub const TIMEOUT_MS_MAX: u64 = 10 * 60 * 1000;
/// Most bounded retries of one call (reads; not-processed shapes of side effects).
pub const RETRY_BUDGET_MAX: u32 = 10;

/// The `_meta` key of an MCP `tools/call` request that carries the application's intent id
/// (docs/design.md section 4), for tools whose key uses `{intent_id}`.
pub const INTENT_ID_META_KEY: &str = "intentgate/intent_id";
/// The HTTP request header that carries the application's intent id.
pub const INTENT_ID_HEADER: &str = "Intent-Id";
/// The sentence a tool whose key uses `{intent_id}` publishes before the once-per-intent
/// sentence: the model can't supply the id, so it must learn that from the description
/// rather than from a failed call, and a developer whose MCP client can't send `_meta` learns
/// where the id goes.
pub const INTENT_ID_SENTENCE: &str = "Only the application can start it: each call must \
carry the application's intent id for the request (MCP _meta \"intentgate/intent_id\", HTTP \
header Intent-Id), which is not an argument; a call without one does nothing.";

/// A tool, as loaded and checked. Built with [`ToolDefinition::new`], which refuses any
/// definition the gateway must not run.
#[derive(Debug, Clone)]
pub struct ToolDefinition {
    pub name: String,
    /// The description as configured; [`ToolDefinition::published_description`] is what
    /// models read.
    pub description: String,
    pub effect: Effect,
    /// Who performs the request: the gateway (the default), or, for a side effect, the
    /// caller's own code through the intent API ([`Executor::Client`]).
    pub executor: Executor,
    /// Whether MCP lists this tool. Every gateway-executed tool is listed; a client-executed
    /// one only when its config asks, since an MCP client can only call tools and such a tool
    /// is executed through the intent API instead.
    pub listed_over_mcp: bool,
    /// JSON Schema of the arguments (an object schema), as published to models and
    /// validated against: without the gateway's own `sensitive` marks.
    pub input_schema: Value,
    /// The intent key; present exactly when `effect` is `side_effect`.
    pub key: Option<KeyTemplate>,
    /// Upper bound on one upstream request. Set it from the real API's p99.
    pub timeout: Duration,
    /// Bounded retries: of any failure for reads and idempotent tools; of not-processed
    /// shapes (429, 503 with Retry-After, not sent) for side effects.
    pub retry_budget: u32,
    /// Who decides about this tool's mismatches and alerts.
    pub owner: Option<String>,
    pub messages: Messages,
    /// A rejected intent may start a new attempt later (a declined card may pass tomorrow);
    /// the new attempt uses a provider key that carries the attempt's epoch.
    pub retry_rejected: bool,
    /// What "once per ..." names in the published description ("order", "customer").
    pub once_per: String,
    /// JSON pointer to the provider's id for the effect in a success body.
    pub external_id_pointer: String,
    /// How long the upstream stores and replays its response per idempotency key, already
    /// shortened by a safety margin; `None` (the default) when it does not, or nobody said.
    /// Within this window, counted from when the intent was first seen, the gate (its
    /// sweeper, or a repeat call) re-sends an `unknown` intent with the same provider key
    /// (docs/design.md section 5): if the first attempt committed, the provider replays its answer and
    /// nothing happens twice. Outside it, or without it, an unknown intent is never sent
    /// again.
    pub resend_window: Option<Duration>,
    /// The arguments the input schema marks `sensitive: true`. The ledger keeps keyed hashes
    /// of them (arguments, key placeholders, echoes in results), never their values.
    pub sensitive: Vec<ArgumentPath>,
    /// The key of those hashes; required when `sensitive` is not empty
    /// ([`ToolDefinition::check_hash_key`]).
    pub hash_key: Option<HashKey>,
    /// Approval and budgets (docs/design.md section 13), for a side effect only; `None`
    /// for a tool with neither, whose calls pay nothing for them.
    pub policies: Option<ToolPolicies>,
}

/// Why a tool definition is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    #[error("tool name `{0}` must be 1 to {TOOL_NAME_LENGTH_MAX} letters, digits, `_`, `-` or `.`")]
    BadName(String),
    #[error(
        "tool `{0}`: side-effecting tools need an intent key, e.g. key: \"refund:{{order_id}}:{{amount:.2}}\""
    )]
    MissingKey(String),
    #[error(
        "tool `{0}`: only side-effecting tools take an intent key (reads and idempotent tools need none)"
    )]
    UnexpectedKey(String),
    #[error("tool `{tool}`: {error}")]
    Key { tool: String, error: KeyError },
    #[error("tool `{0}`: input_schema must be a JSON Schema object with \"type\": \"object\"")]
    BadSchema(String),
    #[error(
        "tool `{tool}`: timeout must be between 1 ms and {TIMEOUT_MS_MAX} ms, got {timeout_ms} ms"
    )]
    BadTimeout { tool: String, timeout_ms: u64 },
    #[error("tool `{tool}`: retry budget {budget} is above the limit of {RETRY_BUDGET_MAX}")]
    BadRetryBudget { tool: String, budget: u32 },
    #[error("tool `{tool}`: input_schema: {error}")]
    Sensitive { tool: String, error: SensitiveError },
    #[error(
        "tool `{tool}` marks {names} as sensitive, which the ledger keeps as keyed hashes, but \
         no hash key was given: set gateway.hash_key to ${{INTENTGATE_HASH_KEY}} and `export \
         INTENTGATE_HASH_KEY=$(openssl rand -hex 32)`"
    )]
    MissingHashKey { tool: String, names: String },
}

impl ToolDefinition {
    /// Checks and builds a definition. `key` is the template text for side-effecting tools.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        name: &str,
        description: &str,
        effect: Effect,
        input_schema: Value,
        key: Option<&str>,
        timeout: Duration,
        retry_budget: u32,
    ) -> Result<ToolDefinition, ToolError> {
        let valid_name = !name.is_empty()
            && name.len() <= TOOL_NAME_LENGTH_MAX
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if !valid_name {
            return Err(ToolError::BadName(name.to_owned()));
        }
        let tool = || name.to_owned();
        if input_schema.get("type").and_then(Value::as_str) != Some("object") {
            return Err(ToolError::BadSchema(tool()));
        }
        let sensitive = crate::sensitive::sensitive_paths(&input_schema).map_err(|error| {
            ToolError::Sensitive {
                tool: tool(),
                error,
            }
        })?;
        let input_schema = crate::sensitive::without_marks(&input_schema);
        let timeout_ms = timeout.as_millis() as u64;
        if timeout_ms == 0 || timeout_ms > TIMEOUT_MS_MAX {
            return Err(ToolError::BadTimeout {
                tool: tool(),
                timeout_ms,
            });
        }
        if retry_budget > RETRY_BUDGET_MAX {
            return Err(ToolError::BadRetryBudget {
                tool: tool(),
                budget: retry_budget,
            });
        }
        let key = match (effect, key) {
            (Effect::SideEffect, None) => return Err(ToolError::MissingKey(tool())),
            (Effect::SideEffect, Some(text)) => {
                let mut template = KeyTemplate::parse(text).map_err(|error| ToolError::Key {
                    tool: tool(),
                    error,
                })?;
                template.mark_sensitive(&sensitive);
                let names = argument_names(&input_schema);
                template
                    .check_arguments(&names)
                    .map_err(|error| ToolError::Key {
                        tool: tool(),
                        error,
                    })?;
                Some(template)
            }
            (_, Some(_)) => return Err(ToolError::UnexpectedKey(tool())),
            (_, None) => None,
        };
        let once_per = key
            .as_ref()
            .and_then(default_once_per)
            .unwrap_or_else(|| "request".to_owned());
        Ok(ToolDefinition {
            name: name.to_owned(),
            description: description.to_owned(),
            effect,
            executor: Executor::Gateway,
            listed_over_mcp: true,
            input_schema,
            key,
            timeout,
            retry_budget,
            owner: None,
            messages: Messages::default(),
            retry_rejected: false,
            once_per,
            external_id_pointer: "/id".to_owned(),
            resend_window: None,
            sensitive,
            hash_key: None,
            policies: None,
        })
    }

    /// Refuses a tool with sensitive arguments and no hash key: it could store them only in
    /// clear. A gate checks this for every tool it loads.
    pub fn check_hash_key(&self) -> Result<(), ToolError> {
        if self.sensitive.is_empty() || self.hash_key.is_some() {
            return Ok(());
        }
        let names: Vec<String> = self
            .sensitive
            .iter()
            .map(|path| format!("`{path}`"))
            .collect();
        Err(ToolError::MissingHashKey {
            tool: self.name.clone(),
            names: names.join(", "),
        })
    }

    /// What turns this tool's arguments and results into what the ledger keeps: `None` when
    /// it has no sensitive arguments.
    pub fn redaction(&self) -> Result<Option<Redaction<'_>>, ToolError> {
        self.check_hash_key()?;
        Ok(self.hash_key.as_ref().and_then(|key| {
            (!self.sensitive.is_empty()).then_some(Redaction {
                paths: &self.sensitive,
                key,
            })
        }))
    }

    /// The arguments as the ledger keeps them: sensitive values as keyed hashes (borrowed
    /// as they are when the tool has none).
    pub fn stored_arguments<'a>(&self, arguments: &'a Value) -> Result<Cow<'a, Value>, ToolError> {
        Ok(match self.redaction()? {
            Some(redaction) => Cow::Owned(redaction.arguments(arguments)),
            None => Cow::Borrowed(arguments),
        })
    }

    /// The fingerprint of a call's arguments as the ledger keeps them
    /// ([`ToolDefinition::stored_arguments`]): each value in its one spelling under this
    /// tool's input schema, so `20`, `20.0` and `"20.00"` of a decimal are one intent
    /// ([`crate::fingerprint::fingerprint_for`]).
    pub fn fingerprint(&self, stored_arguments: &Value) -> Fingerprint {
        fingerprint_for(&self.input_schema, stored_arguments)
    }

    /// An upstream's answer as the ledger keeps it: echoes of sensitive arguments (found by
    /// their hashes in `stored_arguments`) as those hashes.
    pub fn stored_result(
        &self,
        result: Value,
        stored_arguments: &Value,
    ) -> Result<Value, ToolError> {
        Ok(match self.redaction()? {
            Some(redaction) => redaction.result(result, stored_arguments),
            None => result,
        })
    }

    /// Renders the intent key of a call (`None` for a tool without one), sensitive
    /// placeholders as keyed hashes.
    pub fn render_key(
        &self,
        arguments: &Value,
        intent_id: Option<&str>,
    ) -> Option<Result<String, KeyError>> {
        let template = self.key.as_ref()?;
        Some(template.render_with(arguments, intent_id, self.hash_key.as_ref()))
    }

    /// True when an `unknown` intent first seen at `first_seen_ms` may be re-sent from the
    /// ledger's copy of its arguments (as the sweeper does): [`ToolDefinition::within_resend_window`],
    /// and never for a tool with sensitive arguments, since the ledger keeps only their
    /// hashes and a re-send built from them would send hashes to the provider. A repeat call
    /// carries the caller's own values and only needs the window.
    pub fn may_resend(&self, first_seen_ms: i64, now_ms: i64, attempt: Duration) -> bool {
        self.sensitive.is_empty() && self.within_resend_window(first_seen_ms, now_ms, attempt)
    }

    /// True when an `unknown` intent first seen at `first_seen_ms` may be re-sent with its
    /// provider key at `now_ms` by an attempt that may take up to `attempt` (its lease):
    /// every request of that attempt must leave inside the resend window, since after the
    /// window the provider may have forgotten the key and would perform the effect again.
    pub fn within_resend_window(&self, first_seen_ms: i64, now_ms: i64, attempt: Duration) -> bool {
        let Some(window) = self.resend_window else {
            return false;
        };
        let window_ms = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
        let attempt_ms = i64::try_from(attempt.as_millis()).unwrap_or(i64::MAX);
        now_ms.saturating_add(attempt_ms) < first_seen_ms.saturating_add(window_ms)
    }

    /// The description models read. For a side-effecting tool it ends with the sentence that
    /// tells the model a repeat is harmless and unnecessary, preceded, for a tool that needs
    /// the application's intent id, by [`INTENT_ID_SENTENCE`]. A configured description that
    /// already holds either sentence is not given it twice.
    pub fn published_description(&self) -> String {
        if self.effect != Effect::SideEffect {
            return self.description.clone();
        }
        let once_per = self.once_per_sentence();
        let configured = self.description.trim_end();
        let mut description = configured
            .strip_suffix(once_per.as_str())
            .unwrap_or(configured)
            .trim_end()
            .to_owned();
        let mut add = |sentence: &str| {
            if !description.is_empty() {
                description.push(' ');
            }
            description.push_str(sentence);
        };
        if self.needs_intent_id() && !configured.contains(INTENT_ID_SENTENCE) {
            add(INTENT_ID_SENTENCE);
        }
        add(&once_per);
        description
    }

    /// True when the tool's key uses `{intent_id}`: a call needs the application's intent id
    /// (MCP `_meta` [`INTENT_ID_META_KEY`], HTTP header [`INTENT_ID_HEADER`]).
    pub fn needs_intent_id(&self) -> bool {
        self.key.as_ref().is_some_and(KeyTemplate::uses_intent_id)
    }

    /// "Safe to call once per order. Repeated calls return the original result."
    pub fn once_per_sentence(&self) -> String {
        format!(
            "Safe to call once per {}. Repeated calls return the original result.",
            self.once_per
        )
    }
}

/// The top-level property names of an object schema.
fn argument_names(schema: &Value) -> Vec<&str> {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|properties| properties.keys().map(String::as_str).collect())
        .unwrap_or_default()
}

/// "order" for a key whose first argument is `order_id`.
fn default_once_per(key: &KeyTemplate) -> Option<String> {
    if key.uses_intent_id() {
        return Some("request".to_owned());
    }
    let first = key.argument_names().next()?;
    let noun = first.strip_suffix("_id").unwrap_or(first);
    Some(noun.replace('_', " "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn refund_schema() -> Value {
        json!({"type": "object", "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}, "tool_call_id": {"type": "string"}}})
    }

    fn refund(key: Option<&str>) -> Result<ToolDefinition, ToolError> {
        ToolDefinition::new(
            "refund_order",
            "Refund an order.",
            Effect::SideEffect,
            refund_schema(),
            key,
            Duration::from_secs(10),
            2,
        )
    }

    #[test]
    fn a_side_effecting_tool_publishes_the_once_per_intent_sentence() {
        let tool = refund(Some("refund:{order_id}:{amount:.2}")).unwrap();
        assert_eq!(
            tool.published_description(),
            "Refund an order. Safe to call once per order. Repeated calls return the original result."
        );
        let read = ToolDefinition::new(
            "get_order",
            "Get it.",
            Effect::Read,
            json!({"type": "object"}),
            None,
            Duration::from_secs(1),
            3,
        )
        .unwrap();
        assert_eq!(read.published_description(), "Get it.");
    }

    // Found by a new user: `charge_card` was listed to an MCP client that could not send the
    // `_meta` intent id it needs, and nothing in its description said so.
    #[test]
    fn a_tool_keyed_by_the_intent_id_says_so_before_the_once_per_sentence() {
        let tool = refund(Some("refund:{order_id}:{intent_id}")).unwrap();
        assert!(tool.needs_intent_id());
        let published = tool.published_description();
        assert_eq!(
            published,
            format!(
                "Refund an order. {INTENT_ID_SENTENCE} Safe to call once per request. Repeated calls \
                 return the original result."
            )
        );
        assert!(
            published.contains("_meta \"intentgate/intent_id\""),
            "{published}"
        );
        assert!(published.contains("Intent-Id"), "{published}");
        // A description that already ends with the once-per sentence gets the intent id
        // sentence before it, once.
        let mut configured = tool.clone();
        configured.description = published.clone();
        assert_eq!(configured.published_description(), published);
        configured.description = format!("Refund an order. {}", tool.once_per_sentence());
        assert_eq!(configured.published_description(), published);
        assert!(!refund(Some("refund:{order_id}")).unwrap().needs_intent_id());
    }

    #[test]
    fn a_side_effecting_tool_without_a_usable_key_is_refused() {
        assert_eq!(
            refund(None).unwrap_err(),
            ToolError::MissingKey("refund_order".into())
        );
        let error = refund(Some("refund:{tool_call_id}")).unwrap_err();
        assert!(
            matches!(&error, ToolError::Key { error: KeyError::PerAttempt { name }, .. } if name == "tool_call_id")
        );
        assert!(
            error
                .to_string()
                .starts_with("tool `refund_order`: key template uses `tool_call_id`"),
            "{error}"
        );
        let error = refund(Some("refund:{order_id}:{now}")).unwrap_err();
        assert!(matches!(
            error,
            ToolError::Key {
                error: KeyError::PerAttempt { .. },
                ..
            }
        ));
        let error = refund(Some("refund:{customer}")).unwrap_err();
        assert!(matches!(
            error,
            ToolError::Key {
                error: KeyError::NotAnArgument { .. },
                ..
            }
        ));
    }

    #[test]
    fn a_resend_must_end_inside_the_window_and_needs_one() {
        let mut tool = refund(Some("refund:{order_id}:{amount:.2}")).unwrap();
        let attempt = Duration::from_secs(30);
        assert!(!tool.may_resend(0, 0, attempt), "no window, no re-send");
        tool.resend_window = Some(Duration::from_secs(3600));
        assert!(tool.may_resend(0, 0, attempt));
        assert!(tool.may_resend(1_000, 3_570_999, attempt));
        assert!(
            !tool.may_resend(1_000, 3_571_000, attempt),
            "the attempt would end as the window does"
        );
        assert!(!tool.may_resend(0, i64::MAX, attempt));
    }

    fn email_tool() -> ToolDefinition {
        ToolDefinition::new(
            "send_email",
            "Send an email.",
            Effect::SideEffect,
            json!({"type": "object", "properties": {
                "to": {"type": "string", "sensitive": true},
                "reference": {"type": "string"},
                "body": {"type": "string", "sensitive": true}}}),
            Some("email:{to}:{reference}"),
            Duration::from_secs(5),
            2,
        )
        .unwrap()
    }

    #[test]
    fn sensitive_arguments_are_read_from_the_schema_which_is_published_without_them() {
        let tool = email_tool();
        let names: Vec<String> = tool.sensitive.iter().map(ToString::to_string).collect();
        assert_eq!(names, ["body", "to"]);
        assert!(
            !tool.input_schema.to_string().contains("sensitive"),
            "{}",
            tool.input_schema
        );
        let error = ToolDefinition::new(
            "t",
            "",
            Effect::Read,
            json!({"type": "object", "items": {"sensitive": true}}),
            None,
            Duration::from_secs(1),
            0,
        )
        .unwrap_err();
        assert!(matches!(error, ToolError::Sensitive { .. }), "{error}");
    }

    #[test]
    fn a_tool_with_sensitive_arguments_and_no_hash_key_refuses_to_store_them() {
        // Without the check the arguments would go to the ledger in clear.
        let mut tool = email_tool();
        let error = tool.check_hash_key().unwrap_err();
        assert!(
            error.to_string().contains("`body`, `to`")
                && error.to_string().contains("openssl rand -hex 32"),
            "{error}"
        );
        assert!(
            tool.stored_arguments(&json!({"to": "a@example.com"}))
                .is_err()
        );
        assert!(matches!(
            tool.render_key(&json!({"to": "a@example.com", "reference": "1"}), None),
            Some(Err(KeyError::NoHashKey { .. }))
        ));
        tool.hash_key = Some(HashKey::new(&[1u8; 32]).unwrap());
        let stored = tool
            .stored_arguments(&json!({"to": "a@example.com", "reference": "1", "body": "hi"}))
            .unwrap()
            .into_owned();
        assert!(!stored.to_string().contains("a@example.com"), "{stored}");
        assert_eq!(stored["reference"], "1");
    }

    #[test]
    fn a_tool_with_sensitive_arguments_is_never_resent() {
        // A re-send is built from the stored arguments, which hold hashes.
        let mut tool = email_tool();
        tool.hash_key = Some(HashKey::new(&[1u8; 32]).unwrap());
        tool.resend_window = Some(Duration::from_secs(3600));
        assert!(!tool.may_resend(0, 0, Duration::from_secs(30)));
    }

    #[test]
    fn other_definition_errors_say_what_to_fix() {
        let schema = refund_schema();
        let bad = |name: &str, effect, schema: Value, key: Option<&str>, timeout_ms, budget| {
            ToolDefinition::new(
                name,
                "",
                effect,
                schema,
                key,
                Duration::from_millis(timeout_ms),
                budget,
            )
            .unwrap_err()
        };
        assert!(matches!(
            bad("refund order", Effect::Read, schema.clone(), None, 10, 0),
            ToolError::BadName(_)
        ));
        assert!(matches!(
            bad("r", Effect::Read, json!({"type": "array"}), None, 10, 0),
            ToolError::BadSchema(_)
        ));
        assert!(matches!(
            bad(
                "r",
                Effect::Read,
                schema.clone(),
                Some("k:{order_id}"),
                10,
                0
            ),
            ToolError::UnexpectedKey(_)
        ));
        assert!(matches!(
            bad("r", Effect::Read, schema.clone(), None, 0, 0),
            ToolError::BadTimeout { .. }
        ));
        assert!(matches!(
            bad("r", Effect::Read, schema, None, 10, 99),
            ToolError::BadRetryBudget { .. }
        ));
    }
}
