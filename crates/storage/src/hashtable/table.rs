//! One generation of the hash table: cache-line buckets, lock-free chain walks, the chain
//! lock ([`ChainGuard`]) and the shared CAS; and a table's image for warm restarts.

use super::cas::CasSequence;
use super::slot::*;
use crate::sync::atomic::{AtomicU64, AtomicUsize};
use crate::sync::spin_wait;
use std::sync::atomic::Ordering;

#[repr(align(64))]
pub(super) struct Bucket {
    pub(super) slots: [AtomicU64; SLOTS],
}

impl Bucket {
    /// An empty bucket, built field by field (the tests compare `zeroed_buckets` with it;
    /// loom's atomics cannot be made from zeroed memory).
    #[cfg(any(test, loom))]
    pub(super) fn new() -> Bucket {
        Bucket {
            slots: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

/// `n` empty buckets, allocated as fresh zeroed memory that is advised to use huge pages
/// before anything touches it (advice given after the pages were faulted in as small pages
/// would come too late). An empty bucket is all zero bits.
#[cfg(not(loom))]
pub(super) fn zeroed_buckets(n: usize) -> Box<[Bucket]> {
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

/// `n` empty buckets, built one by one (loom's atomics cannot be made from zeroed memory).
#[cfg(loom)]
pub(super) fn zeroed_buckets(n: usize) -> Box<[Bucket]> {
    (0..n).map(|_| Bucket::new()).collect()
}

/// One generation of the table.
pub struct Table {
    buckets: Box<[Bucket]>,
    pub(super) primary: usize,
    next_overflow: AtomicUsize,
    pub(super) power: u32,
}

/// Why a chain could not be locked.
#[derive(Debug, PartialEq, Eq)]
pub struct Moved;

impl Table {
    pub(super) fn new(power: u32) -> Table {
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

    /// The CAS unique of chain `head`'s last write (0 for a chain never written; see
    /// `cas.rs`).
    #[inline]
    pub fn cas(&self, head: usize, seq: &CasSequence) -> u64 {
        seq.full(self.cas_low(head))
    }

    /// The low 38 bits of chain `head`'s CAS unique, as its info word holds them.
    #[inline]
    pub(super) fn cas_low(&self, head: usize) -> u64 {
        self.info(head).load(Ordering::Acquire) >> CAS_SHIFT
    }

    /// The largest CAS unique a chain holds (a restart's mark for an old snapshot).
    pub(super) fn max_cas_low(&self) -> u64 {
        (0..self.primary)
            .map(|h| self.cas_low(h))
            .max()
            .unwrap_or(0)
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

    /// Updates the chain's last-access second; true when this call moved it into a new
    /// counting window (2^`window_shift` seconds, `freq.rs`), and the caller clears its items'
    /// [`COUNTED`] marks with [`Table::start_second`].
    #[inline]
    pub fn touch_timestamp(&self, head: usize, now: u32, window_shift: u32) -> bool {
        let info = self.info(head);
        let now = now & 0xffff;
        let ts = u64::from(now) << TS_SHIFT;
        let cur = info.load(Ordering::Relaxed);
        if cur & TS_MASK == ts {
            return false;
        }
        let before = ((cur & TS_MASK) >> TS_SHIFT) as u32;
        info.compare_exchange(
            cur,
            (cur & !TS_MASK) | ts,
            Ordering::AcqRel,
            Ordering::Relaxed,
        )
        .is_ok()
            && before >> window_shift != now >> window_shift
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
                return Ok(ChainGuard {
                    table: self,
                    head,
                    spins,
                });
            }
            spin_wait(&mut spins, 128);
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
    /// Turns this thread waited for the lock (0 when it was free).
    spins: u32,
}

/// Inserting needs an overflow bucket and none is left: grow the table and retry.
#[derive(Debug)]
pub struct TableFull;

impl<'a> ChainGuard<'a> {
    /// Turns the locking thread waited for another holder (0: the lock was free).
    #[inline]
    pub fn spins(&self) -> u32 {
        self.spins
    }

    /// The CAS unique of the chain's last write.
    pub fn cas(&self, seq: &CasSequence) -> u64 {
        self.table.cas(self.head, seq)
    }

    /// Calls `f` on every item slot; see [`Table::scan`].
    pub fn scan<T>(&self, f: impl FnMut(&'a AtomicU64, Slot) -> Option<T>) -> Option<T> {
        self.table.scan(self.head, f)
    }

    /// Records an access (a write) at second `now` for the chain, as a read does.
    pub fn touch(&self, now: u32, window_shift: u32) {
        if self.table.touch_timestamp(self.head, now, window_shift) {
            self.table.start_second(self.head);
        }
    }

    /// Gives the chain a new CAS unique after a change of some key's item: the handle's
    /// `proposal` (0: none) unless the chain's unique is already as large (`cas.rs`).
    /// Returns the new unique.
    #[inline]
    pub fn bump_cas(&self, seq: &CasSequence, proposal: u64) -> u64 {
        let info = self.table.info(self.head);
        let (current, next) = seq.advance(info.load(Ordering::Relaxed) >> CAS_SHIFT, proposal);
        // Only the lock holder changes these bits: adding the difference leaves the others
        // (the last access is written without the lock), and a carry falls off the top.
        info.fetch_add(
            ((next - current) & MAX_CHAIN_CAS) << CAS_SHIFT,
            Ordering::AcqRel,
        );
        next
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
        set_slot(slot, value.0);
    }

    /// Clears an item slot found by [`ChainGuard::scan`].
    pub fn remove(&self, slot: &AtomicU64) {
        set_slot(slot, 0);
        self.add_count(-1);
    }

    /// log2 of the chain's table's primary buckets.
    pub fn power(&self) -> u32 {
        self.table.power
    }

    /// Whether half the table's overflow buckets are taken (at three quarters it asks to
    /// grow, [`Table::wants_growth`]).
    pub fn overflow_half_used(&self) -> bool {
        self.table.overflow_used() * 2 >= self.table.overflow_capacity()
    }

    /// Whether [`ChainGuard::insert`] would find a free slot without taking an overflow
    /// bucket.
    pub fn has_room(&self) -> bool {
        let buckets = &self.table.buckets;
        let mut bucket = self.head;
        let mut first = 1;
        loop {
            let slots = &buckets[bucket].slots;
            if slots[first..]
                .iter()
                .any(|s| s.load(Ordering::Relaxed) == 0)
            {
                return true;
            }
            let last = slots[SLOTS - 1].load(Ordering::Relaxed);
            if !is_pointer(last) {
                return false;
            }
            bucket = (last >> TAG_BITS) as usize;
            first = 0;
        }
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
                    set_slot(slot, value.0);
                    self.add_count(1);
                    return Ok(());
                }
            }
            let last = &slots[SLOTS - 1];
            let v = last.load(Ordering::Relaxed);
            if v == 0 {
                set_slot(last, value.0);
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
            set_slot(&next_slots[0], v);
            set_slot(&next_slots[1], value.0);
            set_slot(last, (next as u64) << TAG_BITS);
            self.add_count(1);
            return Ok(());
        }
    }
}

/// Writes a slot of a locked chain (a Release store: readers Acquire it).
///
/// Under loom it is a swap with the same ordering: loom 0.7 can let a concurrent
/// compare-exchange (a reader marking an access, `Table::start_second`) read the value this
/// store overwrote and still succeed after it (tokio-rs/loom#254, #282), a history the memory
/// model forbids (a store and an RMW of one location are totally ordered). As an RMW the
/// store takes its place in that order in the model too; the only executions it leaves out
/// are ones where a later reader synchronises with an earlier writer of the slot through it.
#[inline]
fn set_slot(slot: &AtomicU64, value: u64) {
    #[cfg(not(loom))]
    slot.store(value, Ordering::Release);
    #[cfg(loom)]
    slot.swap(value, Ordering::Release);
}

impl Drop for ChainGuard<'_> {
    fn drop(&mut self) {
        self.table
            .info(self.head)
            .fetch_and(!LOCK, Ordering::Release);
    }
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
        Table::from_image_with(image, |info| info)
    }

    /// Rebuilds a table from the image of a release whose info word was
    /// `[cas:32][last access:16][item count:8][lock byte:8]` (warm-restart format 3): each
    /// chain keeps its write counter (as its CAS unique), last access and item count in
    /// today's places. Also returns the largest unique, the new CAS sequence's mark.
    pub fn from_format3_image(image: &TableImage) -> Option<(Table, u64)> {
        let table = Table::from_format3_words(image)?;
        let mark = table.max_cas_low();
        Some((table, mark))
    }

    fn from_format3_words(image: &TableImage) -> Option<Table> {
        Table::from_image_with(image, |old| {
            let cas = old >> 32;
            let ts = (old >> 16) & 0xffff;
            let count = (old >> 8) & 0xff;
            (cas << CAS_SHIFT) | (ts << TS_SHIFT) | (count << COUNT_SHIFT)
        })
    }

    fn from_image_with(image: &TableImage, info_word: impl Fn(u64) -> u64) -> Option<Table> {
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
                slot.store(if info { info_word(*v) } else { *v }, Ordering::Relaxed);
            }
        }
        Some(table)
    }
}
