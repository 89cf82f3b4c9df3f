//! The lookup check: a tool's `lookup`, called as the gate calls it after an ambiguous
//! failure, finds each intent's own effect and never another's (docs/design.md section 5, "What counts
//! as found").
//!
//! The config check sees a lookup's form (it has a `key` or a `match`); only the provider's
//! answers show whether it tells intents apart: a `match` that leaves out the amount takes
//! the other refund of the same order, a `key` pointer where the provider keeps nothing
//! never finds anything. So the check makes the effects of intents that differ from a first
//! one in one business field of the key each (and, when the key has the application's intent
//! id, one that differs only in that), asks the lookup of each, and expects the id its own
//! call answered; then it asks the lookup of intents made the same way that were never
//! executed, and expects nothing. A wrong answer fails the tool with what the lookup did and
//! how to change the config.

use std::collections::BTreeMap;
use std::time::Duration;

use intentgate_config::ToolConfig;
use intentgate_core::key::provider_key;
use intentgate_core::{CallStatus, KeyTemplate, ToolDefinition};
use intentgate_gate::{CallContext, LookupOutcome, Upstream, UpstreamCall};
use intentgate_http::spec::{LookupSpec, UpstreamSpec};
use serde_json::Value;

use crate::{
    CALL_MARGIN, LOOKUP_FIRST_VARIANT, LOOKUP_NEVER_VARIANT, LOOKUP_OTHER_VARIANT, Smoke, arguments,
};

/// Pages a listing lookup reads when its config does not say (as the HTTP upstream).
const LOOKUP_PAGES_DEFAULT: u32 = 5;

/// One intent of the check.
struct Probe {
    /// How it differs from the first intent: "the first intent", "the intent with another
    /// `amount`".
    label: String,
    arguments: Value,
    context: CallContext,
}

/// The intents of the check: those whose effects it makes, and those it never executes.
struct Probes {
    to_make: Vec<Probe>,
    never: Vec<Probe>,
}

/// An intent whose effect the check made: its key and the provider's id its call answered.
struct Made {
    probe: Probe,
    key: String,
    external_id: String,
}

/// What a problem says about the lookup, for the fix that follows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// It answered found with a record that is not the intent's own: another intent's, or
    /// for an intent never executed.
    Wrong,
    /// It found nothing (or half a record) for an intent whose effect the provider holds.
    Blind,
    /// Something else: the lookup failed, an effect could not be made.
    Other,
}

pub(crate) struct Problem {
    pub kind: Kind,
    pub text: String,
}

/// What the check found: problems (each fails the tool) and notes (what it could not check).
#[derive(Default)]
pub(crate) struct LookupCheck {
    pub problems: Vec<Problem>,
    pub notes: Vec<String>,
}

impl LookupCheck {
    fn problem(&mut self, kind: Kind, text: String) {
        self.problems.push(Problem { kind, text });
    }

    /// How to change the config, one line per kind of problem found.
    pub fn fixes(
        &self,
        config: &ToolConfig,
        lookup: &LookupSpec,
        definition: &ToolDefinition,
        upstreams: &BTreeMap<String, UpstreamSpec>,
    ) -> Vec<String> {
        let mut fixes = Vec::new();
        if self
            .problems
            .iter()
            .any(|problem| problem.kind == Kind::Wrong)
        {
            fixes.push(wrong_fix(lookup, definition));
        }
        if self
            .problems
            .iter()
            .any(|problem| problem.kind == Kind::Blind)
        {
            fixes.push(blind_fix(config, lookup, upstreams));
        }
        fixes
    }
}

