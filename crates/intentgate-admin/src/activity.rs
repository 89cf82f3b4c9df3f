//! `GET /v1/admin/activity`: calls, repeats and statuses per tool over a recent window, the
//! console overview's chart.
//!
//! It is read from the ledger (the intents first seen within the window, `since`, one hour by
//! default), so every replica sharing the ledger answers alike. The ledger keeps, per intent,
//! its call count and the times of its first and last call, not the time of every repeat: an
//! intent's first call is counted in the bucket of its first sighting, its repeats in the
//! bucket of its last call. At most [`ACTIVITY_INTENTS_MAX`] intents are read; the answer says
//! when it stopped there (`stopped_early`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use intentgate_ledger::{IntentFilter, IntentRecord, Order};
use intentgate_server::Problem;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::body::{self, bad_request};
use crate::{AdminState, now_ms, parse_duration};

/// The window when the request names none: the overview shows the last hour.
pub const ACTIVITY_SINCE_DEFAULT: Duration = Duration::from_secs(60 * 60);
/// Longest window: every intent of it is read, so a week is the most that stays quick.
pub const ACTIVITY_SINCE_MAX: Duration = Duration::from_secs(7 * 24 * 60 * 60);
/// Most intents read for one answer (some 100 MB of a storm's worth of rows at worst would be
/// far too many; 100,000 rows are read in well under a second).
pub const ACTIVITY_INTENTS_MAX: u32 = 100_000;
/// Intents read from the ledger per page.
const ACTIVITY_PAGE: u32 = 1000;
/// Buckets the window is cut into: five minutes each for the default hour.
pub const ACTIVITY_BUCKETS: usize = 12;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ActivityQuery {
    since: Option<String>,
}

/// One tool's activity in the window.
#[derive(Debug, Default, Serialize)]
struct ToolActivity {
    tool: String,
    /// Intents first seen in the window.
    intents: u64,
    /// Every call of those intents, first calls and repeats.
    calls: u64,
    /// Calls beyond each intent's first.
    repeats: u64,
    /// Intents by their status now.
    statuses: BTreeMap<String, u64>,
    buckets: Vec<Bucket>,
}

#[derive(Debug, Default, Clone, Copy, Serialize)]
struct Bucket {
    calls: u64,
    repeats: u64,
}

pub(crate) async fn show(
    State(state): State<Arc<AdminState>>,
    query: Result<Query<ActivityQuery>, QueryRejection>,
) -> Result<Json<Value>, Problem> {
    let query = body::query(query)?;
    let since = match query.since.filter(|text| !text.is_empty()) {
        None => ACTIVITY_SINCE_DEFAULT,
        Some(text) => parse_duration(&text).map_err(|detail| {
            bad_request("bad-query", "Invalid since", format!("since: {detail}"))
        })?,
    };
    if since > ACTIVITY_SINCE_MAX || since.is_zero() {
        return Err(bad_request(
            "bad-query",
            "Window out of range",
            format!(
                "since must be from 1s to {} days",
                ACTIVITY_SINCE_MAX.as_secs() / 86_400
            ),
        ));
    }
    let until_ms = now_ms();
    let window_ms = i64::try_from(since.as_millis()).unwrap_or(i64::MAX);
    let since_ms = until_ms.saturating_sub(window_ms);
    // Whole milliseconds per bucket, rounded up so the last bucket ends at `until_ms` or after.
    let bucket_ms = (window_ms + ACTIVITY_BUCKETS as i64 - 1) / ACTIVITY_BUCKETS as i64;
    let filter = IntentFilter {
        first_seen_from_ms: Some(since_ms),
        ..IntentFilter::default()
    };
    let mut tools: BTreeMap<String, ToolActivity> = BTreeMap::new();
    let mut cursor = None;
    let mut read: u32 = 0;
    let mut stopped_early = false;
    loop {
        if read >= ACTIVITY_INTENTS_MAX {
            stopped_early = true;
            break;
        }
        let page = state
            .ledger
            .intents(
                &filter,
                Order::Oldest,
                cursor,
                ACTIVITY_PAGE.min(ACTIVITY_INTENTS_MAX - read),
            )
            .await
            .map_err(body::ledger_problem)?;
        let Some(last) = page.last() else { break };
        cursor = Some(last.id);
        let complete = page.len() < ACTIVITY_PAGE as usize;
        read += page.len() as u32;
        for intent in &page {
            count(&mut tools, intent, since_ms, bucket_ms);
        }
        if complete {
            break;
        }
    }
    let tools: Vec<ToolActivity> = tools.into_values().collect();
    Ok(Json(json!({
        "since_ms": since_ms,
        "until_ms": until_ms,
        "bucket_ms": bucket_ms,
        "intents_read": read,
        "stopped_early": stopped_early,
        "tools": tools,
    })))
}

/// Adds one intent to its tool's counts.
fn count(
    tools: &mut BTreeMap<String, ToolActivity>,
    intent: &IntentRecord,
    since_ms: i64,
    bucket_ms: i64,
) {
    let activity = tools
        .entry(intent.tool.clone())
        .or_insert_with(|| ToolActivity {
            tool: intent.tool.clone(),
            buckets: vec![Bucket::default(); ACTIVITY_BUCKETS],
            ..ToolActivity::default()
        });
    let calls = intent.call_count.max(1);
    let repeats = calls - 1;
    activity.intents += 1;
    activity.calls += calls;
    activity.repeats += repeats;
    *activity
        .statuses
        .entry(intent.status.as_str().to_owned())
        .or_default() += 1;
    let first = bucket(intent.first_seen_ms, since_ms, bucket_ms);
    activity.buckets[first].calls += 1;
    if repeats > 0 {
        let last = bucket(intent.last_seen_ms, since_ms, bucket_ms);
        activity.buckets[last].calls += repeats;
        activity.buckets[last].repeats += repeats;
    }
}

/// The bucket of a time in the window; a time outside it (a clock step) goes to the nearest.
fn bucket(at_ms: i64, since_ms: i64, bucket_ms: i64) -> usize {
    let index = (at_ms.saturating_sub(since_ms) / bucket_ms.max(1)).max(0);
    (index as usize).min(ACTIVITY_BUCKETS - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_fall_in_their_bucket_and_strays_in_the_nearest() {
        assert_eq!(bucket(1_000, 1_000, 100), 0);
        assert_eq!(bucket(1_099, 1_000, 100), 0);
        assert_eq!(bucket(1_100, 1_000, 100), 1);
        assert_eq!(bucket(999, 1_000, 100), 0);
        assert_eq!(bucket(1_000_000, 1_000, 100), ACTIVITY_BUCKETS - 1);
    }
}
