//! Engine statistics.
//!
//! Hot counters (gets, hits, writes) live in each handle and are written only by its thread,
//! with plain loads and stores, no locked instructions; [`collect`] adds them up on demand.
//! Facebook found a global stats lock costing 20–30% of CPU (2008 post); there is none here.
//! Rare events (evictions, expirations, merges) use shared atomics.

use crate::cache::Shared;
use crate::segment::state;
use std::sync::atomic::{AtomicU64, Ordering};

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

/// A snapshot of the engine's state and counters.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    /// Items the hash table points to (some may have expired but not been reclaimed yet).
    pub items: u64,
    /// Bytes those items occupy in segments, headers included.
    pub bytes: u64,
    /// Bytes written to segments in use that no item owns any more: old copies left by
    /// overwrites and deletes, reclaimed when their segment is merged or expires.
    pub dead_bytes: u64,
    /// Bytes not yet written in the active segments (what the heap holds in reserve for
    /// writes), plus the free segments' bytes.
    pub unwritten_bytes: u64,
    /// The heap size (the memory limit).
    pub heap_bytes: u64,
    /// Bytes per segment.
    pub segment_size: u64,
    /// Segments in all.
    pub segments: u64,
    /// Segments in the free pool.
    pub segments_free: u64,
    /// Segments being written (one per handle and TTL bucket in use).
    pub segments_active: u64,
    /// Items removed by eviction.
    pub evicted_items: u64,
    /// Segments freed by eviction (merge sources and FIFO victims).
    pub evicted_segments: u64,
    /// Merge-based evictions performed.
    pub merges: u64,
    /// Items kept by merges.
    pub merge_retained_items: u64,
    /// Evicted items that were never read after they were written (or since the last
    /// merge kept them): memcached's `evicted_unfetched`.
    pub evicted_unfetched: u64,
    /// Compactions: rewrites of consecutive segments whose live items fit in fewer, made
    /// before evicting anything (not counted in `merges` or `evicted_segments`).
    pub compactions: u64,
    /// Items compactions moved.
    pub compacted_items: u64,
    /// Items whose memory proactive expiration reclaimed.
    pub expired_items: u64,
    /// Segments proactive expiration freed.
    pub expired_segments: u64,
    /// Items reclaimed after a flush_all.
    pub flushed_items: u64,
    /// Writes refused because nothing could be evicted.
    pub out_of_memory: u64,
    /// Primary hash buckets (7 item slots each, 64 bytes).
    pub hash_buckets: u64,
    /// Overflow buckets in use / available.
    pub hash_overflow_used: u64,
    /// Overflow buckets available.
    pub hash_overflow_capacity: u64,
    /// Bytes of hash table.
    pub hash_bytes: u64,
    /// Times the table doubled.
    pub hash_growths: u64,
    /// Bytes of the ghost table (fingerprints of evicted keys, outside the heap).
    pub ghost_bytes: u64,
    /// Items per primary-bucket slot (0..=1 before overflow).
    pub hash_load: f64,
    /// Per-handle counters, summed.
    pub handles: HandleTotals,
    /// Seconds since the oldest segment holding live items was opened: the age of the
    /// oldest item, to the segment (0 when the cache is empty).
    pub oldest_item_age: u64,
    /// The age the most recently evicted segment had reached when it was evicted (0 before
    /// the first eviction).
    pub last_evicted_age: u64,
    /// Proactive-expiration passes run (by the background expirer, and by writers that found
    /// no free segment).
    pub expire_passes: u64,
}

pub(crate) fn collect(shared: &Shared) -> Stats {
    let mut items = 0u64;
    let mut bytes = 0u64;
    let mut active = 0u64;
    let mut used = 0u64;
    let mut oldest: Option<u32> = None;
    for h in shared.headers.iter() {
        let live = u64::from(h.live_bytes.load(Ordering::Relaxed));
        let live_items = h.live_items.load(Ordering::Relaxed);
        items += u64::from(live_items);
        bytes += live;
        match h.state.load(Ordering::Relaxed) {
            state::FREE => continue,
            state::ACTIVE => active += 1,
            _ => {}
        }
        if live_items > 0 {
            let created = h.create_at.load(Ordering::Relaxed);
            oldest = Some(oldest.map_or(created, |o| o.min(created)));
        }
        used += (h.used() as u64).max(live);
    }
    let heap_bytes = (shared.heap.segments() * shared.heap.segment_size()) as u64;
    let table = shared.table.load();
    let c = &shared.counters;
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let mut totals = HandleTotals::default();
    {
        let registry = shared.handles.lock().unwrap_or_else(|e| e.into_inner());
        totals.add(&registry.retired);
        for h in &registry.live {
            totals.add(&h.snapshot());
        }
    }
    Stats {
        items,
        bytes,
        dead_bytes: used - bytes,
        unwritten_bytes: heap_bytes.saturating_sub(used),
        heap_bytes,
        segment_size: shared.heap.segment_size() as u64,
        segments: shared.heap.segments() as u64,
        segments_free: shared.free.len() as u64,
        segments_active: active,
        evicted_items: get(&c.evicted_items),
        evicted_segments: get(&c.evicted_segments),
        merges: get(&c.merges),
        merge_retained_items: get(&c.merge_retained_items),
        evicted_unfetched: get(&c.evicted_unfetched),
        compactions: get(&c.compactions),
        compacted_items: get(&c.compacted_items),
        expired_items: get(&c.expired_items),
        expired_segments: get(&c.expired_segments),
        flushed_items: get(&c.flushed_items),
        out_of_memory: get(&c.out_of_memory),
        hash_buckets: table.primary_buckets() as u64,
        hash_overflow_used: table.overflow_used() as u64,
        hash_overflow_capacity: table.overflow_capacity() as u64,
        hash_bytes: table.bytes() as u64,
        hash_growths: get(&c.hash_growths),
        ghost_bytes: shared.ghosts.bytes() as u64,
        hash_load: items as f64 / (table.primary_buckets() as f64 * 7.0),
        handles: totals,
        oldest_item_age: oldest.map_or(0, |o| u64::from(shared.clock.now().saturating_sub(o))),
        last_evicted_age: get(&c.last_evicted_age),
        expire_passes: get(&c.expire_passes),
    }
}
