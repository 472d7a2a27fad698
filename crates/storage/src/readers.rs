//! Reader counts: how many threads are inside each segment's bytes, reading an item or
//! writing one they reserved, so that a segment is retired only after they left.
//!
//! Every read takes and drops a reference on its item's segment. With one counter per
//! segment, threads reading the same hot segment bounce its cache line between their cores
//! on every get, and the line's transfers, not the work, bound the throughput (gets of a
//! Zipf workload on 16 cores: 47 Mops/s with one counter, 73 striped). So the counts are in
//! [`STRIPES`] stripes, and each handle counts in its own (`Handle::stripe`, round-robin):
//! up to that many threads never write a line another one writes.
//!
//! A stripe is one array of every segment's counter, 16 to a cache line: a thread's counts
//! sit together, dense (4 bytes a segment: the lines a thread touches stay in its cache and
//! its TLB, where a line per segment and stripe spread them over a megabyte per thousand
//! segments and cost a single thread a fifth of its writes), and apart from every other
//! stripe's. Retirement waits for every stripe to drain.
//!
//! The protocol is a store-then-load handshake per stripe, both sides `SeqCst`: a reader
//! increments its stripe, then checks that the segment is still accessible; retirement
//! clears `accessible`, then waits for each stripe to read 0. A reader whose increment
//! retirement does not see sees `accessible` false and backs out; so once a stripe read 0
//! after the store, nobody enters through it again. `loom/tests/loom_protocol.rs` model-checks it
//! (two stripes under loom, the handles of its threads in different ones).

use crate::segment::SegmentHeader;
use crate::sync::atomic::AtomicU32;
use crate::sync::{seq_cst_handshake, spin_wait};
use std::sync::atomic::Ordering;

/// Stripes of reader counts (threads up to this many never share a counter's line).
#[cfg(not(loom))]
pub const STRIPES: usize = 16;
/// Two under loom: enough for its threads to count in different stripes.
#[cfg(loom)]
pub const STRIPES: usize = 2;

/// Counters per cache line.
const PER_LINE: usize = 16;

/// One cache line of one stripe's counters.
#[repr(align(64))]
struct Line([AtomicU32; PER_LINE]);

/// Every segment's reader count, in [`STRIPES`] stripes.
pub(crate) struct ReaderCounts {
    lines: Box<[Line]>,
    lines_per_stripe: usize,
}

impl ReaderCounts {
    /// Counts for `segments` segments, all 0.
    pub fn new(segments: usize) -> ReaderCounts {
        let lines_per_stripe = segments.div_ceil(PER_LINE).max(1);
        ReaderCounts {
            lines: (0..lines_per_stripe * STRIPES)
                .map(|_| Line(std::array::from_fn(|_| AtomicU32::new(0))))
                .collect(),
            lines_per_stripe,
        }
    }

    #[inline]
    fn count(&self, seg: u32, stripe: usize) -> &AtomicU32 {
        let seg = seg as usize;
        &self.lines[(stripe % STRIPES) * self.lines_per_stripe + seg / PER_LINE].0[seg % PER_LINE]
    }

    /// Takes a reference on `seg` (whose header is `header`) in `stripe`; fails when the
    /// segment is being retired.
    #[inline]
    pub fn acquire(&self, header: &SegmentHeader, seg: u32, stripe: usize) -> bool {
        let count = self.count(seg, stripe);
        count.fetch_add(1, Ordering::SeqCst);
        seq_cst_handshake();
        if header.accessible.load(Ordering::SeqCst) {
            true
        } else {
            count.fetch_sub(1, Ordering::Release);
            false
        }
    }

    /// Drops a reference on `seg` taken in `stripe`.
    #[inline]
    pub fn release(&self, seg: u32, stripe: usize) {
        self.count(seg, stripe).fetch_sub(1, Ordering::Release);
    }

    /// Makes `seg` inaccessible and waits until no reader or writer is inside.
    pub fn drain(&self, header: &SegmentHeader, seg: u32) {
        header.accessible.store(false, Ordering::SeqCst);
        seq_cst_handshake();
        let mut spins = 0u32;
        for stripe in 0..STRIPES {
            let count = self.count(seg, stripe);
            while count.load(Ordering::SeqCst) != 0 {
                spin_wait(&mut spins, 64);
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn stripes_are_apart_and_segments_dense() {
        let counts = ReaderCounts::new(40);
        let addr = |seg, stripe| counts.count(seg, stripe) as *const AtomicU32 as usize;
        // A stripe's counters are consecutive words...
        assert_eq!(addr(1, 3) - addr(0, 3), 4);
        assert_eq!(addr(39, 3) - addr(0, 3), 39 * 4);
        // ...and no two stripes share a cache line.
        for a in 0..STRIPES {
            for b in 0..STRIPES {
                if a != b {
                    for seg in [0, 15, 16, 39] {
                        assert_ne!(addr(seg, a) / 64, addr(seg, b) / 64);
                        assert_ne!(addr(seg, a) / 64, addr(39 - seg, b) / 64);
                    }
                }
            }
        }
    }

    #[test]
    fn a_drained_segment_refuses_readers_and_reopens() {
        let header = SegmentHeader::new();
        header.accessible.store(true, Ordering::SeqCst);
        let counts = ReaderCounts::new(4);
        assert!(counts.acquire(&header, 2, 5));
        assert!(counts.acquire(&header, 2, 7));
        counts.release(2, 5);
        counts.release(2, 7);
        counts.drain(&header, 2);
        assert!(!counts.acquire(&header, 2, 5));
        assert_eq!(counts.count(2, 5).load(Ordering::SeqCst), 0);
        header.accessible.store(true, Ordering::SeqCst);
        assert!(counts.acquire(&header, 2, 0));
    }
}
