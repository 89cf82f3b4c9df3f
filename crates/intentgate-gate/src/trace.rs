//! Traces of calls (OpenTelemetry): whether they are on, the spans of a call's phases, and
//! the W3C trace context that comes in with a call and goes out with its upstream request.
//!
//! **Off costs nothing.** The process that exports traces turns them on once, at start
//! ([`enable`]); until then [`enabled`] is one relaxed load, and every phase span is
//! [`tracing::Span::none`], so a call does no work for traces and log lines are as before.
//!
//! **Phase spans are not log context.** They have the target [`PHASE_TARGET`], which the
//! log lines leave out: a line about a call still carries the `call` span's tool, key and
//! tenant, whatever phase it was written in.
//!
//! **No argument becomes an attribute.** Attributes are the tool, its effect, the tenant,
//! the intent's id, a hash of its key ([`key_hash`]), the attempt, and what the gateway
//! decided; never a value the caller passed as an argument (which may be `sensitive`), nor a
//! provider's answer. An intent key is rendered from arguments (`refund:8812:49.00`), so it
//! is exported only as that hash; the `key` field the log lines carry is left out of exported
//! spans and their events by the exporter (`intentgate`'s telemetry).

use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, Ordering};

use prometheus_client::metrics::counter::Counter;

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The target of phase spans and of the spans the edges open for a call (HTTP server, MCP):
/// exported as traces, left out of log lines.
pub const PHASE_TARGET: &str = "intentgate::trace";

/// The W3C `traceparent` header, in and out.
pub const TRACEPARENT: &str = "traceparent";
/// The W3C `tracestate` header, in.
pub const TRACESTATE: &str = "tracestate";
/// Longest `tracestate` taken from a caller (the W3C limit is 32 members of at most 256
/// bytes; a longer one is ignored rather than parsed).
pub const TRACESTATE_BYTES_MAX: usize = 8 * 1024;

/// Hex digits of [`key_hash`]: 64 bits, enough to tell the intents of one trace store apart.
pub const KEY_HASH_HEX_LENGTH: usize = 16;

/// The attribute that stands for an intent's key in exported spans: the first
/// [`KEY_HASH_HEX_LENGTH`] hex digits of the SHA-256 of the tenant and the key, so spans of
/// one intent are found together (compute it from a key the console shows) while the key's
/// values stay out of the trace store. A key of guessable values can still be found by
/// trying them, as with any unkeyed hash.
pub fn key_hash(tenant: &str, key: &str) -> String {
    use sha2::{Digest, Sha256};
    use std::fmt::Write;
    let mut digest = Sha256::new();
    digest.update(tenant.as_bytes());
    // A separator that neither a tenant name nor the start of a key holds.
    digest.update([0u8]);
    digest.update(key.as_bytes());
    let mut hex = String::with_capacity(KEY_HASH_HEX_LENGTH);
    for byte in &digest.finalize()[..KEY_HASH_HEX_LENGTH / 2] {
        write!(hex, "{byte:02x}").expect("writing to a String can't fail");
    }
    hex
}

/// Whether this process exports traces; set once by [`enable`].
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Spans the exporter's queue had no room for, in `intentgate_trace_spans_dropped_total`.
static SPANS_DROPPED: LazyLock<Counter> = LazyLock::new(Counter::default);

/// The count of spans dropped because the export queue was full; the exporter adds to it,
/// every gate's metrics show it.
pub fn spans_dropped() -> &'static Counter {
    &SPANS_DROPPED
}

/// Turns traces on for this process: phase spans are opened from now on. Called once, by
/// the command that installed an exporter.
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// True when this process exports traces.
#[inline]
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Opens a phase span of a call when traces are on, [`tracing::Span::none`] otherwise:
/// `phase!("ledger.begin", db.operation.name = "begin")`.
#[macro_export]
macro_rules! phase {
    ($name:expr $(, $($fields:tt)*)?) => {
        if $crate::trace::enabled() {
            ::tracing::info_span!(target: "intentgate::trace", $name $(, $($fields)*)?)
        } else {
            ::tracing::Span::none()
        }
    };
}

