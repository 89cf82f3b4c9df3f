//! The commands that only read the config or the ledger run without the upstreams'
//! secrets; the ones that call upstreams refuse to start without them, naming the variable
//! and where it is used.
//!
//! Regression: `config check` and `intents list` failed unless every `${SECRET}` was set, so
//! CI and an operator's shell had to fake secrets.

mod support;

use std::path::{Path, PathBuf};
use std::process::Output;

use support::{example_config, intentgate, success, with_setting};

/// The variable the test config's upstream credential needs, with no default.
const SECRET: &str = "PAYMENTS_API_KEY";
/// Where the config uses it.
const USED_IN: &str = "upstreams.payments.headers.Authorization";

/// The example config with its credential's default removed, in `folder`.
fn config_needing_a_secret(folder: &Path, ledger: &str) -> PathBuf {
    example_config(folder, |text| {
        let text = with_setting(&text, "ledger", ledger);
        assert!(text.contains("${PAYMENTS_API_KEY:-sk_test_mock}"));
        text.replace("${PAYMENTS_API_KEY:-sk_test_mock}", "${PAYMENTS_API_KEY}")
    })
}

/// `intentgate ARGS` with neither the credential nor the hash key in its environment.
fn without_secrets(args: &[&str]) -> Output {
    intentgate()
        .args(args)
        .env_remove(SECRET)
        .env_remove("INTENTGATE_HASH_KEY")
        .output()
        .unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn config_check_warns_about_each_unset_secret_and_passes() {
    let folder = tempfile::tempdir().unwrap();
    let config = config_needing_a_secret(folder.path(), "ledger.db");
    let output = without_secrets(&["config", "check", config.to_str().unwrap()]);
    let stdout = success(&output);
    assert!(stdout.contains(": ok, "), "{stdout}");
    assert!(stdout.contains("2 unset variables"), "{stdout}");
    let stderr = stderr(&output);
    for (name, field) in [
        (SECRET, USED_IN),
        ("INTENTGATE_HASH_KEY", "gateway.hash_key"),
    ] {
        assert!(
            stderr.contains(&format!(
                "warning: environment variable `{name}` (used in `{field}`) is not set"
            )),
            "{name} not named:\n{stderr}"
        );
    }
}

#[test]
fn read_only_commands_run_without_the_secrets() {
    let folder = tempfile::tempdir().unwrap();
    let ledger = folder.path().join("ledger.db");
    let config = config_needing_a_secret(folder.path(), ledger.to_str().unwrap());
    let config = config.to_str().unwrap();
    // `flags list` on a ledger no gateway has used yet, then `flags disable` creates it.
    success(&without_secrets(&["flags", "list", "--config", config]));
    success(&without_secrets(&[
        "flags",
        "disable",
        "refund_order",
        "--reason",
        "incident 7",
        "--config",
        config,
    ]));
    let listed = success(&without_secrets(&["flags", "list", "--config", config]));
    assert!(listed.contains("incident 7"), "{listed}");
    success(&without_secrets(&["intents", "list", "--config", config]));
    // The audit may find things to say about the example, but it runs (status 0 or 2, not
    // 1) and names the unset secret as a warning.
    let output = without_secrets(&["audit", "--format", "json", "--config", config]);
    assert!(
        matches!(output.status.code(), Some(0 | 2)),
        "audit could not run: {}",
        stderr(&output)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("unset-variable"), "{stdout}");
    assert!(stdout.contains(SECRET), "{stdout}");
}

#[test]
fn commands_that_call_upstreams_refuse_to_start_and_name_the_secret() {
    let folder = tempfile::tempdir().unwrap();
    let ledger = folder.path().join("ledger.db");
    let config = config_needing_a_secret(folder.path(), ledger.to_str().unwrap());
    let config = config.to_str().unwrap();
    for args in [
        &["serve", "--listen", "127.0.0.1:0", "--config", config][..],
        &["mcp", "--config", config],
        &["smoke", "--live", "--config", config],
        &["reconcile", "--config", config],
    ] {
        let output = without_secrets(args);
        assert!(
            !output.status.success(),
            "{} started without its secret",
            args[0]
        );
        let stderr = stderr(&output);
        assert!(
            stderr.contains(&format!("`{SECRET}` (used in `{USED_IN}`) is not set")),
            "{} does not name the secret:\n{stderr}",
            args[0]
        );
    }
    assert!(
        !ledger.exists(),
        "a command opened the ledger before refusing"
    );
}
