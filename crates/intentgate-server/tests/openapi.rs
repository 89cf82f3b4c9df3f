//! The OpenAPI document at `GET /openapi.json`, against a real server on a loopback port: it
//! is OpenAPI 3.1 whose every `$ref` resolves, every operation in it is served, the router
//! serves nothing on its paths that it does not document, and each documented request body
//! is accepted by its route when the schema accepts it and refused when the schema refuses
//! it. The routes' answers, the intent API's included, are valid by their schemas.

mod common;

use common::{Server, refund_tool};
use intentgate_core::ToolDefinition;
use intentgate_mock::FaultPlan;
use intentgate_server::ServerOptions;
use intentgate_test_support::client_tool;
use reqwest::Method;
use serde_json::{Map, Value, json};

/// Every HTTP method an OpenAPI path item may hold.
const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// The client-executed tool: `refund_order`'s twin, which the caller's code performs.
const CLIENT_TOOL: &str = "refund_order_sdk";

/// A server of `refund_order` (executed by the gateway) and [`CLIENT_TOOL`].
async fn start() -> Server {
    common::start(
        vec![
            refund_tool(),
            ToolDefinition {
                name: CLIENT_TOOL.to_owned(),
                ..client_tool(refund_tool())
            },
        ],
        FaultPlan::none(),
        ServerOptions::default(),
    )
    .await
}

async fn document(server: &Server) -> Value {
    let response = server
        .client
        .get(format!("{}/openapi.json", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "application/json"
    );
    response.json().await.unwrap()
}

/// Every `$ref` in `value`.
fn refs<'a>(value: &'a Value, found: &mut Vec<&'a str>) {
    match value {
        Value::Object(object) => {
            if let Some(Value::String(reference)) = object.get("$ref") {
                found.push(reference);
            }
            object.values().for_each(|value| refs(value, found));
        }
        Value::Array(items) => items.iter().for_each(|value| refs(value, found)),
        _ => {}
    }
}

/// The schema `schema` points to, when it is a `$ref` into the document.
fn resolved<'a>(document: &'a Value, schema: &'a Value) -> &'a Value {
    match schema.get("$ref").and_then(Value::as_str) {
        Some(reference) => {
            let pointer = reference.strip_prefix('#').expect("a local reference");
            document.pointer(pointer).expect("the reference resolves")
        }
        None => schema,
    }
}

/// A value the schema accepts, built from its types and required properties: the least a
/// caller who reads only the document would send.
fn sample(document: &Value, schema: &Value) -> Value {
    let schema = resolved(document, schema);
    if let Some(value) = schema["enum"].get(0) {
        return value.clone();
    }
    let kind = match &schema["type"] {
        Value::String(kind) => kind.as_str(),
        Value::Array(kinds) => kinds[0].as_str().unwrap(),
        _ => "object",
    };
    match kind {
        "object" => {
            let mut object = Map::new();
            let properties = schema["properties"].as_object();
            for name in schema["required"].as_array().into_iter().flatten() {
                let name = name.as_str().unwrap();
                let property = &properties.expect("required properties are described")[name];
                object.insert(name.to_owned(), sample(document, property));
            }
            Value::Object(object)
        }
        "array" => json!([]),
        "string" => json!("x"),
        "integer" | "number" => json!(1),
        "boolean" => json!(true),
        other => panic!("no sample for type {other}"),
    }
}

/// A validator of `schema`, whose references resolve into the document's components.
fn validator(document: &Value, schema: &Value) -> jsonschema::Validator {
    let mut root = schema.clone();
    root["components"] = document["components"].clone();
    jsonschema::validator_for(&root).expect("a valid JSON Schema")
}

/// The path with a sample for each parameter: the refund tool (its client-executed twin for
/// the intent API's grant), an intent key of it, and the intent id `id`.
fn concrete(path: &str, id: i64) -> String {
    let tool = if path.ends_with("/intents") {
        CLIENT_TOOL
    } else {
        "refund_order"
    };
    path.replace("{name}", tool)
        .replace("{tool}", "refund_order")
        .replace("{key}", "refund:8812:49.00")
        .replace("{id}", &id.to_string())
}

