//! The upstream: whatever actually performs a tool's effect (an HTTP API, a fake provider,
//! a Rust function).

use std::time::Duration;

use async_trait::async_trait;
use intentgate_core::{ToolDefinition, UpstreamObservation};
use serde_json::Value;

/// One request to the upstream.
#[derive(Debug, Clone, Copy)]
pub struct UpstreamCall<'a> {
    pub tool: &'a ToolDefinition,
    /// The arguments as the caller sent them; for the sweeper's lookups and re-sends, as
    /// the ledger keeps them (sensitive values as keyed hashes, which is why a tool with
    /// sensitive arguments is never re-sent).
    pub arguments: &'a Value,
    /// The intent's provider idempotency key (side-effecting tools only). The same for
    /// every attempt of one intent, within an epoch.
    pub idempotency_key: Option<&'a str>,
    /// The intent's key, for upstreams that record it beside the effect (metadata) so the
    /// lookup can find it later.
    pub intent_key: Option<&'a str>,
    /// The application's intent id, when the call carried one (for templates that use
    /// `{intent_id}`).
    pub intent_id: Option<&'a str>,
    /// The intent's attempt number (0 for reads and idempotent tools), for logs and
    /// headers. The idempotency key does not change with it.
    pub attempt: u32,
    /// The tool's timeout. The gate also enforces it; an upstream may use it to bound its
    /// own requests.
    pub timeout: Duration,
}

impl<'a> UpstreamCall<'a> {
    /// A request of a read or idempotent tool: no intent, no keys, attempt 0.
    pub fn without_intent(tool: &'a ToolDefinition, arguments: &'a Value) -> UpstreamCall<'a> {
        UpstreamCall {
            tool,
            arguments,
            idempotency_key: None,
            intent_key: None,
            intent_id: None,
            attempt: 0,
            timeout: tool.timeout,
        }
    }

    /// A request for the intent `intent_key`, in its `attempt`; `idempotency_key` is `None`
    /// for a lookup, which performs nothing.
    pub fn for_intent(
        tool: &'a ToolDefinition,
        arguments: &'a Value,
        intent_key: &'a str,
        idempotency_key: Option<&'a str>,
        intent_id: Option<&'a str>,
        attempt: u32,
    ) -> UpstreamCall<'a> {
        UpstreamCall {
            idempotency_key,
            intent_key: Some(intent_key),
            intent_id,
            attempt,
            ..UpstreamCall::without_intent(tool, arguments)
        }
    }
}

/// What a lookup found.
#[derive(Debug, Clone, PartialEq)]
pub enum LookupOutcome {
    /// The effect exists.
    Found {
        external_id: Option<String>,
        result: Value,
    },
    /// The provider answered and has no such effect (yet).
    NotFound,
    /// The lookup itself failed; nothing is known.
    Failed(String),
    /// The tool has no lookup; its ambiguous outcomes stay unknown until someone decides.
    Unsupported,
}

impl LookupOutcome {
    /// `found`, `not_found`, `failed` or `unsupported`: what a log line may say about a
    /// lookup (a found record may hold personal data).
    pub fn kind(&self) -> &'static str {
        match self {
            LookupOutcome::Found { .. } => "found",
            LookupOutcome::NotFound => "not_found",
            LookupOutcome::Failed(_) => "failed",
            LookupOutcome::Unsupported => "unsupported",
        }
    }
}

/// Performs tools' effects and finds them afterwards.
#[async_trait]
pub trait Upstream: Send + Sync + 'static {
    /// Checks, sending nothing, that the request for `call` can be built from its arguments
    /// (for HTTP: a header value can't hold a line break, a path segment can't be `..`). `Err`
    /// says what is wrong, naming the argument. The gate runs it before anything is recorded
    /// and answers `invalid_arguments` on `Err`. The default accepts every call.
    fn check(&self, _call: UpstreamCall<'_>) -> Result<(), String> {
        Ok(())
    }

    /// Sends the request once. Never retries: the gate decides that.
    async fn execute(&self, call: UpstreamCall<'_>) -> UpstreamObservation;

    /// Read-only: finds the effect of a side-effecting call by its business fields or its
    /// intent key, without performing it.
    async fn lookup(&self, call: UpstreamCall<'_>) -> LookupOutcome;
}
