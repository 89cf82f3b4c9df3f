//! Paging through a provider's records with `RecordPager`, against a real HTTP server.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use axum::Router;
use axum::extract::{Query, Request, State};
use axum::http::StatusCode;
use axum::routing::get;
use common::*;
use intentgate_http::spec::{ListSpec, ListSubject};
use intentgate_http::{
    HttpError, HttpTool, HttpUpstream, check_list_spec, list_records, window_values,
};
use serde_json::{Value, json};

fn refunds_list() -> ListSpec {
    serde_json::from_value(json!({
        "path": "/v1/refunds",
        "query": {
            "created_gte_ms": "{since_ms}",
            "created_lt_ms": "{until_ms}",
            "limit": "{limit}",
            "starting_after": "{cursor}",
        },
        "items": "/data",
        "next_cursor": "/next_cursor",
        "fields": {
            "intent_key": "/metadata/intent_key",
            "external_id": "/id",
            "amount": "/amount",
            "subject": "/order_id",
        },
    }))
    .unwrap()
}

/// Seven refunds, the fifth made without the gateway (no intent key), paged like the mock
/// provider: `limit` records after `starting_after`.
fn refund(index: usize) -> Value {
    let mut refund = json!({
        "id": format!("re_{index}"),
        "order_id": format!("ord_{index}"),
        "amount": if index == 2 { json!(12.5) } else { json!("49.00") },
        "metadata": {"intent_key": format!("refund:ord_{index}:49.00")},
    });
    if index == 5 {
        refund["metadata"] = json!({});
    }
    refund
}

async fn list_server(recorder: Recorder) -> String {
    serve(
        Router::new()
            .route(
                "/v1/refunds",
                get(
                    |State(recorder): State<Recorder>,
                     Query(query): Query<std::collections::HashMap<String, String>>,
                     request: Request| async move {
                        recorder.record(request).await;
                        let limit: usize = query["limit"].parse().unwrap();
                        let start = match query.get("starting_after") {
                            Some(id) => id.trim_start_matches("re_").parse::<usize>().unwrap(),
                            None => 0,
                        };
                        let data: Vec<Value> = (start + 1..=7).take(limit).map(refund).collect();
                        let last = start + data.len();
                        let next = (last < 7).then(|| format!("re_{last}"));
                        axum::Json(json!({"object": "list", "data": data, "next_cursor": next}))
                    },
                ),
            )
            .with_state(recorder),
    )
    .await
}

#[tokio::test]
async fn the_pager_walks_three_pages_then_stops() {
    let recorder = Recorder::default();
    let base = list_server(recorder.clone()).await;
    let upstream = HttpUpstream::new(
        payments(&base),
        [(
            "refund_order".to_owned(),
            HttpTool {
                call: call_spec(
                    json!({"upstream": "payments", "method": "POST", "path": "/v1/refunds"}),
                ),
                lookup: None,
            },
        )]
        .into(),
    )
    .unwrap();
    let mut pager = upstream
        .list_records("refund_order", &refunds_list(), 1_000, 2_000, 3)
        .unwrap();

    let mut pages = Vec::new();
    while let Some(page) = pager.next_page().await.unwrap() {
        pages.push(page);
    }
    assert_eq!(pager.next_page().await.unwrap(), None);

    let sizes: Vec<usize> = pages.iter().map(Vec::len).collect();
    assert_eq!(sizes, [3, 3, 1]);
    let records: Vec<_> = pages.into_iter().flatten().collect();
    let ids: Vec<&str> = records.iter().map(|r| r.external_id.as_str()).collect();
    assert_eq!(
        ids,
        ["re_1", "re_2", "re_3", "re_4", "re_5", "re_6", "re_7"]
    );
    assert_eq!(records[0].intent_key.as_deref(), Some("refund:ord_1:49.00"));
    assert_eq!(records[0].amount.as_deref(), Some("49.00"));
    assert_eq!(records[0].subject.as_deref(), Some("ord_1"));
    assert_eq!(records[0].raw, refund(1));
    assert_eq!(records[1].amount.as_deref(), Some("12.5"));
    // Made without the gateway: no intent key.
    assert_eq!(records[4].intent_key, None);

    let queries: Vec<String> = recorder
        .seen()
        .into_iter()
        .map(|seen| seen.query.unwrap())
        .collect();
    assert_eq!(
        queries,
        [
            // No cursor on the first page: the parameter is left out.
            "created_gte_ms=1000&created_lt_ms=2000&limit=3",
            "created_gte_ms=1000&created_lt_ms=2000&limit=3&starting_after=re_3",
            "created_gte_ms=1000&created_lt_ms=2000&limit=3&starting_after=re_6",
        ]
    );
    for seen in recorder.seen() {
        assert_eq!(
            seen.headers["authorization"],
            format!("Bearer {SECRET}").as_str()
        );
    }
}

