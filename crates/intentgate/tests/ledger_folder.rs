//! Where the ledger is, whatever folder a command is started from: a relative
//! `gateway.ledger` is read from the config file's folder, a relative `--ledger` from the
//! working directory, and every command names the absolute file it opened.
//!
//! Regression: `gateway.ledger` used to be read from the working directory, so `serve`
//! started from another folder created a new, empty ledger, and a refund already done
//! answered `done` again (a second refund, stopped only by the provider's key window).

mod support;

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Stdio};

use serde_json::json;
use support::{call, client, example_config, intentgate, mock_provider, success, with_setting};

/// A gateway started from `folder`, and what it printed on stderr once stopped.
struct Gateway {
    child: Child,
    url: String,
}

impl Gateway {
    /// `intentgate serve --config CONFIG` from `folder`, with no `--ledger`.
    fn start(folder: &Path, config: &Path, mock_url: &str) -> Gateway {
        let mut child = intentgate()
            .current_dir(folder)
            .args(["serve", "--listen", "127.0.0.1:0", "--config"])
            .arg(config)
            .env("INTENTGATE_MOCK_URL", mock_url)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("intentgate starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .trim()
            .rsplit(' ')
            .next()
            .unwrap_or_default()
            .to_owned();
        assert!(
            url.starts_with("http://127.0.0.1:"),
            "serve printed {line:?}"
        );
        Gateway { child, url }
    }

    /// Kills it and returns its stderr.
    fn stop(mut self) -> String {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        let mut stderr = String::new();
        self.child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        stderr
    }
}

#[tokio::test]
async fn serve_from_another_folder_finds_the_ledger_next_to_its_config() {
    let config_folder = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let config = example_config(config_folder.path(), |text| {
        with_setting(&text, "ledger", "intentgate.db")
    });
    let ledger = std::fs::canonicalize(config_folder.path())
        .unwrap()
        .join("intentgate.db");
    let mock = mock_provider();
    let client = client();
    let refund =
        json!({"order_id": "order-8812", "amount": 20.0, "reason": "requested_by_customer"});

    let gateway = Gateway::start(config_folder.path(), &config, &mock.url);
    let first = call(&client, &gateway.url, "refund_order", refund.clone()).await;
    assert_eq!(first["status"], "done", "{first}");
    let stderr = gateway.stop();
    assert!(
        stderr.contains(&format!("(ledger {}, ", ledger.display())),
        "the startup line does not name the absolute ledger:\n{stderr}"
    );

    let gateway = Gateway::start(elsewhere.path(), &config, &mock.url);
    let again = call(&client, &gateway.url, "refund_order", refund).await;
    assert_eq!(
        again["status"], "already_done",
        "a second ledger was used: {again}"
    );
    let stderr = gateway.stop();
    assert!(
        stderr.contains(&format!("(ledger {}, ", ledger.display())),
        "{stderr}"
    );
    assert!(
        !elsewhere.path().join("intentgate.db").exists(),
        "a ledger was created in the working directory"
    );

    // `intents list` from the other folder reads the same file, and says which.
    let output = intentgate()
        .current_dir(elsewhere.path())
        .args(["intents", "list", "--format", "json", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let listed = success(&output);
    assert_eq!(listed.lines().count(), 1, "{listed}");
    assert!(listed.contains("order-8812"), "{listed}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("ledger: {}", ledger.display())),
        "{stderr}"
    );
}

#[test]
fn a_relative_ledger_on_the_command_line_is_read_from_the_working_directory() {
    let folder = tempfile::tempdir().unwrap();
    let config = example_config(folder.path(), |text| {
        with_setting(&text, "ledger", "/nonexistent/not-this-one.db")
    });
    let absolute = std::fs::canonicalize(folder.path()).unwrap();
    // `flags list` on a ledger that does not exist yet creates none, and names the file.
    let output = intentgate()
        .current_dir(&absolute)
        .args(["flags", "list", "--ledger", "cli.db", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    success(&output);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("ledger: {}", absolute.join("cli.db").display())),
        "{stderr}"
    );
    assert!(!absolute.join("cli.db").exists());
}
