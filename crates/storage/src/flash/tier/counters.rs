//! The flash tier's counters: shared atomics, bumped where the event happens.

use std::sync::atomic::AtomicU64;

/// Counters bumped by the tier (and by handles reading from it).
#[derive(Default)]
pub struct FlashCounters {
    pub objects_written: AtomicU64,
    pub item_bytes_admitted: AtomicU64,
    pub bytes_written: AtomicU64,
    pub objects_read: AtomicU64,
    pub bytes_read: AtomicU64,
    pub hits: AtomicU64,
    pub promotions: AtomicU64,
    pub misses: AtomicU64,
    pub bad_checksums: AtomicU64,
    pub aborted: AtomicU64,
    pub page_reclaims: AtomicU64,
    pub page_evictions: AtomicU64,
    pub objects_evicted: AtomicU64,
    pub bytes_evicted: AtomicU64,
    pub pages_expired: AtomicU64,
    pub write_lag_drops: AtomicU64,
    pub budget_drops: AtomicU64,
    pub tag_conflict_drops: AtomicU64,
    pub purged: AtomicU64,
    pub write_errors: AtomicU64,
    pub growth_drops: AtomicU64,
    pub index_drops: AtomicU64,
    pub sweeps: AtomicU64,
}
