//! Where a ledger lives, read from the text a user gives (`gateway.ledger`, `--ledger`).
//!
//! The ledger crate alone decides which store a location names, so that commands never test
//! URLs themselves and a new store is added here once: [`Location::parse`] reads the text,
//! [`Location::exists`] answers the commands that must not create an empty ledger by
//! mistake, and [`Location`]'s `Display` is what messages may show (a URL without its
//! password). A relative file is read from the config's folder when the config names it
//! ([`Location::relative_to`]) and from the working directory when a command line does
//! ([`Location::absolute`]). Nothing here needs a store's driver, so it reads every kind of location also
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

    /// This location read from a config file in `folder`: a relative SQLite path is taken
    /// from the config's folder, so that where a gateway was started from can't give it
    /// another (empty) ledger. An absolute path and a PostgreSQL URL are as they were.
    pub fn relative_to(self, folder: &Path) -> Location {
        match self {
            Location::Sqlite(path) if path.is_relative() => Location::Sqlite(folder.join(path)),
            other => other,
        }
    }

    /// This location as given on a command line: a relative SQLite path is taken from the
    /// working directory, as a shell user expects, and made absolute so that what is shown
    /// is the file that is opened. A PostgreSQL URL is as it was.
    pub fn absolute(self) -> Location {
        match self {
            Location::Sqlite(path) if path.is_relative() => {
                // Fails only when the working directory is gone; the path then stays as
                // given and opening it reports the error.
                Location::Sqlite(std::path::absolute(&path).unwrap_or(path))
            }
            other => other,
        }
    }

    /// The text [`Location::parse`] reads back as this location (with a password, if the
    /// URL has one: show it through `Display`); `None` for a path that is not UTF-8.
    pub fn text(&self) -> Option<&str> {
        match self {
            Location::Sqlite(path) => path.to_str(),
            Location::Postgres(url) => Some(url),
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
    fn a_relative_file_is_taken_from_the_given_folder_and_a_url_is_untouched() {
        let folder = Path::new("/etc/intentgate");
        assert_eq!(
            Location::parse("intentgate.db").relative_to(folder),
            Location::Sqlite(PathBuf::from("/etc/intentgate/intentgate.db"))
        );
        assert_eq!(
            Location::parse("/var/lib/ledger.db").relative_to(folder),
            Location::Sqlite(PathBuf::from("/var/lib/ledger.db"))
        );
        let url = "postgres://alice:s3cret@db:5432/ledger";
        assert_eq!(
            Location::parse(url).relative_to(folder),
            Location::Postgres(url.to_owned())
        );
        assert_eq!(Location::parse(url).absolute().text(), Some(url));
    }

    #[test]
    fn a_relative_file_on_the_command_line_is_taken_from_the_working_directory() {
        let absolute = Location::parse("data/ledger.db").absolute();
        let expected = std::env::current_dir().unwrap().join("data/ledger.db");
        assert_eq!(absolute, Location::Sqlite(expected.clone()));
        assert_eq!(absolute.text(), expected.to_str());
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
