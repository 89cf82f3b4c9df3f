//! The statements both stores run for the reads that take more than a key, written once.
//!
//! [`intents_query`] builds the one statement of a filtered page of intents, so every store
//! pages alike and uses the same indexes, and [`approvals_query`] that of a page of held
//! intents; [`erase_queries`] builds the statements of one erasure, so every store selects
//! alike. A store differs only in how it numbers its placeholders, its [`Dialect`]; values
//! are always bound, never written into the SQL.
//!
//! **Invariant:** no I/O, like `plan`: these functions only write text.

use crate::plan;
use crate::record::IntentId;
use crate::{
    APPROVALS_PAGE_MAX, ApprovalFilter, ApprovalState, ERASE_BATCH_MAX, ERASE_SHOWN_MAX, Erase,
    INTENTS_PAGE_MAX, IntentFilter, LedgerError, Order,
};

/// How a store writes the placeholders of a [`Query`]: one variant per store, built with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// `?1`, `?2`, ...
    #[cfg(feature = "sqlite")]
    Sqlite,
    /// `$1`, `$2`, ...
    #[cfg(feature = "postgres")]
    Postgres,
}

/// A value bound to one placeholder of a [`Query`].
#[derive(Debug, Clone, PartialEq)]
pub enum Parameter {
    Integer(i64),
    Text(String),
}

/// A statement built here for every store: its SQL with numbered placeholders, and the
/// values they stand for, the first for placeholder 1. Values are always bound, never
/// written into the SQL.
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    pub sql: String,
    pub parameters: Vec<Parameter>,
}

/// Collects the parameters of a query as its SQL is written.
struct Parameters {
    dialect: Dialect,
    values: Vec<Parameter>,
}

impl Parameters {
    /// Binds `value` to the next placeholder and returns that placeholder, which the SQL
    /// may name more than once.
    fn bind(&mut self, value: Parameter) -> String {
        self.values.push(value);
        let number = self.values.len();
        match self.dialect {
            #[cfg(feature = "sqlite")]
            Dialect::Sqlite => format!("?{number}"),
            #[cfg(feature = "postgres")]
            Dialect::Postgres => format!("${number}"),
        }
    }
}

