//! The outcome statuses of a run as one line of the report, which the storm's section
//! (`report.rs`) and the incident's (`incident.rs`) both print.

use std::collections::BTreeMap;

/// Statuses with their counts, the most frequent first: `done 424, awaiting_approval 212`.
pub fn summary(statuses: &BTreeMap<String, usize>) -> String {
    let mut entries: Vec<(&String, &usize)> = statuses.iter().collect();
    entries.sort_by(|x, y| y.1.cmp(x.1).then(x.0.cmp(y.0)));
    entries
        .iter()
        .map(|(status, count)| format!("{status} {count}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_frequent_status_comes_first_and_ties_read_alphabetically() {
        let statuses = BTreeMap::from([
            ("awaiting_approval".to_owned(), 212),
            ("done".to_owned(), 424),
            ("already_done".to_owned(), 212),
        ]);
        assert_eq!(
            summary(&statuses),
            "done 424, already_done 212, awaiting_approval 212"
        );
    }
}
