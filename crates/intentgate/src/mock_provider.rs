//! `intentgate mock-provider`: the mock payments provider as a server.

use anyhow::Context;
use intentgate_mock::{Dialect, MockOptions, serve};
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
    let dialect = Dialect::parse(&arguments.dialect)
        .with_context(|| format!("unknown dialect `{}`", arguments.dialect))?;
    let listener = TcpListener::bind(&arguments.listen)
        .await
        .with_context(|| {
            format!(
                "can't listen on {}: is another process using it?",
                arguments.listen
            )
        })?;
    let address = listener.local_addr()?;
    // Installed before the address is printed, as `serve` does.
    let shutdown = intentgate_server::shutdown_signal();
    // Printed on stdout, alone on its line, so scripts and tests can read the port.
    println!("mock provider listening on http://{address}");
    eprintln!("fault plan: {}", serde_json::to_string(&plan)?);
    if dialect == Dialect::Stripe {
        eprintln!("dialect: stripe (/v1/refunds and /v1/payment_intents speak Stripe's v1 API)");
    }
    serve(
        listener,
        MockOptions::new(plan).with_dialect(dialect),
        shutdown,
    )
    .await
    .context("the mock provider stopped")
}
