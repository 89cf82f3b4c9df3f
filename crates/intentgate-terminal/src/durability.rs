//! The ledger's durability as the `--durability` flag of `serve`, `mcp` and the benchmarks.

use clap::ValueEnum;
use intentgate_ledger::Durability;

/// The ledger's durability as a flag value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DurabilityArgument {
    /// The write before the upstream call is on disk (fsync) before the request leaves.
    Strict,
    /// No fsync: survives a crash of the process, not a power loss.
    Relaxed,
}

impl DurabilityArgument {
    /// The name used on the command line and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            DurabilityArgument::Strict => "strict",
            DurabilityArgument::Relaxed => "relaxed",
        }
    }
}

impl From<DurabilityArgument> for Durability {
    fn from(argument: DurabilityArgument) -> Durability {
        match argument {
            DurabilityArgument::Strict => Durability::Strict,
            DurabilityArgument::Relaxed => Durability::Relaxed,
        }
    }
}
