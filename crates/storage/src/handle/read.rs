//! Lock-free lookups: a hash probe, a reader reference on the item's segment, a re-check
//! of the slot, a key compare; and [`ItemRef`], the pinned item a lookup returns. Counts an
//! access (the fetched mark and the frequency counter) at most once per item per second.

use super::Handle;
use crate::clock::NEVER;
use crate::counters::HandleCounters;
use crate::engine_state::EngineState;
use crate::hashtable::{hash, tag_of, Slot, Table};
use crate::item::{self, Header, Lease};
use crate::lease::Visibility;
use std::sync::atomic::Ordering;

/// A live item, pinned in memory until dropped. Keep it briefly: while any reference to a
/// segment exists, that segment cannot be evicted or expired.
pub struct ItemRef<'a> {
    engine: &'a EngineState,
    seg: u32,
    offset: usize,
    header: Header,
    cas: u64,
    pub(super) slot: Slot,
    deadline: u32,
    last_access: u16,
    /// The reader-count stripe its reference was taken in.
    stripe: u8,
}

impl ItemRef<'_> {
    /// The key.
    pub fn key(&self) -> &[u8] {
        // SAFETY: this `ItemRef` holds a reader reference on the segment (released on drop),
        // taken while a slot pointed at this published item, so its bytes stay final.
        unsafe { self.engine.key_at(self.seg, self.offset, &self.header) }
    }
    /// The value.
    pub fn value(&self) -> &[u8] {
        // SAFETY: as for `key`.
        unsafe { self.engine.value_at(self.seg, self.offset, &self.header) }
    }
    /// The client's 32-bit flags, as stored.
    pub fn flags(&self) -> u32 {
        self.header.client_flags
    }
    /// The CAS unique: the outstanding lease's token if the item carries one (so a meta
    /// client's `mg ... c` then `ms ... C<cas>` is exactly a lease-set), else the bucket's
    /// (its hash chain's CAS counter: see `Table::cas`).
    pub fn cas(&self) -> u64 {
        match self.header.lease {
            Some(l) => l.token,
            None => self.header.explicit_cas.unwrap_or(self.cas),
        }
    }
    /// Lease and hold-off marks ([`crate::MARK_STALE`] and friends).
    pub fn marks(&self) -> u8 {
        self.header.marks
    }
    /// The CAS counter of the key's hash chain when the item was read (its CAS unique unless
    /// a client chose one or a lease is out).
    pub(crate) fn chain_cas(&self) -> u64 {
        self.cas
    }
    /// The item's CAS ignoring a lease token: the one the client chose (meta `E`), else the
    /// bucket's.
    pub(crate) fn bucket_cas(&self) -> u64 {
        self.header.explicit_cas.unwrap_or(self.cas)
    }
    /// The CAS unique a client chose for this item (meta `E`), if one did.
    pub(crate) fn explicit_cas(&self) -> Option<u64> {
        self.header.explicit_cas
    }
    /// The lease handed out for this key, if one is outstanding.
    pub fn lease(&self) -> Option<Lease> {
        self.header.lease
    }
    /// Seconds until the item expires (`None`: never). The value is the engine's effective
    /// deadline, which may be up to the TTL bucket's tolerance earlier than the one asked for.
    pub fn ttl_remaining(&self, now: u32) -> Option<u32> {
        (self.deadline != NEVER).then(|| self.deadline.saturating_sub(now))
    }
    /// Whether the item had been read since it was written, before this lookup (memcached's
    /// `ITEM_FETCHED`; meta `h`, `me`'s `fetch=`).
    pub fn fetched(&self) -> bool {
        self.slot.fetched()
    }
    /// Seconds since the item was last written or read, before this lookup (meta `l`,
    /// `me`'s `la=`). Coarse: the engine keeps one last-access second per hash chain, so this
    /// is the time since any key of the item's chain (a handful) was accessed, and it wraps
    /// after 65 536 seconds (about 18 hours).
    pub fn idle_secs(&self, now: u32) -> u32 {
        u32::from((now as u16).wrapping_sub(self.last_access))
    }
    /// Where the item lies in the heap: it names this stored copy of the key's value while
    /// the copy lives (a rewrite, even of the same bytes, lands elsewhere; a location is
    /// reused only after its segment has been emptied).
    pub fn location(&self) -> u64 {
        (u64::from(self.seg) << 32) | self.offset as u64
    }
    /// Bytes the item occupies in its segment.
    pub fn stored_len(&self) -> usize {
        self.header.len()
    }
    pub(crate) fn deadline(&self) -> u32 {
        self.deadline
    }
    pub(crate) fn own_deadline(&self) -> Option<u32> {
        self.header.own_deadline
    }
}