/// Whether `concrete` is a path of the document's `template`: a `{param}` is one segment,
/// and `{key}` (axum's `{*key}`, which the document writes `{key}`) the rest of the path.
fn matches(template: &str, concrete: &str) -> bool {
    let mut segments = concrete.split('/');
    for part in template.split('/') {
        if part == "{key}" {
            let rest: Vec<&str> = segments.collect();
            return !rest.is_empty() && rest.iter().all(|segment| !segment.is_empty());
        }
        match segments.next() {
            Some(segment) if part.starts_with('{') => {
                if segment.is_empty() {
                    return false;
                }
            }
            Some(segment) if segment == part => {}
            _ => return false,
        }
    }
    segments.next().is_none()
}

/// A grant of [`CLIENT_TOOL`] that answers `execute`: its body.
async fn execute_grant(server: &Server, order_id: &str) -> Value {
    let (status, grant) = send(
        server,
        "post",
        &format!("/v1/tools/{CLIENT_TOOL}/intents"),
        Some(&json!({"arguments": {"order_id": order_id, "amount": 49}})),
    )
    .await;
    assert_eq!(
        (status, grant["action"].as_str()),
        (200, Some("execute")),
        "{grant}"
    );
    grant
}

/// The operations of the document, as (method, path).
fn operations(document: &Value) -> Vec<(String, String)> {
    let mut operations = Vec::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        for method in METHODS {
            if item.get(method).is_some() {
                operations.push((method.to_owned(), path.clone()));
            }
        }
    }
    operations
}

