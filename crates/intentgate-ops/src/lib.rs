//! Operations of intentgate (SPEC section 8): what catches, stops and names the victims of
//! an incident while it happens, instead of an hour later.
//!
//! - [`reconcile`]: compares the ledger with each side-effecting tool's provider records
//!   over a window, resolves what it can prove (an `unknown` intent the provider has) and
//!   reports every other mismatch, naming who was affected.
//! - [`alerts`]: duplicate-call rules over the gate's repeated-call events; a rule that fires
//!   tells the owner within seconds and may switch the tool off.
//! - [`notify`]: routes both to the tool's owner: a log line, and a webhook posted in the
//!   background.
//!
//! **API boundary:** this crate knows the ledger, the config's owners and list specs, and
//! the gate's metrics and events; it serves nothing. The binary runs it from `serve` (hourly
//! reconciliation, alerts) and from `intentgate reconcile`.

pub mod alerts;
pub mod notify;
pub mod reconcile;

use serde::Serialize;

pub use alerts::{Alert, AlertEngine};
pub use notify::{DeliveryStats, Notice, Notifier};
pub use reconcile::{
    Mismatch, MismatchKind, ReconcileOptions, Reconciler, RecordSource, Report, ToolReport,
    reconcile_tool,
};

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
