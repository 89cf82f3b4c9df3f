//! `HttpUpstream` against a real HTTP server on a loopback port: every observation shape of
//! docs/design.md section 5, the idempotency header, URL safety of path arguments, body templates,
//! header injection, redirects, lookups and secrets.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Request, State};
use axum::http::{StatusCode, Uri, header};
use axum::response::IntoResponse;
use axum::routing::{any, get, post};
use common::*;
use intentgate_core::{
    Ambiguity, CallStatus, Effect, Misconfiguration, OutcomeClass, ProviderSignals, RequestFacts,
    Unreachable, UpstreamObservation, classify, classify_with,
};
use intentgate_gate::{
    CallContext, Gate, GateOptions, LookupOutcome, SystemClock, Upstream, UpstreamCall,
};
use intentgate_http::{HttpError, HttpTool, HttpUpstream, NOT_BUILT_STATUS};
use intentgate_ledger::{Ledger, SqliteLedger, SqliteOptions};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn refund_call() -> intentgate_http::spec::CallSpec {
    call_spec(json!({
        "upstream": "payments",
        "method": "POST",
        "path": "/v1/refunds",
        "body": {"order_id": "{order_id}", "amount": "{amount:.2}"},
        "result": {"pointer": "/refund"},
    }))
}

fn body_of(observation: &UpstreamObservation) -> &Value {
    match observation {
        UpstreamObservation::Response { body, .. } => body,
        other => panic!("expected a response, got {other:?}"),
    }
}

/// A response's message for a request that was never sent.
fn not_built_message(observation: &UpstreamObservation) -> String {
    match observation {
        UpstreamObservation::Response { status, body, .. } => {
            assert_eq!(*status, NOT_BUILT_STATUS, "{body}");
            assert_eq!(body["error"]["type"], "request_not_built", "{body}");
            assert_eq!(body["error"]["sent"], false, "{body}");
            body["error"]["message"].as_str().unwrap().to_owned()
        }
        other => panic!("expected a not-built response, got {other:?}"),
    }
}

#[tokio::test]
async fn a_2xx_becomes_a_response_with_the_whole_json_body() {
    let base = serve(Router::new().route(
        "/v1/refunds",
        post(|| async { axum::Json(json!({"id": "re_1", "refund": {"amount": "49.00"}})) }),
    ))
    .await;
    let upstream = upstream_with(&base, "refund_order", refund_call(), None);
    let tool = definition("refund_order", Effect::SideEffect, TIMEOUT);
    let arguments = json!({"order_id": "8812", "amount": 49});

    let observation = upstream.execute(call(&tool, &arguments)).await;

    assert_eq!(
        observation,
        UpstreamObservation::response(200, json!({"id": "re_1", "refund": {"amount": "49.00"}}))
    );
    assert_eq!(classify(&observation), OutcomeClass::Done);
    // The gate keeps the whole body (it reads the external id from it); the model sees the
    // result pointer's part.
    assert_eq!(
        upstream.result_view("refund_order", body_of(&observation)),
        json!({"amount": "49.00"})
    );
    // A body without that part (an error) is shown whole.
    assert_eq!(
        upstream.result_view("refund_order", &json!({"error": "x"})),
        json!({"error": "x"})
    );
}

#[tokio::test]
async fn a_402_is_a_response_that_the_gate_classifies_as_rejected() {
    let base = serve(Router::new().route(
        "/v1/refunds",
        post(|| async {
            let body = json!({"error": {"type": "card_error", "message": "card declined"}});
            (StatusCode::PAYMENT_REQUIRED, axum::Json(body))
        }),
    ))
    .await;
    let upstream = upstream_with(&base, "refund_order", refund_call(), None);
    let tool = definition("refund_order", Effect::SideEffect, TIMEOUT);
    let arguments = json!({"order_id": "8812", "amount": 49});

    let observation = upstream.execute(call(&tool, &arguments)).await;

    assert_eq!(
        observation,
        UpstreamObservation::response(
            402,
            json!({"error": {"type": "card_error", "message": "card declined"}})
        )
    );
    assert_eq!(classify(&observation), OutcomeClass::Rejected);
}

#[tokio::test]
async fn a_429_carries_retry_after_given_in_seconds_or_as_a_date() {
    let base = serve(
        Router::new()
            .route(
                "/seconds",
                post(|| async { (StatusCode::TOO_MANY_REQUESTS, [(header::RETRY_AFTER, "2")]) }),
            )
            .route(
                "/date",
                post(|| async {
                    let date = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(10));
                    (StatusCode::TOO_MANY_REQUESTS, [(header::RETRY_AFTER, date)])
                }),
            ),
    )
    .await;
    let tool = definition("refund_order", Effect::SideEffect, TIMEOUT);
    let arguments = json!({"order_id": "8812", "amount": 49});

    let seconds = upstream_with(
        &base,
        "refund_order",
        call_spec(json!({"upstream": "payments", "method": "POST", "path": "/seconds"})),
        None,
    );
    let observation = seconds.execute(call(&tool, &arguments)).await;
    assert_eq!(
        observation,
        UpstreamObservation::Response {
            status: 429,
            retry_after_ms: Some(2000),
            body: Value::Null,
            signals: ProviderSignals::default(),
        }
    );
    assert_eq!(
        classify(&observation),
        OutcomeClass::NotProcessed {
            retry_after_ms: Some(2000),
            retry: true,
        }
    );

    let date = upstream_with(
        &base,
        "refund_order",
        call_spec(json!({"upstream": "payments", "method": "POST", "path": "/date"})),
        None,
    );
    let observation = date.execute(call(&tool, &arguments)).await;
    let UpstreamObservation::Response {
        status: 429,
        retry_after_ms: Some(retry_after_ms),
        ..
    } = observation
    else {
        panic!("expected a 429 with Retry-After, got {observation:?}");
    };
    // Ten seconds from when the server wrote it, at one-second resolution, less however
    // long the answer took to arrive: a date read relative to now, not zero and not epoch.
    assert!(
        (1_000..=10_000).contains(&retry_after_ms),
        "{retry_after_ms}"
    );
}

