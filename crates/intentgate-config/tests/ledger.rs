//! Where a config's ledger is: a relative `gateway.ledger` is read from the config file's
//! folder. It used to be read from the working directory, so a gateway started from another
//! folder created a new, empty ledger and answered a refund already done as a new one.

use std::path::Path;

use intentgate_config::{HashKeySource, load_file_with};

const TOOLS: &str = r#"upstreams:
  payments: {base_url: "http://127.0.0.1:8090", honours_idempotency_keys: true}
tools:
  - name: get_order
    description: Read an order.
    effect: read
    input_schema: {type: object, properties: {order_id: {type: string}}, required: [order_id]}
    call: {upstream: payments, method: GET, path: "/v1/orders/{order_id}"}
"#;

fn ledger_of(config: &Path) -> String {
    load_file_with(config, &HashKeySource::NotNeeded)
        .unwrap_or_else(|errors| panic!("{errors}"))
        .config
        .gateway
        .ledger
}

#[test]
fn a_relative_ledger_is_read_from_the_config_folder_not_the_working_directory() {
    let folder = tempfile::tempdir().unwrap();
    let config = folder.path().join("agent.yaml");
    std::fs::write(
        &config,
        format!("gateway:\n  ledger: data/ledger.db\n{TOOLS}"),
    )
    .unwrap();
    let expected = std::fs::canonicalize(folder.path())
        .unwrap()
        .join("data/ledger.db");
    assert_eq!(Path::new(&ledger_of(&config)), expected);
    // Without `ledger:` the default file is in the config's folder too.
    std::fs::write(&config, TOOLS).unwrap();
    let expected = std::fs::canonicalize(folder.path())
        .unwrap()
        .join("intentgate.db");
    assert_eq!(Path::new(&ledger_of(&config)), expected);
}

#[test]
fn an_absolute_ledger_and_a_database_url_are_as_written() {
    let folder = tempfile::tempdir().unwrap();
    let config = folder.path().join("agent.yaml");
    for ledger in [
        "/var/lib/intentgate/ledger.db",
        "postgres://alice:s3cret@db:5432/ledger",
        "postgresql://db/ledger",
    ] {
        std::fs::write(
            &config,
            format!("gateway:\n  ledger: \"{ledger}\"\n{TOOLS}"),
        )
        .unwrap();
        assert_eq!(ledger_of(&config), ledger);
    }
}
