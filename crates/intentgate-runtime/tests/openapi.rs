//! The OpenAPI document at `GET /openapi.json` of a gateway embedded from a config file, as
//! `intentgate serve` runs it, on a loopback port: with the admin API on, the document holds
//! every admin operation, each one served and each admin route it serves on those paths
//! documented, with the admin credential as its security requirement and its answers valid
//! by their schemas; with the admin API off, the document holds none of them, as the routes
//! answer none but `admin-off`.

mod common;

use common::open_example;
use intentgate_mock::{HttpFaultPlan, MockOptions, MockProvider, MockServer};
use intentgate_test_support::http::answer;
use serde_json::{Value, json};
use tokio::sync::oneshot;

const ADMIN_TOKEN: &str = "openapi-test-admin-token-0123456789abcdef";
/// Every HTTP method a path item may hold that a route could serve.
const METHODS: [&str; 5] = ["get", "put", "post", "patch", "delete"];

/// A gateway serving on a loopback port until dropped.
struct Serving {
    base: String,
    client: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    _mock: MockServer,
    _folder: tempfile::TempDir,
}

impl Drop for Serving {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// The example gateway, its payments upstream the mock provider, with `admin_token`.
async fn serve(admin_token: Option<&str>) -> Serving {
    let provider = MockProvider::new(MockOptions::new(HttpFaultPlan::quiet())).unwrap();
    let mock = MockServer::start(provider).await.unwrap();
    let folder = tempfile::tempdir().unwrap();
    let gateway = open_example(folder.path(), &mock.url(), admin_token.map(str::to_owned)).await;
    let server = gateway.bind().await.unwrap();
    let base = format!("http://{}", server.local_addr());
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(server.run(async {
        let _ = stopped.await;
    }));
    Serving {
        base,
        client: reqwest::Client::new(),
        stop: Some(stop),
        _mock: mock,
        _folder: folder,
    }
}

impl Serving {
    async fn document(&self) -> Value {
        let response = self
            .client
            .get(format!("{}/openapi.json", self.base))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        response.json().await.unwrap()
    }

    /// `method path` with the admin token (when `token`) and, but for a GET, a JSON body no
    /// admin route accepts (an unknown field), so that nothing is changed; the status, the
    /// content type and the body (JSON, or the text as a JSON string).
    async fn send(&self, method: &str, path: &str, token: bool) -> (u16, String, Value) {
        let method = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let mut request = self
            .client
            .request(method.clone(), format!("{}{path}", self.base));
        if token {
            request = request.bearer_auth(ADMIN_TOKEN);
        }
        if method != reqwest::Method::GET {
            request = request.json(&json!({"unknown_field": true}));
        }
        answer(request.send().await.unwrap()).await
    }
}

/// The admin operations of the document, as `METHOD path`, sorted.
fn admin_operations(document: &Value) -> Vec<String> {
    let mut found = Vec::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        for method in METHODS {
            if item.get(method).is_some() && path.starts_with("/v1/admin") {
                found.push(format!("{} {path}", method.to_uppercase()));
            }
        }
    }
    found.sort();
    found
}

/// The path with a sample for each parameter: a configured tool, and an id nothing has.
fn concrete(path: &str) -> String {
    path.replace("{tool}", "refund_order")
        .replace("{id}", "424242")
}