/// Stripe stores a key's first answer, a 500 included, and replays it with
/// `Idempotent-Replayed: true`; `Stripe-Should-Retry` is its advice on retrying. Both reach
/// the classification, which stops re-sends on a replayed 5xx and retries within a call on
/// a 429 only where the provider did not say no.
#[tokio::test]
async fn stripes_replay_and_retry_headers_reach_the_classification() {
    let base = serve(
        Router::new()
            .route(
                "/replayed",
                post(|| async {
                    (
                        StatusCode::INTERNAL_SERVER_ERROR,
                        [("Idempotent-Replayed", "true")],
                        axum::Json(json!({"error": {"type": "api_error"}})),
                    )
                }),
            )
            .route(
                "/limited",
                post(|| async {
                    (
                        StatusCode::TOO_MANY_REQUESTS,
                        [("Stripe-Should-Retry", "false")],
                    )
                }),
            ),
    )
    .await;
    let tool = definition("refund_order", Effect::SideEffect, TIMEOUT);
    let arguments = json!({"order_id": "8812", "amount": 49});
    let at = |path: &str| {
        upstream_with(
            &base,
            "refund_order",
            call_spec(json!({"upstream": "payments", "method": "POST", "path": path})),
            None,
        )
    };

    let replayed = at("/replayed").execute(call(&tool, &arguments)).await;
    assert!(
        matches!(
            &replayed,
            UpstreamObservation::Response {
                status: 500,
                signals: ProviderSignals {
                    replayed: true,
                    should_retry: None
                },
                ..
            }
        ),
        "{replayed:?}"
    );
    assert_eq!(
        classify(&replayed),
        OutcomeClass::Ambiguous {
            why: Ambiguity::ReplayedServerError
        }
    );
    let limited = at("/limited").execute(call(&tool, &arguments)).await;
    assert_eq!(
        classify(&limited),
        OutcomeClass::NotProcessed {
            retry_after_ms: None,
            retry: false,
        },
        "{limited:?}"
    );
}

#[tokio::test]
async fn a_closed_port_is_not_sent_and_the_reason_hides_secrets() {
    let base = closed_port_url();
    let upstream = upstream_with(&base, "refund_order", refund_call(), None);
    let tool = definition("refund_order", Effect::SideEffect, TIMEOUT);
    let arguments = json!({"order_id": "8812", "amount": 49});

    let observation = upstream.execute(call(&tool, &arguments)).await;

    let UpstreamObservation::NotSent { reason } = &observation else {
        panic!("expected not sent, got {observation:?}");
    };
    assert!(reason.contains("could not connect"), "{reason}");
    assert!(
        !reason.contains(SECRET) && !reason.contains(&base),
        "{reason}"
    );
    assert_eq!(
        classify(&observation),
        OutcomeClass::NotProcessed {
            retry_after_ms: None,
            retry: true,
        }
    );
}

#[tokio::test]
async fn a_tls_handshake_that_fails_is_not_sent() {
    let (recorder, base) = serve_recording().await;
    // The server speaks plain HTTP, so the TLS handshake fails before any request is written.
    let base = base.replace("http://", "https://");
    let upstream = upstream_with(&base, "refund_order", refund_call(), None);
    let tool = definition("refund_order", Effect::SideEffect, TIMEOUT);
    let arguments = json!({"order_id": "8812", "amount": 49});

    let observation = upstream.execute(call(&tool, &arguments)).await;

    assert!(
        matches!(observation, UpstreamObservation::NotSent { .. }),
        "{observation:?}"
    );
    assert!(recorder.seen().is_empty());
}

#[tokio::test]
async fn a_handler_slower_than_the_timeout_is_a_timeout() {
    let base = serve(Router::new().route(
        "/v1/refunds",
        post(|| async {
            tokio::time::sleep(Duration::from_secs(30)).await;
            axum::Json(json!({"id": "re_1"}))
        }),
    ))
    .await;
    let upstream = upstream_with(&base, "refund_order", refund_call(), None);
    let tool = definition(
        "refund_order",
        Effect::SideEffect,
        Duration::from_millis(200),
    );
    let arguments = json!({"order_id": "8812", "amount": 49});

    let observation = upstream.execute(call(&tool, &arguments)).await;

    assert_eq!(observation, UpstreamObservation::Timeout);
}

#[tokio::test]
async fn a_body_stream_that_fails_after_the_status_is_dropped() {
    let base = serve(Router::new().route(
        "/v1/refunds",
        post(|| async {
            // The status and the start of the body go out, then the body fails.
            let stream = futures_util::stream::unfold(0, |step| async move {
                match step {
                    0 => Some((Ok(Bytes::from_static(b"{\"id\": \"re_")), 1)),
                    1 => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        Some((Err(std::io::Error::other("the provider crashed")), 2))
                    }
                    _ => None,
                }
            });
            (StatusCode::OK, Body::from_stream(stream))
        }),
    ))
    .await;
    let upstream = upstream_with(&base, "refund_order", refund_call(), None);
    let tool = definition("refund_order", Effect::SideEffect, TIMEOUT);
    let arguments = json!({"order_id": "8812", "amount": 49});

    let observation = upstream.execute(call(&tool, &arguments)).await;

    assert!(
        matches!(observation, UpstreamObservation::Dropped { .. }),
        "{observation:?}"
    );
    assert!(matches!(
        classify(&observation),
        OutcomeClass::Ambiguous { .. }
    ));
}

/// A server that reads one request and answers with `response`, then closes the connection.
async fn raw_server(response: &'static [u8]) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut request = Vec::new();
        let mut buffer = [0u8; 4096];
        while !request.windows(4).any(|window| window == b"\r\n\r\n") {
            let read = socket.read(&mut buffer).await.unwrap();
            if read == 0 {
                return;
            }
            request.extend_from_slice(&buffer[..read]);
        }
        socket.write_all(response).await.unwrap();
        // Dropping the socket closes the connection.
    });
    format!("http://{address}")
}

#[tokio::test]
async fn a_body_shorter_than_its_content_length_is_dropped() {
    let base = raw_server(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"id\":",
    )
    .await;
    let upstream = upstream_with(&base, "refund_order", refund_call(), None);
    let tool = definition("refund_order", Effect::SideEffect, TIMEOUT);
    let arguments = json!({"order_id": "8812", "amount": 49});

    let observation = upstream.execute(call(&tool, &arguments)).await;

    assert!(
        matches!(observation, UpstreamObservation::Dropped { .. }),
        "{observation:?}"
    );
}

#[tokio::test]
async fn a_connection_closed_after_the_request_was_read_is_dropped() {
    let base = raw_server(b"").await;
    let upstream = upstream_with(&base, "refund_order", refund_call(), None);
    let tool = definition("refund_order", Effect::SideEffect, TIMEOUT);
    let arguments = json!({"order_id": "8812", "amount": 49});

    let observation = upstream.execute(call(&tool, &arguments)).await;

    let UpstreamObservation::Dropped { reason } = &observation else {
        panic!("expected dropped, got {observation:?}");
    };
    assert!(!reason.contains(&base), "{reason}");
}

