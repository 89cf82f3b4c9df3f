/**
 * W3C trace context for the gateway's requests, when the application traces with
 * OpenTelemetry: the current span's context goes out as `traceparent` (and `tracestate`),
 * so the gateway's trace of a call continues the agent's.
 *
 * `@opentelemetry/api` is an optional peer dependency, imported on first use; where it is
 * not installed, or no span is current, nothing is added. The propagator the application
 * registered is asked first (it may add `baggage` or other headers); when it wrote no
 * `traceparent` (the API's default propagator writes nothing until an SDK registers one),
 * the current span's context is written as W3C `traceparent` here.
 *
 * @module
 */

type TraceApi = typeof import("@opentelemetry/api");

let api: Promise<TraceApi | undefined> | undefined;

function loadApi(): Promise<TraceApi | undefined> {
  api ??= import("@opentelemetry/api").then(
    (module) => module,
    () => undefined,
  );
  return api;
}

/** The trace headers of the current context: `{}` without OpenTelemetry or outside a span. */
export async function traceHeaders(): Promise<Record<string, string>> {
  const otel = await loadApi();
  if (otel === undefined) {
    return {};
  }
  const active = otel.context.active();
  const carrier: Record<string, string> = {};
  otel.propagation.inject(active, carrier);
  if (carrier.traceparent === undefined) {
    const span = otel.trace.getSpanContext(active);
    if (span !== undefined && otel.trace.isSpanContextValid(span)) {
      const flags = (span.traceFlags & 0xff).toString(16).padStart(2, "0");
      carrier.traceparent = `00-${span.traceId}-${span.spanId}-${flags}`;
      const state = span.traceState?.serialize();
      if (state) {
        carrier.tracestate = state;
      }
    }
  }
  return carrier;
}
