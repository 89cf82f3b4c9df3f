//! What the upstream did, as far as the gateway can tell.
//!
//! An upstream call ends in an [`UpstreamObservation`]: what the transport saw. [`classify`]
//! turns it into an [`OutcomeClass`]: did the effect happen? For a side-effecting tool most
//! errors mean "maybe": the provider may have committed before the response was lost. Only
//! shapes that prove nothing was processed may be retried with the same key.
//!
//! Some answers are the operator's to fix, not the customer's (docs/design.md section 5): a wrong
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
        /// What the provider's headers said about the answer beyond its status.
        #[serde(default, skip_serializing_if = "ProviderSignals::is_empty")]
        signals: ProviderSignals,
    },
    /// The request never left: connection refused, DNS or TLS failure.
    NotSent { reason: String },
    /// No response within the tool's timeout.
    Timeout,
    /// The connection broke after the request was sent.
    Dropped { reason: String },
}

impl UpstreamObservation {
    /// A response with `status` and `body`, no `Retry-After` and no [`ProviderSignals`]: what
    /// most upstreams answer, and most tests build.
    pub fn response(status: u16, body: Value) -> UpstreamObservation {
        UpstreamObservation::Response {
            status,
            retry_after_ms: None,
            body,
            signals: ProviderSignals::default(),
        }
    }
}

/// What a provider's response headers say about its answer, beyond the status (Stripe's
/// `Idempotent-Replayed` and `Stripe-Should-Retry`). The default says nothing, which is what
/// an upstream without such headers (every MCP server) answers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderSignals {
    /// The provider replayed the answer it stored for this idempotency key, rather than
    /// processing the request (`Idempotent-Replayed: true`). A replayed 5xx will be replayed
    /// for as long as the provider keeps the key: sending the key again can't change it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
    /// The provider's own advice on retrying this request (`Stripe-Should-Retry: true` or
    /// `false`); `None` when it gave none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub should_retry: Option<bool>,
}

impl ProviderSignals {
    pub fn is_empty(&self) -> bool {
        *self == ProviderSignals::default()
    }

    /// The provider said not to retry (`Stripe-Should-Retry: false`).
    pub fn no_retry(&self) -> bool {
        self.should_retry == Some(false)
    }
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
/// (docs/design.md section 5). `as_str` is the `kind` of `intentgate_upstream_errors_total`, a fixed
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
    /// retried with the same key, honouring `retry_after_ms` (capped by the caller), unless
    /// `retry` is false: the provider said not to (`Stripe-Should-Retry: false`), so the
    /// call ends without the bounded retries.
    NotProcessed {
        retry_after_ms: Option<u64>,
        retry: bool,
    },
    /// May have happened: look it up, never retry blindly.
    Ambiguous { why: Ambiguity },
    /// Certainly not processed, because the gateway is misconfigured (docs/design.md section 5: errors
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
    /// A 5xx the provider replayed from what it stored for this key: the key's first
    /// request got it, and may have committed before it failed. Every same-key re-send gets
    /// the same answer while the provider keeps the key.
    ReplayedServerError,
    /// A 5xx the provider said not to retry (`Stripe-Should-Retry: false`).
    ServerErrorNoRetry,
    /// 400 `idempotency_error`: the provider refused this request because its key was first
    /// used for a request with other parameters. Nothing new happened, but the key's first
    /// request may have acted: not a rejection, and not proof that nothing was done.
    KeyReused,
}

impl Ambiguity {
    pub fn as_str(self) -> &'static str {
        match self {
            Ambiguity::Timeout => "timeout",
            Ambiguity::Dropped => "connection dropped after the request was sent",
            Ambiguity::ServerError => "server error",
            Ambiguity::KeyInUse => "idempotency key in use",
            Ambiguity::Unexpected => "unexpected status",
            Ambiguity::ReplayedServerError => "server error replayed for this key",
            Ambiguity::ServerErrorNoRetry => "server error the provider says not to retry",
            Ambiguity::KeyReused => "idempotency key first used with other parameters",
        }
    }

    /// Why same-key re-sends of the intent stop for good after this answer, if they do:
    /// the provider will answer every one the same way.
    pub fn resend_stop(self) -> Option<ResendStop> {
        match self {
            Ambiguity::ReplayedServerError => Some(ResendStop::ReplayedServerError),
            Ambiguity::ServerErrorNoRetry => Some(ResendStop::ProviderSaysNoRetry),
            Ambiguity::KeyReused => Some(ResendStop::KeyReused),
            Ambiguity::Timeout
            | Ambiguity::Dropped
            | Ambiguity::ServerError
            | Ambiguity::KeyInUse
            | Ambiguity::Unexpected => None,
        }
    }
}

