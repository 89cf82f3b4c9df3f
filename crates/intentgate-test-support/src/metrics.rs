//! Samples read from Prometheus text (`GET /metrics`), by series: a name with its labels
//! exactly as the exposition writes them.

use std::fmt::Debug;
use std::str::FromStr;

/// The value of the sample whose name and labels are `series`, if the text has it.
pub fn sample<T>(text: &str, series: &str) -> Option<T>
where
    T: FromStr,
    T::Err: Debug,
{
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map(|value| value.parse().unwrap())
}

/// The value of the sample `series`, which the text must have.
pub fn expect_sample<T>(text: &str, series: &str) -> T
where
    T: FromStr,
    T::Err: Debug,
{
    sample(text, series).unwrap_or_else(|| panic!("no {series} series in:\n{text}"))
}

/// Every sample of the family `name` (its lines that start with `name{` or `name `).
pub fn samples<'t>(text: &'t str, name: &str) -> Vec<&'t str> {
    text.lines()
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .collect()
}
