//! The cache as a whole: configuration, the shared state every handle points to, and the
//! segment-level operations (open, read an item, retire) that the other modules build on.

use crate::active::ActiveSegments;
use crate::chains::{Chains, FreePool};
use crate::clock::Clock;
use crate::ghost::Ghosts;
use crate::handle::{Handle, HandleCounters};
use crate::hashtable::{ChainGuard, HashTable, Slot, Table, MAX_OFFSET_UNITS, MAX_SEGMENTS};
use crate::heap::Heap;
use crate::item::{self, Header};
use crate::segment::{state, SegmentHeader};
use crate::stats::{EngineCounters, Stats};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How the cache makes room when no free segment is left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvictionPolicy {
    /// Segcache's merge-based eviction (§3.6): merge N consecutive segments of one TTL
    /// bucket into one, keeping the items with the highest frequency per byte.
    Merge,
    /// Free the oldest segment whole (for comparison).
    Fifo,
    /// Never evict: writes fail with out-of-memory until expiration frees space.
    None,
}

/// Engine settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// The memory limit: the segment heap's size, in bytes.
    pub memory_bytes: usize,
    /// Bytes per segment (default 1 MiB). Also bounds the largest item.
    pub segment_size: usize,
    /// log2 of the initial number of hash buckets; derived from the memory size if unset.
    pub hash_power: Option<u32>,
    /// Segments' worth of live items ranked per merge eviction (Segcache's N, default 2; see
    /// `evict.rs`).
    pub merge_segments: usize,
    /// What to do when memory is full.
    pub eviction: EvictionPolicy,
    /// How early an item may expire, as a fraction 1/2^shift of its TTL bucket's lower bound
    /// (rounded down: none below 8 s at the default). Smaller shifts fill sparse TTL buckets' segments better at the
    /// cost of earlier expiry; see `ttl.rs`. Default 3 (1/8).
    pub expiry_precision_shift: u32,
    /// The clock (system by default; tests use a manual one).
    pub clock: Clock,
    /// Seconds a lease token stays the only one for its key (Facebook §3.2.1: "once every 10
    /// seconds per key"); later misses are hot misses. Default 10.
    pub lease_interval: u32,
    /// Seconds a deleted value is kept for lease reads to serve as stale (0: deletes drop the
    /// value at once, as memcached). Default 0 (the server turns it on).
    pub stale_after_delete: u32,
}

impl Config {
    /// Defaults for a cache of `memory_bytes`.
    pub fn new(memory_bytes: usize) -> Config {
        Config {
            memory_bytes,
            segment_size: 1 << 20,
            hash_power: None,
            merge_segments: 2,
            eviction: EvictionPolicy::Merge,
            expiry_precision_shift: crate::ttl::DEFAULT_PRECISION_SHIFT,
            clock: Clock::system(),
            lease_interval: 10,
            stale_after_delete: 0,
        }
    }

    /// Sets the lease interval (see [`Config::lease_interval`]; at least 1 second).
    pub fn lease_interval(mut self, secs: u32) -> Config {
        self.lease_interval = secs.max(1);
        self
    }

    /// Sets how long deleted values stay readable as stale (see
    /// [`Config::stale_after_delete`]).
    pub fn stale_after_delete(mut self, secs: u32) -> Config {
        self.stale_after_delete = secs;
        self
    }

    /// Sets the segment size.
    pub fn segment_size(mut self, bytes: usize) -> Config {
        self.segment_size = bytes;
        self
    }

    /// Sets the clock.
    pub fn clock(mut self, clock: Clock) -> Config {
        self.clock = clock;
        self
    }

    /// Sets the eviction policy.
    pub fn eviction(mut self, policy: EvictionPolicy) -> Config {
        self.eviction = policy;
        self
    }

    /// Sets the initial hash table size (2^power buckets of 7 items).
    pub fn hash_power(mut self, power: u32) -> Config {
        self.hash_power = Some(power);
        self
    }

    /// Sets the expiry precision (see [`Config::expiry_precision_shift`]).
    pub fn expiry_precision_shift(mut self, shift: u32) -> Config {
        self.expiry_precision_shift = shift;
        self
    }