#[tokio::test]
async fn the_idempotency_header_carries_the_key_on_side_effects_only() {
    let recorder = Recorder::default();
    let base = serve(
        Router::new()
            .route("/v1/refunds", post(record_and_echo))
            .route("/v1/orders/{order_id}", get(record_and_echo))
            .with_state(recorder.clone()),
    )
    .await;
    let tools = BTreeMap::from([
        (
            "refund_order".to_owned(),
            HttpTool {
                call: refund_call(),
                lookup: None,
            },
        ),
        (
            "get_order".to_owned(),
            HttpTool {
                call: call_spec(json!({
                    "upstream": "payments", "method": "GET", "path": "/v1/orders/{order_id}",
                    "query": {"expand": "customer", "note": "{note}"},
                    "headers": {"Authorization": "Bearer override", "X-Order": "{order_id}"},
                })),
                lookup: None,
            },
        ),
    ]);
    let upstream = HttpUpstream::new(payments(&base), tools).unwrap();
    let refund = definition("refund_order", Effect::SideEffect, TIMEOUT);
    let get_order = definition("get_order", Effect::Read, TIMEOUT);
    let refund_arguments = json!({"order_id": "8812", "amount": 49});
    let read_arguments = json!({"order_id": "8812"});

    upstream.execute(call(&refund, &refund_arguments)).await;
    upstream.execute(call(&get_order, &read_arguments)).await;

    let seen = recorder.seen();
    assert_eq!(seen.len(), 2);
    let (side_effect, read) = (&seen[0], &seen[1]);
    assert_eq!(side_effect.method, "POST");
    assert_eq!(
        side_effect.headers["idempotency-key"],
        "refund_order:refund:8812"
    );
    assert_eq!(
        side_effect.headers["authorization"],
        format!("Bearer {SECRET}").as_str()
    );
    assert_eq!(side_effect.headers["content-type"], "application/json");
    assert_eq!(read.method, "GET");
    assert!(!read.headers.contains_key("idempotency-key"));
    // A tool header replaces the upstream's header of the same name.
    assert_eq!(read.headers["authorization"], "Bearer override");
    assert_eq!(read.headers["x-order"], "8812");
    // The optional `note` was not given, so its parameter is left out.
    assert_eq!(read.query.as_deref(), Some("expand=customer"));
    assert!(read.body.is_empty());
}

/// A server that records every request, whatever its path, and echoes what it received.
async fn serve_recording() -> (Recorder, String) {
    let recorder = Recorder::default();
    let base = serve(
        Router::new()
            .fallback(record_and_echo)
            .with_state(recorder.clone()),
    )
    .await;
    (recorder, base)
}

async fn record_and_echo(State(recorder): State<Recorder>, request: Request) -> impl IntoResponse {
    let seen = recorder.record(request).await;
    let received: Value = serde_json::from_slice(&seen.body).unwrap_or(Value::Null);
    axum::Json(json!({"id": "re_1", "received": received, "raw_path": seen.raw_path}))
}

#[tokio::test]
async fn path_arguments_reach_the_server_inside_one_segment() {
    let base = serve(
        Router::new()
            .route(
                "/v1/orders/{order_id}",
                get(|Path(order_id): Path<String>, uri: Uri| async move {
                    axum::Json(
                        json!({"route": "order", "order_id": order_id, "raw_path": uri.path()}),
                    )
                }),
            )
            .fallback(any(|uri: Uri| async move {
                (
                    StatusCode::NOT_FOUND,
                    axum::Json(json!({"route": "fallback", "raw_path": uri.path()})),
                )
            })),
    )
    .await;
    let upstream = upstream_with(
        &base,
        "get_order",
        call_spec(
            json!({"upstream": "payments", "method": "GET", "path": "/v1/orders/{order_id}"}),
        ),
        None,
    );
    let tool = definition("get_order", Effect::Read, TIMEOUT);
    let rows = [
        ("../admin", "..%2Fadmin"),
        ("../../v1/admin/keys", "..%2F..%2Fv1%2Fadmin%2Fkeys"),
        ("8812?admin=true", "8812%3Fadmin%3Dtrue"),
        ("8812#fragment", "8812%23fragment"),
        ("a%2Fb", "a%252Fb"),
        ("order 8812", "order%208812"),
        ("8812\nX-Evil: 1", "8812%0AX-Evil%3A%201"),
    ];
    for (order_id, encoded) in rows {
        let arguments = json!({ "order_id": order_id });

        let observation = upstream.execute(call(&tool, &arguments)).await;

        let body = body_of(&observation);
        assert_eq!(body["route"], "order", "{order_id:?}: {body}");
        assert_eq!(body["order_id"], order_id, "{order_id:?}: {body}");
        assert_eq!(
            body["raw_path"],
            format!("/v1/orders/{encoded}"),
            "{order_id:?}"
        );
    }
}

#[tokio::test]
async fn path_arguments_that_would_change_the_url_are_never_sent() {
    let (recorder, base) = serve_recording().await;
    let upstream = upstream_with(
        &base,
        "get_order",
        call_spec(
            json!({"upstream": "payments", "method": "GET", "path": "/v1/orders/{order_id}/refunds"}),
        ),
        None,
    );
    let tool = definition("get_order", Effect::Read, TIMEOUT);
    for (arguments, expected) in [
        (json!({"order_id": ".."}), "URL parsers remove"),
        (json!({"order_id": "."}), "URL parsers remove"),
        (json!({"order_id": ""}), "empty"),
        (json!({}), "argument `order_id`"),
        (json!({"order_id": {"id": 1}}), "array or object"),
    ] {
        let observation = upstream.execute(call(&tool, &arguments)).await;

        let message = not_built_message(&observation);
        assert!(message.contains(expected), "{arguments}: {message}");
        assert_eq!(classify(&observation), OutcomeClass::Rejected);
    }
    assert!(recorder.seen().is_empty(), "{:?}", recorder.seen());
}

#[tokio::test]
async fn a_body_template_keeps_number_types() {
    let recorder = Recorder::default();
    let base = serve(
        Router::new()
            .route("/v1/refunds", post(record_and_echo))
            .with_state(recorder.clone()),
    )
    .await;
    let upstream = upstream_with(
        &base,
        "refund_order",
        call_spec(json!({
            "upstream": "payments", "method": "POST", "path": "/v1/refunds",
            "body": {
                "order_id": "{order_id}",
                "amount": "{amount}",
                "amount_text": "{amount:.2}",
                "count": "{count}",
                "note": "{note}",
                "customer_id": "{customer.id}",
                "description": "refund of order {order_id}",
                "metadata": {"intent_key": "{intent_key}"},
            },
        })),
        None,
    );
    let tool = definition("refund_order", Effect::SideEffect, TIMEOUT);
    let arguments = json!({"order_id": "8812", "amount": 49.5, "count": 3, "customer": {"id": 7}});

    let observation = upstream.execute(call(&tool, &arguments)).await;

    let received = &body_of(&observation)["received"];
    assert_eq!(
        received,
        &json!({
            "order_id": "8812",
            "amount": 49.5,
            "amount_text": "49.50",
            "count": 3,
            "customer_id": 7,
            "description": "refund of order 8812",
            "metadata": {"intent_key": "refund:8812"},
        })
    );
    assert!(received["amount"].is_f64() && received["count"].is_u64());
    assert!(received.get("note").is_none());
}

