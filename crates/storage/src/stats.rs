//! Engine statistics.
//!
//! Hot counters (gets, hits, writes) live in each handle and are written only by its thread,
//! with plain loads and stores, no locked instructions; [`collect`] adds them up on demand.
//! Facebook found a global stats lock costing 20–30% of CPU (2008 post); there is none here.
//! Rare events (evictions, expirations, merges) use shared atomics.

use crate::counters::HandleTotals;
use crate::engine_state::EngineState;
use crate::segment::state;
use std::sync::atomic::{AtomicU64, Ordering};

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
    /// Where threads waited for each other (see [`Contention`]).
    pub contention: Contention,
    /// Items eviction moved to flash rather than drop.
    pub demoted_items: u64,
    /// The flash tier's statistics, when there is one.
    pub flash: Option<crate::flash::FlashStats>,
}

/// Where the engine's threads waited for each other since it started: each counted on the
/// path that found the wait, so an uncontended engine pays nothing for them. What the
/// scaling figures (`memfleet bench scale`, `stats memfleet`) show next to throughput.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Contention {
    /// Failed compare-and-swaps reserving room in a shared active segment (another writer
    /// reserved first and this one tried again).
    pub reserve_retries: u64,
    /// Writers that waited for another to open an active segment of the same TTL bucket.
    pub open_lock_waits: u64,
    /// Chain locks found held by another thread.
    pub chain_lock_waits: u64,
    /// Turns spent spinning (then yielding) for chain locks.
    pub chain_lock_spins: u64,
    /// Evictions that waited for another thread's eviction to finish.
    pub evict_lock_waits: u64,
    /// Operations that found their hash chain moved by a table growth and waited for it.
    pub growth_stalls: u64,
}

impl Contention {
    /// The counters' names (their `stats memfleet` names without `segcache_`), in the order
    /// of [`Contention::values`].
    pub const NAMES: [&'static str; 6] = [
        "reserve_retries",
        "open_lock_waits",
        "chain_lock_waits",
        "chain_lock_spins",
        "evict_lock_waits",
        "growth_stalls",
    ];

    /// The counters, in the order of [`Contention::NAMES`].
    pub fn values(&self) -> [u64; 6] {
        [
            self.reserve_retries,
            self.open_lock_waits,
            self.chain_lock_waits,
            self.chain_lock_spins,
            self.evict_lock_waits,
            self.growth_stalls,
        ]
    }

    /// The counters from their values, in the order of [`Contention::NAMES`].
    pub fn from_values(v: [u64; 6]) -> Contention {
        Contention {
            reserve_retries: v[0],
            open_lock_waits: v[1],
            chain_lock_waits: v[2],
            chain_lock_spins: v[3],
            evict_lock_waits: v[4],
            growth_stalls: v[5],
        }
    }

    /// Counter by counter, what `self` (a later reading) gained over `before`.
    pub fn since(&self, before: &Contention) -> Contention {
        let (now, then) = (self.values(), before.values());
        Contention::from_values(std::array::from_fn(|i| now[i].saturating_sub(then[i])))
    }
}

pub(crate) fn collect(engine: &EngineState) -> Stats {
    let mut items = 0u64;
    let mut bytes = 0u64;
    let mut active = 0u64;
    let mut used = 0u64;
    let mut oldest: Option<u32> = None;
    for h in engine.segments().iter() {
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
    let heap_bytes = (engine.heap().segments() * engine.heap().segment_size()) as u64;
    let table = engine.table().load();
    let c = &engine.counters();
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let totals = engine.handle_totals();
    Stats {
        items,
        bytes,
        dead_bytes: used - bytes,
        unwritten_bytes: heap_bytes.saturating_sub(used),
        heap_bytes,
        segment_size: engine.heap().segment_size() as u64,
        segments: engine.heap().segments() as u64,
        segments_free: engine.free_pool().len() as u64,
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
        ghost_bytes: engine.ghosts().bytes() as u64,
        hash_load: items as f64 / (table.primary_buckets() as f64 * 7.0),
        handles: totals,
        oldest_item_age: oldest.map_or(0, |o| u64::from(engine.clock().now().saturating_sub(o))),
        last_evicted_age: get(&c.last_evicted_age),
        expire_passes: get(&c.expire_passes),
        contention: Contention {
            reserve_retries: get(&c.contention.reserve_retries),
            open_lock_waits: get(&c.contention.open_lock_waits),
            chain_lock_waits: get(&c.contention.chain_lock_waits),
            chain_lock_spins: get(&c.contention.chain_lock_spins),
            evict_lock_waits: get(&c.contention.evict_lock_waits),
            growth_stalls: get(&c.contention.growth_stalls),
        },
        demoted_items: get(&c.demoted_items),
        flash: engine.flash().map(|t| t.stats()),
    }
}
