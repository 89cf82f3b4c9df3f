//! The `auth:` section: its types (intentgate-config-file's) and the parsers its checks and
//! the server share.
//!
//! `auth: none` (the default when the section is absent) serves one tenant,
//! `gateway.tenant`, to every caller, and is allowed only on loopback listeners (checked by
//! `intentgate serve`, which knows the address it will listen on). Otherwise the section
//! lists one or more methods: `api_keys` (SHA-256 digests, never keys), `jwt` (a JWKS with
//! issuer and audience) and `trusted_proxy` (headers believed from listed addresses).

pub use intentgate_config_file::auth::{
    ApiKeyConfig, AuthConfig, AuthMethods, JwtConfig, TrustedProxyConfig,
};

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
pub(crate) fn header_name(text: &str) -> Option<String> {
    let valid = !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    valid.then(|| text.to_ascii_lowercase())
}

/// An https URL, or http on a loopback host (a local identity provider in development).
pub(crate) fn secure_url(text: &str) -> Result<(), String> {
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
