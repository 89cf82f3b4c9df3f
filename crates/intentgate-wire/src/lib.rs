//! The outcome of a call as the edge sends it, over every interface: the HTTP API's body,
//! MCP's `structuredContent`, the schema MCP publishes as every tool's `outputSchema`, and
//! the OpenAPI document's `Outcome` are one type, [`Outcome`], built from the engine's
//! [`CallOutcome`](intentgate_gate::CallOutcome) in one `From`.
//!
//! **Architecture invariant**: the engine's types carry no schema (the core and the gate
//! depend on no schema library); this crate mirrors them field for field and publishes
//! their enums with the values taken from the core's own lists (`CallStatus::ALL`, ...), so
//! a status added there appears in every schema without anyone writing it down.
//!
//! **API boundary**: what is serialised here is a promise to callers, over HTTP and MCP
//! alike; the server and the MCP crate depend on this one and on neither of each other.

mod outcome;
pub mod schema;

pub use outcome::{Outcome, outcome_schema};
