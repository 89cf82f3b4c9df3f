//! Who is calling, decided once at the edge.
//!
//! An [`Authenticator`] turns a request's credential into a [`Principal`]: the tenant its
//! calls belong to, its scopes and a subject for logs. Four methods, configured together in
//! one `auth:` section:
//!
//! - `none`: no credential; every caller is the one configured tenant. Only for gateways
//!   whose every listener is on loopback (`intentgate serve` refuses anything else).
//! - API keys (`api_keys.rs`): `Authorization: Bearer <key>`, looked up by the SHA-256 digest
//!   of the key (the config holds only digests), each bound to one tenant and a set of scopes.
//! - JWTs (`jwt.rs`): bearer tokens signed by a key of a JWKS (file or URL, cached and
//!   refreshed), with issuer, audience and expiry checked; the tenant is a configured claim.
//! - A trusted proxy (`proxy.rs`): a fronting proxy that authenticated the caller sets the
//!   tenant and subject in headers, believed only from the configured source addresses.
//!
//! The tenant a caller may name with `Intentgate-Tenant` is decided here too: its own, or one
//! its credential may act for. Everything behind the edge reads the tenant only from the
//! [`Principal`].

mod api_keys;
mod jwt;
mod proxy;

use std::net::IpAddr;
use std::sync::Arc;

use axum::http::HeaderMap;
use intentgate_core::{Principal, Scope, Scopes, Tenant};

/// Where the OAuth protected-resource metadata (RFC 9728) is served; the resource's own path
/// follows it (`/.well-known/oauth-protected-resource/mcp`). The edge serves it, and a JWT
/// challenge names it.
pub const RESOURCE_METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

pub use api_keys::{ApiKey, ApiKeyError};
pub use jwt::{JwksSource, JwtError, JwtOptions};
pub use proxy::TrustedProxyOptions;

use api_keys::ApiKeys;
use jwt::JwtVerifier;

/// The header a caller may name a tenant with, when its credential allows it.
pub const TENANT_HEADER: &str = "intentgate-tenant";

/// Which tenants, besides its own, a credential may name with [`TENANT_HEADER`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ActFor {
    /// Only its own.
    #[default]
    Own,
    /// These too (a support tool that serves several business units).
    Tenants(Vec<Tenant>),
    /// Any tenant (a platform's own backend that routes for all its customers).
    Any,
}

impl ActFor {
    fn allows(&self, tenant: &Tenant) -> bool {
        match self {
            ActFor::Own => false,
            ActFor::Tenants(tenants) => tenants.contains(tenant),
            ActFor::Any => true,
        }
    }
}

/// How callers are authenticated.
// One value per process, built at startup: its size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum AuthOptions {
    /// No credential: every caller is `tenant`, with the scopes `call` and `intents:read`
    /// (the admin API keeps its own token).
    None { tenant: Tenant },
    /// One or more credential methods; a request is accepted by the first that recognises
    /// its credential.
    Methods {
        api_keys: Vec<ApiKey>,
        jwt: Option<JwtOptions>,
        trusted_proxy: Option<TrustedProxyOptions>,
    },
}

impl Default for AuthOptions {
    fn default() -> AuthOptions {
        AuthOptions::None {
            tenant: Tenant::parse("default").expect("a valid tenant name"),
        }
    }
}

/// Why a request has no principal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthFailure {
    /// No credential at all.
    #[error("this gateway needs a credential: send `Authorization: Bearer <key or token>`")]
    Missing,
    /// A credential that no method accepts; the reason is for the caller, never the secret.
    #[error("the credential was not accepted: {0}")]
    Rejected(String),
    /// A tenant the credential may not act for, or a malformed tenant name.
    #[error("{0}")]
    Tenant(String),
}

/// Authenticates requests; one per server, shared by every route.
pub struct Authenticator {
    mode: Mode,
}

// One value per process, built at startup: its size does not matter.
#[allow(clippy::large_enum_variant)]
enum Mode {
    None(Principal),
    Methods {
        api_keys: ApiKeys,
        jwt: Option<JwtVerifier>,
        proxy: Option<TrustedProxyOptions>,
    },
}

/// A credential's principal, before the tenant header is applied.
struct Credential {
    principal: Principal,
    act_for: ActFor,
}

impl Authenticator {
    /// Builds the authenticator; a JWKS URL is fetched in the background (and again every
    /// `refresh`), so this never waits for the network.
    pub fn new(options: AuthOptions) -> Result<Authenticator, AuthSetupError> {
        let mode = match options {
            AuthOptions::None { tenant } => Mode::None(Principal {
                tenant,
                scopes: Scopes::from_iter([Scope::Call, Scope::IntentsRead]),
                subject: "anonymous".to_owned(),
            }),
            AuthOptions::Methods {
                api_keys,
                jwt,
                trusted_proxy,
            } => {
                if api_keys.is_empty() && jwt.is_none() && trusted_proxy.is_none() {
                    return Err(AuthSetupError::NoMethod);
                }
                Mode::Methods {
                    api_keys: ApiKeys::new(api_keys)?,
                    jwt: jwt.map(JwtVerifier::new).transpose()?,
                    proxy: trusted_proxy,
                }
            }
        };
        Ok(Authenticator { mode })
    }

