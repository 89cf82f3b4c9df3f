//! What the gateway tests share: the example gateway, its upstream a mock provider.

use std::path::{Path, PathBuf};

use intentgate_config::HashKeySource;
use intentgate_runtime::{Gateway, Options};

/// The example config the gateway runs.
const EXAMPLE_CONFIG: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/support-agent.yaml"
);

/// The example config with its payments upstream at `mock_url`, written into `folder`.
fn config_file(folder: &Path, mock_url: &str) -> PathBuf {
    let text = std::fs::read_to_string(EXAMPLE_CONFIG).unwrap();
    let upstream = "${INTENTGATE_MOCK_URL:-http://127.0.0.1:8090}";
    assert!(text.contains(upstream), "the example's payments base_url");
    let path = folder.join("gateway.yaml");
    std::fs::write(&path, text.replace(upstream, mock_url)).unwrap();
    path
}

/// The example gateway opened over a SQLite ledger in `folder`, its payments upstream at
/// `mock_url`, listening on a free loopback port, with `admin_token`.
pub async fn open_example(folder: &Path, mock_url: &str, admin_token: Option<String>) -> Gateway {
    let path = config_file(folder, mock_url);
    // No hash key in the test's environment: the ledger is thrown away with the folder.
    let hash_key =
        HashKeySource::EnvironmentOrEphemeral(intentgate_runtime::ephemeral_hash_key().unwrap());
    let loaded = intentgate_runtime::load_with(&path, &hash_key).unwrap();
    let options = Options {
        config_path: Some(path),
        listen: Some("127.0.0.1:0".to_owned()),
        ledger: Some(folder.join("ledger.db").display().to_string()),
        admin_token,
        ..Options::default()
    };
    Gateway::open(loaded, options).await.unwrap()
}