/// Why an intent's same-key re-sends stopped for good: the provider's answer to its key
/// can't change, so only lookups (and reconciliation, or a person) can settle it. Kept with
/// the intent in the ledger (`as_str` is the stored word).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResendStop {
    /// The provider replays a stored 5xx for the key.
    ReplayedServerError,
    /// The provider answered a 5xx and said not to retry it.
    ProviderSaysNoRetry,
    /// The provider says the key was first used for a request with other parameters.
    KeyReused,
}

impl ResendStop {
    pub const ALL: [ResendStop; 3] = [
        ResendStop::ReplayedServerError,
        ResendStop::ProviderSaysNoRetry,
        ResendStop::KeyReused,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ResendStop::ReplayedServerError => "replayed_server_error",
            ResendStop::ProviderSaysNoRetry => "provider_says_no_retry",
            ResendStop::KeyReused => "key_reused",
        }
    }

    /// Why, in words, for the event log and wherever an intent is shown.
    pub fn describe(self) -> &'static str {
        match self {
            ResendStop::ReplayedServerError => {
                "the provider replays a stored server error (5xx) for this key"
            }
            ResendStop::ProviderSaysNoRetry => {
                "the provider answered a server error and said not to retry it"
            }
            ResendStop::KeyReused => {
                "the provider says this key was first used for a request with other parameters"
            }
        }
    }
}

impl std::fmt::Display for ResendStop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for ResendStop {
    type Err = String;

    fn from_str(text: &str) -> Result<ResendStop, String> {
        ResendStop::ALL
            .into_iter()
            .find(|stop| stop.as_str() == text)
            .ok_or_else(|| format!("`{text}` is not a reason re-sends stop"))
    }
}

/// The `error.type` of a provider's error body (Stripe's shape: `{"error": {"type": ...}}`).
fn error_type(body: &Value) -> Option<&str> {
    body.pointer("/error/type").and_then(Value::as_str)
}

/// Classifies one observation (section 5 of docs/design.md's table), knowing nothing of the request
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

