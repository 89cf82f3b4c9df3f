//! `intentgate mock-provider`: the mock payments provider as a server.

use anyhow::Context;
use intentgate_mock::{MockOptions, serve};
use tokio::net::TcpListener;

use crate::cli::MockProviderArgs;
use crate::faults;

pub async fn run(arguments: MockProviderArgs) -> anyhow::Result<()> {
    let mut plan = faults::plan(&arguments.faults)?;
    if let Some(seed) = arguments.seed {
        plan.seed = seed;
    }
    if let Some(scale) = arguments.latency_scale {
        plan.latency_scale = scale;
    }
    plan.validate().context("the fault plan")?;
    let listener = TcpListener::bind(&arguments.listen)
        .await
        .with_context(|| {
            format!(
                "can't listen on {}: is another process using it?",
                arguments.listen
            )
        })?;
    let address = listener.local_addr()?;
    // Printed on stdout, alone on its line, so scripts and tests can read the port.
    println!("mock provider listening on http://{address}");
    eprintln!("fault plan: {}", serde_json::to_string(&plan)?);
    serve(
        listener,
        MockOptions::new(plan),
        intentgate_server::shutdown_signal(),
    )
    .await
    .context("the mock provider stopped")
}
