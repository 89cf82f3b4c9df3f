//! API keys: `Authorization: Bearer <key>`, found by the SHA-256 digest of the key.
//!
//! The config holds only digests, so a leaked config file or a printed `Debug` gives no key
//! away. A presented key is hashed once and looked up; the lookup's timing depends only on
//! the digest, which tells an attacker nothing about any key.

use std::collections::HashMap;

use intentgate_core::{Principal, Scopes, Tenant};
use sha2::{Digest, Sha256};

use super::{ActFor, Credential};

/// One configured key.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey {
    /// Who holds the key (`support-agent`); the principal's subject in logs.
    pub name: String,
    /// SHA-256 of the key.
    pub digest: [u8; 32],
    pub tenant: Tenant,
    pub scopes: Scopes,
    pub act_for: ActFor,
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiKey")
            .field("name", &self.name)
            .field("tenant", &self.tenant)
            .field("scopes", &self.scopes)
            .field("act_for", &self.act_for)
            .finish_non_exhaustive()
    }
}

/// Why a set of keys can't be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiKeyError {
    #[error("API keys `{0}` and `{1}` have the same digest: one key would have two identities")]
    DuplicateDigest(String, String),
    #[error("API key `{0}` has no scope; give it at least `call`")]
    NoScope(String),
}

impl ApiKey {
    /// The SHA-256 digest of a key, as the config stores it (64 lowercase hex digits).
    pub fn digest_hex(key: &str) -> String {
        intentgate_core::hex::lower_hex(&Sha256::digest(key.as_bytes()))
    }

    /// Parses a digest written as 64 hex digits.
    pub fn parse_digest(hex: &str) -> Option<[u8; 32]> {
        let hex = hex.trim();
        if hex.len() != 64 || !hex.is_ascii() {
            return None;
        }
        let mut digest = [0u8; 32];
        for (index, byte) in digest.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[index * 2..index * 2 + 2], 16).ok()?;
        }
        Some(digest)
    }
}

/// The configured keys by digest.
pub(super) struct ApiKeys(HashMap<[u8; 32], ApiKey>);

impl ApiKeys {
    pub(super) fn new(keys: Vec<ApiKey>) -> Result<ApiKeys, ApiKeyError> {
        let mut by_digest: HashMap<[u8; 32], ApiKey> = HashMap::with_capacity(keys.len());
        for key in keys {
            if key.scopes.is_empty() {
                return Err(ApiKeyError::NoScope(key.name));
            }
            if let Some(other) = by_digest.get(&key.digest) {
                return Err(ApiKeyError::DuplicateDigest(other.name.clone(), key.name));
            }
            by_digest.insert(key.digest, key);
        }
        Ok(ApiKeys(by_digest))
    }

    pub(super) fn find(&self, presented: &str) -> Option<Credential> {
        if self.0.is_empty() {
            return None;
        }
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        self.0.get(&digest).map(|key| Credential {
            principal: Principal {
                tenant: key.tenant.clone(),
                scopes: key.scopes,
                subject: key.name.clone(),
            },
            act_for: key.act_for.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_round_trip_and_refuse_malformed_text() {
        let hex = ApiKey::digest_hex("igk_secret");
        assert_eq!(hex.len(), 64);
        let digest = ApiKey::parse_digest(&hex).unwrap();
        assert_eq!(digest, <[u8; 32]>::from(Sha256::digest(b"igk_secret")));
        for bad in ["", "abc", &"g".repeat(64), &"é".repeat(32)] {
            assert_eq!(ApiKey::parse_digest(bad), None, "{bad}");
        }
    }
}
