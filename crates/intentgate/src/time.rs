//! Times as the command line prints them: UTC, from the milliseconds the ledger stores,
//! without a date library (one conversion, tested below).

/// Milliseconds since the Unix epoch as `YYYY-MM-DD HH:MM:SS` in UTC, for tables.
pub fn utc(ms: i64) -> String {
    let (year, month, day, hour, minute, second) = parts(ms);
    format!("{year:04}-{month:02}-{day:02} {hour:02}:{minute:02}:{second:02}")
}

/// Milliseconds since the Unix epoch as RFC 3339 in UTC, to the second
/// (`2026-05-01T09:30:00Z`), for JSON.
pub fn utc_rfc3339(ms: i64) -> String {
    let (year, month, day, hour, minute, second) = parts(ms);
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}Z")
}

fn parts(ms: i64) -> (i64, u32, u32, i64, i64, i64) {
    let seconds = ms.div_euclid(1000);
    let (days, second_of_day) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    (
        year,
        month,
        day,
        second_of_day / 3600,
        second_of_day % 3600 / 60,
        second_of_day % 60,
    )
}

/// The proleptic Gregorian date of a day counted from 1970-01-01 (Howard Hinnant's
/// `civil_from_days`: eras of 400 years, years starting in March so leap days come last).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_from_march + 2) / 5 + 1) as u32;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
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