/// The page of [`crate::Ledger::intents`] as one statement that selects `columns` of the
/// `intents` table, or `None` when nothing can match (a `limit` of 0, an empty window).
///
/// Why it reads as it does (checked with `EXPLAIN QUERY PLAN` on SQLite and `EXPLAIN` on
/// PostgreSQL, against the indexes of migration 2):
///
/// - A page is in id order, so it walks an index whose order is the id's: with a `tool`,
///   `intents_by_tool` (tool, id, first_seen_ms) from the cursor on, and stops after
///   `limit` rows (PostgreSQL walks the primary key instead when its statistics say the
///   tool is much of the table: the same order, no sort either); with a `tool` and a `key`,
///   the key's index (one row per tenant: PostgreSQL's `intents_by_tool_key`, in id order;
///   SQLite's unique `intents_by_key`, then sorted). The window's conditions are written
///   `+first_seen_ms`, which no index can serve: else a planner may pick
///   `intents_by_tool_first_seen`, whose order is the time's, and sort the whole rest of
///   the window for every page.
/// - Walking `intents_by_tool` from the start would read every older intent of the tool
///   before the window's first. So the first page (no cursor) of a closed window starts at
///   the window's least id and ends at its greatest, both read from
///   `intents_by_tool_first_seen` (tool, first_seen_ms, id): one pass over the window's
///   index entries, without the rows. `id + 0` keeps both planners from answering
///   `min(id)` by walking `intents_by_tool` instead (the min/max optimisation), which would
///   again read every intent of the tool before the window. Later pages start at their
///   cursor, which is past the window's least id already; only the last one reads on past
///   the window's greatest id, once.
pub fn intents_query(
    filter: &IntentFilter,
    order: Order,
    cursor: Option<IntentId>,
    limit: u32,
    columns: &str,
    dialect: Dialect,
) -> Option<Query> {
    let limit = limit.min(INTENTS_PAGE_MAX);
    if limit == 0 {
        return None;
    }
    if let (Some(from), Some(until)) = (filter.first_seen_from_ms, filter.first_seen_until_ms)
        && from >= until
    {
        return None;
    }
    let mut parameters = Parameters {
        dialect,
        values: Vec::new(),
    };
    let mut conditions = Vec::new();
    if let Some(tenant) = &filter.tenant {
        let tenant = parameters.bind(Parameter::Text(tenant.clone()));
        conditions.push(format!("tenant = {tenant}"));
    }
    let tool = filter
        .tool
        .as_ref()
        .map(|tool| parameters.bind(Parameter::Text(tool.clone())));
    if let Some(tool) = &tool {
        conditions.push(format!("tool = {tool}"));
    }
    if let Some(key) = &filter.key {
        let key = parameters.bind(Parameter::Text(key.clone()));
        conditions.push(format!("intent_key = {key}"));
    }
    if let Some(status) = filter.status {
        let status = parameters.bind(Parameter::Text(status.as_str().to_owned()));
        conditions.push(format!("status = {status}"));
    }
    let from = filter
        .first_seen_from_ms
        .map(|from| parameters.bind(Parameter::Integer(from)));
    if let Some(from) = &from {
        conditions.push(format!("+first_seen_ms >= {from}"));
    }
    let until = filter
        .first_seen_until_ms
        .map(|until| parameters.bind(Parameter::Integer(until)));
    if let Some(until) = &until {
        conditions.push(format!("+first_seen_ms < {until}"));
    }
    match (cursor, &tool, &from, &until) {
        (Some(cursor), ..) => {
            let cursor = parameters.bind(Parameter::Integer(cursor));
            conditions.push(match order {
                Order::Oldest => format!("id > {cursor}"),
                Order::Newest => format!("id < {cursor}"),
            });
        }
        // With a key the page is a few rows from the key's index already.
        (None, Some(tool), Some(from), Some(until)) if filter.key.is_none() => {
            let window = format!(
                "FROM intents WHERE tool = {tool} AND first_seen_ms >= {from} AND first_seen_ms < {until}"
            );
            // An empty window makes both NULL, and the page empty.
            conditions.push(format!("id >= (SELECT min(id + 0) {window})"));
            conditions.push(format!("id <= (SELECT max(id + 0) {window})"));
        }
        (None, ..) => {}
    }
    let limit = parameters.bind(Parameter::Integer(i64::from(limit)));
    let mut sql = format!("SELECT {columns} FROM intents");
    if !conditions.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&conditions.join(" AND "));
    }
    // A key's few rows (one per tenant at most) are sorted: ordered by `id + 0`, which no
    // index serves, SQLite reads them from the key's unique index rather than walking every
    // intent of the tool in id order to spare the sort.
    let by_id = match (&filter.key, dialect) {
        #[cfg(feature = "sqlite")]
        (Some(_), Dialect::Sqlite) => "id + 0",
        _ => "id",
    };
    sql.push_str(&match order {
        Order::Oldest => format!(" ORDER BY {by_id}"),
        Order::Newest => format!(" ORDER BY {by_id} DESC"),
    });
    sql.push_str(&format!(" LIMIT {limit}"));
    Some(Query {
        sql,
        parameters: parameters.values,
    })
}

