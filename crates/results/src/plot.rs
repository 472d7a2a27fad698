//! PNG figures for `memfleet bench` and `memfleet sim` results: line charts (miss ratio vs
//! memory, miss ratio over time) and latency CDFs, drawn with `plotters`' bitmap backend.
//!
//! Text is rendered with a TTF bundled in the crate (DejaVu Sans, Bitstream Vera license,
//! next to it in `assets/fonts/`) through plotters' `ab_glyph` feature, so a machine with no
//! fonts installed and no fontconfig (a fresh CI container) draws the same labels. Not here:
//! what the numbers mean or where they come from (the scenarios), JSON ([`crate::write_json`]).

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{anyhow, bail, Context, Result};
use plotters::coord::combinators::IntoLogRange;
use plotters::coord::ranged1d::{AsRangedCoord, Ranged, ValueFormatter};
use plotters::prelude::*;
use plotters::style::FontStyle;

/// DejaVu Sans (fonts-dejavu-core 2.37); its license is `assets/fonts/DejaVuSans-LICENSE.txt`.
const FONT: &[u8] = include_bytes!("../assets/fonts/DejaVuSans.ttf");
/// The family name the bundled font is registered under: plotters' default for text.
const FAMILY: &str = "sans-serif";
/// Figure size in pixels.
const SIZE: (u32, u32) = (1024, 640);

/// Line colours, in the order series are drawn (distinguishable, also in greyscale print).
const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

/// One named line of a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// `(x, y)` points, drawn in the given order.
    pub points: Vec<(f64, f64)>,
}

/// Registers the bundled font once per process; plotters looks fonts up by family name.
fn ensure_font() -> Result<()> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED
        .get_or_init(|| plotters::style::register_font(FAMILY, FontStyle::Normal, FONT).is_ok());
    if ok {
        Ok(())
    } else {
        bail!("the bundled font could not be loaded")
    }
}

/// A line chart (one line per series, legend, axis labels); log_x for memory-size or latency axes.
pub fn line_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log_x: bool,
) -> Result<()> {
    let labels = Labels {
        title,
        x: x_label,
        y: y_label,
        legend: SeriesLabelPosition::UpperRight,
    };
    let x = x_range(series, log_x)?;
    let y = y_range(series);
    if log_x {
        draw(path, &labels, x.log_scale(), y, series, log_x)
    } else {
        draw(path, &labels, x, y, series, log_x)
    }
}

/// One chart of an experiment's timeline figures: its file name (without `.png`), title
/// and y axis, and how a run becomes a line of `(seconds, value)` points.
pub struct Timeline<'a, R> {
    /// File name in the output directory, without `.png`.
    pub file: &'a str,
    /// Chart title.
    pub title: &'a str,
    /// Y axis label (x is always seconds).
    pub y_label: &'a str,
    /// A run's line.
    pub points: fn(&R) -> Vec<(f64, f64)>,
}

/// The points of a per-second timeline: `(n, value)` for the n-th one-second window
/// (x is the window's end, in seconds from the start) wherever `value` has one.
pub fn per_second<T>(windows: &[T], value: impl Fn(&T) -> Option<f64>) -> Vec<(f64, f64)> {
    windows
        .iter()
        .enumerate()
        .filter_map(|(i, w)| value(w).map(|v| ((i + 1) as f64, v)))
        .collect()
}

/// Draws each [`Timeline`] as `dir/<file>.png` with one line per run (legend from `name`)
/// and returns the paths written: the figures of an experiment that compares runs over
/// time (with and without warm-up, memfleet and memcached, ...). A run with no point in a
/// chart has no line in it (the run without a gutter has no gutter hit rate), and a chart
/// no run has a point in is not drawn.
pub fn timelines<R>(
    dir: &Path,
    runs: &[R],
    name: fn(&R) -> String,
    charts: &[Timeline<'_, R>],
) -> Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    for chart in charts {
        let lines: Vec<Series> = runs
            .iter()
            .map(|run| Series {
                name: name(run),
                points: (chart.points)(run),
            })
            .filter(|line| !line.points.is_empty())
            .collect();
        if lines.is_empty() {
            continue;
        }
        let path = dir.join(format!("{}.png", chart.file));
        line_chart(&path, chart.title, "seconds", chart.y_label, &lines, false)?;
        written.push(path);
    }
    Ok(written)
}

/// Latency CDFs: each series is (percentile 0..100, microseconds) points; x is latency (log), y is percentile.
pub fn latency_cdf(path: &Path, title: &str, series: &[Series]) -> Result<()> {
    let swapped: Vec<Series> = series
        .iter()
        .map(|s| Series {
            name: s.name.clone(),
            points: s.points.iter().map(|&(p, us)| (us, p)).collect(),
        })
        .collect();
    let labels = Labels {
        title,
        x: "latency (µs, log scale)",
        y: "percentile",
        legend: SeriesLabelPosition::LowerRight,
    };
    let x = x_range(&swapped, true)?;
    draw(path, &labels, x.log_scale(), 0.0..100.0, &swapped, true)
}

struct Labels<'a> {
    title: &'a str,
    x: &'a str,
    y: &'a str,
    /// Where the legend goes: a corner the lines usually leave free.
    legend: SeriesLabelPosition,
}

/// The points that can be drawn: finite, and with a positive x on a log axis.
fn drawable(series: &Series, log_x: bool) -> impl Iterator<Item = (f64, f64)> + '_ {
    series
        .points
        .iter()
        .copied()
        .filter(move |&(x, y)| x.is_finite() && y.is_finite() && (!log_x || x > 0.0))
}

