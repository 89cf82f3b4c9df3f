//! Effect classes: the one field that tells the gateway how dangerous a tool is.

use serde::{Deserialize, Serialize};

/// What calling a tool does to the world, and so how the gateway may retry it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// Changes nothing (get_order). Retried freely on failure, bounded, with backoff.
    Read,
    /// Repeating it with the same arguments changes nothing more (set_ticket_status).
    /// Retried with exactly the same arguments, bounded.
    Idempotent,
    /// Each execution acts (refund_order, charge_card, send_email). Goes through the intent
    /// ledger and is never retried blindly.
    SideEffect,
}

impl Effect {
    /// The name used in configs, logs and the ledger.
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::Read => "read",
            Effect::Idempotent => "idempotent",
            Effect::SideEffect => "side_effect",
        }
    }
}

/// Who performs a side-effecting tool's request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Executor {
    /// The gateway sends the tool's configured request itself (`call`, `lookup`, `list`).
    #[default]
    Gateway,
    /// The caller's own code performs the effect (an SDK call, a database write) under the
    /// gateway's ledger and leases, through the intent API: it asks for a grant, executes or
    /// looks up with the provider key it was given, and settles what it learned. The gateway
    /// can neither look such an intent up nor re-send it.
    Client,
}

impl Executor {
    /// The name used in configs and the HTTP API.
    pub fn as_str(self) -> &'static str {
        match self {
            Executor::Gateway => "gateway",
            Executor::Client => "client",
        }
    }
}