#[tokio::test]
async fn a_failed_page_is_asked_for_again() {
    let failures = Arc::new(AtomicU32::new(1));
    let base = serve(Router::new().route(
        "/v1/refunds",
        get(
            move |Query(query): Query<std::collections::HashMap<String, String>>| {
                let failures = failures.clone();
                async move {
                    if query.contains_key("starting_after")
                        && failures.fetch_sub(1, Ordering::SeqCst) > 0
                    {
                        return (StatusCode::INTERNAL_SERVER_ERROR, axum::Json(json!({})));
                    }
                    let page = match query.get("starting_after") {
                        None => json!({"data": [refund(1)], "next_cursor": "re_1"}),
                        Some(_) => json!({"data": [refund(2)], "next_cursor": null}),
                    };
                    (StatusCode::OK, axum::Json(page))
                }
            },
        ),
    ))
    .await;
    let client = intentgate_http::http_client().unwrap();
    let upstream = &payments(&base)["payments"];
    let mut pager = list_records(&client, upstream, &refunds_list(), 0, 10, 1).unwrap();

    assert_eq!(
        pager.next_page().await.unwrap().unwrap()[0].external_id,
        "re_1"
    );
    assert_eq!(
        pager.next_page().await.unwrap_err(),
        HttpError::ListStatus(500)
    );
    assert_eq!(
        pager.next_page().await.unwrap().unwrap()[0].external_id,
        "re_2"
    );
    assert_eq!(pager.next_page().await.unwrap(), None);
}

#[tokio::test]
async fn a_page_that_is_not_what_the_spec_says_is_an_error() {
    let base = serve(
        Router::new()
            .route(
                "/no-items",
                get(|| async { axum::Json(json!({"items": []})) }),
            )
            .route(
                "/no-id",
                get(|| async { axum::Json(json!({"data": [{"amount": "1.00"}]})) }),
            )
            .route(
                "/loop",
                get(|| async { axum::Json(json!({"data": [refund(1)], "next_cursor": "re_1"})) }),
            ),
    )
    .await;
    let client = intentgate_http::http_client().unwrap();
    let upstream = &payments(&base)["payments"];
    let list = |path: &str| {
        let mut spec = refunds_list();
        spec.path = path.to_owned();
        list_records(&client, upstream, &spec, 0, 10, 100).unwrap()
    };

    let error = list("/no-items").next_page().await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "the list page is unusable: no array of records at `/data`"
    );
    let error = list("/no-id").next_page().await.unwrap_err();
    assert!(
        error
            .to_string()
            .contains("record 0 of the page has no id at `/id`"),
        "{error}"
    );
    let mut looping = list("/loop");
    looping.next_page().await.unwrap();
    let error = looping.next_page().await.unwrap_err();
    assert!(error.to_string().contains("would loop"), "{error}");
}