    /// Sets the number of segments merged per eviction.
    pub fn merge_segments(mut self, n: usize) -> Config {
        self.merge_segments = n;
        self
    }
}

/// A configuration the engine cannot run with.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// The segment size is out of range.
    #[error("segment size must be a multiple of 4096 between 16 KiB and 1 GiB, got {0}")]
    SegmentSize(usize),
    /// Not enough memory for the minimum number of segments.
    #[error("memory limit {memory} holds fewer than {min} segments of {segment} bytes")]
    TooLittleMemory {
        /// The memory limit asked for.
        memory: usize,
        /// The segment size.
        segment: usize,
        /// The minimum segment count.
        min: usize,
    },
    /// More segments than a hash slot can address.
    #[error("memory limit needs more than {MAX_SEGMENTS} segments; use larger segments")]
    TooManySegments,
    /// Merge count out of range.
    #[error("merge_segments must be between 2 and 16, got {0}")]
    MergeSegments(usize),
    /// Expiry precision out of range.
    #[error("expiry_precision_shift must be at most 16, got {0}")]
    ExpiryPrecision(u32),
    /// Hash power out of range.
    #[error("hash_power must be between 4 and 30, got {0}")]
    HashPower(u32),
    /// A memory mapping of the wrong size.
    #[error("the memory file mapping has {have} bytes, the heap needs {want}")]
    MappingSize {
        /// Bytes mapped.
        have: usize,
        /// Bytes needed.
        want: usize,
    },
}

/// The shape a configuration gives the engine: checked once, shared by a new cache and a
/// restored one (which must have the same shape as the one saved).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Geometry {
    pub segments: usize,
    pub align_shift: u32,
    pub power: u32,
    pub max_power: u32,
}

impl Geometry {
    pub(crate) fn of(config: &Config) -> Result<Geometry, ConfigError> {
        let seg = config.segment_size;
        if !seg.is_multiple_of(4096) || !(16 << 10..=1 << 30).contains(&seg) {
            return Err(ConfigError::SegmentSize(seg));
        }
        let segments = config.memory_bytes / seg;
        if segments < MIN_SEGMENTS {
            return Err(ConfigError::TooLittleMemory {
                memory: config.memory_bytes,
                segment: seg,
                min: MIN_SEGMENTS,
            });
        }
        if segments > MAX_SEGMENTS {
            return Err(ConfigError::TooManySegments);
        }
        if config.expiry_precision_shift > 16 {
            return Err(ConfigError::ExpiryPrecision(config.expiry_precision_shift));
        }
        if !(2..=16).contains(&config.merge_segments) {
            return Err(ConfigError::MergeSegments(config.merge_segments));
        }
        let unit = seg.div_ceil(MAX_OFFSET_UNITS).next_power_of_two();
        let align_shift = unit.trailing_zeros();
        // Start with one bucket per 4 KiB of heap (room for items averaging 1 KiB at ~4 per
        // bucket); the table doubles as small items arrive.
        let max_items = config.memory_bytes / 16;
        let max_power = (max_items / 4)
            .max(16)
            .next_power_of_two()
            .trailing_zeros()
            .min(30);
        let power = match config.hash_power {
            Some(p) if !(4..=30).contains(&p) => return Err(ConfigError::HashPower(p)),
            Some(p) => p,
            None => (config.memory_bytes / 4096)
                .max(1024)
                .next_power_of_two()
                .trailing_zeros()
                .min(max_power),
        };
        Ok(Geometry {
            segments,
            align_shift,
            power,
            max_power,
        })
    }
}

/// Fewest segments a cache can run with: room for a few active segments and a merge.
pub const MIN_SEGMENTS: usize = 8;