/// A validator of `schema`, whose references resolve into the document's components.
fn validator(document: &Value, schema: &Value) -> jsonschema::Validator {
    let mut root = schema.clone();
    root["components"] = document["components"].clone();
    jsonschema::validator_for(&root).expect("a valid JSON Schema")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_admin_api_on_every_admin_route_is_documented_and_every_documented_one_served() {
    let serving = serve(Some(ADMIN_TOKEN)).await;
    let document = serving.document().await;
    assert_eq!(
        admin_operations(&document),
        [
            "GET /v1/admin/activity",
            "GET /v1/admin/alerts",
            "GET /v1/admin/approvals",
            "GET /v1/admin/flags",
            "GET /v1/admin/intents",
            "GET /v1/admin/intents/{id}",
            "GET /v1/admin/reconciliations",
            "GET /v1/admin/reconciliations/{id}",
            "GET /v1/admin/reconciliations/{id}/mismatches.csv",
            "GET /v1/admin/reconciliations/{id}/subjects.csv",
            "GET /v1/admin/unknown",
            "POST /v1/admin/approvals/{id}/approve",
            "POST /v1/admin/approvals/{id}/deny",
            "POST /v1/admin/erasures",
            "POST /v1/admin/intents/{id}/reopen",
            "POST /v1/admin/intents/{id}/resolve",
            "POST /v1/admin/reconcile",
            "PUT /v1/admin/flags/{tool}",
        ]
    );
    // The HTTP API's own operations are still there beside them.
    assert!(document["paths"]["/v1/tools/{name}/call"]["post"].is_object());
    // Operation ids, which clients generated from the document name methods by, are unique.
    let mut ids = Vec::new();
    for item in document["paths"].as_object().unwrap().values() {
        for method in METHODS {
            if let Some(operation) = item.get(method) {
                ids.push(operation["operationId"].as_str().unwrap().to_owned());
            }
        }
    }
    let count = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), count, "{ids:?}");

    for (path, item) in document["paths"].as_object().unwrap() {
        if !path.starts_with("/v1/admin") {
            continue;
        }
        let target = concrete(path);
        for method in METHODS {
            let (status, _, answer) = serving.send(method, &target, true).await;
            match item.get(method) {
                Some(operation) => {
                    // Served: neither the admin catch-all's 404 nor a 405.
                    assert_ne!(status, 405, "{method} {target}: {answer}");
                    assert_ne!(
                        answer["type"], "urn:intentgate:problem:not-found",
                        "{method} {target} is documented but not served"
                    );
                    // Every status it answered is one the operation documents.
                    assert!(
                        operation["responses"].get(status.to_string()).is_some(),
                        "{method} {path} answered {status}, which it does not document: {answer}"
                    );
                    // The admin credential, on the API's bearer scheme, and the admin tag.
                    assert_eq!(operation["security"], json!([{"bearer": []}]), "{path}");
                    assert_eq!(operation["tags"], json!(["admin"]), "{path}");
                    for refusal in ["401", "403", "429"] {
                        assert!(
                            operation["responses"].get(refusal).is_some(),
                            "{method} {path}: {refusal}"
                        );
                    }
                }
                None => assert_eq!(status, 405, "{method} {path} is served but not documented"),
            }
        }
    }
    // A path the document has no template for falls to the admin API's catch-all.
    let (status, _, answer) = serving.send("get", "/v1/admin/undocumented", true).await;
    assert_eq!(
        (status, answer["type"].as_str()),
        (404, Some("urn:intentgate:problem:not-found"))
    );
    // The bearer scheme the admin operations name is declared, and the tag says which
    // credential it takes there.
    assert!(document["components"]["securitySchemes"]["bearer"].is_object());
    let tag = document["tags"]
        .as_array()
        .unwrap()
        .iter()
        .find(|tag| tag["name"] == "admin")
        .expect("the admin tag");
    let described = tag["description"].as_str().unwrap();
    assert!(described.contains("admin token") && described.contains("`admin` scope"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_schemas_and_parameters_are_what_the_routes_take_and_answer() {
    let serving = serve(Some(ADMIN_TOKEN)).await;
    let document = serving.document().await;
    let paths = &document["paths"];
    // The console's filters of the intents list are documented query parameters.
    let names: Vec<&str> = paths["/v1/admin/intents"]["get"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|parameter| {
            assert_eq!(parameter["in"], "query");
            parameter["name"].as_str().unwrap()
        })
        .collect();
    for name in [
        "tool", "status", "tenant", "key", "order", "cursor", "limit", "since", "from_ms",
        "until_ms", "q",
    ] {
        assert!(names.contains(&name), "{name} in {names:?}");
    }
    // Each documented query parameter is one the route takes, and one it does not document
    // is refused.
    for name in &names {
        let (status, _, answer) = serving
            .send("get", &format!("/v1/admin/intents?{name}="), true)
            .await;
        assert_eq!(status, 200, "{name}: {answer}");
    }
    let (status, _, _) = serving
        .send("get", "/v1/admin/intents?undocumented=1", true)
        .await;
    assert_eq!(status, 400);

    // The flags answer is valid by its schema; so is a flag as set.
    let schema = &paths["/v1/admin/flags"]["get"]["responses"]["200"]["content"]["application/json"]
        ["schema"];
    let (status, _, flags) = serving.send("get", "/v1/admin/flags", true).await;
    assert_eq!(status, 200);
    let valid = validator(&document, schema);
    assert!(valid.is_valid(&flags), "{flags}");
    assert!(flags["flags"].as_array().unwrap().len() > 1, "{flags}");
    let set = &paths["/v1/admin/flags/{tool}"]["put"];
    let body_schema = &set["requestBody"]["content"]["application/json"]["schema"];
    let sent = json!({"enabled": false, "reason": "incident 12", "actor": "ops"});
    assert!(validator(&document, body_schema).is_valid(&sent));
    // A field the schema does not name is refused by both.
    assert!(!validator(&document, body_schema).is_valid(&json!({"enabled": true, "x": 1})));
    let answer: Value = serving
        .client
        .put(format!("{}/v1/admin/flags/refund_order", serving.base))
        .bearer_auth(ADMIN_TOKEN)
        .json(&sent)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let flag_schema = &set["responses"]["200"]["content"]["application/json"]["schema"];
    assert!(
        validator(&document, flag_schema).is_valid(&answer),
        "{answer}"
    );
    assert_eq!(answer["enabled"], false, "{answer}");

    // Refusals are problems by the documented schema: no credential, and an unknown intent.
    let (status, content_type, problem) = serving.send("get", "/v1/admin/flags", false).await;
    assert_eq!(
        (status, content_type.as_str()),
        (401, "application/problem+json")
    );
    let problem_schema = &paths["/v1/admin/flags"]["get"]["responses"]["401"]["content"]["application/problem+json"]
        ["schema"];
    assert!(
        validator(&document, problem_schema).is_valid(&problem),
        "{problem}"
    );
    let (status, _, problem) = serving.send("get", "/v1/admin/intents/424242", true).await;
    assert_eq!(status, 404);
    let problem_schema = &paths["/v1/admin/intents/{id}"]["get"]["responses"]["404"]["content"]["application/problem+json"]
        ["schema"];
    assert!(
        validator(&document, problem_schema).is_valid(&problem),
        "{problem}"
    );

    // A CSV export is documented as the CSV it is.
    let export = &paths["/v1/admin/reconciliations/{id}/mismatches.csv"]["get"];
    assert!(
        export["responses"]["200"]["content"]["text/csv; charset=utf-8"].is_object(),
        "{export}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_admin_api_off_the_document_holds_no_admin_route() {
    let serving = serve(None).await;
    let document = serving.document().await;
    assert_eq!(admin_operations(&document), Vec::<String>::new());
    assert!(
        document["tags"]
            .as_array()
            .is_none_or(|tags| tags.iter().all(|tag| tag["name"] != "admin")),
        "{}",
        document["tags"]
    );
    // As the routes answer: the admin API is off.
    let (status, _, answer) = serving.send("get", "/v1/admin/flags", true).await;
    assert_eq!(
        (status, answer["type"].as_str()),
        (404, Some("urn:intentgate:problem:admin-off"))
    );
}
