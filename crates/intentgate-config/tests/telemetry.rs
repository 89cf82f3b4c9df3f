//! The `telemetry:` section, as `serve` and `mcp` read it before logging starts: its
//! `${NAME}` references resolved, absent or unreadable as "off" (the full check reports a
//! broken file), and a header whose variable is unset as an error naming the header.

use std::path::PathBuf;

use intentgate_config::{TelemetryConfig, telemetry_section};

/// `text` written to a file of its own under the system's temporary folder.
fn written(name: &str, text: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!(
        "intentgate-telemetry-{}-{name}.yaml",
        std::process::id()
    ));
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn the_section_is_read_with_its_references_resolved() {
    let path = written(
        "resolved",
        "tools: []\ntelemetry:\n  endpoint: http://127.0.0.1:4318\n  service_name: gw\n  headers: {x-team: \"${INTENTGATE_TEST_UNSET_TEAM:-payments}\"}\n",
    );
    let section = telemetry_section(&path).unwrap();
    assert_eq!(section.endpoint.as_deref(), Some("http://127.0.0.1:4318"));
    assert_eq!(section.service_name.as_deref(), Some("gw"));
    assert_eq!(section.headers["x-team"], "payments");
    std::fs::remove_file(path).unwrap();
}

#[test]
fn no_section_or_a_file_that_does_not_parse_is_off() {
    let none = written("none", "tools: []\n");
    assert_eq!(
        telemetry_section(&none).unwrap(),
        TelemetryConfig::default()
    );
    let broken = written("broken", "tools: [\n");
    assert_eq!(
        telemetry_section(&broken).unwrap(),
        TelemetryConfig::default()
    );
    let missing = std::env::temp_dir().join("intentgate-telemetry-no-such-file.yaml");
    assert_eq!(
        telemetry_section(&missing).unwrap(),
        TelemetryConfig::default()
    );
    std::fs::remove_file(none).unwrap();
    std::fs::remove_file(broken).unwrap();
}

#[test]
fn a_header_whose_variable_is_unset_is_an_error_naming_it() {
    let path = written(
        "unset",
        "telemetry:\n  endpoint: http://127.0.0.1:4318\n  headers: {x-api-key: \"${INTENTGATE_TEST_UNSET_KEY}\"}\n",
    );
    let error = telemetry_section(&path).unwrap_err();
    assert!(error.contains("telemetry.headers.x-api-key"), "{error}");
    assert!(error.contains("INTENTGATE_TEST_UNSET_KEY"), "{error}");
    std::fs::remove_file(path).unwrap();
}