#[test]
fn list_specs_are_checked() {
    check_list_spec(&refunds_list()).unwrap();

    let mut spec = refunds_list();
    spec.query
        .insert("key".to_owned(), "{intent_key}".to_owned());
    let error = check_list_spec(&spec).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("{since_ms}, {until_ms}, {since_s}, {until_s}, {limit}, {cursor}"),
        "{error}"
    );

    let mut spec = refunds_list();
    spec.items = "data".to_owned();
    assert!(matches!(
        check_list_spec(&spec),
        Err(HttpError::BadPointer { .. })
    ));

    let client = intentgate_http::http_client().unwrap();
    let upstream = &payments("https://api.example.com")["payments"];
    assert_eq!(
        list_records(&client, upstream, &refunds_list(), 0, 10, 0).unwrap_err(),
        HttpError::BadPageLimit(0)
    );
}

/// A listing the way Stripe pages: `starting_after` the last record's id while `has_more`.
fn stripe_refunds_list() -> ListSpec {
    serde_json::from_value(json!({
        "path": "/v1/refunds",
        "query": {
            "created_gte": "{since_s}",
            "created_lt": "{until_s}",
            "limit": "{limit}",
            "starting_after": "{cursor}",
        },
        "items": "/data",
        "has_more": "/has_more",
        "limit_max": 100,
        "fields": {
            "idempotency_key": "/metadata/intentgate_key",
            "external_id": "/id",
            "amount": "/amount",
            "subject": ["/payment_intent", "/charge/customer"],
        },
    }))
    .unwrap()
}

/// Stripe refund `index` of seven: the third's charge names no customer, the sixth has
/// neither a payment intent nor a customer.
fn stripe_refund(index: usize) -> Value {
    let mut refund = json!({
        "id": format!("re_{index}"),
        "object": "refund",
        "amount": 4900,
        "payment_intent": format!("pi_{index}"),
        "charge": {"id": format!("ch_{index}"), "customer": format!("cus_{index}")},
        "metadata": {"intentgate_key": format!("refund_order:refund:pi_{index}:49.00")},
    });
    if index == 3 {
        refund["charge"]["customer"] = Value::Null;
    }
    if index == 6 {
        refund["payment_intent"] = Value::Null;
        refund["charge"] = json!("ch_6");
    }
    refund
}

/// Stripe's list of seven refunds: at most `limit` (and at most 100) after `starting_after`,
/// with `has_more`, and no cursor of its own.
async fn stripe_server(recorder: Recorder) -> String {
    serve(
        Router::new()
            .route(
                "/v1/refunds",
                get(
                    |State(recorder): State<Recorder>,
                     Query(query): Query<std::collections::HashMap<String, String>>,
                     request: Request| async move {
                        recorder.record(request).await;
                        let limit: usize = query["limit"].parse().unwrap();
                        assert!(limit <= 100, "Stripe refuses a limit over 100");
                        let start = match query.get("starting_after") {
                            Some(id) => id.trim_start_matches("re_").parse::<usize>().unwrap(),
                            None => 0,
                        };
                        let data: Vec<Value> =
                            (start + 1..=7).take(limit).map(stripe_refund).collect();
                        let has_more = start + data.len() < 7;
                        axum::Json(json!({
                            "object": "list",
                            "url": "/v1/refunds",
                            "data": data,
                            "has_more": has_more,
                        }))
                    },
                ),
            )
            .with_state(recorder),
    )
    .await
}

#[tokio::test]
async fn has_more_pages_start_after_the_last_records_id() {
    let recorder = Recorder::default();
    let base = stripe_server(recorder.clone()).await;
    let client = intentgate_http::http_client().unwrap();
    let upstream = &payments(&base)["payments"];
    let mut pager = list_records(&client, upstream, &stripe_refunds_list(), 0, 1000, 3).unwrap();

    let mut pages = Vec::new();
    while let Some(page) = pager.next_page().await.unwrap() {
        pages.push(page);
    }
    assert_eq!(pager.next_page().await.unwrap(), None);
    let sizes: Vec<usize> = pages.iter().map(Vec::len).collect();
    assert_eq!(sizes, [3, 3, 1]);
    let records: Vec<_> = pages.into_iter().flatten().collect();
    let ids: Vec<&str> = records.iter().map(|r| r.external_id.as_str()).collect();
    assert_eq!(
        ids,
        ["re_1", "re_2", "re_3", "re_4", "re_5", "re_6", "re_7"]
    );
    assert_eq!(
        records[0].provider_key.as_deref(),
        Some("refund_order:refund:pi_1:49.00")
    );
    assert_eq!(records[0].amount.as_deref(), Some("4900"));

    let queries: Vec<String> = recorder
        .seen()
        .into_iter()
        .map(|seen| seen.query.unwrap())
        .collect();
    assert_eq!(
        queries,
        [
            "created_gte=0&created_lt=1&limit=3",
            "created_gte=0&created_lt=1&limit=3&starting_after=re_3",
            "created_gte=0&created_lt=1&limit=3&starting_after=re_6",
        ]
    );
}

