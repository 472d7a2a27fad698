//! The bulk-chained hash table (Segcache §3.3).
//!
//! Each bucket is one 64-byte cache line of eight 64-bit slots. In a chain's first bucket,
//! slot 0 is the *bucket info*, shared by every key hashed there:
//!
//! ```text
//! info:  [cas:32][last access:16][item count:8][lock byte:8]
//! item:  [segment:24][offset:20][counted:1][frequency:7][fetched:1][tag:11]
//! next:  [bucket index:52][tag = 0:12]
//! ```
//!
//! A chain grows by taking a bucket from the overflow area that follows the primary buckets;
//! the last slot of a full bucket then points to it (tags are never 0, so a pointer is
//! recognisable without any other state). Chains never shrink while a table is in use, which
//! is what lets readers walk them without a lock: a slot is only ever replaced by a complete
//! value with a Release store.
//!
//! **Concurrency.** Readers take no lock. Writers lock the chain with the lock bit in the
//! info slot (a tiny spinlock held for a few slot updates). The shared CAS value is bumped
//! after every change of a key's value, *after* the slot is written, and readers read it
//! *before* the slot, so a reader never returns an old value with a newer CAS.
//!
//! **Growth** (the paper's §6.1 warning about O(n) drift): when the overflow area is three
//! quarters used, the table doubles. The grower locks every chain of the old table for good,
//! marking it MOVED, copies the entries into a new table, and publishes it; writers that meet
//! a MOVED chain wait for the grower and retry on the new table. Readers of the old table keep
//! seeing consistent (frozen) chains until they finish.

mod cas;
pub(crate) mod slot;
mod table;

pub use cas::{CasBlock, CasSequence};
pub use slot::{hash, tag_of, Slot, MAX_FREQ, MAX_OFFSET_UNITS, MAX_SEGMENTS};
pub use table::{ChainGuard, Moved, Table, TableFull, TableImage};

use crate::sync::atomic::AtomicU64;
use crate::sync::Mutex;
use slot::{CAS_SHIFT, MOVED, TS_MASK};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The table plus its growth machinery.
///
/// Handles cache an `Arc` of the current table and compare [`HashTable::version`] (one
/// relaxed-cost load) before each operation, refreshing only after a growth; an old table is
/// freed when the last handle has moved on. (A general-purpose `ArcSwap` load cost about 100
/// instructions per operation here, a fifth of a whole get.)
pub struct HashTable {
    current: Mutex<Arc<Table>>,
    version: AtomicU64,
    grow_lock: Mutex<()>,
    max_power: u32,
}

impl HashTable {
    /// A table restored from an image, which may grow to `2^max_power`.
    pub fn from_table(table: Table, max_power: u32) -> HashTable {
        let power = table.power;
        HashTable {
            current: Mutex::new(Arc::new(table)),
            version: AtomicU64::new(0),
            grow_lock: Mutex::new(()),
            max_power: max_power.max(power),
        }
    }

    /// A table with `2^power` primary buckets that may grow to `2^max_power`.
    pub fn new(power: u32, max_power: u32) -> HashTable {
        HashTable {
            current: Mutex::new(Arc::new(Table::new(power))),
            version: AtomicU64::new(0),
            grow_lock: Mutex::new(()),
            max_power: max_power.max(power),
        }
    }

