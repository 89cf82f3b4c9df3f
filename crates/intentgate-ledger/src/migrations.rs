//! How a store brings its schema up to date, the same for every store.
//!
//! Each store keeps its schema as embedded, append-only migrations (its own SQL dialect,
//! in its `schema.rs`) and records the highest applied in a `schema_migrations` table. What
//! a store must run, given what it has applied, is decided here once: the migrations it
//! lacks, in order, or a refusal when its schema is newer than this program knows, rather
//! than guess at it. The store runs them in one transaction of its own.

use crate::LedgerError;

/// The version a store has applied: the highest recorded, 0 for a new ledger.
pub const APPLIED: &str = "SELECT coalesce(max(version), 0) FROM schema_migrations";

/// The migrations of `migrations` that a schema at version `applied` lacks, each with the
/// version to record once it has run. `whose_schema` begins the refusal, naming the schema
/// as the store's users know it: "the ledger has schema", "the ledger's schema `x` has".
pub fn pending<'a>(
    migrations: &'a [&'a str],
    applied: i64,
    whose_schema: &str,
) -> Result<impl Iterator<Item = (i64, &'a str)> + use<'a>, LedgerError> {
    let known = migrations.len() as i64;
    if applied > known {
        return Err(LedgerError::NewerSchema(format!(
            "{whose_schema} version {applied}, this intentgate knows up to {known}: upgrade \
             intentgate"
        )));
    }
    let missing = migrations.iter().enumerate().skip(applied as usize);
    Ok(missing.map(|(index, sql)| (index as i64 + 1, *sql)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIGRATIONS: &[&str] = &["CREATE TABLE a (x)", "CREATE TABLE b (y)"];

    #[test]
    fn a_schema_gets_the_migrations_it_lacks_in_order_with_their_versions() {
        let all: Vec<_> = pending(MIGRATIONS, 0, "the ledger has schema")
            .unwrap()
            .collect();
        assert_eq!(all, [(1, MIGRATIONS[0]), (2, MIGRATIONS[1])]);
        let rest: Vec<_> = pending(MIGRATIONS, 1, "the ledger has schema")
            .unwrap()
            .collect();
        assert_eq!(rest, [(2, MIGRATIONS[1])]);
        assert_eq!(
            pending(MIGRATIONS, 2, "the ledger has schema")
                .unwrap()
                .count(),
            0
        );
    }

    #[test]
    fn a_schema_newer_than_this_program_is_refused() {
        let Err(LedgerError::NewerSchema(reason)) = pending(MIGRATIONS, 3, "the ledger has schema")
        else {
            panic!("a newer schema was accepted");
        };
        assert_eq!(
            reason,
            "the ledger has schema version 3, this intentgate knows up to 2: upgrade intentgate"
        );
    }
}