impl Drop for ItemRef<'_> {
    fn drop(&mut self) {
        self.engine.release(self.seg, usize::from(self.stripe));
    }
}

impl std::fmt::Debug for ItemRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ItemRef")
            .field("key", &String::from_utf8_lossy(self.key()))
            .field("value_len", &self.header.value_len)
            .field("flags", &self.header.client_flags)
            .field("cas", &self.cas)
            .finish()
    }
}

/// A key's hash, computed once for the prefetch steps of a batch
/// ([`Handle::prefetch_bucket`], [`Handle::prefetch_item`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct KeyHash(u64);

impl KeyHash {
    /// The hash the table files `key` under.
    #[inline]
    pub fn of(key: &[u8]) -> KeyHash {
        KeyHash(hash(key))
    }
}

enum Probe<T> {
    Found(T),
    Retry,
}

impl Handle {
    /// Starts loading the hash bucket a lookup of the key reads first. A server running a
    /// batch of pipelined requests calls this for every key, then [`Handle::prefetch_item`]
    /// for every key, then runs them: the cache misses of different keys overlap instead of
    /// following one another (each lookup otherwise waits for two dependent misses, bucket
    /// then item header, which is most of a get's cost once the table is large).
    #[inline]
    pub fn prefetch_bucket(&self, key: KeyHash) {
        let table = self.table();
        table.prefetch(table.head_of(key.0));
    }

    /// Starts loading the header of the item the key's bucket points to (best after
    /// [`Handle::prefetch_bucket`] has had time to bring the bucket in). Only a hint: it
    /// takes no reference, and a wrong guess costs a wasted fetch.
    #[inline]
    pub fn prefetch_item(&self, key: KeyHash) {
        let h = key.0;
        let tag = tag_of(h);
        let engine = &*self.engine;
        let table = self.table();
        table.scan(table.head_of(h), |_, s| {
            (s.tag() == tag && !engine.is_flash_slot(s))
                .then(|| engine.heap().prefetch(s.seg(), engine.offset_of(s)))
        });
    }

    /// The current time on the cache's clock.
    pub fn now(&self) -> u32 {
        self.engine.clock().now()
    }

