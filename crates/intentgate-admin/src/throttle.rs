//! Failed admin authentications, counted per source address.
//!
//! What keeps the admin token secret is its length, not this count: a token is at least
//! [`TOKEN_LENGTH_MIN`](crate::TOKEN_LENGTH_MIN) bytes, and 128 random bits are beyond any
//! number of guesses a network can carry. So the right token is always let in, whatever its
//! source sent before: a count kept per address, which strangers share behind a proxy or can
//! fill with wrong tokens, must never lock the operator out. The count is for the noise: a
//! source that sends [`FailureLimit::failures`] wrong tokens within [`FailureLimit::window`]
//! (counted from its first failure) gets 429 with `Retry-After` for its wrong tokens for the
//! rest of that window, telling a misconfigured script or a scanner to back off, and the log
//! says so once instead of once per request. A right token clears the count.
//!
//! A source is the client's IP address (`client.rs`: the peer's, or behind a trusted proxy
//! the client's it names), and for IPv6 its /64 network: one host usually holds a whole /64
//! and could otherwise change address at every guess. Without a peer address (a router
//! served without connect info) every request shares one count.
//!
//! The table is bounded ([`SOURCES_MAX`]): an attacker with many addresses (a botnet, an
//! IPv6 range) would otherwise grow it without limit. When it is full, expired entries are
//! dropped first, then the entry whose window started earliest.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Wrong tokens a source may send within the window by default before its wrong tokens are
/// answered 429: enough for an operator's typos.
pub const FAILURES_MAX_DEFAULT: u32 = 5;
/// The window failures are counted in by default, and how long a source's wrong tokens are
/// answered 429 at most.
pub const FAILURE_WINDOW_DEFAULT: Duration = Duration::from_secs(60);
/// Sources whose failures are remembered at once. An entry takes a few dozen bytes, so the
/// table stays under a megabyte; ten thousand addresses guessing at once is far past any
/// legitimate use of an admin API.
pub const SOURCES_MAX: usize = 10_000;

/// How many wrong admin tokens a source may send, and within what window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailureLimit {
    /// Wrong tokens within `window` after which the source's wrong tokens get 429 (at least 1).
    pub failures: u32,
    /// Counted from a source's first failure; its wrong tokens get 429 until it ends.
    pub window: Duration,
}

impl Default for FailureLimit {
    fn default() -> FailureLimit {
        FailureLimit {
            failures: FAILURES_MAX_DEFAULT,
            window: FAILURE_WINDOW_DEFAULT,
        }
    }
}

/// Who failures are counted for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Source {
    /// An IPv4 address, or an IPv6 /64 network (its host bits zeroed).
    Network(IpAddr),
    /// No peer address was available.
    Unknown,
}

impl Source {
    pub(crate) fn of(client: Option<IpAddr>) -> Source {
        let Some(client) = client else {
            return Source::Unknown;
        };
        let address = match client {
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => {
                    let network = u128::from(v6) & !((1u128 << 64) - 1);
                    IpAddr::V6(Ipv6Addr::from(network))
                }
            },
            v4 => v4,
        };
        Source::Network(address)
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Network(IpAddr::V6(network)) => write!(f, "{network}/64"),
            Source::Network(address) => write!(f, "{address}"),
            Source::Unknown => f.write_str("unknown"),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    /// When the first failure of the current window happened.
    first: Instant,
    failures: u32,
}

/// The failures of every source (see the module documentation).
#[derive(Debug)]
pub(crate) struct Throttle {
    limit: FailureLimit,
    sources: Mutex<HashMap<Source, Entry>>,
}

/// A source that is refused, and for how much longer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refused {
    pub retry_after: Duration,
}

