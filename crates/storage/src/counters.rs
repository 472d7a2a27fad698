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
    /// Items eviction moved to flash instead of dropping them.
    pub demoted_items: AtomicU64,
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
    /// Contention, bumped only on the path that found it (never on an uncontended access).
    pub contention: ContentionCounters,
}

/// Where threads waited for each other, counted where it happened: a failed compare-and-swap
/// or a spin is already a slow path, so one more relaxed add there costs nothing the
/// uncontended path sees. Summed into [`crate::Contention`] by `stats.rs`.
#[derive(Default)]
pub(crate) struct ContentionCounters {
    /// Failed compare-and-swaps of a segment's write offset (another writer reserved first).
    pub reserve_retries: AtomicU64,
    /// Writers that found an active segment's open lock held (another writer was opening
    /// a segment for the same TTL bucket).
    pub open_lock_waits: AtomicU64,
    /// Turns spent waiting for a hash chain's lock.
    pub chain_lock_spins: AtomicU64,
    /// Chain locks that were held by another thread when asked for.
    pub chain_lock_waits: AtomicU64,
    /// Threads that found the eviction lock held (another thread was evicting).
    pub evict_lock_waits: AtomicU64,
    /// Operations that found their chain moved by a table growth and waited for it.
    pub growth_stalls: AtomicU64,
}

impl ContentionCounters {
    /// Adds `n` to `counter` (a shared counter, on a contended path only).
    #[inline]
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

impl EngineCounters {
    /// Records that a segment created at `create_at` (clock seconds) was evicted at `now`.
    pub fn evicted_segment(&self, create_at: u32, now: u32) {
        self.evicted_segments.fetch_add(1, Ordering::Relaxed);
        self.last_evicted_age
            .store(u64::from(now.saturating_sub(create_at)), Ordering::Relaxed);
    }
}

/// Declares the per-handle counters once: [`HandleCounters`] (an atomic each),
/// [`HandleTotals`] (a plain sum each), the sum of two totals and the snapshot of a handle's
/// counters, so that a new counter cannot be left out of one of them.
macro_rules! handle_counters {
    ($($(#[$doc:meta])* $name:ident,)*) => {
        /// Sums of per-handle counters.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct HandleTotals {
            $($(#[$doc])* pub $name: u64,)*
        }

        impl HandleTotals {
            pub(crate) fn add(&mut self, other: &HandleTotals) {
                $(self.$name += other.$name;)*
            }
        }

        /// Per-handle counters, written only by the owning thread. Aligned to two cache
        /// lines (a line and its prefetched neighbour), so that two handles' counters never
        /// share one: each is written on every request, and sharing would bounce the line
        /// between the threads' cores.
        #[derive(Default)]
        #[repr(align(128))]
        pub(crate) struct HandleCounters {
            $($(#[$doc])* pub $name: AtomicU64,)*
        }

        impl HandleCounters {
            pub fn snapshot(&self) -> HandleTotals {
                HandleTotals {
                    $($name: self.$name.load(Ordering::Relaxed),)*
                }
            }
        }
    };
}

handle_counters! {
    /// Lookups that found a live item.
    get_hits,
    /// Lookups that found nothing (or only an expired, flushed or marked item).
    get_misses,
    /// Lookups that found an item whose segment had expired (a subset of misses).
    expired_on_access,
    /// Items written.
    writes,
    /// Deletes that removed an item.
    deletes,
    /// Bytes appended to segments, including copies that lost a race and were discarded.
    bytes_written,
}

impl HandleCounters {
    /// Adds without a locked instruction: only the owner writes.
    #[inline]
    pub fn bump(counter: &AtomicU64, n: u64) {
        counter.store(counter.load(Ordering::Relaxed) + n, Ordering::Relaxed);
    }
}

/// Counters of live handles and the totals of dropped ones.
#[derive(Default)]
pub(crate) struct HandleRegistry {
    pub live: Vec<Arc<HandleCounters>>,
    pub retired: HandleTotals,
}
