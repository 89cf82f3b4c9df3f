//! Times as the command line prints them: UTC, from the milliseconds the ledger stores.

use jiff::Timestamp;

/// Milliseconds since the Unix epoch as `YYYY-MM-DD HH:MM:SS` in UTC, for tables.
pub fn utc(ms: i64) -> String {
    formatted(ms, "%Y-%m-%d %H:%M:%S")
}

/// Milliseconds since the Unix epoch as RFC 3339 in UTC, to the second
/// (`2026-05-01T09:30:00Z`), for JSON.
pub fn utc_rfc3339(ms: i64) -> String {
    formatted(ms, "%Y-%m-%dT%H:%M:%SZ")
}

/// `ms` in UTC as `format` writes it; the milliseconds themselves beyond the years jiff
/// represents (±9999), which no ledger time reaches.
fn formatted(ms: i64, format: &str) -> String {
    match Timestamp::from_millisecond(ms) {
        Ok(time) => time.strftime(format).to_string(),
        Err(_) => format!("{ms} ms"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_shown_in_utc() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00");
        assert_eq!(utc(1_760_000_000_123), "2025-10-09 08:53:20");
        assert_eq!(utc(4_107_542_399_000), "2100-02-28 23:59:59");
        assert_eq!(utc(-1_000), "1969-12-31 23:59:59");
    }

    #[test]
    fn json_timestamps_are_rfc_3339() {
        assert_eq!(utc_rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_rfc3339(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(utc_rfc3339(1_777_628_400_999), "2026-05-01T09:40:00Z");
        assert_eq!(utc_rfc3339(-1), "1969-12-31T23:59:59Z");
    }
}