/// `columns` (a list like [`intents_query`] takes) qualified with the table alias `table`.
fn qualified(columns: &str, table: &str) -> String {
    columns
        .split(',')
        .map(|column| format!("{table}.{}", column.trim()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The page of [`crate::Ledger::approvals`] as one statement: `intent_columns` of each
/// held intent (table `intents`), then `approval_columns` of its approval (table
/// `approvals`), newest intent first; `None` for a `limit` of 0.
///
/// Why it reads as it does (checked with `EXPLAIN QUERY PLAN` on SQLite, against the
/// indexes of migration 7): a page walks, newest intent first from `before`, the approvals
/// of the tenant (`approvals_by_tenant`, or with an open or approved state
/// `approvals_by_tenant_decision`), else of the tool (`approvals_by_tool`,
/// `approvals_by_tool_decision`), else of the state (`approvals_by_decision`), else all of
/// them (the primary key), and stops after `limit` rows: nothing is sorted. An open or
/// approved state is one decision (`IS NULL`, `= 'approved'`); the closed ones are written
/// so that no index on the decision serves them (`coalesce`), else a planner may walk the
/// decisions' ranges and sort them.
pub fn approvals_query(
    filter: &ApprovalFilter,
    before: Option<IntentId>,
    limit: u32,
    intent_columns: &str,
    approval_columns: &str,
    dialect: Dialect,
) -> Option<Query> {
    let limit = limit.min(APPROVALS_PAGE_MAX);
    if limit == 0 {
        return None;
    }
    let mut parameters = Parameters {
        dialect,
        values: Vec::new(),
    };
    let mut conditions = Vec::new();
    if let Some(tenant) = &filter.tenant {
        let tenant = parameters.bind(Parameter::Text(tenant.clone()));
        conditions.push(format!("a.tenant = {tenant}"));
    }
    if let Some(tool) = &filter.tool {
        let tool = parameters.bind(Parameter::Text(tool.clone()));
        conditions.push(format!("a.tool = {tool}"));
    }
    const APPROVED_PENDING: &str = "a.decision = 'approved' AND i.status = 'pending'";
    match filter.state {
        Some(ApprovalState::Open) => conditions.push("a.decision IS NULL".to_owned()),
        Some(ApprovalState::Approved) => conditions.push(APPROVED_PENDING.to_owned()),
        Some(ApprovalState::Closed) => conditions.push(format!(
            "coalesce(a.decision, '') <> '' AND NOT ({APPROVED_PENDING})"
        )),
        None => {}
    }
    if let Some(before) = before {
        let before = parameters.bind(Parameter::Integer(before));
        conditions.push(format!("a.intent < {before}"));
    }
    let limit = parameters.bind(Parameter::Integer(i64::from(limit)));
    let mut sql = format!(
        "SELECT {}, {} FROM approvals AS a JOIN intents AS i ON i.id = a.intent",
        qualified(intent_columns, "i"),
        qualified(approval_columns, "a")
    );
    if !conditions.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&conditions.join(" AND "));
    }
    sql.push_str(&format!(" ORDER BY a.intent DESC LIMIT {limit}"));
    Some(Query {
        sql,
        parameters: parameters.values,
    })
}

/// The statements of one [`crate::Ledger::erase`], built here for both stores so that they
/// select alike. Every one narrows by `tenant`, then `tool` and `intent_key` when given: the
/// prefix of the intents' unique (tenant, tool, intent_key) index.
#[derive(Debug, Clone, PartialEq)]
pub struct EraseQueries {
    /// The ids of selected intents a call holds right now (a live lease), the first
    /// [`ERASE_SHOWN_MAX`].
    pub busy: Query,
    /// The ids of selected intents that are not settled, the first [`ERASE_SHOWN_MAX`].
    pub unsettled: Query,
    /// The ids of the intents to delete now, in id order: one more than
    /// [`ERASE_BATCH_MAX`], which says that there are more.
    pub batch: Query,
    /// Deletes the reconciliation mismatches that name the selected intents.
    pub mismatches: Query,
    /// Deletes the tenant's (or its tool's) events of refused calls, which name no intent;
    /// `None` when one key is erased, since they don't belong to one intent.
    pub disabled_calls: Option<Query>,
    /// Deletes the selected caller keys whose intent is gone (bound by a call that never
    /// recorded its intent): run by the batch that erases the last selected intent, the keys
    /// of each erased intent going with it.
    pub unbound_caller_keys: Query,
}

/// The statuses of intents whose effect may have happened although nothing says so; also the
/// condition of SQLite's partial index `intents_by_status`, which a query must hold as it is
/// written here to be served by it.
pub(crate) const UNSETTLED: &str = "status IN ('pending', 'in_flight', 'unknown')";

/// Which of an erasure's intents a statement selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Selected {
    All,
    Unsettled,
    /// Unsettled, with a live lease.
    Held,
}

