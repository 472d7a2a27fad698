//! How often an item's reads may count: the frequency counter's window, scaled to the time the
//! cache takes to write a heap's worth of new items.
//!
//! Segcache's counter (ASFC, §3.4) counts at most one access per item per second, and the
//! merges read it (and the segments' `reads`, which the second chance reads) once per pass of
//! the merge cursor, that is about once per heap turnover. How many seconds a turnover lasts
//! depends on the request rate and the heap's size, not on the workload's shape: the look-aside
//! stream of BENCHMARKS.md at 1 GiB takes about 13 s per turnover at 960,000 requests/s and
//! about 210 s on the same requests replayed at 60,000/s. Counted per second, an item read
//! every second counted 210 times per turnover on the replay against 13 on the fast stream,
//! and a segment's `reads` grew alike: merges passed over nearly every segment that held a few
//! read items, so the windows they ranked were made of new segments only, and sizes ceased to
//! matter against counts (memfleet sim: 0.2251 at 960,000/s, 0.2336 on the 60,000/s replay,
//! 5.59M items held against 4.85M).
//!
//! So the window is a power of two seconds near 1/[`WINDOWS_PER_TURNOVER`] of the last
//! turnover (never below one second): an access counts at most once per window, whatever the
//! rate. The turnover is measured from the segments writers open: every time as many have been
//! opened as the heap holds, the seconds since the last such time are a turnover. Until the
//! first one the window is a second, as the paper's. A race between writers may lose a
//! measurement; the window is a hint, so relaxed atomics suffice.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// The counting window is about this fraction of a heap turnover (on the look-aside stream of
/// BENCHMARKS.md, a turnover of 11 s at 64 MiB keeps the one-second window that was tuned
/// there).
const WINDOWS_PER_TURNOVER: f64 = 16.0;

/// The longest window, 2^[`MAX_SHIFT`] seconds. The hash chains keep their access second in 16
/// bits, so a window must divide 65,536 s.
const MAX_SHIFT: u32 = 10;

/// The counting window (see the module docs).
pub(crate) struct CountWindow {
    /// log2 of the window, in seconds.
    shift: AtomicU32,
    /// Segments opened for writing, ever.
    opened: AtomicU64,
    /// The second the current turnover began.
    start: AtomicU32,
    /// Segments in the heap: one turnover's worth of opened segments.
    segments: u64,
}

impl CountWindow {
    /// A one-second window for a heap of `segments`, whose first turnover begins at `now`.
    pub fn new(segments: usize, now: u32) -> CountWindow {
        CountWindow {
            shift: AtomicU32::new(0),
            opened: AtomicU64::new(0),
            start: AtomicU32::new(now),
            segments: segments.max(1) as u64,
        }
    }

    /// log2 of the window in seconds: two seconds `a` and `b` are in the same window when
    /// `a >> shift == b >> shift`.
    #[inline]
    pub fn shift(&self) -> u32 {
        self.shift.load(Ordering::Relaxed)
    }

    /// A writer opened a segment at `now`.
    pub fn opened(&self, now: u32) {
        let n = self.opened.fetch_add(1, Ordering::Relaxed) + 1;
        if !n.is_multiple_of(self.segments) {
            return;
        }
        let start = self.start.swap(now, Ordering::Relaxed);
        self.shift
            .store(shift_for(now.saturating_sub(start)), Ordering::Relaxed);
    }
}

/// The window's shift for a turnover of `secs` seconds: log2 of `secs` /
/// [`WINDOWS_PER_TURNOVER`], rounded to the nearest integer, between 0 and [`MAX_SHIFT`].
fn shift_for(secs: u32) -> u32 {
    let windows = f64::from(secs) / WINDOWS_PER_TURNOVER;
    if windows <= 1.0 {
        return 0;
    }
    (windows.log2().round() as u32).min(MAX_SHIFT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_follows_the_turnover() {
        assert_eq!(shift_for(0), 0);
        assert_eq!(shift_for(13), 0);
        assert_eq!(shift_for(22), 0); // 1.375 windows of a second: rounds to one
        assert_eq!(shift_for(23), 1); // 1.44: nearer two
        assert_eq!(shift_for(64), 2);
        assert_eq!(shift_for(210), 4); // 13.1 s: 16 s
        assert_eq!(shift_for(u32::MAX), MAX_SHIFT);
    }

    #[test]
    fn a_turnover_is_a_heap_of_opened_segments() {
        let w = CountWindow::new(4, 100);
        for _ in 0..3 {
            w.opened(130);
        }
        assert_eq!(w.shift(), 0, "no turnover yet");
        w.opened(228); // 128 s for four segments: 8 s windows
        assert_eq!(w.shift(), 3);
        for _ in 0..4 {
            w.opened(240); // 12 s: back to one second
        }
        assert_eq!(w.shift(), 0);
    }
}
