//! Segment-level operations on items: find the slot of an item being walked, move an item,
//! unlink it, and retire a whole segment (`retire_each` hands each item still in it to the
//! caller: eviction demotes them to flash from there, `demote.rs`).

use super::EngineState;
use crate::hashtable::{ChainGuard, Slot, Table};
use crate::item::Header;
use crate::segment::state;
use crate::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl EngineState {
    /// Runs `f` with the chain of `hash` (the hash of the key of the item at (`seg`,
    /// `offset`), see [`EngineState::item_hash`]) locked and the hash slot that points at the
    /// item, or `None` when no slot does (the item is dead: overwritten, deleted, or already
    /// moved). For work that walks a segment's items (eviction, compaction, retirement). Reads
    /// no item bytes: a wrong `hash` finds no slot.
    pub fn with_item_slot<T>(
        &self,
        table: &mut Arc<Table>,
        seg: u32,
        offset: usize,
        hash: u64,
        f: impl FnOnce(&ChainGuard<'_>, Option<(&AtomicU64, Slot)>) -> T,
    ) -> T {
        let units = self.units(offset);
        self.with_chain(table, hash, |chain| {
            let found = chain
                .scan(|slot, s| (s.seg() == seg && s.offset_units() == units).then_some((slot, s)));
            f(chain, found)
        })
    }

    /// Moves a live item from `from` to `to` (segment, offset): copies its `header.len()`
    /// bytes, points its slot (`slot`, now holding `current`) there with frequency `freq`,
    /// and moves its live accounting. Call inside [`EngineState::with_item_slot`].
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
    /// leaving through eviction, expiration or retirement; `hash` is its key's hash and
    /// `header` its header. Returns true if it was live.
    pub fn unlink_item(
        &self,
        table: &mut Arc<Table>,
        seg: u32,
        offset: usize,
        header: &Header,
        hash: u64,
    ) -> bool {
        self.with_item_slot(table, seg, offset, hash, |chain, found| {
            let Some((slot, _)) = found else {
                return false;
            };
            chain.remove(slot);
            chain.bump_cas(&self.cas, 0);
            self.headers[seg as usize].remove_live(self.aligned(header.len()));
            true
        })
    }

    /// Takes a segment out of service for good: no new readers, wait for current ones, drop
    /// every hash entry still pointing into it, and return it to the free pool. The caller
    /// has already unlinked it from its chain. Returns the number of live items dropped.
    pub fn retire(&self, seg: u32) -> usize {
        self.retire_each(seg, |table, offset, header, hash| {
            self.unlink_item(table, seg, offset, header, hash)
        })
    }

    /// [`EngineState::retire`] for a merge source whose every item the merge already moved or
    /// dropped: nothing is left to unlink, so the per-item hash lookups are skipped.
    pub fn retire_emptied(&self, seg: u32) {
        debug_assert_eq!(
            self.headers[seg as usize]
                .live_items
                .load(Ordering::Relaxed),
            0
        );
        self.retire_drained(seg, None);
    }

    /// [`EngineState::retire`], each item still in the segment handed to `leave` (the
    /// current table, its offset, header and key hash), which removes its slot (or points it
    /// elsewhere) and says whether it was live. While `leave` runs the segment's bytes are
    /// final ([`EngineState::item_bytes`] may read them).
    pub fn retire_each(
        &self,
        seg: u32,
        mut leave: impl FnMut(&mut Arc<Table>, usize, &Header, u64) -> bool,
    ) -> usize {
        self.retire_drained(seg, Some(&mut leave))
    }

    #[allow(clippy::type_complexity)]
    fn retire_drained(
        &self,
        seg: u32,
        leave: Option<&mut dyn FnMut(&mut Arc<Table>, usize, &Header, u64) -> bool>,
    ) -> usize {
        let h = &self.headers[seg as usize];
        h.state.store(state::RETIRING, Ordering::Release);
        h.seal();
        self.readers.drain(h, seg);
        let mut dropped = 0;
        let mut table = self.table.load();
        // Every item is looked up, whatever the live count says: a slot left pointing into
        // a reused segment would be read as garbage.
        if let Some(leave) = leave {
            // SAFETY: the segment is RETIRING, sealed and drained: no writer holds a
            // reservation and no reader a reference, and only this call can reuse it, so
            // its bytes are final until `free_segment` below.
            let items = unsafe { self.items_in(seg) };
            for (offset, header, _) in items {
                // SAFETY: as above; `header` is the header `items_in` decoded there.
                let hash = unsafe { self.item_hash(seg, offset, &header) };
                if leave(&mut table, offset, &header, hash) {
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
