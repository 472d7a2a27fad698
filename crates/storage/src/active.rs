//! The active segments: where new items are appended, a few per TTL bucket.
//!
//! Segcache gives each thread its own active segment per TTL bucket (§3.7), so writers never
//! contend. In a server whose heap holds a few hundred segments that costs capacity: every
//! active segment is on average half empty, and workers × TTL classes × ½ segment was a
//! third of a 64 MiB heap at 8 workers (the miss ratio rose from 0.29 to 0.37). Here handles
//! share them instead. Appending already reserves room with a CAS on the segment's write
//! offset (the only contended step; the bytes themselves are written outside any lock), so
//! sharing costs that CAS's cache line and nothing else. Large heaps, where half-empty
//! segments are a rounding error, get several *shards* of active segments, one per group of
//! handles, so that many workers do not all hit one write offset per TTL bucket.
//!
//! Each (shard, TTL bucket) has [`PER_BUCKET`] places: items whose TTLs fall in one bucket
//! but whose deadlines are further apart than the bucket's tolerance cannot share a segment
//! (see `ttl.rs`), so a bucket may need a few open at once. A place holds a segment id and
//! the segment's epoch when it was opened; the epoch changes when the segment is freed, so a
//! stale place is recognised and replaced. Opening a segment takes the (shard, bucket)'s
//! mutex, so two writers that find no room do not both open one.

use crate::sync::{Mutex, MutexGuard};
use crate::ttl::N_BUCKETS;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::TryLockError;

/// Segments open at once per shard and TTL bucket.
pub(crate) const PER_BUCKET: usize = 4;

/// An empty place.
const EMPTY: u64 = u64::MAX;

/// Fewest segments per shard: below this a heap has one shard, whatever the worker count.
const SEGMENTS_PER_SHARD: usize = 256;

/// Most shards.
const MAX_SHARDS: usize = 16;

/// One active segment: its id and its epoch when it was opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Active {
    pub seg: u32,
    pub epoch: u32,
}

impl Active {
    fn encode(self) -> u64 {
        (u64::from(self.seg) << 32) | u64::from(self.epoch)
    }

    fn decode(v: u64) -> Option<Active> {
        (v != EMPTY).then_some(Active {
            seg: (v >> 32) as u32,
            epoch: v as u32,
        })
    }
}

/// Every shard's active segments.
pub(crate) struct ActiveSegments {
    shards: usize,
    places: Box<[AtomicU64]>,
    open_locks: Box<[Mutex<()>]>,
}

impl ActiveSegments {
    /// The table for a heap of `segments` segments.
    pub fn new(segments: usize) -> ActiveSegments {
        let shards = (segments / SEGMENTS_PER_SHARD).clamp(1, MAX_SHARDS);
        ActiveSegments {
            shards,
            places: (0..shards * N_BUCKETS * PER_BUCKET)
                .map(|_| AtomicU64::new(EMPTY))
                .collect(),
            open_locks: (0..shards * N_BUCKETS).map(|_| Mutex::new(())).collect(),
        }
    }

    /// The shard of the `nth` handle created.
    pub fn shard_of(&self, nth: u64) -> usize {
        (nth % self.shards as u64) as usize
    }

    fn base(shard: usize, bucket: usize) -> usize {
        (shard * N_BUCKETS + bucket) * PER_BUCKET
    }

    /// The segment in place `i` of (`shard`, `bucket`), if any.
    pub fn get(&self, shard: usize, bucket: usize, i: usize) -> Option<Active> {
        Active::decode(self.places[Self::base(shard, bucket) + i].load(Ordering::Acquire))
    }

    /// Puts `active` into place `i`, which the caller (holding the open lock) found empty.
    pub fn install(&self, shard: usize, bucket: usize, i: usize, active: Active) {
        self.places[Self::base(shard, bucket) + i].store(active.encode(), Ordering::Release);
    }

    /// Empties place `i` if it still holds `active`; true if this call emptied it (the caller
    /// then seals the segment).
    pub fn remove(&self, shard: usize, bucket: usize, i: usize, active: Active) -> bool {
        self.places[Self::base(shard, bucket) + i]
            .compare_exchange(active.encode(), EMPTY, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The lock a writer holds to open a segment for (`shard`, `bucket`); calls `waited`
    /// first when another writer holds it.
    pub fn open_lock(
        &self,
        shard: usize,
        bucket: usize,
        waited: impl FnOnce(),
    ) -> MutexGuard<'_, ()> {
        let lock = &self.open_locks[shard * N_BUCKETS + bucket];
        match lock.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            Err(TryLockError::WouldBlock) => {
                waited();
                lock.lock().unwrap_or_else(|e| e.into_inner())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_follow_heap_size() {
        assert_eq!(ActiveSegments::new(64).shards, 1);
        assert_eq!(ActiveSegments::new(1024).shards, 4);
        assert_eq!(ActiveSegments::new(1 << 20).shards, MAX_SHARDS);
    }

    #[test]
    fn places_hold_and_release_segments() {
        let a = ActiveSegments::new(8);
        let seg = Active { seg: 7, epoch: 3 };
        assert_eq!(a.get(0, 5, 2), None);
        a.install(0, 5, 2, seg);
        assert_eq!(a.get(0, 5, 2), Some(seg));
        assert!(!a.remove(0, 5, 2, Active { seg: 7, epoch: 4 }));
        assert!(a.remove(0, 5, 2, seg));
        assert!(!a.remove(0, 5, 2, seg));
        assert_eq!(a.get(0, 5, 2), None);
    }
}