#[tokio::test]
async fn a_header_value_with_a_newline_is_refused_and_nothing_is_sent() {
    let (recorder, base) = serve_recording().await;
    let upstream = upstream_with(
        &base,
        "refund_order",
        call_spec(json!({
            "upstream": "payments", "method": "POST", "path": "/v1/refunds",
            "headers": {"X-Note": "note: {note}"},
        })),
        None,
    );
    let tool = definition("refund_order", Effect::SideEffect, TIMEOUT);
    for note in ["a\r\nX-Evil: 1", "a\nb"] {
        let arguments = json!({"order_id": "8812", "note": note});

        let check = upstream.check(call(&tool, &arguments)).unwrap_err();
        let observation = upstream.execute(call(&tool, &arguments)).await;

        assert!(
            check.contains("`note`") && check.contains("X-Note") && check.contains("line break"),
            "{check}"
        );
        let message = not_built_message(&observation);
        assert_eq!(message, check);
    }
    assert!(recorder.seen().is_empty());
    let fine = json!({"order_id": "8812", "note": "tab\tand é"});
    upstream.check(call(&tool, &fine)).unwrap();
}

// Found by attack: a request that could not be built (a line break in a header value) was
// answered as the provider's refusal and stored as a rejected intent. Through a gate it is
// now `invalid_arguments`, naming the argument, with nothing recorded and nothing sent.
#[tokio::test]
async fn a_gate_refuses_a_header_line_break_as_invalid_arguments_and_records_nothing() {
    let (recorder, base) = serve_recording().await;
    let upstream = upstream_with(
        &base,
        "refund_order",
        call_spec(json!({
            "upstream": "payments", "method": "POST", "path": "/v1/refunds",
            "headers": {"X-Note": "note: {note}", "X-Intent": "{intent_id}"},
        })),
        None,
    );
    let folder = tempfile::tempdir().unwrap();
    let ledger = Arc::new(
        SqliteLedger::open(folder.path().join("ledger.db"), SqliteOptions::default()).unwrap(),
    );
    let gate = Gate::new(
        vec![definition("refund_order", Effect::SideEffect, TIMEOUT)],
        ledger.clone(),
        Arc::new(upstream),
        Arc::new(SystemClock),
        GateOptions::default(),
    )
    .unwrap();
    for (arguments, intent_id, named) in [
        (
            json!({"order_id": "8812", "note": "a\r\nBcc: x@evil.com"}),
            None,
            "`note`",
        ),
        (
            json!({"order_id": "8812", "note": "fine"}),
            Some("id\r\nX-Evil: 1"),
            "`intent_id`",
        ),
    ] {
        let context = CallContext {
            intent_id: intent_id.map(str::to_owned),
            ..CallContext::default()
        };

        let outcome = gate
            .call("refund_order", arguments, &context)
            .await
            .unwrap();

        assert_eq!(outcome.status, CallStatus::InvalidArguments, "{outcome:?}");
        assert!(outcome.message.contains(named), "{}", outcome.message);
        assert!(
            outcome
                .errors
                .iter()
                .any(|error| error.contains("line break"))
        );
    }
    assert!(ledger.list(0, 10).await.unwrap().is_empty());
    assert!(recorder.seen().is_empty(), "{:?}", recorder.seen());

    let outcome = gate
        .call(
            "refund_order",
            json!({"order_id": "8812", "note": "fine"}),
            &CallContext {
                intent_id: Some("int_1".into()),
                ..CallContext::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(outcome.status, CallStatus::Done, "{outcome:?}");
    let seen = recorder.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].headers["x-note"], "note: fine");
}

// Found by attack: an amount went through an f64 on its way into a request body, so what the
// provider received was not what the caller sent. A number in the arguments now reaches the
// body exactly as written, digits and all.
#[tokio::test]
async fn a_body_template_sends_numbers_exactly_as_written() {
    let recorder = Recorder::default();
    let base = serve(
        Router::new()
            .route("/v1/refunds", post(record_and_echo))
            .with_state(recorder.clone()),
    )
    .await;
    let upstream = upstream_with(
        &base,
        "refund_order",
        call_spec(json!({
            "upstream": "payments", "method": "POST", "path": "/v1/refunds",
            "body": {"amount": "{amount}", "count": "{count}", "customer": "{customer}"},
        })),
        None,
    );
    let tool = definition("refund_order", Effect::SideEffect, TIMEOUT);
    let arguments: Value = serde_json::from_str(
        r#"{"order_id": "8812", "amount": 49.9999999999999999, "count": 12345678901234567890123,
            "customer": {"credit": 0.1000000000000000055511151231257827, "tiny": 1e-400}}"#,
    )
    .unwrap();

    upstream.execute(call(&tool, &arguments)).await;

    let seen = recorder.seen();
    let body = String::from_utf8(seen[0].body.clone()).unwrap();
    for text in [
        "49.9999999999999999",
        "12345678901234567890123",
        "0.1000000000000000055511151231257827",
        "1e-400",
    ] {
        assert!(body.contains(text), "{text} not in {body}");
    }
}

#[tokio::test]
async fn redirects_are_not_followed() {
    let recorder = Recorder::default();
    let base = serve(
        Router::new()
            .route(
                "/v1/refunds",
                post(|| async {
                    (
                        StatusCode::TEMPORARY_REDIRECT,
                        [(header::LOCATION, "/v1/elsewhere")],
                    )
                }),
            )
            .route("/v1/elsewhere", any(record_and_echo))
            .with_state(recorder.clone()),
    )
    .await;
    let upstream = upstream_with(&base, "refund_order", refund_call(), None);
    let tool = definition("refund_order", Effect::SideEffect, TIMEOUT);
    let arguments = json!({"order_id": "8812", "amount": 49});

    let observation = upstream.execute(call(&tool, &arguments)).await;

    assert!(
        matches!(
            observation,
            UpstreamObservation::Response { status: 307, .. }
        ),
        "{observation:?}"
    );
    assert!(matches!(
        classify(&observation),
        OutcomeClass::Ambiguous { .. }
    ));
    assert!(recorder.seen().is_empty());
}

