//! A thread's handle on the cache, and everything a handle does.
//!
//! | file        | what it holds |
//! |-------------|---------------|
//! | `mod.rs`    | [`Handle`]: its cached hash table, chain locking across growth, table growth, the frequency counter |
//! | `read.rs`   | lock-free lookups and [`ItemRef`], the pinned item they return |
//! | `write.rs`  | the append path: room in an active segment, the item's bytes, unpublished |
//! | `status.rs` | what a store or incr/decr answers ([`StoreStatus`], [`StoreError`], ...) |
//! | `store.rs`  | publishing under the chain lock, conditional stores (`verdict`) |
//! | `modify.rs` | read-modify-write operations (append, incr, touch), deletes |
//! | `lease.rs`  | leases, stale values, hold-offs |
//! | `dump.rs`   | key dumps, a growth-proof walk of the hash table |
//!
//! Writes append to active segments shared by the handles of a shard (`active.rs`); items
//! written by one handle are visible to every other as soon as the hash slot is published.
//! Siblings depend on one another in the order of that table (reads below writes, stores below
//! read-modify-writes and leases), never back.

mod dump;
mod flash;
mod lease;
mod modify;
mod read;
mod status;
mod store;
mod write;

pub use dump::{DumpCursor, DumpItem, FlashDumpSegment};
pub use lease::LeaseOutcome;
pub use read::{ItemRef, KeyHash};
pub use status::{DeltaError, StoreError, StoreMode, StoreStatus};

use crate::counters::HandleCounters;
use crate::engine_state::EngineState;
use crate::hashtable::{hash, CasBlock, ChainGuard, Moved, Table, MAX_FREQ};
use crate::readers::STRIPES as READER_STRIPES;
use std::cell::{Cell, Ref, RefCell};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// One thread's way into the cache. `Send`, not `Sync`: give each thread its own.
pub struct Handle {
    engine: Arc<EngineState>,
    /// Which shard of the shared active segments this handle appends to (`active.rs`).
    shard: usize,
    /// Which stripe of a segment's reader count this handle counts in
    /// (`readers.rs`).
    stripe: usize,
    counters: Arc<HandleCounters>,
    rng: Cell<u64>,
    /// The hash table as of version `.0` (see `HashTable::version`).
    table: RefCell<(u64, Arc<Table>)>,
    /// Set when an insert found the hash table's overflow area running low.
    grow_hint: Cell<Option<u32>>,
    /// Reused buffer for read-modify-write operations.
    scratch: Vec<u8>,
    /// This handle's block of CAS uniques (`hashtable/cas.rs`).
    cas: CasBlock,
}

impl Handle {
    pub(crate) fn new(engine: Arc<EngineState>) -> Handle {
        let counters = Arc::new(HandleCounters::default());
        // Deterministic per handle, so simulations replay identically.
        let nth = engine.register_handle(counters.clone());
        let seed = hash(&nth.to_le_bytes()) | 1;
        let table = RefCell::new((engine.table().version(), engine.table().load()));
        Handle {
            shard: engine.active().shard_of(nth),
            stripe: (nth % READER_STRIPES as u64) as usize,
            table,
            engine,
            counters,
            rng: Cell::new(seed),
            grow_hint: Cell::new(None),
            scratch: Vec::new(),
            cas: CasBlock::default(),
        }
    }

    /// The current hash table. Callers must not hold the returned reference across another
    /// call of this function that could refresh it (none do: lookups and chain updates each
    /// take it once).
    #[inline]
    pub(crate) fn table(&self) -> Ref<'_, Arc<Table>> {
        let version = self.engine.table().version();
        if self.table.borrow().0 != version {
            if let Ok(mut cached) = self.table.try_borrow_mut() {
                *cached = (version, self.engine.table().load());
            }
        }
        Ref::map(self.table.borrow(), |t| &t.1)
    }

    /// Gives a locked chain its next CAS unique after a change of one of its keys, from this
    /// handle's block when the chain is not ahead of it, or at least `at_least`.
    pub(crate) fn bump_chain_cas(&self, chain: &ChainGuard<'_>, at_least: u64) -> u64 {
        let seq = self.engine.cas_sequence();
        let proposal = self.cas.propose(seq).max(at_least);
        let cas = chain.bump_cas(seq, proposal);
        self.cas.taken(cas);
        cas
    }

    /// The CAS unique a lease handed out now on a chain whose unique is `chain_cas` would
    /// take: the chain's next one (never 0 or 1, a hit and a hot miss to mcrouter's
    /// `lease-get`). Publishing it (only while the chain still holds `chain_cas`) gives the
    /// chain that unique, so a key's uniques and tokens are one growing sequence: a token is
    /// larger than every CAS read of the key before it, and later ones larger still.
    pub(crate) fn next_lease_token(&self, chain_cas: u64) -> u64 {
        self.cas
            .propose(self.engine.cas_sequence())
            .max(chain_cas + 1)
            .max(2)
    }

    /// Segcache's approximate smoothed frequency counter: +1 per counted access below 16,
    /// then +1 with probability 1/freq (a Morris counter), saturating at [`MAX_FREQ`].
    fn next_frequency(&self, freq: u8) -> u8 {
        if freq < 16 {
            return freq + 1;
        }
        if freq >= MAX_FREQ {
            return MAX_FREQ;
        }
        let mut x = self.rng.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.set(x);
        if x.is_multiple_of(u64::from(freq)) {
            freq + 1
        } else {
            freq
        }
    }

    /// Runs `f` with `key`'s hash chain locked, retrying across table growth.
    pub(crate) fn with_chain<T>(
        &self,
        h: u64,
        mut f: impl FnMut(&Table, &ChainGuard<'_>) -> T,
    ) -> T {
        loop {
            let table = self.table();
            let done = match table.lock(table.head_of(h)) {
                Ok(chain) => {
                    self.engine.count_chain_wait(chain.spins());
                    Some(f(&table, &chain))
                }
                Err(Moved) => None,
            };
            match done {
                Some(v) => return v,
                None => {
                    drop(table);
                    self.engine.wait_for_growth();
                }
            }
        }
    }

    /// Grows the hash table (called when an insert found no room).
    pub(crate) fn grow_table(&self, seen_power: u32) {
        let engine = &*self.engine;
        let grew = engine.table().grow(seen_power, |slot, head, power| {
            crate::demote::rehash(engine, slot, head, power)
        });
        if grew {
            engine
                .counters()
                .hash_growths
                .fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // The active segments are shared with other handles and stay open.
        self.engine.deregister_handle(&self.counters);
    }
}
