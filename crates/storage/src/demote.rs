//! The engine's side of the flash tier (`flash/`): what eviction would drop is demoted to
//! flash (its slot repointed), writers drop the flash slots of their key's tag, and a sweep
//! removes slots whose flash segment was reclaimed.
//!
//! Everything here runs under the hash chain lock of the slots it changes; demotion also
//! under the eviction lock (it runs inside merges and whole-segment evictions).

use crate::engine_state::EngineState;
use crate::flash::record_deadline;
use crate::hashtable::{tag_of, ChainGuard, Slot, Table};
use crate::item::Header;
use crate::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A flash slot's frequency byte holds what table growth needs instead of a frequency (the
/// key is on flash, so growth cannot hash it): `[known: 3][hash bits: 4]`, the next `known`
/// bits of the key's hash above the table's power, consumed one per doubling; its
/// counted mark (`Slot::counted`) says the item was read while on flash (cleared with
/// its chain's counting window, as a RAM item's is).
const HASH_BITS: u32 = 4;

/// The frequency byte of a new flash slot for an item of `hash` in a table of `power`.
fn flash_bits(hash: u64, power: u32) -> u8 {
    let known = HASH_BITS.min(64 - power);
    ((known << HASH_BITS) as u8) | ((hash >> power) as u8 & ((1 << known) - 1))
}

/// Under `chain`'s lock, with `slot` (holding `s`) pointing at the live item at (`seg`,
/// `offset`) whose header is `header` and key hash `hash`: writes the item to the flash tier
/// and points the slot there. False, with nothing changed, when there is no tier or the item cannot go (flushed,
/// expired, the device lags, over the write budget, or the chain has a flash slot of the same
/// tag already): the caller then drops it as without flash.
///
/// # Safety
/// The item's bytes are final while this runs (its segment is claimed by a merge, or
/// retiring and drained).
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn to_flash(
    engine: &EngineState,
    chain: &ChainGuard<'_>,
    slot: &AtomicU64,
    s: Slot,
    seg: u32,
    offset: usize,
    header: &Header,
    hash: u64,
    now: u32,
) -> bool {
    let Some(tier) = engine.flash() else {
        return false;
    };
    let h = engine.segment(seg);
    let generation = engine.current_generation(now);
    if h.generation.load(Ordering::Acquire) != generation {
        return false;
    }
    let deadline = record_deadline(h.min_deadline(), header.own_deadline);
    if deadline <= now {
        return false;
    }
    // A chain holds at most one flash slot a key can match (tag and kept hash bits,
    // `flash_slot_matches`: a read then has one candidate); dead flash slots met on the
    // way are dropped.
    let power = chain.power();
    let mut conflict = false;
    chain.scan(|other, o| {
        if engine.is_flash_slot(o) {
            if tier.resolve(o.seg()).is_none() {
                chain.remove(other);
            } else if flash_slot_matches(o, hash, power) {
                conflict = true;
            }
        }
        None::<()>
    });
    if conflict {
        tier.counters
            .tag_conflict_drops
            .fetch_add(1, Ordering::Relaxed);
        return false;
    }
    // SAFETY: per this function's contract.
    let bytes = unsafe { engine.item_bytes(seg, offset, header) };
    let Ok((flash_seg, flash_offset)) = tier.demote(bytes, deadline, now, generation) else {
        return false;
    };
    let moved = Slot::new(
        flash_seg,
        engine.units(flash_offset),
        flash_bits(hash, power),
        s.tag(),
    );
    chain.replace(slot, moved.with_fetched(s.fetched()));
    h.remove_live(engine.aligned(header.len()));
    true
}

/// Retires `seg` (claimed and unlinked by an eviction), demoting its live items to flash
/// where they can go. Returns the items dropped (not demoted).
pub(crate) fn retire_demoting(engine: &EngineState, seg: u32) -> usize {
    let now = engine.clock().now();
    engine.retire_each(seg, |table, offset, header, hash| {
        engine.with_item_slot(table, seg, offset, hash, |chain, found| {
            let Some((slot, s)) = found else {
                return false;
            };
            // SAFETY: `retire_each` calls this with the segment retiring and drained.
            if unsafe { to_flash(engine, chain, slot, s, seg, offset, header, hash, now) } {
                return false;
            }
            chain.remove(slot);
            chain.bump_cas(engine.cas_sequence(), 0);
            engine
                .segment(seg)
                .remove_live(engine.aligned(header.len()));
            true
        })
    })
}

/// Whether flash slot `s`, in a table of `power`, may hold the item of a key of `hash`: its
/// tag matches, and so do the hash bits it keeps for growth (up to 4 more bits of the key's
/// hash above the table's power: 16 times fewer foreign flash slots taken for the key, so
/// fewer flash reads for misses and fewer copies dropped for another key's write).
pub(crate) fn flash_slot_matches(s: Slot, hash: u64, power: u32) -> bool {
    if s.tag() != tag_of(hash) {
        return false;
    }
    let bits = s.freq();
    let known = u32::from(bits >> HASH_BITS);
    let mask = (1u64 << known) - 1;
    u64::from(bits) & mask == hash.checked_shr(power).unwrap_or(0) & mask
}

