//! Operations of intentgate (docs/design.md section 8): what catches, stops and names the victims of
//! an incident while it happens, instead of an hour later.
//!
//! - [`reconcile`]: compares the ledger with each side-effecting tool's provider records
//!   over a window, resolves what it can prove (an `unknown` intent the provider has) and
//!   reports every other mismatch, naming who was affected.
//! - [`alerts`]: duplicate-call rules over the gate's repeated-call events; a rule that fires
//!   tells the owner within seconds and may switch the tool off.
//! - [`upstream_errors`]: the gate's upstream errors that are the operator's (a wrong
//!   credential, a route that does not exist, an upstream it can't reach), told to the tool's
//!   owner at once and at most once per tool and kind every few minutes.
//! - [`lookup_mismatches`]: lookups that found a record half an intent's (its provider key
//!   with other fields, or its fields under another key), told to the tool's owner, once per
//!   intent per hour.
//! - [`key_reuses`]: attempts the provider refused because their idempotency key was first
//!   used with other parameters (two requests share a key), told to the tool's owner at once.
//! - [`held`]: calls held for approval, told to the tool's owner with a link to decide.
//! - [`notify`]: routes all of them to the tool's owner: a log line, and a webhook posted in
//!   the background; and keeps each in the ledger's history of notices (`history.rs`),
//!   which every replica lists.
//!
//! **API boundary:** this crate knows the ledger, the config's owners and list specs, and
//! the gate's metrics and events; it serves nothing. The binary runs it from `serve` (hourly
//! reconciliation, alerts) and from `intentgate reconcile`.

pub mod alerts;
pub mod held;
mod history;
pub mod key_reuses;
pub mod lookup_mismatches;
pub mod notify;
pub mod reconcile;
pub mod told;
pub mod upstream_errors;

use serde::Serialize;

pub use alerts::{Alert, AlertEngine};
pub use held::HeldNotices;
pub use key_reuses::KeyReuseNotices;
pub use lookup_mismatches::MismatchNotices;
pub use notify::{DeliveryStats, Notice, Notifier};
pub use reconcile::{
    Mismatch, MismatchKind, ReconcileOptions, Reconciler, RecordSource, Report, ToolReport,
    reconcile_tool,
};
pub use upstream_errors::UpstreamNotices;

/// How urgent a notice is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Done and recorded; nothing to do (an unknown intent resolved by proof).
    Info,
    /// Someone must look (an unknown intent the provider does not have, a bypass).
    Warning,
    /// A customer was affected twice, or was told something untrue: act now.
    Critical,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }
}
