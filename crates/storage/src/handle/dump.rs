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

use super::Handle;
use crate::clock::NEVER;
use crate::engine_state::EngineState;
use crate::flash::{record, FlashFetch};
use crate::hashtable::{hash, tag_of, Slot};
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
    /// The next flash place a dump lists ([`Handle::flash_dump_next`]).
    flash_place: u32,
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
    at: At<'a>,
    header: Header,
    slot: Slot,
    cas: u64,
    deadline: u32,
}

/// Where a dumped item's bytes are.
enum At<'a> {
    /// In a RAM segment this item holds a reader reference on.
    Ram { seg: u32, offset: usize },
    /// In flash bytes the caller read (the item's bytes, from its header on), from a flash
    /// segment opened at `opened_at`.
    Flash { item: &'a [u8], opened_at: u32 },
}

impl DumpItem<'_> {
    /// The key.
    pub fn key(&self) -> &[u8] {
        match self.at {
            // SAFETY: this `DumpItem` holds a reader reference on the segment (released on
            // drop), taken while a slot pointed at this published item, so its bytes stay
            // final.
            At::Ram { seg, offset } => unsafe { self.engine.key_at(seg, offset, &self.header) },
            At::Flash { item, .. } => {
                &item[self.header.key_offset..self.header.key_offset + self.header.key_len]
            }
        }
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

    /// Bytes the item occupies in its segment (in RAM, or in its flash record).
    pub fn stored_len(&self) -> usize {
        self.header.len()
    }

    /// Whether the item has been read since it was written (its access frequency is not 0;
    /// on flash: read there, or before it left RAM).
    pub fn fetched(&self) -> bool {
        match self.at {
            At::Ram { .. } => self.slot.freq() > 0 || self.slot.counted(),
            // A flash slot's frequency byte holds hash bits (`demote.rs`), not a count.
            At::Flash { .. } => self.slot.counted() || self.slot.fetched(),
        }
    }

    /// Whether the item is on flash (its key was read from there for this dump).
    pub fn on_flash(&self) -> bool {
        matches!(self.at, At::Flash { .. })
    }

    /// The cache-clock second its segment was opened: the item was written then or later
    /// (per-item write and access times are not kept). For an item on flash, the second its
    /// flash segment was opened: it was last written or read in RAM before then.
    pub fn written_at(&self) -> u32 {
        match self.at {
            At::Ram { seg, .. } => self.engine.segment(seg).create_at.load(Ordering::Relaxed),
            At::Flash { opened_at, .. } => opened_at,
        }
    }
}

impl Drop for DumpItem<'_> {
    fn drop(&mut self) {
        if let At::Ram { seg, .. } = self.at {
            self.engine.release(seg, DUMP_STRIPE);
        }
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
            let bucket_cas = table.cas(head, engine.cas_sequence());
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

/// A flash segment a key dump reads whole ([`Handle::flash_dump_next`]) and then walks
/// ([`Handle::flash_dump_step`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlashDumpSegment {
    /// Its flash id (lap and place).
    id: u32,
    /// The second it was opened.
    opened_at: u32,
}

impl Handle {
    /// After the table walk ([`Handle::dump_step`]), a dump lists the items on flash, whose
    /// keys only the flash holds: this gives the next flash segment holding items at or
    /// after `cursor`'s, and how to read it whole (a write buffer's bytes now, or one
    /// sequential device read), then moves the cursor past it. `None` once every flash
    /// segment was visited, or without a flash tier.
    ///
    /// Items moved between RAM and flash during a dump (demoted, promoted) may be listed
    /// twice or not at all: as for [`Handle::dump_step`], only an item that stays in place is
    /// promised.
    pub fn flash_dump_next(
        &self,
        cursor: &mut DumpCursor,
    ) -> Option<(FlashDumpSegment, FlashFetch)> {
        let tier = self.engine.flash()?;
        let (id, opened_at, fetch) = tier.dump_segment(&mut cursor.flash_place)?;
        Some((FlashDumpSegment { id, opened_at }, fetch))
    }

    /// Walks the records of `segment` in `bytes` (what [`Handle::flash_dump_next`] said to
    /// read) from byte `*at`, calling `f` with each one a `get` would find: its key's slot
    /// still points at it, and it is not expired, flushed or hidden by a lease or hold-off
    /// mark. Stops after `records` records and moves `*at` on; true once the segment is
    /// done. Records that fail their checksum are skipped. No I/O, no lock.
    pub fn flash_dump_step(
        &self,
        segment: &FlashDumpSegment,
        bytes: &[u8],
        at: &mut usize,
        records: usize,
        mut f: impl FnMut(&DumpItem<'_>),
    ) -> bool {
        let engine = &*self.engine;
        let Some(tier) = engine.flash() else {
            return true;
        };
        let now = engine.clock().now();
        let generation = engine.current_generation(now);
        let unit = 1usize << engine.align_shift();
        let table = self.table().clone();
        for _ in 0..records {
            let Some(rest) = bytes.get(*at..).filter(|r| !r.is_empty()) else {
                return true;
            };
            let offset = *at;
            let (deadline, header) = match record::decode(rest, segment.id) {
                record::Decoded::Item { deadline, header } => (deadline, header),
                // Padding before a block boundary, or bytes that fail their check: records
                // go on at the next block at the latest (`record.rs`).
                _ => {
                    *at = (offset / record::BLOCK + 1) * record::BLOCK;
                    continue;
                }
            };
            *at = (offset + record::RECORD_HEADER + header.len()).next_multiple_of(unit);
            let Some(place) = tier.resolve(segment.id) else {
                // Reclaimed meanwhile: nothing in it is live any more.
                *at = bytes.len();
                return true;
            };
            let item = &rest[record::RECORD_HEADER..record::RECORD_HEADER + header.len()];
            let key = &item[header.key_offset..header.key_offset + header.key_len];
            let h = hash(key);
            let tag = tag_of(h);
            let head = table.head_of(h);
            let points_here = |s: Slot| {
                s.tag() == tag
                    && engine.is_flash_slot(s)
                    && s.seg() == segment.id
                    && engine.offset_of(s) == offset
            };
            let Some(slot) = table.scan(head, |_, s| points_here(s).then_some(s)) else {
                continue;
            };
            let live = deadline > now && !tier.flushed(place, generation);
            if !live || !Visibility::of(header.marks).value {
                continue;
            }
            let cas = header
                .explicit_cas
                .unwrap_or_else(|| table.cas(head, engine.cas_sequence()));
            f(&DumpItem {
                engine,
                at: At::Flash {
                    item,
                    opened_at: segment.opened_at,
                },
                header,
                slot,
                cas,
                deadline,
            });
        }
        *at >= bytes.len()
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
    bucket_cas: u64,
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
        let cas = bucket_cas;
        return Some(DumpItem {
            engine,
            at: At::Ram { seg, offset },
            header: item_header,
            slot: current,
            cas,
            deadline,
        });
    }
    None
}
