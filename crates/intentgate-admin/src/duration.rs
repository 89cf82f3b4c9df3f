//! Durations as operators write them: `30s`, `15m`, `1h`, `2d`.
//!
//! Not jiff's parser: its grammar also accepts `1h30m`, `1 hour`, `1w` and fractions, and a
//! command line that takes one number and one unit can't be misread by an operator or a
//! script, so this small grammar is the promise (its tests pin what is refused).

use std::time::Duration;

/// What each unit is worth, in seconds.
const UNITS: [(&str, u64); 4] = [("s", 1), ("m", 60), ("h", 60 * 60), ("d", 24 * 60 * 60)];

/// Parses a positive duration written as a whole number and a unit: `s` (seconds), `m`
/// (minutes), `h` (hours) or `d` (days), such as `30s`, `15m`, `1h` or `2d`. The error says
/// what is accepted.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
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
    let seconds_per_unit = UNITS
        .iter()
        .find(|(name, _)| *name == unit)
        .map(|(_, seconds)| *seconds)
        .ok_or_else(wrong)?;
    let count: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` is too long a duration"))?;
    if count == 0 {
        return Err(format!("`{text}` is empty: a duration must be positive"));
    }
    let seconds = count
        .checked_mul(seconds_per_unit)
        .ok_or_else(|| format!("`{text}` is too long a duration"))?;
    Ok(Duration::from_secs(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unit_is_read() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("15m"), Ok(Duration::from_secs(15 * 60)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration(" 2d "), Ok(Duration::from_secs(2 * 86_400)));
    }

    #[test]
    fn anything_else_is_refused_with_what_is_accepted() {
        for text in [
            "", "h", "1", "1.5h", "-1h", "1 h", "1w", "1hour", "1h30m", "+1h",
        ] {
            let error = parse_duration(text).unwrap_err();
            assert!(error.contains("30s, 15m, 1h, 2d"), "{text:?}: {error}");
        }
        assert!(parse_duration("0s").unwrap_err().contains("positive"));
        assert!(
            parse_duration("99999999999999999999d")
                .unwrap_err()
                .contains("too long")
        );
        assert!(
            parse_duration("999999999999999999d")
                .unwrap_err()
                .contains("too long")
        );
    }
}