    /// True for `auth: none`.
    pub fn is_none(&self) -> bool {
        matches!(self.mode, Mode::None(_))
    }

    /// The OAuth protected-resource metadata (RFC 9728) of JWT authentication, when it names
    /// its resource.
    pub fn resource_metadata(&self) -> Option<serde_json::Value> {
        match &self.mode {
            Mode::Methods { jwt: Some(jwt), .. } => jwt.resource_metadata(),
            _ => None,
        }
    }

    /// The path of the metadata document, for `WWW-Authenticate: Bearer resource_metadata=`.
    pub fn resource_metadata_path(&self) -> Option<String> {
        match &self.mode {
            Mode::Methods { jwt: Some(jwt), .. } => jwt.resource_metadata_url(),
            _ => None,
        }
    }

    /// The principal of a request: who its credential says it is, with the tenant it names
    /// in [`TENANT_HEADER`] if the credential may act for it.
    pub async fn authenticate(
        &self,
        headers: &HeaderMap,
        peer: Option<IpAddr>,
    ) -> Result<Principal, AuthFailure> {
        let credential = match &self.mode {
            Mode::None(principal) => Credential {
                principal: principal.clone(),
                act_for: ActFor::Own,
            },
            Mode::Methods {
                api_keys,
                jwt,
                proxy,
            } => {
                let from_proxy = match proxy {
                    Some(proxy) => proxy.credential(headers, peer)?,
                    None => None,
                };
                match from_proxy {
                    Some(credential) => credential,
                    None => {
                        let token = bearer(headers)?.ok_or(AuthFailure::Missing)?;
                        match api_keys.find(token) {
                            Some(credential) => credential,
                            None => match jwt {
                                Some(jwt) if jwt::looks_like_jwt(token) => {
                                    jwt.verify(token).await?
                                }
                                _ => {
                                    return Err(AuthFailure::Rejected(
                                        "no API key matches it".to_owned(),
                                    ));
                                }
                            },
                        }
                    }
                }
            }
        };
        credential.for_named_tenant(headers)
    }
}

impl Credential {
    /// Applies the tenant header: absent or the credential's own tenant changes nothing;
    /// another tenant is taken only if the credential may act for it.
    fn for_named_tenant(self, headers: &HeaderMap) -> Result<Principal, AuthFailure> {
        let Some(value) = headers.get(TENANT_HEADER) else {
            return Ok(self.principal);
        };
        let named = value
            .to_str()
            .map_err(|_| {
                AuthFailure::Tenant(format!(
                    "the {TENANT_HEADER} header is not a tenant name: it must be visible ASCII"
                ))
            })
            .and_then(|text| {
                Tenant::parse(text.trim()).map_err(|error| {
                    AuthFailure::Tenant(format!("the {TENANT_HEADER} header: {error}"))
                })
            })?;
        if named == self.principal.tenant {
            return Ok(self.principal);
        }
        if self.act_for.allows(&named) {
            return Ok(Principal {
                tenant: named,
                ..self.principal
            });
        }
        Err(AuthFailure::Tenant(format!(
            "this credential belongs to tenant `{}` and may not act for tenant `{named}`; \
             remove the {TENANT_HEADER} header, or use a credential of that tenant",
            self.principal.tenant
        )))
    }
}

/// The token of an `Authorization: Bearer` header (the scheme in any case), if there is one;
/// an error for a header of another shape.
pub fn bearer(headers: &HeaderMap) -> Result<Option<&str>, AuthFailure> {
    let Some(value) = headers.get(axum::http::header::AUTHORIZATION) else {
        return Ok(None);
    };
    let text = value.to_str().map_err(|_| {
        AuthFailure::Rejected("the Authorization header is not visible ASCII".to_owned())
    })?;
    let (scheme, token) = text.trim().split_once(' ').ok_or_else(|| {
        AuthFailure::Rejected("the Authorization header must be `Bearer <key or token>`".to_owned())
    })?;
    if !scheme.eq_ignore_ascii_case("bearer") || token.trim().is_empty() {
        return Err(AuthFailure::Rejected(
            "the Authorization header must be `Bearer <key or token>`".to_owned(),
        ));
    }
    Ok(Some(token.trim()))
}

/// Why authentication could not be set up from its options.
#[derive(Debug, thiserror::Error)]
pub enum AuthSetupError {
    #[error(
        "auth: no method is configured; configure api_keys, jwt or trusted_proxy, or `auth: none`"
    )]
    NoMethod,
    #[error(transparent)]
    ApiKey(#[from] ApiKeyError),
    #[error(transparent)]
    Jwt(#[from] JwtError),
}

/// Shared form of the authenticator, as the server state holds it.
pub type SharedAuthenticator = Arc<Authenticator>;