#[tokio::test]
async fn a_body_that_is_not_json_is_kept_as_bounded_text() {
    let base = serve(
        Router::new()
            .route(
                "/small",
                post(|| async { (StatusCode::BAD_GATEWAY, "<html>bad gateway</html>") }),
            )
            .route(
                "/huge",
                post(|| async { (StatusCode::BAD_GATEWAY, "x".repeat(3 * 1024 * 1024)) }),
            ),
    )
    .await;
    let tool = definition("refund_order", Effect::SideEffect, TIMEOUT);
    let arguments = json!({"order_id": "8812"});

    let small = upstream_with(
        &base,
        "refund_order",
        call_spec(json!({"upstream": "payments", "method": "POST", "path": "/small"})),
        None,
    );
    let observation = small.execute(call(&tool, &arguments)).await;
    assert_eq!(
        body_of(&observation),
        &json!({"text": "<html>bad gateway</html>"})
    );

    let huge = upstream_with(
        &base,
        "refund_order",
        call_spec(json!({"upstream": "payments", "method": "POST", "path": "/huge"})),
        None,
    );
    let observation = huge.execute(call(&tool, &arguments)).await;
    let body = body_of(&observation);
    assert_eq!(body["truncated"], true);
    assert_eq!(
        body["text"].as_str().unwrap().len(),
        intentgate_http::TEXT_BODY_BYTES_MAX
    );
}

fn refund_lookup() -> intentgate_http::spec::LookupSpec {
    lookup_spec(json!({
        "path": "/v1/refunds",
        "query": {"idempotency_key": "{idempotency_key}", "order_id": "{order_id}"},
        "found": "/data",
        "key": "/idempotency_key",
    }))
}

/// A provider whose refund list answers by order id: `found`, `none`, `missing` (404),
/// `broken` (500), `slow`.
async fn lookup_server(recorder: Recorder) -> String {
    serve(
        Router::new()
            .route(
                "/v1/refunds",
                get(
                    |State(recorder): State<Recorder>, request: Request| async move {
                        let seen = recorder.record(request).await;
                        let query = seen.query.unwrap_or_default();
                        if query.contains("order_id=found") {
                            let refund = json!({"id": "re_9", "amount": "49.00", "idempotency_key": "refund_order:refund:8812"});
                            (StatusCode::OK, axum::Json(json!({"data": [refund]})))
                        } else if query.contains("order_id=none") {
                            (StatusCode::OK, axum::Json(json!({"data": []})))
                        } else if query.contains("order_id=missing") {
                            (StatusCode::NOT_FOUND, axum::Json(json!({})))
                        } else if query.contains("order_id=slow") {
                            tokio::time::sleep(Duration::from_secs(30)).await;
                            (StatusCode::OK, axum::Json(json!({})))
                        } else {
                            (StatusCode::INTERNAL_SERVER_ERROR, axum::Json(json!({})))
                        }
                    },
                ),
            )
            .with_state(recorder),
    )
    .await
}

#[tokio::test]
async fn a_lookup_finds_the_effect_or_says_why_not() {
    let recorder = Recorder::default();
    let base = lookup_server(recorder.clone()).await;
    let upstream = upstream_with(&base, "refund_order", refund_call(), Some(refund_lookup()));
    let tool = definition(
        "refund_order",
        Effect::SideEffect,
        Duration::from_millis(500),
    );

    let found = json!({"order_id": "found"});
    assert_eq!(
        upstream.lookup(call(&tool, &found)).await,
        LookupOutcome::Found {
            external_id: Some("re_9".into()),
            result: json!({"id": "re_9", "amount": "49.00", "idempotency_key": "refund_order:refund:8812"}),
        }
    );
    let none = json!({"order_id": "none"});
    assert_eq!(
        upstream.lookup(call(&tool, &none)).await,
        LookupOutcome::NotFound
    );
    let missing = json!({"order_id": "missing"});
    assert_eq!(
        upstream.lookup(call(&tool, &missing)).await,
        LookupOutcome::NotFound
    );
    let broken = json!({"order_id": "broken"});
    assert_eq!(
        upstream.lookup(call(&tool, &broken)).await,
        LookupOutcome::Failed("the lookup answered HTTP 500".into())
    );
    let slow = json!({"order_id": "slow"});
    assert_eq!(
        upstream.lookup(call(&tool, &slow)).await,
        LookupOutcome::Failed("the lookup timed out".into())
    );

    let seen = recorder.seen();
    assert_eq!(seen.len(), 5);
    for request in &seen {
        // A lookup performs nothing, so it carries no idempotency key.
        assert!(!request.headers.contains_key("idempotency-key"));
        assert!(
            request
                .query
                .as_deref()
                .unwrap()
                .starts_with("idempotency_key=refund_order%3Arefund%3A8812&order_id="),
            "{:?}",
            request.query
        );
    }
}

#[tokio::test]
async fn a_lookup_that_can_not_connect_fails_and_a_tool_without_one_is_unsupported() {
    let base = closed_port_url();
    let tool = definition("refund_order", Effect::SideEffect, TIMEOUT);
    let arguments = json!({"order_id": "found"});

    let upstream = upstream_with(&base, "refund_order", refund_call(), Some(refund_lookup()));
    let LookupOutcome::Failed(reason) = upstream.lookup(call(&tool, &arguments)).await else {
        panic!("expected a failed lookup");
    };
    assert!(reason.starts_with("the lookup was not sent"), "{reason}");
    assert!(!reason.contains(SECRET), "{reason}");

    let without = upstream_with(&base, "refund_order", refund_call(), None);
    assert_eq!(
        without.lookup(call(&tool, &arguments)).await,
        LookupOutcome::Unsupported
    );
}

