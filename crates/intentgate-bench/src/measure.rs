//! What the benchmarks share to measure: the folder a run works in, percentiles of timed
//! samples, the fsync baseline, and the design targets beside their figures.

use std::fs::OpenOptions;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::Serialize;

/// Timed fsyncs of the probe file; enough for a stable median and a meaningful p99.
pub const FSYNC_SAMPLES: usize = 200;
/// Untimed fsyncs first, so that the first flush of a cold file does not skew the figures.
pub const FSYNC_WARM_UP_ROUNDS: usize = 5;
/// Bytes written before each fsync: one page, as small as a commit gets.
pub const FSYNC_BLOCK_BYTES: usize = 4096;

/// The folder to measure in, made absolute; says which folder when it is unusable.
pub fn existing_folder(dir: &Path) -> anyhow::Result<PathBuf> {
    if !dir.exists() {
        bail!(
            "the folder {} does not exist; pass an existing folder with --dir",
            dir.display()
        );
    }
    if !dir.is_dir() {
        bail!(
            "{} is not a folder; pass an existing folder with --dir",
            dir.display()
        );
    }
    std::fs::canonicalize(dir)
        .with_context(|| format!("can't resolve the folder {}", dir.display()))
}

/// A fresh temporary folder for one run's files inside `dir` (a folder `existing_folder`
/// returned), named with `prefix`; removed when dropped.
pub fn scratch_folder(dir: &Path, prefix: &str) -> anyhow::Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(dir)
        .with_context(|| format!("can't create a temporary folder in {}", dir.display()))
}

/// Says on stderr what a run is doing, unless its report is JSON: a run for a machine prints
/// its report and nothing else.
pub fn progress(json: bool) -> impl Fn(&str) {
    move |message: &str| {
        if !json {
            eprintln!("{message}");
        }
    }
}

/// The value at `fraction` (0 to 1) of sorted samples, by nearest rank.
pub fn percentile(sorted: &[Duration], fraction: f64) -> Duration {
    assert!(!sorted.is_empty(), "a percentile of no samples");
    assert!(
        sorted.windows(2).all(|pair| pair[0] <= pair[1]),
        "samples must be sorted"
    );
    let rank = (fraction * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub fn microseconds(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1_000_000.0
}

/// Rounds to `places` decimals, so that the JSON shows what the measurement can resolve.
pub fn rounded(value: f64, places: i32) -> f64 {
    let scale = 10_f64.powi(places);
    (value * scale).round() / scale
}

/// Cores this process may use: the figures of a run depend on them.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |cores| cores.get())
}

/// One design target against its figure. Serialised in the reports' `targets`: its field names
/// are a promise to users.
#[derive(Debug, Serialize)]
pub struct TargetCheck {
    /// The report field the target is about.
    pub field: &'static str,
    /// The target, in words.
    pub target: String,
    pub met: bool,
}

/// The "target" and "met" cells of the table row about `field`: empty where no target
/// of `targets` is about it.
pub fn target_cells(targets: &[TargetCheck], field: &str) -> (String, String) {
    targets
        .iter()
        .find(|check| check.field == field)
        .map(|check| {
            let met = if check.met { "yes" } else { "NO" };
            (check.target.clone(), met.to_owned())
        })
        .unwrap_or_default()
}

/// Times `FSYNC_SAMPLES` rounds of writing one block and `sync_data`, in `dir`.
///
/// Each round overwrites the same block of a file allocated beforehand. SQLite's WAL is
/// reused from its start after every checkpoint, so its commits mostly overwrite blocks too;
/// and an overwrite needs no metadata flush, which makes it the cheapest honest fsync, so
/// the ratio to it is not flattered.
pub fn measure_fsync(dir: &Path) -> std::io::Result<Vec<Duration>> {
    let mut file = OpenOptions::new()
        .create_new(true)
        .write(true)
        .open(dir.join("fsync-probe"))?;
    let block = vec![0x5a_u8; FSYNC_BLOCK_BYTES];
    file.write_all(&block)?;
    file.sync_all()?;
    let mut samples = Vec::with_capacity(FSYNC_SAMPLES);
    for round in 0..FSYNC_WARM_UP_ROUNDS + FSYNC_SAMPLES {
        file.seek(SeekFrom::Start(0))?;
        let started = Instant::now();
        file.write_all(&block)?;
        file.sync_data()?;
        let elapsed = started.elapsed();
        if round >= FSYNC_WARM_UP_ROUNDS {
            samples.push(elapsed);
        }
    }
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn milliseconds(values: &[u64]) -> Vec<Duration> {
        values.iter().copied().map(Duration::from_millis).collect()
    }

    #[test]
    fn percentiles_take_the_nearest_rank() {
        let samples = milliseconds(&(1..=100).collect::<Vec<_>>());
        assert_eq!(percentile(&samples, 0.5), Duration::from_millis(50));
        assert_eq!(percentile(&samples, 0.99), Duration::from_millis(99));
        assert_eq!(percentile(&samples, 1.0), Duration::from_millis(100));
        assert_eq!(percentile(&samples, 0.0), Duration::from_millis(1));
        let one = milliseconds(&[7]);
        assert_eq!(percentile(&one, 0.5), Duration::from_millis(7));
        assert_eq!(percentile(&one, 0.99), Duration::from_millis(7));
    }
}
