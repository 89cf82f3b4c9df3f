//! The `auth:` section: who may call the gateway and which tenant each caller is.
//!
//! `auth: none` (the default when the section is absent) serves one tenant,
//! `gateway.tenant`, to every caller, and is allowed only on loopback listeners (checked by
//! `intentgate serve`, which knows the address it will listen on). Otherwise the section
//! lists one or more methods: `api_keys` (SHA-256 digests, never keys), `jwt` (a JWKS with
//! issuer and audience) and `trusted_proxy` (headers believed from listed addresses).
//! These types are the file's shape and, once checked, the loaded config's;
//! `intentgate serve` turns them into the server's `AuthOptions`.

use std::fmt;

use intentgate_core::{Scope, Tenant};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use crate::check::Checker;
use crate::source_map::at;

/// Most API keys in one config: keys are per agent or service, not per end user.
const API_KEYS_MAX: usize = 1024;
/// Longest clock skew tolerated on a token's `exp` and `nbf`.
const LEEWAY_SECONDS_MAX: u64 = 300;
/// Least and most time between two reads of a JWKS: identity providers rotate keys over
/// days and announce new ones early; reading more often than every 30 s only loads them.
const REFRESH_SECONDS_MIN: u64 = 30;
const REFRESH_SECONDS_MAX: u64 = 86_400;

/// How callers are authenticated.
// One value per process, built at startup: its size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum AuthConfig {
    /// No credential; one tenant (`gateway.tenant`). Loopback listeners only.
    #[default]
    None,
    /// One or more credential methods.
    Methods(AuthMethods),
}

/// The credential methods of an `auth:` section.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AuthMethods {
    /// API keys, each bound to one tenant and a set of scopes. Callers send
    /// `Authorization: Bearer <key>`.
    #[serde(default)]
    pub api_keys: Vec<ApiKeyConfig>,
    /// Bearer JWTs checked against a JWKS.
    pub jwt: Option<JwtConfig>,
    /// A fronting proxy that authenticated the caller and names its tenant in a header.
    pub trusted_proxy: Option<TrustedProxyConfig>,
}

/// One API key. Make one with `intentgate auth new-key`.
#[derive(Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApiKeyConfig {
    /// Who holds the key (`support-agent`): named in logs, never the key.
    pub name: String,
    /// The SHA-256 digest of the key, 64 hex digits (`printf %s "$KEY" | sha256sum`).
    pub sha256: String,
    /// The tenant every call made with this key belongs to.
    pub tenant: String,
    /// What the key may do: `call`, `intents:read` (its tenant's intents), `admin`, `approve`
    /// (decide on its tenant's intents held for approval; `admin` does not include it).
    pub scopes: Vec<String>,
    /// Other tenants the key may name with the `Intentgate-Tenant` header; `["*"]` for any.
    #[serde(default)]
    pub act_for: Vec<String>,
}

impl fmt::Debug for ApiKeyConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiKeyConfig")
            .field("name", &self.name)
            .field("tenant", &self.tenant)
            .field("scopes", &self.scopes)
            .field("act_for", &self.act_for)
            .finish_non_exhaustive()
    }
}

/// Bearer JWTs, verified with the keys of a JWKS.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JwtConfig {
    /// The identity provider's JWKS URL (https, or http on loopback).
    pub jwks_url: Option<String>,
    /// A JWKS file (read again every `refresh_seconds`).
    pub jwks_file: Option<String>,
    /// The `iss` every token must carry.
    pub issuer: String,
    /// The `aud` values accepted; a token must name one of them.
    pub audience: Vec<String>,
    /// The claim that names the caller's tenant.
    #[serde(default = "tenant_claim_default")]
    pub tenant_claim: String,
    /// Signature algorithms accepted: `RS256`, `ES256`, `EdDSA` (all three by default).
    #[serde(default = "algorithms_default")]
    pub algorithms: Vec<String>,
    /// Clock skew allowed on `exp` and `nbf`, in seconds.
    #[serde(default = "leeway_default")]
    pub leeway_seconds: u64,
    /// How long a read JWKS is used before it is read again, in seconds.
    #[serde(default = "refresh_default")]
    pub refresh_seconds: u64,
    /// This gateway's resource identifier for MCP clients (`https://gateway.example.com/mcp`):
    /// with it the gateway serves `/.well-known/oauth-protected-resource` (RFC 9728) and
    /// points 401 answers at it.
    pub resource: Option<String>,
    /// The authorization servers that issue tokens for `resource`.
    #[serde(default)]
    pub authorization_servers: Vec<String>,
}

