//! The key phase (docs/design.md section 4): the intent key rendered from the arguments
//! and the application's intent id, the fingerprint of the arguments as the ledger keeps
//! them, and the binding of the caller's own key for the operation (the HTTP API's
//! `Idempotency-Key`) to the intent it names.

use std::borrow::Cow;

use intentgate_core::limits::CALLER_KEY_LENGTH_MAX;
use intentgate_core::{CallStatus, Fingerprint, ToolDefinition, differing_fields};
use intentgate_ledger::{Bound, CallerKey};
use serde_json::Value;
use tracing::Instrument;

use crate::context::CallContext;
use crate::error::GateError;
use crate::gate::Gate;
use crate::outcome::CallOutcome;
use crate::trace;

/// What the key phase made of a call: the intent it names.
pub(crate) struct Keyed<'a> {
    /// The application's intent id ([`call_intent_id`]), for requests that send it.
    pub(crate) intent_id: Option<&'a str>,
    /// The intent key: the tool's template rendered from the arguments.
    pub(crate) key: String,
    /// The arguments as the ledger keeps them: sensitive values as keyed hashes.
    pub(crate) stored_arguments: Cow<'a, Value>,
    /// The fingerprint of `stored_arguments`; the stored one when a settled read finds an
    /// intent whose older-form fingerprint fingerprints alike now.
    pub(crate) fingerprint: Fingerprint,
}

impl Gate {
    /// The key phase: the intent key and fingerprint of a side-effecting call, or the
    /// `invalid_arguments` answer when the call names no key (a caller key the ledger can't
    /// keep, two intent ids that disagree, a value a key may not hold). Recorded on the
    /// call's span: the key, and the key's hash for the exported trace.
    pub(crate) fn key<'a>(
        &self,
        tool: &ToolDefinition,
        arguments: &'a Value,
        context: &'a CallContext,
    ) -> Result<Keyed<'a>, Box<CallOutcome>> {
        let call_span = tracing::Span::current();
        let keying = crate::phase!("key_and_fingerprint");
        let entered = keying.enter();
        let keyed = check_caller_key(context)
            .and_then(|()| call_intent_id(tool, context))
            .and_then(|intent_id| Ok((intent_id, intent_key(tool, arguments, intent_id)?)));
        let (intent_id, key) = match keyed {
            Ok(keyed) => keyed,
            Err(reason) => {
                // The decision is the call's, not the phase's.
                drop(entered);
                trace::set_decision("invalid_arguments");
                return Err(Box::new(
                    self.outcome(tool, CallStatus::InvalidArguments, &reason)
                        .with_errors(vec![reason]),
                ));
            }
        };
        call_span.record("key", key.as_str());
        // The key holds argument values: exported only as its hash (computed only when
        // traces are exported).
        if trace::enabled() {
            trace::set_attribute(
                &call_span,
                "intentgate.key_hash",
                trace::key_hash(&context.tenant, key.as_str()),
            );
        }
        // The ledger keeps sensitive values as keyed hashes only, and the fingerprint is of
        // that form too: a plain SHA-256 over the clear values would let anyone holding the
        // ledger test guesses (an address book) against it. Equal values still hash alike,
        // so a repeat matches and a changed value is a conflict.
        let stored_arguments = tool
            .stored_arguments(arguments)
            .expect("Gate::new checked that a tool with sensitive arguments has a hash key");
        let fingerprint = tool.fingerprint(&stored_arguments);
        drop(entered);
        Ok(Keyed {
            intent_id,
            key,
            stored_arguments,
            fingerprint,
        })
    }

    /// Binds the call's own key for its operation ([`CallContext::explicit_key`], if it sent
    /// one) to the intent it names (`keyed`'s key and fingerprint), within its tenant and tool, or
    /// refuses the call when that key was first used for another intent
    /// ([`GateError::IdempotencyKeyReused`], naming the arguments that differ from that
    /// intent's): the IETF draft's "same key, other payload". The key is only ever compared
    /// with the keys of the caller's own tenant and the tool.
    pub(crate) async fn bind_caller_key(
        &self,
        tool: &ToolDefinition,
        context: &CallContext,
        keyed: &Keyed<'_>,
    ) -> Result<(), GateError> {
        let (key, fingerprint) = (keyed.key.as_str(), keyed.fingerprint.as_str());
        let Some(caller_key) = &context.explicit_key else {
            return Ok(());
        };
        let binding = CallerKey {
            tenant: context.tenant.clone(),
            tool: tool.name.clone(),
            caller_key: caller_key.clone(),
            intent_key: key.to_owned(),
            fingerprint: fingerprint.to_owned(),
            bound_ms: self.clock.now_ms(),
        };
        let bound = self
            .ledger
            .bind_caller_key(&binding)
            .instrument(crate::phase!(
                "ledger.bind_caller_key",
                db.operation.name = "bind_caller_key",
                db.collection.name = "caller_keys"
            ))
            .await?;
        let Bound::Other(first) = bound else {
            return Ok(());
        };
        // What differs from the intent the key first named, as a conflict says it.
        let differing_fields = match self
            .ledger
            .get(&context.tenant, &tool.name, &first.intent_key)
            .await?
        {
            Some(intent) => differing_fields(&intent.arguments, &keyed.stored_arguments),
            None => Vec::new(),
        };
        trace::set_decision("idempotency_key_reused");
        tracing::warn!(
            tool = %tool.name,
            key = %key,
            first_key = %first.intent_key,
            fields = ?differing_fields,
            "idempotency key reused for another intent; nothing executed"
        );
        Err(GateError::IdempotencyKeyReused {
            caller_key: caller_key.clone(),
            first_intent_key: first.intent_key,
            intent_key: key.to_owned(),
            differing_fields,
        })
    }
}

