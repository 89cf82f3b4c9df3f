//! A reconciliation run as CSV, for whoever contacts the affected customers or reverses the
//! payments: `GET /v1/admin/reconciliations/{id}/mismatches.csv` (one row per stored
//! mismatch) and `GET /v1/admin/reconciliations/{id}/subjects.csv` (one row per affected
//! subject, a customer or an order, with how many provider records name it). Both take
//! `kind` and `severity` to narrow the mismatches.
//!
//! Every field is quoted (RFC 4180), and one that a spreadsheet would run as a formula gets a
//! leading `'`: subjects and details come from the provider's records and the callers'
//! arguments.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use intentgate_ledger::{MISMATCH_KIND_LENGTH_MAX, MISMATCH_SEVERITIES, StoredMismatch};
use intentgate_server::Problem;
use serde::Deserialize;
use utoipa::openapi::RefOr;
use utoipa::{IntoParams, IntoResponses};

use intentgate_server::openapi::problem_response;

use crate::body::{self, bad_request};
use crate::reconcile::unknown_run;
use crate::{AdminState, MISMATCHES_LIMIT_MAX};

#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ExportQuery {
    /// Only mismatches of this kind (`duplicate`, `no_intent`, ...).
    kind: Option<String>,
    /// Only mismatches of this severity.
    severity: Option<String>,
}

/// The columns of the mismatches export, in order.
const MISMATCH_COLUMNS: [&str; 10] = [
    "run_id",
    "tool",
    "kind",
    "severity",
    "subject",
    "tenant",
    "intent_id",
    "intent_key",
    "external_ids",
    "detail",
];

/// The columns of the subjects export, in order.
const SUBJECT_COLUMNS: [&str; 9] = [
    "subject",
    "provider_records",
    "mismatches",
    "severity",
    "kinds",
    "tools",
    "tenants",
    "intent_ids",
    "external_ids",
];

/// The refusals of both exports, beside those of every admin route.
struct ExportRefusals;

impl IntoResponses for ExportRefusals {
    fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::Response>> {
        BTreeMap::from([
            (
                "400".to_owned(),
                problem_response(
                    "An id that is not a number, an unknown query parameter, or an invalid \
                     `kind` or `severity`.",
                ),
            ),
            ("404".to_owned(), problem_response("No such run.")),
        ])
    }
}

/// `GET /v1/admin/reconciliations/{id}/mismatches.csv`.
#[utoipa::path(
    get,
    path = "/v1/admin/reconciliations/{id}/mismatches.csv",
    operation_id = "admin_export_mismatches",
    params(("id" = String, Path, description = "The run's id."), ExportQuery),
    responses(
        (status = 200, description = "The run's stored mismatches, one row each: run_id, tool, kind, severity, subject, tenant, intent_id, intent_key, external_ids, detail.", body = String,
         content_type = "text/csv; charset=utf-8",
         headers(("content-disposition" = String, description = "`attachment; filename=...`"))),
        ExportRefusals,
    ),
)]
pub(crate) async fn mismatches(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
    query: Result<Query<ExportQuery>, QueryRejection>,
) -> Result<Response, Problem> {
    let (id, mismatches) = read(&state, &id, query).await?;
    let mut text = String::new();
    row(&mut text, MISMATCH_COLUMNS.map(str::to_owned));
    for mismatch in &mismatches {
        row(
            &mut text,
            [
                mismatch.run_id.to_string(),
                mismatch.tool.clone(),
                mismatch.kind.clone(),
                mismatch.severity.clone(),
                mismatch.subject.clone().unwrap_or_default(),
                mismatch.tenant.clone().unwrap_or_default(),
                mismatch
                    .intent_id
                    .map(|id| id.to_string())
                    .unwrap_or_default(),
                mismatch.intent_key.clone().unwrap_or_default(),
                mismatch.external_ids.join(" "),
                mismatch.detail.clone(),
            ],
        );
    }
    Ok(attachment(
        text,
        &format!("reconciliation-{id}-mismatches.csv"),
    ))
}

/// One affected subject: what the run's mismatches say about it.
#[derive(Default)]
struct Subject {
    records: BTreeSet<String>,
    mismatches: usize,
    /// The most urgent severity, as its index in [`MISMATCH_SEVERITIES`].
    severity: usize,
    kinds: BTreeSet<String>,
    tools: BTreeSet<String>,
    tenants: BTreeSet<String>,
    intents: BTreeSet<i64>,
}

