//! What the tests of several intentgate crates share, so that one fixture has one definition:
//! the `refund_order` tool, its variants and its arguments (`tools`), a SQLite ledger in a
//! temporary folder (`ledger`), a log writer tests read back (`log`), a gate over it and the
//! fake provider (`gate`), an HTTP client, tool calls and answers through a gateway's API
//! (`http`), samples read from a Prometheus scrape (`metrics`), refunds made at the mock
//! provider around the gateway (`provider`), and waiting for a condition in place of a fixed
//! sleep (`wait`).
//!
//! Only ever a dev-dependency: it unwraps and panics, as a test should, and is not published.

pub mod gate;
pub mod http;
pub mod ledger;
pub mod log;
pub mod metrics;
pub mod provider;
pub mod python;
pub mod tools;
pub mod wait;

pub use gate::{Harness, HarnessOptions, call, default_gate};
pub use ledger::TempLedger;
pub use log::CapturedLog;
pub use python::mcp_python;
pub use tools::{
    REFUND_KEY_TEMPLATE, client_tool, get_order_tool, refund, refund_needing_approval,
    refund_schema, refund_tool, refund_tool_with, send_email_tool,
};
pub use wait::wait_until;