async fn send(server: &Server, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
    let mut request = server
        .client
        .request(method, format!("{}{path}", server.base));
    if let Some(body) = body {
        request = request
            .header("content-type", "application/json")
            .body(body.to_string());
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let body = response.json().await.unwrap_or(Value::Null);
    (status, body)
}

#[tokio::test]
async fn the_document_is_openapi_3_1_and_every_reference_resolves() {
    let server = start().await;
    let document = document(&server).await;
    assert!(
        document["openapi"].as_str().unwrap().starts_with("3.1."),
        "{}",
        document["openapi"]
    );
    assert_eq!(document["info"]["title"], "intentgate");
    let mut found = Vec::new();
    refs(&document, &mut found);
    assert!(!found.is_empty(), "the bodies are components");
    for reference in found {
        let pointer = reference.strip_prefix('#').expect("a local reference");
        assert!(
            document.pointer(pointer).is_some(),
            "{reference} does not resolve"
        );
    }
    // The bearer scheme, on every route that needs a credential and on no other.
    assert_eq!(
        document["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    for (method, path) in operations(&document) {
        let security = document["paths"][&path][&method].get("security");
        for requirement in security.and_then(Value::as_array).into_iter().flatten() {
            for scheme in requirement.as_object().unwrap().keys() {
                assert!(
                    document["components"]["securitySchemes"]
                        .get(scheme)
                        .is_some(),
                    "{method} {path} names scheme {scheme}"
                );
            }
        }
        let secured = security.is_some();
        let public = ["/healthz", "/readyz", "/metrics", "/openapi.json"].contains(&path.as_str());
        assert_eq!(secured, !public, "{method} {path}");
    }
    // The headers of a call and of a grant, optional strings.
    for path in ["/v1/tools/{name}/call", "/v1/tools/{name}/intents"] {
        let parameters = document["paths"][path]["post"]["parameters"]
            .as_array()
            .unwrap();
        for header in ["Idempotency-Key", "Intent-Id"] {
            let parameter = parameters
                .iter()
                .find(|parameter| parameter["name"] == header)
                .unwrap_or_else(|| panic!("{header} is documented on {path}"));
            assert_eq!(
                (
                    &parameter["in"],
                    &parameter["required"],
                    &parameter["schema"]
                ),
                (&json!("header"), &json!(false), &json!({"type": "string"}))
            );
        }
    }
    // The intent API's routes by id take the id as an integer.
    for (method, path) in [
        ("get", "/v1/intents/{id}"),
        ("post", "/v1/intents/{id}/settle"),
        ("post", "/v1/intents/{id}/renew"),
    ] {
        let parameters = document["paths"][path][method]["parameters"]
            .as_array()
            .unwrap();
        assert_eq!(parameters.len(), 1, "{method} {path}");
        let id = &parameters[0];
        assert_eq!(
            (
                &id["name"],
                &id["in"],
                &id["required"],
                &id["schema"]["type"]
            ),
            (
                &json!("id"),
                &json!("path"),
                &json!(true),
                &json!("integer")
            ),
            "{method} {path}"
        );
    }
    // Served without a credential, through the edge: a foreign origin is still refused.
    let response = server
        .client
        .get(format!("{}/openapi.json", server.base))
        .header("origin", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
}

#[tokio::test]
async fn the_document_and_the_router_serve_the_same_routes() {
    let server = start().await;
    let document = document(&server).await;
    // An intent to read, so that every documented route has something to answer.
    let (status, _) = send(
        &server,
        "post",
        "/v1/tools/refund_order/call",
        Some(&json!({"arguments": {"order_id": "8812", "amount": 49}})),
    )
    .await;
    assert_eq!(status, 200);
    let id = execute_grant(&server, "8812").await["intent_id"]
        .as_i64()
        .unwrap();

    let operations = operations(&document);
    let mut listed: Vec<String> = operations
        .iter()
        .map(|(method, path)| format!("{} {path}", method.to_uppercase()))
        .collect();
    listed.sort();
    assert_eq!(
        listed,
        [
            "GET /healthz",
            "GET /metrics",
            "GET /openapi.json",
            "GET /readyz",
            "GET /v1/intents/{id}",
            "GET /v1/intents/{tool}/{key}",
            "GET /v1/tools",
            "POST /v1/intents/{id}/renew",
            "POST /v1/intents/{id}/settle",
            "POST /v1/tools/{name}/call",
            "POST /v1/tools/{name}/intents",
        ]
    );
    // A method a path does not document may still be served there when the concrete path is
    // also one of another documented path, as any OpenAPI client matches it: `GET
    // /v1/intents/7/settle` is the intent of tool `7` with key `settle`, which `GET
    // /v1/intents/{tool}/{key}` documents (a tool may be named `7`). These are all such paths.
    let mut overlaps = Vec::new();
    let paths: Vec<&String> = document["paths"].as_object().unwrap().keys().collect();
    for path in paths {
        let item = &document["paths"][path];
        let target = concrete(path, id);
        for method in ["get", "post", "put", "patch", "delete"] {
            let body = (method != "get").then(|| json!({"arguments": {}}));
            let (status, answer) = send(&server, method, &target, body.as_ref()).await;
            let elsewhere = operations
                .iter()
                .find(|(other_method, other)| {
                    other_method == method && other != path && matches(other, &target)
                })
                .map(|(_, other)| other.clone());
            if item.get(method).is_some() || elsewhere.is_some() {
                // Served: neither the fallback's 404 nor a 405.
                assert_ne!(status, 405, "{method} {target}: {answer}");
                assert_ne!(
                    answer["type"], "urn:intentgate:problem:not-found",
                    "{method} {target}"
                );
                if item.get(method).is_none() {
                    overlaps.push(format!("{method} {path} = {}", elsewhere.unwrap()));
                }
            } else {
                // A method the document does not list on a path it does: not served.
                assert_eq!(status, 405, "{method} {path} is served but not documented");
            }
        }
    }
    overlaps.sort();
    assert_eq!(
        overlaps,
        [
            "get /v1/intents/{id}/renew = /v1/intents/{tool}/{key}",
            "get /v1/intents/{id}/settle = /v1/intents/{tool}/{key}",
        ]
    );
    // Read as that intent: the tool `{id}`'s key `settle`, which does not exist.
    let (status, answer) = send(&server, "get", &format!("/v1/intents/{id}/settle"), None).await;
    assert_eq!(
        (status, answer["type"].as_str()),
        (404, Some("urn:intentgate:problem:unknown-intent"))
    );
    assert!(
        answer["detail"]
            .as_str()
            .unwrap()
            .contains(&format!("tool `{id}` with key `settle`")),
        "{answer}"
    );
    // Paths the document has no template for but the router's shapes reach: the intent routes
    // are served as `/v1/intents/{tool}` and `/v1/intents/{tool}/{*key}`, whose other methods
    // and other last segments are not served.
    for (method, target) in [
        ("post", format!("/v1/intents/{id}")),
        ("post", format!("/v1/intents/{id}/other")),
        ("post", format!("/v1/intents/{id}/settle/more")),
        ("put", format!("/v1/intents/{id}/settle")),
    ] {
        let documented = operations
            .iter()
            .any(|(other_method, other)| other_method == method && matches(other, &target));
        assert!(!documented, "{method} {target}");
        let (status, answer) =
            send(&server, method, &target, Some(&json!({"lease": "igl_x"}))).await;
        assert_eq!(status, 405, "{method} {target}: {answer}");
    }
    // The 405 of a POST there says the path takes GET, as the router's own 405s say theirs.
    let response = server
        .client
        .delete(format!("{}/v1/tools/refund_order/call", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 405);
    assert_eq!(response.headers()["allow"], "POST");
    let response = server
        .client
        .post(format!("{}/v1/intents/{id}/other", server.base))
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 405);
    assert_eq!(response.headers()["allow"], "GET");
    // And a path it does not list falls to the fallback.
    let (status, answer) = send(&server, "get", "/v1/undocumented", None).await;
    assert_eq!(
        (status, answer["type"].as_str()),
        (404, Some("urn:intentgate:problem:not-found"))
    );
}

#[tokio::test]
async fn request_bodies_the_schema_accepts_are_accepted_and_those_it_refuses_are_refused() {
    let server = start().await;
    let document = document(&server).await;
    // An intent of the client tool, for the routes by id; a sample lease does not hold it.
    let id = execute_grant(&server, "8812").await["intent_id"]
        .as_i64()
        .unwrap();
    let mut checked = Vec::new();
    for (method, path) in operations(&document) {
        let operation = &document["paths"][&path][&method];
        let Some(schema) = operation
            .pointer("/requestBody/content/application~1json/schema")
            .cloned()
        else {
            continue;
        };
        checked.push(format!("{method} {path}"));
        let validator = validator(&document, &schema);
        let target = concrete(&path, id);

        let valid = sample(&document, &schema);
        assert!(validator.is_valid(&valid), "{valid}");
        let (status, answer) = send(&server, &method, &target, Some(&valid)).await;
        assert!(
            ![400, 422].contains(&status),
            "{method} {path} refused a body its schema accepts ({valid}): {status} {answer}"
        );

        let body = resolved(&document, &schema);
        let mut unknown = valid.clone();
        unknown["not_a_field"] = json!(1);
        let mut refused = vec![unknown];
        for name in body["required"].as_array().into_iter().flatten() {
            let mut missing = valid.clone();
            missing
                .as_object_mut()
                .unwrap()
                .remove(name.as_str().unwrap());
            refused.push(missing);
        }
        for invalid in refused {
            assert!(
                !validator.is_valid(&invalid),
                "the schema accepts {invalid}"
            );
            let (status, answer) = send(&server, &method, &target, Some(&invalid)).await;
            assert!(
                [400, 422].contains(&status),
                "{method} {path} accepted a body its schema refuses ({invalid}): {status} {answer}"
            );
            assert!(
                answer["type"]
                    .as_str()
                    .unwrap()
                    .starts_with("urn:intentgate:problem:")
            );
        }
    }
    checked.sort();
    assert_eq!(
        checked,
        [
            "post /v1/intents/{id}/renew",
            "post /v1/intents/{id}/settle",
            "post /v1/tools/{name}/call",
            "post /v1/tools/{name}/intents",
        ]
    );
}

#[tokio::test]
async fn the_outcome_and_problem_schemas_accept_what_the_routes_answer() {
    let server = start().await;
    let document = document(&server).await;
    let call = &document["paths"]["/v1/tools/{name}/call"]["post"]["responses"];
    let outcome = validator(
        &document,
        &call["200"]["content"]["application/json"]["schema"],
    );
    let problem = validator(
        &document,
        &call["404"]["content"]["application/problem+json"]["schema"],
    );
    for arguments in [
        json!({"order_id": "8812", "amount": 49}),
        json!({"order_id": "8812", "amount": 49}),
        json!({"order_id": "8812", "amount": 50, "extra": true}),
    ] {
        let (status, answer) = send(
            &server,
            "post",
            "/v1/tools/refund_order/call",
            Some(&json!({ "arguments": arguments })),
        )
        .await;
        assert_eq!(status, 200);
        assert!(outcome.is_valid(&answer), "{answer}");
    }
    let (status, answer) = send(
        &server,
        "post",
        "/v1/tools/no_such_tool/call",
        Some(&json!({"arguments": {}})),
    )
    .await;
    assert_eq!(status, 404);
    assert!(problem.is_valid(&answer), "{answer}");
    let tools = &document["paths"]["/v1/tools"]["get"]["responses"]["200"]["content"]["application/json"]
        ["schema"];
    let (_, listed) = send(&server, "get", "/v1/tools", None).await;
    assert!(validator(&document, tools).is_valid(&listed), "{listed}");
    let intent = &document["paths"]["/v1/intents/{tool}/{key}"]["get"]["responses"]["200"]["content"]
        ["application/json"]["schema"];
    let (status, read) = send(
        &server,
        "get",
        "/v1/intents/refund_order/refund:8812:49.00",
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert!(validator(&document, intent).is_valid(&read), "{read}");
}

#[tokio::test]
async fn the_document_needs_no_credential_where_the_tools_do() {
    use std::sync::Arc;

    use intentgate_core::{Scopes, Tenant};
    use intentgate_server::auth::{ActFor, ApiKey, AuthOptions, Authenticator};

    let authenticator = Authenticator::new(AuthOptions::Methods {
        api_keys: vec![ApiKey {
            name: "agent".to_owned(),
            digest: ApiKey::parse_digest(&ApiKey::digest_hex("key-of-agent")).unwrap(),
            tenant: Tenant::parse("acme").unwrap(),
            scopes: Scopes::all(),
            act_for: ActFor::Own,
        }],
        jwt: None,
        trusted_proxy: None,
    })
    .unwrap();
    let options = ServerOptions {
        authenticator: Arc::new(authenticator),
        ..ServerOptions::default()
    };
    let server = common::start(vec![refund_tool()], FaultPlan::none(), options).await;
    let (status, _) = send(&server, "get", "/v1/tools", None).await;
    assert_eq!(status, 401, "the tools need a credential");
    let document = document(&server).await;
    assert!(document["paths"]["/v1/tools"].is_object());
}

/// The schema of the answer `status` of `method path`, as a validator.
fn answer_schema(document: &Value, method: &str, path: &str, status: u16) -> jsonschema::Validator {
    let response = &document["paths"][path][method]["responses"][status.to_string()];
    let content = if status < 400 {
        "application/json"
    } else {
        "application/problem+json"
    };
    let schema = &response["content"][content]["schema"];
    assert!(schema.is_object(), "{method} {path} documents no {status}");
    validator(document, schema)
}

#[tokio::test]
async fn the_intent_api_schemas_accept_what_its_routes_answer() {
    let server = start().await;
    let document = document(&server).await;
    let grant_path = "/v1/tools/{name}/intents";
    let granted = answer_schema(&document, "post", grant_path, 200);
    // The schema tells the actions apart: it is no `{}`.
    for wrong in [
        json!({"action": "execute"}),
        json!({"action": "answer"}),
        json!({"action": "done", "outcome": {"status": "done", "message": "m", "tool": "t"}}),
    ] {
        assert!(!granted.is_valid(&wrong), "{wrong}");
    }

    // A grant: execute.
    let grant = execute_grant(&server, "8812").await;
    assert!(granted.is_valid(&grant), "{grant}");
    let id = grant["intent_id"].as_i64().unwrap();
    let lease = grant["lease"]["token"].as_str().unwrap().to_owned();

    // A renewal.
    let (status, renewed) = send(
        &server,
        "post",
        &format!("/v1/intents/{id}/renew"),
        Some(&json!({"lease": lease})),
    )
    .await;
    assert_eq!(status, 200, "{renewed}");
    let renewal = answer_schema(&document, "post", "/v1/intents/{id}/renew", 200);
    assert!(renewal.is_valid(&renewed), "{renewed}");
    assert!(!renewal.is_valid(&json!({"lease": {"token": lease}})));

    // A settle: done, answered with the outcome.
    let settle_path = "/v1/intents/{id}/settle";
    let (status, settled) = send(
        &server,
        "post",
        &format!("/v1/intents/{id}/settle"),
        Some(
            &json!({"lease": lease, "outcome": "done", "result": {"id": "re_1"},
                     "external_id": "re_1"}),
        ),
    )
    .await;
    assert_eq!(
        (status, settled["action"].as_str()),
        (200, Some("answer")),
        "{settled}"
    );
    assert!(
        answer_schema(&document, "post", settle_path, 200).is_valid(&settled),
        "{settled}"
    );

    // The same lease again: 409 lease-lost, a problem.
    let (status, lost) = send(
        &server,
        "post",
        &format!("/v1/intents/{id}/settle"),
        Some(&json!({"lease": lease, "outcome": "done"})),
    )
    .await;
    assert_eq!(
        (status, lost["type"].as_str()),
        (409, Some("urn:intentgate:problem:lease-lost")),
        "{lost}"
    );
    assert!(
        answer_schema(&document, "post", settle_path, 409).is_valid(&lost),
        "{lost}"
    );

    // A grant again: the answer, already done.
    let (status, again) = send(
        &server,
        "post",
        &format!("/v1/tools/{CLIENT_TOOL}/intents"),
        Some(&json!({"arguments": {"order_id": "8812", "amount": 49}})),
    )
    .await;
    assert_eq!(
        (
            status,
            again["action"].as_str(),
            again["outcome"]["status"].as_str()
        ),
        (200, Some("answer"), Some("already_done")),
        "{again}"
    );
    assert!(granted.is_valid(&again), "{again}");

    // The intent by id.
    let (status, intent) = send(&server, "get", &format!("/v1/intents/{id}"), None).await;
    assert_eq!(
        (status, intent["status"].as_str()),
        (200, Some("done")),
        "{intent}"
    );
    assert!(
        answer_schema(&document, "get", "/v1/intents/{id}", 200).is_valid(&intent),
        "{intent}"
    );
    let (status, unknown) = send(&server, "get", "/v1/intents/999999", None).await;
    assert_eq!(status, 404);
    assert!(
        answer_schema(&document, "get", "/v1/intents/{id}", 404).is_valid(&unknown),
        "{unknown}"
    );

    // A grant of a tool the gateway executes: 409 not-client-executed.
    let (status, refused) = send(
        &server,
        "post",
        "/v1/tools/refund_order/intents",
        Some(&json!({"arguments": {"order_id": "8812", "amount": 49}})),
    )
    .await;
    assert_eq!(
        (status, refused["type"].as_str()),
        (409, Some("urn:intentgate:problem:not-client-executed"))
    );
    assert!(
        answer_schema(&document, "post", grant_path, 409).is_valid(&refused),
        "{refused}"
    );
}
