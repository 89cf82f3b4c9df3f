//! The `auth:` section at work: the server's authenticator for a listener.
//!
//! `auth: none` is refused here for a listener that is not on loopback: without
//! credentials, any host that reaches the port would be the one tenant.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use intentgate_config::{AuthConfig, Config};
use intentgate_core::{Scope, Scopes, Tenant};
use intentgate_server::auth::{
    ActFor, ApiKey, AuthOptions, Authenticator, JwksSource, JwtOptions, TrustedProxyOptions,
};

use crate::error::AuthError;

/// The authenticator of a config for a server listening on `address`.
pub fn authenticator(config: &Config, address: SocketAddr) -> Result<Authenticator, AuthError> {
    let options = match &config.auth {
        AuthConfig::None => {
            if !address.ip().is_loopback() {
                return Err(AuthError::NoneOffLoopback { address });
            }
            AuthOptions::None {
                tenant: Tenant::parse(&config.gateway.tenant).map_err(AuthError::GatewayTenant)?,
            }
        }
        AuthConfig::Methods(methods) => AuthOptions::Methods {
            api_keys: methods
                .api_keys
                .iter()
                .map(|key| {
                    Ok(ApiKey {
                        name: key.name.clone(),
                        digest: ApiKey::parse_digest(&key.sha256).ok_or(AuthError::KeyDigest)?,
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
                .collect::<Result<_, AuthError>>()?,
            jwt: methods
                .jwt
                .as_ref()
                .map(|jwt| -> Result<JwtOptions, AuthError> {
                    Ok(JwtOptions {
                        jwks: match (&jwt.jwks_url, &jwt.jwks_file) {
                            (Some(url), _) => JwksSource::Url(url.clone()),
                            (None, Some(file)) => JwksSource::File(PathBuf::from(file)),
                            (None, None) => return Err(AuthError::NoJwks),
                        },
                        issuer: jwt.issuer.clone(),
                        audience: jwt.audience.clone(),
                        tenant_claim: jwt.tenant_claim.clone(),
                        algorithms: jwt
                            .algorithms
                            .iter()
                            .map(|name| name.parse().map_err(AuthError::Algorithm))
                            .collect::<Result<_, AuthError>>()?,
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
    Authenticator::new(options).map_err(AuthError::Setup)
}

fn scopes(names: &[String]) -> Scopes {
    names.iter().filter_map(|name| Scope::parse(name)).collect()
}
