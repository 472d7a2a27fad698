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

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

const SLOTS: usize = 8;
const LOCK: u64 = 1;
const MOVED: u64 = 2;
const COUNT_SHIFT: u32 = 8;
const TS_SHIFT: u32 = 16;
const TS_MASK: u64 = 0xffff << TS_SHIFT;
const CAS_SHIFT: u32 = 32;

/// Low bits that are zero in a chain pointer (an item's tag and fetched bit).
const TAG_BITS: u32 = 12;
const TAG_MASK: u64 = (1 << TAG_BITS) - 1;
/// An item's tag: 11 bits of its hash.
const ITEM_TAG_BITS: u32 = 11;
const ITEM_TAG_MASK: u64 = (1 << ITEM_TAG_BITS) - 1;
/// memcached's `ITEM_FETCHED`: the item was read since it was written (meta `h`, `me`'s
/// `fetch=`). Taken from the tag's top bit: one more key comparison per 2 048 foreign slots
/// instead of per 4 096, and no byte more per item.
const FETCHED: u64 = 1 << ITEM_TAG_BITS;
const FREQ_SHIFT: u32 = 12;
const FREQ_MASK: u64 = 0xff << FREQ_SHIFT;
const OFFSET_SHIFT: u32 = 20;
const OFFSET_BITS: u32 = 20;
const SEG_SHIFT: u32 = 40;

/// The largest frequency: the slot's frequency byte is 7 bits of count and the
/// [`COUNTED`] mark.
pub const MAX_FREQ: u8 = 0x7f;
/// Set in a slot's frequency byte once an access was counted in the chain's current second
/// (the paper's smoothing: "incremented at most once per second" per object, with the last
/// access second shared by the bucket). Cleared for the whole chain when its second changes.
pub const COUNTED: u8 = 0x80;

/// Largest segment id a slot can hold.
pub const MAX_SEGMENTS: usize = 1 << 24;
/// Largest offset (in alignment units) a slot can hold.
pub const MAX_OFFSET_UNITS: usize = 1 << OFFSET_BITS;

/// A decoded item slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot(pub u64);

impl Slot {
    pub fn new(seg: u32, offset_units: u32, freq: u8, tag: u16) -> Slot {
        debug_assert!((seg as usize) < MAX_SEGMENTS);
        debug_assert!((offset_units as usize) < MAX_OFFSET_UNITS);
        debug_assert!(tag != 0 && u64::from(tag) <= ITEM_TAG_MASK);
        Slot(
            (u64::from(seg) << SEG_SHIFT)
                | (u64::from(offset_units) << OFFSET_SHIFT)
                | (u64::from(freq) << FREQ_SHIFT)
                | u64::from(tag),
        )
    }
    #[inline]
    pub fn seg(self) -> u32 {
        (self.0 >> SEG_SHIFT) as u32
    }
    #[inline]
    pub fn offset_units(self) -> u32 {
        ((self.0 >> OFFSET_SHIFT) & ((1 << OFFSET_BITS) - 1)) as u32
    }
    /// The item's access frequency (Segcache's ASFC, 0..=[`MAX_FREQ`]).
    #[inline]
    pub fn freq(self) -> u8 {
        ((self.0 & FREQ_MASK) >> FREQ_SHIFT) as u8 & MAX_FREQ
    }
    /// Whether an access was already counted in the chain's current second.
    #[inline]
    pub fn counted(self) -> bool {
        ((self.0 & FREQ_MASK) >> FREQ_SHIFT) as u8 & COUNTED != 0
    }
    #[inline]
    pub fn tag(self) -> u16 {
        (self.0 & ITEM_TAG_MASK) as u16
    }
    /// Whether the item was read since it was written (memcached's `ITEM_FETCHED`).
    #[inline]
    pub fn fetched(self) -> bool {
        self.0 & FETCHED != 0
    }
    /// The same slot marked fetched (or not).
    #[inline]
    pub fn with_fetched(self, fetched: bool) -> Slot {
        if fetched {
            Slot(self.0 | FETCHED)
        } else {
            Slot(self.0 & !FETCHED)
        }
    }
    /// The same slot with frequency `freq` and no [`COUNTED`] mark.
    #[inline]
    pub fn with_freq(self, freq: u8) -> Slot {
        debug_assert!(freq <= MAX_FREQ);
        Slot((self.0 & !FREQ_MASK) | (u64::from(freq) << FREQ_SHIFT))
    }
    /// The same slot with frequency `freq`, marked [`COUNTED`] for this second.
    #[inline]
    pub fn with_counted_freq(self, freq: u8) -> Slot {
        Slot(self.with_freq(freq).0 | (u64::from(COUNTED) << FREQ_SHIFT))
    }
    /// Same item location (ignores the frequency and the fetched mark).
    #[inline]
    pub fn same_location(self, other: Slot) -> bool {
        (self.0 & !(FREQ_MASK | FETCHED)) == (other.0 & !(FREQ_MASK | FETCHED))
    }
}