fn x_range(series: &[Series], log_x: bool) -> Result<Range<f64>> {
    let (lo, hi) = series
        .iter()
        .flat_map(|s| drawable(s, log_x))
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), (x, _)| {
            (lo.min(x), hi.max(x))
        });
    if lo > hi {
        bail!(
            "nothing to plot: no finite points{}",
            if log_x { " with x > 0" } else { "" }
        );
    }
    // A margin so that the first and last points are not drawn on the axes.
    Ok(if lo < hi && log_x {
        lo / 1.1..hi * 1.1
    } else if lo < hi {
        let pad = (hi - lo) * 0.02;
        lo - pad..hi + pad
    } else if log_x {
        lo / 2.0..hi * 2.0
    } else {
        lo - 1.0..hi + 1.0
    })
}

/// From 0 (or the lowest value, if negative) to a little above the highest, so a line at
/// the top stays visible.
fn y_range(series: &[Series]) -> Range<f64> {
    let (lo, hi) = series
        .iter()
        .flat_map(|s| drawable(s, false))
        .fold((0.0f64, f64::NEG_INFINITY), |(lo, hi), (_, y)| {
            (lo.min(y), hi.max(y))
        });
    let hi = if hi > lo { hi } else { lo + 1.0 };
    lo..hi + (hi - lo) * 0.05
}

fn draw<X>(
    path: &Path,
    labels: &Labels<'_>,
    x: X,
    y: Range<f64>,
    series: &[Series],
    log_x: bool,
) -> Result<()>
where
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    ensure_font()?;
    let failed = |e: &dyn std::fmt::Display| anyhow!("drawing {}: {e}", path.display());
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| failed(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(labels.title, (FAMILY, 26))
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(x, y)
        .map_err(|e| failed(&e))?;
    chart
        .configure_mesh()
        .x_desc(labels.x)
        .y_desc(labels.y)
        .x_label_formatter(&|v| tick(*v))
        .y_label_formatter(&|v| tick(*v))
        .label_style((FAMILY, 15))
        .axis_desc_style((FAMILY, 17))
        .draw()
        .map_err(|e| failed(&e))?;
    for (i, s) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let points: Vec<(f64, f64)> = drawable(s, log_x).collect();
        // Markers show where the measurements are when there are few of them (a sizing
        // curve of four memory sizes); on a long time series they would only be noise.
        let markers = points.len() <= 32;
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(|e| failed(&e))?
            .label(s.name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(3))
            });
        if markers {
            chart
                .draw_series(points.iter().map(|&p| Circle::new(p, 4, color.filled())))
                .map_err(|e| failed(&e))?;
        }
    }
    chart
        .configure_series_labels()
        .position(labels.legend.clone())
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FAMILY, 15))
        .draw()
        .map_err(|e| failed(&e))?;
    root.present()
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// A tick label without trailing zeros: `16`, `0.25`, `1.5`.
fn tick(v: f64) -> String {
    let text = format!("{v:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".to_string()
    } else {
        text.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_png(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("memfleet-plot-{}-{name}.png", std::process::id()))
    }

    /// The file is a PNG that decodes to a picture of more than one colour.
    fn assert_valid_png(path: &Path) {
        let bytes = std::fs::read(path).unwrap();
        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "PNG magic bytes");
        let img = image::load_from_memory_with_format(&bytes, image::ImageFormat::Png)
            .unwrap()
            .to_rgb8();
        assert_eq!(img.dimensions(), SIZE);
        let first = img.get_pixel(0, 0);
        let other = img.pixels().filter(|p| *p != first).count();
        // Lines, text and legend cover well over a thousand pixels of a 1024x640 figure.
        assert!(
            other > 1000,
            "only {other} pixels differ from the background"
        );
        std::fs::remove_file(path).unwrap();
    }

    fn sizing_curve() -> Vec<Series> {
        vec![
            Series {
                name: "memfleet".into(),
                points: vec![(16.0, 0.4), (32.0, 0.25), (64.0, 0.1), (128.0, 0.05)],
            },
            Series {
                name: "memcached".into(),
                points: vec![(16.0, 0.5), (32.0, 0.3), (64.0, 0.15), (128.0, 0.06)],
            },
        ]
    }

    #[test]
    fn line_chart_writes_a_png_on_linear_and_log_axes() {
        for log_x in [false, true] {
            let path = temp_png(&format!("line-{log_x}"));
            line_chart(
                &path,
                "miss ratio vs memory",
                "memory (MiB)",
                "miss ratio",
                &sizing_curve(),
                log_x,
            )
            .unwrap();
            assert_valid_png(&path);
        }
    }

    #[test]
    fn tick_labels_have_no_trailing_zeros() {
        assert_eq!(tick(16.0), "16");
        assert_eq!(tick(0.25), "0.25");
        assert_eq!(tick(0.0), "0");
        assert_eq!(tick(-0.0001), "0");
        assert_eq!(tick(1500.0), "1500");
    }

    #[test]
    fn latency_cdf_writes_a_png() {
        let path = temp_png("cdf");
        let series = vec![Series {
            name: "get".into(),
            points: vec![(0.0, 20.0), (50.0, 35.0), (99.0, 120.0), (100.0, 900.0)],
        }];
        latency_cdf(&path, "get latency", &series).unwrap();
        assert_valid_png(&path);
    }

    #[test]
    fn nothing_drawable_is_an_error_and_one_point_is_enough() {
        let path = temp_png("empty");
        let empty = [Series {
            name: "x".into(),
            points: vec![(0.0, 1.0), (f64::NAN, 2.0)],
        }];
        let err = line_chart(&path, "t", "x", "y", &empty, true).unwrap_err();
        assert!(err.to_string().contains("nothing to plot"), "{err}");
        let single = [Series {
            name: "x".into(),
            points: vec![(3.0, 0.5)],
        }];
        line_chart(&path, "t", "x", "y", &single, false).unwrap();
        assert_valid_png(&path);
    }
}
