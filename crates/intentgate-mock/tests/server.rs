//! The HTTP mock provider through its real interface: a server on a loopback port and a real
//! HTTP client (reqwest), checking the contract of `docs/mock-provider.md`.

use std::sync::Arc;
use std::time::Duration;

use intentgate_mock::{
    EffectCounts, HttpFaultPlan, MockOptions, MockProvider, MockServer, Scripted, Shape, Stats,
};
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

/// What a client saw.
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    Answer(u16, Value),
    /// The connection ended without a usable response.
    Cut,
    /// The client's own timeout fired first.
    TimedOut,
}

impl Seen {
    fn status(&self) -> Option<u16> {
        match self {
            Seen::Answer(status, _) => Some(*status),
            _ => None,
        }
    }

    fn body(&self) -> &Value {
        match self {
            Seen::Answer(_, body) => body,
            other => panic!("no answer: {other:?}"),
        }
    }
}

struct Mock {
    server: MockServer,
    client: reqwest::Client,
}

/// A client for plain http. reqwest insists on a TLS provider even then.
fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

impl Mock {
    async fn start(plan: HttpFaultPlan) -> Mock {
        let provider = MockProvider::new(MockOptions::new(plan)).unwrap();
        Mock {
            server: MockServer::start(provider).await.unwrap(),
            client: client(),
        }
    }

    fn provider(&self) -> &Arc<MockProvider> {
        self.server.provider()
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server.url())
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> (Seen, HeaderMap) {
        match request.send().await {
            Ok(response) => {
                let status = response.status().as_u16();
                let headers = response.headers().clone();
                match response.bytes().await {
                    Ok(bytes) => {
                        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                        (Seen::Answer(status, body), headers)
                    }
                    Err(error) if error.is_timeout() => (Seen::TimedOut, headers),
                    Err(_) => (Seen::Cut, headers),
                }
            }
            Err(error) if error.is_timeout() => (Seen::TimedOut, HeaderMap::new()),
            Err(_) => (Seen::Cut, HeaderMap::new()),
        }
    }

    async fn post(&self, path: &str, key: Option<&str>, body: Value) -> Seen {
        self.post_with_headers(path, key, body).await.0
    }

    async fn post_with_headers(
        &self,
        path: &str,
        key: Option<&str>,
        body: Value,
    ) -> (Seen, HeaderMap) {
        let mut request = self.client.post(self.url(path)).json(&body);
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        self.send(request).await
    }

    async fn refund(&self, key: &str, order: &str, amount: Value) -> Seen {
        self.post(
            "/v1/refunds",
            Some(key),
            json!({"order_id": order, "amount": amount, "metadata": {"intent_key": intent_key(order, &amount)}}),
        )
        .await
    }

    async fn get(&self, path: &str) -> Seen {
        self.send(self.client.get(self.url(path))).await.0
    }

    async fn put(&self, path: &str, body: Value) -> Seen {
        self.send(self.client.put(self.url(path)).json(&body))
            .await
            .0
    }

    async fn set_plan(&self, plan: &HttpFaultPlan) {
        let seen = self
            .send(self.client.put(self.url("/admin/faults")).json(plan))
            .await
            .0;
        assert_eq!(seen.status(), Some(200), "{seen:?}");
    }

    async fn advance_ms(&self, ms: u64) {
        let seen = self
            .post("/admin/clock", None, json!({"advance_ms": ms}))
            .await;
        assert_eq!(seen.status(), Some(200), "{seen:?}");
    }

    async fn stats(&self) -> Stats {
        serde_json::from_value(self.get("/admin/stats").await.body().clone()).unwrap()
    }

    async fn effect_counts(&self) -> EffectCounts {
        serde_json::from_value(self.get("/admin/effects").await.body().clone()).unwrap()
    }
}

fn intent_key(order: &str, amount: &Value) -> String {
    format!(
        "refund:{order}:{}",
        amount
            .as_str()
            .map_or_else(|| amount.to_string(), str::to_owned)
    )
}

fn quiet() -> HttpFaultPlan {
    HttpFaultPlan::quiet()
}

/// Every side effect has this shape, and ambiguous ones commit (or not).
fn always(shape: &str, commit: bool) -> HttpFaultPlan {
    let mut plan = json!(quiet());
    plan[shape] = json!(1000);
    plan["commit_when_ambiguous"] = json!(if commit { 1000 } else { 0 });
    serde_json::from_value(plan).unwrap()
}

