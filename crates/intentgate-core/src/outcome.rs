//! What the upstream did, as far as the gateway can tell.
//!
//! An upstream call ends in an [`UpstreamObservation`]: what the transport saw. [`classify`]
//! turns it into an [`OutcomeClass`]: did the effect happen? For a side-effecting tool most
//! errors mean "maybe": the provider may have committed before the response was lost. Only
//! shapes that prove nothing was processed may be retried with the same key.
//!
//! Some answers are the operator's to fix, not the customer's (SPEC section 5): a wrong
//! credential (401, 403, 407), a route that does not exist, an upstream that can't be reached
//! as configured (connection refused, DNS, TLS). Nothing was processed, and no correction of
//! the arguments would help: [`OutcomeClass::Misconfigured`], never a rejection. Telling some
//! of them apart needs what the upstream knows of the request beyond the transport
//! ([`RequestFacts`], read by [`classify_with`]): whether the request's path is a fixed route
//! (a 404 there can only mean the route is wrong, while a 404 to `/v1/orders/{order_id}/refund`
//! means that order does not exist), and why a request that was not sent failed.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What the transport saw when calling the upstream once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum UpstreamObservation {
    /// A response arrived. `body` is the decoded JSON body (`null` when it had none).
    Response {
        status: u16,
        retry_after_ms: Option<u64>,
        body: Value,
    },
    /// The request never left: connection refused, DNS or TLS failure.
    NotSent { reason: String },
    /// No response within the tool's timeout.
    Timeout,
    /// The connection broke after the request was sent.
    Dropped { reason: String },
}

/// Why a request never reached its upstream, where the transport could tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unreachable {
    /// No connection: refused, no route to the host, or no answer within the connect timeout.
    Connect,
    /// The host name did not resolve.
    Dns,
    /// The TLS handshake failed (a certificate the gateway does not trust, a plain-HTTP port
    /// behind an `https://` URL).
    Tls,
}

/// What an upstream knows of one request beyond what the transport saw, for [`classify_with`]
/// and for telling the operator which upstream failed. The default knows nothing, which
/// classifies as [`classify`] does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestFacts {
    /// The upstream's name in the config (`upstreams.payments`), for logs, metrics and
    /// readiness: never its URL, which may hold a secret.
    pub upstream: Option<String>,
    /// The request's path has no placeholder (a fixed route such as `POST /v1/refunds`): a
    /// 404 to it can only mean the route is wrong.
    pub fixed_route: bool,
    /// Why a request that was not sent failed, when the transport could tell.
    pub unreachable: Option<Unreachable>,
}

/// An error that is the operator's: the gateway is misconfigured, and nothing was processed
/// (SPEC section 5). `as_str` is the `kind` of `intentgate_upstream_errors_total`, a fixed
/// word list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Misconfiguration {
    /// 401: the upstream refused the gateway's credentials.
    Unauthorized,
    /// 403: the credentials are valid but may not do this.
    Forbidden,
    /// 407: a proxy between the gateway and the upstream wants credentials.
    ProxyAuth,
    /// 405, or 404 to a fixed route: the route the config names does not exist.
    RouteNotFound,
    /// No connection to the upstream (refused, unreachable, connect timeout).
    Connect,
    /// The upstream's host name did not resolve.
    Dns,
    /// The TLS handshake with the upstream failed.
    Tls,
}

