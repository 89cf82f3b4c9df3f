//! The Stripe dialect of the HTTP mock provider (`Dialect::Stripe`, `intentgate mock-provider
//! --dialect stripe`) through its real interface: form bodies in bracket notation, amounts in
//! minor units, Stripe's lists, and the key layer with `Idempotent-Replayed: true`.

use std::sync::Arc;
use std::time::Duration;

use intentgate_mock::{
    Dialect, HttpFaultPlan, MockOptions, MockProvider, MockServer, Scripted, Shape,
};
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

/// What a client saw: a status with its body and headers, or a connection ended unanswered.
#[derive(Debug)]
enum Seen {
    Answer(u16, Value, HeaderMap),
    Cut,
}

impl Seen {
    fn status(&self) -> Option<u16> {
        match self {
            Seen::Answer(status, ..) => Some(*status),
            Seen::Cut => None,
        }
    }

    fn body(&self) -> &Value {
        match self {
            Seen::Answer(_, body, _) => body,
            Seen::Cut => panic!("no answer"),
        }
    }

    fn replayed(&self) -> bool {
        match self {
            Seen::Answer(_, _, headers) => headers
                .get("idempotent-replayed")
                .is_some_and(|value| value == "true"),
            Seen::Cut => false,
        }
    }

    fn error(&self) -> (&str, &str) {
        let error = &self.body()["error"];
        (
            error["type"].as_str().unwrap_or_default(),
            error["code"].as_str().unwrap_or_default(),
        )
    }
}

struct Mock {
    server: MockServer,
    client: reqwest::Client,
}

fn options(plan: HttpFaultPlan) -> MockOptions {
    MockOptions::new(plan).with_dialect(Dialect::Stripe)
}

impl Mock {
    async fn start(plan: HttpFaultPlan) -> Mock {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let provider = MockProvider::new(options(plan)).unwrap();
        Mock {
            server: MockServer::start(provider).await.unwrap(),
            client: reqwest::Client::new(),
        }
    }

    fn provider(&self) -> &Arc<MockProvider> {
        self.server.provider()
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Seen {
        match request.send().await {
            Ok(response) => {
                let status = response.status().as_u16();
                let headers = response.headers().clone();
                match response.bytes().await {
                    Ok(bytes) => Seen::Answer(
                        status,
                        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                        headers,
                    ),
                    Err(_) => Seen::Cut,
                }
            }
            Err(_) => Seen::Cut,
        }
    }

    /// `POST /v1/refunds` with `form` (already in bracket notation) under `key`.
    async fn post_form(&self, key: Option<&str>, form: &[(&str, &str)]) -> Seen {
        let body: String = form_body(form);
        let mut request = self
            .client
            .post(format!("{}/v1/refunds", self.server.url()))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        self.send(request).await
    }

    /// `POST path` with `form` (already in bracket notation), under `key` when given.
    async fn post_to(&self, path: &str, key: Option<&str>, form: &[(&str, &str)]) -> Seen {
        let mut request = self
            .client
            .post(format!("{}{path}", self.server.url()))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form_body(form));
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        self.send(request).await
    }

    /// A PaymentIntent of `amount` minor units for `customer`, created and confirmed
    /// off-session as `charge_card` sends it, the key in its metadata.
    async fn charge(&self, key: &str, customer: &str, amount: &str) -> Seen {
        self.post_to(
            "/v1/payment_intents",
            Some(key),
            &[
                ("amount", amount),
                ("currency", "usd"),
                ("customer", customer),
                ("payment_method", "pm_card_visa"),
                ("payment_method_types[]", "card"),
                ("confirm", "true"),
                ("off_session", "true"),
                ("metadata[intentgate_key]", key),
                ("metadata[intent_key]", &format!("charge:{key}")),
            ],
        )
        .await
    }

