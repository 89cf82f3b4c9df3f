//! Durations as operators and configs write them: a whole number and one unit, `30s`,
//! `15m`, `4h`, `7d` (the admin API's and the CLI's `--since`, a budget's `window`, an
//! approval's `deadline`).
//!
//! Not jiff's parser: its grammar also accepts `1h30m`, `1 hour`, `1w` and fractions, and a
//! form that takes one number and one unit can't be misread by an operator or a script, so
//! this small grammar is the promise (its tests pin what is refused).

use std::time::Duration;

/// What each unit is worth, in milliseconds, with its letter.
const UNITS: [(&str, u64); 4] = [
    ("s", 1_000),
    ("m", 60 * 1_000),
    ("h", 60 * 60 * 1_000),
    ("d", 24 * 60 * 60 * 1_000),
];

/// Parses a positive duration written as a whole number and a unit, `s` (seconds), `m`
/// (minutes), `h` (hours) or `d` (days), into milliseconds. The error says what is accepted.
pub fn parse_duration_ms(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let wrong = || {
        format!(
            "`{text}` is not a duration: write a whole number and a unit, s, m, h or d \
             (30s, 15m, 1h, 2d)"
        )
    };
    let digits = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(wrong)?;
    let (number, unit) = trimmed.split_at(digits);
    if number.is_empty() {
        return Err(wrong());
    }
    let ms_per_unit = UNITS
        .iter()
        .find(|(name, _)| *name == unit)
        .map(|(_, ms)| *ms)
        .ok_or_else(wrong)?;
    let count: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` is too long a duration"))?;
    if count == 0 {
        return Err(format!("`{text}` is empty: a duration must be positive"));
    }
    count
        .checked_mul(ms_per_unit)
        .ok_or_else(|| format!("`{text}` is too long a duration"))
}

/// [`parse_duration_ms`] as a `Duration`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    parse_duration_ms(text).map(Duration::from_millis)
}

/// `ms` in the largest unit that writes it whole: `7d`, `36h`, `90s`.
pub fn write_duration(ms: u64) -> String {
    UNITS
        .iter()
        .rev()
        .find(|(_, per_unit)| ms.is_multiple_of(*per_unit))
        .map(|(unit, per_unit)| format!("{}{unit}", ms / per_unit))
        .unwrap_or_else(|| format!("{ms}ms"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unit_is_read_in_milliseconds() {
        assert_eq!(parse_duration_ms("30s"), Ok(30_000));
        assert_eq!(parse_duration_ms("15m"), Ok(15 * 60_000));
        assert_eq!(parse_duration_ms("4h"), Ok(4 * 3_600_000));
        assert_eq!(parse_duration_ms(" 7d "), Ok(7 * 86_400_000));
    }

    #[test]
    fn anything_else_is_refused_with_what_is_accepted() {
        for text in [
            "", "h", "1", "1.5h", "-1h", "1 h", "1w", "1hour", "1h30m", "+1h", "3600",
        ] {
            let error = parse_duration_ms(text).unwrap_err();
            assert!(error.contains("30s, 15m, 1h, 2d"), "{text:?}: {error}");
        }
        assert!(parse_duration_ms("0h").unwrap_err().contains("positive"));
        assert!(
            parse_duration_ms("99999999999999999999d")
                .unwrap_err()
                .contains("too long")
        );
        assert!(
            parse_duration_ms("999999999999999999d")
                .unwrap_err()
                .contains("too long")
        );
    }

    #[test]
    fn a_duration_is_the_same_read_as_milliseconds() {
        assert_eq!(parse_duration("2d"), Ok(Duration::from_secs(2 * 86_400)));
        assert!(parse_duration("0s").unwrap_err().contains("positive"));
    }

    #[test]
    fn durations_are_written_in_their_largest_whole_unit() {
        assert_eq!(write_duration(7 * 86_400_000), "7d");
        assert_eq!(write_duration(36 * 3_600_000), "36h");
        assert_eq!(write_duration(90_000), "90s");
        assert_eq!(write_duration(1), "1ms");
    }
}