/// State shared by every handle.
pub(crate) struct Shared {
    pub heap: Heap,
    /// Where writers append (shared by handles, see `active.rs`).
    pub active: ActiveSegments,
    pub headers: Box<[SegmentHeader]>,
    pub table: HashTable,
    pub chains: Chains,
    pub free: FreePool,
    pub clock: Clock,
    pub config: Config,
    /// log2 of the offset unit: items are aligned to it so a 20-bit slot offset covers a segment.
    pub align_shift: u32,
    /// The current flush generation.
    pub generation: AtomicU32,
    /// When a delayed flush_all takes effect (u32::MAX: none pending).
    pub flush_at: AtomicU32,
    /// The last generation whose flushed segments were all reclaimed.
    pub reclaimed_generation: AtomicU32,
    pub counters: EngineCounters,
    pub handles: Mutex<HandleRegistry>,
    pub evictor: Mutex<crate::evict::EvictorState>,
    /// What is remembered of evicted keys (see `ghost.rs`).
    pub ghosts: Ghosts,
    /// The next lease token (see `lease.rs`).
    pub next_token: AtomicU64,
}

/// Counters of live handles and the totals of dropped ones.
#[derive(Default)]
pub(crate) struct HandleRegistry {
    pub live: Vec<Arc<HandleCounters>>,
    pub retired: crate::stats::HandleTotals,
}

impl Shared {
    /// Rounds an item length up to the alignment unit.
    #[inline]
    pub fn aligned(&self, len: usize) -> usize {
        let unit = 1usize << self.align_shift;
        (len + unit - 1) & !(unit - 1)
    }

    /// The slot location of byte `offset`.
    #[inline]
    pub fn units(&self, offset: usize) -> u32 {
        (offset >> self.align_shift) as u32
    }

    /// The byte offset of a slot.
    #[inline]
    pub fn offset_of(&self, slot: Slot) -> usize {
        (slot.offset_units() as usize) << self.align_shift
    }

    /// Decodes the item header at `offset` in `seg`.
    ///
    /// The caller must keep the segment from being retired (a reader reference, or a locked
    /// hash chain that points at the item) and the item must be published or its own.
    #[inline]
    pub fn header_at(&self, seg: u32, offset: usize) -> Header {
        let avail = (self.heap.segment_size() - offset).min(item::MAX_PREFIX);
        // SAFETY: per this function's contract the item is complete and not being written;
        // the heap checks bounds.
        let bytes = unsafe { self.heap.bytes(seg, offset, avail) };
        item::decode(bytes)
    }

    /// The key of the item at `offset` in `seg` (same contract as [`Shared::header_at`]).
    #[inline]
    pub fn key_at(&self, seg: u32, offset: usize, header: &Header) -> &[u8] {
        // SAFETY: as for `header_at`.
        unsafe {
            self.heap
                .bytes(seg, offset + header.key_offset, header.key_len)
        }
    }

    /// The value of the item at `offset` in `seg` (same contract as [`Shared::header_at`]).
    #[inline]
    pub fn value_at(&self, seg: u32, offset: usize, header: &Header) -> &[u8] {
        // SAFETY: as for `header_at`.
        unsafe {
            self.heap.bytes(
                seg,
                offset + header.key_offset + header.key_len,
                header.value_len,
            )
        }
    }

