//! `Debug` forms of values that can hold secrets: a header value prints as `<redacted>`, a
//! URL as its origin. The loaded config's types print their credentials through these.

use std::collections::BTreeMap;
use std::fmt;

/// Prints `<redacted>`.
pub struct Redacted;

impl fmt::Debug for Redacted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Header names with every value redacted: headers are where credentials go.
pub struct RedactedHeaders<'a>(pub &'a BTreeMap<String, String>);

impl fmt::Debug for RedactedHeaders<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.keys().map(|name| (name, Redacted)))
            .finish()
    }
}

/// A URL as its origin (`https://api.example.com:443`): user info, path and query can hold
/// credentials (`https://user:pw@...`, `/services/T0/B0/token`, `?key=...`). Text that is
/// not a URL (a SQLite path) prints as written.
pub struct RedactedUrl<'a>(pub &'a str);

impl fmt::Debug for RedactedUrl<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.0.contains("://") {
            return write!(f, "{:?}", self.0);
        }
        match url::Url::parse(self.0) {
            Ok(url) if url.has_host() => {
                let mut origin = format!("{}://{}", url.scheme(), url.host_str().unwrap_or(""));
                if let Some(port) = url.port() {
                    origin.push_str(&format!(":{port}"));
                }
                let bare = url.username().is_empty()
                    && url.password().is_none()
                    && matches!(url.path(), "" | "/")
                    && url.query().is_none()
                    && url.fragment().is_none();
                if bare {
                    write!(f, "{origin:?}")
                } else {
                    write!(f, "\"{origin}/<redacted>\"")
                }
            }
            _ => f.write_str("<redacted>"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_print_as_their_origin() {
        let debug = |url: &str| format!("{:?}", RedactedUrl(url));
        assert_eq!(debug("http://127.0.0.1:8090"), "\"http://127.0.0.1:8090\"");
        assert_eq!(
            debug("https://user:pw@api.example.com/v1?key=k"),
            "\"https://api.example.com/<redacted>\""
        );
        assert_eq!(
            debug("https://hooks.slack.com/services/T0/B0/token"),
            "\"https://hooks.slack.com/<redacted>\""
        );
        assert_eq!(debug("intentgate.db"), "\"intentgate.db\"");
        assert_eq!(debug("postgres://u:p@db/x"), "\"postgres://db/<redacted>\"");
    }
}
