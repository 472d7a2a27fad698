//! The [`Report`] of one replay: overall and per-window counters, with a
//! human-readable table (`Display`), a one-line summary, a per-window CSV and the JSON
//! fields that `sim.json` and the bench's `replay.json` write per row (`Serialize`). Not
//! here: the counting itself (`replay`).

use std::fmt;
use std::io::{self, Write};
use std::time::Duration;

use serde::ser::{SerializeStruct, SerializeTuple};
use serde::{Serialize, Serializer};

/// Gets and misses in one window of trace time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WindowStats {
    /// Window start, seconds since the first request.
    pub start: u32,
    /// Gets in the window.
    pub gets: u64,
    /// Get misses in the window.
    pub misses: u64,
}

impl WindowStats {
    /// Misses over gets (0 when there were no gets).
    pub fn miss_ratio(&self) -> f64 {
        ratio(self.misses, self.gets)
    }
}

/// `n`, or `-` for a figure the cache does not report.
pub(crate) fn or_dash(n: Option<u64>) -> String {
    n.map_or_else(|| "-".to_string(), |n| n.to_string())
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// What one replay did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// The cache's name.
    pub cache: String,
    /// Requests replayed.
    pub requests: u64,
    /// `get`/`gets` requests.
    pub gets: u64,
    /// Gets that hit.
    pub hits: u64,
    /// Gets that missed.
    pub misses: u64,
    /// Value bytes asked for by gets.
    pub get_bytes: u64,
    /// Value bytes of gets that missed.
    pub miss_bytes: u64,
    /// Explicit writes applied as sets.
    pub sets: u64,
    /// Look-aside fills after misses.
    pub fills: u64,
    /// Deletes.
    pub deletes: u64,
    /// Requests counted but not applied (append, prepend, incr, decr).
    pub other: u64,
    /// Seconds of trace time covered (last minus first request time).
    pub sim_secs: u32,
    /// Window width in seconds.
    pub window_secs: u32,
    /// Per-window gets and misses, contiguous from time 0.
    pub windows: Vec<WindowStats>,
    /// The cache's own memory figure at the end, if it reports one.
    pub memory_used: Option<u64>,
    /// Items the cache held at the end, if it reports them.
    pub items: Option<u64>,
    /// Wall-clock time the replay took.
    pub elapsed: Duration,
}

impl Report {
    /// The index of the window, `width` seconds wide, that holds `time` (seconds since the
    /// first request), adding empty windows up to it.
    #[inline]
    pub fn window_for(&mut self, time: u32, width: u32) -> usize {
        let w = (time / width) as usize;
        if self.windows.len() <= w {
            let len = self.windows.len();
            self.windows.extend((len..=w).map(|i| WindowStats {
                start: i as u32 * width,
                ..WindowStats::default()
            }));
        }
        w
    }

    /// Misses over gets.
    pub fn miss_ratio(&self) -> f64 {
        ratio(self.misses, self.gets)
    }

    /// Missed value bytes over requested value bytes.
    pub fn byte_miss_ratio(&self) -> f64 {
        ratio(self.miss_bytes, self.get_bytes)
    }

    /// Writes `window_start,gets,misses,miss_ratio` with a header row.
    pub fn write_window_csv(&self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(out, "window_start,gets,misses,miss_ratio")?;
        for w in &self.windows {
            let (start, gets, misses, ratio) = (w.start, w.gets, w.misses, w.miss_ratio());
            writeln!(out, "{start},{gets},{misses},{ratio:.6}")?;
        }
        Ok(())
    }