/// Classifies one observation with what the upstream knows of its request (section 5 of docs/design.md's
/// table, with the operator's errors told apart).
pub fn classify_with(observation: &UpstreamObservation, facts: &RequestFacts) -> OutcomeClass {
    let misconfigured = |kind| OutcomeClass::Misconfigured { kind };
    match observation {
        UpstreamObservation::Response {
            status,
            retry_after_ms,
            body,
            signals,
        } => {
            let ambiguous = |why| OutcomeClass::Ambiguous { why };
            let not_processed = OutcomeClass::NotProcessed {
                retry_after_ms: *retry_after_ms,
                retry: !signals.no_retry(),
            };
            match *status {
                200..=299 => OutcomeClass::Done,
                401 => misconfigured(Misconfiguration::Unauthorized),
                403 => misconfigured(Misconfiguration::Forbidden),
                407 => misconfigured(Misconfiguration::ProxyAuth),
                status if route_not_found(status, facts.fixed_route) => {
                    misconfigured(Misconfiguration::RouteNotFound)
                }
                429 | 425 => not_processed,
                // A stored answer replayed: whatever the first request got, it may have
                // acted, and the key will answer so again.
                500..=599 if signals.replayed => ambiguous(Ambiguity::ReplayedServerError),
                503 if retry_after_ms.is_some() => not_processed,
                500..=599 if signals.no_retry() => ambiguous(Ambiguity::ServerErrorNoRetry),
                409 => ambiguous(Ambiguity::KeyInUse),
                408 => ambiguous(Ambiguity::Unexpected),
                400 if error_type(body) == Some("idempotency_error") => {
                    ambiguous(Ambiguity::KeyReused)
                }
                // 402 and every `card_error` among them: the provider's refusal, its message
                // for the model.
                400..=499 => OutcomeClass::Rejected,
                500..=599 => ambiguous(Ambiguity::ServerError),
                _ => ambiguous(Ambiguity::Unexpected),
            }
        }
        UpstreamObservation::NotSent { .. } => match facts.unreachable {
            Some(Unreachable::Connect) => misconfigured(Misconfiguration::Connect),
            Some(Unreachable::Dns) => misconfigured(Misconfiguration::Dns),
            Some(Unreachable::Tls) => misconfigured(Misconfiguration::Tls),
            // Not sent for a reason the transport could not name (a request it refused to
            // build, an MCP session being reopened): not processed, nothing more is known.
            None => OutcomeClass::NotProcessed {
                retry_after_ms: None,
                retry: true,
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
            signals: ProviderSignals::default(),
        }
    }

    /// A response with what the provider's headers said.
    fn signalled(status: u16, replayed: bool, should_retry: Option<bool>) -> UpstreamObservation {
        UpstreamObservation::Response {
            status,
            retry_after_ms: None,
            body: json!({}),
            signals: ProviderSignals {
                replayed,
                should_retry,
            },
        }
    }

    /// A Stripe error body of `type`.
    fn stripe_error(status: u16, kind: &str, message: &str) -> UpstreamObservation {
        UpstreamObservation::response(status, json!({"error": {"type": kind, "message": message}}))
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
                    retry: true,
                },
            ),
            (
                response(429, None),
                OutcomeClass::NotProcessed {
                    retry_after_ms: None,
                    retry: true,
                },
            ),
            (
                response(425, None),
                OutcomeClass::NotProcessed {
                    retry_after_ms: None,
                    retry: true,
                },
            ),
            (
                response(503, Some(1000)),
                OutcomeClass::NotProcessed {
                    retry_after_ms: Some(1000),
                    retry: true,
                },
            ),
            (
                UpstreamObservation::NotSent {
                    reason: "connection refused".into(),
                },
                OutcomeClass::NotProcessed {
                    retry_after_ms: None,
                    retry: true,
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
            // What the provider's headers say (Stripe's `Idempotent-Replayed` and
            // `Stripe-Should-Retry`), and its error bodies.
            (
                signalled(500, true, None),
                OutcomeClass::Ambiguous {
                    why: ReplayedServerError,
                },
            ),
            (
                signalled(502, true, Some(true)),
                OutcomeClass::Ambiguous {
                    why: ReplayedServerError,
                },
            ),
            (
                signalled(500, false, Some(false)),
                OutcomeClass::Ambiguous {
                    why: ServerErrorNoRetry,
                },
            ),
            (
                signalled(500, false, Some(true)),
                OutcomeClass::Ambiguous { why: ServerError },
            ),
            // A replayed success is a success, a replayed refusal a refusal.
            (signalled(200, true, None), OutcomeClass::Done),
            (signalled(400, true, None), OutcomeClass::Rejected),
            (
                signalled(429, false, Some(false)),
                OutcomeClass::NotProcessed {
                    retry_after_ms: None,
                    retry: false,
                },
            ),
            (
                signalled(429, false, Some(true)),
                OutcomeClass::NotProcessed {
                    retry_after_ms: None,
                    retry: true,
                },
            ),
            (
                stripe_error(
                    400,
                    "idempotency_error",
                    "Keys for idempotent requests can only be used with the same parameters they were first used with.",
                ),
                OutcomeClass::Ambiguous { why: KeyReused },
            ),
            (
                stripe_error(
                    400,
                    "invalid_request_error",
                    "Missing required param: amount.",
                ),
                OutcomeClass::Rejected,
            ),
            (
                stripe_error(402, "card_error", "Your card was declined."),
                OutcomeClass::Rejected,
            ),
            (
                stripe_error(
                    409,
                    "idempotency_error",
                    "There is currently another in-progress request using this Stripe API key and Idempotency-Key.",
                ),
                OutcomeClass::Ambiguous { why: KeyInUse },
            ),
        ];
        for (observation, expected) in rows {
            assert_eq!(classify(&observation), expected, "{observation:?}");
        }
    }

    /// The operator's errors (docs/design.md section 5): what the upstream knows of the request decides
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
                    retry: true,
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
    fn only_answers_the_provider_will_repeat_stop_re_sends_and_each_reason_reads_back() {
        use Ambiguity::*;
        let stopping: Vec<Ambiguity> = [
            Timeout,
            Dropped,
            ServerError,
            KeyInUse,
            Unexpected,
            ReplayedServerError,
            ServerErrorNoRetry,
            KeyReused,
        ]
        .into_iter()
        .filter(|why| why.resend_stop().is_some())
        .collect();
        assert_eq!(
            stopping,
            [ReplayedServerError, ServerErrorNoRetry, KeyReused]
        );
        for stop in ResendStop::ALL {
            assert_eq!(stop.as_str().parse::<ResendStop>(), Ok(stop));
            assert_eq!(serde_json::to_value(stop).unwrap(), stop.as_str());
            assert!(stop.describe().starts_with("the provider"), "{stop}");
        }
        assert!("replayed".parse::<ResendStop>().is_err());
    }

    /// Observations stored before the provider's headers were read have no `signals`, and
    /// one without any says nothing about them when written.
    #[test]
    fn an_observation_without_signals_reads_and_writes_as_before() {
        let stored = json!({"kind": "response", "status": 500, "retry_after_ms": null, "body": {}});
        let observation: UpstreamObservation = serde_json::from_value(stored.clone()).unwrap();
        assert_eq!(observation, response(500, None));
        assert_eq!(serde_json::to_value(&observation).unwrap(), stored);
        let replayed = signalled(500, true, Some(false));
        let text = serde_json::to_value(&replayed).unwrap();
        assert_eq!(
            text["signals"],
            json!({"replayed": true, "should_retry": false})
        );
        assert_eq!(
            serde_json::from_value::<UpstreamObservation>(text).unwrap(),
            replayed
        );
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
