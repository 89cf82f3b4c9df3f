//! Fault plans named on the command line: a preset or a JSON file.

use std::path::Path;

use anyhow::Context;
use intentgate_mock::HttpFaultPlan;

/// `none`, `quiet`, `stormy`, or a path to a JSON plan.
pub fn plan(name: &str) -> anyhow::Result<HttpFaultPlan> {
    let plan = match name {
        "none" => HttpFaultPlan::default(),
        "quiet" => HttpFaultPlan::quiet(),
        "stormy" => HttpFaultPlan::stormy(),
        path => {
            let text = std::fs::read_to_string(Path::new(path)).with_context(|| {
                format!("--faults `{path}` is neither none, quiet, stormy nor a readable JSON file")
            })?;
            serde_json::from_str(&text).with_context(|| {
                format!("{path} is not a fault plan (see docs/mock-provider.md for its fields)")
            })?
        }
    };
    plan.validate()
        .with_context(|| format!("fault plan `{name}`"))?;
    Ok(plan)
}