#[test]
fn bad_configs_are_refused_when_the_upstream_is_built() {
    let tool = |call: Value| {
        BTreeMap::from([(
            "refund_order".to_owned(),
            HttpTool {
                call: call_spec(call),
                lookup: None,
            },
        )])
    };
    let base = "https://api.example.com";

    let error = HttpUpstream::new(
        payments(base),
        tool(json!({"upstream": "stripe", "method": "POST", "path": "/v1/refunds"})),
    )
    .unwrap_err();
    assert!(
        matches!(error, HttpError::UnknownUpstream { ref upstream, .. } if upstream == "stripe"),
        "{error}"
    );

    for bad_base in [
        "not a url",
        "ftp://api.example.com",
        "https://api.example.com/#x",
    ] {
        let error = HttpUpstream::new(payments(bad_base), BTreeMap::new()).unwrap_err();
        assert!(
            matches!(error, HttpError::BadBaseUrl { .. }),
            "{bad_base}: {error}"
        );
    }

    let error = HttpUpstream::new(
        payments(base),
        tool(json!({"upstream": "payments", "method": "POST", "path": "/v1/refunds/{id"})),
    )
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "tool `refund_order` call, path: unclosed `{` at character 12"
    );

    let error = HttpUpstream::new(
        payments(base),
        tool(
            json!({"upstream": "payments", "method": "POST", "path": "/v1/refunds",
                    "headers": {"Bad Name": "x"}}),
        ),
    )
    .unwrap_err();
    assert!(matches!(error, HttpError::BadHeaderName { .. }), "{error}");

    let mut upstreams = payments(base);
    upstreams.get_mut("payments").unwrap().headers.insert(
        "Authorization".to_owned(),
        format!("Bearer {SECRET}\r\nX-Evil: 1"),
    );
    let error = HttpUpstream::new(upstreams, BTreeMap::new()).unwrap_err();
    assert!(matches!(error, HttpError::BadHeaderValue { .. }), "{error}");
    assert!(!error.to_string().contains(SECRET), "{error}");

    // Placeholder names are checked against the tool's arguments.
    let http_tool = HttpTool {
        call: call_spec(
            json!({"upstream": "payments", "method": "POST", "path": "/v1/refunds",
                               "body": {"order": "{order}"}}),
        ),
        lookup: Some(refund_lookup()),
    };
    let error = http_tool
        .check("refund_order", &["order_id", "amount"])
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "tool `refund_order` call, body: body at `/order`: placeholder {order} names neither an \
         argument of the tool nor a gateway value ({intent_key}, {idempotency_key}, {intent_id})"
    );
    HttpTool {
        call: refund_call(),
        lookup: Some(refund_lookup()),
    }
    .check("refund_order", &["order_id", "amount"])
    .unwrap();
}

#[test]
fn secrets_never_show_in_debug_output() {
    let upstream = upstream_with(
        "https://api.example.com",
        "refund_order",
        refund_call(),
        None,
    );
    let text = format!("{upstream:?} {:?}", payments("https://api.example.com"));
    assert!(!text.contains(SECRET), "{text}");
    assert!(text.contains("refund_order"), "{text}");
}

#[test]
fn a_call_that_uses_the_intent_id_anywhere_is_told_apart() {
    let tool = |call| HttpTool { call, lookup: None };
    assert!(!tool(refund_call()).call_uses_intent_id("refund_order"));
    // The lookup may use it: a lookup without it fails, which proves nothing and is safe.
    let mut with_lookup = tool(refund_call());
    with_lookup.lookup = Some(lookup_spec(json!({
        "path": "/v1/refunds", "query": {"intent": "{intent_id}"}, "found": "/data",
        "key": "/idempotency_key",
    })));
    assert!(!with_lookup.call_uses_intent_id("refund_order"));
    let uses = [
        json!({"upstream": "payments", "method": "POST", "path": "/v1/refunds/{ intent_id }"}),
        json!({"upstream": "payments", "method": "POST", "path": "/v1/refunds", "query": {"i": "x-{intent_id}"}}),
        json!({"upstream": "payments", "method": "POST", "path": "/v1/refunds", "headers": {"X-Intent": "{intent_id}"}}),
        json!({"upstream": "payments", "method": "POST", "path": "/v1/refunds", "body": {"metadata": [{"id": "{intent_id}"}]}}),
        json!({"upstream": "payments", "method": "POST", "path": "/v1/refunds", "body": {"note": "intent {intent_id}"}}),
    ];
    for spec in uses {
        assert!(
            tool(call_spec(spec.clone())).call_uses_intent_id("refund_order"),
            "{spec}"
        );
    }
    let literal = json!({"upstream": "payments", "method": "POST", "path": "/v1/refunds", "body": {"note": "{{intent_id}}"}});
    assert!(!tool(call_spec(literal)).call_uses_intent_id("refund_order"));
}

/// A Stripe-like provider: `GET /v1/refunds?payment=...` lists every refund of one payment,
/// two per page, continuing `starting_after` the last id while `has_more`. Payment `pi_1`
/// holds a support agent's earlier partial refund (no key), another tenant's refund of the
/// same amount, and, on the second page, this intent's; `pi_2` only others', over three
/// pages; `pi_loop` answers `has_more` forever with the same page.
async fn refunds_of_payments(recorder: Recorder) -> String {
    let refunds = |payment: &str| -> Vec<Value> {
        match payment {
            "pi_1" => vec![
                json!({"id": "re_1", "amount": "20.00", "payment": "pi_1", "idempotency_key": null}),
                json!({"id": "re_2", "amount": "30.00", "payment": "pi_1", "idempotency_key": "south/refund_order:refund:8812"}),
                json!({"id": "re_3", "amount": "30.00", "payment": "pi_1", "idempotency_key": "refund_order:refund:8812"}),
            ],
            "pi_2" => (1..=6)
                .map(|n| json!({"id": format!("re_2{n}"), "amount": "30.00", "payment": "pi_2", "idempotency_key": format!("other/{n}")}))
                .collect(),
            _ => vec![json!({"id": "re_loop", "amount": "1.00", "idempotency_key": "x"})],
        }
    };
    serve(
        Router::new()
            .route(
                "/v1/refunds",
                get(
                    move |State(recorder): State<Recorder>, request: Request| async move {
                        let seen = recorder.record(request).await;
                        let query: BTreeMap<String, String> =
                            url_pairs(seen.query.as_deref().unwrap_or_default());
                        let all = refunds(query.get("payment").map(String::as_str).unwrap_or(""));
                        if query.get("payment").map(String::as_str) == Some("pi_loop") {
                            return axum::Json(json!({"data": all, "has_more": true}));
                        }
                        let start = match query.get("starting_after") {
                            Some(after) => all
                                .iter()
                                .position(|refund| refund["id"] == after.as_str())
                                .map_or(all.len(), |at| at + 1),
                            None => 0,
                        };
                        let page: Vec<Value> = all.iter().skip(start).take(2).cloned().collect();
                        let has_more = start + page.len() < all.len();
                        axum::Json(json!({"object": "list", "data": page, "has_more": has_more}))
                    },
                ),
            )
            .with_state(recorder),
    )
    .await
}

fn url_pairs(query: &str) -> BTreeMap<String, String> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
}

fn payment_lookup(max: u32) -> intentgate_http::spec::LookupSpec {
    lookup_spec(json!({
        "path": "/v1/refunds",
        "query": {"payment": "{payment}"},
        "found": "/data",
        "key": "/idempotency_key",
        "match": {"amount": {"record": "/amount", "compare": "decimal"}},
        "pages": {"query": "starting_after", "has_more": "/has_more", "max": max},
    }))
}

