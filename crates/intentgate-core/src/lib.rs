//! The I/O-free heart of intentgate.
//!
//! Everything that decides *what* a retry-safe call does lives here: the effect classes,
//! tool definitions, intent-key templates with exact numbers and decimals, argument
//! fingerprints, the keyed hashes that stand in for sensitive arguments, the intent state
//! machine, the classification of what an upstream did, and the statuses the model sees.
//!
//! **Architecture invariant:** this crate performs no I/O. It depends on no async runtime,
//! no database and no HTTP library, never reads the clock and never draws randomness. Every
//! time value arrives as an argument. That keeps every rule here testable in isolation and
//! usable from any store or transport.

pub mod condition;
pub mod currency;
pub mod decimal;
pub mod duration;
pub mod effect;
pub mod fingerprint;
pub mod hex;
pub mod intent;
pub mod key;
pub mod limits;
pub mod number;
pub mod outcome;
pub mod placeholder;
pub mod policy;
pub mod principal;
pub mod sensitive;
pub mod status;
pub mod text;
pub mod tool;

pub use condition::{Condition, ConditionError};
pub use decimal::Decimal;
pub use effect::{Effect, Executor};
pub use fingerprint::{Fingerprint, differing_fields, fingerprint, fingerprint_for};
pub use intent::{IllegalTransition, IntentStatus};
pub use key::{KeyError, KeyTemplate};
pub use number::ExactNumber;
pub use outcome::{
    Ambiguity, Misconfiguration, OutcomeClass, ProviderSignals, RequestFacts, ResendStop,
    Unreachable, UpstreamObservation, classify, classify_with,
};
pub use policy::{ApprovalPolicy, BeyondBudget, Budget, BudgetScope, BudgetUsage, ToolPolicies};
pub use principal::{Principal, Scope, Scopes, Tenant, TenantError};
pub use sensitive::{ArgumentPath, HashKey, Redaction};
pub use status::{CallStatus, Messages, OutcomeReason};
pub use tool::{ToolDefinition, ToolError};