/// Checks an erasure ([`plan::check_erase`]) and builds its statements.
pub fn erase_queries(erase: &Erase, dialect: Dialect) -> Result<EraseQueries, LedgerError> {
    plan::check_erase(erase)?;
    // The selected intents' ids, in id order: all of them, the unsettled ones, or those a
    // call holds now.
    let select = |which: Selected, limit: u32| {
        let mut parameters = Parameters {
            dialect,
            values: Vec::new(),
        };
        let mut conditions = erase_conditions(erase, &mut parameters, true);
        if which != Selected::All {
            conditions.push(UNSETTLED.to_owned());
        }
        if which == Selected::Held {
            let now = parameters.bind(Parameter::Integer(erase.now_ms));
            conditions.push(format!(
                "lease_owner IS NOT NULL AND lease_expires_ms > {now}"
            ));
        }
        let limit = parameters.bind(Parameter::Integer(i64::from(limit)));
        Query {
            sql: format!(
                "SELECT id FROM intents WHERE {} ORDER BY id LIMIT {limit}",
                conditions.join(" AND ")
            ),
            parameters: parameters.values,
        }
    };
    let busy = select(Selected::Held, ERASE_SHOWN_MAX);
    let unsettled = select(Selected::Unsettled, ERASE_SHOWN_MAX);
    let batch = select(Selected::All, ERASE_BATCH_MAX + 1);
    let mut parameters = Parameters {
        dialect,
        values: Vec::new(),
    };
    let conditions = erase_conditions(erase, &mut parameters, true);
    let mismatches = Query {
        sql: format!(
            "DELETE FROM reconciliation_mismatches WHERE {}",
            conditions.join(" AND ")
        ),
        parameters: parameters.values,
    };
    let disabled_calls = erase.key.is_none().then(|| {
        let mut parameters = Parameters {
            dialect,
            values: Vec::new(),
        };
        let mut conditions = erase_conditions(erase, &mut parameters, false);
        conditions.push("intent_id IS NULL AND kind = 'disabled_call'".to_owned());
        Query {
            sql: format!("DELETE FROM events WHERE {}", conditions.join(" AND ")),
            parameters: parameters.values,
        }
    });
    let mut parameters = Parameters {
        dialect,
        values: Vec::new(),
    };
    let conditions = erase_conditions(erase, &mut parameters, true);
    let unbound_caller_keys = Query {
        sql: format!(
            "DELETE FROM caller_keys WHERE {} AND NOT EXISTS (SELECT 1 FROM intents \
             WHERE intents.tenant = caller_keys.tenant AND intents.tool = caller_keys.tool \
             AND intents.intent_key = caller_keys.intent_key)",
            conditions.join(" AND ")
        ),
        parameters: parameters.values,
    };
    Ok(EraseQueries {
        busy,
        unsettled,
        batch,
        mismatches,
        disabled_calls,
        unbound_caller_keys,
    })
}

/// `tenant = ..`, and `tool = ..` and `intent_key = ..` when the erasure names them (the key
/// only where the table has one).
fn erase_conditions(erase: &Erase, parameters: &mut Parameters, with_key: bool) -> Vec<String> {
    let mut conditions = vec![format!(
        "tenant = {}",
        parameters.bind(Parameter::Text(erase.tenant.clone()))
    )];
    if let Some(tool) = &erase.tool {
        conditions.push(format!(
            "tool = {}",
            parameters.bind(Parameter::Text(tool.clone()))
        ));
    }
    if let (true, Some(key)) = (with_key, &erase.key) {
        conditions.push(format!(
            "intent_key = {}",
            parameters.bind(Parameter::Text(key.clone()))
        ));
    }
    conditions
}
