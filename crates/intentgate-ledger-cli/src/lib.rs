//! The commands that work on a ledger directly, whether or not a gateway is running:
//! `intentgate intents` (list, show, resolve, reopen, erase), `intentgate approvals` (list,
//! approve, deny) and `intentgate flags` (the kill switch), with their clap arguments.
//!
//! Each opens the ledger the gateways use (`location.rs`: the config's `gateway.ledger`, or
//! `--ledger`), changes it only through the same `Ledger` and `intentgate_admin` rules as
//! the admin API, and prints a table or JSON on stdout. The binary wraps [`IntentsArgs`],
//! [`ApprovalsArgs`] and [`FlagsArgs`] and calls each module's `run`.

pub mod approvals;
pub mod flags;
pub mod intents;
mod location;

pub use approvals::ApprovalsArgs;
pub use flags::FlagsArgs;
pub use intents::IntentsArgs;