/// Regression: `found: /data/0` took the first refund of the payment, a support agent's
/// 20.00 or another tenant's 30.00, and settled this intent with it. Now every record of
/// every page is judged: only the one carrying this intent's provider key (and its amount)
/// is found, on the second page.
#[tokio::test]
async fn a_listing_lookup_takes_only_this_intents_record_whatever_page_it_is_on() {
    let recorder = Recorder::default();
    let base = refunds_of_payments(recorder.clone()).await;
    let upstream = upstream_with(
        &base,
        "refund_order",
        refund_call(),
        Some(payment_lookup(5)),
    );
    let tool = definition("refund_order", Effect::SideEffect, TIMEOUT);

    let ours = json!({"order_id": "8812", "payment": "pi_1", "amount": 30});
    let LookupOutcome::Found { external_id, .. } = upstream.lookup(call(&tool, &ours)).await else {
        panic!("the intent's own refund is on the second page");
    };
    assert_eq!(external_id.as_deref(), Some("re_3"));
    let queries: Vec<Option<String>> = recorder.seen().into_iter().map(|seen| seen.query).collect();
    assert_eq!(
        queries,
        [
            Some("payment=pi_1".to_owned()),
            Some("payment=pi_1&starting_after=re_2".to_owned())
        ]
    );

    // Only others' refunds, over three pages: not found, every page read.
    let others = json!({"order_id": "8812", "payment": "pi_2", "amount": 30});
    assert_eq!(
        upstream.lookup(call(&tool, &others)).await,
        LookupOutcome::NotFound
    );
    assert_eq!(recorder.seen().len(), 2 + 3);

    // This intent's key with another amount is a mismatch, never found.
    let other_amount = json!({"order_id": "8812", "payment": "pi_1", "amount": 31});
    let LookupOutcome::Mismatch(reason) = upstream.lookup(call(&tool, &other_amount)).await else {
        panic!("a record with this intent's key and another amount is a mismatch");
    };
    assert!(reason.contains("amount differs"), "{reason}");
}

/// A listing with more pages than the lookup may read proves nothing about the pages it did
/// not read; a provider that answers the same page again would page forever.
#[tokio::test]
async fn a_listing_lookup_that_can_not_read_every_page_fails() {
    let recorder = Recorder::default();
    let base = refunds_of_payments(recorder.clone()).await;
    let tool = definition("refund_order", Effect::SideEffect, TIMEOUT);

    let two_pages = upstream_with(
        &base,
        "refund_order",
        refund_call(),
        Some(payment_lookup(2)),
    );
    let others = json!({"order_id": "8812", "payment": "pi_2", "amount": 30});
    let LookupOutcome::Failed(reason) = two_pages.lookup(call(&tool, &others)).await else {
        panic!("two pages of three prove nothing");
    };
    assert!(
        reason.contains("read 2 pages and the provider has more"),
        "{reason}"
    );

    let looping = json!({"order_id": "8812", "payment": "pi_loop", "amount": 30});
    let LookupOutcome::Failed(reason) = two_pages.lookup(call(&tool, &looping)).await else {
        panic!("a looping listing fails");
    };
    assert!(reason.contains("would loop"), "{reason}");
}

/// Regression: a query placeholder without a value was left out, so a lookup without the
/// provider key was a bare `GET /v1/refunds` (every refund of every customer). Now the
/// request is not built and the lookup fails, naming what is missing.
#[tokio::test]
async fn a_lookup_placeholder_without_a_value_fails_the_lookup_and_sends_nothing() {
    let recorder = Recorder::default();
    let base = lookup_server(recorder.clone()).await;
    let upstream = upstream_with(&base, "refund_order", refund_call(), Some(refund_lookup()));
    let tool = definition("refund_order", Effect::SideEffect, TIMEOUT);
    let arguments = json!({"order_id": "found"});
    let without_key = UpstreamCall {
        idempotency_key: None,
        ..call(&tool, &arguments)
    };
    let LookupOutcome::Failed(reason) = upstream.lookup(without_key).await else {
        panic!("a lookup without its provider key must fail");
    };
    assert!(reason.contains("provider key"), "{reason}");

    // An optional argument of the filter, absent: refused by name, never left out.
    let by_order = lookup_spec(json!({
        "path": "/v1/refunds", "query": {"order_id": "{order_id}"}, "found": "/data",
        "match": {"order_id": {"record": "/order_id"}},
    }));
    let upstream = upstream_with(&base, "refund_order", refund_call(), Some(by_order));
    let LookupOutcome::Failed(reason) = upstream.lookup(call(&tool, &json!({}))).await else {
        panic!("a lookup without its filter's argument must fail");
    };
    assert!(reason.contains("order_id"), "{reason}");
    assert!(recorder.seen().is_empty(), "nothing may be sent");
}

#[test]
fn a_lookup_without_a_proof_or_with_unusable_pages_is_refused() {
    let unproven = lookup_spec(json!({"path": "/v1/refunds", "found": "/data/0"}));
    let tools = BTreeMap::from([(
        "refund_order".to_owned(),
        HttpTool {
            call: refund_call(),
            lookup: Some(unproven),
        },
    )]);
    let Err(error) = HttpUpstream::new(payments("https://api.example.com"), tools) else {
        panic!("a lookup with neither key nor match must be refused");
    };
    assert!(matches!(error, HttpError::UnprovenLookup(_)), "{error}");
    assert!(error.to_string().contains("key"), "{error}");

    for pages in [
        json!({"query": "starting_after"}),
        json!({"query": "starting_after", "has_more": "/has_more", "next_cursor": "/next"}),
        json!({"query": "starting_after", "has_more": "/has_more", "max": 0}),
        json!({"query": "", "has_more": "/has_more"}),
    ] {
        let lookup = lookup_spec(json!({
            "path": "/v1/refunds", "found": "/data", "key": "/k", "pages": pages.clone(),
        }));
        let tools = BTreeMap::from([(
            "refund_order".to_owned(),
            HttpTool {
                call: refund_call(),
                lookup: Some(lookup),
            },
        )]);
        let refused = HttpUpstream::new(payments("https://api.example.com"), tools);
        assert!(
            matches!(refused, Err(HttpError::BadLookupPages { .. })),
            "{pages}: {:?}",
            refused.err()
        );
    }
}

/// A request's facts beside its observation: the upstream's name, a fixed route or not, and
/// which kind of connect failure stopped it (docs/design.md section 5: the operator's errors).
async fn executed(
    base: &str,
    spec: intentgate_http::spec::CallSpec,
) -> (UpstreamObservation, RequestFacts) {
    let upstream = upstream_with(base, "refund_order", spec, None);
    let tool = definition("refund_order", Effect::SideEffect, TIMEOUT);
    let arguments = json!({"order_id": "8812", "amount": 49});
    upstream.execute_with_facts(call(&tool, &arguments)).await
}