/// The 11-bit tag of a hash (never 0: 0 marks chain pointers).
#[inline]
pub fn tag_of(hash: u64) -> u16 {
    let tag = (hash >> (64 - ITEM_TAG_BITS)) as u16;
    if tag == 0 {
        1
    } else {
        tag
    }
}

#[inline]
fn is_pointer(v: u64) -> bool {
    v != 0 && v & TAG_MASK == 0
}

#[repr(align(64))]
struct Bucket {
    slots: [AtomicU64; SLOTS],
}

impl Bucket {
    /// An empty bucket, built field by field (the tests compare `zeroed_buckets` with it).
    #[cfg(test)]
    fn new() -> Bucket {
        Bucket {
            slots: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

/// `n` empty buckets, allocated as fresh zeroed memory that is advised to use huge pages
/// before anything touches it (advice given after the pages were faulted in as small pages
/// would come too late). An empty bucket is all zero bits.
fn zeroed_buckets(n: usize) -> Box<[Bucket]> {
    if n == 0 {
        return Box::new([]);
    }
    let layout = std::alloc::Layout::array::<Bucket>(n).expect("hash table size");
    // SAFETY: the layout has a non-zero size (n > 0 and a Bucket is 64 bytes).
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
    if ptr.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    crate::heap::advise_huge_pages(ptr, layout.size());
    // SAFETY: `ptr` is a live allocation from the global allocator with exactly the layout
    // of `[Bucket; n]` (so `Box` may own and later free it with that layout), it is aligned
    // for `Bucket`, and all-zero bytes are a valid `Bucket` (seven `AtomicU64` zeros, the
    // same value `Bucket::new` builds; the unit test `zeroed_buckets_are_empty` checks it).
    unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr.cast::<Bucket>(), n)) }
}

/// One generation of the table.
pub struct Table {
    buckets: Box<[Bucket]>,
    primary: usize,
    next_overflow: AtomicUsize,
    power: u32,
}

/// Why a chain could not be locked.
#[derive(Debug, PartialEq, Eq)]
pub struct Moved;

impl Table {
    fn new(power: u32) -> Table {
        let primary = 1usize << power;
        let overflow = (primary / 4).max(16);
        Table {
            buckets: zeroed_buckets(primary + overflow),
            primary,
            next_overflow: AtomicUsize::new(primary),
            power,
        }
    }

    /// The chain head for `hash`.
    #[inline]
    pub fn head_of(&self, hash: u64) -> usize {
        (hash as usize) & (self.primary - 1)
    }

    /// Starts loading the chain head's bucket into the CPU cache.
    #[inline]
    pub fn prefetch(&self, head: usize) {
        if let Some(bucket) = self.buckets.get(head) {
            crate::heap::prefetch_line((bucket as *const Bucket).cast());
        }
    }

