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
            // A check calls no upstream: an unset secret is a warning, so CI and an
            // operator's shell need none. A hash key that is set is still checked.
            let loaded = intentgate_runtime::load_reading(
                &file,
                &intentgate_config::HashKeySource::Environment,
            )?;
            for unset in &loaded.unset {
                eprintln!("{unset}");
            }
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
            // Imported tools are known only once their servers list them, at start.
            let imports = match loaded.config.imports.len() {
                0 => String::new(),
                count => format!(
                    ", and {} (their tools are listed when the gateway starts; `intentgate \
                     audit` lists them now)",
                    plural(count, "MCP import", "MCP imports")
                ),
            };
            let warnings = match loaded.unset.len() {
                0 => String::new(),
                count => format!(
                    "; {} (above): set before serve",
                    plural(count, "unset variable", "unset variables")
                ),
            };
            println!(
                "{}: ok, {} ({} read, {} idempotent, {} side_effect{executed_by_callers}){imports}{warnings}",
                file.display(),
                plural(loaded.tools.len(), "tool", "tools"),
                count(Effect::Read),
                count(Effect::Idempotent),
                count(Effect::SideEffect)
            );
            Ok(())
        }
    }
}

/// "1 tool", "2 tools".
fn plural(count: usize, one: &str, many: &str) -> String {
    if count == 1 {
        format!("1 {one}")
    } else {
        format!("{count} {many}")
    }
}