    /// The ids of a page of `GET /v1/payment_intents`, and its `has_more`.
    async fn intents_page(&self, query: &str) -> (Vec<String>, bool) {
        let seen = self.get(&format!("/v1/payment_intents?{query}")).await;
        assert_eq!(seen.status(), Some(200), "{seen:?}");
        let body = seen.body();
        assert_eq!(
            (body["object"].as_str(), body["url"].as_str()),
            (Some("list"), Some("/v1/payment_intents"))
        );
        let ids = body["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|intent| intent["id"].as_str().unwrap().to_owned())
            .collect();
        (ids, body["has_more"].as_bool().unwrap())
    }

    /// A refund of `amount` minor units of `payment_intent`, with the key in its metadata.
    async fn refund(&self, key: &str, payment_intent: &str, amount: &str) -> Seen {
        self.post_form(
            Some(key),
            &[
                ("payment_intent", payment_intent),
                ("amount", amount),
                ("metadata[intentgate_key]", key),
            ],
        )
        .await
    }

    async fn get(&self, path_and_query: &str) -> Seen {
        self.send(
            self.client
                .get(format!("{}{path_and_query}", self.server.url())),
        )
        .await
    }

    /// The ids of a list's page, and its `has_more`.
    async fn page(&self, query: &str) -> (Vec<String>, bool) {
        let seen = self.get(&format!("/v1/refunds?{query}")).await;
        assert_eq!(seen.status(), Some(200), "{seen:?}");
        let body = seen.body();
        assert_eq!(body["object"], "list");
        assert!(
            body.get("next_cursor").is_none(),
            "Stripe's lists have none"
        );
        let ids = body["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|refund| refund["id"].as_str().unwrap().to_owned())
            .collect();
        (ids, body["has_more"].as_bool().unwrap())
    }
}

/// `name=value&...`, percent-encoded (brackets included, as clients send them).
fn form_body(form: &[(&str, &str)]) -> String {
    let mut serializer = FormSerializer::default();
    for (name, value) in form {
        serializer.push(name, value);
    }
    serializer.0
}

#[derive(Default)]
struct FormSerializer(String);

impl FormSerializer {
    fn push(&mut self, name: &str, value: &str) {
        if !self.0.is_empty() {
            self.0.push('&');
        }
        self.0.push_str(&encode(name));
        self.0.push('=');
        self.0.push_str(&encode(value));
    }
}

fn encode(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'*' => {
                (byte as char).to_string()
            }
            b' ' => "+".to_owned(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

#[tokio::test]
async fn a_refund_takes_a_form_body_in_minor_units_and_is_replayed_under_its_key() {
    let mock = Mock::start(HttpFaultPlan::quiet()).await;
    let first = mock
        .post_form(
            Some("k1"),
            &[
                ("payment_intent", "pi_123"),
                ("amount", "4900"),
                ("metadata[intentgate_key]", "k1"),
                ("metadata[intent_key]", "refund:pi_123:49.00"),
                ("reason", "requested_by_customer"),
            ],
        )
        .await;
    assert_eq!(first.status(), Some(200), "{first:?}");
    assert!(!first.replayed());
    let refund = first.body();
    assert_eq!(refund["id"], "re_000001");
    assert_eq!(refund["object"], "refund");
    assert_eq!(refund["amount"], 4900, "an integer of cents");
    assert_eq!(refund["currency"], "usd");
    assert_eq!(refund["payment_intent"], "pi_123");
    assert_eq!(refund["charge"], "ch_123");
    assert_eq!(refund["reason"], "requested_by_customer");
    assert_eq!(
        refund["metadata"],
        json!({"intentgate_key": "k1", "intent_key": "refund:pi_123:49.00"})
    );
    assert_eq!(
        refund["created"].as_i64(),
        Some(mock.provider().now_ms() / 1000)
    );
    assert!(
        refund.get("idempotency_key").is_none(),
        "Stripe doesn't echo the key"
    );
    // The same parameters in another order: the stored answer, said to be replayed.
    let again = mock
        .post_form(
            Some("k1"),
            &[
                ("reason", "requested_by_customer"),
                ("metadata[intent_key]", "refund:pi_123:49.00"),
                ("amount", "4900"),
                ("metadata[intentgate_key]", "k1"),
                ("payment_intent", "pi_123"),
            ],
        )
        .await;
    assert_eq!((again.status(), again.body()), (Some(200), refund));
    assert!(again.replayed());
    // The same key with another amount: Stripe's idempotency_error, nothing new.
    let other = mock.refund("k1", "pi_123", "4901").await;
    assert_eq!(other.status(), Some(400));
    assert_eq!(other.error().0, "idempotency_error");
    assert_eq!(mock.provider().effects().len(), 1);
    assert_eq!(mock.provider().effect_count("refund:pi_123:49.00"), 1);
    assert_eq!(mock.provider().effect_counts().by_order["pi_123"], 1);
}

#[tokio::test]
async fn amounts_and_bodies_that_stripe_would_refuse_are_refused_and_not_stored() {
    let mock = Mock::start(HttpFaultPlan::quiet()).await;
    for (form, param) in [
        (
            vec![("payment_intent", "pi_1"), ("amount", "49.00")],
            "amount",
        ),
        (vec![("payment_intent", "pi_1"), ("amount", "0")], "amount"),
        (vec![("payment_intent", "pi_1")], "amount"),
        (vec![("amount", "4900")], "payment_intent"),
        (
            vec![("payment_intent", "pi_1"), ("amount", "1"), ("amount", "2")],
            "amount",
        ),
        (
            vec![
                ("payment_intent", "pi_1"),
                ("amount", "1"),
                ("order_id", "o1"),
            ],
            "order_id",
        ),
    ] {
        let seen = mock.post_form(Some("k1"), &form).await;
        assert_eq!(seen.status(), Some(400), "{form:?}: {seen:?}");
        assert_eq!(seen.error().0, "invalid_request_error");
        assert_eq!(seen.body()["error"]["param"], param, "{form:?}");
    }
    // A JSON body is not Stripe's.
    let json_body = mock
        .send(
            mock.client
                .post(format!("{}/v1/refunds", mock.server.url()))
                .json(&json!({"payment_intent": "pi_1", "amount": 4900})),
        )
        .await;
    assert_eq!(json_body.status(), Some(400), "{json_body:?}");
    // None of those was stored for the key: a valid request under it is processed.
    assert_eq!(mock.provider().stats().requests, 0);
    let valid = mock.refund("k1", "pi_1", "4900").await;
    assert_eq!(valid.status(), Some(200), "{valid:?}");
    assert!(!valid.replayed());
}

#[tokio::test]
async fn a_stored_500_is_replayed_with_idempotent_replayed_and_its_refund_exists() {
    let mock = Mock::start(HttpFaultPlan::quiet()).await;
    mock.provider().script([Scripted {
        shape: Shape::ServerError(500),
        commit: true,
    }]);
    let first = mock.refund("k1", "pi_9", "1000").await;
    assert_eq!(first.status(), Some(500), "{first:?}");
    assert_eq!(first.error().0, "api_error");
    assert!(!first.replayed());
    for _ in 0..3 {
        let again = mock.refund("k1", "pi_9", "1000").await;
        assert_eq!(again.status(), Some(500), "{again:?}");
        assert_eq!(again.body(), first.body());
        assert!(again.replayed(), "the stored 500 says it is a replay");
    }
    // The refund committed: the payment intent's list shows it, once.
    let (ids, has_more) = mock.page("payment_intent=pi_9&limit=100").await;
    assert_eq!((ids, has_more), (vec!["re_000001".to_owned()], false));
    assert_eq!(mock.provider().effects().len(), 1);
}

#[tokio::test]
async fn the_existing_faults_are_acted_out_in_the_stripe_dialect() {
    let mock = Mock::start(HttpFaultPlan {
        retry_after_ms: 1500,
        timeout_hold_ms: 0,
        ..HttpFaultPlan::quiet()
    })
    .await;
    mock.provider().script([
        Scripted {
            shape: Shape::RateLimited,
            commit: false,
        },
        Scripted {
            shape: Shape::Reject,
            commit: false,
        },
        // A repeat draws a shape too: these let the replays through.
        Scripted {
            shape: Shape::Ok,
            commit: true,
        },
        Scripted {
            shape: Shape::Dropped,
            commit: true,
        },
        Scripted {
            shape: Shape::Ok,
            commit: true,
        },
        Scripted {
            shape: Shape::Timeout,
            commit: false,
        },
    ]);
    // 429: not processed, not stored; the same key is processed next.
    let limited = mock.refund("k1", "pi_1", "500").await;
    assert_eq!(limited.status(), Some(429), "{limited:?}");
    assert_eq!(limited.error().0, "rate_limit_error");
    let Seen::Answer(_, _, headers) = &limited else {
        unreachable!()
    };
    assert_eq!(headers["retry-after"], "2");
    // 402 card_error, stored for its key and replayed.
    let declined = mock.refund("k1", "pi_1", "500").await;
    assert_eq!(declined.status(), Some(402), "{declined:?}");
    assert_eq!(declined.error().0, "card_error");
    let replayed = mock.refund("k1", "pi_1", "500").await;
    assert_eq!((replayed.status(), replayed.replayed()), (Some(402), true));
    // A drop after commit: the client sees no answer; the retry gets the stored success.
    assert!(matches!(mock.refund("k2", "pi_2", "700").await, Seen::Cut));
    let retried = mock.refund("k2", "pi_2", "700").await;
    assert_eq!(retried.status(), Some(200), "{retried:?}");
    assert!(retried.replayed());
    assert_eq!(retried.body()["amount"], 700);
    // A timeout that did not commit stores nothing: the retry is processed anew.
    assert!(matches!(mock.refund("k3", "pi_3", "900").await, Seen::Cut));
    let processed = mock.refund("k3", "pi_3", "900").await;
    assert_eq!(processed.status(), Some(200), "{processed:?}");
    assert!(!processed.replayed());
    assert_eq!(mock.provider().effects().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_key_in_use_is_stripes_409_idempotency_key_in_use() {
    // Straight through the router on tokio's paused clock: the first request is held in
    // its latency while the second arrives, with no timing involved.
    let plan = HttpFaultPlan {
        latency_p50_ms: 4_000,
        latency_p95_ms: 4_000,
        ..HttpFaultPlan::quiet()
    };
    let clock = Arc::new(intentgate_gate::TokioClock::new(1_700_000_000_000));
    let provider = MockProvider::new(MockOptions {
        plan,
        clock,
        dialect: Dialect::Stripe,
    })
    .unwrap();
    let request = || {
        axum::http::Request::post("/v1/refunds")
            .header("content-type", "application/x-www-form-urlencoded")
            .header("idempotency-key", "k1")
            .body(axum::body::Body::from("payment_intent=pi_1&amount=500"))
            .unwrap()
    };
    let first = tokio::spawn({
        let mut router = provider.router();
        let request = request();
        async move { tower_service::Service::call(&mut router, request).await }
    });
    while provider.stats().requests == 0 {
        tokio::task::yield_now().await;
    }
    let mut router = provider.router();
    let second = tower_service::Service::call(&mut router, request())
        .await
        .unwrap();
    assert_eq!(second.status(), 409);
    let body: Value = serde_json::from_slice(
        &axum::body::to_bytes(second.into_body(), 1 << 16)
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert_eq!(body["error"]["code"], "idempotency_key_in_use");
    let first = first.await.unwrap().unwrap();
    assert_eq!(first.status(), 200);
    assert_eq!(provider.effects().len(), 1);
}

#[tokio::test]
async fn lists_are_newest_first_paged_by_starting_after_and_windowed_in_seconds() {
    let mock = Mock::start(HttpFaultPlan::quiet()).await;
    // Three refunds of pi_a, one of pi_b in between; a minute apart on the provider's clock.
    let start_s = mock.provider().now_ms() / 1000;
    for (key, payment_intent) in [
        ("k1", "pi_a"),
        ("k2", "pi_b"),
        ("k3", "pi_a"),
        ("k4", "pi_a"),
    ] {
        assert_eq!(
            mock.refund(key, payment_intent, "100").await.status(),
            Some(200)
        );
        mock.provider().advance_clock(Duration::from_secs(60));
    }
    // re_000001, 3 and 4 are pi_a's, newest first.
    assert_eq!(
        mock.page("payment_intent=pi_a&limit=100").await,
        (
            vec!["re_000004".into(), "re_000003".into(), "re_000001".into()],
            false
        )
    );
    // Pages of two, continued after the last id while has_more.
    let (first, more) = mock.page("payment_intent=pi_a&limit=2").await;
    assert_eq!(
        (first.clone(), more),
        (vec!["re_000004".into(), "re_000003".into()], true)
    );
    let (second, more) = mock
        .page(&format!(
            "payment_intent=pi_a&limit=2&starting_after={}",
            first[1]
        ))
        .await;
    assert_eq!((second, more), (vec!["re_000001".into()], false));
    // Every refund, ten by default.
    assert_eq!(mock.page("").await.0.len(), 4);
    // A window in Unix seconds: [start + 60, start + 180) holds the second and third.
    let window = format!(
        "created%5Bgte%5D={}&created%5Blt%5D={}&limit=100",
        start_s + 60,
        start_s + 180
    );
    let (ids, _) = mock.page(&window).await;
    assert_eq!(ids, vec!["re_000003".to_owned(), "re_000002".to_owned()]);
    // An empty cursor is the first page; an unknown parameter is refused.
    assert_eq!(
        mock.page("payment_intent=pi_b&starting_after=").await.0,
        vec!["re_000002".to_owned()]
    );
    let refused = mock.get("/v1/refunds?intent_key=k1").await;
    assert_eq!(refused.status(), Some(400), "{refused:?}");
    let too_many = mock.get("/v1/refunds?limit=101").await;
    assert_eq!(too_many.status(), Some(400), "{too_many:?}");
    // expand[]=data.charge: the charge as an object naming its customer.
    let expanded = mock
        .get("/v1/refunds?payment_intent=pi_b&expand%5B%5D=data.charge")
        .await;
    let charge = &expanded.body()["data"][0]["charge"];
    assert_eq!(
        (
            charge["id"].as_str(),
            charge["customer"].as_str(),
            charge["payment_intent"].as_str()
        ),
        (Some("ch_b"), Some("cus_b"), Some("pi_b"))
    );
    // One refund by id, as the list shows it.
    let one = mock.get("/v1/refunds/re_000002").await;
    assert_eq!(one.body()["payment_intent"], "pi_b");
    assert_eq!(one.body()["amount"], 100);
}

#[tokio::test]
async fn the_json_dialect_is_the_default_and_unchanged() {
    let provider = MockProvider::new(MockOptions::new(HttpFaultPlan::quiet())).unwrap();
    assert_eq!(provider.dialect(), Dialect::Json);
    assert_eq!(Dialect::parse("stripe"), Some(Dialect::Stripe));
    assert_eq!(Dialect::parse("json"), Some(Dialect::Json));
    assert_eq!(Dialect::parse("Stripe"), None);
}

#[tokio::test]
async fn a_payment_intent_is_created_and_confirmed_off_session_and_replayed_under_its_key() {
    let mock = Mock::start(HttpFaultPlan::quiet()).await;
    let first = mock.charge("k1", "cus_ann", "2500").await;
    assert_eq!(first.status(), Some(200), "{first:?}");
    assert!(!first.replayed());
    let intent = first.body();
    assert_eq!(intent["id"], "pi_000001");
    assert_eq!(intent["object"], "payment_intent");
    assert_eq!(intent["amount"], 2500, "an integer of cents");
    assert_eq!(intent["amount_received"], 2500);
    assert_eq!(intent["currency"], "usd");
    assert_eq!(intent["customer"], "cus_ann");
    assert_eq!(intent["payment_method"], "pm_card_visa");
    assert_eq!(intent["payment_method_types"], json!(["card"]));
    assert_eq!(intent["status"], "succeeded");
    assert_eq!(intent["latest_charge"], "ch_000001");
    assert_eq!(
        intent["metadata"],
        json!({"intentgate_key": "k1", "intent_key": "charge:k1"})
    );
    assert_eq!(
        intent["created"].as_i64(),
        Some(mock.provider().now_ms() / 1000)
    );
    assert!(intent.get("idempotency_key").is_none());
    // The same request again: the stored answer, said to be replayed; nothing new.
    let again = mock.charge("k1", "cus_ann", "2500").await;
    assert_eq!((again.status(), again.body()), (Some(200), intent));
    assert!(again.replayed());
    // The same key with another amount: Stripe's idempotency_error.
    let other = mock.charge("k1", "cus_ann", "2600").await;
    assert_eq!(other.status(), Some(400), "{other:?}");
    assert_eq!(other.error().0, "idempotency_error");
    assert_eq!(mock.provider().effects().len(), 1);
    assert_eq!(mock.provider().effect_count("charge:k1"), 1);
    let stats = mock.provider().stats();
    assert_eq!(
        (
            stats.requests,
            stats.effects.payment_intents,
            stats.effects.charges
        ),
        (3, 1, 0)
    );
    // By id, as it was answered; the list of the customer's shows it.
    let one = mock.get("/v1/payment_intents/pi_000001").await;
    assert_eq!(one.body(), intent);
    assert_eq!(
        mock.intents_page("customer=cus_ann&limit=100").await,
        (vec!["pi_000001".to_owned()], false)
    );
}

#[tokio::test]
async fn a_declined_card_is_stripes_402_card_error_with_a_message_stored_for_the_key() {
    let mock = Mock::start(HttpFaultPlan::quiet()).await;
    mock.provider().script([
        Scripted {
            shape: Shape::Reject,
            commit: false,
        },
        Scripted {
            shape: Shape::Ok,
            commit: true,
        },
    ]);
    let declined = mock.charge("k1", "cus_bo", "900").await;
    assert_eq!(declined.status(), Some(402), "{declined:?}");
    assert_eq!(declined.error(), ("card_error", "card_declined"));
    assert_eq!(declined.body()["error"]["decline_code"], "generic_decline");
    assert_eq!(
        declined.body()["error"]["message"],
        "Your card was declined."
    );
    assert!(!declined.replayed());
    let replayed = mock.charge("k1", "cus_bo", "900").await;
    assert_eq!((replayed.status(), replayed.replayed()), (Some(402), true));
    assert_eq!(replayed.body(), declined.body());
    // Nothing was charged: no PaymentIntent for the customer.
    assert_eq!(mock.intents_page("customer=cus_bo").await, (vec![], false));
    assert!(mock.provider().effects().is_empty());
    // The plan's odds decline too: every request, with `reject` at a thousand per thousand.
    let always = Mock::start(HttpFaultPlan {
        reject: 1000,
        ..HttpFaultPlan::quiet()
    })
    .await;
    let seen = always.charge("k2", "cus_cy", "100").await;
    assert_eq!(seen.status(), Some(402), "{seen:?}");
    assert_eq!(seen.error().0, "card_error");
}

#[tokio::test]
async fn a_payment_intents_stored_500_is_replayed_and_a_lost_answer_is_found_by_listing() {
    let mock = Mock::start(HttpFaultPlan {
        timeout_hold_ms: 0,
        ..HttpFaultPlan::quiet()
    })
    .await;
    mock.provider().script([
        Scripted {
            shape: Shape::ServerError(500),
            commit: true,
        },
        Scripted {
            shape: Shape::Ok,
            commit: true,
        },
        Scripted {
            shape: Shape::Dropped,
            commit: true,
        },
    ]);
    let first = mock.charge("k1", "cus_di", "1000").await;
    assert_eq!(first.status(), Some(500), "{first:?}");
    let again = mock.charge("k1", "cus_di", "1000").await;
    assert_eq!((again.status(), again.replayed()), (Some(500), true));
    assert_eq!(again.body(), first.body());
    // The answer of another is lost after it committed.
    assert!(matches!(
        mock.charge("k2", "cus_di", "1000").await,
        Seen::Cut
    ));
    // Both committed: the customer's list shows them, newest first, once each.
    assert_eq!(
        mock.intents_page("customer=cus_di&limit=100").await,
        (vec!["pi_000002".to_owned(), "pi_000001".to_owned()], false)
    );
    assert_eq!(mock.provider().effect_count("charge:k1"), 1);
    assert_eq!(mock.provider().effect_count("charge:k2"), 1);
}

#[tokio::test]
async fn payment_intents_are_listed_by_customer_newest_first_paged_and_windowed_in_seconds() {
    let mock = Mock::start(HttpFaultPlan::quiet()).await;
    let start_s = mock.provider().now_ms() / 1000;
    for (key, customer) in [
        ("k1", "cus_a"),
        ("k2", "cus_b"),
        ("k3", "cus_a"),
        ("k4", "cus_a"),
    ] {
        assert_eq!(mock.charge(key, customer, "100").await.status(), Some(200));
        mock.provider().advance_clock(Duration::from_secs(60));
    }
    assert_eq!(
        mock.intents_page("customer=cus_a&limit=100").await,
        (
            vec!["pi_000004".into(), "pi_000003".into(), "pi_000001".into()],
            false
        )
    );
    let (first, more) = mock.intents_page("customer=cus_a&limit=2").await;
    assert_eq!(
        (first.clone(), more),
        (vec!["pi_000004".into(), "pi_000003".into()], true)
    );
    let next = format!("customer=cus_a&limit=2&starting_after={}", first[1]);
    assert_eq!(
        mock.intents_page(&next).await,
        (vec!["pi_000001".into()], false)
    );
    let window = format!(
        "created%5Bgte%5D={}&created%5Blt%5D={}&limit=100&starting_after=",
        start_s + 60,
        start_s + 180
    );
    assert_eq!(
        mock.intents_page(&window).await.0,
        vec!["pi_000003".to_owned(), "pi_000002".to_owned()]
    );
    assert_eq!(mock.intents_page("").await.0.len(), 4);
    for refused in [
        "payment_intent=pi_1",
        "limit=101",
        "starting_after=re_000001",
        "expand%5B%5D=data.charge",
    ] {
        let seen = mock.get(&format!("/v1/payment_intents?{refused}")).await;
        assert_eq!(seen.status(), Some(400), "{refused}: {seen:?}");
    }
    // A refund's list does not take a customer.
    let seen = mock.get("/v1/refunds?customer=cus_a").await;
    assert_eq!(seen.status(), Some(400), "{seen:?}");
}

#[tokio::test]
async fn a_payment_intent_is_read_by_id_or_synthetic_and_bad_bodies_are_not_stored() {
    let mock = Mock::start(HttpFaultPlan::quiet()).await;
    // A payment the mock did not make: a succeeded one, with the ids a refund of it names.
    let synthetic = mock.get("/v1/payment_intents/pi_3Mtw").await;
    assert_eq!(synthetic.status(), Some(200), "{synthetic:?}");
    let body = synthetic.body();
    assert_eq!(
        (
            body["status"].as_str(),
            body["customer"].as_str(),
            body["latest_charge"].as_str()
        ),
        (Some("succeeded"), Some("cus_3Mtw"), Some("ch_3Mtw"))
    );
    assert!(body["amount"].as_u64().is_some_and(|amount| amount > 0));
    assert_eq!(mock.get("/v1/payment_intents/pi_3Mtw").await.body(), body);
    // An id of the mock's own sequence that it never made is missing.
    let missing = mock.get("/v1/payment_intents/pi_000009").await;
    assert_eq!(missing.status(), Some(404), "{missing:?}");
    assert_eq!(
        missing.error(),
        ("invalid_request_error", "resource_missing")
    );
    for (form, param) in [
        (vec![("amount", "25.00"), ("currency", "usd")], "amount"),
        (vec![("currency", "usd")], "amount"),
        (vec![("amount", "2500")], "currency"),
        (
            vec![("amount", "2500"), ("currency", "usd"), ("confirm", "true")],
            "payment_method",
        ),
        (
            vec![
                ("amount", "2500"),
                ("currency", "usd"),
                ("payment_method", "pm_1"),
                ("off_session", "true"),
            ],
            "off_session",
        ),
        (
            vec![("amount", "2500"), ("currency", "usd"), ("customer", "c_1")],
            "customer",
        ),
        (
            vec![
                ("amount", "2500"),
                ("currency", "usd"),
                ("payment_method_types[]", "sepa_debit"),
            ],
            "payment_method_types",
        ),
        (
            vec![("amount", "2500"), ("currency", "usd"), ("confirm", "yes")],
            "confirm",
        ),
        (
            vec![("amount", "2500"), ("currency", "usd"), ("order_id", "o1")],
            "order_id",
        ),
    ] {
        let seen = mock.post_to("/v1/payment_intents", Some("k1"), &form).await;
        assert_eq!(seen.status(), Some(400), "{form:?}: {seen:?}");
        assert_eq!(seen.body()["error"]["param"], param, "{form:?}");
    }
    assert_eq!(mock.provider().stats().requests, 0);
    let valid = mock.charge("k1", "cus_a", "2500").await;
    assert_eq!((valid.status(), valid.replayed()), (Some(200), false));
}

#[tokio::test]
async fn cancelling_a_payment_intent_is_idempotent_in_effect_and_says_when_it_cannot() {
    let mock = Mock::start(HttpFaultPlan::quiet()).await;
    // Authorised, not captured: it may be cancelled.
    let held = mock
        .post_to(
            "/v1/payment_intents",
            Some("k1"),
            &[
                ("amount", "4000"),
                ("currency", "usd"),
                ("customer", "cus_a"),
                ("payment_method", "pm_1"),
                ("confirm", "true"),
                ("capture_method", "manual"),
            ],
        )
        .await;
    assert_eq!(held.body()["status"], "requires_capture", "{held:?}");
    let id = held.body()["id"].as_str().unwrap().to_owned();
    let cancel = format!("/v1/payment_intents/{id}/cancel");
    let cancelled = mock
        .post_to(&cancel, None, &[("cancellation_reason", "abandoned")])
        .await;
    assert_eq!(cancelled.status(), Some(200), "{cancelled:?}");
    assert_eq!(cancelled.body()["status"], "canceled");
    assert_eq!(cancelled.body()["cancellation_reason"], "abandoned");
    assert!(cancelled.body()["canceled_at"].as_i64().is_some());
    // Again: Stripe's 400, and it stays cancelled once.
    let twice = mock.post_to(&cancel, None, &[]).await;
    assert_eq!(twice.status(), Some(400), "{twice:?}");
    assert_eq!(
        twice.error(),
        ("invalid_request_error", "payment_intent_unexpected_state")
    );
    let now = mock.get(&format!("/v1/payment_intents/{id}")).await;
    assert_eq!(
        (
            now.body()["status"].as_str(),
            now.body()["cancellation_reason"].as_str()
        ),
        (Some("canceled"), Some("abandoned"))
    );
    // A succeeded payment can't be cancelled (refund it instead); nor a synthetic one.
    assert_eq!(mock.charge("k2", "cus_a", "100").await.status(), Some(200));
    for path in [
        "/v1/payment_intents/pi_000002/cancel",
        "/v1/payment_intents/pi_3Mtw/cancel",
    ] {
        let seen = mock.post_to(path, None, &[]).await;
        assert_eq!(
            seen.error().1,
            "payment_intent_unexpected_state",
            "{seen:?}"
        );
    }
    let bad_reason = mock
        .post_to(&cancel, None, &[("cancellation_reason", "bored")])
        .await;
    assert_eq!(bad_reason.body()["error"]["param"], "cancellation_reason");
    let missing = mock
        .post_to("/v1/payment_intents/pi_000009/cancel", None, &[])
        .await;
    assert_eq!(missing.status(), Some(404), "{missing:?}");
    // Cancelling is an update, not a side effect: no faults drawn, no request counted.
    assert_eq!(mock.provider().stats().requests, 2);
}

#[tokio::test]
async fn payment_intents_are_stripes_only() {
    let provider = MockProvider::new(MockOptions::new(HttpFaultPlan::quiet())).unwrap();
    let server = MockServer::start(provider).await.unwrap();
    let client = reqwest::Client::new();
    let created = client
        .post(format!("{}/v1/payment_intents", server.url()))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("amount=100&currency=usd")
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 404);
    let listed = client
        .get(format!("{}/v1/payment_intents", server.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(listed.status(), 404);
    assert_eq!(server.provider().stats().requests, 0);
}
