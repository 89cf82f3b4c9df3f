//! How a tool is published over MCP: its schema, description, annotations and the schema
//! of what a call returns (`intentgate_wire::outcome_schema`, with an imported tool's
//! upstream output schema applied to `result`).

use std::sync::Arc;

use intentgate_core::{Effect, ToolDefinition};
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::{Value, json};

/// The MCP hints a config sets per tool, or an imported tool's upstream lists. Unset hints
/// are left out of the annotations, so clients apply the spec's pessimistic defaults
/// (destructive, open world).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolHints {
    /// `destructiveHint`: the effect can't be taken back (a refund, an email).
    pub destructive: Option<bool>,
    /// `openWorldHint`: the tool reaches entities outside the gateway (a provider, a person).
    pub open_world: Option<bool>,
    /// A human-readable title (an imported tool's, from its server).
    pub title: Option<String>,
    /// The output schema of the upstream tool behind an imported read or idempotent tool:
    /// published as the schema of `result` when a call's status is `done` or `already_done`.
    pub upstream_output_schema: Option<Value>,
}

/// The annotations of a tool with `effect`.
///
/// A side-effecting tool behind the gateway is `idempotentHint: true`: a repeat of the same
/// intent is answered from the ledger and has no additional effect. That is a property of
/// the gateway, not of the upstream API, which is why it is published here and not read
/// from the config.
pub(crate) fn annotations(effect: Effect, hints: &ToolHints) -> ToolAnnotations {
    let annotations = match effect {
        Effect::Read => ToolAnnotations::new().read_only(true),
        Effect::Idempotent | Effect::SideEffect => {
            ToolAnnotations::new().read_only(false).idempotent(true)
        }
    };
    let annotations = match hints.destructive {
        Some(destructive) => annotations.destructive(destructive),
        None => annotations,
    };
    let annotations = match hints.open_world {
        Some(open_world) => annotations.open_world(open_world),
        None => annotations,
    };
    let mut annotations = annotations;
    annotations.title = hints.title.clone();
    annotations
}

/// The outcome schema with an upstream tool's output schema as the schema of `result` when
/// the status is `done` or `already_done` (the upstream's result, passed through). Any
/// other status carries no upstream output, so the upstream schema is not applied to it.
fn outcome_schema_with(outcome: &JsonObject, upstream: &Value) -> JsonObject {
    let mut schema = outcome.clone();
    schema.insert(
        "allOf".to_owned(),
        json!([{
            "if": {
                "properties": {"status": {"enum": ["done", "already_done"]}},
                "required": ["status"]
            },
            "then": {"properties": {"result": upstream}}
        }]),
    );
    schema
}

/// One tool as `tools/list` publishes it.
pub(crate) fn listing(
    definition: &ToolDefinition,
    hints: ToolHints,
    output_schema: &Arc<JsonObject>,
) -> Tool {
    let input_schema = definition
        .input_schema
        .as_object()
        .cloned()
        .expect("ToolDefinition::new accepts only object schemas");
    // A side effect's `done` may carry what its lookup found rather than the call's own
    // output, so only reads and idempotent tools promise the upstream's output schema.
    let output_schema = match (&hints.upstream_output_schema, definition.effect) {
        (Some(upstream), Effect::Read | Effect::Idempotent) => {
            Arc::new(outcome_schema_with(output_schema, upstream))
        }
        _ => output_schema.clone(),
    };
    let mut tool = Tool::new(
        definition.name.clone(),
        definition.published_description(),
        Arc::new(input_schema),
    )
    .with_raw_output_schema(output_schema)
    .with_annotations(annotations(definition.effect, &hints));
    tool.title = hints.title;
    tool
}

/// The sentence that starts the description of a switched-off tool: models read
/// descriptions as instructions, and a call would only get `disabled`.
pub const SWITCHED_OFF_SENTENCE: &str =
    "Switched off right now: a call does nothing and returns status `disabled`.";

/// `tool` as `tools/list` publishes it while it is switched off: its description starts
/// with [`SWITCHED_OFF_SENTENCE`]; everything else (schemas, annotations) stays, since
/// the tool comes back as it was.
pub(crate) fn switched_off(tool: &Tool) -> Tool {
    let mut tool = tool.clone();
    let description = match tool.description.as_deref() {
        Some(description) if !description.is_empty() => {
            format!("{SWITCHED_OFF_SENTENCE} {description}")
        }
        _ => SWITCHED_OFF_SENTENCE.to_owned(),
    };
    tool.description = Some(description.into());
    tool
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_switched_off_tool_keeps_everything_but_the_start_of_its_description() {
        let schema = Arc::new(intentgate_wire::outcome_schema());
        let definition = ToolDefinition::new(
            "refund_order",
            "Refund an order.",
            Effect::SideEffect,
            json!({"type": "object", "properties": {"order_id": {"type": "string"}}}),
            Some("refund:{order_id}"),
            std::time::Duration::from_secs(1),
            0,
        )
        .unwrap();
        let listed = listing(
            &definition,
            ToolHints {
                destructive: Some(true),
                ..ToolHints::default()
            },
            &schema,
        );
        let off = switched_off(&listed);
        assert_eq!(
            off.description.as_deref(),
            Some(
                format!(
                    "{SWITCHED_OFF_SENTENCE} {}",
                    listed.description.as_deref().unwrap()
                )
                .as_str()
            )
        );
        assert_eq!(off.annotations, listed.annotations);
        assert_eq!(off.input_schema, listed.input_schema);
        assert_eq!(off.output_schema, listed.output_schema);
        assert_eq!(off.name, listed.name);
    }

    #[test]
    fn annotations_follow_the_effect_and_the_configured_hints() {
        let read = annotations(Effect::Read, &ToolHints::default());
        assert_eq!(read.read_only_hint, Some(true));
        assert_eq!(read.idempotent_hint, None);
        assert_eq!(read.destructive_hint, None);

        let update = annotations(Effect::Idempotent, &ToolHints::default());
        assert_eq!(
            (update.read_only_hint, update.idempotent_hint),
            (Some(false), Some(true))
        );

        let refund = annotations(
            Effect::SideEffect,
            &ToolHints {
                destructive: Some(true),
                open_world: Some(true),
                ..ToolHints::default()
            },
        );
        assert_eq!(refund.read_only_hint, Some(false));
        assert_eq!(
            refund.idempotent_hint,
            Some(true),
            "a repeat behind the gateway has no additional effect"
        );
        assert_eq!(
            (refund.destructive_hint, refund.open_world_hint),
            (Some(true), Some(true))
        );
    }
}
