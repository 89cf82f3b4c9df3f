//! The Python of the venv `.ci/run` makes with the official MCP SDK
//! (`target/mcp-python-venv`), for tests that run an MCP server written with it.

use std::path::{Path, PathBuf};

/// The venv's Python, or `None` when it is missing outside CI: the caller's test is then
/// skipped, and says why. Under `CI=true` a missing venv fails the test instead.
pub fn mcp_python() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let python = root.join("target/mcp-python-venv/bin/python");
    if python.exists() {
        return Some(python);
    }
    let why = format!(
        "{} is missing: make it as .ci/run does (python3 -m venv target/mcp-python-venv; \
         target/mcp-python-venv/bin/pip install -r crates/intentgate-mcp/tests/python/requirements.txt)",
        python.display()
    );
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{why}");
    }
    eprintln!("skipped: {why}");
    None
}