/// Under a writer's chain lock, for a key of `hash`: drops every flash slot that may be its
/// ([`flash_slot_matches`]: the key's flash copy, if it has one, is now out of date; one of
/// another key with the same tag and bits goes with it) and every dead flash slot. True when
/// a live one was dropped.
pub(crate) fn purge_flash(engine: &EngineState, chain: &ChainGuard<'_>, hash: u64) -> bool {
    let Some(tier) = engine.flash() else {
        return false;
    };
    let power = chain.power();
    let mut purged = false;
    chain.scan(|slot, s| {
        if engine.is_flash_slot(s) {
            let live = tier.resolve(s.seg()).is_some();
            if !live || flash_slot_matches(s, hash, power) {
                chain.remove(slot);
                if live {
                    tier.forget(s.seg());
                    tier.counters.purged.fetch_add(1, Ordering::Relaxed);
                    purged = true;
                }
            }
        }
        None::<()>
    });
    if purged {
        chain.bump_cas(engine.cas_sequence(), 0);
    }
    purged
}

/// Under a writer's chain lock, before a new slot goes in: when the chain has no free slot,
/// drops a dead flash slot, or, once half the overflow buckets are taken, the least read
/// live one, so that the flash index does not push the table to grow (which cannot keep
/// flash slots). True when one was dropped.
pub(crate) fn make_room(engine: &EngineState, chain: &ChainGuard<'_>) -> bool {
    let Some(tier) = engine.flash() else {
        return false;
    };
    if chain.has_room() {
        return false;
    }
    let mut victim: Option<(&AtomicU64, Slot, bool)> = None;
    chain.scan(|slot, s| {
        if engine.is_flash_slot(s) {
            let live = tier.resolve(s.seg()).is_some();
            // Dead first, then one not read while on flash.
            let better = match victim {
                None => true,
                Some((_, v, v_live)) => v_live && (!live || (v.counted() && !s.counted())),
            };
            if better {
                victim = Some((slot, s, live));
            }
        }
        None::<()>
    });
    let Some((slot, s, live)) = victim else {
        return false;
    };
    if live && !chain.overflow_half_used() {
        return false; // room left in the overflow buckets: the chain may grow into one
    }
    chain.remove(slot);
    if live {
        tier.forget(s.seg());
        tier.counters.index_drops.fetch_add(1, Ordering::Relaxed);
    }
    true
}

/// Walks the whole table removing flash slots whose segment was reclaimed (or, with
/// `all`, every flash slot: before a snapshot that cannot keep the flash, or after a
/// restore that has no flash to serve them, tier or not). Returns how many were removed.
pub(crate) fn sweep(engine: &EngineState, all: bool) -> usize {
    let tier = engine.flash();
    if tier.is_none() && !all {
        return 0;
    }
    let snapshot = tier.map(|t| t.sweep_started());
    let mut removed = 0;
    let mut table: Arc<Table> = engine.table().load();
    let mut head = 0;
    while head < table.primary_buckets() {
        let Ok(chain) = table.lock(head) else {
            // A growth moved the table: start over on the new one.
            engine.wait_for_growth();
            table = engine.table().load();
            head = 0;
            continue;
        };
        chain.scan(|slot, s| {
            if engine.is_flash_slot(s) {
                let live = tier.is_some_and(|t| t.resolve(s.seg()).is_some());
                if all || !live {
                    if let (true, Some(t)) = (live, tier) {
                        t.forget(s.seg());
                    }
                    chain.remove(slot);
                    removed += 1;
                }
            }
            None::<()>
        });
        drop(chain);
        head += 1;
    }
    if let (Some(t), Some(snapshot)) = (tier, snapshot) {
        t.sweep_done(&snapshot);
    }
    removed
}

/// Where table growth files `slot`, found in chain `head` of a table of `power`: a RAM item
/// under its key's hash; a flash item (its key is on flash) under `head` and the next hash
/// bit its slot keeps, which the slot then gives up (`None` once it has none left: dropped,
/// counted; four doublings after its demotion).
pub(crate) fn rehash(
    engine: &EngineState,
    slot: Slot,
    head: usize,
    power: u32,
) -> Option<(u64, Slot)> {
    if engine.is_flash_slot(slot) {
        let bits = slot.freq();
        let known = u32::from(bits >> HASH_BITS);
        if known == 0 {
            if let Some(tier) = engine.flash() {
                tier.forget(slot.seg());
                tier.counters.growth_drops.fetch_add(1, Ordering::Relaxed);
            }
            return None;
        }
        let next = u64::from(bits & 1);
        let rest = (((known - 1) << HASH_BITS) as u8) | ((bits & 0x0f) >> 1);
        let moved = if slot.counted() {
            slot.with_counted_freq(rest)
        } else {
            slot.with_freq(rest)
        };
        return Some(((head as u64) | (next << power), moved));
    }
    let offset = engine.offset_of(slot);
    // SAFETY: growth calls this with the slot's chain locked for good (MOVED), and the slot
    // points at a published item, so its segment cannot be retired meanwhile.
    let header = unsafe { engine.header_at(slot.seg(), offset) };
    // SAFETY: as above.
    Some((
        unsafe { engine.item_hash(slot.seg(), offset, &header) },
        slot,
    ))
}