fn tenant_claim_default() -> String {
    "tenant".to_owned()
}

fn algorithms_default() -> Vec<String> {
    ["RS256", "ES256", "EdDSA"].map(String::from).to_vec()
}

/// Thirty seconds: enough for ordinary clock drift, short against a stolen expired token.
fn leeway_default() -> u64 {
    30
}

/// Five minutes: a rotated key is picked up quickly, and an unknown key id triggers an
/// earlier read anyway.
fn refresh_default() -> u64 {
    300
}

/// A fronting proxy's identity headers.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TrustedProxyConfig {
    /// The proxy's source addresses or networks (`10.0.0.7`, `10.1.0.0/16`); requests from
    /// anywhere else must bring their own credential.
    pub addresses: Vec<String>,
    /// The header that names the tenant.
    pub tenant_header: String,
    /// The header that names the caller, for logs.
    #[serde(default = "subject_header_default")]
    pub subject_header: String,
    /// A header with space-separated scopes; without it every caller gets `call`.
    pub scopes_header: Option<String>,
}

fn subject_header_default() -> String {
    "x-intentgate-subject".to_owned()
}

/// The file's `auth:` value: `none`, or a mapping of methods.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct AuthFile(pub AuthConfig);

impl<'de> Deserialize<'de> for AuthFile {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<AuthFile, D::Error> {
        struct AuthVisitor;
        impl<'de> Visitor<'de> for AuthVisitor {
            type Value = AuthFile;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("`none`, or a mapping with `api_keys`, `jwt` and/or `trusted_proxy`")
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<AuthFile, E> {
                if text == "none" {
                    Ok(AuthFile(AuthConfig::None))
                } else {
                    Err(E::invalid_value(de::Unexpected::Str(text), &self))
                }
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<AuthFile, A::Error> {
                AuthMethods::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(|methods| AuthFile(AuthConfig::Methods(methods)))
            }
        }
        deserializer.deserialize_any(AuthVisitor)
    }
}

impl JsonSchema for AuthFile {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Auth".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let methods = generator.subschema_for::<AuthMethods>();
        json_schema!({
            "description": "Who may call the gateway: `none` (one tenant, loopback listeners only) or credential methods.",
            "oneOf": [{"const": "none"}, methods]
        })
    }
}

impl Checker<'_, '_> {
    /// Checks the `auth:` section.
    pub(crate) fn auth(&mut self, auth: &AuthConfig) {
        let AuthConfig::Methods(methods) = auth else {
            return;
        };
        if methods.api_keys.is_empty() && methods.jwt.is_none() && methods.trusted_proxy.is_none() {
            self.push(
                &at!["auth"],
                "`auth` names no method",
                "add `api_keys`, `jwt` or `trusted_proxy`, or write `auth: none` for a loopback-only gateway",
            );
        }
        if methods.api_keys.len() > API_KEYS_MAX {
            self.push(
                &at!["auth", "api_keys"],
                format!(
                    "{} API keys; the limit is {API_KEYS_MAX}",
                    methods.api_keys.len()
                ),
                "give keys to agents and services, not to end users (JWTs suit those)",
            );
        }
        let mut digests: Vec<&str> = Vec::new();
        for (index, key) in methods.api_keys.iter().enumerate() {
            self.api_key(index, key, &digests);
            digests.push(key.sha256.trim());
        }
        if let Some(jwt) = &methods.jwt {
            self.jwt(jwt);
        }
        if let Some(proxy) = &methods.trusted_proxy {
            self.trusted_proxy(proxy);
        }
    }