    /// log2 of the number of primary buckets.
    pub fn power(&self) -> u32 {
        self.power
    }

    /// Bytes the table occupies.
    pub fn bytes(&self) -> usize {
        self.buckets.len() * std::mem::size_of::<Bucket>()
    }

    /// Primary buckets.
    pub fn primary_buckets(&self) -> usize {
        self.primary
    }

    /// Overflow buckets in use.
    pub fn overflow_used(&self) -> usize {
        self.next_overflow
            .load(Ordering::Relaxed)
            .min(self.buckets.len())
            - self.primary
    }

    /// Overflow buckets available in all.
    pub fn overflow_capacity(&self) -> usize {
        self.buckets.len() - self.primary
    }

    /// The bucket info word of chain `head`.
    #[inline]
    pub fn info(&self, head: usize) -> &AtomicU64 {
        &self.buckets[head].slots[0]
    }

    /// The chain's last-access second (the low 16 bits of the cache clock's second).
    #[inline]
    pub fn last_access(&self, head: usize) -> u16 {
        ((self.info(head).load(Ordering::Relaxed) & TS_MASK) >> TS_SHIFT) as u16
    }

    /// The shared CAS value of chain `head`.
    #[inline]
    pub fn cas(&self, head: usize) -> u32 {
        (self.info(head).load(Ordering::Acquire) >> CAS_SHIFT) as u32
    }

    /// Calls `f` on every item slot of the chain (lock-free). `f` returns `Some` to stop.
    #[inline]
    pub fn scan<'a, T>(
        &'a self,
        head: usize,
        mut f: impl FnMut(&'a AtomicU64, Slot) -> Option<T>,
    ) -> Option<T> {
        let mut bucket = head;
        let mut first = 1;
        loop {
            let slots = &self.buckets[bucket].slots;
            let mut next = None;
            for slot in &slots[first..] {
                let v = slot.load(Ordering::Acquire);
                if v == 0 {
                    continue;
                }
                if is_pointer(v) {
                    next = Some((v >> TAG_BITS) as usize);
                    continue;
                }
                if let Some(found) = f(slot, Slot(v)) {
                    return Some(found);
                }
            }
            match next {
                Some(n) => {
                    bucket = n;
                    first = 0;
                }
                None => return None,
            }
        }
    }

    /// Updates the chain's last-access second; true when this call moved it: a new second
    /// began for the chain, and the caller clears its items' [`COUNTED`] marks with
    /// [`Table::start_second`].
    #[inline]
    pub fn touch_timestamp(&self, head: usize, now: u32) -> bool {
        let info = self.info(head);
        let ts = u64::from(now & 0xffff) << TS_SHIFT;
        let cur = info.load(Ordering::Relaxed);
        if cur & TS_MASK == ts {
            return false;
        }
        info.compare_exchange(
            cur,
            (cur & !TS_MASK) | ts,
            Ordering::AcqRel,
            Ordering::Relaxed,
        )
        .is_ok()
    }

