//! `intentgate bench`: measurements of this machine against the SPEC targets (section 12).
//!
//! Each benchmark measures its own baseline in the same run and reports ratios to it, so
//! that figures from different machines compare. None of them is a timed test.

pub mod gateway;
pub mod ledger;

use crate::cli::{BenchArgs, BenchCommand};

/// Runs the benchmark the command line names.
pub async fn run(arguments: BenchArgs) -> anyhow::Result<()> {
    match arguments.command {
        BenchCommand::Ledger(arguments) => ledger::run(arguments).await,
        BenchCommand::Gateway(arguments) => gateway::run(arguments).await,
    }
}
