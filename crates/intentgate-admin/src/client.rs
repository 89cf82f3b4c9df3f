//! The client address a request's wrong admin tokens are counted under.
//!
//! Without trusted proxies it is the socket's peer. Behind a reverse proxy every request's
//! peer is the proxy, so one count would be shared by every caller; with
//! `gateway.trusted_proxies` configured, a request whose peer is one of them is counted under
//! the client its `X-Forwarded-For` names: the rightmost hop that is not itself a trusted
//! proxy. Hops to its left were written by that client and prove nothing, so a caller can't
//! pick its own count by sending the header; a caller that is not a trusted proxy is counted
//! under its own address whatever it sends.

use std::net::IpAddr;

use axum::http::HeaderMap;
use ipnet::IpNet;

/// The header a reverse proxy appends the address of the client it serves to.
const FORWARDED_FOR: &str = "x-forwarded-for";

/// The address to count `peer`'s request under (see the module documentation); `None` when
/// the server gave no peer address.
pub(crate) fn client_address(
    peer: Option<IpAddr>,
    headers: &HeaderMap,
    trusted_proxies: &[IpNet],
) -> Option<IpAddr> {
    let peer = canonical(peer?);
    let trusted = |address: &IpAddr| {
        trusted_proxies
            .iter()
            .any(|network| network.contains(address))
    };
    if !trusted(&peer) {
        return Some(peer);
    }
    // Several header lines are one list, in order (RFC 9110, section 5.3).
    let hops: Vec<&str> = headers
        .get_all(FORWARDED_FOR)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(str::trim)
        .collect();
    let mut client = peer;
    for hop in hops.iter().rev() {
        // A hop that is not an address ends what can be believed: the hop to its right (a
        // trusted proxy) is the last one known.
        let Some(address) = parse_hop(hop) else {
            break;
        };
        client = address;
        if !trusted(&address) {
            break;
        }
    }
    Some(client)
}

/// An address as proxies write it: `192.0.2.7`, `2001:db8::1`, `[2001:db8::1]`, or either
/// with a port (`192.0.2.7:4711`, `[2001:db8::1]:4711`).
fn parse_hop(hop: &str) -> Option<IpAddr> {
    if let Ok(address) = hop.parse::<IpAddr>() {
        return Some(canonical(address));
    }
    if let Ok(socket) = hop.parse::<std::net::SocketAddr>() {
        return Some(canonical(socket.ip()));
    }
    let inside = hop.strip_prefix('[')?.strip_suffix(']')?;
    inside.parse::<IpAddr>().ok().map(canonical)
}

/// An IPv4 address mapped into IPv6 (`::ffff:10.0.0.1`, as a dual-stack socket reports it)
/// as the IPv4 address, so `10.0.0.0/8` matches it.
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

    fn headers(lines: &[&'static str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for line in lines {
            headers.append(FORWARDED_FOR, line.parse().unwrap());
        }
        headers
    }

    fn address(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn networks(texts: &[&str]) -> Vec<IpNet> {
        texts.iter().map(|text| text.parse().unwrap()).collect()
    }

    #[test]
    fn without_trusted_proxies_the_peer_counts_whatever_the_header_says() {
        let sent = headers(&["198.51.100.9"]);
        let peer = Some(address("192.0.2.1"));
        assert_eq!(client_address(peer, &sent, &[]), peer);
        let proxies = networks(&["10.0.0.0/8"]);
        assert_eq!(client_address(peer, &sent, &proxies), peer);
        assert_eq!(client_address(None, &sent, &proxies), None);
    }

    #[test]
    fn behind_a_trusted_proxy_the_rightmost_untrusted_hop_counts() {
        let proxies = networks(&["10.0.0.0/8"]);
        let peer = Some(address("::ffff:10.0.0.2"));
        // The client wrote the first entry itself; the proxies appended the rest.
        let sent = headers(&["203.0.113.66, 198.51.100.9", "10.0.0.5"]);
        assert_eq!(
            client_address(peer, &sent, &proxies),
            Some(address("198.51.100.9"))
        );
        assert_eq!(
            client_address(peer, &headers(&["[2001:db8::7]:4711"]), &proxies),
            Some(address("2001:db8::7"))
        );
        assert_eq!(
            client_address(peer, &headers(&["198.51.100.9:4711"]), &proxies),
            Some(address("198.51.100.9"))
        );
        // Every hop a proxy: the leftmost is the client.
        assert_eq!(
            client_address(peer, &headers(&["10.0.0.9, 10.0.0.5"]), &proxies),
            Some(address("10.0.0.9"))
        );
        // No header: the proxy itself.
        assert_eq!(
            client_address(peer, &HeaderMap::new(), &proxies),
            Some(address("10.0.0.2"))
        );
        // Garbage stops the walk at the last address known.
        assert_eq!(
            client_address(
                peer,
                &headers(&["198.51.100.9, unknown, 10.0.0.5"]),
                &proxies
            ),
            Some(address("10.0.0.5"))
        );
    }
}
