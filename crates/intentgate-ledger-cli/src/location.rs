//! Which ledger the ledger commands work on (`--config` or `--ledger`), and opening it.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::Args;
use intentgate_ledger::{Durability, Ledger};

/// Which ledger: the config's `gateway.ledger`, or --ledger.
#[derive(Debug, Args)]
pub struct IntentsLedgerArgs {
    /// The tool config (YAML) of the gateways: its `gateway.ledger` is the ledger read (a
    /// relative path from the config file's folder). Its upstreams' secrets (`${NAME}`)
    /// need not be set: these commands call no upstream.
    #[arg(long, env = "INTENTGATE_CONFIG")]
    pub config: Option<PathBuf>,
    /// The ledger (overrides the config's `gateway.ledger`): a SQLite file, or a PostgreSQL
    /// URL. The one the gateways use. A relative path is read from the working directory;
    /// the absolute one is printed on stderr.
    #[arg(long, env = "INTENTGATE_LEDGER")]
    pub ledger: Option<String>,
}

/// Opens the ledger named by `--ledger`, or by the config's `gateway.ledger`. A SQLite file
/// must exist already: a mistyped path must not create an empty ledger and list nothing.
pub async fn open(location: &IntentsLedgerArgs) -> anyhow::Result<(Arc<dyn Ledger>, String)> {
    let (ledger_location, durability) = match (&location.ledger, &location.config) {
        (Some(ledger), _) => (
            intentgate_runtime::ledger_location(Some(ledger), ledger),
            Durability::Strict,
        ),
        (None, Some(config)) => {
            // Only its ledger is read: no hash key and no upstream secret needed.
            let loaded = intentgate_runtime::load_reading(
                config,
                &intentgate_config::HashKeySource::NotNeeded,
            )?;
            let gateway = &loaded.config.gateway;
            (
                intentgate_runtime::ledger_location(None, &gateway.ledger),
                intentgate_runtime::durability(gateway.durability),
            )
        }
        (None, None) => bail!(
            "say which ledger: --config FILE (its gateway.ledger) or --ledger PATH_OR_URL, \
or set INTENTGATE_CONFIG or INTENTGATE_LEDGER"
        ),
    };
    let shown = intentgate_ledger::display_location(&ledger_location);
    // On stderr, so that the listing on stdout stays what a script reads.
    eprintln!("ledger: {shown}");
    if !intentgate_ledger::Location::parse(&ledger_location).exists() {
        bail!(
            "there is no ledger at {shown}: give the path of the gateway's ledger file \
(gateway.ledger of its config, or its --ledger)"
        );
    }
    let ledger = intentgate_ledger::open(&ledger_location, durability)
        .await
        .with_context(|| format!("opening the intent ledger at {shown}"))?;
    Ok((ledger, shown))
}