impl Misconfiguration {
    pub const ALL: [Misconfiguration; 7] = [
        Misconfiguration::Unauthorized,
        Misconfiguration::Forbidden,
        Misconfiguration::ProxyAuth,
        Misconfiguration::RouteNotFound,
        Misconfiguration::Connect,
        Misconfiguration::Dns,
        Misconfiguration::Tls,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Misconfiguration::Unauthorized => "unauthorized",
            Misconfiguration::Forbidden => "forbidden",
            Misconfiguration::ProxyAuth => "proxy_auth",
            Misconfiguration::RouteNotFound => "route_not_found",
            Misconfiguration::Connect => "connect",
            Misconfiguration::Dns => "dns",
            Misconfiguration::Tls => "tls",
        }
    }

    /// Worth the bounded not-processed retries within one call: a connection may be refused
    /// while the upstream restarts, and a name may resolve a moment later; a wrong
    /// credential or route gets the same answer however often it is asked.
    pub fn retried(self) -> bool {
        matches!(
            self,
            Misconfiguration::Connect | Misconfiguration::Dns | Misconfiguration::Tls
        )
    }

    /// What is wrong and what to change, for the operator's log line and the event log.
    pub fn advice(self) -> &'static str {
        match self {
            Misconfiguration::Unauthorized => {
                "the upstream refused the gateway's credentials: check the API key or token in                  the upstream's `headers` (and the environment variable it names), then restart                  the gateway"
            }
            Misconfiguration::Forbidden => {
                "the upstream's credentials may not do this: give the key the permission the                  call needs, or use a key that has it"
            }
            Misconfiguration::ProxyAuth => {
                "a proxy between the gateway and the upstream wants credentials: configure                  them for the gateway's outgoing requests"
            }
            Misconfiguration::RouteNotFound => {
                "the upstream has no such route: check the tool's `call.method` and                  `call.path` and the upstream's `base_url` against the provider's API"
            }
            Misconfiguration::Connect => {
                "the gateway could not connect to the upstream: check the upstream's                  `base_url` (host and port) and that the provider is up and reachable from                  the gateway"
            }
            Misconfiguration::Dns => {
                "the upstream's host name did not resolve: check the host in its `base_url`                  and the gateway's DNS"
            }
            Misconfiguration::Tls => {
                "the TLS handshake with the upstream failed: check that its `base_url` uses                  https only on a TLS port and that its certificate is valid for the host"
            }
        }
    }
}

impl std::fmt::Display for Misconfiguration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Did the effect happen?
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutcomeClass {
    /// 2xx: it happened.
    Done,
    /// A 4xx refusal (not 408, 409, 425, 429): nothing happened; the model may correct the
    /// arguments.
    Rejected,
    /// Certainly not processed (429, 425, 503 with Retry-After, or never sent): may be
    /// retried with the same key, honouring `retry_after_ms` (capped by the caller).
    NotProcessed { retry_after_ms: Option<u64> },
    /// May have happened: look it up, never retry blindly.
    Ambiguous { why: Ambiguity },
    /// Certainly not processed, because the gateway is misconfigured (SPEC section 5: errors
    /// that are the operator's). Never a rejection and never stored as one: the intent ends
    /// `not_executed`, so a call after the fix may execute it. Retried within the call only
    /// where [`Misconfiguration::retried`] says so.
    Misconfigured { kind: Misconfiguration },
}

/// Why an outcome is ambiguous, for logs and the event log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ambiguity {
    /// No response within the timeout; the provider may still commit.
    Timeout,
    /// The connection broke after the request was sent.
    Dropped,
    /// A 5xx (500, 502, 504, or 503 without Retry-After): the provider may have committed
    /// first (Stripe replays a stored 500 for the key).
    ServerError,
    /// 409: another attempt with this key is running at the provider.
    KeyInUse,
    /// Any other status that proves nothing either way (1xx, 3xx, 408).
    Unexpected,
}

impl Ambiguity {
    pub fn as_str(self) -> &'static str {
        match self {
            Ambiguity::Timeout => "timeout",
            Ambiguity::Dropped => "connection dropped after the request was sent",
            Ambiguity::ServerError => "server error",
            Ambiguity::KeyInUse => "idempotency key in use",
            Ambiguity::Unexpected => "unexpected status",
        }
    }
}

/// Classifies one observation (SPEC section 5's table), knowing nothing of the request
/// beyond it: [`classify_with`] and the default [`RequestFacts`].
pub fn classify(observation: &UpstreamObservation) -> OutcomeClass {
    classify_with(observation, &RequestFacts::default())
}

/// True when an answer with `status` means that the request's route does not exist: a 405
/// always (the path exists for no such method), a 404 only to a fixed route (a path without
/// placeholders), since a 404 to `/v1/orders/{order_id}/refund` is the provider saying that
/// this order does not exist.
pub fn route_not_found(status: u16, fixed_route: bool) -> bool {
    status == 405 || (status == 404 && fixed_route)
}