impl Smoke {
    /// The lookup check of the tool `definition`'s `lookup`: make the probes' effects, then
    /// ask the lookup of each made intent and of each never-executed one.
    pub(crate) async fn check_lookup(
        &self,
        definition: &ToolDefinition,
        lookup: &LookupSpec,
    ) -> LookupCheck {
        let mut check = LookupCheck::default();
        let Some(template) = &definition.key else {
            check.problem(
                Kind::Other,
                "the tool has no intent key, so there are no intents to look up".to_owned(),
            );
            return check;
        };
        let Some(Probes { to_make, never }) = self.probes(definition, template, &mut check) else {
            return check;
        };
        let made = self.make_effects(definition, to_make, &mut check).await;
        if made.len() < 2 && check.problems.is_empty() {
            check.notes.push(
                "the lookup check made one intent only (no key argument can take another value), \
                 so whether the lookup tells intents apart was not checked"
                    .to_owned(),
            );
        }
        let bound = lookup_bound(definition, lookup);
        self.check_own_effects_found(definition, lookup, &made, bound, &mut check)
            .await;
        self.check_never_executed_not_found(definition, lookup, &made, never, bound, &mut check)
            .await;
        check
    }

    /// The intents of the check: the first one, one per key argument with another value, and
    /// (when the key has the intent id) one under another intent id; each with a
    /// never-executed twin where the schema allows a third value. `None` when no valid
    /// arguments can be made at all (the problem is in `check`).
    fn probes(
        &self,
        definition: &ToolDefinition,
        template: &KeyTemplate,
        check: &mut LookupCheck,
    ) -> Option<Probes> {
        let schema = &definition.input_schema;
        let first = match arguments::generate(schema, LOOKUP_FIRST_VARIANT, &self.tag) {
            Ok(first) => first,
            Err(error) => {
                check.problem(
                    Kind::Other,
                    format!("can't make valid arguments from the input schema: {error}"),
                );
                return None;
            }
        };
        let validator = intentgate_gate::schema::validator(schema).ok();
        let valid = |arguments: &Value| {
            validator
                .as_ref()
                .is_none_or(|validator| validator.is_valid(arguments))
        };
        let first_context = self.context(definition, LOOKUP_FIRST_VARIANT);
        let mut to_make = vec![Probe {
            label: "the first intent".to_owned(),
            arguments: first.clone(),
            context: first_context.clone(),
        }];
        let mut never = Vec::new();
        let mut names: Vec<&str> = Vec::new();
        for name in template.argument_names() {
            if !names.contains(&name) {
                names.push(name);
            }
        }
        for name in names {
            let Some(value) = first.get(name) else {
                check.notes.push(format!(
                    "the lookup check made no intent with another `{name}`: the smoke test's \
                     arguments leave that key argument out"
                ));
                continue;
            };
            let with = |other: Value| {
                let mut arguments = first.clone();
                arguments[name] = other;
                arguments
            };
            match arguments::alternative(schema, name, value, LOOKUP_OTHER_VARIANT, &self.tag)
                .map(with)
                .filter(|arguments| valid(arguments))
            {
                Some(arguments) => to_make.push(Probe {
                    label: format!("the intent with another `{name}`"),
                    arguments,
                    context: first_context.clone(),
                }),
                None => check.notes.push(format!(
                    "the lookup check made no intent with another `{name}`: its schema allows \
                     no other value the smoke test can make, so whether the lookup tells two \
                     intents apart by `{name}` was not checked"
                )),
            }
            if let Some(arguments) =
                arguments::alternative(schema, name, value, LOOKUP_NEVER_VARIANT, &self.tag)
                    .map(with)
                    .filter(|arguments| valid(arguments))
            {
                never.push(Probe {
                    label: format!("a never-executed intent with another `{name}`"),
                    arguments,
                    context: first_context.clone(),
                });
            }
        }
        if template.uses_intent_id() {
            // The same arguments under another intent id: the second charge of one amount
            // that the key tells apart, and no business field does.
            to_make.push(Probe {
                label: "the intent with the same arguments and another intent id".to_owned(),
                arguments: first.clone(),
                context: self.context(definition, LOOKUP_OTHER_VARIANT),
            });
            never.push(Probe {
                label: "a never-executed intent with the same arguments and another intent id"
                    .to_owned(),
                arguments: first,
                context: self.context(definition, LOOKUP_NEVER_VARIANT),
            });
        }
        Some(Probes { to_make, never })
    }

