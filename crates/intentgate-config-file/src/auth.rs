//! The `auth:` section: who may call the gateway and which tenant each caller is.
//!
//! `auth: none` (the default when the section is absent) serves one tenant,
//! `gateway.tenant`, to every caller, and is allowed only on loopback listeners (checked by
//! `intentgate serve`, which knows the address it will listen on). Otherwise the section
//! lists one or more methods: `api_keys` (SHA-256 digests, never keys), `jwt` (a JWKS with
//! issuer and audience) and `trusted_proxy` (headers believed from listed addresses).
//! These types are the file's shape and, once checked (by intentgate-config), the loaded
//! config's; `intentgate serve` turns them into the server's `AuthOptions`.

use std::fmt;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

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
pub struct AuthFile(pub AuthConfig);

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
