//! Paging through a provider's records with `RecordPager`, against a real HTTP server.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use axum::Router;
use axum::extract::{Query, Request, State};
use axum::http::StatusCode;
use axum::routing::get;
use common::*;
use intentgate_http::spec::ListSpec;
use intentgate_http::{HttpError, HttpTool, HttpUpstream, check_list_spec, list_records};
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
            .contains("{since_ms}, {until_ms}, {limit}, {cursor}"),
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
