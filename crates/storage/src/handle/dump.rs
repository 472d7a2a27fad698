//! Key dumps: an incremental walk over the hash table that visits every live item once.
//!
//! What memcached's `stats cachedump` and `lru_crawler metadump` need from an engine: the
//! items, a bounded batch at a time, with no lock held between batches and nothing kept in
//! proportion to the cache. The caller keeps a [`DumpCursor`] (a few words) and calls
//! [`Handle::dump_step`] until it says the walk is done, writing each batch out before asking
//! for the next.
//!
//! **Order and growth.** Chains are visited in the bit-reversed order of their head index
//! (Redis's `SCAN` cursor). The table only ever doubles, which splits chain `h` into `h` and
//! `h + 2^power`; in bit-reversed order those two are neighbours, so the chains already
//! visited stay exactly the prefix of the new order below twice the cursor. Hence:
//!
//! **Invariant:** an item that is live and stays in place (not rewritten or deleted) from
//! the start of a dump to its end is visited exactly once, whatever the table does
//! meanwhile. An item written during the dump may or may not be seen; one rewritten during
//! it (set, touch, append: a new copy) may be seen twice, once per copy, like memcached's.
//!
//! Not here: formats (the server writes memcached's lines), limits on output (the caller
//! stops asking), and segment order (compaction and merges move items between segments,
//! but never between chains, so a walk of the table is the one that can keep the promise).

use super::{client_cas, Handle};
use crate::clock::NEVER;
use crate::engine_state::EngineState;
use crate::hashtable::Slot;
use crate::item::Header;
use crate::lease::Visibility;
use std::sync::atomic::Ordering;

/// The reader-count stripe dumps count in (`readers.rs`): they are rare, and a dump item
/// outlives no handle of its own, so one fixed stripe does.
const DUMP_STRIPE: usize = 0;

/// Where a dump is: the next chain to visit, in bit-reversed order of the table's chain
/// heads at `power`. Plain numbers, so a connection can keep it between batches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DumpCursor {
    /// log2 of the chain count the position is counted in; 0 before the first step.
    power: u32,
    /// Chains visited so far, in that order (`1 << power` when done).
    position: u64,
    /// The walk has ended.
    done: bool,
}

impl DumpCursor {
    /// A cursor at the start of the table.
    pub fn new() -> DumpCursor {
        DumpCursor::default()
    }

    /// Whether every chain has been visited.
    pub fn is_done(&self) -> bool {
        self.done
    }
}

/// One live item met by a dump, pinned in memory until the callback returns.
pub struct DumpItem<'a> {
    engine: &'a EngineState,
    seg: u32,
    offset: usize,
    header: Header,
    slot: Slot,
    cas: u64,
    deadline: u32,
}

impl DumpItem<'_> {
    /// The key.
    pub fn key(&self) -> &[u8] {
        // SAFETY: this `DumpItem` holds a reader reference on the segment (released on drop),
        // taken while a slot pointed at this published item, so its bytes stay final.
        unsafe { self.engine.key_at(self.seg, self.offset, &self.header) }
    }

    /// The value's length in bytes.
    pub fn value_len(&self) -> usize {
        self.header.value_len
    }

    /// The client's flags.
    pub fn flags(&self) -> u32 {
        self.header.client_flags
    }

    /// The CAS unique a `gets` would return now.
    pub fn cas(&self) -> u64 {
        self.header.lease.map_or(self.cas, |l| l.token)
    }

    /// The cache-clock second the item expires at (`None`: never). As for
    /// [`crate::ItemRef::ttl_remaining`], the engine's effective deadline.
    pub fn deadline(&self) -> Option<u32> {
        (self.deadline != NEVER).then_some(self.deadline)
    }

    /// Bytes the item occupies in its segment.
    pub fn stored_len(&self) -> usize {
        self.header.len()
    }

    /// Whether the item has been read since it was written (its access frequency is not 0).
    pub fn fetched(&self) -> bool {
        self.slot.freq() > 0 || self.slot.counted()
    }

    /// The cache-clock second its segment was opened: the item was written then or later
    /// (per-item write and access times are not kept).
    pub fn written_at(&self) -> u32 {
        self.engine
            .segment(self.seg)
            .create_at
            .load(Ordering::Relaxed)
    }
}