#[tokio::test]
async fn a_subject_of_several_pointers_names_each_one_the_record_holds() {
    let base = stripe_server(Recorder::default()).await;
    let client = intentgate_http::http_client().unwrap();
    let upstream = &payments(&base)["payments"];
    let mut pager = list_records(&client, upstream, &stripe_refunds_list(), 0, 1, 100).unwrap();
    let records = pager.next_page().await.unwrap().unwrap();
    let subject = |index: usize| records[index].subject.as_deref();
    assert_eq!(subject(0), Some("pi_1 / cus_1"));
    // The third's charge has no customer: the payment intent alone.
    assert_eq!(subject(2), Some("pi_3"));
    // The sixth holds neither.
    assert_eq!(subject(5), None);

    // One pointer, as before.
    let mut spec = stripe_refunds_list();
    spec.fields.subject = Some("/charge/customer".into());
    let mut pager = list_records(&client, upstream, &spec, 0, 1, 100).unwrap();
    let records = pager.next_page().await.unwrap().unwrap();
    assert_eq!(records[0].subject.as_deref(), Some("cus_1"));
}

#[tokio::test]
async fn the_window_is_sent_in_whole_seconds_that_cover_it_and_the_limit_is_capped() {
    let recorder = Recorder::default();
    let base = stripe_server(recorder.clone()).await;
    let client = intentgate_http::http_client().unwrap();
    let upstream = &payments(&base)["payments"];
    let mut spec = stripe_refunds_list();
    spec.query
        .insert("created_gte_ms".to_owned(), "{since_ms}".to_owned());
    spec.query
        .insert("created_lt_ms".to_owned(), "{until_ms}".to_owned());
    let mut pager = list_records(
        &client,
        upstream,
        &spec,
        1_700_000_000_500,
        1_700_000_001_200,
        1000,
    )
    .unwrap();
    let first = pager.next_page().await.unwrap().unwrap();
    assert_eq!(first.len(), 7);
    assert_eq!(
        recorder.seen()[0].query.as_deref(),
        Some(
            "created_gte=1700000000&created_gte_ms=1700000000500&created_lt=1700000002\
             &created_lt_ms=1700000001200&limit=100"
        )
    );

    // A page size under the provider's largest is sent as it is.
    let mut pager = list_records(&client, upstream, &spec, 0, 1000, 40).unwrap();
    pager.next_page().await.unwrap();
    assert!(
        recorder.seen()[1]
            .query
            .as_deref()
            .unwrap()
            .contains("&limit=40"),
        "{:?}",
        recorder.seen()[1].query
    );
}

#[test]
fn window_seconds_round_outwards_and_only_when_needed() {
    let seconds = |since_ms, until_ms| {
        let values = window_values(since_ms, until_ms, 10, None);
        (values["since_s"].clone(), values["until_s"].clone())
    };
    assert_eq!(
        seconds(1_700_000_000_500, 1_700_000_001_200),
        (json!(1_700_000_000), json!(1_700_000_002))
    );
    // Whole seconds stay as they are.
    assert_eq!(
        seconds(1_700_000_000_000, 1_700_000_001_000),
        (json!(1_700_000_000), json!(1_700_000_001))
    );
    // Before 1970 too: down is down, up is up.
    assert_eq!(seconds(-1_500, -500), (json!(-2), json!(0)));
}

