//! The errors of the gate itself, as opposed to the outcomes of a call ([`CallOutcome`](crate::CallOutcome)):
//! each says that nothing was executed, or why the call can't be made at all.

use intentgate_core::ToolError;
use intentgate_ledger::LedgerError;

/// Errors of the gate itself, as opposed to outcomes of a call.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    /// No tool of that name is loaded: nothing was recorded or executed.
    #[error("no tool named `{0}`")]
    UnknownTool(String),
    /// The call's tenant is not a tenant name: nothing was recorded or executed.
    #[error("invalid tenant: {0}")]
    InvalidTenant(#[from] intentgate_core::TenantError),
    /// A tool's input schema can't be compiled (at `Gate::new`).
    #[error("tool `{tool}`: its input schema is not a valid JSON Schema: {reason}")]
    BadSchema { tool: String, reason: String },
    /// Two definitions share a name (at `Gate::new`).
    #[error("two tools are named `{0}`")]
    DuplicateTool(String),
    /// A definition the gate can't run as it is (sensitive arguments without a hash key).
    #[error("{0}")]
    Definition(ToolError),
    /// The tool is executed by the caller's own code ([`Executor::Client`](intentgate_core::Executor::Client)): it is granted
    /// through the intent API, never called.
    #[error(
        "tool `{0}` is executed by the caller's own code: ask for a grant with POST /v1/tools/{0}/intents instead of calling it"
    )]
    ClientExecuted(String),
    /// The intent API was asked for a grant of a tool the gateway executes itself.
    #[error("tool `{0}` is executed by the gateway: call it with POST /v1/tools/{0}/call")]
    NotClientExecuted(String),
    /// No randomness for a lease token of the intent API: nothing was recorded or granted.
    #[error("no randomness for a lease token, nothing was granted: {0}")]
    Randomness(getrandom::Error),
    /// The call's own key for its operation ([`CallContext::explicit_key`](crate::CallContext::explicit_key), the HTTP API's
    /// `Idempotency-Key`) was first used, in this tenant and tool, for another intent: another
    /// business key, or the same key with other arguments. Nothing was recorded or executed.
    #[error("{}", key_reused(.caller_key, .first_intent_key, .intent_key, .differing_fields))]
    IdempotencyKeyReused {
        /// The caller's key, as it sent it.
        caller_key: String,
        /// The key of the intent the caller key was first used for.
        first_intent_key: String,
        /// The key of the intent this call's arguments name.
        intent_key: String,
        /// The arguments that differ from those of the intent first named (empty when that
        /// intent is no longer, or never was, in the ledger).
        differing_fields: Vec<String>,
    },
    /// The ledger failed before anything was sent upstream: nothing was executed.
    #[error("the intent ledger is unavailable, nothing was executed: {0}")]
    Ledger(#[from] LedgerError),
}

/// The message of [`GateError::IdempotencyKeyReused`].
fn key_reused(
    caller_key: &str,
    first_intent_key: &str,
    intent_key: &str,
    differing_fields: &[String],
) -> String {
    let first = if first_intent_key == intent_key {
        format!("intent `{first_intent_key}` with other arguments")
    } else {
        format!("intent `{first_intent_key}`, and this call's arguments name intent `{intent_key}`")
    };
    let differing = if differing_fields.is_empty() {
        String::new()
    } else {
        format!(" (differing: {})", differing_fields.join(", "))
    };
    format!(
        "the idempotency key `{}` was first used for {first}{differing}; nothing was recorded or \
         executed: repeat the first call's arguments to get its answer, or send a new key for a \
         new operation",
        caller_key.escape_default()
    )
}