    /// Applies a delayed flush whose time has come.
    #[inline]
    pub fn current_generation(&self, now: u32) -> u32 {
        let at = self.flush_at.load(Ordering::Acquire);
        if at <= now
            && self
                .flush_at
                .compare_exchange(at, u32::MAX, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
        self.generation.load(Ordering::Acquire)
    }

    /// Runs `f` with the chain of `hash` locked in `table`, moving `table` to the new table
    /// when a growth has retired it. For background work (eviction, expiration) that takes
    /// many chains in a row: the table is loaded once, not per item.
    pub fn with_chain<T>(
        &self,
        table: &mut Arc<Table>,
        hash: u64,
        f: impl FnOnce(&ChainGuard<'_>) -> T,
    ) -> T {
        loop {
            if let Ok(chain) = table.lock(table.head_of(hash)) {
                return f(&chain);
            }
            self.table.wait_for_growth();
            *table = self.table.load();
        }
    }

    /// The items written in `seg`, in order: (offset, header, aligned size). Stops at a
    /// reserved range whose writer never wrote it (key length 0) rather than walk garbage.
    /// For merges, compaction and retirement, which keep the segment's bytes final (sealed
    /// and settled or drained) while they walk it.
    pub fn items_in(&self, seg: u32) -> impl Iterator<Item = (usize, Header, usize)> + '_ {
        let used = self.headers[seg as usize].used();
        let mut offset = 0;
        std::iter::from_fn(move || {
            if offset >= used {
                return None;
            }
            let header = self.header_at(seg, offset);
            if header.key_len == 0 {
                return None;
            }
            let at = offset;
            let size = self.aligned(header.len());
            offset += size;
            Some((at, header, size))
        })
    }

    /// Runs `f` with the chain of the item at (`seg`, `offset`) locked and the hash slot that
    /// points at the item, or `None` when no slot does (the item is dead: overwritten,
    /// deleted, or already moved). For work that walks a segment's items (eviction,
    /// compaction, retirement); the segment must be kept from reuse by the caller. `f` also
    /// gets the key's hash.
    pub fn with_item_slot<T>(
        &self,
        table: &mut Arc<Table>,
        seg: u32,
        offset: usize,
        header: &Header,
        f: impl FnOnce(&ChainGuard<'_>, Option<(&AtomicU64, Slot)>, u64) -> T,
    ) -> T {
        let key = self.key_at(seg, offset, header);
        let hash = crate::handle::hash(key);
        let units = self.units(offset);
        self.with_chain(table, hash, |chain| {
            let found = chain
                .scan(|slot, s| (s.seg() == seg && s.offset_units() == units).then_some((slot, s)));
            f(chain, found, hash)
        })
    }

    /// Moves a live item from `from` to `to` (segment, offset): copies its `header.len()`
    /// bytes, points its slot (`slot`, now holding `current`) there with frequency `freq`,
    /// and moves its live accounting. Call inside [`Shared::with_item_slot`].
    ///
    /// # Safety
    /// `from`'s segment is sealed, settled and claimed by the caller (MERGING), so its bytes
    /// are final; `[to.1, to.1 + aligned len)` of `to`'s segment is the caller's, unpublished.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn move_item(
        &self,
        chain: &ChainGuard<'_>,
        slot: &AtomicU64,
        current: Slot,
        from: (u32, usize),
        to: (u32, usize),
        header: &Header,
        freq: u8,
    ) {
        let size = self.aligned(header.len());
        // SAFETY: per this function's contract.
        unsafe { self.heap.copy(from, to, header.len()) };
        let moved = Slot::new(to.0, self.units(to.1), freq, current.tag());
        chain.replace(slot, moved.with_fetched(current.fetched()));
        let dst = &self.headers[to.0 as usize];
        dst.add_live(size);
        dst.write_offset
            .store((to.1 + size) as u32, Ordering::Release);
        self.headers[from.0 as usize].remove_live(size);
    }

    /// Removes the hash entry that points at (`seg`, `offset`) if there is one, for an item
    /// leaving through eviction, expiration or retirement. Returns true if it was live.
    pub fn unlink_item(
        &self,
        table: &mut Arc<Table>,
        seg: u32,
        offset: usize,
        header: &Header,
    ) -> bool {
        self.with_item_slot(table, seg, offset, header, |chain, found, _| {
            let Some((slot, _)) = found else {
                return false;
            };
            chain.remove(slot);
            chain.bump_cas();
            self.headers[seg as usize].remove_live(self.aligned(header.len()));
            true
        })
    }

    /// Takes a segment out of service for good: no new readers, wait for current ones, drop
    /// every hash entry still pointing into it, and return it to the free pool. The caller
    /// has already unlinked it from its chain. Returns the number of live items dropped.
    pub fn retire(&self, seg: u32) -> usize {
        self.retire_with(seg, true)
    }

    /// [`Shared::retire`] for a merge source whose every item the merge already moved or
    /// dropped: nothing is left to unlink, so the per-item hash lookups are skipped.
    pub fn retire_emptied(&self, seg: u32) {
        debug_assert_eq!(
            self.headers[seg as usize]
                .live_items
                .load(Ordering::Relaxed),
            0
        );
        self.retire_with(seg, false);
    }

    fn retire_with(&self, seg: u32, unlink: bool) -> usize {
        let h = &self.headers[seg as usize];
        h.state.store(state::RETIRING, Ordering::Release);
        h.seal();
        h.drain();
        let mut dropped = 0;
        let mut table = self.table.load();
        // Every item is looked up, whatever the live count says: a slot left pointing into
        // a reused segment would be read as garbage.
        if unlink {
            for (offset, header, _) in self.items_in(seg) {
                if self.unlink_item(&mut table, seg, offset, &header) {
                    dropped += 1;
                }
            }
        }
        self.free_segment(seg);
        dropped
    }

    /// Returns a drained segment with no hash entries to the free pool.
    pub fn free_segment(&self, seg: u32) {
        let h = &self.headers[seg as usize];
        h.epoch.fetch_add(1, Ordering::AcqRel);
        h.write_offset.store(0, Ordering::Release);
        h.live_items.store(0, Ordering::Relaxed);
        h.live_bytes.store(0, Ordering::Relaxed);
        h.state.store(state::FREE, Ordering::Release);
        self.free.put(seg);
    }
}

/// The cache: cheap to clone, safe to share between threads.
#[derive(Clone)]
pub struct Cache {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("memory_bytes", &self.shared.config.memory_bytes)
            .field("segment_size", &self.shared.config.segment_size)
            .finish_non_exhaustive()
    }
}