    /// The effects, one per intent: each call must answer done with its intent key and the
    /// provider's id, or there is nothing to look up for it.
    async fn make_effects(
        &self,
        definition: &ToolDefinition,
        to_make: Vec<Probe>,
        check: &mut LookupCheck,
    ) -> Vec<Made> {
        let mut made: Vec<Made> = Vec::new();
        for probe in to_make {
            let outcome = match self
                .call(definition, &probe.arguments, &probe.context)
                .await
            {
                Ok(outcome) => outcome,
                Err(error) => {
                    check.problem(
                        Kind::Other,
                        format!("making the effect of {}: {error}", probe.label),
                    );
                    continue;
                }
            };
            if !matches!(outcome.status, CallStatus::Done | CallStatus::AlreadyDone) {
                check.problem(
                    Kind::Other,
                    format!(
                        "making the effect of {} (arguments {}): the call answered {} ({}), so \
                         there is no effect to look up",
                        probe.label,
                        probe.arguments,
                        outcome.status.as_str(),
                        outcome.message
                    ),
                );
                continue;
            }
            let (Some(key), Some(external_id)) = (outcome.intent_key, outcome.external_id) else {
                check.problem(
                    Kind::Other,
                    format!(
                        "the call of {} answered done without the provider's id for the effect, \
                         so which record a lookup finds can't be told: point the call's \
                         `result.external_id` at the id in the provider's answer",
                        probe.label
                    ),
                );
                continue;
            };
            made.push(Made {
                probe,
                key,
                external_id,
            });
        }
        made
    }

    /// Each made intent's lookup finds its own effect, by the id its call answered.
    async fn check_own_effects_found(
        &self,
        definition: &ToolDefinition,
        lookup: &LookupSpec,
        made: &[Made],
        bound: Duration,
        check: &mut LookupCheck,
    ) {
        for intent in made {
            let outcome = self
                .look_up(
                    definition,
                    &intent.probe.arguments,
                    &intent.key,
                    &intent.probe.context,
                    bound,
                )
                .await;
            let who = format!("{} ({})", intent.probe.label, intent.key);
            match outcome {
                LookupOutcome::Found {
                    external_id: Some(id),
                    ..
                } if id == intent.external_id => {}
                LookupOutcome::Found { external_id, .. } => {
                    let (kind, found) = describe_found(external_id.as_deref(), made, lookup);
                    check.problem(
                        kind,
                        format!(
                            "the lookup of {who} found {found}, not its own effect {}: after an \
                             ambiguous failure it would settle the intent with somebody else's \
                             effect",
                            intent.external_id
                        ),
                    );
                }
                LookupOutcome::NotFound => check.problem(
                    Kind::Blind,
                    format!(
                        "the lookup of {who} found nothing, though the provider holds its effect \
                         {}: after an ambiguous failure the gateway could never settle such an \
                         intent, which stays unknown",
                        intent.external_id
                    ),
                ),
                LookupOutcome::Mismatch(reason) => check.problem(
                    Kind::Blind,
                    format!(
                        "the lookup of {who} did not accept its own effect {} as proved: \
                         {reason}",
                        intent.external_id
                    ),
                ),
                LookupOutcome::Failed(error) => {
                    check.problem(Kind::Other, format!("the lookup of {who} failed: {error}"))
                }
                LookupOutcome::Unsupported => check.problem(
                    Kind::Other,
                    format!("the lookup of {who} could not be sent (the tool has no HTTP lookup)"),
                ),
            }
        }
    }