impl Throttle {
    pub(crate) fn new(limit: FailureLimit) -> Throttle {
        Throttle {
            limit: FailureLimit {
                failures: limit.failures.max(1),
                window: limit.window,
            },
            sources: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn limit(&self) -> FailureLimit {
        self.limit
    }

    fn sources(&self) -> std::sync::MutexGuard<'_, HashMap<Source, Entry>> {
        // The map is plain data; a panic elsewhere while it was held leaves it usable.
        self.sources
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// `Err` while `source` is refused.
    pub(crate) fn check(&self, source: Source, now: Instant) -> Result<(), Refused> {
        let mut sources = self.sources();
        let Some(entry) = sources.get(&source).copied() else {
            return Ok(());
        };
        let ends = entry.first + self.limit.window;
        if now >= ends {
            sources.remove(&source);
            return Ok(());
        }
        if entry.failures >= self.limit.failures {
            return Err(Refused {
                retry_after: ends - now,
            });
        }
        Ok(())
    }

    /// Counts a wrong token from `source`; `Some` when this failure makes it refused.
    pub(crate) fn failed(&self, source: Source, now: Instant) -> Option<Refused> {
        let mut sources = self.sources();
        let window = self.limit.window;
        if !sources.contains_key(&source) && sources.len() >= SOURCES_MAX {
            sources.retain(|_, entry| now < entry.first + window);
            if sources.len() >= SOURCES_MAX
                && let Some(oldest) = sources
                    .iter()
                    .min_by_key(|(_, entry)| entry.first)
                    .map(|(source, _)| *source)
            {
                sources.remove(&oldest);
            }
        }
        let entry = sources.entry(source).or_insert(Entry {
            first: now,
            failures: 0,
        });
        if now >= entry.first + window {
            *entry = Entry {
                first: now,
                failures: 0,
            };
        }
        entry.failures = entry.failures.saturating_add(1);
        (entry.failures == self.limit.failures).then(|| Refused {
            retry_after: entry.first + window - now,
        })
    }

    /// A right token from `source`: its count starts again.
    pub(crate) fn succeeded(&self, source: Source) {
        self.sources().remove(&source);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.sources().len()
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::*;

    const LIMIT: FailureLimit = FailureLimit {
        failures: 3,
        window: Duration::from_secs(60),
    };

    fn source(last: u8) -> Source {
        Source::of(Some(SocketAddr::from(([192, 0, 2, last], 40_000)).ip()))
    }

    #[test]
    fn a_source_is_refused_after_the_limit_until_the_window_ends() {
        let throttle = Throttle::new(LIMIT);
        let start = Instant::now();
        let guesser = source(1);
        assert_eq!(throttle.failed(guesser, start), None);
        assert_eq!(
            throttle.failed(guesser, start + Duration::from_secs(1)),
            None
        );
        let refused = throttle
            .failed(guesser, start + Duration::from_secs(10))
            .expect("the third failure refuses it");
        assert_eq!(refused.retry_after, Duration::from_secs(50));
        assert_eq!(
            throttle.check(guesser, start + Duration::from_secs(59)),
            Err(Refused {
                retry_after: Duration::from_secs(1)
            })
        );
        assert_eq!(throttle.check(source(2), start), Ok(()), "others are not");
        assert_eq!(throttle.check(guesser, start + LIMIT.window), Ok(()));
    }

    #[test]
    fn failures_spread_wider_than_the_window_never_refuse() {
        let throttle = Throttle::new(LIMIT);
        let start = Instant::now();
        for minute in 0..10 {
            let at = start + Duration::from_secs(61 * minute);
            assert_eq!(throttle.failed(source(1), at), None);
            assert_eq!(throttle.failed(source(1), at), None);
        }
    }

    #[test]
    fn a_right_token_clears_the_count() {
        let throttle = Throttle::new(LIMIT);
        let now = Instant::now();
        throttle.failed(source(1), now);
        throttle.failed(source(1), now);
        throttle.succeeded(source(1));
        assert_eq!(throttle.failed(source(1), now), None);
        assert_eq!(throttle.failed(source(1), now), None);
    }

    #[test]
    fn an_ipv6_host_is_counted_with_its_slash_64_and_a_mapped_ipv4_as_ipv4() {
        let one: SocketAddr = "[2001:db8:1:2:aaaa::1]:1".parse().unwrap();
        let other: SocketAddr = "[2001:db8:1:2:bbbb::9]:2".parse().unwrap();
        let elsewhere: SocketAddr = "[2001:db8:1:3::1]:3".parse().unwrap();
        assert_eq!(Source::of(Some(one.ip())), Source::of(Some(other.ip())));
        assert_ne!(Source::of(Some(one.ip())), Source::of(Some(elsewhere.ip())));
        assert_eq!(Source::of(Some(one.ip())).to_string(), "2001:db8:1:2::/64");
        let mapped: SocketAddr = "[::ffff:192.0.2.1]:4".parse().unwrap();
        assert_eq!(Source::of(Some(mapped.ip())), source(1));
    }

    /// An attacker cycling through addresses must not grow the table without bound.
    #[test]
    fn the_table_is_bounded_and_evicts_the_oldest_window() {
        let throttle = Throttle::new(LIMIT);
        let start = Instant::now();
        for n in 0..SOURCES_MAX as u32 + 10 {
            let address = IpAddr::from((0x0a00_0000u32 + n).to_be_bytes());
            let source = Source::of(Some(address));
            throttle.failed(source, start + Duration::from_millis(n.into()));
        }
        assert_eq!(throttle.len(), SOURCES_MAX);
        let first = Source::of(Some(IpAddr::from([10, 0, 0, 0])));
        assert!(
            !throttle.sources().contains_key(&first),
            "the oldest went first"
        );
    }
}
