//! `intentgate smoke`: `intentgate_smoke`'s report printed as the command line asks, and an
//! exit status a deploy pipeline can gate on.
//!
//! Exit status: 0 when every tool passed, [`EXIT_FAILED`] when a check failed, 1 when the
//! smoke could not run.

use crate::cli::{SmokeArgs, SmokeFormat};

/// Exit status when a check failed (status 1 is a smoke that could not run).
pub const EXIT_FAILED: u8 = 2;

pub async fn run(arguments: SmokeArgs) -> anyhow::Result<()> {
    let report = intentgate_smoke::smoke_with(
        &arguments.config,
        arguments.live,
        arguments.mock_dialect.dialect(),
    )
    .await?;
    match arguments.format {
        SmokeFormat::Text => print!("{}", report.text()),
        SmokeFormat::Json => println!("{}", serde_json::to_string_pretty(&report)?),
    }
    let failed = report.tools_failed();
    if failed > 0 {
        return Err(intentgate_terminal::Exit::new(
            EXIT_FAILED,
            format!(
                "smoke failed: {failed} of {} side-effecting tools failed a check; do not deploy this config",
                report.tools_checked()
            ),
        )
        .into());
    }
    Ok(())
}
