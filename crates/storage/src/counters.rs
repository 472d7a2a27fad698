//! The engine's counters: shared atomics for rare events ([`EngineCounters`]), each
//! handle's own counters ([`HandleCounters`], written only by its thread, without locked
//! instructions) and their sums ([`HandleTotals`]), and the registry that keeps the live
//! handles' counters and the totals of dropped ones ([`HandleRegistry`]). `stats.rs` adds them
//! up on demand.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Counters bumped by eviction, expiration and table growth.
#[derive(Default)]
pub(crate) struct EngineCounters {
    pub evicted_items: AtomicU64,
    pub evicted_segments: AtomicU64,
    pub merges: AtomicU64,
    pub merge_retained_items: AtomicU64,
    pub evicted_unfetched: AtomicU64,
    pub compactions: AtomicU64,
    pub compacted_items: AtomicU64,
    pub expired_items: AtomicU64,
    pub expired_segments: AtomicU64,
    pub flushed_items: AtomicU64,
    pub hash_growths: AtomicU64,
    pub out_of_memory: AtomicU64,
    pub handles_created: AtomicU64,
    /// The age, in seconds, that the most recently evicted segment had reached (its items'
    /// time since the segment was opened for writing): memcached's `evicted_time`.
    pub last_evicted_age: AtomicU64,
    pub expire_passes: AtomicU64,
}

impl EngineCounters {
    /// Records that a segment created at `create_at` (clock seconds) was evicted at `now`.
    pub fn evicted_segment(&self, create_at: u32, now: u32) {
        self.evicted_segments.fetch_add(1, Ordering::Relaxed);
        self.last_evicted_age
            .store(u64::from(now.saturating_sub(create_at)), Ordering::Relaxed);
    }
}

/// Sums of per-handle counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HandleTotals {
    /// Lookups that found a live item.
    pub get_hits: u64,
    /// Lookups that found nothing (or only an expired, flushed or marked item).
    pub get_misses: u64,
    /// Lookups that found an item whose segment had expired (a subset of misses).
    pub expired_on_access: u64,
    /// Items written.
    pub writes: u64,
    /// Deletes that removed an item.
    pub deletes: u64,
    /// Bytes appended to segments, including copies that lost a race and were discarded.
    pub bytes_written: u64,
}

impl HandleTotals {
    pub(crate) fn add(&mut self, other: &HandleTotals) {
        self.get_hits += other.get_hits;
        self.get_misses += other.get_misses;
        self.expired_on_access += other.expired_on_access;
        self.writes += other.writes;
        self.deletes += other.deletes;
        self.bytes_written += other.bytes_written;
    }
}

/// Per-handle counters, written only by the owning thread.
#[derive(Default)]
pub(crate) struct HandleCounters {
    pub get_hits: AtomicU64,
    pub get_misses: AtomicU64,
    pub expired_on_access: AtomicU64,
    pub writes: AtomicU64,
    pub deletes: AtomicU64,
    pub bytes_written: AtomicU64,
}

impl HandleCounters {
    /// Adds without a locked instruction: only the owner writes.
    #[inline]
    pub fn bump(counter: &AtomicU64, n: u64) {
        counter.store(counter.load(Ordering::Relaxed) + n, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> HandleTotals {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        HandleTotals {
            get_hits: get(&self.get_hits),
            get_misses: get(&self.get_misses),
            expired_on_access: get(&self.expired_on_access),
            writes: get(&self.writes),
            deletes: get(&self.deletes),
            bytes_written: get(&self.bytes_written),
        }
    }
}

/// Counters of live handles and the totals of dropped ones.
#[derive(Default)]
pub(crate) struct HandleRegistry {
    pub live: Vec<Arc<HandleCounters>>,
    pub retired: HandleTotals,
}