    /// One line: name, gets, misses, ratios, writes, wall time, and the items and bytes held
    /// at the end (`-` where the cache does not report them).
    pub fn summary_line(&self) -> String {
        format!(
            "{}: requests={} gets={} misses={} miss_ratio={:.4} byte_miss_ratio={:.4} sets={} fills={} deletes={} other={} sim_secs={} wall={:.2}s items={} bytes={}",
            self.cache,
            self.requests,
            self.gets,
            self.misses,
            self.miss_ratio(),
            self.byte_miss_ratio(),
            self.sets,
            self.fills,
            self.deletes,
            self.other,
            self.sim_secs,
            self.elapsed.as_secs_f64(),
            or_dash(self.items),
            or_dash(self.memory_used),
        )
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "cache {}: {} requests over {} s of trace time",
            self.cache, self.requests, self.sim_secs
        )?;
        writeln!(f, "  {:<16}{:>14}", "gets", self.gets)?;
        writeln!(f, "  {:<16}{:>14}", "hits", self.hits)?;
        writeln!(f, "  {:<16}{:>14}", "misses", self.misses)?;
        writeln!(f, "  {:<16}{:>14.4}", "miss ratio", self.miss_ratio())?;
        writeln!(
            f,
            "  {:<16}{:>14.4}",
            "byte miss ratio",
            self.byte_miss_ratio()
        )?;
        writeln!(f, "  {:<16}{:>14}", "sets", self.sets)?;
        writeln!(f, "  {:<16}{:>14}", "fills", self.fills)?;
        writeln!(f, "  {:<16}{:>14}", "deletes", self.deletes)?;
        writeln!(f, "  {:<16}{:>14}", "other", self.other)?;
        if let Some(m) = self.memory_used {
            writeln!(f, "  {:<16}{:>14}", "memory used (B)", m)?;
        }
        if let Some(n) = self.items {
            writeln!(f, "  {:<16}{:>14}", "items held", n)?;
        }
        writeln!(
            f,
            "  {:<16}{:>14.3}",
            "wall time (s)",
            self.elapsed.as_secs_f64()
        )?;
        writeln!(
            f,
            "  {:>12} {:>12} {:>12} {:>10}",
            "window_start", "gets", "misses", "miss_ratio"
        )?;
        for w in &self.windows {
            let (start, gets, misses, ratio) = (w.start, w.gets, w.misses, w.miss_ratio());
            writeln!(f, "  {start:>12} {gets:>12} {misses:>12} {ratio:>10.4}")?;
        }
        Ok(())
    }
}

/// A window as JSON: `[start, gets, misses, miss_ratio]`.
impl Serialize for WindowStats {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut t = serializer.serialize_tuple(4)?;
        t.serialize_element(&self.start)?;
        t.serialize_element(&self.gets)?;
        t.serialize_element(&self.misses)?;
        t.serialize_element(&self.miss_ratio())?;
        t.end()
    }
}

/// The counters as JSON fields, with both ratios and `wall_secs` for `elapsed`; not
/// `cache`, nor the byte counts behind `byte_miss_ratio`. Meant to be flattened into a row
/// that names the cache (`#[serde(flatten)]`), as `sim.json` and `replay.json` do.
impl Serialize for Report {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("Report", 16)?;
        s.serialize_field("requests", &self.requests)?;
        s.serialize_field("gets", &self.gets)?;
        s.serialize_field("hits", &self.hits)?;
        s.serialize_field("misses", &self.misses)?;
        s.serialize_field("miss_ratio", &self.miss_ratio())?;
        s.serialize_field("byte_miss_ratio", &self.byte_miss_ratio())?;
        s.serialize_field("sets", &self.sets)?;
        s.serialize_field("fills", &self.fills)?;
        s.serialize_field("deletes", &self.deletes)?;
        s.serialize_field("other", &self.other)?;
        s.serialize_field("sim_secs", &self.sim_secs)?;
        s.serialize_field("memory_used", &self.memory_used)?;
        s.serialize_field("items", &self.items)?;
        s.serialize_field("wall_secs", &self.elapsed.as_secs_f64())?;
        s.serialize_field("window_secs", &self.window_secs)?;
        s.serialize_field("windows", &self.windows)?;
        s.end()
    }
}

#[cfg(test)]
mod tests;
