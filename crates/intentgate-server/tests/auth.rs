//! JWT authentication through a real server on a loopback port: tokens signed with EdDSA and
//! ES256 keys made for the test, checked against a JWKS served over HTTP, as an identity
//! provider would serve it.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use common::{Server, refund_tool};
use intentgate_mock::FaultPlan;
use intentgate_server::ServerOptions;
use intentgate_server::auth::{AuthOptions, Authenticator, JwksSource, JwtOptions};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, Ed25519KeyPair, KeyPair};
use serde_json::{Value, json};

const ISSUER: &str = "https://id.example.com/";
const AUDIENCE: &str = "https://gateway.example.com/mcp";

/// A signing key of the test's identity provider, and its public JWK.
struct SigningKey {
    algorithm: Algorithm,
    id: &'static str,
    encoding: EncodingKey,
    jwk: Value,
}

fn ed25519(id: &'static str) -> SigningKey {
    let rng = ring::rand::SystemRandom::new();
    let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng).unwrap();
    let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
    SigningKey {
        algorithm: Algorithm::EdDSA,
        id,
        encoding: EncodingKey::from_ed_der(pkcs8.as_ref()),
        jwk: json!({"kty": "OKP", "crv": "Ed25519", "kid": id, "use": "sig",
                    "x": URL_SAFE_NO_PAD.encode(pair.public_key().as_ref())}),
    }
}