impl Cache {
    /// Creates a cache, allocating its whole heap.
    pub fn new(config: Config) -> Result<Cache, ConfigError> {
        let g = Geometry::of(&config)?;
        let heap = Heap::new(g.segments, config.segment_size);
        Ok(Cache::build(config, g, heap))
    }

    /// Creates an empty cache whose heap is `mapping` (a shared mapping of the memory file
    /// for warm restarts, exactly `memory_bytes` rounded down to whole segments), zeroing it.
    /// [`Cache::snapshot`] and [`Cache::resume`] then carry it across a restart.
    pub fn with_mapping(config: Config, mapping: memmap2::MmapMut) -> Result<Cache, ConfigError> {
        let g = Geometry::of(&config)?;
        if mapping.len() != g.segments * config.segment_size {
            return Err(ConfigError::MappingSize {
                have: mapping.len(),
                want: g.segments * config.segment_size,
            });
        }
        let heap = Heap::mapped(mapping, g.segments, config.segment_size);
        // SAFETY: the cache is not built yet, so nothing else can touch the heap.
        unsafe { heap.zero() };
        Ok(Cache::build(config, g, heap))
    }

    /// The bytes a memory file for `config` must have.
    pub fn mapping_len(config: &Config) -> Result<usize, ConfigError> {
        let g = Geometry::of(config)?;
        Ok(g.segments * config.segment_size)
    }

    fn build(config: Config, g: Geometry, heap: Heap) -> Cache {
        let shared = Shared {
            active: ActiveSegments::new(g.segments),
            heap,
            headers: (0..g.segments).map(|_| SegmentHeader::new()).collect(),
            table: HashTable::new(g.power, g.max_power.max(g.power)),
            chains: Chains::new(),
            free: FreePool::new(g.segments, 1),
            clock: config.clock.clone(),
            align_shift: g.align_shift,
            generation: AtomicU32::new(0),
            flush_at: AtomicU32::new(u32::MAX),
            reclaimed_generation: AtomicU32::new(0),
            counters: EngineCounters::default(),
            handles: Mutex::new(HandleRegistry::default()),
            evictor: Mutex::new(crate::evict::EvictorState::default()),
            ghosts: Ghosts::for_heap(g.segments * config.segment_size),
            next_token: AtomicU64::new(crate::lease::first_token()),
            config,
        };
        Cache {
            shared: Arc::new(shared),
        }
    }

    /// A new handle for the calling thread.
    pub fn handle(&self) -> Handle {
        Handle::new(self.shared.clone())
    }

    /// The clock the cache runs on.
    pub fn clock(&self) -> &Clock {
        &self.shared.clock
    }

    /// The configuration the cache was built with.
    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// The largest item (header, key and value) a segment can hold.
    pub fn max_item_size(&self) -> usize {
        self.shared.config.segment_size
    }

    /// Invalidates every item now (`delay` 0) or when `delay` seconds have passed, like
    /// memcached's `flush_all [delay]`. A later call replaces a pending delayed flush.
    pub fn flush_all(&self, delay: u32) {
        let s = &self.shared;
        if delay == 0 {
            s.flush_at.store(u32::MAX, Ordering::Release);
            s.generation.fetch_add(1, Ordering::AcqRel);
        } else {
            let now = s.clock.now();
            s.flush_at
                .store(now.saturating_add(delay), Ordering::Release);
        }
    }

