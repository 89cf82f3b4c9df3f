//! `intentgate mcp`: the gateway as an MCP server on stdin and stdout, started by an agent
//! (a desktop client, an agent framework) as its tool server.
//!
//! Glue only, like `serve`: the config and the command line's overrides become an
//! `intentgate_runtime::Gateway`, served on stdio. stdout is the protocol: everything else
//! this command says goes to stderr.

use intentgate_runtime::{Gateway, Options};

use crate::cli::McpArgs;

pub async fn run(arguments: McpArgs) -> anyhow::Result<()> {
    let loaded = intentgate_runtime::load(&arguments.config)?;
    let options = Options {
        config_path: Some(arguments.config),
        ledger: arguments.ledger,
        durability: arguments.durability.map(Into::into),
        ..Options::default()
    };
    Gateway::open(loaded, options)
        .await?
        .serve_stdio(intentgate_server::shutdown_signal())
        .await?;
    // Every call has ended (or the grace period has). When stdin is not a pipe, tokio reads
    // it on a blocking thread that nothing can interrupt, and the runtime would wait for
    // that read at exit: a stopped server would hang until its client writes or closes.
    let _ = std::io::Write::flush(&mut std::io::stdout());
    // `exit` skips what `main` does at the end: the last spans are sent here.
    tokio::task::block_in_place(intentgate_runtime::telemetry::shutdown);
    std::process::exit(0)
}
