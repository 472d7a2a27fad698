//! The engine's state: everything every handle and every background pass shares, in one
//! struct with private fields ([`EngineState`]), and the segment-level operations the rest of
//! the engine builds on (decode an item in place, lock the chain of an item, move an item,
//! retire a segment).
//!
//! This is the bottom of the engine's layers: it knows the heap, the segment headers, the
//! hash table, the chains and the free pool, and nothing that uses them. Eviction,
//! expiration and compaction (`evict.rs`, `expire.rs`, `compact.rs`) sit above it, handles
//! (`handle/`) above those, and the public [`crate::Cache`] on top.
//!
//! **Invariant: the flush generation only grows.** `current_generation` applies a delayed
//! flush whose time has come exactly once (a compare-exchange on `flush_at`), and a segment
//! whose generation is older than the current one is dead wherever it sits.

mod items;

use crate::active::ActiveSegments;
use crate::chains::{Chains, FreePool};
use crate::clock::Clock;
use crate::config::{Config, Geometry};
use crate::counters::{
    ContentionCounters, EngineCounters, HandleCounters, HandleRegistry, HandleTotals,
};
use crate::evictor_state::EvictorState;
use crate::flash::FlashTier;
use crate::freq::CountWindow;
use crate::ghost::Ghosts;
use crate::hashtable::{hash, CasSequence, ChainGuard, HashTable, Slot, Table};
use crate::heap::Heap;
use crate::item::{self, Header};
use crate::readers::ReaderCounts;
use crate::segment::SegmentHeader;
use crate::sync::atomic::AtomicU32;
use crate::sync::{Mutex, MutexGuard};
use std::sync::atomic::Ordering;
use std::sync::{Arc, TryLockError};

/// Everything the handles of one cache share. Fields are private: the components with
/// their own invariants (heap, segment headers, hash table, chains, free pool) are lent out
/// by reference; the engine's own words (flush generation, lease tokens, alignment) change
/// only through the methods below.
pub(crate) struct EngineState {
    heap: Heap,
    /// Where writers append (shared by handles, see `active.rs`).
    active: ActiveSegments,
    headers: Box<[SegmentHeader]>,
    /// How many threads are inside each segment's bytes (`readers.rs`).
    readers: ReaderCounts,
    table: HashTable,
    chains: Chains,
    free: FreePool,
    clock: Clock,
    config: Config,
    /// log2 of the offset unit: items are aligned to it so a 20-bit slot offset covers a segment.
    align_shift: u32,
    /// The current flush generation.
    generation: AtomicU32,
    /// When a delayed flush_all takes effect (u32::MAX: none pending).
    flush_at: AtomicU32,
    /// The last generation whose flushed segments were all reclaimed.
    reclaimed_generation: AtomicU32,
    counters: EngineCounters,
    handles: Mutex<HandleRegistry>,
    evictor: Mutex<EvictorState>,
    /// What is remembered of evicted keys (see `ghost.rs`).
    ghosts: Ghosts,
    /// How often an item's reads may count (see `freq.rs`).
    count_window: CountWindow,
    /// Where CAS uniques come from (`hashtable/cas.rs`).
    cas: CasSequence,
    /// The flash tier under the heap, if any (`flash/`).
    flash: Option<Arc<FlashTier>>,
}

/// The engine's own words that a warm restart carries over (`persist.rs`), besides the
/// segments, chains, free pool and hash table.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RestartWords {
    pub generation: u32,
    pub flush_at: u32,
    pub reclaimed_generation: u32,
    /// The CAS sequence's mark ([`CasSequence::reserved`]).
    pub cas_reserved: u64,
}

/// What a warm restart rebuilt, to make an engine of (`persist.rs` checked all of it).
pub(crate) struct RestoredParts {
    pub heap: Heap,
    pub headers: Box<[SegmentHeader]>,
    pub table: Table,
    pub chains: Chains,
    pub free: Vec<u32>,
    pub clock: Clock,
    pub words: RestartWords,
}

/// The flash tier `config` asks for (ids after the RAM segments).
fn flash_tier(config: &Config, g: &Geometry) -> Option<Arc<FlashTier>> {
    let flash = config.flash.as_ref()?;
    Some(Arc::new(FlashTier::new(
        g.segments as u32,
        config.segment_size,
        g.align_shift,
        flash,
        config.clock.now(),
    )))
}

