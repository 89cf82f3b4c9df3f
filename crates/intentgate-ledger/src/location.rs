//! Where a ledger lives, read from the text a user gives (`gateway.ledger`, `--ledger`).
//!
//! The ledger crate alone decides which store a location names, so that commands never test
//! URLs themselves and a new store is added here once: [`Location::parse`] reads the text,
//! [`Location::exists`] answers the commands that must not create an empty ledger by
//! mistake, and [`Location`]'s `Display` is what messages may show (a URL without its
//! password). Nothing here needs a store's driver, so it reads every kind of location also
//! in a build without that store, which then refuses to open it by name.

use std::fmt;
use std::path::{Path, PathBuf};

/// The store a [`Location`] names, and the cargo feature that builds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// The SQLite file at this path (created on first open).
    Sqlite(PathBuf),
    /// The PostgreSQL database at this `postgres://` or `postgresql://` URL.
    Postgres(String),
}

impl Location {
    /// Reads a location: a PostgreSQL URL, or else the path of a SQLite file.
    pub fn parse(text: &str) -> Location {
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            Location::Postgres(text.to_owned())
        } else {
            Location::Sqlite(PathBuf::from(text))
        }
    }

    /// False for a SQLite file that does not exist yet: opening it would create an empty
    /// ledger, which a command that reads a gateway's ledger must not do for a mistyped
    /// path. A database counts as existing: opening it creates only the ledger's schema.
    pub fn exists(&self) -> bool {
        match self {
            Location::Sqlite(path) => Path::new(path).exists(),
            Location::Postgres(_) => true,
        }
    }

    /// The cargo feature of this crate that builds the store.
    pub fn feature(&self) -> &'static str {
        match self {
            Location::Sqlite(_) => "sqlite",
            Location::Postgres(_) => "postgres",
        }
    }
}

impl fmt::Display for Location {
    /// The location as it may be shown: a PostgreSQL URL without its password.
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Sqlite(path) => write!(formatter, "{}", path.display()),
            Location::Postgres(url) => formatter.write_str(&redacted(url)),
        }
    }
}

/// A PostgreSQL URL without its password or query (which may carry one), for messages.
pub(crate) fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        // Not a URL (a key=value string may hold a password anywhere): say nothing of it.
        return "the PostgreSQL connection string".to_owned();
    };
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let (authority, path) = match rest.find('/') {
        Some(slash) => rest.split_at(slash),
        None => (rest, ""),
    };
    let authority = match authority.rsplit_once('@') {
        Some((user_info, host)) => {
            let user = user_info.split(':').next().unwrap_or_default();
            if user_info.contains(':') {
                format!("{user}:***@{host}")
            } else {
                format!("{user}@{host}")
            }
        }
        None => authority.to_owned(),
    };
    format!("{scheme}://{authority}{path}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redacted_url_keeps_the_host_and_drops_the_password() {
        assert_eq!(
            redacted("postgres://alice:s3cret@db.internal:6432/ledger?sslmode=disable&password=x"),
            "postgres://alice:***@db.internal:6432/ledger"
        );
        assert_eq!(
            redacted("postgresql://db:5432/test"),
            "postgresql://db:5432/test"
        );
        assert_eq!(
            redacted("postgres://alice@db/test"),
            "postgres://alice@db/test"
        );
        assert_eq!(
            redacted("host=db password=s3cret"),
            "the PostgreSQL connection string"
        );
    }

    #[test]
    fn a_postgres_url_names_the_database_and_anything_else_a_file() {
        for url in ["postgres://db/test", "postgresql://alice@db:5432/test"] {
            assert_eq!(Location::parse(url), Location::Postgres(url.to_owned()));
        }
        for path in [
            "ledger.db",
            "/var/lib/intentgate/ledger.sqlite3",
            "postgres.db",
        ] {
            assert_eq!(Location::parse(path), Location::Sqlite(PathBuf::from(path)));
        }
    }

    #[test]
    fn a_missing_file_does_not_exist_and_a_database_always_does() {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("ledger.db");
        let location = Location::parse(path.to_str().unwrap());
        assert!(!location.exists());
        std::fs::write(&path, b"").unwrap();
        assert!(location.exists());
        assert!(Location::parse("postgres://nowhere.invalid/none").exists());
    }

    #[test]
    fn a_shown_location_keeps_the_path_and_drops_a_password() {
        assert_eq!(
            Location::parse("data/ledger.db").to_string(),
            "data/ledger.db"
        );
        assert_eq!(
            Location::parse("postgres://alice:s3cret@db:5432/ledger").to_string(),
            "postgres://alice:***@db:5432/ledger"
        );
    }
}