    /// The current table (takes a mutex: handles cache it, see [`HashTable::version`]).
    pub fn load(&self) -> Arc<Table> {
        self.current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Changes whenever a new table is published.
    #[inline]
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// Waits until a growth in progress has finished.
    pub fn wait_for_growth(&self) {
        drop(self.grow_lock.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// Doubles the table if `seen` is still the current one. `hash_of` gives each slot, found
    /// in chain `head` of the old table of `power`, the hash it is filed under in the new one
    /// (read from its key in RAM, or, for a flash item, made of `head` and a hash bit its slot
    /// keeps) and the slot to store there, or `None` to drop it; it must not touch the table.
    pub fn grow(
        &self,
        seen_power: u32,
        hash_of: impl Fn(Slot, usize, u32) -> Option<(u64, Slot)>,
    ) -> bool {
        let _grow = self.grow_lock.lock().unwrap_or_else(|e| e.into_inner());
        let old = self.load();
        if old.power != seen_power || old.power >= self.max_power {
            return false;
        }
        let new = Table::new(old.power + 1);
        for head in 0..old.primary {
            // Lock the chain for good: writers now wait for the new table.
            let guard = old
                .lock(head)
                .expect("only the grower marks chains moved, and it holds the grow lock");
            old.info(head).fetch_or(MOVED, Ordering::AcqRel);
            std::mem::forget(guard);
            let info = old.info(head).load(Ordering::Acquire);
            let cas_ts = info & (TS_MASK | (u64::MAX << CAS_SHIFT));
            new.info(head).store(cas_ts, Ordering::Relaxed);
            new.info(head + old.primary)
                .store(cas_ts, Ordering::Relaxed);
            old.scan(head, |_, slot| {
                // A slot without a hash (a flash item) is dropped: the scan goes on.
                let (hash, slot) = hash_of(slot, head, old.power)?;
                let target = new.head_of(hash);
                let guard = new.lock(target).expect("new table is private");
                guard
                    .insert(slot)
                    .expect("a doubled table has room for the old one's entries");
                None::<()>
            });
        }
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(new);
        self.version.fetch_add(1, Ordering::AcqRel);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::slot::is_pointer;
    use super::table::{zeroed_buckets, Bucket};
    #[test]
    fn zeroed_buckets_are_empty() {
        let empty = Bucket::new();
        let buckets = zeroed_buckets(1000);
        assert_eq!(buckets.len(), 1000);
        for b in buckets.iter() {
            for (slot, want) in b.slots.iter().zip(&empty.slots) {
                assert_eq!(slot.load(Ordering::Relaxed), want.load(Ordering::Relaxed));
            }
        }
        assert!(zeroed_buckets(0).is_empty());
    }

    use super::*;

    fn hash_for(i: u64) -> u64 {
        xxhash_rust::xxh3::xxh3_64(&i.to_le_bytes())
    }

    #[test]
    fn slot_roundtrip() {
        let s = Slot::new(0xabcdef, 0xfffff, MAX_FREQ, 0x7ff);
        assert_eq!(s.seg(), 0xabcdef);
        assert_eq!(s.offset_units(), 0xfffff);
        assert_eq!(s.freq(), MAX_FREQ);
        assert!(!s.counted() && !s.fetched());
        assert_eq!(s.tag(), 0x7ff);
        assert!(!is_pointer(s.0));
        assert!(s.same_location(s.with_freq(3)));
        let c = s.with_counted_freq(9).with_fetched(true);
        assert!(c.counted() && c.fetched() && c.same_location(s));
        assert_eq!((c.freq(), c.seg(), c.tag()), (9, 0xabcdef, 0x7ff));
        assert!(!c.with_freq(9).counted() && c.with_freq(9).fetched());
        assert!(!c.with_fetched(false).fetched());
        assert!(!is_pointer(Slot::new(1, 0, 0, 1).with_fetched(true).0));
    }

    #[test]
    fn a_new_second_clears_counted_marks() {
        let table = Table::new(1);
        let chain = table.lock(0).unwrap();
        for i in 1..=10u16 {
            chain
                .insert(Slot::new(u32::from(i), 0, 0, i).with_counted_freq(5))
                .unwrap();
        }
        drop(chain);
        table.start_second(0);
        let mut seen = 0;
        table.scan(0, |_, s| {
            assert!(!s.counted());
            assert_eq!(s.freq(), 5);
            seen += 1;
            None::<()>
        });
        assert_eq!(seen, 10);
    }

    #[test]
    fn chains_extend_and_everything_stays_findable() {
        let table = Table::new(1);
        // 100 items into 2 chains: forces overflow buckets.
        for i in 0..100u32 {
            let head = (i % 2) as usize;
            let g = table.lock(head).unwrap();
            g.insert(Slot::new(i, i, 0, 1 + (i % 4000) as u16)).unwrap();
        }
        for i in 0..100u32 {
            let head = (i % 2) as usize;
            let found = table.scan(head, |_, s| (s.seg() == i).then_some(()));
            assert!(found.is_some(), "item {i}");
        }
        assert!(table.overflow_used() > 0);
    }

    #[test]
    fn growth_keeps_entries_and_cas() {
        let ht = HashTable::new(2, 10);
        let seq = CasSequence::new(0);
        let t = ht.load();
        for i in 0..40u64 {
            let h = hash_for(i);
            let g = t.lock(t.head_of(h)).unwrap();
            g.insert(Slot::new(i as u32, 0, 0, tag_of(h))).unwrap();
            g.bump_cas(&seq, 0);
        }
        let cas_before: Vec<u64> = (0..40u64)
            .map(|i| t.cas(t.head_of(hash_for(i)), &seq))
            .collect();
        let power = t.power();
        drop(t);
        assert!(ht.grow(power, |slot, _, _| Some((
            hash_for(u64::from(slot.seg())),
            slot
        ))));
        let t = ht.load();
        assert_eq!(t.power(), 3);
        for i in 0..40u64 {
            let h = hash_for(i);
            let found = t.scan(t.head_of(h), |_, s| (s.seg() == i as u32).then_some(()));
            assert!(found.is_some(), "item {i} lost in growth");
            assert_eq!(t.cas(t.head_of(h), &seq), cas_before[i as usize]);
        }
    }

    #[test]
    fn moved_chains_refuse_writers() {
        let ht = HashTable::new(1, 4);
        let old = ht.load();
        assert!(ht.grow(1, |s, _, _| Some((0, s))));
        assert!(matches!(old.lock(0), Err(Moved)));
    }
}
