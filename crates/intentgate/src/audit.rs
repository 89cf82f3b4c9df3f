//! `intentgate audit`: `intentgate_audit`'s findings printed as the command line asks, and
//! an exit status a CI job can gate on.
//!
//! Exit status: 0 with no error-level finding, [`EXIT_FINDINGS`] with one, 1 when the audit
//! could not run (an unreadable file, an MCP server that does not answer).

use intentgate_audit::{Format, Inputs, Severity};

use crate::cli::{AuditArgs, AuditFormat};

/// Exit status when an error-level finding exists, so that CI fails the build.
pub const EXIT_FINDINGS: u8 = 2;

pub async fn run(arguments: AuditArgs) -> anyhow::Result<()> {
    let inputs = Inputs {
        config: arguments.config,
        prompts: arguments.prompts,
        mcp_server: arguments.mcp_server,
        latency: arguments.latency,
    };
    let findings = intentgate_audit::audit(&inputs).await?;
    let format = match arguments.format {
        AuditFormat::Text => Format::Text,
        AuditFormat::Json => Format::Json,
        AuditFormat::Sarif => Format::Sarif,
    };
    print!("{}", intentgate_audit::render(&findings, format));
    let errors = findings
        .iter()
        .filter(|finding| finding.severity == Severity::Error)
        .count();
    if errors > 0 {
        return Err(intentgate_terminal::Exit::new(
            EXIT_FINDINGS,
            format!("audit: {errors} error-level finding(s)"),
        )
        .into());
    }
    Ok(())
}
