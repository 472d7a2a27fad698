//! Segment headers: the metadata the items of one segment share.
//!
//! A segment's life:
//!
//! ```text
//!   FREE --(a writer takes it)--> ACTIVE --(full, or too wide a deadline spread)--> SEALED
//!     ^                              |                                               |
//!     |                              +------(expired / evicted: sealed by others)----+
//!     |                                                                              v
//!     +----(reader count reaches 0, hash entries removed)---- RETIRING <---- MERGING (sources)
//! ```
//!
//! **Invariants** (the heap's safety rests on them):
//! * Bytes below `write_offset` are immutable while the segment is accessible: items are
//!   appended, never updated in place.
//! * A writer reserves space by a CAS on `write_offset`, holding a reader reference while it
//!   writes and publishes; a sealer sets the SEALED bit and then waits for the reader count
//!   to drain, so after that wait every reserved item is complete and published.
//! * A segment is reused only after it was made inaccessible, its reader count drained, and
//!   every hash entry pointing into it was removed; `epoch` then changes, so a writer that
//!   still remembers it as its active segment notices.

use crate::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8};
use crate::sync::seq_cst_handshake;
use std::sync::atomic::Ordering;

/// No segment (chain ends).
pub const NONE: u32 = u32::MAX;

/// The deadline range of an empty segment: min `u32::MAX`, max 0.
const EMPTY_RANGE: u64 = u32::MAX as u64;

/// Set in `write_offset` when the segment takes no more writes.
pub const SEALED: u32 = 1 << 31;

/// Segment states (see the module docs).
pub mod state {
    pub const FREE: u8 = 0;
    pub const ACTIVE: u8 = 1;
    pub const SEALED: u8 = 2;
    pub const MERGING: u8 = 3;
    pub const RETIRING: u8 = 4;
}

/// Where a new cache line starts in a `repr(C)` struct: a field of this type is placed at a
/// multiple of 64 bytes and takes no room.
#[repr(align(64))]
#[derive(Default)]
struct LineStart;

/// Shared metadata of one segment, in two parts that different threads write, each on a
/// cache line of its own so that one part's writes do not evict the other's readers (its
/// reader count is elsewhere: `readers.rs`):
/// 1. what every read of an item checks (`accessible`, the deadlines, the generation, the
///    epoch), written only when the segment changes state or its deadline range widens;
/// 2. what writers appending to it change on every write (`write_offset`, `writers`, the
///    live counts; `reads` too, bumped at most once per item per counting window): an active
///    segment's hot line, which readers of its items no longer fetch after each write.
#[repr(C, align(64))]
pub struct SegmentHeader {
    /// Readers may use the segment only while this is true.
    pub accessible: AtomicBool,
    /// One of [`state`].
    pub state: AtomicU8,
    /// The TTL bucket whose chain holds the segment.
    pub ttl_bucket: AtomicU32,
    /// When the segment was opened (merges inherit the oldest source's time).
    pub create_at: AtomicU32,
    /// The earliest deadline of any item in it (the segment's expiry) in the low half, the
    /// latest in the high half (the spread is bounded, see `ttl.rs`). One word, so that
    /// writers sharing an active segment widen the range only as far as the tolerance allows.
    deadlines: AtomicU64,
    /// The flush generation the segment was opened in; older generations are flushed.
    pub generation: AtomicU32,
    /// Changes every time the segment is freed.
    pub epoch: AtomicU32,
    /// Chain links, changed only under the TTL bucket's chain lock.
    pub prev: AtomicU32,
    pub next: AtomicU32,
    _writes: LineStart,
    /// Bytes used, plus the [`SEALED`] bit.
    pub write_offset: AtomicU32,
    /// Writers that may hold a reserved, unpublished range (active segments are shared by
    /// handles, so a segment can be sealed while another handle is still writing into it).
    /// Once the SEALED bit is set and this is 0, every reserved item is published.
    pub writers: AtomicU32,
    /// Items (and their bytes) that the hash table still points to.
    pub live_items: AtomicU32,
    pub live_bytes: AtomicU32,
    /// Counted reads of its items (at most one per item per second) since it was opened or
    /// last passed over by a merge (see `evict.rs`).
    pub reads: AtomicU32,
}

impl SegmentHeader {
    pub fn new() -> SegmentHeader {
        SegmentHeader {
            write_offset: AtomicU32::new(0),
            _writes: LineStart,
            writers: AtomicU32::new(0),
            accessible: AtomicBool::new(false),
            state: AtomicU8::new(state::FREE),
            ttl_bucket: AtomicU32::new(0),
            create_at: AtomicU32::new(0),
            deadlines: AtomicU64::new(EMPTY_RANGE),
            generation: AtomicU32::new(0),
            epoch: AtomicU32::new(0),
            prev: AtomicU32::new(NONE),
            next: AtomicU32::new(NONE),
            live_items: AtomicU32::new(0),
            live_bytes: AtomicU32::new(0),
            reads: AtomicU32::new(0),
        }
    }

    /// How many times the segment has been freed (see `epoch`).
    #[inline]
    pub fn epoch(&self) -> u32 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Bytes written so far (without the SEALED bit).
    #[inline]
    pub fn used(&self) -> usize {
        (self.write_offset.load(Ordering::Acquire) & !SEALED) as usize
    }

