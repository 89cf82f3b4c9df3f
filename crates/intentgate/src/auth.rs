//! `intentgate auth new-key`: makes an API key for the `auth:` section of the config and
//! prints the key once, with the config lines that hold only its digest.

use anyhow::{Context, bail};
use intentgate_core::{Scope, Tenant};
use intentgate_server::auth::ApiKey;

use crate::cli::{AuthArgs, AuthCommand, NewKeyArgs};

/// Random bytes in a new API key: 256 bits, beyond guessing.
const KEY_BYTES: usize = 32;
/// What every key starts with, so that secret scanners and people recognise one.
const KEY_PREFIX: &str = "igk_";

pub fn run(arguments: AuthArgs) -> anyhow::Result<()> {
    match arguments.command {
        AuthCommand::NewKey(arguments) => new_key(arguments),
    }
}

fn new_key(arguments: NewKeyArgs) -> anyhow::Result<()> {
    let tenant = Tenant::parse(&arguments.tenant).context("--tenant")?;
    for scope in &arguments.scopes {
        if Scope::parse(scope).is_none() {
            bail!("--scopes: `{scope}` is not a scope; use call, intents:read or admin");
        }
    }
    if arguments.name.trim().is_empty() {
        bail!("--name: name the agent or service that will hold the key");
    }
    let mut random = [0u8; KEY_BYTES];
    getrandom::fill(&mut random).map_err(|error| {
        anyhow::anyhow!("reading random bytes from the operating system: {error}")
    })?;
    let key = format!("{KEY_PREFIX}{}", intentgate_core::hex::lower_hex(&random));
    let digest = ApiKey::digest_hex(&key);
    let scopes: Vec<String> = arguments
        .scopes
        .iter()
        .map(|scope| format!("\"{scope}\""))
        .collect();
    println!("key: {key}");
    println!(
        "(shown once: give it to the caller's secret store; the config keeps only its digest)"
    );
    println!();
    println!("auth:");
    println!("  api_keys:");
    println!(
        "    - name: {}",
        serde_json::to_string(arguments.name.trim())?
    );
    println!("      sha256: {digest}");
    println!("      tenant: {tenant}");
    println!("      scopes: [{}]", scopes.join(", "));
    Ok(())
}