/// Classifies one observation with what the upstream knows of its request (SPEC section 5's
/// table, with the operator's errors told apart).
pub fn classify_with(observation: &UpstreamObservation, facts: &RequestFacts) -> OutcomeClass {
    let misconfigured = |kind| OutcomeClass::Misconfigured { kind };
    match observation {
        UpstreamObservation::Response {
            status,
            retry_after_ms,
            ..
        } => match *status {
            200..=299 => OutcomeClass::Done,
            401 => misconfigured(Misconfiguration::Unauthorized),
            403 => misconfigured(Misconfiguration::Forbidden),
            407 => misconfigured(Misconfiguration::ProxyAuth),
            status if route_not_found(status, facts.fixed_route) => {
                misconfigured(Misconfiguration::RouteNotFound)
            }
            429 | 425 => OutcomeClass::NotProcessed {
                retry_after_ms: *retry_after_ms,
            },
            503 if retry_after_ms.is_some() => OutcomeClass::NotProcessed {
                retry_after_ms: *retry_after_ms,
            },
            409 => OutcomeClass::Ambiguous {
                why: Ambiguity::KeyInUse,
            },
            408 => OutcomeClass::Ambiguous {
                why: Ambiguity::Unexpected,
            },
            400..=499 => OutcomeClass::Rejected,
            500..=599 => OutcomeClass::Ambiguous {
                why: Ambiguity::ServerError,
            },
            _ => OutcomeClass::Ambiguous {
                why: Ambiguity::Unexpected,
            },
        },
        UpstreamObservation::NotSent { .. } => match facts.unreachable {
            Some(Unreachable::Connect) => misconfigured(Misconfiguration::Connect),
            Some(Unreachable::Dns) => misconfigured(Misconfiguration::Dns),
            Some(Unreachable::Tls) => misconfigured(Misconfiguration::Tls),
            // Not sent for a reason the transport could not name (a request it refused to
            // build, an MCP session being reopened): not processed, nothing more is known.
            None => OutcomeClass::NotProcessed {
                retry_after_ms: None,
            },
        },
        UpstreamObservation::Timeout => OutcomeClass::Ambiguous {
            why: Ambiguity::Timeout,
        },
        UpstreamObservation::Dropped { .. } => OutcomeClass::Ambiguous {
            why: Ambiguity::Dropped,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn response(status: u16, retry_after_ms: Option<u64>) -> UpstreamObservation {
        UpstreamObservation::Response {
            status,
            retry_after_ms,
            body: json!({}),
        }
    }

    #[test]
    fn every_row_of_the_table_is_classified() {
        use Ambiguity::*;
        let rows = [
            (response(200, None), OutcomeClass::Done),
            (response(201, None), OutcomeClass::Done),
            (response(400, None), OutcomeClass::Rejected),
            (response(402, None), OutcomeClass::Rejected),
            (response(404, None), OutcomeClass::Rejected),
            (response(422, None), OutcomeClass::Rejected),
            (
                response(401, None),
                OutcomeClass::Misconfigured {
                    kind: Misconfiguration::Unauthorized,
                },
            ),
            (
                response(403, None),
                OutcomeClass::Misconfigured {
                    kind: Misconfiguration::Forbidden,
                },
            ),
            (
                response(407, None),
                OutcomeClass::Misconfigured {
                    kind: Misconfiguration::ProxyAuth,
                },
            ),
            (
                response(405, None),
                OutcomeClass::Misconfigured {
                    kind: Misconfiguration::RouteNotFound,
                },
            ),
            (
                response(429, Some(2000)),
                OutcomeClass::NotProcessed {
                    retry_after_ms: Some(2000),
                },
            ),
            (
                response(429, None),
                OutcomeClass::NotProcessed {
                    retry_after_ms: None,
                },
            ),
            (
                response(425, None),
                OutcomeClass::NotProcessed {
                    retry_after_ms: None,
                },
            ),
            (
                response(503, Some(1000)),
                OutcomeClass::NotProcessed {
                    retry_after_ms: Some(1000),
                },
            ),
            (
                UpstreamObservation::NotSent {
                    reason: "connection refused".into(),
                },
                OutcomeClass::NotProcessed {
                    retry_after_ms: None,
                },
            ),
            (
                UpstreamObservation::Timeout,
                OutcomeClass::Ambiguous { why: Timeout },
            ),
            (
                UpstreamObservation::Dropped {
                    reason: "reset".into(),
                },
                OutcomeClass::Ambiguous { why: Dropped },
            ),
            (
                response(500, None),
                OutcomeClass::Ambiguous { why: ServerError },
            ),
            (
                response(502, None),
                OutcomeClass::Ambiguous { why: ServerError },
            ),
            (
                response(504, None),
                OutcomeClass::Ambiguous { why: ServerError },
            ),
            (
                response(503, None),
                OutcomeClass::Ambiguous { why: ServerError },
            ),
            (
                response(409, None),
                OutcomeClass::Ambiguous { why: KeyInUse },
            ),
            (
                response(408, None),
                OutcomeClass::Ambiguous { why: Unexpected },
            ),
            (
                response(302, None),
                OutcomeClass::Ambiguous { why: Unexpected },
            ),
        ];
        for (observation, expected) in rows {
            assert_eq!(classify(&observation), expected, "{observation:?}");
        }
    }

    /// The operator's errors (SPEC section 5): what the upstream knows of the request decides
    /// a 404 and a request that was not sent; nothing else changes with it.
    #[test]
    fn every_row_of_the_operators_errors_is_classified() {
        use Misconfiguration::*;
        let misconfigured = |kind| OutcomeClass::Misconfigured { kind };
        let fixed = RequestFacts {
            upstream: Some("payments".into()),
            fixed_route: true,
            unreachable: None,
        };
        let templated = RequestFacts {
            fixed_route: false,
            ..fixed.clone()
        };
        let not_sent = |unreachable| {
            (
                UpstreamObservation::NotSent {
                    reason: "could not connect".into(),
                },
                RequestFacts {
                    unreachable,
                    ..templated.clone()
                },
            )
        };
        let rows = [
            (
                (response(401, None), templated.clone()),
                misconfigured(Unauthorized),
            ),
            (
                (response(403, None), templated.clone()),
                misconfigured(Forbidden),
            ),
            (
                (response(407, None), templated.clone()),
                misconfigured(ProxyAuth),
            ),
            // A 404 to a fixed route: the route is wrong.
            (
                (response(404, None), fixed.clone()),
                misconfigured(RouteNotFound),
            ),
            // A 404 to a path with a placeholder: that order does not exist.
            (
                (response(404, None), templated.clone()),
                OutcomeClass::Rejected,
            ),
            (
                (response(405, None), fixed.clone()),
                misconfigured(RouteNotFound),
            ),
            (
                (response(405, None), templated.clone()),
                misconfigured(RouteNotFound),
            ),
            (not_sent(Some(Unreachable::Connect)), misconfigured(Connect)),
            (not_sent(Some(Unreachable::Dns)), misconfigured(Dns)),
            (not_sent(Some(Unreachable::Tls)), misconfigured(Tls)),
            (
                not_sent(None),
                OutcomeClass::NotProcessed {
                    retry_after_ms: None,
                },
            ),
            // A fixed route changes nothing else.
            ((response(200, None), fixed.clone()), OutcomeClass::Done),
            ((response(402, None), fixed.clone()), OutcomeClass::Rejected),
            ((response(422, None), fixed.clone()), OutcomeClass::Rejected),
            (
                (response(500, None), fixed.clone()),
                OutcomeClass::Ambiguous {
                    why: Ambiguity::ServerError,
                },
            ),
        ];
        for ((observation, facts), expected) in rows {
            assert_eq!(
                classify_with(&observation, &facts),
                expected,
                "{observation:?} {facts:?}"
            );
        }
        // Without facts a 401 is still the operator's, and a 404 the provider's refusal.
        assert_eq!(classify(&response(401, None)), misconfigured(Unauthorized));
        assert_eq!(classify(&response(404, None)), OutcomeClass::Rejected);
    }

    #[test]
    fn only_transport_failures_are_worth_retrying_and_every_kind_has_its_own_word() {
        let retried: Vec<&str> = Misconfiguration::ALL
            .into_iter()
            .filter(|kind| kind.retried())
            .map(Misconfiguration::as_str)
            .collect();
        assert_eq!(retried, ["connect", "dns", "tls"]);
        let mut words: Vec<&str> = Misconfiguration::ALL.map(Misconfiguration::as_str).to_vec();
        words.sort_unstable();
        words.dedup();
        assert_eq!(words.len(), Misconfiguration::ALL.len());
        for kind in Misconfiguration::ALL {
            assert_eq!(serde_json::to_value(kind).unwrap(), kind.as_str());
            assert!(kind.advice().contains(':'), "{kind}: says what to change");
        }
    }
}
