//! The command line's plain tables (`intents list`, `flags list`, the bench reports): columns
//! two spaces apart, no borders, no trailing spaces, so that a line splits on whitespace into
//! its cells and reads well in a terminal, a log or a diff. Callers escape control characters
//! in their cells (`intentgate_core::text::printable`) before they get here.

use comfy_table::presets::NOTHING;
use comfy_table::{CellAlignment, ContentArrangement, Table};

/// How a column's cells sit in its width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// `rows` (the first of them the header, if any) as lines; column `i` aligned as `align[i]`,
/// left where `align` has no entry. Cells are never wrapped: a long cell widens its column.
pub fn render<R, C>(rows: R, align: &[Align]) -> String
where
    R: IntoIterator,
    R::Item: IntoIterator<Item = C>,
    C: Into<comfy_table::Cell>,
{
    let mut table = Table::new();
    table
        .load_preset(NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled);
    for row in rows {
        table.add_row(row);
    }
    let count = table.column_count();
    for (index, column) in table.column_iter_mut().enumerate() {
        let last = index + 1 == count;
        column.set_padding((0, if last { 0 } else { 2 }));
        if align.get(index) == Some(&Align::Right) {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
    let mut text = String::new();
    for line in table.lines() {
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_two_spaces_apart_and_lines_end_with_their_last_cell() {
        let text = render(
            [
                ["TOOL", "CALLS", "REASON"],
                ["refund_order", "3", ""],
                ["x", "12", "why"],
            ],
            &[Align::Left, Align::Right],
        );
        assert_eq!(
            text,
            "TOOL          CALLS  REASON\n\
             refund_order      3\n\
             x                12  why\n"
        );
    }
}