    /// A never-executed intent's lookup finds nothing: a found record is somebody else's.
    async fn check_never_executed_not_found(
        &self,
        definition: &ToolDefinition,
        lookup: &LookupSpec,
        made: &[Made],
        never: Vec<Probe>,
        bound: Duration,
        check: &mut LookupCheck,
    ) {
        for probe in never {
            let key =
                match definition.render_key(&probe.arguments, probe.context.intent_id.as_deref()) {
                    Some(Ok(key)) => key,
                    Some(Err(error)) => {
                        check.problem(
                            Kind::Other,
                            format!("the key of {} could not be made: {error}", probe.label),
                        );
                        continue;
                    }
                    None => continue,
                };
            if made.iter().any(|intent| intent.key == key) {
                // The schema allowed only one other value: this intent was executed.
                continue;
            }
            let who = format!("{} ({key})", probe.label);
            match self
                .look_up(definition, &probe.arguments, &key, &probe.context, bound)
                .await
            {
                LookupOutcome::NotFound => {}
                LookupOutcome::Found { external_id, .. } => {
                    let (_, found) = describe_found(external_id.as_deref(), made, lookup);
                    check.problem(
                        Kind::Wrong,
                        format!(
                            "the lookup of {who} answered found with {found}: after an \
                             ambiguous failure of that intent, the gateway would answer it done \
                             with somebody else's effect, and never perform it"
                        ),
                    );
                }
                LookupOutcome::Mismatch(reason) => check.notes.push(format!(
                    "the lookup of {who} reported a mismatch ({reason}): it settles nothing, but \
                     an intent alike to another one's effect is reported to the tool's owner as \
                     a mismatch; proving records by the provider key (`key:`) tells them apart"
                )),
                LookupOutcome::Failed(error) => {
                    check.problem(Kind::Other, format!("the lookup of {who} failed: {error}"))
                }
                LookupOutcome::Unsupported => check.problem(
                    Kind::Other,
                    format!("the lookup of {who} could not be sent (the tool has no HTTP lookup)"),
                ),
            }
        }
    }
    /// The tool's lookup for one intent, as the gate sends it: the intent's provider key
    /// (smoke's intents are its tenant's, in their first epoch), intent key, intent id and
    /// arguments.
    async fn look_up(
        &self,
        definition: &ToolDefinition,
        arguments: &Value,
        key: &str,
        context: &CallContext,
        bound: Duration,
    ) -> LookupOutcome {
        let idempotency_key = provider_key(&self.tenant, &definition.name, key, 1);
        let call = UpstreamCall::for_intent(
            definition,
            arguments,
            key,
            Some(&idempotency_key),
            context.intent_id.as_deref(),
            1,
        );
        match tokio::time::timeout(bound, self.lookups.lookup(call)).await {
            Ok(outcome) => outcome,
            Err(_) => LookupOutcome::Failed(format!("no answer within {} s", bound.as_secs())),
        }
    }
}

/// The longest a lookup may take: each of its pages within the tool's timeout, and a margin.
fn lookup_bound(definition: &ToolDefinition, lookup: &LookupSpec) -> Duration {
    let pages = lookup
        .pages
        .as_ref()
        .map_or(1, |pages| pages.max.unwrap_or(LOOKUP_PAGES_DEFAULT));
    definition.timeout * pages + CALL_MARGIN
}

/// What a lookup found that is not the intent's own, for a person, and whether it proves the
/// lookup wrong: another intent's effect (by its id) is; a record with no id, or an id the
/// check did not make, is said as it is.
fn describe_found(external_id: Option<&str>, made: &[Made], lookup: &LookupSpec) -> (Kind, String) {
    match external_id {
        Some(id) => match made.iter().find(|intent| intent.external_id == id) {
            Some(other) => (
                Kind::Wrong,
                format!(
                    "the effect of {} ({}, intent {})",
                    other.probe.label, id, other.key
                ),
            ),
            None => (
                Kind::Wrong,
                format!("a record that no intent of this check made ({id})"),
            ),
        },
        None => (
            Kind::Other,
            format!(
                "a record without an id at its `external_id` pointer `{}` (point it at the \
                 provider's id, as the call's `result.external_id`)",
                lookup.external_id.as_deref().unwrap_or("/id")
            ),
        ),
    }
}