#[tokio::test]
async fn a_provider_that_says_more_follow_without_records_fails_the_listing() {
    let recorder = Recorder::default();
    let base = serve(
        Router::new()
            .route(
                "/v1/refunds",
                get(
                    |State(recorder): State<Recorder>,
                     Query(query): Query<std::collections::HashMap<String, String>>,
                     request: Request| async move {
                        recorder.record(request).await;
                        // The first page is honest; after it, an empty page that has more.
                        let data = match query.get("starting_after") {
                            None => vec![stripe_refund(1)],
                            Some(_) => Vec::new(),
                        };
                        axum::Json(json!({"data": data, "has_more": true}))
                    },
                ),
            )
            .route(
                "/same",
                get(|| async { axum::Json(json!({"data": [stripe_refund(1)], "has_more": true})) }),
            )
            .route(
                "/no-flag",
                get(|| async { axum::Json(json!({"data": [stripe_refund(1)]})) }),
            )
            .with_state(recorder.clone()),
    )
    .await;
    let client = intentgate_http::http_client().unwrap();
    let upstream = &payments(&base)["payments"];
    let list = |path: &str| {
        let mut spec = stripe_refunds_list();
        spec.path = path.to_owned();
        list_records(&client, upstream, &spec, 0, 10, 100).unwrap()
    };

    let mut pager = list("/v1/refunds");
    assert_eq!(pager.next_page().await.unwrap().unwrap().len(), 1);
    let error = pager.next_page().await.unwrap_err();
    assert!(
        error
            .to_string()
            .contains("the page says another follows (`/has_more` is true) but holds no record"),
        "{error}"
    );
    // It stays an error, asked again, and is never taken as the end of the listing.
    assert!(pager.next_page().await.is_err());
    assert_eq!(recorder.seen().len(), 3);

    // A provider that answers the page after re_1 with re_1 again: the listing would loop.
    let mut pager = list("/same");
    pager.next_page().await.unwrap();
    let error = pager.next_page().await.unwrap_err();
    assert!(error.to_string().contains("would loop"), "{error}");

    // No flag at all is not "no more".
    let error = list("/no-flag").next_page().await.unwrap_err();
    assert!(
        error
            .to_string()
            .contains("no boolean at `/has_more` to say whether another page follows"),
        "{error}"
    );
}

#[test]
fn a_list_must_page_one_way_with_a_cursor_and_a_usable_limit_max() {
    check_list_spec(&stripe_refunds_list()).unwrap();
    let refused = |change: &dyn Fn(&mut ListSpec)| {
        let mut spec = stripe_refunds_list();
        change(&mut spec);
        match check_list_spec(&spec) {
            Err(HttpError::BadList(reason)) => reason,
            other => panic!("{other:?}"),
        }
    };
    let both = refused(&|spec| spec.next_cursor = Some("/next_cursor".to_owned()));
    assert!(both.contains("exactly one of `next_cursor`"), "{both}");
    let neither = refused(&|spec| spec.has_more = None);
    assert!(
        neither.contains("exactly one of `next_cursor`"),
        "{neither}"
    );
    let no_cursor = refused(&|spec| {
        spec.query.remove("starting_after");
    });
    assert!(no_cursor.contains("has no `{cursor}`"), "{no_cursor}");
    let zero = refused(&|spec| spec.limit_max = Some(0));
    assert!(zero.contains("`limit_max` is 0"), "{zero}");

    // The cursor may be in a header or the path instead.
    let mut spec = stripe_refunds_list();
    spec.query.remove("starting_after");
    spec.headers
        .insert("X-Cursor".to_owned(), "{cursor}".to_owned());
    check_list_spec(&spec).unwrap();

    // A subject pointer is checked like any other.
    let mut spec = stripe_refunds_list();
    spec.fields.subject = Some(ListSubject::Several(vec![
        "/payment_intent".to_owned(),
        "customer".to_owned(),
    ]));
    assert!(matches!(
        check_list_spec(&spec),
        Err(HttpError::BadPointer { .. })
    ));
}
