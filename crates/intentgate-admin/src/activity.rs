//! `GET /v1/admin/activity`: calls, repeats and statuses per tool over a recent window, the
//! console overview's chart.
//!
//! It is read from the ledger (the intents first seen within the window, `since`, one hour by
//! default), so every replica sharing the ledger answers alike. The ledger keeps, per intent,
//! its call count and the times of its first and last call, not the time of every repeat: an
//! intent's first call is counted in the bucket of its first sighting, its repeats in the
//! bucket of its last call. At most [`ACTIVITY_INTENTS_MAX`] intents are read, the newest
//! first; the answer says when it stopped there (`stopped_early`), and the counts are then
//! those of the window's newest intents.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use intentgate_ledger::{IntentFilter, IntentRecord, Ledger, LedgerError, Order};
use intentgate_server::Problem;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::IntoParams;

use crate::body::{self, bad_request};
use crate::{AdminState, now_ms, parse_duration};

/// The window when the request names none: the overview shows the last hour.
pub const ACTIVITY_SINCE_DEFAULT: Duration = Duration::from_secs(60 * 60);
/// Longest window: every intent of it is read, so a week is the most that stays quick.
pub const ACTIVITY_SINCE_MAX: Duration = Duration::from_secs(7 * 24 * 60 * 60);
/// Most intents read for one answer. The console's overview asks every two seconds, so one
/// answer must stay cheap for the ledger: 20,000 rows (a few MB) at most, the newest first,
/// which is what a live view needs during a storm.
pub const ACTIVITY_INTENTS_MAX: u32 = 20_000;
/// Intents read from the ledger per page.
const ACTIVITY_PAGE: u32 = 1000;
/// Buckets the window is cut into: five minutes each for the default hour.
pub const ACTIVITY_BUCKETS: usize = 12;

#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ActivityQuery {
    /// The window, ending now: `15m`, `1h` (the default), at most `7d`.
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

/// Calls, repeats and statuses per tool over the window, in 12 buckets.
#[utoipa::path(
    get,
    path = "/v1/admin/activity",
    operation_id = "admin_activity",
    params(ActivityQuery),
    responses(
        (status = 200, description = "`{\"since_ms\", \"until_ms\", \"bucket_ms\", \"intents_read\", \
         \"stopped_early\", \"tools\": [{\"tool\", \"intents\", \"calls\", \"repeats\", \
         \"statuses\": {status: count}, \"buckets\": [{\"calls\", \"repeats\"}...]}...]}`.",
         body = Object),
        (status = 400, description = "An unknown query parameter or an invalid or out-of-range `since`."),
    ),
)]
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
    let window = read_window(
        state.ledger.as_ref(),
        since_ms,
        bucket_ms,
        ACTIVITY_INTENTS_MAX,
    )
    .await
    .map_err(body::ledger_problem)?;
    let tools: Vec<ToolActivity> = window.tools.into_values().collect();
    Ok(Json(json!({
        "since_ms": since_ms,
        "until_ms": until_ms,
        "bucket_ms": bucket_ms,
        "intents_read": window.read,
        "stopped_early": window.stopped_early,
        "tools": tools,
    })))
}

/// The counts of a window, as read.
struct Window {
    tools: BTreeMap<String, ToolActivity>,
    /// Intents read.
    read: u32,
    /// More intents were in the window than `max`: the counts are of the newest.
    stopped_early: bool,
}

/// Counts the intents first seen since `since_ms`, the newest first, reading at most `max`.
async fn read_window(
    ledger: &dyn Ledger,
    since_ms: i64,
    bucket_ms: i64,
    max: u32,
) -> Result<Window, LedgerError> {
    let filter = IntentFilter {
        first_seen_from_ms: Some(since_ms),
        ..IntentFilter::default()
    };
    let mut window = Window {
        tools: BTreeMap::new(),
        read: 0,
        stopped_early: false,
    };
    let mut cursor = None;
    loop {
        if window.read >= max {
            // Full: one more intent past it means the window held more.
            window.stopped_early = !ledger
                .intents(&filter, Order::Newest, cursor, 1)
                .await?
                .is_empty();
            break;
        }
        let page = ledger
            .intents(
                &filter,
                Order::Newest,
                cursor,
                ACTIVITY_PAGE.min(max - window.read),
            )
            .await?;
        let Some(last) = page.last() else { break };
        cursor = Some(last.id);
        let asked = ACTIVITY_PAGE.min(max - window.read) as usize;
        window.read += page.len() as u32;
        for intent in &page {
            count(&mut window.tools, intent, since_ms, bucket_ms);
        }
        if page.len() < asked {
            break;
        }
    }
    Ok(window)
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
    use intentgate_mock::FaultPlan;
    use intentgate_test_support::gate::Harness;
    use intentgate_test_support::tools::refund;
    use serde_json::json;

    use super::*;

    #[tokio::test]
    async fn a_window_with_more_intents_than_the_limit_is_counted_from_its_newest() {
        let harness = Harness::new(FaultPlan::none());
        for order in 0..5 {
            harness
                .call("refund_order", refund(&format!("o{order}"), json!(10)))
                .await;
        }
        let since_ms = 0;
        let all = read_window(harness.ledger.as_ref(), since_ms, 1, 5)
            .await
            .unwrap();
        assert_eq!((all.read, all.stopped_early), (5, false));
        assert_eq!(all.tools["refund_order"].intents, 5);
        let newest = read_window(harness.ledger.as_ref(), since_ms, 1, 3)
            .await
            .unwrap();
        assert_eq!((newest.read, newest.stopped_early), (3, true));
        assert_eq!(newest.tools["refund_order"].intents, 3);
        let later = read_window(harness.ledger.as_ref(), i64::MAX / 2, 1, 3)
            .await
            .unwrap();
        assert_eq!((later.read, later.stopped_early), (0, false));
        assert!(later.tools.is_empty());
    }

    #[test]
    fn times_fall_in_their_bucket_and_strays_in_the_nearest() {
        assert_eq!(bucket(1_000, 1_000, 100), 0);
        assert_eq!(bucket(1_099, 1_000, 100), 0);
        assert_eq!(bucket(1_100, 1_000, 100), 1);
        assert_eq!(bucket(999, 1_000, 100), 0);
        assert_eq!(bucket(1_000_000, 1_000, 100), ACTIVITY_BUCKETS - 1);
    }
}
