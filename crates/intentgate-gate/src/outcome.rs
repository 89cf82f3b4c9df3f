//! The answer to one call, as every interface returns it.

use intentgate_core::{CallStatus, OutcomeReason};
use serde::Serialize;
use serde_json::{Value, json};

/// What a call returns to the model. Serialised as-is by the HTTP API and as
/// `structuredContent` over MCP, so its fields are a promise to users.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallOutcome {
    pub status: CallStatus,
    /// Why it ended so, where the status alone would mislead (`misconfigured`: a
    /// `not_executed` that trying again won't fix until a person does).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<OutcomeReason>,
    /// The instruction for the model.
    pub message: String,
    pub tool: String,
    /// The intent's key (side-effecting tools).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub intent_key: Option<String>,
    /// The provider's result (done, already_done), rejection (rejected) or the read's data.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The provider's id for the effect.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external_id: Option<String>,
    /// For `conflict`: the argument fields that differ from the stored intent.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub differing_fields: Vec<String>,
    /// For `invalid_arguments`: what is wrong, one entry per problem.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

impl CallOutcome {
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self)
            .unwrap_or_else(|_| json!({"status": self.status, "message": self.message}))
    }
}