/// `GET /v1/admin/reconciliations/{id}/subjects.csv`: most provider records first. A
/// mismatch that names no subject is left out (it affects nobody it could name).
#[utoipa::path(
    get,
    path = "/v1/admin/reconciliations/{id}/subjects.csv",
    operation_id = "admin_export_subjects",
    params(("id" = String, Path, description = "The run's id."), ExportQuery),
    responses(
        (status = 200, description = "The subjects the run's mismatches name, one row each, most provider records first: subject, provider_records, mismatches, severity, kinds, tools, tenants, intent_ids, external_ids.", body = String,
         content_type = "text/csv; charset=utf-8",
         headers(("content-disposition" = String, description = "`attachment; filename=...`"))),
        ExportRefusals,
    ),
)]
pub(crate) async fn subjects(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
    query: Result<Query<ExportQuery>, QueryRejection>,
) -> Result<Response, Problem> {
    let (id, mismatches) = read(&state, &id, query).await?;
    let mut subjects: BTreeMap<String, Subject> = BTreeMap::new();
    for mismatch in &mismatches {
        let Some(name) = mismatch.subject.clone().filter(|name| !name.is_empty()) else {
            continue;
        };
        let subject = subjects.entry(name).or_default();
        subject
            .records
            .extend(mismatch.external_ids.iter().cloned());
        subject.mismatches += 1;
        let severity = MISMATCH_SEVERITIES
            .iter()
            .position(|known| *known == mismatch.severity)
            .unwrap_or(0);
        subject.severity = subject.severity.max(severity);
        subject.kinds.insert(mismatch.kind.clone());
        subject.tools.insert(mismatch.tool.clone());
        subject.tenants.extend(mismatch.tenant.iter().cloned());
        subject.intents.extend(mismatch.intent_id);
    }
    let mut ordered: Vec<(String, Subject)> = subjects.into_iter().collect();
    ordered.sort_by(|(a_name, a), (b_name, b)| {
        b.records
            .len()
            .cmp(&a.records.len())
            .then(b.severity.cmp(&a.severity))
            .then(a_name.cmp(b_name))
    });
    let join = |set: &BTreeSet<String>| set.iter().cloned().collect::<Vec<_>>().join(" ");
    let mut text = String::new();
    row(&mut text, SUBJECT_COLUMNS.map(str::to_owned));
    for (name, subject) in ordered {
        row(
            &mut text,
            [
                name,
                subject.records.len().to_string(),
                subject.mismatches.to_string(),
                MISMATCH_SEVERITIES[subject.severity].to_owned(),
                join(&subject.kinds),
                join(&subject.tools),
                join(&subject.tenants),
                subject
                    .intents
                    .iter()
                    .map(i64::to_string)
                    .collect::<Vec<_>>()
                    .join(" "),
                join(&subject.records),
            ],
        );
    }
    Ok(attachment(
        text,
        &format!("reconciliation-{id}-subjects.csv"),
    ))
}

/// The run's stored mismatches of the asked kind and severity; 400 for a filter that can't
/// match, 404 for a run that does not exist.
async fn read(
    state: &AdminState,
    id: &str,
    query: Result<Query<ExportQuery>, QueryRejection>,
) -> Result<(i64, Vec<StoredMismatch>), Problem> {
    let id = body::id(id, "a reconciliation")?;
    let query = body::query(query)?;
    let severity = query.severity.filter(|text| !text.is_empty());
    if let Some(severity) = &severity
        && !MISMATCH_SEVERITIES.contains(&severity.as_str())
    {
        return Err(bad_request(
            "bad-query",
            "Invalid severity",
            format!(
                "`{severity}` is not a severity; one of {}",
                MISMATCH_SEVERITIES.join(", ")
            ),
        ));
    }
    let kind = query.kind.filter(|text| !text.is_empty());
    if let Some(kind) = &kind
        && (kind.len() > MISMATCH_KIND_LENGTH_MAX
            || !kind.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
    {
        return Err(bad_request(
            "bad-query",
            "Invalid kind",
            format!(
                "`{kind}` is not a mismatch kind: kinds are lowercase words joined by _, such \
as duplicate or no_intent"
            ),
        ));
    }
    if state
        .ledger
        .reconciliation(id)
        .await
        .map_err(body::ledger_problem)?
        .is_none()
    {
        return Err(unknown_run(id));
    }
    let mut mismatches = state
        .ledger
        .reconciliation_mismatches(id, MISMATCHES_LIMIT_MAX)
        .await
        .map_err(body::ledger_problem)?;
    mismatches.retain(|mismatch| {
        kind.as_ref().is_none_or(|kind| &mismatch.kind == kind)
            && severity
                .as_ref()
                .is_none_or(|severity| &mismatch.severity == severity)
    });
    Ok((id, mismatches))
}

/// `text` as a CSV file to save as `name`.
fn attachment(text: String, name: &str) -> Response {
    let mut response = text.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/csv; charset=utf-8"),
    );
    if let Ok(disposition) = HeaderValue::from_str(&format!("attachment; filename=\"{name}\"")) {
        headers.insert(header::CONTENT_DISPOSITION, disposition);
    }
    response
}

/// One CSV line of `fields`, ended by CRLF.
fn row<const N: usize>(text: &mut String, fields: [String; N]) {
    for (index, field) in fields.iter().enumerate() {
        if index > 0 {
            text.push(',');
        }
        csv_field(text, field);
    }
    text.push_str("\r\n");
}

/// One CSV field (RFC 4180), quoted, with its quotes doubled. A field that a spreadsheet
/// would run as a formula (it starts with `=`, `+`, `-`, `@`, a tab or a carriage return)
/// gets a leading `'`, so it is shown as text.
fn csv_field(text: &mut String, field: &str) {
    text.push('"');
    if field.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        text.push('\'');
    }
    text.push_str(&field.replace('"', "\"\""));
    text.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_are_quoted_and_formulas_are_shown_as_text() {
        let mut text = String::new();
        csv_field(&mut text, r#"say "hi", then go"#);
        assert_eq!(text, r#""say ""hi"", then go""#);
        for formula in ["=1+1", "+1", "-1", "@SUM(A1)", "\tx", "\rx"] {
            let mut text = String::new();
            csv_field(&mut text, formula);
            assert_eq!(text, format!("\"'{formula}\""), "{formula:?}");
        }
    }
}
