//! The validate phase (docs/design.md section 5, steps 1 and 2): the arguments against the
//! tool's schema, the kill switch, and, once the key is known, whether the upstream can
//! build a request from the arguments. A call refused here records nothing (a switched-off
//! tool's call is counted) and sends nothing.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::Ordering;

use intentgate_core::key::provider_key;
use intentgate_core::{CallStatus, Executor, KeyError, OutcomeReason, ToolDefinition};
use serde_json::Value;
use tracing::Instrument;

use crate::call::key::{Keyed, call_intent_id};
use crate::context::CallContext;
use crate::error::GateError;
use crate::gate::{Gate, Tool};
use crate::options::FLAG_REFRESH;
use crate::outcome::CallOutcome;
use crate::trace;
use crate::upstream::UpstreamCall;

impl Gate {
    /// Validate and honour the kill switch: the answer to a call refused before its key is
    /// rendered (`invalid_arguments`, `disabled`), or `None` when it may go on.
    ///
    /// A call of a tool keyed by `{intent_id}` that carries no intent id is answered first,
    /// whatever its arguments: nothing the model does can make it work, so it is told that
    /// before it is told to fix an argument.
    pub(crate) async fn admit(
        &self,
        tool: &Tool,
        arguments: &Value,
        context: &CallContext,
    ) -> Result<Option<CallOutcome>, GateError> {
        let definition = &tool.definition;
        if let Some(refused) = self.missing_intent_id(definition, context) {
            return Ok(Some(refused));
        }
        let validate = crate::phase!("validate");
        let validating = validate.enter();
        // The messages go back to the caller: a sensitive argument's value is never quoted.
        // Most calls are valid: they are checked without building any error.
        let mut errors: Vec<String> = if tool.validator.is_valid(arguments) {
            Vec::new()
        } else {
            tool.validator
                .iter_errors(arguments)
                .map(|error| crate::schema::error_message(&error, &definition.sensitive))
                .collect()
        };
        if errors.is_empty() {
            errors = crate::schema::unreadable_numbers(arguments, &definition.sensitive);
        }
        // How many errors, never what they quote (an argument's value).
        trace::set_attribute(&validate, "intentgate.errors", errors.len() as i64);
        drop(validating);
        if !errors.is_empty() {
            trace::set_decision("invalid_arguments");
            return Ok(Some(
                self.outcome(definition, CallStatus::InvalidArguments, &errors.join("; "))
                    .with_errors(errors),
            ));
        }
        let kill_switch = crate::phase!("kill_switch");
        let disabled = self
            .is_disabled(&definition.name)
            .instrument(kill_switch.clone())
            .await?;
        trace::set_attribute(&kill_switch, "intentgate.disabled", disabled);
        if disabled {
            trace::set_decision("disabled");
            self.ledger
                .record_disabled_call(&context.tenant, &definition.name, self.clock.now_ms())
                .await?;
            tracing::warn!(tool = %definition.name, "call refused: the tool is switched off");
            return Ok(Some(self.outcome(definition, CallStatus::Disabled, "")));
        }
        Ok(None)
    }

    /// The answer to a call of a tool keyed by `{intent_id}` that carries none (and no
    /// `Idempotency-Key` standing in for it): `invalid_arguments` with reason
    /// `missing_intent_id`, whose instruction is to tell the user and not retry, since only
    /// the application can send the id. Nothing is recorded, so every repeat of the call gets
    /// this same answer. `None` when the call may go on.
    fn missing_intent_id(
        &self,
        tool: &ToolDefinition,
        context: &CallContext,
    ) -> Option<CallOutcome> {
        if !tool.needs_intent_id() || !matches!(call_intent_id(tool, context), Ok(None)) {
            return None;
        }
        trace::set_decision("invalid_arguments");
        tracing::info!(
            tool = %tool.name,
            "call refused: the tool's key uses {{intent_id}} and the call carried none"
        );
        Some(
            self.outcome(tool, CallStatus::InvalidArguments, "")
                .with_reason(tool, OutcomeReason::MissingIntentId)
                .with_errors(vec![KeyError::MissingIntentId.to_string()]),
        )
    }