    /// One proactive-expiration pass (Segcache §3.5): frees every segment whose items have
    /// all expired or were flushed. Returns the number of segments freed.
    pub fn expire(&self) -> usize {
        crate::expire::expire_pass(&self.shared)
    }

    /// Engine statistics, aggregated now.
    pub fn stats(&self) -> Stats {
        crate::stats::collect(&self.shared)
    }

    /// Runs [`Cache::expire`] every `interval` on a background thread until the returned
    /// value is dropped.
    pub fn spawn_expirer(&self, interval: Duration) -> Expirer {
        let stop = Arc::new(AtomicBool::new(false));
        let cache = self.clone();
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("memfleet-expire".into())
            .spawn(move || {
                while !flag.load(Ordering::Acquire) {
                    cache.expire();
                    std::thread::park_timeout(interval);
                }
            })
            .expect("spawn expiration thread");
        Expirer {
            stop,
            thread: Some(thread),
        }
    }
}

/// The background expiration thread; stops when dropped.
pub struct Expirer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Expirer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_is_validated() {
        assert_eq!(
            Cache::new(Config::new(64 << 20).segment_size(1000)).unwrap_err(),
            ConfigError::SegmentSize(1000)
        );
        assert!(matches!(
            Cache::new(Config::new(2 << 20)).unwrap_err(),
            ConfigError::TooLittleMemory { .. }
        ));
        assert!(Cache::new(Config::new(8 << 20)).is_ok());
        assert_eq!(
            Cache::new(Config::new(8 << 20).merge_segments(1)).unwrap_err(),
            ConfigError::MergeSegments(1)
        );
    }

    /// Two threads writing, reading, merging and expiring in a tiny heap: small enough for
    /// Miri, which checks every heap access of the protocol for data races and UB.
    #[test]
    fn concurrent_readers_writers_and_eviction() {
        use crate::{Expiry, StoreStatus};
        let clock = Clock::manual();
        let cache = Cache::new(
            Config::new(MIN_SEGMENTS * (16 << 10))
                .segment_size(16 << 10)
                .hash_power(4)
                .clock(clock.clone()),
        )
        .unwrap();
        let rounds = if cfg!(miri) { 150 } else { 3000 };
        let threads: Vec<_> = (0..2u8)
            .map(|t| {
                let cache = cache.clone();
                std::thread::spawn(move || {
                    let mut h = cache.handle();
                    for i in 0..rounds {
                        let key = [b'k', (i % 97) as u8, t];
                        let value = vec![t ^ (i as u8); 200 + (i % 300)];
                        let ttl = if i % 3 == 0 {
                            Expiry::After(1)
                        } else {
                            Expiry::Never
                        };
                        assert_eq!(
                            h.set(&key, &value, i as u32, ttl).unwrap(),
                            StoreStatus::Stored
                        );
                        if let Some(item) = h.get(&key) {
                            let v = item.value();
                            assert!(v.iter().all(|&b| b == v[0]), "torn value");
                            assert_eq!(v.len(), 200 + (item.flags() as usize % 300));
                        }
                        if i % 50 == 0 {
                            cache.expire();
                        }
                    }
                })
            })
            .collect();
        for _ in 0..5 {
            clock.advance(1);
            std::thread::yield_now();
        }
        for t in threads {
            t.join().unwrap();
        }
        // The clock may have run ahead of both writers (Miri schedules threads as it likes), so
        // the run itself need not have expired anything; once every 1 s item is past its time,
        // an expiry pass must free whole segments, whatever the interleaving was.
        clock.advance(2);
        cache.expire();
        let stats = cache.stats();
        assert!(stats.expired_segments > 0, "{stats:?}");
    }

    #[test]
    fn large_segments_use_coarser_offsets() {
        let c = Cache::new(Config::new(64 << 20).segment_size(4 << 20)).unwrap();
        assert_eq!(c.shared.align_shift, 2);
        let c = Cache::new(Config::new(64 << 20)).unwrap();
        assert_eq!(c.shared.align_shift, 0);
    }
}