/// The remote span a caller's W3C `traceparent` (and `tracestate`) names, or `None` when
/// the header is not a valid version-00 `traceparent` (then the call starts a trace of its
/// own, as the W3C recommendation says).
pub fn parse_traceparent(traceparent: &str, tracestate: Option<&str>) -> Option<SpanContext> {
    let mut parts = traceparent.trim().split('-');
    let (version, trace_id, span_id, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    // A later version may add fields after these four; version 00 has exactly four.
    if version.len() != 2 || version == "ff" || (version == "00" && parts.next().is_some()) {
        return None;
    }
    let lower_hex = |text: &str, length: usize| {
        text.len() == length
            && text
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    if !lower_hex(version, 2)
        || !lower_hex(trace_id, 32)
        || !lower_hex(span_id, 16)
        || !lower_hex(flags, 2)
    {
        return None;
    }
    let trace_id = TraceId::from_hex(trace_id).ok()?;
    let span_id = SpanId::from_hex(span_id).ok()?;
    if trace_id == TraceId::INVALID || span_id == SpanId::INVALID {
        return None;
    }
    let flags = TraceFlags::new(u8::from_str_radix(flags, 16).ok()? & TraceFlags::SAMPLED.to_u8());
    let state = tracestate
        .filter(|state| state.len() <= TRACESTATE_BYTES_MAX)
        .and_then(|state| state.parse::<TraceState>().ok())
        .unwrap_or_default();
    Some(SpanContext::new(trace_id, span_id, flags, true, state))
}

/// Makes the caller's span (its `traceparent`) the parent of `span`, when traces are on
/// and the header is valid.
pub fn adopt_parent(span: &tracing::Span, traceparent: Option<&str>, tracestate: Option<&str>) {
    if !enabled() {
        return;
    }
    let Some(parent) = traceparent.and_then(|value| parse_traceparent(value, tracestate)) else {
        return;
    };
    let context = opentelemetry::Context::new().with_remote_span_context(parent);
    // Fails only for a span that already started exporting, which a fresh span has not.
    let _ = span.set_parent(context);
}

/// The W3C `traceparent` of `span`, to send with an upstream request so that a provider
/// that traces links its span to it; `None` when traces are off or `span` is not traced.
pub fn traceparent_of(span: &tracing::Span) -> Option<String> {
    if !enabled() {
        return None;
    }
    let context = span.context();
    let span_context = context.span().span_context().clone();
    format_traceparent(&span_context)
}

/// [`traceparent_of`] the current span.
pub fn current_traceparent() -> Option<String> {
    traceparent_of(&tracing::Span::current())
}

/// `span_context` as a version-00 `traceparent`, when it is valid.
pub fn format_traceparent(span_context: &SpanContext) -> Option<String> {
    span_context.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            span_context.trace_id(),
            span_context.span_id(),
            span_context.trace_flags().to_u8()
        )
    })
}

/// Links `span` to the span a stored `traceparent` names (the call that executed an
/// intent, for a repeat of it or a re-send), when traces are on.
pub fn link_to(span: &tracing::Span, traceparent: Option<&str>) {
    if !enabled() {
        return;
    }
    if let Some(linked) = traceparent.and_then(|value| parse_traceparent(value, None)) {
        span.add_link(linked);
    }
}

/// Sets an attribute on `span`'s exported span when traces are on; log lines never see it.
pub fn set_attribute(
    span: &tracing::Span,
    key: &'static str,
    value: impl Into<opentelemetry::Value>,
) {
    if enabled() {
        span.set_attribute(key, value);
    }
}

/// Records what the gateway decided about the current call (`execute`, `conflict`,
/// `answer_from_ledger`, ...) on its exported span.
pub(crate) fn set_decision(decision: &'static str) {
    set_attribute(&tracing::Span::current(), "intentgate.decision", decision);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_valid_traceparent_is_read_and_written_back_alike() {
        let header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let parsed = parse_traceparent(header, Some("vendor=value")).unwrap();
        assert!(parsed.is_remote());
        assert!(parsed.is_sampled());
        assert_eq!(parsed.trace_state().get("vendor"), Some("value"));
        assert_eq!(format_traceparent(&parsed).as_deref(), Some(header));
    }

    #[test]
    fn malformed_traceparents_are_ignored() {
        for header in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        ] {
            assert!(parse_traceparent(header, None).is_none(), "{header:?}");
        }
    }

    #[test]
    fn a_tracestate_over_the_bound_is_ignored_and_the_traceparent_kept() {
        let header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let members = |count: usize| {
            (0..count)
                .map(|index| format!("k{index}=v"))
                .collect::<Vec<_>>()
                .join(",")
        };
        let kept = parse_traceparent(header, Some(&members(3))).unwrap();
        assert_eq!(kept.trace_state().header(), members(3));
        let long = members(2_000);
        assert!(long.len() > TRACESTATE_BYTES_MAX);
        let context = parse_traceparent(header, Some(&long)).expect("the traceparent stands");
        assert_eq!(context.trace_state().header(), "");
    }

    #[test]
    fn off_by_default_no_context_goes_out() {
        // `enable` is never called in this crate's unit tests.
        assert!(!enabled());
        assert_eq!(current_traceparent(), None);
        assert!(phase!("validate").is_none());
    }
}