    /// The answer to a side effect whose request can't be built from these arguments (a
    /// header value with a line break is the caller's mistake, not an intent), checked before
    /// an intent is recorded; `None` when it can be. A settled repeat, answered before this,
    /// has the arguments its first call was checked with. The real provider key may carry an
    /// epoch (`#2`), which changes nothing a check refuses. The caller's own code builds a
    /// client-executed tool's request: nothing to check.
    pub(crate) fn check_buildable(
        &self,
        tool: &ToolDefinition,
        arguments: &Value,
        context: &CallContext,
        keyed: &Keyed<'_>,
    ) -> Option<CallOutcome> {
        if tool.executor != Executor::Gateway {
            return None;
        }
        let check_key = provider_key(&context.tenant, &tool.name, &keyed.key, 1);
        let check = UpstreamCall::for_intent(
            tool,
            arguments,
            &keyed.key,
            Some(&check_key),
            keyed.intent_id,
            1,
        );
        let reason = self.upstream.check(check).err()?;
        Some(self.request_not_buildable(tool, reason))
    }

    /// True when `tool` is switched off, by the cached flags ([`FLAG_REFRESH`]).
    pub(crate) async fn is_disabled(&self, tool: &str) -> Result<bool, GateError> {
        self.with_flags(|disabled| disabled.get(tool).copied().unwrap_or(false))
            .await
    }

    /// The tools this gate treats as switched off now: the same cached view its calls are
    /// refused by (read from the ledger at most every [`FLAG_REFRESH`]), so whoever shows it
    /// (the MCP tool list) never runs ahead of or behind the calls.
    pub async fn switched_off(&self) -> Result<BTreeSet<String>, GateError> {
        self.with_flags(|disabled| {
            disabled
                .iter()
                .filter(|(tool, off)| **off && self.tools.contains_key(*tool))
                .map(|(tool, _)| tool.clone())
                .collect()
        })
        .await
    }

    /// `read` over the flags by tool (true: switched off), re-read from the ledger when the
    /// cached copy is older than [`FLAG_REFRESH`]. One caller re-reads at a time: the others
    /// that find the copy stale wait for its read and use it, rather than each reading the
    /// same flags (64 concurrent callers made 64 reads every refresh). A read that fails
    /// fails the callers that waited for it too: each trying again in turn would make the
    /// last wait for every failure before its own (a ledger that times out, 64 times over).
    async fn with_flags<T>(
        &self,
        read: impl Fn(&HashMap<String, bool>) -> T,
    ) -> Result<T, GateError> {
        if let Some(fresh) = self.fresh_flags(&read) {
            return Ok(fresh);
        }
        let reads_before = self.flag_reads.load(Ordering::Acquire);
        let mut refresh = self.flag_refresh.lock().await;
        // Read meanwhile by the caller this one waited for.
        if let Some(fresh) = self.fresh_flags(&read) {
            return Ok(fresh);
        }
        if self.flag_reads.load(Ordering::Acquire) != reads_before
            && let Some(error) = &refresh.failed
        {
            return Err(error.clone().into());
        }
        let now_ms = self.clock.now_ms();
        let flags = self.ledger.tool_flags().await;
        self.flag_reads.fetch_add(1, Ordering::Release);
        let flags = match flags {
            Ok(flags) => flags,
            Err(error) => {
                refresh.failed = Some(error.clone());
                return Err(error.into());
            }
        };
        refresh.failed = None;
        let mut cache = self.flags.lock().expect("flag cache lock");
        cache.read_ms = Some(now_ms);
        cache.disabled = flags
            .into_iter()
            .map(|flag| (flag.tool, !flag.enabled))
            .collect();
        Ok(read(&cache.disabled))
    }

    /// `read` over the cached flags, unless they are older than [`FLAG_REFRESH`] (a read's
    /// time is taken before it starts, so no copy is trusted for longer).
    fn fresh_flags<T>(&self, read: &impl Fn(&HashMap<String, bool>) -> T) -> Option<T> {
        let now_ms = self.clock.now_ms();
        let cache = self.flags.lock().expect("flag cache lock");
        cache
            .read_ms
            .is_some_and(|read| now_ms - read < FLAG_REFRESH.as_millis() as i64)
            .then(|| read(&cache.disabled))
    }
}
