//! What the upstream did, as far as the gateway can tell.
//!
//! An upstream call ends in an [`UpstreamObservation`]: what the transport saw. [`classify`]
//! turns it into an [`OutcomeClass`]: did the effect happen? For a side-effecting tool most
//! errors mean "maybe": the provider may have committed before the response was lost. Only
//! shapes that prove nothing was processed may be retried with the same key.

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

/// Classifies one observation (SPEC section 5's table).
pub fn classify(observation: &UpstreamObservation) -> OutcomeClass {
    match observation {
        UpstreamObservation::Response {
            status,
            retry_after_ms,
            ..
        } => match *status {
            200..=299 => OutcomeClass::Done,
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
        UpstreamObservation::NotSent { .. } => OutcomeClass::NotProcessed {
            retry_after_ms: None,
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
}
