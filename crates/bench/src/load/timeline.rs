//! The per-second tables of the experiments that follow runs side by side over time
//! (`bench expiry`, `bench warmup`).

use std::fmt::Write as _;

/// One line per second, as many as the shortest run has (`seconds`), with a column group
/// per run: `names` head the groups (centred over `width` characters), `columns` is each
/// group's header and `cells(run, second)` its cells.
pub(crate) fn timeline(
    names: &[&str],
    width: usize,
    columns: &str,
    seconds: usize,
    cells: impl Fn(usize, usize) -> String,
) -> String {
    let mut t = String::new();
    let _ = write!(t, "\n{:>4}", "");
    for name in names {
        let _ = write!(t, "  {:^width$}", format!("--- {name} ---"));
    }
    let _ = write!(t, "\n{:>4}", "sec");
    for _ in names {
        let _ = write!(t, "  {columns}");
    }
    t.push('\n');
    for i in 0..seconds {
        let _ = write!(t, "{:>4}", i + 1);
        for run in 0..names.len() {
            let _ = write!(t, "  {}", cells(run, i));
        }
        t.push('\n');
    }
    t
}

#[cfg(test)]
mod tests {
    use super::timeline;

    #[test]
    fn one_line_per_second_with_a_group_per_run() {
        let t = timeline(&["a", "bb"], 11, "    x    y", 2, |run, i| {
            format!("{:>5} {:>4}", run, i * 10)
        });
        let want = "\n       --- a ---   --- bb --- \n \
                    sec      x    y      x    y\n   \
                    1      0    0      1    0\n   \
                    2      0   10      1   10\n";
        assert_eq!(t, want);
    }
}
