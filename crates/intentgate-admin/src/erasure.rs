//! Erasing a tenant's data on request (a customer who leaves, a data-protection request),
//! shared by the admin API (`POST /v1/admin/erasures`) and `intentgate intents erase`.
//!
//! [`Ledger::erase`] deletes one batch per call; [`erase_all`] calls it until nothing is
//! left, sums what it deleted and writes one log line with the counts, the actor and the
//! reason (never a key, an argument or a result), for an auditor. The ledger refuses, with
//! nothing deleted by that call, while a call holds one of the intents or (without `force`)
//! while one is not settled: an erased intent is forgotten, and one whose effect may have
//! happened would then be executed again by a repeat of its call.

use intentgate_core::limits::{
    ACTOR_LENGTH_MAX, EVENT_DETAIL_LENGTH_MAX, INTENT_KEY_LENGTH_MAX, TENANT_LENGTH_MAX,
    TOOL_NAME_LENGTH_MAX,
};
use intentgate_ledger::{Erase, Erased, Erasure, IntentId, Ledger, LedgerError};
use serde::Serialize;

/// Most batches one erasure runs (each at most `ERASE_BATCH_MAX` intents): a hundred
/// million intents. A tenant with more, or one whose calls keep arriving, is left with
/// `more` set, to be erased by asking again.
pub const ERASE_ROUNDS_MAX: u32 = 100_000;

/// What [`erase_all`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ErasureReport {
    /// Everything erased, over every batch; `more` when [`ERASE_ROUNDS_MAX`] stopped it.
    pub erased: Erased,
    /// Why it stopped before the end: a batch was refused (what the earlier batches erased
    /// stays erased).
    pub refused: Option<Refusal>,
}

/// Why intents were not erased, with the first of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "why")]
pub enum Refusal {
    /// A call holds these intents right now.
    Busy { ids: Vec<IntentId> },
    /// These intents are not settled, and `force` was not given.
    Unsettled { ids: Vec<IntentId> },
}

impl Refusal {
    /// What happened and what to do, for an operator.
    pub fn message(&self) -> String {
        match self {
            Refusal::Busy { ids } => format!(
                "a call is running for intent{} {} right now; erase again once it has finished",
                plural(ids),
                list(ids)
            ),
            Refusal::Unsettled { ids } => format!(
                "intent{} {} {} not settled (pending, in flight or unknown): the effect may have \
                 happened, and once erased the gateway would forget it and a repeat of the call \
                 would execute again; resolve {} first (`intentgate intents resolve ID`, after \
                 checking the provider), or erase with force",
                plural(ids),
                list(ids),
                if ids.len() == 1 { "is" } else { "are" },
                if ids.len() == 1 { "it" } else { "them" }
            ),
        }
    }
}

fn plural(ids: &[IntentId]) -> &'static str {
    if ids.len() == 1 { "" } else { "s" }
}

fn list(ids: &[IntentId]) -> String {
    ids.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Checks an erasure before the ledger is asked: a tenant, a key only with a tool, a reason
/// and an actor, each within the ledger's limits. The message says what to change.
pub fn check_erase(erase: &Erase) -> Result<(), String> {
    let bounded = |what: &str, text: &str, limit: usize| {
        if text.len() > limit {
            Err(format!(
                "{what} is {} bytes long; the limit is {limit}",
                text.len()
            ))
        } else {
            Ok(())
        }
    };
    if erase.tenant.is_empty() {
        return Err("say whose data to erase: a tenant is required".to_owned());
    }
    bounded("the tenant", &erase.tenant, TENANT_LENGTH_MAX)?;
    if let Some(tool) = &erase.tool {
        bounded("the tool", tool, TOOL_NAME_LENGTH_MAX)?;
    }
    if let Some(key) = &erase.key {
        if erase.tool.is_none() {
            return Err("a key belongs to a tool: give the tool too".to_owned());
        }
        bounded("the key", key, INTENT_KEY_LENGTH_MAX)?;
    }
    if erase.reason.trim().is_empty() {
        return Err(
            "a reason is required: say why the data is erased (the request it answers); it is \
             kept in the event log, so name no personal data in it"
                .to_owned(),
        );
    }
    bounded("the reason", &erase.reason, EVENT_DETAIL_LENGTH_MAX)?;
    if erase.actor.trim().is_empty() {
        return Err("an actor is required: who asks for the erasure".to_owned());
    }
    bounded("the actor", &erase.actor, ACTOR_LENGTH_MAX)
}

/// Erases everything `erase` selects, batch by batch, and logs what it did.
pub async fn erase_all(ledger: &dyn Ledger, erase: &Erase) -> Result<ErasureReport, LedgerError> {
    let mut erased = Erased::default();
    let mut refused = None;
    for _ in 0..ERASE_ROUNDS_MAX {
        match ledger.erase(erase).await? {
            Erasure::Erased(batch) => {
                erased.intents += batch.intents;
                erased.events += batch.events;
                erased.mismatches += batch.mismatches;
                erased.more = batch.more;
                if !batch.more {
                    break;
                }
            }
            Erasure::Busy { ids } => {
                refused = Some(Refusal::Busy { ids });
                break;
            }
            Erasure::Unsettled { ids } => {
                refused = Some(Refusal::Unsettled { ids });
                break;
            }
        }
    }
    tracing::warn!(
        tenant = %erase.tenant,
        tool = erase.tool.as_deref().unwrap_or("*"),
        one_key = erase.key.is_some(),
        intents = erased.intents,
        events = erased.events,
        mismatches = erased.mismatches,
        more = erased.more,
        refused = refused.is_some(),
        force = erase.force,
        actor = %erase.actor,
        reason = %erase.reason,
        "erased data from the intent ledger on request"
    );
    Ok(ErasureReport { erased, refused })
}