    fn api_key(&mut self, index: usize, key: &ApiKeyConfig, earlier: &[&str]) {
        let digest = key.sha256.trim();
        let hex = digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit());
        if !hex {
            self.push(
                &at!["auth", "api_keys", index, "sha256"],
                format!("API key `{}`: `sha256` is not 64 hex digits", key.name),
                "write the key's SHA-256 digest, never the key: `intentgate auth new-key` prints both, \
                 or `printf %s \"$KEY\" | sha256sum`",
            );
        } else if earlier
            .iter()
            .any(|other| other.eq_ignore_ascii_case(digest))
        {
            self.push(
                &at!["auth", "api_keys", index, "sha256"],
                format!("API key `{}` has the digest of an earlier key", key.name),
                "give every holder its own key, so that each call has one tenant",
            );
        }
        if key.name.trim().is_empty() {
            self.push(
                &at!["auth", "api_keys", index, "name"],
                "an API key has an empty `name`",
                "name the agent or service that holds it, e.g. `support-agent`",
            );
        }
        if let Err(error) = Tenant::parse(&key.tenant) {
            self.push(
                &at!["auth", "api_keys", index, "tenant"],
                format!("API key `{}`: {error}", key.name),
                "write a short identifier, e.g. `tenant: acme`",
            );
        }
        if key.scopes.is_empty() {
            self.push(
                &at!["auth", "api_keys", index, "scopes"],
                format!("API key `{}` has no scope", key.name),
                "give it `scopes: [call]`, plus `intents:read`, `admin` or `approve` if it needs them",
            );
        }
        for (at_index, scope) in key.scopes.iter().enumerate() {
            if Scope::parse(scope).is_none() {
                self.push(
                    &at!["auth", "api_keys", index, "scopes", at_index],
                    format!("`{scope}` is not a scope"),
                    "use `call`, `intents:read`, `admin` or `approve`",
                );
            }
        }
        for (at_index, tenant) in key.act_for.iter().enumerate() {
            if tenant == "*" {
                continue;
            }
            if let Err(error) = Tenant::parse(tenant) {
                self.push(
                    &at!["auth", "api_keys", index, "act_for", at_index],
                    format!("API key `{}`: act_for: {error}", key.name),
                    "list tenant names, or `\"*\"` for any tenant",
                );
            }
        }
    }

    fn jwt(&mut self, jwt: &JwtConfig) {
        match (&jwt.jwks_url, &jwt.jwks_file) {
            (Some(_), Some(_)) | (None, None) => self.push(
                &at!["auth", "jwt"],
                "`jwt` needs exactly one of `jwks_url` and `jwks_file`",
                "point `jwks_url` at your identity provider's JWKS (its `jwks_uri`)",
            ),
            (Some(url), None) => {
                if let Err(reason) = secure_url(url) {
                    self.push(
                        &at!["auth", "jwt", "jwks_url"],
                        format!("`jwks_url`: {reason}"),
                        "use an https URL",
                    );
                }
            }
            (None, Some(_)) => {}
        }
        if jwt.issuer.trim().is_empty() {
            self.push(
                &at!["auth", "jwt", "issuer"],
                "`issuer` is empty",
                "write the `iss` your identity provider puts in tokens",
            );
        }
        if jwt.audience.is_empty()
            || jwt
                .audience
                .iter()
                .any(|audience| audience.trim().is_empty())
        {
            self.push(
                &at!["auth", "jwt", "audience"],
                "`audience` must list at least one non-empty value",
                "write the `aud` tokens for this gateway carry, e.g. its URL",
            );
        }
        if jwt.tenant_claim.trim().is_empty() {
            self.push(
                &at!["auth", "jwt", "tenant_claim"],
                "`tenant_claim` is empty",
                "name the claim that holds the tenant, e.g. `tenant`",
            );
        }
        if jwt.algorithms.is_empty() {
            self.push(
                &at!["auth", "jwt", "algorithms"],
                "`algorithms` is empty",
                "list RS256, ES256 and/or EdDSA",
            );
        }
        for (index, algorithm) in jwt.algorithms.iter().enumerate() {
            if !matches!(algorithm.as_str(), "RS256" | "ES256" | "EdDSA") {
                self.push(
                    &at!["auth", "jwt", "algorithms", index],
                    format!("`{algorithm}` is not an accepted signature algorithm"),
                    "use RS256, ES256 or EdDSA (symmetric algorithms such as HS256 are refused)",
                );
            }
        }
        self.range(
            &at!["auth", "jwt", "leeway_seconds"],
            jwt.leeway_seconds,
            0,
            LEEWAY_SECONDS_MAX,
            "seconds (30 is the default)",
        );
        self.range(
            &at!["auth", "jwt", "refresh_seconds"],
            jwt.refresh_seconds,
            REFRESH_SECONDS_MIN,
            REFRESH_SECONDS_MAX,
            "seconds (300 is the default)",
        );
        if let Some(resource) = &jwt.resource
            && let Err(reason) = secure_url(resource)
        {
            self.push(
                &at!["auth", "jwt", "resource"],
                format!("`resource`: {reason}"),
                "write this gateway's MCP URL, e.g. https://gateway.example.com/mcp",
            );
        }
        for (index, server) in jwt.authorization_servers.iter().enumerate() {
            if let Err(reason) = secure_url(server) {
                self.push(
                    &at!["auth", "jwt", "authorization_servers", index],
                    reason,
                    "write the issuer URL of the authorization server",
                );
            }
        }
    }

    fn trusted_proxy(&mut self, proxy: &TrustedProxyConfig) {
        if proxy.addresses.is_empty() {
            self.push(
                &at!["auth", "trusted_proxy", "addresses"],
                "`addresses` is empty, so no proxy would be trusted",
                "list the proxy's source addresses, e.g. `[10.0.0.7]` or `[10.1.0.0/16]`",
            );
        }
        for (index, address) in proxy.addresses.iter().enumerate() {
            if parse_network(address).is_none() {
                self.push(
                    &at!["auth", "trusted_proxy", "addresses", index],
                    format!("`{address}` is not an IP address or network"),
                    "write an address (`10.0.0.7`, `::1`) or a network (`10.1.0.0/16`)",
                );
            }
        }
        for (field, name) in [
            ("tenant_header", Some(&proxy.tenant_header)),
            ("subject_header", Some(&proxy.subject_header)),
            ("scopes_header", proxy.scopes_header.as_ref()),
        ] {
            if let Some(name) = name
                && header_name(name).is_none()
            {
                self.push(
                    &at!["auth", "trusted_proxy", field],
                    format!("`{name}` is not a header name"),
                    "write a header name such as `x-intentgate-tenant`",
                );
            }
        }
    }
}

