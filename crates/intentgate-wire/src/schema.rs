//! The JSON Schemas of the core's enums, as `#[schema(schema_with = ...)]` functions: each
//! lists its values from the core's own list, so the schemas follow the core.

use intentgate_core::{
    CallStatus, Effect, Executor, IntentStatus, Misconfiguration, OutcomeReason, ResendStop,
};
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};

/// A string schema whose values are `values`.
pub fn string_enum(values: impl IntoIterator<Item = &'static str>, description: &str) -> Schema {
    Schema::Object(
        ObjectBuilder::new()
            .schema_type(Type::String)
            .enum_values(Some(values))
            .description(Some(description))
            .build(),
    )
}

pub fn call_status_schema() -> impl Into<RefOr<Schema>> {
    string_enum(
        CallStatus::ALL.iter().map(|status| status.as_str()),
        "What happened, for the model; `message` says what to do next.",
    )
}

pub fn outcome_reason_schema() -> impl Into<RefOr<Schema>> {
    string_enum(
        OutcomeReason::ALL.iter().map(|reason| reason.as_str()),
        "Why the call ended with its status, where the status alone would mislead: \
         `misconfigured` (`not_executed` because the gateway is misconfigured; a person will \
         follow up, trying again will not help); `missing_intent_id` (`invalid_arguments` \
         because the tool needs the application's intent id, sent as the `Intent-Id` header \
         over HTTP or in the request's `_meta` under \"intentgate/intent_id\" over MCP, and \
         the call had none; nothing was done, only the application can fix it, do not \
         retry); `denied` (`rejected` because a person reviewing the held intent denied it).",
    )
}

pub fn resend_stop_schema() -> impl Into<RefOr<Schema>> {
    string_enum(
        ResendStop::ALL.map(ResendStop::as_str),
        "Why same-key re-sends of the intent stopped for good.",
    )
}

pub fn misconfiguration_schema() -> impl Into<RefOr<Schema>> {
    string_enum(
        Misconfiguration::ALL.iter().map(|kind| kind.as_str()),
        "Which of the operator's errors it was.",
    )
}

pub fn intent_status_schema() -> impl Into<RefOr<Schema>> {
    string_enum(
        IntentStatus::ALL.iter().map(|status| status.as_str()),
        "Where the intent is in its life.",
    )
}

pub fn effect_schema() -> impl Into<RefOr<Schema>> {
    string_enum(
        [Effect::Read, Effect::Idempotent, Effect::SideEffect].map(Effect::as_str),
        "What calling the tool does to the world.",
    )
}

pub fn executor_schema() -> impl Into<RefOr<Schema>> {
    string_enum(
        [Executor::Gateway, Executor::Client].map(Executor::as_str),
        "Who performs the tool.",
    )
}