impl Drop for DumpItem<'_> {
    fn drop(&mut self) {
        self.engine.release(self.seg, DUMP_STRIPE);
    }
}

impl Handle {
    /// Visits up to `chains` hash chains from `cursor`, calling `f` with every live item a
    /// `get` would see (not expired, not flushed, not a lease placeholder, a deleted value
    /// kept for leases or a hold-off), and moves the cursor past them. Takes no lock; each
    /// item's segment is pinned only while `f` runs. Returns the number of items seen.
    pub fn dump_step(
        &self,
        cursor: &mut DumpCursor,
        chains: usize,
        mut f: impl FnMut(&DumpItem<'_>),
    ) -> usize {
        if cursor.done {
            return 0;
        }
        let engine = &*self.engine;
        let now = engine.clock().now();
        let generation = engine.current_generation(now);
        let mut table = self.table().clone();
        if table.power() < cursor.power {
            // This handle's cached table is older than the one the last step saw.
            table = engine.table().load();
        }
        let power = table.power();
        if cursor.power < power {
            // The table doubled since the last step: each chain visited became two.
            cursor.position <<= power - cursor.power;
            cursor.power = power;
        }
        let end = 1u64 << power;
        let mut seen = 0;
        for _ in 0..chains {
            if cursor.position >= end {
                break;
            }
            let head = (cursor.position.reverse_bits() >> (64 - power)) as usize;
            cursor.position += 1;
            let bucket_cas = table.cas(head);
            table.scan(head, |slot, s| {
                if let Some(item) = pin(engine, slot, s, now, generation, bucket_cas) {
                    seen += 1;
                    f(&item);
                }
                None::<()>
            });
        }
        cursor.done = cursor.position >= end;
        seen
    }
}

/// The item a slot points to, pinned, if it is live and visible, else `None`. A slot that
/// changed under us (compaction or a merge moved the item, then retired its old segment; or
/// it was replaced) is re-read once: its new value is what counts.
fn pin<'a>(
    engine: &'a EngineState,
    slot: &crate::sync::atomic::AtomicU64,
    mut s: Slot,
    now: u32,
    generation: u32,
    bucket_cas: u32,
) -> Option<DumpItem<'a>> {
    for _ in 0..2 {
        if engine.is_flash_slot(s) {
            // A flash item's key is on flash: dumps list what is in RAM.
            return None;
        }
        let seg = s.seg();
        let header = engine.segment(seg);
        let pinned = engine.acquire(seg, DUMP_STRIPE);
        let current = Slot(slot.load(Ordering::Acquire));
        if !pinned && current.same_location(s) {
            // Being retired with the slot still pointing in: expired, evicted or flushed.
            return None;
        }
        if !current.same_location(s) {
            if pinned {
                engine.release(seg, DUMP_STRIPE);
            }
            // Moved by compaction or replaced; read what the slot holds now. A slot emptied
            // or turned into a chain pointer is a removal, not an item.
            if current.0 == 0 || current.tag() == 0 {
                return None;
            }
            s = current;
            continue;
        }
        let offset = engine.offset_of(s);
        // SAFETY: this thread holds a reader reference on `seg` (`pinned`), taken before it
        // re-read the slot (Acquire) still pointing here: the item is published and its
        // segment cannot be retired until the reference is released.
        let item_header = unsafe { engine.header_at(seg, offset) };
        let seg_deadline = header.min_deadline();
        let deadline = item_header
            .own_deadline
            .map_or(seg_deadline, |d| d.min(seg_deadline));
        let live = deadline > now && header.generation.load(Ordering::Acquire) == generation;
        if !live || !Visibility::of(item_header.marks).value {
            engine.release(seg, DUMP_STRIPE);
            return None;
        }
        // SAFETY: as for the header above.
        let cas = client_cas(bucket_cas, unsafe {
            engine.item_hash(seg, offset, &item_header)
        });
        return Some(DumpItem {
            engine,
            seg,
            offset,
            header: item_header,
            slot: current,
            cas,
            deadline,
        });
    }
    None
}