/// A call's arguments in one spelling: every string in NFC ([`intentgate_core::text::nfc`]),
/// before they are validated, keyed, fingerprinted, stored or sent. The provider is sent this
/// form too: a provider that compares text byte by byte then sees one value where the model
/// wrote two spellings, and the request the ledger's arguments rebuild (a re-send, a lookup)
/// is the one first sent. NFC changes no character's meaning, unlike NFKC, which would also
/// fold fullwidth forms; those are refused in keys instead ([`intentgate_core::KeyError`]).
pub(crate) fn one_spelling(arguments: Value) -> Value {
    intentgate_core::text::nfc_strings(arguments)
}

/// The intent key of a side-effecting call: the tool's template rendered from the
/// arguments and the call's intent id ([`call_intent_id`]). Nothing a caller chooses
/// replaces it: a caller's own key is at most the intent id of a template that has one.
fn intent_key(
    tool: &ToolDefinition,
    arguments: &Value,
    intent_id: Option<&str>,
) -> Result<String, String> {
    tool.render_key(arguments, intent_id)
        .expect("side-effecting tools have a key (checked at load)")
        .map_err(|error| error.to_string())
}

/// Refuses a caller's own key ([`CallContext::explicit_key`]) the ledger could not keep: the
/// caller's mistake, refused like arguments that render no key.
fn check_caller_key(context: &CallContext) -> Result<(), String> {
    match &context.explicit_key {
        Some(key) if key.is_empty() || key.len() > CALLER_KEY_LENGTH_MAX => Err(format!(
            "an idempotency key must be 1 to {CALLER_KEY_LENGTH_MAX} bytes, got {}",
            key.len()
        )),
        _ => Ok(()),
    }
}

/// The application's intent id of a call of `tool`. For a key template that uses
/// `{intent_id}`, the caller's own key for the operation (the IETF `Idempotency-Key`) is that
/// id, so it stands in for a missing `intent_id`, and the two must agree when both are
/// given; otherwise the `intent_id` as given (requests may send it).
pub(crate) fn call_intent_id<'c>(
    tool: &ToolDefinition,
    context: &'c CallContext,
) -> Result<Option<&'c str>, String> {
    let keyed_by_id = tool.key.as_ref().is_some_and(|key| key.uses_intent_id());
    match (
        context.intent_id.as_deref(),
        context.explicit_key.as_deref(),
    ) {
        (Some(id), Some(caller_key)) if keyed_by_id && id != caller_key => Err(format!(
            "this tool's key uses {{intent_id}}, and the call names two different ones: \
             Intent-Id `{}` and Idempotency-Key `{}`; send one of them, or the same value in both",
            id.escape_default(),
            caller_key.escape_default()
        )),
        (None, Some(caller_key)) if keyed_by_id => Ok(Some(caller_key)),
        (intent_id, _) => Ok(intent_id),
    }
}