    /// Prepares a free segment for use: everything reset, accessible.
    pub fn open(&self, now: u32, bucket: usize, generation: u32, next_state: u8) {
        self.write_offset.store(0, Ordering::Relaxed);
        self.ttl_bucket.store(bucket as u32, Ordering::Relaxed);
        self.create_at.store(now, Ordering::Relaxed);
        self.deadlines.store(EMPTY_RANGE, Ordering::Relaxed);
        self.generation.store(generation, Ordering::Relaxed);
        self.prev.store(NONE, Ordering::Relaxed);
        self.next.store(NONE, Ordering::Relaxed);
        self.live_items.store(0, Ordering::Relaxed);
        self.live_bytes.store(0, Ordering::Relaxed);
        self.reads.store(0, Ordering::Relaxed);
        self.state.store(next_state, Ordering::Release);
        self.accessible.store(true, Ordering::SeqCst);
    }

    /// Is every item in this segment past its deadline (or flushed)?
    #[inline]
    pub fn is_dead(&self, now: u32, generation: u32) -> bool {
        self.min_deadline() <= now || self.generation.load(Ordering::Acquire) != generation
    }

    /// Stops new writes. Returns the final byte count.
    pub fn seal(&self) -> usize {
        (self.write_offset.fetch_or(SEALED, Ordering::SeqCst) & !SEALED) as usize
    }

    /// Sealed, and every item reserved in it published: its bytes below `used()` are final,
    /// so a merge may read them while readers go on reading.
    #[inline]
    pub fn is_settled(&self) -> bool {
        self.write_offset.load(Ordering::SeqCst) & SEALED != 0 && {
            seq_cst_handshake();
            self.writers.load(Ordering::SeqCst) == 0
        }
    }

    /// The earliest deadline of any item: the segment's expiry (`u32::MAX` when empty).
    #[inline]
    pub fn min_deadline(&self) -> u32 {
        self.deadlines.load(Ordering::Acquire) as u32
    }

    /// The latest deadline of any item (0 when empty).
    #[inline]
    pub fn max_deadline(&self) -> u32 {
        (self.deadlines.load(Ordering::Acquire) >> 32) as u32
    }

    /// Sets the deadline range (a restored segment).
    pub fn set_deadlines(&self, min: u32, max: u32) {
        self.deadlines
            .store(u64::from(min) | (u64::from(max) << 32), Ordering::Release);
    }

    /// Widens the deadline range to include `lo..=hi`.
    #[inline]
    pub fn include_deadlines(&self, lo: u32, hi: u32) {
        let _ = self.try_include_deadlines(lo, hi, u32::MAX);
    }

    /// Widens the deadline range to include `deadline` if the range's spread then stays
    /// within `tolerance`; false (nothing changed) otherwise. Atomic with respect to other
    /// writers of the same segment, so concurrent writers never widen it beyond `tolerance`.
    #[inline]
    pub fn try_include_deadline(&self, deadline: u32, tolerance: u32) -> bool {
        self.try_include_deadlines(deadline, deadline, tolerance)
    }

    fn try_include_deadlines(&self, lo: u32, hi: u32, tolerance: u32) -> bool {
        let mut cur = self.deadlines.load(Ordering::Acquire);
        loop {
            let min = (cur as u32).min(lo);
            let max = ((cur >> 32) as u32).max(hi);
            if max.saturating_sub(min) > tolerance {
                return false;
            }
            let new = u64::from(min) | (u64::from(max) << 32);
            if new == cur {
                return true;
            }
            match self.deadlines.compare_exchange_weak(
                cur,
                new,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Records a newly published item.
    #[inline]
    pub fn add_live(&self, bytes: usize) {
        self.live_items.fetch_add(1, Ordering::Relaxed);
        self.live_bytes.fetch_add(bytes as u32, Ordering::Relaxed);
    }

    /// Records an item the hash table no longer points to.
    #[inline]
    pub fn remove_live(&self, bytes: usize) {
        self.live_items.fetch_sub(1, Ordering::Relaxed);
        self.live_bytes.fetch_sub(bytes as u32, Ordering::Relaxed);
    }
}

impl Default for SegmentHeader {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// What readers check and what writers change are on cache lines of their own (see
    /// `SegmentHeader`).
    #[test]
    fn header_parts_are_on_separate_lines() {
        let line = |offset: usize| offset / 64;
        let read_mostly = [
            offset_of!(SegmentHeader, accessible),
            offset_of!(SegmentHeader, deadlines),
            offset_of!(SegmentHeader, generation),
            offset_of!(SegmentHeader, epoch),
            offset_of!(SegmentHeader, next),
        ];
        let written = [
            offset_of!(SegmentHeader, write_offset),
            offset_of!(SegmentHeader, writers),
            offset_of!(SegmentHeader, live_items),
            offset_of!(SegmentHeader, live_bytes),
            offset_of!(SegmentHeader, reads),
        ];
        assert!(read_mostly.iter().all(|&o| line(o) == 0));
        assert!(written.iter().all(|&o| line(o) == 1));
        assert_eq!(size_of::<SegmentHeader>(), 128);
    }
}