fn error_type(seen: &Seen) -> &str {
    seen.body()["error"]["type"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn a_refund_is_created_once_per_key_and_replayed() {
    let mock = Mock::start(quiet()).await;
    let first = mock.refund("k1", "o1", json!(49)).await;
    assert_eq!(first.status(), Some(200), "{first:?}");
    let object = first.body();
    assert_eq!(object["id"], "re_000001");
    assert_eq!(object["object"], "refund");
    assert_eq!(object["order_id"], "o1");
    assert_eq!(object["amount"], "49.00");
    assert_eq!(object["currency"], "usd");
    assert_eq!(object["status"], "succeeded");
    assert_eq!(object["metadata"]["intent_key"], "refund:o1:49");
    assert!(object["created_ms"].as_i64().unwrap() > 0);
    // The same refund, the amount written another way: the same parameters, replayed.
    let again = mock
        .post(
            "/v1/refunds",
            Some("k1"),
            json!({"order_id": "o1", "amount": "49.00", "metadata": {"intent_key": "refund:o1:49"}}),
        )
        .await;
    assert_eq!(again, first);
    assert_eq!(mock.provider().effect_count("refund:o1:49"), 1);
    let stats = mock.stats().await;
    assert_eq!((stats.requests, stats.effects.refunds), (2, 1));
}

#[tokio::test]
async fn a_stored_server_error_is_replayed_and_its_effect_exists() {
    let mock = Mock::start(always("server_error", true)).await;
    let (first, headers) = mock
        .post_with_headers(
            "/v1/refunds",
            Some("k1"),
            json!({"order_id": "o1", "amount": 10, "metadata": {"intent_key": "i1"}}),
        )
        .await;
    let status = first.status().unwrap();
    assert!([500, 502, 503, 504].contains(&status), "{first:?}");
    assert!(headers.get("retry-after").is_none());
    assert_eq!(error_type(&first), "api_error");
    // The provider committed before failing: the effect is there, and the key replays the
    // stored error even once the provider is healthy.
    assert_eq!(mock.provider().effect_count("i1"), 1);
    mock.set_plan(&quiet()).await;
    let replay = mock
        .post(
            "/v1/refunds",
            Some("k1"),
            json!({"order_id": "o1", "amount": 10, "metadata": {"intent_key": "i1"}}),
        )
        .await;
    assert_eq!(replay, first);
    assert_eq!(mock.provider().effect_count("i1"), 1);
    // The lookup finds it.
    let found = mock.get("/v1/refunds?intent_key=i1").await;
    assert_eq!(found.body()["data"][0]["id"], "re_000001");
}

#[tokio::test]
async fn the_same_key_with_another_amount_is_refused() {
    let mock = Mock::start(quiet()).await;
    assert_eq!(mock.refund("k1", "o1", json!(49)).await.status(), Some(200));
    let other = mock.refund("k1", "o1", json!(50)).await;
    assert_eq!(other.status(), Some(400), "{other:?}");
    assert_eq!(error_type(&other), "idempotency_error");
    assert_eq!(mock.provider().effects().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrent_request_with_the_same_key_gets_409() {
    let slow = HttpFaultPlan {
        latency_p50_ms: 800,
        latency_p95_ms: 800,
        ..quiet()
    };
    let mock = Arc::new(Mock::start(slow).await);
    let first = tokio::spawn({
        let mock = mock.clone();
        async move { mock.refund("k1", "o1", json!(5)).await }
    });
    // The first request has reached the provider, which holds its answer for 800 ms.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while mock.provider().stats().requests == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the first request reached the provider"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    mock.provider().set_plan(quiet()).unwrap();
    let concurrent = mock.refund("k1", "o1", json!(5)).await;
    assert_eq!(concurrent.status(), Some(409), "{concurrent:?}");
    assert_eq!(error_type(&concurrent), "idempotency_error");
    let first = first.await.unwrap();
    assert_eq!(first.status(), Some(200));
    // Once the first finished, the key replays it.
    assert_eq!(mock.refund("k1", "o1", json!(5)).await, first);
    assert_eq!(mock.provider().effects().len(), 1);
}

#[tokio::test]
async fn the_key_window_forgets_after_the_clock_moves() {
    let mock = Mock::start(quiet()).await;
    let first = mock.refund("k1", "o1", json!(5)).await;
    mock.advance_ms(23 * 60 * 60 * 1000).await;
    assert_eq!(mock.refund("k1", "o1", json!(5)).await, first);
    mock.advance_ms(2 * 60 * 60 * 1000).await;
    // 25 hours later the key is forgotten: the same request is a new refund.
    let late = mock.refund("k1", "o1", json!(5)).await;
    assert_eq!(late.body()["id"], "re_000002");
    let counts = mock.effect_counts().await;
    assert_eq!(counts.duplicates, ["refund:o1:5"]);
    assert_eq!(counts.by_order["o1"], 2);
}

#[tokio::test]
async fn a_reject_is_a_stored_402() {
    let mock = Mock::start(always("reject", true)).await;
    let declined = mock.refund("k1", "o1", json!(5)).await;
    assert_eq!(declined.status(), Some(402), "{declined:?}");
    assert_eq!(error_type(&declined), "card_error");
    mock.set_plan(&quiet()).await;
    assert_eq!(mock.refund("k1", "o1", json!(5)).await, declined);
    assert!(mock.provider().effects().is_empty());
}

#[tokio::test]
async fn rate_limited_and_unavailable_say_retry_after_and_process_nothing() {
    for (shape, status) in [("rate_limited", 429), ("unavailable", 503)] {
        let plan = HttpFaultPlan {
            retry_after_ms: 1500,
            ..always(shape, true)
        };
        let mock = Mock::start(plan).await;
        let (refused, headers) = mock
            .post_with_headers(
                "/v1/refunds",
                Some("k1"),
                json!({"order_id": "o1", "amount": 5}),
            )
            .await;
        assert_eq!(refused.status(), Some(status), "{shape}: {refused:?}");
        assert_eq!(
            headers["retry-after"], "2",
            "{shape}: whole seconds, rounded up"
        );
        assert_eq!(headers["retry-after-ms"], "1500");
        assert!(mock.provider().effects().is_empty());
        // Not stored for the key: a retry with the same key is processed.
        mock.set_plan(&quiet()).await;
        let retried = mock
            .post(
                "/v1/refunds",
                Some("k1"),
                json!({"order_id": "o1", "amount": 5}),
            )
            .await;
        assert_eq!(retried.status(), Some(200), "{shape}: {retried:?}");
        assert_eq!(mock.provider().effects().len(), 1);
    }
}

#[tokio::test]
async fn a_timeout_holds_the_answer_and_commits_when_drawn() {
    for commit in [true, false] {
        let plan = HttpFaultPlan {
            timeout_hold_ms: 2_000,
            ..always("timeout", commit)
        };
        let mock = Mock::start(plan).await;
        let started = std::time::Instant::now();
        let seen = mock
            .send(
                mock.client
                    .post(mock.url("/v1/refunds"))
                    .header("Idempotency-Key", "k1")
                    .timeout(Duration::from_millis(300))
                    .json(
                        &json!({"order_id": "o1", "amount": 5, "metadata": {"intent_key": "i1"}}),
                    ),
            )
            .await
            .0;
        assert_eq!(seen, Seen::TimedOut);
        assert!(started.elapsed() < Duration::from_millis(1_500));
        // The effect was applied when the request arrived, not when the hold ends.
        assert_eq!(mock.provider().effect_count("i1"), usize::from(commit));
        mock.set_plan(&quiet()).await;
        let retried = mock
            .post(
                "/v1/refunds",
                Some("k1"),
                json!({"order_id": "o1", "amount": 5, "metadata": {"intent_key": "i1"}}),
            )
            .await;
        // Committed: the stored success is replayed. Not committed: nothing was stored for
        // the key, so the retry is processed now. Either way, one effect.
        assert_eq!(retried.status(), Some(200), "{retried:?}");
        assert_eq!(retried.body()["id"], "re_000001");
        assert_eq!(mock.provider().effect_count("i1"), 1);
    }
}

#[tokio::test]
async fn a_held_timeout_ends_in_a_cut_connection_not_an_answer() {
    let plan = HttpFaultPlan {
        timeout_hold_ms: 200,
        ..always("timeout", true)
    };
    let mock = Mock::start(plan).await;
    let started = std::time::Instant::now();
    let seen = mock.refund("k1", "o1", json!(5)).await;
    assert_eq!(seen, Seen::Cut);
    assert!(started.elapsed() >= Duration::from_millis(200));
}

#[tokio::test]
async fn the_first_requests_of_each_key_time_out_uncommitted_then_it_is_served_once() {
    let plan = HttpFaultPlan {
        first_timeouts_per_key: 3,
        timeout_hold_ms: 100,
        ..quiet()
    };
    let mock = Mock::start(plan).await;
    for attempt in 1..=3 {
        // Held for `timeout_hold_ms`, then cut: what a `timeout` shape looks like.
        let started = std::time::Instant::now();
        let seen = mock.refund("k1", "o1", json!(5)).await;
        assert_eq!(seen, Seen::Cut, "attempt {attempt}");
        assert!(started.elapsed() >= Duration::from_millis(100));
        assert!(mock.provider().effects().is_empty(), "attempt {attempt}");
        // Lookups are not affected: they answer, and find nothing yet.
        let found = mock.get("/v1/refunds?intent_key=refund:o1:5").await;
        assert_eq!(found.status(), Some(200), "{found:?}");
        assert_eq!(found.body()["data"], json!([]));
    }
    let fourth = mock.refund("k1", "o1", json!(5)).await;
    assert_eq!(fourth.status(), Some(200), "{fourth:?}");
    assert_eq!(fourth.body()["id"], "re_000001");
    // The fifth replays the stored answer: no second effect.
    assert_eq!(mock.refund("k1", "o1", json!(5)).await, fourth);
    assert_eq!(mock.provider().effect_count("refund:o1:5"), 1);
    // Another key has its own count.
    assert_eq!(mock.refund("k2", "o2", json!(5)).await, Seen::Cut);
    assert_eq!(mock.provider().effect_count("refund:o2:5"), 0);
    // A request without a key is not counted: served at once, every time.
    for _ in 0..2 {
        let unkeyed = mock
            .post(
                "/v1/refunds",
                None,
                json!({"order_id": "o3", "amount": 5, "metadata": {"intent_key": "i3"}}),
            )
            .await;
        assert_eq!(unkeyed.status(), Some(200), "{unkeyed:?}");
    }
    assert_eq!(mock.provider().effect_count("i3"), 2);
    let stats = mock.stats().await;
    assert_eq!((stats.requests, stats.effects.refunds), (8, 3));
    // A reset forgets the counts: the key times out again from its first request.
    assert_eq!(
        mock.post("/admin/reset", None, json!({})).await.status(),
        Some(200)
    );
    assert_eq!(mock.refund("k1", "o1", json!(5)).await, Seen::Cut);
    assert!(mock.provider().effects().is_empty());
}

#[tokio::test]
async fn a_dropped_connection_is_a_client_error_after_the_request_arrived() {
    for commit in [true, false] {
        let mock = Mock::start(always("dropped", commit)).await;
        let sent = mock
            .client
            .post(mock.url("/v1/refunds"))
            .header("Idempotency-Key", "k1")
            .json(&json!({"order_id": "o1", "amount": 5, "metadata": {"intent_key": "i1"}}))
            .send()
            .await;
        // No status at all, not a 200 with a broken body: the connection closed first.
        let error = sent.expect_err("the connection is cut before any response");
        assert!(!error.is_timeout(), "{error:?}");
        assert!(error.status().is_none());
        // The request reached the provider, which committed or not as drawn.
        assert_eq!(mock.stats().await.requests, 1);
        assert_eq!(mock.provider().effect_count("i1"), usize::from(commit));
    }
}

#[tokio::test]
async fn a_router_served_elsewhere_still_breaks_a_dropped_response() {
    // Without the mock's accept loop the cut can't close the connection before headers,
    // but the body fails: a client still gets an error, never a usable answer.
    let provider = MockProvider::new(MockOptions::new(always("dropped", true))).unwrap();
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(axum::serve(listener, provider.router()).into_future());
    let response = client()
        .post(format!("http://{addr}/v1/refunds"))
        .json(&json!({"order_id": "o1", "amount": 5}))
        .send()
        .await;
    match response {
        Err(_) => {}
        Ok(response) => {
            assert_eq!(response.status().as_u16(), 500);
            assert!(response.bytes().await.is_err());
        }
    }
    server.abort();
}

#[tokio::test]
async fn server_errors_use_the_documented_statuses() {
    let mock = Mock::start(always("server_error", false)).await;
    let mut statuses = std::collections::BTreeSet::new();
    for n in 0..60 {
        let (seen, headers) = mock
            .post_with_headers(
                "/v1/refunds",
                Some(&format!("k{n}")),
                json!({"order_id": "o1", "amount": 5}),
            )
            .await;
        assert!(headers.get("retry-after").is_none(), "{seen:?}");
        statuses.insert(seen.status().unwrap());
    }
    assert_eq!(
        statuses.into_iter().collect::<Vec<_>>(),
        [500, 502, 503, 504]
    );
    assert!(mock.provider().effects().is_empty());
}

/// What a run of mixed faults looks like to a client.
async fn outcomes(seed: u64) -> Vec<String> {
    let plan = HttpFaultPlan {
        reject: 150,
        rate_limited: 150,
        unavailable: 100,
        dropped: 150,
        server_error: 150,
        commit_when_ambiguous: 500,
        seed,
        ..quiet()
    };
    let mock = Mock::start(plan).await;
    let mut seen = Vec::new();
    for n in 0..60 {
        let outcome = mock
            .refund(&format!("k{n}"), &format!("o{n}"), json!(5))
            .await;
        seen.push(match outcome {
            Seen::Answer(status, _) => status.to_string(),
            other => format!("{other:?}"),
        });
    }
    seen.push(format!("effects {}", mock.provider().effects().len()));
    seen
}

#[tokio::test]
async fn the_same_seed_gives_the_same_faults() {
    let first = outcomes(9).await;
    assert_eq!(outcomes(9).await, first);
    let kinds: std::collections::BTreeSet<&String> = first.iter().collect();
    assert!(kinds.len() >= 6, "{first:?}");
    assert_ne!(outcomes(10).await, first);
}

#[tokio::test]
async fn lists_page_oldest_first_with_filters() {
    let mock = Mock::start(quiet()).await;
    let start_ms = mock.provider().now_ms();
    for (n, order) in ["o1", "o2", "o1", "o2", "o1"].into_iter().enumerate() {
        let seen = mock.refund(&format!("k{n}"), order, json!(n + 1)).await;
        assert_eq!(seen.status(), Some(200));
        mock.advance_ms(1000).await;
    }
    let page = mock.get("/v1/refunds?limit=2&starting_after=").await;
    let body = page.body();
    assert_eq!(body["object"], "list");
    assert_eq!(body["has_more"], true);
    assert_eq!(body["next_cursor"], "re_000002");
    let ids = |body: &Value| -> Vec<String> {
        body["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|item| item["id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(ids(body), ["re_000001", "re_000002"]);
    let next = mock
        .get("/v1/refunds?limit=2&starting_after=re_000002")
        .await;
    assert_eq!(ids(next.body()), ["re_000003", "re_000004"]);
    let last = mock
        .get("/v1/refunds?limit=2&starting_after=re_000004")
        .await;
    assert_eq!(ids(last.body()), ["re_000005"]);
    assert_eq!(last.body()["has_more"], false);
    assert_eq!(last.body()["next_cursor"], Value::Null);

    let by_order = mock.get("/v1/refunds?order_id=o1").await;
    assert_eq!(
        ids(by_order.body()),
        ["re_000001", "re_000003", "re_000005"]
    );
    let paged = mock
        .get("/v1/refunds?order_id=o1&limit=1&starting_after=re_000001")
        .await;
    assert_eq!(ids(paged.body()), ["re_000003"]);
    assert_eq!(paged.body()["next_cursor"], "re_000003");
    let by_key = mock.get("/v1/refunds?intent_key=refund:o2:4").await;
    assert_eq!(ids(by_key.body()), ["re_000004"]);
    let window = mock
        .get(&format!(
            "/v1/refunds?created_gte_ms={}&created_lt_ms={}",
            start_ms + 1000,
            start_ms + 3000
        ))
        .await;
    assert_eq!(ids(window.body()), ["re_000002", "re_000003"]);
    assert!(ids(mock.get("/v1/refunds?intent_key=").await.body()).is_empty());
    assert!(ids(mock.get("/v1/refunds?order_id=o9").await.body()).is_empty());
    let of_order = mock.get("/v1/orders/o2/refunds").await;
    assert_eq!(ids(of_order.body()), ["re_000002", "re_000004"]);

    for bad in [
        "/v1/refunds?intent_ky=refund:o2:4",
        "/v1/refunds?limit=1001",
        "/v1/refunds?limit=0",
        "/v1/refunds?starting_after=ch_000001",
        "/v1/refunds?created_gte_ms=yesterday",
        "/v1/refunds?customer_id=c1",
    ] {
        let refused = mock.get(bad).await;
        assert_eq!(refused.status(), Some(400), "{bad}: {refused:?}");
        assert_eq!(error_type(&refused), "invalid_request_error");
    }
    let full = mock.get("/v1/refunds?limit=1000").await;
    assert_eq!(ids(full.body()).len(), 5);
}

#[tokio::test]
async fn one_effect_by_id_or_404() {
    let mock = Mock::start(quiet()).await;
    let created = mock.refund("k1", "o1", json!(5)).await;
    assert_eq!(mock.get("/v1/refunds/re_000001").await, created);
    let missing = mock.get("/v1/refunds/re_000002").await;
    assert_eq!(missing.status(), Some(404));
    assert_eq!(mock.get("/v1/charges/re_000001").await.status(), Some(404));
    assert_eq!(mock.get("/v1/refunds/nonsense").await.status(), Some(404));
}

#[tokio::test]
async fn lookups_and_lists_fail_at_the_plans_rate_and_reads_never_do() {
    let plan = HttpFaultPlan {
        lookup_failure: 1000,
        ..quiet()
    };
    let mock = Mock::start(plan).await;
    assert_eq!(mock.refund("k1", "o1", json!(5)).await.status(), Some(200));
    for path in [
        "/v1/refunds?intent_key=refund:o1:5",
        "/v1/refunds/re_000001",
        "/v1/charges",
    ] {
        let failed = mock.get(path).await;
        assert_eq!(failed.status(), Some(500), "{path}: {failed:?}");
        assert_eq!(error_type(&failed), "api_error");
    }
    assert_eq!(mock.get("/v1/orders/o1").await.status(), Some(200));
    assert_eq!(mock.get("/v1/orders/o1/refunds").await.status(), Some(200));
    let stats = mock.stats().await;
    assert_eq!((stats.lookups, stats.reads), (3, 2));
}

#[tokio::test]
async fn charges_and_emails_are_effects_too() {
    let mock = Mock::start(quiet()).await;
    let charge = mock
        .post(
            "/v1/charges",
            Some("c-k1"),
            json!({"customer_id": "cus_1", "amount": "12.5", "currency": "EUR", "metadata": {"intent_key": "charge:1"}}),
        )
        .await;
    let object = charge.body();
    assert_eq!(object["id"], "ch_000001");
    assert_eq!(object["object"], "charge");
    assert_eq!(object["amount"], "12.50");
    assert_eq!(object["currency"], "eur");
    assert_eq!(object["customer_id"], "cus_1");
    let email = mock
        .post(
            "/v1/emails",
            Some("e-k1"),
            json!({"to": "ada@example.com", "subject": "Your refund", "body": "It's on its way."}),
        )
        .await;
    assert_eq!(email.body()["id"], "em_000001");
    assert_eq!(email.body()["to"], "ada@example.com");
    assert_eq!(email.body()["subject"], "Your refund");
    assert!(email.body().get("body").is_none());
    let charges = mock.get("/v1/charges?customer_id=cus_1").await;
    assert_eq!(charges.body()["data"][0], *object);
    let emails = mock.get("/v1/emails?to=ada@example.com").await;
    assert_eq!(emails.body()["data"][0], *email.body());
    assert_eq!(mock.get("/v1/charges/ch_000001").await, charge);
    let stats = mock.stats().await;
    assert_eq!(
        (
            stats.effects.refunds,
            stats.effects.charges,
            stats.effects.emails
        ),
        (0, 1, 1)
    );
}

#[tokio::test]
async fn effect_counts_name_duplicates() {
    let mock = Mock::start(quiet()).await;
    // A naive wrapper: the same refund under two keys (one per tool call).
    for key in ["call_1", "call_2"] {
        mock.refund(key, "o1", json!(5)).await;
    }
    mock.refund("call_3", "o2", json!(7)).await;
    // Without a key, nothing is deduplicated and nothing is recorded by intent.
    mock.post("/v1/refunds", None, json!({"order_id": "o3", "amount": 1}))
        .await;
    let counts = mock.effect_counts().await;
    assert_eq!(counts.total, 4);
    assert_eq!(counts.by_intent_key["refund:o1:5"], 2);
    assert_eq!(counts.by_intent_key["refund:o2:7"], 1);
    assert_eq!(counts.by_intent_key.len(), 2);
    assert_eq!(counts.duplicates, ["refund:o1:5"]);
    assert_eq!(
        counts.by_order.into_iter().collect::<Vec<_>>(),
        [
            ("o1".to_owned(), 2),
            ("o2".to_owned(), 1),
            ("o3".to_owned(), 1)
        ]
    );
    assert_eq!(mock.provider().effect_count("refund:o1:5"), 2);
    assert_eq!(mock.provider().effect_counts(), mock.effect_counts().await);
}

#[tokio::test]
async fn reads_are_deterministic() {
    let mock = Mock::start(quiet()).await;
    let other = Mock::start(HttpFaultPlan {
        seed: 99,
        ..quiet()
    })
    .await;
    let paths = [
        "/v1/orders/o1",
        "/v1/customers/cus_1",
        "/v1/customers/cus_1/orders",
        "/v1/customers/cus_1/payment_methods",
        "/v1/products/prod_1",
        "/v1/shipments/shp_1",
        "/v1/tickets/t1",
        "/v1/help/articles?q=refund%20status",
    ];
    for path in paths {
        let first = mock.get(path).await;
        assert_eq!(first.status(), Some(200), "{path}: {first:?}");
        assert_eq!(mock.get(path).await, first, "{path}");
        assert_eq!(other.get(path).await, first, "{path}: not the seed's");
    }
    assert_ne!(
        mock.get("/v1/orders/o1").await,
        mock.get("/v1/orders/o2").await
    );
    assert_eq!(mock.get("/v1/orders/o1").await.body()["id"], "o1");
    let articles = mock.get("/v1/help/articles?q=refund%20status").await;
    assert_eq!(articles.body()["data"][0]["id"], "art_refund_status");
    assert_eq!(mock.get("/v1/help/articles").await.status(), Some(400));
    assert_eq!(mock.stats().await.reads, 20);
    assert!(mock.provider().effects().is_empty());
}

#[tokio::test]
async fn put_endpoints_are_idempotent() {
    let mock = Mock::start(quiet()).await;
    let first = mock
        .put("/v1/tickets/t1/status", json!({"status": "solved"}))
        .await;
    assert_eq!(first.body()["status"], "solved");
    assert_eq!(
        mock.put("/v1/tickets/t1/status", json!({"status": "solved"}))
            .await,
        first
    );
    assert_eq!(mock.get("/v1/tickets/t1").await, first);
    let invalid = mock
        .put("/v1/tickets/t1/status", json!({"status": "lost"}))
        .await;
    assert_eq!(invalid.status(), Some(400));
    assert!(
        invalid.body()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("open, pending")
    );

    let address =
        json!({"line1": "1 Mill Lane", "city": "Leeds", "postal_code": "LS1", "country": "GB"});
    let updated = mock
        .put("/v1/customers/cus_1/address", address.clone())
        .await;
    assert_eq!(updated.body()["address"], address);
    assert_eq!(
        mock.put("/v1/customers/cus_1/address", address.clone())
            .await,
        updated
    );
    assert_eq!(mock.get("/v1/customers/cus_1").await, updated);
    let missing = mock
        .put("/v1/customers/cus_1/address", json!({"line1": "x"}))
        .await;
    assert_eq!(missing.status(), Some(400));
    assert_eq!(missing.body()["error"]["param"], "city");
    assert!(mock.provider().effects().is_empty());
}

#[tokio::test]
async fn admin_reset_forgets_every_effect_key_and_count() {
    let mock = Mock::start(quiet()).await;
    let ticket = mock.get("/v1/tickets/t1").await;
    let other_status = if ticket.body()["status"] == "closed" {
        "open"
    } else {
        "closed"
    };
    mock.refund("k1", "o1", json!(5)).await;
    mock.put("/v1/tickets/t1/status", json!({"status": other_status}))
        .await;
    assert_ne!(mock.get("/v1/tickets/t1").await, ticket);
    let reset = mock.post("/admin/reset", None, json!({})).await;
    assert_eq!(reset.status(), Some(200));
    assert_eq!(mock.stats().await, Stats::default());
    assert_eq!(mock.effect_counts().await, EffectCounts::default());
    // The key is forgotten too: the same request is a new refund, numbered from 1 again.
    let again = mock.refund("k1", "o1", json!(6)).await;
    assert_eq!(again.status(), Some(200), "{again:?}");
    assert_eq!(again.body()["id"], "re_000001");
    // Updates are forgotten: the ticket is the synthetic one again.
    assert_eq!(mock.get("/v1/tickets/t1").await, ticket);
}

#[tokio::test]
async fn invalid_requests_say_what_is_wrong_and_are_not_stored() {
    let mock = Mock::start(quiet()).await;
    let cases = [
        (
            json!({"order_id": "o1", "amount": "49.005"}),
            "amount",
            "decimal places",
        ),
        (
            json!({"order_id": "o1", "amount": "abc"}),
            "amount",
            "not a decimal number",
        ),
        (
            json!({"order_id": "o1"}),
            "amount",
            "Missing required param: amount.",
        ),
        (
            json!({"amount": 5}),
            "order_id",
            "Missing required param: order_id.",
        ),
        (
            json!({"order_id": "o1", "amount": 5, "amuont": 5}),
            "amuont",
            "unknown parameter",
        ),
        (
            json!({"order_id": "o1", "amount": 5, "currency": "dollars"}),
            "currency",
            "three-letter",
        ),
    ];
    for (body, param, message) in cases {
        let refused = mock.post("/v1/refunds", Some("k1"), body.clone()).await;
        assert_eq!(refused.status(), Some(400), "{body}: {refused:?}");
        assert_eq!(error_type(&refused), "invalid_request_error");
        assert_eq!(refused.body()["error"]["param"], param, "{body}");
        let text = refused.body()["error"]["message"].as_str().unwrap();
        assert!(text.contains(message), "{body}: {text}");
    }
    let not_json = mock
        .send(
            mock.client
                .post(mock.url("/v1/refunds"))
                .header("Idempotency-Key", "k1")
                .body("amount=5"),
        )
        .await
        .0;
    assert_eq!(not_json.status(), Some(400), "{not_json:?}");
    let long_key = "k".repeat(256);
    let refused = mock
        .post(
            "/v1/refunds",
            Some(&long_key),
            json!({"order_id": "o1", "amount": 5}),
        )
        .await;
    assert_eq!(refused.status(), Some(400));
    let huge = json!({"to": "a@b", "subject": "s", "body": "x".repeat(100 * 1024)});
    let too_large = mock.post("/v1/emails", Some("k2"), huge).await;
    assert_eq!(too_large.status(), Some(413), "{too_large:?}");
    // None reached the model, and the key is still free.
    assert_eq!(mock.stats().await.requests, 0);
    let valid = mock.refund("k1", "o1", json!(5)).await;
    assert_eq!(valid.status(), Some(200), "{valid:?}");
    let unknown = mock.get("/v1/payouts").await;
    assert_eq!(unknown.status(), Some(404));
    assert_eq!(error_type(&unknown), "invalid_request_error");
}

#[tokio::test]
async fn the_fault_plan_round_trips_and_invalid_plans_are_refused() {
    let mock = Mock::start(quiet()).await;
    let current: HttpFaultPlan =
        serde_json::from_value(mock.get("/admin/faults").await.body().clone()).unwrap();
    assert_eq!(current, quiet());
    let stormy = HttpFaultPlan {
        reject: 10,
        timeout: 20,
        dropped: 30,
        lookup_failure: 40,
        first_timeouts_per_key: 3,
        latency_scale: 0.01,
        seed: 5,
        ..HttpFaultPlan::default()
    };
    mock.set_plan(&stormy).await;
    let read_back: HttpFaultPlan =
        serde_json::from_value(mock.get("/admin/faults").await.body().clone()).unwrap();
    assert_eq!(read_back, stormy);
    assert_eq!(mock.provider().plan(), stormy);
    for bad in [
        json!({"reject": 2000}),
        json!({"reject": 600, "timeout": 600}),
        json!({"latency_p50_ms": 500, "latency_p95_ms": 100}),
        json!({"rejects": 1}),
        json!({"timeout_hold_ms": -1}),
        json!({"first_timeouts_per_key": 1001}),
        json!({"first_timeouts_per_key": -1}),
    ] {
        let refused = mock
            .send(mock.client.put(mock.url("/admin/faults")).json(&bad))
            .await
            .0;
        assert_eq!(refused.status(), Some(400), "{bad}: {refused:?}");
    }
    assert_eq!(mock.provider().plan(), stormy);
    let clock = mock
        .post("/admin/clock", None, json!({"advance_ms": "soon"}))
        .await;
    assert_eq!(clock.status(), Some(400));
}

#[tokio::test]
async fn scripted_shapes_are_acted_out_over_http() {
    let mock = Mock::start(quiet()).await;
    mock.provider().script([
        Scripted {
            shape: Shape::Dropped,
            commit: true,
        },
        Scripted {
            shape: Shape::NotSent,
            commit: true,
        },
        Scripted {
            shape: Shape::ServerError(502),
            commit: false,
        },
    ]);
    assert_eq!(mock.refund("k1", "o1", json!(5)).await, Seen::Cut);
    assert_eq!(mock.refund("k2", "o2", json!(5)).await, Seen::Cut);
    assert_eq!(mock.refund("k3", "o3", json!(5)).await.status(), Some(502));
    // The drop committed; the refused connection and the server error did not.
    let counts = mock.effect_counts().await;
    assert_eq!(counts.by_order.keys().collect::<Vec<_>>(), ["o1"]);
    // The stored success of the dropped request is replayed to its retry.
    assert_eq!(
        mock.refund("k1", "o1", json!(5)).await.body()["id"],
        "re_000001"
    );
}

#[tokio::test]
async fn the_server_stops_when_asked() {
    let mock = Mock::start(quiet()).await;
    let url = mock.url("/admin/stats");
    assert_eq!(mock.get("/admin/stats").await.status(), Some(200));
    mock.server.stop().await.unwrap();
    assert!(client().get(url).send().await.is_err());
}

#[tokio::test(start_paused = true)]
async fn latency_is_slept_on_tokio_time_so_a_paused_clock_skips_it() {
    // Straight through the router (no sockets: a paused clock would time real I/O out).
    let plan = HttpFaultPlan {
        latency_p50_ms: 4_000,
        latency_p95_ms: 4_000,
        ..quiet()
    };
    let clock = Arc::new(intentgate_gate::TokioClock::new(1_700_000_000_000));
    let provider = MockProvider::new(MockOptions {
        plan,
        clock,
        ..MockOptions::default()
    })
    .unwrap();
    let mut router = provider.router();
    let request = axum::http::Request::post("/v1/refunds")
        .header("content-type", "application/json")
        .body(axum::body::Body::from(r#"{"order_id": "o1", "amount": 5}"#))
        .unwrap();
    let wall = std::time::Instant::now();
    let started = tokio::time::Instant::now();
    let response = tower_service::Service::call(&mut router, request)
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let waited = started.elapsed();
    assert!(
        (Duration::from_secs(4)..Duration::from_millis(4_100)).contains(&waited),
        "{waited:?}"
    );
    assert!(wall.elapsed() < Duration::from_secs(2));
    // The provider's clock is tokio's: the effect was stamped when the request arrived.
    assert_eq!(
        provider.effects()[0].at_ms + 4_000,
        provider.now_ms(),
        "committed on arrival, answered after the latency"
    );
}
