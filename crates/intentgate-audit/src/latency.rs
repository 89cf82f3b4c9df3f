//! Timeouts below what the upstream really takes, from `--latency FILE`.
//!
//! The ledger does not store per-call latencies today, so the observed latencies come from a
//! JSON file (exported from the upstream's dashboards or the gateway's
//! `intentgate_upstream_latency` histogram): one entry per tool, either percentiles
//! `{"refund_order": {"p50_ms": 800, "p99_ms": 6200}}` (`p50_ms` optional) or raw samples in
//! milliseconds `{"refund_order": [640, 720, 6100]}`, whose p50 and p99 are computed here
//! (nearest rank).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use anyhow::{Context, bail};
use intentgate_config::ToolConfig;
use intentgate_core::tool::TIMEOUT_MS_MAX;
use serde_json::Value;

use super::config::field_position;
use super::{Finding, Severity};

/// Largest latency file read: a few samples per tool fit many times over; a larger file is
/// probably not the one meant.
const LATENCY_FILE_BYTES_MAX: u64 = 16 * 1024 * 1024;
/// The suggested timeout is the p99 times this, so that a slow-but-normal call still fits.
const SUGGESTED_P99_FACTOR: f64 = 1.5;
/// Suggested timeouts are rounded up to this many milliseconds.
const SUGGESTED_ROUNDING_MS: u64 = 100;

/// What one tool's upstream was seen to take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observed {
    pub p50_ms: Option<u64>,
    pub p99_ms: u64,
}

/// Reads and checks the latency file. Any problem is "could not run" (status 1).
pub fn read(path: &Path) -> anyhow::Result<BTreeMap<String, Observed>> {
    let context = || format!("--latency {}", path.display());
    let file = std::fs::File::open(path).with_context(context)?;
    let mut bytes = Vec::new();
    file.take(LATENCY_FILE_BYTES_MAX + 1)
        .read_to_end(&mut bytes)
        .with_context(context)?;
    if bytes.len() as u64 > LATENCY_FILE_BYTES_MAX {
        bail!(
            "--latency {}: larger than {LATENCY_FILE_BYTES_MAX} bytes",
            path.display()
        );
    }
    let value: Value = serde_json::from_slice(&bytes).with_context(context)?;
    let Value::Object(tools) = value else {
        bail!(
            "--latency {}: expected a JSON object by tool name, e.g. \
             {{\"refund_order\": {{\"p50_ms\": 800, \"p99_ms\": 6200}}}} or \
             {{\"refund_order\": [640, 720, 6100]}}",
            path.display()
        );
    };
    let mut observed = BTreeMap::new();
    for (name, entry) in tools {
        let parsed = parse_entry(&entry)
            .with_context(|| format!("--latency {}: tool `{name}`", path.display()))?;
        observed.insert(name, parsed);
    }
    Ok(observed)
}

fn parse_entry(entry: &Value) -> anyhow::Result<Observed> {
    let milliseconds = |value: &Value| -> anyhow::Result<u64> {
        match value.as_f64() {
            Some(ms) if ms.is_finite() && ms >= 0.0 => Ok(ms.ceil() as u64),
            _ => bail!("{value} is not a number of milliseconds"),
        }
    };
    match entry {
        Value::Object(fields) => {
            if let Some(unknown) = fields
                .keys()
                .find(|key| !matches!(key.as_str(), "p50_ms" | "p99_ms"))
            {
                bail!("unknown field `{unknown}`; the fields are `p50_ms` and `p99_ms`");
            }
            let p99_ms = milliseconds(fields.get("p99_ms").context("`p99_ms` is missing")?)?;
            let p50_ms = fields.get("p50_ms").map(milliseconds).transpose()?;
            Ok(Observed { p50_ms, p99_ms })
        }
        Value::Array(samples) if !samples.is_empty() => {
            let mut samples = samples
                .iter()
                .map(milliseconds)
                .collect::<anyhow::Result<Vec<_>>>()?;
            samples.sort_unstable();
            Ok(Observed {
                p50_ms: Some(nearest_rank(&samples, 50)),
                p99_ms: nearest_rank(&samples, 99),
            })
        }
        _ => bail!("expected {{\"p50_ms\": N, \"p99_ms\": N}} or a non-empty list of milliseconds"),
    }
}