fn p256(id: &'static str) -> SigningKey {
    let rng = ring::rand::SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
    let pair =
        EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng).unwrap();
    // An uncompressed point: 0x04, then x and y.
    let point = pair.public_key().as_ref();
    SigningKey {
        algorithm: Algorithm::ES256,
        id,
        encoding: EncodingKey::from_ec_der(pkcs8.as_ref()),
        jwk: json!({"kty": "EC", "crv": "P-256", "kid": id, "alg": "ES256",
                    "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
                    "y": URL_SAFE_NO_PAD.encode(&point[33..65])}),
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Good claims for tenant `acme` with `scope`, changed by `edit`.
fn claims(scope: &str, edit: impl FnOnce(&mut Value)) -> Value {
    let mut claims = json!({
        "iss": ISSUER, "aud": AUDIENCE, "sub": "agent-7", "tenant": "acme",
        "scope": scope, "iat": now(), "exp": now() + 300,
    });
    edit(&mut claims);
    claims
}

fn token(key: &SigningKey, claims: &Value) -> String {
    let mut header = Header::new(key.algorithm);
    header.kid = Some(key.id.to_owned());
    jsonwebtoken::encode(&header, claims, &key.encoding).unwrap()
}

/// An identity provider's JWKS endpoint on a loopback port, counting its requests.
struct Jwks {
    url: String,
    fetches: Arc<AtomicUsize>,
}

async fn serve_jwks(keys: Vec<Value>) -> Jwks {
    let fetches = Arc::new(AtomicUsize::new(0));
    let counted = fetches.clone();
    let document = json!({ "keys": keys });
    let app = axum::Router::new().route(
        "/jwks.json",
        axum::routing::get(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            let document = document.clone();
            async move { axum::Json(document) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/jwks.json", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    Jwks { url, fetches }
}

async fn gateway(jwks: &Jwks) -> Server {
    let options = JwtOptions {
        jwks: JwksSource::Url(jwks.url.clone()),
        issuer: ISSUER.to_owned(),
        audience: vec![AUDIENCE.to_owned()],
        tenant_claim: "tenant".to_owned(),
        algorithms: vec![Algorithm::RS256, Algorithm::ES256, Algorithm::EdDSA],
        leeway: Duration::from_secs(5),
        refresh: Duration::from_secs(300),
        resource: Some(AUDIENCE.to_owned()),
        authorization_servers: vec![ISSUER.to_owned()],
    };
    let authenticator = Authenticator::new(AuthOptions::Methods {
        api_keys: Vec::new(),
        jwt: Some(options),
        trusted_proxy: None,
    })
    .unwrap();
    common::start(
        vec![refund_tool()],
        FaultPlan::none(),
        ServerOptions {
            authenticator: Arc::new(authenticator),
            ..ServerOptions::default()
        },
    )
    .await
}

impl Server {
    async fn refund_with(&self, token: Option<&str>, order: &str) -> (u16, Value, Option<String>) {
        let mut request = self
            .client
            .post(format!("{}/v1/tools/refund_order/call", self.base))
            .json(&json!({"arguments": {"order_id": order, "amount": 5}}));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let challenge = response
            .headers()
            .get("www-authenticate")
            .map(|value| value.to_str().unwrap().to_owned());
        (
            status,
            response.json().await.unwrap_or(Value::Null),
            challenge,
        )
    }
}

#[tokio::test]
async fn tokens_signed_by_the_jwks_keys_call_as_their_tenant() {
    let ed = ed25519("ed-1");
    let ec = p256("ec-1");
    let jwks = serve_jwks(vec![ed.jwk.clone(), ec.jwk.clone()]).await;
    let server = gateway(&jwks).await;
    for (key, order) in [(&ed, "jwt-ed"), (&ec, "jwt-ec")] {
        let token = token(key, &claims("call intents:read", |_| {}));
        let (status, body, _) = server.refund_with(Some(&token), order).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["status"], "done");
        let intent: Value = server
            .client
            .get(format!(
                "{}/v1/intents/refund_order/refund:{order}:5.00",
                server.base
            ))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(intent["tenant"], "acme", "the tenant is the token's claim");
    }
    assert_eq!(jwks.fetches.load(Ordering::SeqCst), 1, "the JWKS is cached");
    assert_eq!(server.provider.effects().len(), 2);
}

#[tokio::test]
async fn tokens_that_fail_a_check_get_401_and_execute_nothing() {
    let ed = ed25519("ed-1");
    let stranger = ed25519("ed-1"); // same key id, a key the JWKS does not hold
    let jwks = serve_jwks(vec![ed.jwk.clone()]).await;
    let server = gateway(&jwks).await;
    let cases: Vec<(&str, String)> = vec![
        (
            "expired",
            token(&ed, &claims("call", |c| c["exp"] = json!(now() - 60))),
        ),
        (
            "not yet valid",
            token(&ed, &claims("call", |c| c["nbf"] = json!(now() + 600))),
        ),
        (
            "other audience",
            token(
                &ed,
                &claims("call", |c| c["aud"] = json!("https://other.example")),
            ),
        ),
        (
            "other issuer",
            token(
                &ed,
                &claims("call", |c| c["iss"] = json!("https://evil.example/")),
            ),
        ),
        (
            "no exp",
            token(
                &ed,
                &claims("call", |c| {
                    c.as_object_mut().unwrap().remove("exp");
                }),
            ),
        ),
        (
            "no tenant",
            token(
                &ed,
                &claims("call", |c| {
                    c.as_object_mut().unwrap().remove("tenant");
                }),
            ),
        ),
        (
            "bad tenant",
            token(&ed, &claims("call", |c| c["tenant"] = json!("a b"))),
        ),
        ("wrong key", token(&stranger, &claims("call", |_| {}))),
        ("symmetric", {
            let mut header = Header::new(Algorithm::HS256);
            header.kid = Some("ed-1".into());
            // HS256 keyed with the public key: the classic algorithm confusion.
            let public = ed.jwk["x"].as_str().unwrap().as_bytes().to_vec();
            jsonwebtoken::encode(
                &header,
                &claims("call", |_| {}),
                &EncodingKey::from_secret(&public),
            )
            .unwrap()
        }),
        ("not a token", "a.b.c".to_owned()),
    ];
    for (case, token) in &cases {
        let (status, body, challenge) = server.refund_with(Some(token), "jwt-bad").await;
        assert_eq!(status, 401, "{case}: {body}");
        let challenge = challenge.unwrap();
        assert!(
            challenge.contains("error=\"invalid_token\""),
            "{case}: {challenge}"
        );
        assert!(
            challenge.contains("resource_metadata=\""),
            "{case}: {challenge}"
        );
    }
    assert!(server.provider.effects().is_empty());
}

#[tokio::test]
async fn a_token_without_the_call_scope_is_refused_403() {
    let ed = ed25519("ed-1");
    let jwks = serve_jwks(vec![ed.jwk.clone()]).await;
    let server = gateway(&jwks).await;
    let token = token(&ed, &claims("intents:read profile", |_| {}));
    let (status, body, _) = server.refund_with(Some(&token), "jwt-scope").await;
    assert_eq!(status, 403, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("`call`"));
    assert!(server.provider.effects().is_empty());
}

/// Tokens naming key ids the JWKS lacks (an attacker's, or a provider's rotated ones) read
/// the JWKS at most once per 30 s, so they can't turn the gateway into a load generator.
#[tokio::test]
async fn unknown_key_ids_read_the_jwks_at_most_once_per_interval() {
    let ed = ed25519("ed-1");
    let jwks = serve_jwks(vec![ed.jwk.clone()]).await;
    let server = gateway(&jwks).await;
    let good = token(&ed, &claims("call", |_| {}));
    assert_eq!(server.refund_with(Some(&good), "jwt-kid").await.0, 200);
    for id in ["k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8"] {
        let other = ed25519(id);
        let (status, _, _) = server
            .refund_with(Some(&token(&other, &claims("call", |_| {}))), "jwt-kid")
            .await;
        assert_eq!(status, 401);
    }
    assert_eq!(jwks.fetches.load(Ordering::SeqCst), 1);
}

/// The MCP authorization spec's resource-server duties: a 401 on `/mcp` points at the
/// protected-resource metadata (RFC 9728), which names the resource and its issuer.
#[tokio::test]
async fn mcp_clients_are_told_where_to_get_a_token() {
    let ed = ed25519("ed-1");
    let jwks = serve_jwks(vec![ed.jwk.clone()]).await;
    let server = gateway(&jwks).await;
    let response = server
        .client
        .post(format!("{}/mcp", server.base))
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    let challenge = response.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        challenge,
        "Bearer resource_metadata=\"https://gateway.example.com/.well-known/oauth-protected-resource/mcp\""
    );
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let metadata: Value = server
            .client
            .get(format!("{}{path}", server.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(metadata["resource"], AUDIENCE, "{path}");
        assert_eq!(metadata["authorization_servers"], json!([ISSUER]));
        assert_eq!(metadata["bearer_methods_supported"], json!(["header"]));
    }
}
