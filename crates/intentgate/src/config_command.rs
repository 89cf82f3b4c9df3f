//! `intentgate config schema|check`.

use std::collections::BTreeMap;

use intentgate_core::{Effect, Executor};

use crate::cli::{ConfigArgs, ConfigCommand};

pub fn run(arguments: ConfigArgs) -> anyhow::Result<()> {
    match arguments.command {
        ConfigCommand::Schema => {
            println!(
                "{}",
                serde_json::to_string_pretty(&intentgate_config::schema())?
            );
            Ok(())
        }
        ConfigCommand::Check { file } => {
            let loaded = intentgate_runtime::load(&file)?;
            let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
            for tool in &loaded.tools {
                *counts.entry(tool.effect.as_str()).or_default() += 1;
            }
            let count = |effect: Effect| counts.get(effect.as_str()).copied().unwrap_or(0);
            let clients = loaded
                .tools
                .iter()
                .filter(|tool| tool.executor == Executor::Client)
                .count();
            // Said only when there are any: the intent API is where their callers go.
            let executed_by_callers = if clients > 0 {
                format!(", {clients} executed by the caller's code through the intent API")
            } else {
                String::new()
            };
            println!(
                "{}: ok, {} tools ({} read, {} idempotent, {} side_effect{executed_by_callers})",
                file.display(),
                loaded.tools.len(),
                count(Effect::Read),
                count(Effect::Idempotent),
                count(Effect::SideEffect)
            );
            Ok(())
        }
    }
}