/// How to make a lookup that takes other intents' effects tell them apart.
fn wrong_fix(lookup: &LookupSpec, definition: &ToolDefinition) -> String {
    let template = definition.key.as_ref();
    let mut missing: Vec<String> = Vec::new();
    for name in template
        .into_iter()
        .flat_map(|template| template.argument_names())
    {
        let covered = lookup
            .match_fields
            .keys()
            .any(|argument| argument.split('.').next() == Some(name));
        if !covered && !missing.iter().any(|seen| seen == name) {
            missing.push(name.to_owned());
        }
    }
    let uses_intent_id = template.is_some_and(|template| template.uses_intent_id());
    let filters_by_key = lookup
        .query
        .values()
        .chain(lookup.headers.values())
        .any(|value| value.contains("{idempotency_key}"))
        || lookup.path.contains("{idempotency_key}");
    let mut why = match &lookup.key {
        None => "the lookup proves records by `match` alone".to_owned(),
        Some(pointer) => format!(
            "the lookup's `key: {pointer}` does not tell this intent's records from others'"
        ),
    };
    if lookup.key.is_none() && !missing.is_empty() {
        let names: Vec<String> = missing.iter().map(|name| format!("`{name}`")).collect();
        why.push_str(&format!(
            ", and its `match` leaves out the key's {}, so intents that differ only there look \
             alike",
            names.join(", ")
        ));
    }
    if lookup.key.is_none() && uses_intent_id {
        why.push_str(
            ", and the key has the application's intent id, which no business field carries (two \
             charges of one amount look alike)",
        );
    }
    let mut fix = format!(
        "{why}. Prove records by the provider key the gateway sends (`{{idempotency_key}}`, \
         scoped by tenant and tool): add `key: <pointer to it in a record>` to the lookup (the \
         provider's echo of the idempotency header, or send `metadata: {{idempotency_key: \
         \"{{idempotency_key}}\"}}` in the call's body and use `key: \
         /metadata/idempotency_key`)"
    );
    if !filters_by_key {
        fix.push_str(
            ", and where the provider can filter by it, ask for only that intent's records: \
             `query: {idempotency_key: \"{idempotency_key}\"}`",
        );
    }
    if lookup.key.is_none() && !missing.is_empty() {
        let example: Vec<String> = missing
            .iter()
            .map(|name| format!("{name}: {{record: <its pointer in a record>}}"))
            .collect();
        fix.push_str(&format!(
            "; for a provider that keeps no key, add every business field of the key to \
             `match` ({})",
            example.join(", ")
        ));
    }
    fix
}

/// How to make a lookup that finds nothing see the provider's records.
fn blind_fix(
    config: &ToolConfig,
    lookup: &LookupSpec,
    upstreams: &BTreeMap<String, UpstreamSpec>,
) -> String {
    let mut fix = format!(
        "compare the lookup with a record of the provider: the request (`{}`{}) must return \
         the effect, `found: {}` must point at the record or at the array of candidates",
        lookup.path,
        if lookup.query.is_empty() {
            String::new()
        } else {
            " and its `query`".to_owned()
        },
        lookup.found
    );
    if !lookup.match_fields.is_empty() {
        fix.push_str(
            ", every `match` field's `record:` pointer must hold the argument's value in a \
             record (a pointer to a field the record does not have never agrees)",
        );
    }
    if let Some(pointer) = &lookup.key {
        fix.push_str(&format!(
            ", and `key: {pointer}` must point at the provider key the gateway sent"
        ));
        let call = config.call.as_ref();
        let sends_key = call.is_some_and(|call| {
            call.body
                .as_ref()
                .is_some_and(|body| body.to_string().contains("{idempotency_key}"))
                || call
                    .query
                    .values()
                    .chain(call.headers.values())
                    .any(|value| value.contains("{idempotency_key}"))
        });
        if !sends_key {
            let header = call
                .and_then(|call| upstreams.get(&call.upstream))
                .map_or("Idempotency-Key", |upstream| {
                    upstream.idempotency_header.as_str()
                });
            fix.push_str(&format!(
                ": the call sends it only as the `{header}` header, so unless the provider keeps \
                 that header's value at `{pointer}` in its records, send it in the call's body \
                 (`metadata: {{idempotency_key: \"{{idempotency_key}}\"}}`) and point `key:` \
                 there"
            ));
        }
    }
    fix
}
