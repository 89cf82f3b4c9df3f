//! Bearer JWTs, checked against the keys of a JWKS.
//!
//! Signatures: RS256, ES256 (P-256) and EdDSA (Ed25519) only; symmetric keys in a JWKS are
//! ignored, and a token's `alg` must be the one its key is for, so a public key can never
//! be used as an HMAC secret. Claims: `iss` and `aud` must match, `exp` is required and
//! `nbf` honoured, each with a small leeway for clock skew. The tenant is read from a
//! configured claim; scopes from `scope` (space-separated) or `scp` (a list).
//!
//! The JWKS (a file, or a URL of the identity provider) is read when first needed, again
//! after `refresh`, and at once when a token names a key id the set lacks (an identity
//! provider rotating its keys), but no more often than [`REFETCH_INTERVAL_MIN`], so tokens
//! with made-up key ids can't turn the gateway into a load generator. A failed read keeps
//! the keys it had.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use intentgate_core::{Principal, Scope, Scopes, Tenant};
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm};
use jsonwebtoken::{Algorithm, DecodingKey, Validation, errors::ErrorKind};
use serde_json::{Map, Value};
use tokio::sync::{Mutex, RwLock};

use super::{ActFor, AuthFailure, Credential};

/// Least time between two reads of the JWKS.
pub const REFETCH_INTERVAL_MIN: Duration = Duration::from_secs(30);
/// How long a JWKS URL may take to answer; a token waits for it at most this long.
const JWKS_FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest JWKS accepted: a provider's set holds a handful of keys.
const JWKS_BYTES_MAX: usize = 256 * 1024;
/// Longest subject kept from a token, for logs.
const SUBJECT_LENGTH_MAX: usize = 256;

/// Where the keys come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwksSource {
    File(PathBuf),
    Url(String),
}

/// Settings of JWT authentication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwtOptions {
    pub jwks: JwksSource,
    /// The `iss` every token must carry.
    pub issuer: String,
    /// Accepted `aud` values; a token must name one of them.
    pub audience: Vec<String>,
    /// The claim that holds the tenant.
    pub tenant_claim: String,
    /// Signature algorithms accepted (a subset of RS256, ES256, EdDSA).
    pub algorithms: Vec<Algorithm>,
    /// Clock skew allowed on `exp` and `nbf`.
    pub leeway: Duration,
    /// How long a read JWKS is used before it is read again.
    pub refresh: Duration,
    /// This gateway's resource identifier for MCP clients (RFC 9728), e.g.
    /// `https://gateway.example.com/mcp`; with it the gateway serves its protected-resource
    /// metadata and names it in `WWW-Authenticate`.
    pub resource: Option<String>,
    /// The authorization servers that issue tokens for the resource.
    pub authorization_servers: Vec<String>,
}

/// Why JWT authentication can't be set up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwtError {
    #[error("jwt: {0}")]
    Setup(String),
}

/// A key of the set, with the one algorithm it may verify.
struct Key {
    id: Option<String>,
    algorithm: Algorithm,
    key: DecodingKey,
}

struct KeySet {
    keys: Vec<Key>,
    /// When the set was last read (successfully or not); `None` before the first read.
    read_at: Option<Instant>,
}

pub(super) struct JwtVerifier {
    options: JwtOptions,
    keys: RwLock<KeySet>,
    /// Held while the JWKS is read, so concurrent tokens cause one read.
    reading: Mutex<()>,
    client: reqwest::Client,
}

