//! `intentgate demo`: reads the fault plan `--faults` names and runs the demo
//! (`intentgate_demo`).

use intentgate_demo::DemoArgs;

use crate::faults;

pub async fn run(arguments: DemoArgs) -> anyhow::Result<()> {
    let plan = faults::plan(&arguments.faults)?;
    intentgate_demo::run(arguments, plan).await
}