    /// Clears the [`COUNTED`] mark of every item of chain `head` (a new second began for it,
    /// so each item may count one more access). Lock-free: a slot that changed meanwhile
    /// (replaced, removed, or turned into a chain pointer) is left alone.
    pub fn start_second(&self, head: usize) {
        self.scan(head, |slot, s| {
            if s.counted() {
                let _ = slot.compare_exchange(
                    s.0,
                    s.with_freq(s.freq()).0,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
            }
            None::<()>
        });
    }

    /// Locks chain `head` for writing.
    pub fn lock(&self, head: usize) -> Result<ChainGuard<'_>, Moved> {
        let info = self.info(head);
        let mut spins = 0u32;
        loop {
            let cur = info.load(Ordering::Relaxed);
            if cur & MOVED != 0 {
                return Err(Moved);
            }
            if cur & LOCK == 0
                && info
                    .compare_exchange_weak(cur, cur | LOCK, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return Ok(ChainGuard { table: self, head });
            }
            spins += 1;
            if spins < 128 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    fn alloc_overflow(&self) -> Option<usize> {
        let idx = self.next_overflow.fetch_add(1, Ordering::Relaxed);
        if idx < self.buckets.len() {
            Some(idx)
        } else {
            None
        }
    }

    /// True when the table should double.
    pub fn wants_growth(&self) -> bool {
        self.overflow_used() * 4 >= self.overflow_capacity() * 3
    }
}

/// A locked chain. Dropping it unlocks.
pub struct ChainGuard<'a> {
    table: &'a Table,
    head: usize,
}

/// Inserting needs an overflow bucket and none is left: grow the table and retry.
#[derive(Debug)]
pub struct TableFull;

impl<'a> ChainGuard<'a> {
    /// The chain's CAS value.
    pub fn cas(&self) -> u32 {
        self.table.cas(self.head)
    }

