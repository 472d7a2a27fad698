//! Segcache: memfleet's storage engine.
//!
//! An in-memory key-value cache for small objects after Yang, Yue and Vinayak, *Segcache*
//! (NSDI '21), with memcached's semantics on top. The crate does no I/O and spawns no threads
//! unless asked to ([`Cache::spawn_expirer`]); the server, the simulator and the benchmarks
//! all drive it the same way.
//!
//! # Layout
//!
//! Layers, bottom up; a module uses only modules of its own or lower layers:
//!
//! | module          | what it holds |
//! |-----------------|---------------|
//! | `sync`          | the protocols' atomics, mutexes and spin-waits: `std`'s, or loom's under `--cfg loom` (`loom/tests/loom_protocol.rs`) |
//! | `heap`          | the one allocation of fixed-size segments (the memory limit); all `unsafe` byte access |
//! | `segment`       | per-segment shared metadata: expiry, chain links, life cycle, write offset |
//! | `readers`       | per-segment reader counts, striped per handle, and the drain retirement waits for |
//! | `item`          | the ≤5-byte item header, client flags, marks for leases and hold-offs |
//! | `ttl`, `clock`  | the 1024 TTL buckets and the early-expiry tolerance; the engine's seconds |
//! | `hashtable`     | the bulk-chained table: the key hash, cache-line buckets, chain lock, shared CAS, growth |
//! | `chains`        | per-TTL-bucket segment chains and the free pool |
//! | `active`        | the active segments writers append to, shared by handles |
//! | `ghost`         | what is remembered of evicted keys |
//! | `freq`          | how often an item's reads may count: a window scaled to the heap's turnover |
//! | `config`        | settings and the geometry they give the engine |
//! | `counters`      | engine and per-handle counters |
//! | `lease`         | the lease rules: what each mark means to each command |
//! | `flash`         | the flash tier: places, laps, write buffers, records on flash (`record`), reclaiming; no I/O (a [`FlashSink`] writes) |
//! | `engine_state`  | `EngineState`: what every handle shares, private fields behind methods; segment-level operations (read an item in place, move it, retire a segment) |
//! | `demote`        | eviction's items to flash, writers dropping out-of-date flash slots, the sweep of dead ones |
//! | `compact`       | compaction: segments rewritten without their dead copies |
//! | `expire`        | proactive expiration and flush_all |
//! | `evict`         | merge-based (and FIFO) segment eviction |
//! | `handle`        | a thread's view: reads, writes, stores, read-modify-writes, leases, dumps |
//! | `stats`         | counters, aggregated on demand |
//! | `cache`         | the public [`Cache`] |
//! | `persist`       | warm restart: the snapshot of everything outside a file-mapped heap |
//! | `numeric`       | memcached's incr/decr number rules |
//!
//! # Use
//!
//! ```
//! use memfleet_storage::{Cache, Config, Expiry, StoreStatus};
//!
//! let cache = Cache::new(Config::new(8 << 20)).unwrap();
//! let mut handle = cache.handle(); // one per thread
//! assert_eq!(handle.set(b"greeting", b"hello", 42, Expiry::After(60)).unwrap(), StoreStatus::Stored);
//! let item = handle.get(b"greeting").unwrap();
//! assert_eq!((item.value(), item.flags()), (&b"hello"[..], 42));
//! ```
//!
//! # Memory
//!
//! The segment heap *is* the memory limit and is allocated once. Per item the heap holds a
//! 5-byte header, then 0–4 bytes of client flags (see `item`), the key and the value. The hash
//! table lives outside the heap, like memcached's: 8 bytes per slot, 7 slots per 64-byte
//! bucket, grown by doubling when its overflow area runs low (about 12–25 bytes per item, a
//! sawtooth between doublings).
//! memcached, by comparison, spends 56 bytes of header per item plus its hash table and slab
//! rounding.
//!
//! # Concurrency
//!
//! [`Cache`] is `Send + Sync` and cheap to clone; each thread takes its own [`Handle`]. Reads
//! take no lock: a hash lookup, a reader reference on the segment, a key compare. Writes append
//! to an active segment of the item's TTL bucket (shared by handles) and then lock one hash chain
//! for a few slot updates. Segment chains change under a per-bucket mutex held for a few
//! pointer updates. Eviction and expiration work a whole segment at a time.

mod active;
mod chains;
mod clock;
mod compact;
mod config;
mod counters;
mod demote;
mod engine_state;
mod evict;
mod evictor_state;
mod expire;
mod flash;
mod freq;
mod ghost;
mod handle;
mod hashtable;
mod heap;
mod item;
mod lease;
mod numeric;
mod persist;
mod readers;
mod segment;
mod stats;
mod sync;
mod ttl;

mod cache;

pub use cache::{Cache, Expirer};
pub use clock::{Clock, Expiry, MEMCACHED_MAX_RELATIVE};
pub use config::{Config, ConfigError, EvictionPolicy};
pub use counters::HandleTotals;
pub use flash::{
    FlashCandidate, FlashConfig, FlashFetch, FlashItem, FlashRead, FlashSink, FlashStats,
    FlashWriteDone, Promotion, FLASH_BLOCK,
};
pub use handle::{
    DeltaError, DumpCursor, DumpItem, FlashDumpSegment, Handle, ItemRef, KeyHash, LeaseOutcome,
    StoreError, StoreMode, StoreStatus,
};
pub use item::{
    Lease, MARK_DELETED, MARK_EMPTY, MARK_STALE, MARK_TOKEN, MARK_TOMBSTONE, MAX_KEY_LEN,
};
pub use lease::LeaseRead;
pub use memmap2;
pub use numeric::parse_u64 as parse_memcached_u64;
pub use persist::{Restored, SnapshotError};
pub use stats::{Contention, Stats};
pub use ttl::early_expiry_bound;

#[cfg(test)]
mod tests {
    /// The engine is shared between worker threads; each thread owns its handle.
    #[test]
    fn thread_safety_contract() {
        fn send_sync<T: Send + Sync>() {}
        fn send<T: Send>() {}
        send_sync::<crate::Cache>();
        send::<crate::Handle>();
    }
}