fn misconfigured(kind: Misconfiguration) -> OutcomeClass {
    OutcomeClass::Misconfigured { kind }
}

#[tokio::test]
async fn a_404_means_a_wrong_route_only_where_the_path_has_no_placeholder() {
    let not_found = || async {
        let body = json!({"error": {"message": "No such order: 8812"}});
        (StatusCode::NOT_FOUND, axum::Json(body))
    };
    let base = serve(
        Router::new()
            .route("/v1/refundz", post(not_found))
            .route("/v1/orders/{order_id}/refund", post(not_found)),
    )
    .await;

    let (observation, facts) = executed(
        &base,
        call_spec(json!({"upstream": "payments", "method": "POST", "path": "/v1/refundz"})),
    )
    .await;
    assert_eq!(facts.upstream.as_deref(), Some("payments"));
    assert!(facts.fixed_route);
    assert_eq!(
        classify_with(&observation, &facts),
        misconfigured(Misconfiguration::RouteNotFound)
    );

    let (observation, facts) = executed(
        &base,
        call_spec(json!({
            "upstream": "payments", "method": "POST", "path": "/v1/orders/{order_id}/refund"
        })),
    )
    .await;
    assert!(!facts.fixed_route);
    assert_eq!(classify_with(&observation, &facts), OutcomeClass::Rejected);
}

#[tokio::test]
async fn a_401_a_403_and_a_407_are_the_operators_whatever_the_route() {
    for (status, kind) in [
        (StatusCode::UNAUTHORIZED, Misconfiguration::Unauthorized),
        (StatusCode::FORBIDDEN, Misconfiguration::Forbidden),
        (
            StatusCode::PROXY_AUTHENTICATION_REQUIRED,
            Misconfiguration::ProxyAuth,
        ),
    ] {
        let base = serve(Router::new().route(
            "/v1/orders/{order_id}/refund",
            post(move || async move { (status, axum::Json(json!({"error": "no"}))) }),
        ))
        .await;
        let (observation, facts) = executed(
            &base,
            call_spec(json!({
                "upstream": "payments", "method": "POST", "path": "/v1/orders/{order_id}/refund"
            })),
        )
        .await;
        assert_eq!(
            classify_with(&observation, &facts),
            misconfigured(kind),
            "{status}"
        );
    }
}

#[tokio::test]
async fn a_refused_connection_a_failed_tls_handshake_and_an_unknown_host_are_told_apart() {
    let (observation, facts) = executed(&closed_port_url(), refund_call()).await;
    assert_eq!(
        facts.unreachable,
        Some(Unreachable::Connect),
        "{observation:?}"
    );
    assert_eq!(
        classify_with(&observation, &facts),
        misconfigured(Misconfiguration::Connect)
    );

    let (_recorder, base) = serve_recording().await;
    let (observation, facts) = executed(&base.replace("http://", "https://"), refund_call()).await;
    assert_eq!(facts.unreachable, Some(Unreachable::Tls), "{observation:?}");

    // `.invalid` never resolves (RFC 6761).
    let (observation, facts) = executed("http://payments.invalid", refund_call()).await;
    assert_eq!(facts.unreachable, Some(Unreachable::Dns), "{observation:?}");
    let UpstreamObservation::NotSent { reason } = &observation else {
        panic!("expected not sent, got {observation:?}");
    };
    assert!(
        !reason.contains("payments.invalid"),
        "no URL in the reason: {reason}"
    );
}

/// Stripe's request shape: a form body in bracket notation with the amount in minor units,
/// sent to a real server, which sees exactly these bytes under the form's Content-Type; a
/// query of an array argument in bracket notation next to a literal bracketed name.
#[tokio::test]
async fn a_form_body_reaches_the_server_as_stripe_reads_it() {
    let (recorder, base) = serve_recording().await;
    let upstream = upstream_with(
        &base,
        "refund_order",
        call_spec(json!({
            "upstream": "payments",
            "method": "POST",
            "path": "/v1/refunds",
            "query": {"expand": "{note}", "created[gte]": "{count}"},
            "body_format": "form",
            "body": {
                "payment_intent": "{order_id}",
                "amount": "{amount:minor(USD)}",
                "metadata": {"intentgate_key": "{idempotency_key}", "intent_key": "{intent_key}"},
                "expand": ["charge"],
                "reason": "{customer}",
            },
        })),
        None,
    );
    let tool = definition("refund_order", Effect::SideEffect, TIMEOUT);
    let arguments =
        json!({"order_id": "pi_1 &=[x]", "amount": "49.00", "count": 5, "note": ["a", "b"]});

    let observation = upstream.execute(call(&tool, &arguments)).await;

    assert_eq!(body_of(&observation)["id"], "re_1");
    let seen = recorder.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].headers["content-type"],
        "application/x-www-form-urlencoded"
    );
    assert_eq!(
        String::from_utf8(seen[0].body.clone()).unwrap(),
        "amount=4900&expand[]=charge\
         &metadata[intent_key]=refund%3A8812\
         &metadata[intentgate_key]=refund_order%3Arefund%3A8812\
         &payment_intent=pi_1+%26%3D%5Bx%5D"
    );
    assert_eq!(
        seen[0].query.as_deref(),
        Some("created%5Bgte%5D=5&expand%5B%5D=a&expand%5B%5D=b")
    );

    // An amount with more places than cents is refused before anything is sent, naming the
    // argument, on the path the gate reports as invalid arguments.
    let precise = json!({"order_id": "pi_1", "amount": "49.001"});
    let refused = upstream.check(call(&tool, &precise)).unwrap_err();
    assert!(
        refused.contains("`amount`") && refused.contains("rounded"),
        "{refused}"
    );
    assert_eq!(recorder.seen().len(), 1);
}

/// A form body must be a mapping: refused when the upstream is built.
#[test]
fn a_form_body_that_is_not_a_mapping_is_refused_when_loaded() {
    let tools = BTreeMap::from([(
        "refund_order".to_owned(),
        HttpTool {
            call: call_spec(json!({
                "upstream": "payments", "method": "POST", "path": "/v1/refunds",
                "body_format": "form", "body": ["{order_id}"],
            })),
            lookup: None,
        },
    )]);
    let error = HttpUpstream::new(payments("http://127.0.0.1:1"), tools).unwrap_err();
    assert!(
        matches!(&error, HttpError::Template { field, .. } if field == "body"),
        "{error}"
    );
}
