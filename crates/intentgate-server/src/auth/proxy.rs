//! A trusted fronting proxy: an API gateway or service mesh that authenticated the caller
//! and says who it is in headers.
//!
//! Those headers are believed only from the configured source addresses: from anyone else
//! they are a caller's claim about itself, and that caller is authenticated like any other
//! (by its bearer credential, or refused). A request from the proxy without the tenant header
//! is authenticated by its own credential too.

use std::net::IpAddr;

use axum::http::HeaderMap;
use intentgate_core::{Principal, Scope, Scopes, Tenant};
use ipnet::IpNet;

use super::{ActFor, AuthFailure, Credential};

/// Longest subject accepted from a proxy header; it is only a name for logs.
const SUBJECT_LENGTH_MAX: usize = 256;

/// Settings of proxy authentication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedProxyOptions {
    /// Source addresses (single addresses are /32 or /128) whose headers are believed.
    pub networks: Vec<IpNet>,
    /// The header that carries the tenant (lowercase).
    pub tenant_header: String,
    /// The header that carries who the caller is, for logs (lowercase).
    pub subject_header: String,
    /// The header that carries space-separated scopes; `None` gives every caller `call`.
    pub scopes_header: Option<String>,
}

impl TrustedProxyOptions {
    /// The credential the proxy's headers describe, or `None` when the request did not come
    /// from a trusted address (then other methods decide).
    pub(super) fn credential(
        &self,
        headers: &HeaderMap,
        peer: Option<IpAddr>,
    ) -> Result<Option<Credential>, AuthFailure> {
        let trusted = peer.is_some_and(|peer| {
            let peer = canonical(peer);
            self.networks.iter().any(|network| network.contains(&peer))
        });
        if !trusted {
            return Ok(None);
        }
        let text = |name: &str| -> Result<Option<&str>, AuthFailure> {
            match headers.get(name) {
                None => Ok(None),
                Some(value) => value.to_str().map(|text| Some(text.trim())).map_err(|_| {
                    AuthFailure::Rejected(format!("the proxy's {name} header is not visible ASCII"))
                }),
            }
        };
        // A trusted address without the tenant header is a caller passing through the proxy
        // unauthenticated by it (a load balancer in front of API-key clients): its own
        // credential decides.
        let Some(tenant) = text(&self.tenant_header)? else {
            return Ok(None);
        };
        let tenant = Tenant::parse(tenant).map_err(|error| {
            AuthFailure::Tenant(format!(
                "the proxy's {} header: {error}",
                self.tenant_header
            ))
        })?;
        let subject = text(&self.subject_header)?
            .filter(|subject| !subject.is_empty())
            .map(|subject| subject.chars().take(SUBJECT_LENGTH_MAX).collect())
            .unwrap_or_else(|| "proxy".to_owned());
        let scopes = match &self.scopes_header {
            None => Scopes::from_iter([Scope::Call]),
            Some(name) => text(name)?
                .unwrap_or("")
                .split_ascii_whitespace()
                .filter_map(Scope::parse)
                .collect(),
        };
        Ok(Some(Credential {
            principal: Principal {
                tenant,
                scopes,
                subject,
            },
            act_for: ActFor::Own,
        }))
    }
}

/// An IPv4 address mapped into IPv6 (`::ffff:10.0.0.1`, as a dual-stack socket reports
/// it) as the IPv4 address, so `10.0.0.0/8` matches it.
fn canonical(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> TrustedProxyOptions {
        TrustedProxyOptions {
            networks: vec!["10.0.0.0/8".parse().unwrap()],
            tenant_header: "x-tenant".into(),
            subject_header: "x-user".into(),
            scopes_header: None,
        }
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.insert(*name, value.parse().unwrap());
        }
        headers
    }

    #[test]
    fn headers_are_believed_only_from_trusted_addresses() {
        let options = options();
        let sent = headers(&[("x-tenant", "acme"), ("x-user", "ana")]);
        let from_outside = options.credential(&sent, Some("192.0.2.7".parse().unwrap()));
        assert!(from_outside.unwrap().is_none());
        assert!(options.credential(&sent, None).unwrap().is_none());
        let credential = options
            .credential(&sent, Some("::ffff:10.1.2.3".parse().unwrap()))
            .unwrap()
            .unwrap();
        assert_eq!(credential.principal.tenant.as_str(), "acme");
        assert_eq!(credential.principal.subject, "ana");
        assert!(credential.principal.may(Scope::Call));
        assert!(!credential.principal.may(Scope::IntentsRead));
    }

    #[test]
    fn a_trusted_request_with_a_malformed_tenant_is_refused() {
        let options = options();
        let peer = Some("10.0.0.1".parse().unwrap());
        // Without the header the request's own credential decides.
        assert!(
            options
                .credential(&headers(&[("x-user", "ana")]), peer)
                .unwrap()
                .is_none()
        );
        assert!(matches!(
            options.credential(&headers(&[("x-tenant", "a b")]), peer),
            Err(AuthFailure::Tenant(_))
        ));
    }
}
