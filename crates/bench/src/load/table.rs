//! The column-aligned tables the experiments print: each column's heading, width and
//! alignment are declared once ([`Column`]), so a row cannot drift from its heading. Cells
//! are anything printable; numbers that need a precision are formatted by the caller. Not
//! here: the per-second tables with a column group per run (`timeline`), load's table
//! (`memfleet_loadgen::report`).

use std::fmt::{Display, Write as _};

/// A column: its heading, its width, and whether cells are aligned left (names) or right
/// (numbers).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Column {
    heading: &'static str,
    width: usize,
    left: bool,
}

impl Column {
    /// A column of names.
    pub(crate) const fn left(heading: &'static str, width: usize) -> Column {
        Column {
            heading,
            width,
            left: true,
        }
    }

    /// A column of numbers.
    pub(crate) const fn right(heading: &'static str, width: usize) -> Column {
        Column {
            heading,
            width,
            left: false,
        }
    }
}

/// The headings of `columns`, as one line (no newline).
pub(crate) fn heading(columns: &[Column]) -> String {
    let cells: Vec<&dyn Display> = columns.iter().map(|c| &c.heading as &dyn Display).collect();
    line(columns, &cells)
}

/// One row of `columns` (no newline): each cell padded to its column's width, a space
/// between cells.
pub(crate) fn line(columns: &[Column], cells: &[&dyn Display]) -> String {
    debug_assert_eq!(columns.len(), cells.len(), "a cell per column");
    let mut out = String::new();
    for (i, (c, cell)) in columns.iter().zip(cells).enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let (cell, width) = (cell.to_string(), c.width);
        let _ = if c.left {
            write!(out, "{cell:<width$}")
        } else {
            write!(out, "{cell:>width$}")
        };
    }
    out
}

/// A table being written: the heading line, then a line per [`Table::row`].
pub(crate) struct Table<'a> {
    columns: &'a [Column],
    text: String,
}

impl<'a> Table<'a> {
    /// A table of `columns`, its heading written.
    pub(crate) fn new(columns: &'a [Column]) -> Table<'a> {
        Table {
            columns,
            text: heading(columns) + "\n",
        }
    }

    /// Adds a row.
    pub(crate) fn row(&mut self, cells: &[&dyn Display]) {
        self.text += &line(self.columns, cells);
        self.text.push('\n');
    }

    /// The table's text, every line ending in a newline.
    pub(crate) fn text(self) -> String {
        self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_line_up_under_their_headings() {
        const COLUMNS: [Column; 3] = [
            Column::left("server", 8),
            Column::right("ops/s", 7),
            Column::right("p99 µs", 7),
        ];
        let mut t = Table::new(&COLUMNS);
        t.row(&[&"memfleet", &format!("{:.0}", 12345.6), &17]);
        t.row(&[&"mc", &"-", &5]);
        assert_eq!(
            t.text(),
            "server     ops/s  p99 µs\n\
             memfleet   12346      17\n\
             mc             -       5\n"
        );
        assert_eq!(line(&COLUMNS[..1], &[&"a"]), "a       ");
    }
}