impl EngineState {
    /// An empty engine of `geometry` over `heap` (every segment free).
    pub fn new(config: Config, g: Geometry, heap: Heap) -> EngineState {
        EngineState {
            active: ActiveSegments::new(g.segments),
            heap,
            headers: (0..g.segments).map(|_| SegmentHeader::new()).collect(),
            readers: ReaderCounts::new(g.segments),
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
            evictor: Mutex::new(EvictorState::default()),
            ghosts: Ghosts::for_heap(g.segments * config.segment_size),
            count_window: CountWindow::new(g.segments, config.clock.now()),
            cas: CasSequence::new(config.cas_start),
            flash: flash_tier(&config, &g),
            config,
        }
    }

    /// An engine rebuilt by a warm restart. CAS uniques and lease tokens continue from the
    /// hash chains' saved counters; ghosts (hints, not state) start empty.
    pub fn restored(config: Config, g: Geometry, parts: RestoredParts) -> EngineState {
        let w = parts.words;
        let now = parts.clock.now();
        EngineState {
            active: ActiveSegments::new(g.segments),
            heap: parts.heap,
            readers: ReaderCounts::new(parts.headers.len()),
            headers: parts.headers,
            table: HashTable::from_table(parts.table, g.max_power),
            chains: parts.chains,
            free: FreePool::from_list(parts.free, 1),
            clock: parts.clock,
            align_shift: g.align_shift,
            generation: AtomicU32::new(w.generation),
            flush_at: AtomicU32::new(w.flush_at),
            reclaimed_generation: AtomicU32::new(w.reclaimed_generation),
            counters: EngineCounters::default(),
            handles: Mutex::new(HandleRegistry::default()),
            evictor: Mutex::new(EvictorState::default()),
            ghosts: Ghosts::for_heap(g.segments * config.segment_size),
            count_window: CountWindow::new(g.segments, now),
            cas: CasSequence::new(w.cas_reserved),
            flash: flash_tier(&config, &g),
            config,
        }
    }

    /// The engine's words for a snapshot. Only meaningful when nothing else runs (no live
    /// handle, no expirer), which `Cache::snapshot` checks.
    pub fn restart_words(&self) -> RestartWords {
        RestartWords {
            generation: self.generation.load(Ordering::Acquire),
            flush_at: self.flush_at.load(Ordering::Acquire),
            reclaimed_generation: self.reclaimed_generation.load(Ordering::Acquire),
            cas_reserved: self.cas.reserved(),
        }
    }

    /// The segment heap (all item bytes; its accessors are `unsafe` with their contracts).
    #[inline]
    pub fn flash(&self) -> Option<&Arc<FlashTier>> {
        self.flash.as_ref()
    }

    /// Whether slot `s` points at a flash copy (not a RAM segment).
    #[inline]
    pub fn is_flash_slot(&self, s: Slot) -> bool {
        s.seg() as usize >= self.headers.len()
    }

    /// The heap.
    pub fn heap(&self) -> &Heap {
        &self.heap
    }

    /// The active segments writers append to.
    #[inline]
    pub fn active(&self) -> &ActiveSegments {
        &self.active
    }

    /// The shared header of segment `seg` (`seg` must be a segment id of this heap).
    #[inline]
    pub fn segment(&self, seg: u32) -> &SegmentHeader {
        &self.headers[seg as usize]
    }

    /// Takes a reference on segment `seg`'s bytes in reader-count stripe `stripe` (a
    /// handle's own, see `readers.rs`); fails when the segment is being retired. Released
    /// with [`EngineState::release`] and the same stripe.
    #[inline]
    pub fn acquire(&self, seg: u32, stripe: usize) -> bool {
        self.readers
            .acquire(&self.headers[seg as usize], seg, stripe)
    }

    /// Drops a reference taken by [`EngineState::acquire`].
    #[inline]
    pub fn release(&self, seg: u32, stripe: usize) {
        self.readers.release(seg, stripe);
    }

    /// Every segment's header, indexed by segment id (what chain operations link through).
    #[inline]
    pub fn segments(&self) -> &[SegmentHeader] {
        &self.headers
    }

    /// Where CAS uniques come from (`hashtable/cas.rs`).
    #[inline]
    pub fn cas_sequence(&self) -> &CasSequence {
        &self.cas
    }

    /// The hash table (its current generation, growth and chain locks).
    #[inline]
    pub fn table(&self) -> &HashTable {
        &self.table
    }

