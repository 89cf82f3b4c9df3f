//! The checks of the `auth:` section: methods named, API key digests unique and well
//! formed, scopes and tenants that exist, JWT settings in range, proxies that are addresses.

use intentgate_config_file::at;
use intentgate_core::{Scope, Tenant};

use super::Checker;
use crate::auth::{
    ApiKeyConfig, AuthConfig, JwtConfig, TrustedProxyConfig, header_name, parse_network, secure_url,
};

/// Most API keys in one config: keys are per agent or service, not per end user.
const API_KEYS_MAX: usize = 1024;
/// Longest clock skew tolerated on a token's `exp` and `nbf`.
const LEEWAY_SECONDS_MAX: u64 = 300;
/// Least and most time between two reads of a JWKS: identity providers rotate keys over
/// days and announce new ones early; reading more often than every 30 s only loads them.
const REFRESH_SECONDS_MIN: u64 = 30;
const REFRESH_SECONDS_MAX: u64 = 86_400;

impl Checker<'_, '_> {
    /// Checks the `auth:` section.
    pub(super) fn auth(&mut self, auth: &AuthConfig) {
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
