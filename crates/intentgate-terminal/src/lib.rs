//! What intentgate's commands share at the terminal: the binary and the command libraries
//! (the benchmarks, the demo, the ledger commands) print every table and every time the same
//! way, and read the same flag values the same way.
//!
//! [`table`] renders plain tables (columns two spaces apart, no borders); [`time`] writes the
//! ledger's millisecond timestamps in UTC; [`DurabilityArgument`] is `--durability`, which
//! `serve`, `mcp` and the benchmarks take; [`Exit`] is a verdict with its own exit status,
//! which `main` prints as it is. Nothing here does I/O.

mod durability;
mod exit;
pub mod table;
pub mod time;

pub use durability::DurabilityArgument;
pub use exit::Exit;
