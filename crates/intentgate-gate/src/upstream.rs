//! The upstream: whatever actually performs a tool's effect (an HTTP API, a fake provider,
//! a Rust function).

use std::time::Duration;

use async_trait::async_trait;
use intentgate_core::{RequestFacts, ToolDefinition, UpstreamObservation};
use serde_json::Value;

/// One request to the upstream.
#[derive(Debug, Clone, Copy)]
pub struct UpstreamCall<'a> {
    pub tool: &'a ToolDefinition,
    /// The arguments as the caller sent them; for the sweeper's lookups and re-sends, as
    /// the ledger keeps them (sensitive values as keyed hashes, which is why a tool with
    /// sensitive arguments is never re-sent).
    pub arguments: &'a Value,
    /// The intent's provider idempotency key (side-effecting tools only; lookups too, which
    /// prove a record by it). The same for every attempt of one intent, within an epoch.
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

    /// A request for the intent `intent_key`, in its `attempt`, with its provider key
    /// (`None` only for a check made before the intent exists).
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
    /// The provider holds a record that is half this intent's (its provider key with other
    /// business fields, or its fields under another key): nothing is settled, and the
    /// owner is told. The text says what differs.
    Mismatch(String),
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
            LookupOutcome::Mismatch(_) => "mismatch",
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

    /// [`Upstream::execute`], with what the upstream knows of the request beyond what the
    /// transport saw ([`RequestFacts`]: its upstream's name in the config, whether its path is
    /// a fixed route, why a connection could not be made). The gate calls this one, and
    /// classifies with the facts (`classify_with`): they tell the operator's errors (a 404 to
    /// a fixed route, a refused connection) from the customer's. The default adds nothing.
    async fn execute_with_facts(
        &self,
        call: UpstreamCall<'_>,
    ) -> (UpstreamObservation, RequestFacts) {
        (self.execute(call).await, RequestFacts::default())
    }

    /// Read-only: finds the effect of a side-effecting call without performing it. `call`
    /// carries the intent's provider key (`idempotency_key`), on every path (the first
    /// attempt, a repeat, the sweeper): `Found` only for a record proved to be this
    /// intent's effect, never merely the first one an answer holds.
    async fn lookup(&self, call: UpstreamCall<'_>) -> LookupOutcome;
}

/// Events a receiver of [`Gate::lookup_mismatches`](crate::Gate::lookup_mismatches) may fall
/// behind by before it loses the oldest. A mismatch is rare (it means the provider holds a
/// record the ledger can't explain), and each intent is looked up at most once per lookup
/// interval, so this holds minutes of even a bad incident.
pub const LOOKUP_MISMATCH_BUFFER: usize = 256;

/// Events a receiver of [`Gate::key_reuses`](crate::Gate::key_reuses) may fall behind
/// before it loses the oldest. Each is one attempt that reused a key, a rare event (its
/// intent is not re-sent again): a small buffer is plenty.
pub const KEY_REUSE_BUFFER: usize = 256;

/// An attempt the provider refused because its idempotency key was first used for a request
/// with other parameters (Stripe's 400 `idempotency_error`). Nothing new happened, but the
/// key's first request may have acted: the intent stays `unknown`, is never re-sent, and its
/// owner must find out which request the provider holds under the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyReused {
    pub tool: String,
    pub tenant: String,
    pub intent_id: i64,
    pub intent_key: String,
    /// The provider's own words (`error.message`), empty when it gave none.
    pub provider_message: String,
    /// Milliseconds since the Unix epoch.
    pub at_ms: i64,
}

/// A lookup that found a record half an intent's: its provider key with other business
/// fields, or its business fields under another gateway key. Nothing was settled; the
/// intent's owner must look at the provider's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LookupMismatch {
    pub tool: String,
    pub tenant: String,
    pub intent_id: i64,
    pub intent_key: String,
    /// What differs, naming fields and keys (never the record's other values).
    pub reason: String,
    /// Milliseconds since the Unix epoch.
    pub at_ms: i64,
}