    /// Looks up what memcached's `get` returns: a value (possibly stale after meta `md I`, as
    /// memcached serves it), not a lease placeholder, a deleted value kept for lease reads, or
    /// a hold-off.
    #[inline]
    pub fn get(&self, key: &[u8]) -> Option<ItemRef<'_>> {
        let item = self.lookup(key)?;
        if Visibility::of(item.marks()).value {
            HandleCounters::bump(&self.counters.get_hits, 1);
            Some(item)
        } else {
            HandleCounters::bump(&self.counters.get_misses, 1);
            None
        }
    }

    /// Looks up any live item, marked or not (for the lease machinery). Counts a miss when
    /// there is none.
    #[inline]
    pub fn lookup(&self, key: &[u8]) -> Option<ItemRef<'_>> {
        if key.is_empty() || key.len() > item::MAX_KEY_LEN {
            return None;
        }
        let now = self.engine.clock().now();
        let found = self.find(key, hash(key), now, true);
        if found.is_none() {
            HandleCounters::bump(&self.counters.get_misses, 1);
        }
        found
    }

    /// Looks up any live item, marked or not, as memcached's `me` and meta `u` do: the read
    /// is neither counted nor recorded (no fetched mark, no last-access time, no frequency).
    pub fn peek(&self, key: &[u8]) -> Option<ItemRef<'_>> {
        if key.is_empty() || key.len() > item::MAX_KEY_LEN {
            return None;
        }
        self.find(key, hash(key), self.engine.clock().now(), false)
    }

    /// What [`Handle::get`] would find, looked at as [`Handle::peek`] does (no access
    /// recorded, nothing counted).
    pub fn peek_value(&self, key: &[u8]) -> Option<ItemRef<'_>> {
        self.peek(key)
            .filter(|item| Visibility::of(item.marks()).value)
    }

    /// Finds the live item for `key` without taking a lock.
    #[inline]
    pub(crate) fn find(
        &self,
        key: &[u8],
        h: u64,
        now: u32,
        count_access: bool,
    ) -> Option<ItemRef<'_>> {
        let engine = &*self.engine;
        let generation = engine.current_generation(now);
        loop {
            let table = self.table();
            match self.probe(&table, key, h, now, generation, count_access) {
                Probe::Found(found) => return found,
                Probe::Retry => continue,
            }
        }
    }

    #[inline]
    fn probe(
        &self,
        table: &Table,
        key: &[u8],
        h: u64,
        now: u32,
        generation: u32,
        count_access: bool,
    ) -> Probe<Option<ItemRef<'_>>> {
        let engine = &*self.engine;
        let head = table.head_of(h);
        let tag = tag_of(h);
        // Read the CAS before the slot: a reader may pair a new value with an old CAS (the
        // client's cas then fails and retries) but never an old value with a new CAS.
        let cas = table.cas(head, engine.cas_sequence());
        let found = table.scan(head, |slot, s| {
            // A flash copy is fetched by the caller (`Handle::flash_candidate`), not here.
            if s.tag() != tag || engine.is_flash_slot(s) {
                return None;
            }
            let seg = s.seg();
            let header = engine.segment(seg);
            if !engine.acquire(seg, self.stripe) {
                // The segment is being retired: the item is on its way out (expired or
                // evicted), and a key has at most one slot, so this is a miss.
                return None;
            }
            // Between reading the slot and taking the reference the item may have moved
            // and its segment been reused: only a slot that still points here is trustworthy.
            let current = Slot(slot.load(Ordering::Acquire));
            if !current.same_location(s) {
                engine.release(seg, self.stripe);
                return Some(Probe::Retry);
            }
            let offset = engine.offset_of(s);
            // SAFETY: this thread holds a reader reference on `seg`, taken before it re-read
            // the slot (Acquire) still pointing here: the item is published and its segment
            // cannot be retired until the reference is released.
            let item_header = unsafe { engine.header_at(seg, offset) };
            // SAFETY: as above.
            if unsafe { engine.key_at(seg, offset, &item_header) } != key {
                engine.release(seg, self.stripe);
                return None;
            }
            let seg_deadline = header.min_deadline();
            let deadline = item_header
                .own_deadline
                .map_or(seg_deadline, |d| d.min(seg_deadline));
            if deadline <= now || header.generation.load(Ordering::Acquire) != generation {
                engine.release(seg, self.stripe);
                HandleCounters::bump(&self.counters.expired_on_access, 1);
                return Some(Probe::Found(None));
            }
            let last_access = table.last_access(head);
            if count_access {
                // At most one counted access per item per second (the paper's smoothing):
                // the chain's shared second decides whether this item's mark is current.
                let new_second = table.touch_timestamp(head, now, engine.count_window().shift());
                if new_second {
                    table.start_second(head);
                }
                // After `start_second` the slot's mark may just have been cleared: reload it
                // then; otherwise the value read above is current enough (a hit already
                // counted this second, the common case, costs no further access).
                let seen = if new_second {
                    Slot(slot.load(Ordering::Relaxed))
                } else {
                    current
                };
                if seen.same_location(current) && !(seen.counted() && seen.fetched()) {
                    // The first read after a write also marks the item fetched (in the same
                    // exchange: a new slot is neither counted nor fetched).
                    let next = if seen.counted() {
                        seen
                    } else {
                        seen.with_counted_freq(self.next_frequency(seen.freq()))
                    };
                    let counted = slot
                        .compare_exchange(
                            seen.0,
                            next.with_fetched(true).0,
                            Ordering::Relaxed,
                            Ordering::Relaxed,
                        )
                        .is_ok();
                    if counted && !seen.counted() {
                        header.reads.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            Some(Probe::Found(Some(ItemRef {
                engine,
                seg,
                offset,
                header: item_header,
                cas,
                slot: current,
                deadline,
                last_access,
                stripe: self.stripe as u8,
            })))
        });
        found.unwrap_or(Probe::Found(None))
    }
}
