//! [`Outcome`]: what a call did, as the HTTP API answers it and MCP returns it, and
//! [`outcome_schema`], its JSON Schema, generated from the type.

use intentgate_core::{CallStatus, OutcomeReason};
use intentgate_gate::CallOutcome;
use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::{PartialSchema, ToSchema};

use crate::schema::{call_status_schema, outcome_reason_schema};

/// What a call did: over HTTP always a 200, whatever the status; the status and message
/// tell the model what happened and what to do next. The fields serialise in the gate's
/// order (`intentgate_gate::CallOutcome`): `status` first, then `reason` and `message`, then
/// what the call returned, so a model reading the JSON learns what happened before reading
/// a result of any length.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct Outcome {
    #[schema(schema_with = call_status_schema)]
    pub status: CallStatus,
    /// Why it ended so, where the status alone would mislead (the schema's description
    /// lists the reasons).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = outcome_reason_schema)]
    pub reason: Option<OutcomeReason>,
    /// What to do next, for the model.
    pub message: String,
    /// The provider's result (done, already_done), its rejection (rejected), or the data
    /// read: any JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Value>)]
    pub result: Option<Value>,
    /// The provider's id for the effect.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external_id: Option<String>,
    /// For `conflict`: the arguments that differ from the stored intent.
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

impl From<&CallOutcome> for Outcome {
    fn from(outcome: &CallOutcome) -> Outcome {
        Outcome {
            status: outcome.status,
            reason: outcome.reason,
            message: outcome.message.clone(),
            tool: outcome.tool.clone(),
            intent_key: outcome.intent_key.clone(),
            result: outcome.result.clone(),
            external_id: outcome.external_id.clone(),
            differing_fields: outcome.differing_fields.clone(),
            errors: outcome.errors.clone(),
        }
    }
}

/// The outcome, its fields moved rather than copied (a repeat's result can be a few KiB).
impl From<CallOutcome> for Outcome {
    fn from(outcome: CallOutcome) -> Outcome {
        Outcome {
            status: outcome.status,
            reason: outcome.reason,
            message: outcome.message,
            tool: outcome.tool,
            intent_key: outcome.intent_key,
            result: outcome.result,
            external_id: outcome.external_id,
            differing_fields: outcome.differing_fields,
            errors: outcome.errors,
        }
    }
}

impl Outcome {
    /// The outcome as a JSON object, its members in the declared order (serde_json's
    /// `preserve_order`, on for the workspace): what MCP sends as `structuredContent`.
    pub fn to_object(&self) -> Map<String, Value> {
        match serde_json::to_value(self) {
            Ok(Value::Object(object)) => object,
            _ => unreachable!("an outcome serialises as a JSON object"),
        }
    }
}

/// The JSON Schema of [`Outcome`], as its `ToSchema` derives it: published by MCP as every
/// tool's `outputSchema`, and the `Outcome` of the OpenAPI document. Self-contained: the
/// enums are inline, so no `$ref` needs resolving.
pub fn outcome_schema() -> Map<String, Value> {
    match serde_json::to_value(Outcome::schema()) {
        Ok(Value::Object(schema)) => schema,
        _ => unreachable!("a schema serialises as a JSON object"),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// An outcome of `status` with every optional field set, so that a field added to
    /// `CallOutcome` without a place in the schema fails the tests.
    fn full(status: CallStatus) -> CallOutcome {
        CallOutcome {
            status,
            reason: Some(OutcomeReason::Misconfigured),
            message: "m".into(),
            tool: "refund_order".into(),
            intent_key: Some("refund:1:49.00".into()),
            result: Some(json!({"id": "re_1", "amount": 49.00})),
            external_id: Some("re_1".into()),
            differing_fields: vec!["amount".into()],
            errors: vec!["bad".into()],
        }
    }

    #[test]
    fn the_outcome_body_serialises_exactly_as_the_gates_outcome() {
        let bare = CallOutcome {
            status: CallStatus::Done,
            reason: None,
            message: "m".into(),
            tool: "get_order".into(),
            intent_key: None,
            result: None,
            external_id: None,
            differing_fields: Vec::new(),
            errors: Vec::new(),
        };
        for outcome in [full(CallStatus::Conflict), bare] {
            assert_eq!(
                serde_json::to_value(Outcome::from(&outcome)).unwrap(),
                outcome.to_json()
            );
            // The same members in the same order, `status` first.
            let text = serde_json::to_string(&Outcome::from(&outcome)).unwrap();
            assert_eq!(text, outcome.to_json().to_string());
            assert!(text.starts_with(r#"{"status":"#), "{text}");
            assert_eq!(
                Value::Object(Outcome::from(&outcome).to_object()),
                outcome.to_json()
            );
        }
    }

    #[test]
    fn the_outcome_schema_accepts_every_outcome_the_gate_returns() {
        let schema = Value::Object(outcome_schema());
        let validator = jsonschema::validator_for(&schema).unwrap();
        let properties = schema["properties"].as_object().unwrap();
        for status in CallStatus::ALL {
            let outcome = Outcome::from(&full(status)).to_object();
            for field in outcome.keys() {
                assert!(
                    properties.contains_key(field),
                    "{field} is not in the schema"
                );
            }
            assert!(validator.is_valid(&Value::Object(outcome.clone())));
        }
        let bare = json!({"status": "done", "message": "m", "tool": "get_order", "result": [1, 2]});
        assert!(validator.is_valid(&bare));
        assert!(!validator.is_valid(&json!({"status": "maybe", "message": "m", "tool": "t"})));
        assert!(!validator.is_valid(&json!({"status": "done", "tool": "t"})));
    }

    #[test]
    fn the_outcome_schema_lists_every_status_and_reason() {
        let schema = outcome_schema();
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["required"], json!(["status", "message", "tool"]));
        let statuses = schema["properties"]["status"]["enum"].as_array().unwrap();
        assert_eq!(statuses.len(), CallStatus::ALL.len());
        for status in CallStatus::ALL {
            assert!(statuses.contains(&json!(status.as_str())), "{status}");
        }
        let reasons = schema["properties"]["reason"]["enum"].as_array().unwrap();
        assert_eq!(reasons.len(), OutcomeReason::ALL.len());
    }
}