    /// The per-TTL-bucket segment chains.
    #[inline]
    pub fn chains(&self) -> &Chains {
        &self.chains
    }

    /// The free segments.
    #[inline]
    pub fn free_pool(&self) -> &FreePool {
        &self.free
    }

    /// The cache's clock.
    #[inline]
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The configuration the engine was built with.
    #[inline]
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Counters of rare events (evictions, expirations, merges, growth).
    #[inline]
    pub fn counters(&self) -> &EngineCounters {
        &self.counters
    }

    /// What is remembered of evicted keys.
    #[inline]
    pub fn ghosts(&self) -> &Ghosts {
        &self.ghosts
    }

    /// How often an item's reads may count.
    #[inline]
    pub fn count_window(&self) -> &CountWindow {
        &self.count_window
    }

    /// log2 of the item alignment unit (items start at multiples of it).
    pub fn align_shift(&self) -> u32 {
        self.align_shift
    }

    /// The eviction lock and what eviction remembers: holding the guard makes the caller
    /// the only evictor.
    pub fn lock_evictor(&self) -> MutexGuard<'_, EvictorState> {
        match self.evictor.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            Err(TryLockError::WouldBlock) => {
                ContentionCounters::add(&self.counters.contention.evict_lock_waits, 1);
                self.evictor.lock().unwrap_or_else(|e| e.into_inner())
            }
        }
    }

    /// Registers a new handle's counters, so statistics include them while it lives; returns
    /// how many handles were created before it (a deterministic per-handle number).
    pub fn register_handle(&self, counters: Arc<HandleCounters>) -> u64 {
        self.handles
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .live
            .push(counters);
        self.counters
            .handles_created
            .fetch_add(1, Ordering::Relaxed)
    }

    /// Folds a dropped handle's counters into the retired totals.
    pub fn deregister_handle(&self, counters: &Arc<HandleCounters>) {
        let mut registry = self.handles.lock().unwrap_or_else(|e| e.into_inner());
        registry.retired.add(&counters.snapshot());
        registry.live.retain(|c| !Arc::ptr_eq(c, counters));
    }

    /// Handles alive now.
    pub fn live_handles(&self) -> usize {
        self.handles
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .live
            .len()
    }

    /// Every handle's counters summed, dropped handles' included.
    pub fn handle_totals(&self) -> HandleTotals {
        let registry = self.handles.lock().unwrap_or_else(|e| e.into_inner());
        let mut totals = HandleTotals::default();
        totals.add(&registry.retired);
        for h in &registry.live {
            totals.add(&h.snapshot());
        }
        totals
    }

    /// Invalidates every item now (`delay` 0) or when `delay` seconds have passed, like
    /// memcached's `flush_all [delay]`. A later call replaces a pending delayed flush.
    pub fn flush_all(&self, delay: u32) {
        if delay == 0 {
            self.flush_at.store(u32::MAX, Ordering::Release);
            self.generation.fetch_add(1, Ordering::AcqRel);
        } else {
            let now = self.clock.now();
            self.flush_at
                .store(now.saturating_add(delay), Ordering::Release);
        }
    }

    /// Whether the segments of every generation before `generation` were all reclaimed
    /// (the next expiration pass may then stop at each chain's first live segment).
    pub fn reclaimed_through(&self, generation: u32) -> bool {
        self.reclaimed_generation.load(Ordering::Acquire) == generation
    }

    /// Records that a full pass reclaimed every segment older than `generation`.
    pub fn set_reclaimed(&self, generation: u32) {
        self.reclaimed_generation
            .store(generation, Ordering::Release);
    }

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

    /// Decodes the item header at `offset` in `seg`, reading exactly the item's header bytes:
    /// the fixed part first, then only the extensions its flag byte says it has.
    ///
    /// # Safety
    /// The caller keeps the segment from being retired and reused (a reader reference on
    /// it, a locked hash chain that points at the item, or a claim on the whole segment:
    /// MERGING, or RETIRING and drained), and the item at `offset` is complete and no longer
    /// written: published (a slot pointing at it was read with Acquire or under its chain
    /// lock), written by the caller itself, or in a segment whose bytes are final (sealed and
    /// settled). Its bytes then never change while the caller looks, and no other bytes are
    /// read, so a writer appending the next item in the same segment is never raced.
    #[inline]
    pub unsafe fn header_at(&self, seg: u32, offset: usize) -> Header {
        // SAFETY: per this function's contract the item's bytes are final and stay in place;
        // the fixed header is the start of every item. The heap checks bounds.
        let fixed = unsafe { self.heap.bytes(seg, offset, item::HEADER_LEN) };
        let extensions = item::extensions_len(fixed);
        if extensions == 0 {
            return item::decode(fixed);
        }
        // SAFETY: as above: the extensions the item's own flag byte announces are part of
        // the same complete item.
        let prefix = unsafe { self.heap.bytes(seg, offset, item::HEADER_LEN + extensions) };
        item::decode(prefix)
    }

    /// The key of the item at `offset` in `seg`, whose header is `header`.
    ///
    /// # Safety
    /// As for [`EngineState::header_at`], for as long as the returned slice lives; `header`
    /// is that item's header.
    #[inline]
    pub unsafe fn key_at(&self, seg: u32, offset: usize, header: &Header) -> &[u8] {
        // SAFETY: per this function's contract (the key lies inside the same final item).
        unsafe {
            self.heap
                .bytes(seg, offset + header.key_offset, header.key_len)
        }
    }

    /// The value of the item at `offset` in `seg`, whose header is `header`.
    ///
    /// # Safety
    /// As for [`EngineState::key_at`].
    #[inline]
    pub unsafe fn value_at(&self, seg: u32, offset: usize, header: &Header) -> &[u8] {
        // SAFETY: per this function's contract (the value lies inside the same final item).
        unsafe {
            self.heap.bytes(
                seg,
                offset + header.key_offset + header.key_len,
                header.value_len,
            )
        }
    }

    /// The whole item (header to value) at `offset` in `seg`, whose header is `header`.
    ///
    /// # Safety
    /// As for [`EngineState::key_at`].
    #[inline]
    pub unsafe fn item_bytes(&self, seg: u32, offset: usize, header: &Header) -> &[u8] {
        // SAFETY: per this function's contract (the item's own bytes, all final).
        unsafe { self.heap.bytes(seg, offset, header.len()) }
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
                self.count_chain_wait(chain.spins());
                return f(&chain);
            }
            self.wait_for_growth();
            *table = self.table.load();
        }
    }

    /// Counts a chain lock that made its taker wait `spins` turns (nothing when it was free).
    #[inline]
    pub fn count_chain_wait(&self, spins: u32) {
        if spins > 0 {
            let c = &self.counters.contention;
            ContentionCounters::add(&c.chain_lock_waits, 1);
            ContentionCounters::add(&c.chain_lock_spins, u64::from(spins));
        }
    }

    /// Waits for a table growth in progress (a chain was found moved), counting the stall.
    pub fn wait_for_growth(&self) {
        ContentionCounters::add(&self.counters.contention.growth_stalls, 1);
        self.table.wait_for_growth();
    }

    /// The items written in `seg`, in order: (offset, header, aligned size). Stops at a
    /// reserved range whose writer never wrote it (key length 0) rather than walk garbage.
    ///
    /// # Safety
    /// The segment's bytes below its write offset are final and stay in place while the
    /// iterator is used: it is sealed and settled (no writer holds a reservation) and
    /// claimed by the caller (MERGING), or RETIRING and drained. (Merges, compaction and
    /// retirement.)
    pub unsafe fn items_in(&self, seg: u32) -> impl Iterator<Item = (usize, Header, usize)> + '_ {
        let used = self.headers[seg as usize].used();
        let mut offset = 0;
        std::iter::from_fn(move || {
            if offset >= used {
                return None;
            }
            // SAFETY: per this function's contract every byte below `used` is final; an item
            // (or an unwritten, zeroed reservation) starts at `offset`.
            let header = unsafe { self.header_at(seg, offset) };
            if header.key_len == 0 {
                return None;
            }
            let at = offset;
            let size = self.aligned(header.len());
            offset += size;
            Some((at, header, size))
        })
    }

    /// The hash of the key of the item at (`seg`, `offset`), whose header is `header`.
    ///
    /// # Safety
    /// As for [`EngineState::key_at`].
    #[inline]
    pub unsafe fn item_hash(&self, seg: u32, offset: usize, header: &Header) -> u64 {
        // SAFETY: per this function's contract.
        hash(unsafe { self.key_at(seg, offset, header) })
    }
}
