//! The answer to one call, as every interface returns it.

use intentgate_core::{CallStatus, OutcomeReason};
use serde::Serialize;
use serde_json::{Value, json};

/// What a call returns to the model. Serialised as-is by the HTTP API and as
/// `structuredContent` over MCP, so its fields are a promise to users.
///
/// The fields serialise in the order they are declared, and that order is a promise too:
/// `status` first, then `reason` (when there is one) and `message`, then what the call
/// returned, so a model or a person reading the JSON learns what happened before reading a
/// result of any length. serde_json's `preserve_order` feature (on for the workspace) keeps
/// that order when the outcome passes through a `Value`, as it does over MCP.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallOutcome {
    pub status: CallStatus,
    /// Why it ended so, where the status alone would mislead (`misconfigured`: a
    /// `not_executed` that trying again won't fix until a person does; `missing_intent_id`:
    /// an `invalid_arguments` that only the application can fix).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<OutcomeReason>,
    /// The instruction for the model.
    pub message: String,
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
    pub tool: String,
    /// The intent's key (side-effecting tools).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub intent_key: Option<String>,
}

impl CallOutcome {
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self)
            .unwrap_or_else(|_| json!({"status": self.status, "message": self.message}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Found by a new user: over MCP the outcome passed through a `Value`, whose members were
    // sorted, so `status` came after the whole `result`.
    #[test]
    fn the_outcome_as_json_starts_with_status_then_message() {
        let outcome = CallOutcome {
            status: CallStatus::Done,
            reason: None,
            message: "m".into(),
            result: Some(json!({"b": 1, "a": 2})),
            external_id: Some("re_1".into()),
            differing_fields: Vec::new(),
            errors: Vec::new(),
            tool: "refund_order".into(),
            intent_key: Some("refund:1:49.00".into()),
        };
        let value = outcome.to_json();
        let keys: Vec<&str> = value
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            [
                "status",
                "message",
                "result",
                "external_id",
                "tool",
                "intent_key"
            ]
        );
        let text = value.to_string();
        assert!(
            text.starts_with(r#"{"status":"done","message":"m","result":{"b":1,"a":2}"#),
            "{text}"
        );
        assert_eq!(text, serde_json::to_string(&outcome).unwrap());
    }
}