    /// Calls `f` on every item slot; see [`Table::scan`].
    pub fn scan<T>(&self, f: impl FnMut(&'a AtomicU64, Slot) -> Option<T>) -> Option<T> {
        self.table.scan(self.head, f)
    }

    /// Records an access (a write) at second `now` for the chain, as a read does.
    pub fn touch(&self, now: u32) {
        if self.table.touch_timestamp(self.head, now) {
            self.table.start_second(self.head);
        }
    }

    /// Increments the shared CAS value (after a change of some key's value).
    pub fn bump_cas(&self) {
        self.table
            .info(self.head)
            .fetch_add(1 << CAS_SHIFT, Ordering::AcqRel);
    }

    fn add_count(&self, delta: i64) {
        let info = self.table.info(self.head);
        let mut cur = info.load(Ordering::Relaxed);
        loop {
            let count = ((cur >> COUNT_SHIFT) & 0xff) as i64;
            let new_count = (count + delta).clamp(0, 255) as u64;
            let new = (cur & !(0xff << COUNT_SHIFT)) | (new_count << COUNT_SHIFT);
            match info.compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Replaces an item slot found by [`ChainGuard::scan`].
    pub fn replace(&self, slot: &AtomicU64, value: Slot) {
        slot.store(value.0, Ordering::Release);
    }

    /// Clears an item slot found by [`ChainGuard::scan`].
    pub fn remove(&self, slot: &AtomicU64) {
        slot.store(0, Ordering::Release);
        self.add_count(-1);
    }

    /// Puts `value` into a free slot, extending the chain if needed.
    pub fn insert(&self, value: Slot) -> Result<(), TableFull> {
        let buckets = &self.table.buckets;
        let mut bucket = self.head;
        let mut first = 1;
        loop {
            let slots = &buckets[bucket].slots;
            for slot in &slots[first..SLOTS - 1] {
                if slot.load(Ordering::Relaxed) == 0 {
                    slot.store(value.0, Ordering::Release);
                    self.add_count(1);
                    return Ok(());
                }
            }
            let last = &slots[SLOTS - 1];
            let v = last.load(Ordering::Relaxed);
            if v == 0 {
                last.store(value.0, Ordering::Release);
                self.add_count(1);
                return Ok(());
            }
            if is_pointer(v) {
                bucket = (v >> TAG_BITS) as usize;
                first = 0;
                continue;
            }
            // The last slot holds an item: move it to a new overflow bucket together with the
            // new one, then link. A reader sees the moved item either here or there.
            let Some(next) = self.table.alloc_overflow() else {
                return Err(TableFull);
            };
            let next_slots = &buckets[next].slots;
            next_slots[0].store(v, Ordering::Release);
            next_slots[1].store(value.0, Ordering::Release);
            last.store((next as u64) << TAG_BITS, Ordering::Release);
            self.add_count(1);
            return Ok(());
        }
    }
}

impl Drop for ChainGuard<'_> {
    fn drop(&mut self) {
        self.table
            .info(self.head)
            .fetch_and(!LOCK, Ordering::Release);
    }
}

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

/// A table's whole state as plain numbers, for a warm restart (`persist.rs`).
pub struct TableImage {
    pub power: u32,
    pub next_overflow: u64,
    /// Every slot of every bucket, primary then overflow, locks cleared.
    pub slots: Vec<u64>,
}

impl Table {
    /// Copies the table out. Only when nothing writes it (no handle is live).
    pub fn image(&self) -> TableImage {
        let mut slots = Vec::with_capacity(self.buckets.len() * SLOTS);
        for (i, b) in self.buckets.iter().enumerate() {
            for (j, s) in b.slots.iter().enumerate() {
                let v = s.load(Ordering::Acquire);
                // Chain heads' slot 0 is the info word: drop a lock or MOVED bit.
                let head_info = i < self.primary && j == 0;
                slots.push(if head_info { v & !(LOCK | MOVED) } else { v });
            }
        }
        TableImage {
            power: self.power,
            next_overflow: self.next_overflow.load(Ordering::Acquire) as u64,
            slots,
        }
    }

    /// Rebuilds a table from [`Table::image`]; `None` if the image is inconsistent.
    pub fn from_image(image: &TableImage) -> Option<Table> {
        if !(1..=40).contains(&image.power) {
            return None;
        }
        let primary = 1usize << image.power;
        let buckets = primary + (primary / 4).max(16);
        let next = usize::try_from(image.next_overflow).ok()?;
        if image.slots.len() != buckets * SLOTS || !(primary..=buckets).contains(&next) {
            return None;
        }
        let table = Table {
            buckets: zeroed_buckets(buckets),
            primary,
            next_overflow: AtomicUsize::new(next),
            power: image.power,
        };
        for (i, (b, chunk)) in table
            .buckets
            .iter()
            .zip(image.slots.chunks(SLOTS))
            .enumerate()
        {
            for (j, (slot, v)) in b.slots.iter().zip(chunk).enumerate() {
                let info = i < primary && j == 0;
                // A chain pointer must point into the overflow area already handed out.
                let target = v >> TAG_BITS;
                if !info && is_pointer(*v) && !((primary as u64)..next as u64).contains(&target) {
                    return None;
                }
                slot.store(*v, Ordering::Relaxed);
            }
        }
        Some(table)
    }
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

    /// Doubles the table if `seen` is still the current one. `hash_of` recomputes an item's
    /// hash from its slot (by reading its key); it must not touch the table.
    pub fn grow(&self, seen_power: u32, hash_of: impl Fn(Slot) -> u64) -> bool {
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
                let target = new.head_of(hash_of(slot));
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
        let t = ht.load();
        for i in 0..40u64 {
            let h = hash_for(i);
            let g = t.lock(t.head_of(h)).unwrap();
            g.insert(Slot::new(i as u32, 0, 0, tag_of(h))).unwrap();
            g.bump_cas();
        }
        let cas_before: Vec<u32> = (0..40u64).map(|i| t.cas(t.head_of(hash_for(i)))).collect();
        let power = t.power();
        drop(t);
        assert!(ht.grow(power, |slot| hash_for(u64::from(slot.seg()))));
        let t = ht.load();
        assert_eq!(t.power(), 3);
        for i in 0..40u64 {
            let h = hash_for(i);
            let found = t.scan(t.head_of(h), |_, s| (s.seg() == i as u32).then_some(()));
            assert!(found.is_some(), "item {i} lost in growth");
            assert_eq!(t.cas(t.head_of(h)), cas_before[i as usize]);
        }
    }

    #[test]
    fn moved_chains_refuse_writers() {
        let ht = HashTable::new(1, 4);
        let old = ht.load();
        assert!(ht.grow(1, |_| 0));
        assert!(matches!(old.lock(0), Err(Moved)));
    }
}