/// The nearest-rank percentile of sorted, non-empty `samples`.
fn nearest_rank(samples: &[u64], percentile: usize) -> u64 {
    let rank = (percentile * samples.len()).div_ceil(100).max(1);
    samples[rank - 1]
}

/// A timeout that covers the p99 with margin, within what a tool may have.
fn suggested_timeout_ms(p99_ms: u64) -> u64 {
    let scaled = (p99_ms as f64 * SUGGESTED_P99_FACTOR).ceil() as u64;
    scaled
        .div_ceil(SUGGESTED_ROUNDING_MS)
        .saturating_mul(SUGGESTED_ROUNDING_MS)
        .clamp(1, TIMEOUT_MS_MAX)
}

pub fn check(
    observed: &BTreeMap<String, Observed>,
    tools: &[ToolConfig],
    text: &str,
    config_file: &str,
    latency_file: &str,
    findings: &mut Vec<Finding>,
) {
    for (name, seen) in observed {
        let Some(tool) = tools.iter().find(|tool| &tool.name == name) else {
            findings.push(Finding::new(
                Severity::Warning,
                "latency-unknown-tool",
                latency_file,
                (0, 0),
                format!("the latency file names `{name}`, which is not a tool of the config"),
                Some("correct the tool's name in the latency file, or remove its entry".to_owned()),
            ));
            continue;
        };
        let below_median = seen.p50_ms.is_some_and(|p50| tool.timeout_ms < p50);
        if !below_median && tool.timeout_ms >= seen.p99_ms {
            continue;
        }
        let (severity, rule, observed_text) = if below_median {
            (
                Severity::Error,
                "timeout-below-p50",
                format!("the median (p50) of {} ms", seen.p50_ms.unwrap_or_default()),
            )
        } else {
            (
                Severity::Warning,
                "timeout-below-p99",
                format!("the observed p99 of {} ms", seen.p99_ms),
            )
        };
        let consequence = match tool.effect {
            intentgate_core::Effect::SideEffect => {
                "each slow success becomes an unknown intent that needs a lookup"
            }
            _ => "each slow answer is retried, adding load to a slow upstream",
        };
        let suggested = suggested_timeout_ms(seen.p99_ms);
        findings.push(
            Finding::new(
                severity,
                rule,
                config_file,
                field_position(text, tool.line, "timeout_ms"),
                format!(
                    "`{}` has `timeout_ms: {}`, below {observed_text}: {consequence}",
                    tool.name, tool.timeout_ms
                ),
                Some(format!(
                    "set `timeout_ms: {suggested}` (the p99 of {} ms × {SUGGESTED_P99_FACTOR}, \
                     rounded up)",
                    seen.p99_ms
                )),
            )
            .tool(&tool.name),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn samples_give_nearest_rank_percentiles() {
        let samples: Vec<Value> = (1..=100).map(|ms| json!(ms)).collect();
        assert_eq!(
            parse_entry(&Value::Array(samples)).unwrap(),
            Observed {
                p50_ms: Some(50),
                p99_ms: 99
            }
        );
        assert_eq!(
            parse_entry(&json!([7])).unwrap(),
            Observed {
                p50_ms: Some(7),
                p99_ms: 7
            }
        );
        assert!(parse_entry(&json!([])).is_err());
        assert!(parse_entry(&json!({"p99": 3})).is_err());
    }

    #[test]
    fn suggestions_cover_the_p99_with_margin_within_the_limit() {
        assert_eq!(suggested_timeout_ms(6200), 9300);
        assert_eq!(suggested_timeout_ms(1001), 1600);
        assert_eq!(suggested_timeout_ms(10 * 60 * 1000), TIMEOUT_MS_MAX);
    }
}
