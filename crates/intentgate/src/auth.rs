//! The `auth:` section at work: `serve` turns it into the server's authenticator, and
//! `intentgate auth new-key` makes keys for it.
//!
//! `auth: none` is refused here for a listener that is not on loopback: without
//! credentials, any host that reaches the port would be the one tenant.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use intentgate_config::{AuthConfig, Config};
use intentgate_core::{Scope, Scopes, Tenant};
use intentgate_server::auth::{
    ActFor, ApiKey, AuthOptions, Authenticator, JwksSource, JwtOptions, TrustedProxyOptions,
};

use crate::cli::{AuthArgs, AuthCommand, NewKeyArgs};

/// Random bytes in a new API key: 256 bits, beyond guessing.
const KEY_BYTES: usize = 32;
/// What every key starts with, so that secret scanners and people recognise one.
const KEY_PREFIX: &str = "igk_";

/// The authenticator of a config for a server listening on `address`.
pub fn authenticator(config: &Config, address: SocketAddr) -> anyhow::Result<Authenticator> {
    let options = match &config.auth {
        AuthConfig::None => {
            if !address.ip().is_loopback() {
                bail!(
                    "`auth: none` serves every caller as one tenant, so it is allowed only on a \
                     loopback address, and this gateway listens on {address}. Listen on \
                     127.0.0.1, or configure `auth:` with api_keys, jwt or trusted_proxy \
                     (`intentgate auth new-key` makes a key)"
                );
            }
            AuthOptions::None {
                tenant: Tenant::parse(&config.gateway.tenant).context("gateway.tenant")?,
            }
        }
        AuthConfig::Methods(methods) => AuthOptions::Methods {
            api_keys: methods
                .api_keys
                .iter()
                .map(|key| {
                    Ok(ApiKey {
                        name: key.name.clone(),
                        digest: ApiKey::parse_digest(&key.sha256)
                            .context("an API key digest the config check passed")?,
                        tenant: Tenant::parse(&key.tenant)?,
                        scopes: scopes(&key.scopes),
                        act_for: if key.act_for.iter().any(|tenant| tenant == "*") {
                            ActFor::Any
                        } else if key.act_for.is_empty() {
                            ActFor::Own
                        } else {
                            ActFor::Tenants(
                                key.act_for
                                    .iter()
                                    .map(|tenant| Tenant::parse(tenant))
                                    .collect::<Result<_, _>>()?,
                            )
                        },
                    })
                })
                .collect::<anyhow::Result<_>>()?,
            jwt: methods
                .jwt
                .as_ref()
                .map(|jwt| -> anyhow::Result<JwtOptions> {
                    Ok(JwtOptions {
                        jwks: match (&jwt.jwks_url, &jwt.jwks_file) {
                            (Some(url), _) => JwksSource::Url(url.clone()),
                            (None, Some(file)) => JwksSource::File(PathBuf::from(file)),
                            (None, None) => bail!("auth.jwt has no JWKS"),
                        },
                        issuer: jwt.issuer.clone(),
                        audience: jwt.audience.clone(),
                        tenant_claim: jwt.tenant_claim.clone(),
                        algorithms: jwt
                            .algorithms
                            .iter()
                            .map(|name| name.parse().context("a checked algorithm name"))
                            .collect::<anyhow::Result<_>>()?,
                        leeway: Duration::from_secs(jwt.leeway_seconds),
                        refresh: Duration::from_secs(jwt.refresh_seconds),
                        resource: jwt.resource.clone(),
                        authorization_servers: jwt.authorization_servers.clone(),
                    })
                })
                .transpose()?,
            trusted_proxy: methods
                .trusted_proxy
                .as_ref()
                .map(|proxy| TrustedProxyOptions {
                    networks: proxy
                        .addresses
                        .iter()
                        .filter_map(|address| intentgate_config::auth::parse_network(address))
                        .collect(),
                    tenant_header: proxy.tenant_header.to_ascii_lowercase(),
                    subject_header: proxy.subject_header.to_ascii_lowercase(),
                    scopes_header: proxy
                        .scopes_header
                        .as_ref()
                        .map(|name| name.to_ascii_lowercase()),
                }),
        },
    };
    Authenticator::new(options).context("the auth section of the config")
}

fn scopes(names: &[String]) -> Scopes {
    names.iter().filter_map(|name| Scope::parse(name)).collect()
}

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
    let key: String = std::iter::once(KEY_PREFIX.to_owned())
        .chain(random.iter().map(|byte| format!("{byte:02x}")))
        .collect();
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
