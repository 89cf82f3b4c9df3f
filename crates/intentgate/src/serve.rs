//! `intentgate serve`: the gateway as an HTTP server, with MCP over Streamable HTTP at `/mcp`
//! and the admin API (on only with a token) at `/v1/admin/`.
//!
//! Glue only: the config and the command line's overrides become an
//! `intentgate_runtime::Gateway`, which is bound and served until a signal.

use anyhow::Context;
use intentgate_runtime::{Gateway, Options};

use crate::cli::ServeArgs;

pub async fn run(arguments: ServeArgs) -> anyhow::Result<()> {
    let loaded = intentgate_runtime::load(&arguments.config)?;
    // The admin API is on only with a token (never printed or logged).
    let admin_token = arguments.admin_token.map(|token| token.0);
    if let Some(token) = admin_token.as_deref().filter(|token| !token.is_empty()) {
        intentgate_admin::check_token(token).context("--admin-token (INTENTGATE_ADMIN_TOKEN)")?;
    }
    let options = Options {
        config_path: Some(arguments.config),
        listen: arguments.listen,
        ledger: arguments.ledger,
        durability: arguments.durability.map(Into::into),
        admin_token,
    };
    let server = Gateway::open(loaded, options).await?.bind().await?;
    // Installed before the address is printed: a signal sent as soon as it is read still
    // gets the graceful shutdown.
    let shutdown = intentgate_server::shutdown_signal();
    // Printed on stdout, alone on its line, so scripts and tests can read the port.
    println!("intentgate listening on http://{}", server.local_addr());
    server.run(shutdown).await?;
    Ok(())
}