/// An address (`10.0.0.7`, a /32 or /128) or a network (`10.1.0.0/16`).
pub fn parse_network(text: &str) -> Option<ipnet::IpNet> {
    let text = text.trim();
    text.parse::<ipnet::IpNet>().ok().or_else(|| {
        text.parse::<std::net::IpAddr>()
            .ok()
            .map(ipnet::IpNet::from)
    })
}

/// A header name in lowercase, if `text` is one.
fn header_name(text: &str) -> Option<String> {
    let valid = !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    valid.then(|| text.to_ascii_lowercase())
}

/// An https URL, or http on a loopback host (a local identity provider in development).
fn secure_url(text: &str) -> Result<(), String> {
    let url =
        reqwest::Url::parse(text).map_err(|error| format!("`{text}` is not a URL: {error}"))?;
    let loopback = matches!(url.host_str(), Some("localhost" | "127.0.0.1" | "[::1]"));
    match url.scheme() {
        "https" => Ok(()),
        "http" if loopback => Ok(()),
        _ => Err(format!(
            "`{text}` must be an https URL (http only on loopback)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks_and_addresses_parse() {
        assert!(parse_network("10.0.0.7").is_some());
        assert!(parse_network("10.1.0.0/16").is_some());
        assert!(parse_network("::1").is_some());
        assert!(parse_network("10.0.0.0/33").is_none());
        assert!(parse_network("proxy.internal").is_none());
    }
}