/// True when a bearer credential has the shape of a JWT (three base64url parts).
pub(super) fn looks_like_jwt(token: &str) -> bool {
    let parts: Vec<&str> = token.split('.').collect();
    parts.len() == 3
        && parts.iter().all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

impl JwtVerifier {
    pub(super) fn new(options: JwtOptions) -> Result<JwtVerifier, JwtError> {
        if options.refresh < REFETCH_INTERVAL_MIN {
            return Err(JwtError::Setup(format!(
                "the JWKS refresh interval must be at least {} s",
                REFETCH_INTERVAL_MIN.as_secs()
            )));
        }
        if options.algorithms.is_empty() {
            return Err(JwtError::Setup("no signature algorithm is allowed".into()));
        }
        if let Some(algorithm) = options.algorithms.iter().find(|algorithm| {
            !matches!(
                algorithm,
                Algorithm::RS256 | Algorithm::ES256 | Algorithm::EdDSA
            )
        }) {
            return Err(JwtError::Setup(format!(
                "algorithm {algorithm:?} is not supported; use RS256, ES256 or EdDSA"
            )));
        }
        // reqwest is built without a TLS crypto provider; an error only means one is
        // installed already.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .timeout(JWKS_FETCH_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|error| JwtError::Setup(format!("the JWKS client: {error}")))?;
        Ok(JwtVerifier {
            options,
            keys: RwLock::new(KeySet {
                keys: Vec::new(),
                read_at: None,
            }),
            reading: Mutex::new(()),
            client,
        })
    }

    pub(super) fn resource_metadata(&self) -> Option<Value> {
        let resource = self.options.resource.as_ref()?;
        Some(serde_json::json!({
            "resource": resource,
            "authorization_servers": self.options.authorization_servers,
            "bearer_methods_supported": ["header"],
            "scopes_supported": Scope::ALL.iter().map(|scope| scope.as_str()).collect::<Vec<_>>(),
            "resource_name": "intentgate",
        }))
    }

    /// The metadata URL of RFC 9728 section 3.1: the well-known path between the
    /// resource's host and its path.
    pub(super) fn resource_metadata_url(&self) -> Option<String> {
        let resource = reqwest::Url::parse(self.options.resource.as_ref()?).ok()?;
        let path = resource.path().trim_end_matches('/');
        let mut url = resource.clone();
        url.set_path(&format!("{}{path}", super::RESOURCE_METADATA_PATH));
        url.set_query(None);
        url.set_fragment(None);
        Some(url.to_string())
    }

    pub(super) async fn verify(&self, token: &str) -> Result<Credential, AuthFailure> {
        let rejected = |reason: &str| AuthFailure::Rejected(reason.to_owned());
        let header = jsonwebtoken::decode_header(token)
            .map_err(|_| rejected("the token's header is not a JWT header"))?;
        if !self.options.algorithms.contains(&header.alg) {
            return Err(AuthFailure::Rejected(format!(
                "tokens signed with {:?} are not accepted",
                header.alg
            )));
        }
        let (key, algorithm) = self.key_for(header.kid.as_deref(), header.alg).await?;
        let mut validation = Validation::new(algorithm);
        validation.set_issuer(&[&self.options.issuer]);
        validation.set_audience(&self.options.audience);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.leeway = self.options.leeway.as_secs();
        validation.validate_nbf = true;
        let claims = jsonwebtoken::decode::<Map<String, Value>>(token, &key, &validation)
            .map_err(|error| AuthFailure::Rejected(reason(error.kind())))?
            .claims;
        self.credential(&claims)
    }

    fn credential(&self, claims: &Map<String, Value>) -> Result<Credential, AuthFailure> {
        let claim = &self.options.tenant_claim;
        let tenant = match claims.get(claim) {
            Some(Value::String(tenant)) => Tenant::parse(tenant).map_err(|error| {
                AuthFailure::Rejected(format!("the token's `{claim}` claim: {error}"))
            })?,
            _ => {
                return Err(AuthFailure::Rejected(format!(
                    "the token has no `{claim}` claim naming its tenant"
                )));
            }
        };
        let scopes: Scopes = match (claims.get("scope"), claims.get("scp")) {
            (Some(Value::String(scope)), _) => scope
                .split_ascii_whitespace()
                .filter_map(Scope::parse)
                .collect(),
            (_, Some(Value::Array(scopes))) => scopes
                .iter()
                .filter_map(Value::as_str)
                .filter_map(Scope::parse)
                .collect(),
            _ => Scopes::default(),
        };
        let subject = claims
            .get("sub")
            .and_then(Value::as_str)
            .map(|subject| subject.chars().take(SUBJECT_LENGTH_MAX).collect())
            .unwrap_or_else(|| "jwt".to_owned());
        Ok(Credential {
            principal: Principal {
                tenant,
                scopes,
                subject,
            },
            act_for: ActFor::Own,
        })
    }

    /// The key that verifies a token with key id `id` and algorithm `algorithm`, reading
    /// the JWKS first when it is stale or lacks the key.
    async fn key_for(
        &self,
        id: Option<&str>,
        algorithm: Algorithm,
    ) -> Result<(DecodingKey, Algorithm), AuthFailure> {
        if let Some(found) = self.find(id, algorithm).await {
            return Ok(found);
        }
        self.read_keys().await;
        self.find(id, algorithm).await.ok_or_else(|| {
            AuthFailure::Rejected(match id {
                Some(id) => format!("no key `{id}` for {algorithm:?} in the JWKS"),
                None => format!(
                    "the token names no key id and the JWKS has not exactly one {algorithm:?} key"
                ),
            })
        })
    }

    async fn find(
        &self,
        id: Option<&str>,
        algorithm: Algorithm,
    ) -> Option<(DecodingKey, Algorithm)> {
        let set = self.keys.read().await;
        let fresh = set
            .read_at
            .is_some_and(|read_at| read_at.elapsed() < self.options.refresh);
        if !fresh {
            return None;
        }
        let mut candidates = set
            .keys
            .iter()
            .filter(|key| key.algorithm == algorithm)
            .filter(|key| id.is_none() || key.id.as_deref() == id);
        let first = candidates.next()?;
        if id.is_none() && candidates.next().is_some() {
            return None;
        }
        Some((first.key.clone(), first.algorithm))
    }

    /// Reads the JWKS again unless it was read less than [`REFETCH_INTERVAL_MIN`] ago.
    async fn read_keys(&self) {
        let _reading = self.reading.lock().await;
        // Another token's read may have just finished; and a set is read at most once per
        // REFETCH_INTERVAL_MIN (the refresh interval is never shorter).
        let read_at = self.keys.read().await.read_at;
        if read_at.is_some_and(|read_at| read_at.elapsed() < REFETCH_INTERVAL_MIN) {
            return;
        }
        let read = self.fetch().await;
        let mut set = self.keys.write().await;
        set.read_at = Some(Instant::now());
        match read {
            Ok(keys) => set.keys = keys,
            Err(error) => tracing::warn!(
                %error,
                keys_kept = set.keys.len(),
                "could not read the JWKS; keeping the keys read before"
            ),
        }
    }

    async fn fetch(&self) -> Result<Vec<Key>, String> {
        let bytes = match &self.options.jwks {
            JwksSource::File(path) => std::fs::read(path)
                .map_err(|error| format!("reading {}: {error}", path.display()))?,
            JwksSource::Url(url) => {
                let response = self
                    .client
                    .get(url)
                    .send()
                    .await
                    .map_err(|error| format!("fetching the JWKS URL: {error}"))?;
                if !response.status().is_success() {
                    return Err(format!("the JWKS URL answered {}", response.status()));
                }
                let bytes = response
                    .bytes()
                    .await
                    .map_err(|error| format!("reading the JWKS URL's answer: {error}"))?;
                bytes.to_vec()
            }
        };
        if bytes.len() > JWKS_BYTES_MAX {
            return Err(format!("the JWKS is over {JWKS_BYTES_MAX} bytes"));
        }
        parse_jwks(&bytes)
    }
}

/// The usable keys of a JWKS document; keys of other kinds (symmetric, other curves) are
/// skipped, since a set may hold keys for other uses.
fn parse_jwks(bytes: &[u8]) -> Result<Vec<Key>, String> {
    let document: Value =
        serde_json::from_slice(bytes).map_err(|error| format!("the JWKS is not JSON: {error}"))?;
    let Some(Value::Array(entries)) = document.get("keys") else {
        return Err("the JWKS has no `keys` list".to_owned());
    };
    let keys: Vec<Key> = entries
        .iter()
        .filter_map(|entry| serde_json::from_value::<Jwk>(entry.clone()).ok())
        .filter_map(|jwk| usable_key(&jwk))
        .collect();
    if keys.is_empty() {
        return Err("the JWKS holds no RS256, ES256 (P-256) or EdDSA (Ed25519) key".to_owned());
    }
    Ok(keys)
}

fn usable_key(jwk: &Jwk) -> Option<Key> {
    let algorithm = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => Algorithm::RS256,
        AlgorithmParameters::EllipticCurve(params) if params.curve == EllipticCurve::P256 => {
            Algorithm::ES256
        }
        AlgorithmParameters::OctetKeyPair(params) if params.curve == EllipticCurve::Ed25519 => {
            Algorithm::EdDSA
        }
        _ => return None,
    };
    // A key that declares another algorithm is not ours to use for this one.
    let declared = jwk.common.key_algorithm;
    let agrees = match declared {
        None => true,
        Some(KeyAlgorithm::RS256) => algorithm == Algorithm::RS256,
        Some(KeyAlgorithm::ES256) => algorithm == Algorithm::ES256,
        Some(KeyAlgorithm::EdDSA) => algorithm == Algorithm::EdDSA,
        Some(_) => false,
    };
    if !agrees {
        return None;
    }
    Some(Key {
        id: jwk.common.key_id.clone(),
        algorithm,
        key: DecodingKey::from_jwk(jwk).ok()?,
    })
}

/// What to tell a caller whose token failed a check.
fn reason(kind: &ErrorKind) -> String {
    match kind {
        ErrorKind::ExpiredSignature => "the token has expired".into(),
        ErrorKind::ImmatureSignature => "the token is not valid yet (nbf)".into(),
        ErrorKind::InvalidIssuer => "the token's issuer is not the configured one".into(),
        ErrorKind::InvalidAudience => "the token is not for this gateway (aud)".into(),
        ErrorKind::InvalidSignature => "the token's signature does not verify".into(),
        ErrorKind::MissingRequiredClaim(claim) => format!("the token has no `{claim}` claim"),
        ErrorKind::InvalidAlgorithm => "the token's algorithm does not match its key".into(),
        _ => "the token is malformed".into(),
    }
}
