//! Publishing a written item under its key's chain lock, and the conditional stores.
//!
//! Every write follows one pattern: check what it can without a lock (so a doomed `add` or
//! `cas` wastes no segment space), append the new item to an active segment (`write.rs`),
//! then lock the key's hash chain, re-check the condition against what is there now
//! ([`verdict`]), and publish. The read-modify-writes (`modify.rs`) and the lease operations
//! (`lease.rs`) publish through the same [`Handle::locked`] loop.

use super::status::{StoreError, StoreMode, StoreStatus};
use super::write::Written;
use super::Handle;
use crate::clock::Expiry;
use crate::counters::HandleCounters;
use crate::engine_state::EngineState;
use crate::hashtable::{hash, tag_of, ChainGuard, Slot, Table, TableFull};
use crate::item::{self, Extras, Header, Lease, MARK_DELETED, MARK_TOMBSTONE};
use crate::lease::Visibility;
use crate::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;

/// The item currently in a locked chain for a key.
pub(crate) struct Existing<'a> {
    pub slot: &'a AtomicU64,
    pub slot_value: Slot,
    pub header: Header,
    /// Not expired, flushed or being retired.
    pub live: bool,
}

impl Existing<'_> {
    /// Holds a value a client stored (not a placeholder, stale copy or hold-off).
    pub(super) fn has_value(&self) -> bool {
        self.live && Visibility::of(self.header.marks).value
    }
    /// Whether this is still the item read at `expected` while its segment had `epoch`
    /// (a freed and reused segment could hold the same key at the same offset again).
    pub(crate) fn is(&self, engine: &EngineState, expected: Slot, epoch: u32) -> bool {
        self.slot_value.same_location(expected) && engine.segment(expected.seg()).epoch() == epoch
    }

    /// What a conditional store compares against.
    fn seen(&self, bucket_cas: u64) -> Option<Seen> {
        self.live.then_some(Seen {
            marks: self.header.marks,
            lease: self.header.lease,
            bucket_cas: self.header.explicit_cas.unwrap_or(bucket_cas),
        })
    }
}

/// What a conditional store needs to know of the key's current item.
#[derive(Clone, Copy)]
struct Seen {
    marks: u8,
    lease: Option<Lease>,
    /// The bucket's client CAS (an item's CAS when it has no lease).
    bucket_cas: u64,
}

/// Whether a store in `mode` goes ahead over `old` (`None`: the key holds nothing live),
/// or the status it answers instead.
fn verdict(mode: StoreMode, old: Option<Seen>) -> Result<(), StoreStatus> {
    let vis = old.map(|o| Visibility::of(o.marks));
    match mode {
        StoreMode::Set | StoreMode::Append | StoreMode::Prepend => Ok(()),
        StoreMode::Add if vis.is_some_and(|v| v.blocks_add) => Err(StoreStatus::NotStored),
        StoreMode::Add => Ok(()),
        StoreMode::Replace if vis.is_some_and(|v| v.value) => Ok(()),
        StoreMode::Replace => Err(StoreStatus::NotStored),
        StoreMode::Cas(cas) => {
            let Some(o) = old else {
                return Err(StoreStatus::NotFound);
            };
            let gone = o.marks & (MARK_TOMBSTONE | MARK_DELETED) != 0;
            match o.lease {
                Some(l) if l.token == cas => Ok(()),
                _ if gone => Err(StoreStatus::NotFound),
                Some(_) => Err(StoreStatus::Exists),
                None if o.bucket_cas == cas => Ok(()),
                None => Err(StoreStatus::Exists),
            }
        }
        // Only the holder of the item's token: a value filled since by someone else may be
        // newer than this one (a delete and a new lease came between).
        StoreMode::Lease(token) => match old {
            Some(o)
                if o.marks & MARK_TOMBSTONE == 0 && o.lease.is_some_and(|l| l.token == token) =>
            {
                Ok(())
            }
            _ => Err(StoreStatus::NotStored),
        },
    }
}

/// What one attempt under a key's chain lock came to ([`Handle::locked`]).
pub(crate) enum ChainAttempt<T> {
    /// Done, with this result.
    Done(T),
    /// The chain had no room: grow the table from this power, then try again.
    GrowTable(u32),
    /// What was read before locking is no longer there: give up this attempt.
    Retry,
}

/// The key's current item in a locked chain, whether live or not (the chain lock keeps its
/// segment from being reused while the guard lives).
pub(crate) fn existing<'a>(
    engine: &EngineState,
    chain: &ChainGuard<'a>,
    key: &[u8],
    h: u64,
    now: u32,
) -> Option<Existing<'a>> {
    let tag = tag_of(h);
    let generation = engine.current_generation(now);
    // A write of the key makes any flash copy of it out of date (`demote.rs`).
    crate::demote::purge_flash(engine, chain, h);
    chain.scan(|slot, s| {
        if s.tag() != tag || engine.is_flash_slot(s) {
            return None;
        }
        let seg = s.seg();
        let offset = engine.offset_of(s);
        // The locked chain points at the item, so its segment cannot be reused under us.
        // SAFETY: the locked chain's slot points at this published item, so its segment
        // cannot be retired (retirement unlinks every slot under the chain lock) meanwhile.
        let header = unsafe { engine.header_at(seg, offset) };
        // SAFETY: as above.
        if unsafe { engine.key_at(seg, offset, &header) } != key {
            return None;
        }
        let h = engine.segment(seg);
        let live = h.accessible.load(Ordering::Acquire)
            && !h.is_dead(now, generation)
            && header.own_deadline.is_none_or(|d| d > now);
        Some(Existing {
            slot,
            slot_value: s,
            header,
            live,
        })
    })
}

pub(crate) fn check_key(key: &[u8]) -> Result<(), StoreError> {
    if key.is_empty() || key.len() > item::MAX_KEY_LEN {
        Err(StoreError::BadKey)
    } else {
        Ok(())
    }
}

impl Handle {
    /// Publishes `written` for the key, replacing `old` if there is one.
    pub(crate) fn publish(
        &self,
        table: &Table,
        chain: &ChainGuard<'_>,
        old: Option<&Existing<'_>>,
        written: &Written,
        hash: u64,
        bump_cas: bool,
    ) -> Result<(), TableFull> {
        let engine = &*self.engine;
        // A rewrite keeps the key's access frequency: popularity belongs to the key, and an
        // overwritten hot key must not look cold to the next merge. A new key starts with
        // what the ghosts remember of it (`ghost.rs`).
        let freq = old.map_or_else(|| engine.ghosts().recall(hash), |e| e.slot_value.freq());
        let slot = Slot::new(
            written.seg,
            engine.units(written.offset),
            freq,
            tag_of(hash),
        );
        match old {
            Some(e) => {
                chain.replace(e.slot, slot);
                engine
                    .segment(e.slot_value.seg())
                    .remove_live(engine.aligned(e.header.len()));
            }
            None => {
                crate::demote::make_room(engine, chain);
                chain.insert(slot)?;
                if table.wants_growth() {
                    self.grow_hint.set(Some(table.power()));
                }
            }
        }
        engine.segment(written.seg).add_live(written.len);
        // A write is an access: meta `l` (last access) counts from it, as memcached's does.
        chain.touch(engine.clock().now(), engine.count_window().shift());
        if bump_cas {
            self.bump_chain_cas(chain, 0);
        }
        HandleCounters::bump(&self.counters.writes, 1);
        Ok(())
    }

    /// Drops an existing item's slot.
    pub(crate) fn unpublish(&self, chain: &ChainGuard<'_>, old: &Existing<'_>) {
        let engine = &*self.engine;
        chain.remove(old.slot);
        engine
            .segment(old.slot_value.seg())
            .remove_live(engine.aligned(old.header.len()));
        self.bump_chain_cas(chain, 0);
    }

    /// Ends a write: the item is published or abandoned.
    pub(crate) fn finish(&self, written: Option<Written>) {
        if let Some(w) = written {
            let h = &self.engine.segment(w.seg);
            h.writers.fetch_sub(1, Ordering::Release);
            self.engine.release(w.seg, self.stripe);
        }
    }

    /// Under the key's chain lock: if `current` holds for the key's item (hash `h`: still
    /// the one the caller read, and as it needs it, given the chain's CAS unique), replaces
    /// it by `written`, or drops it when that is `None`. A replacement gives the chain a new
    /// CAS unique when `new_cas` says so: its next one, at least the given value (0: any).
    /// `None` when the item changed (look again).
    pub(crate) fn swap(
        &self,
        key: &[u8],
        h: u64,
        now: u32,
        written: Option<&Written>,
        new_cas: Option<u64>,
        current: impl Fn(&Existing<'_>, u64) -> bool,
    ) -> Option<()> {
        self.locked(h, |this, table, chain| {
            let old = match existing(&this.engine, chain, key, h, now) {
                Some(e) if current(&e, chain.cas(this.engine.cas_sequence())) => e,
                _ => return ChainAttempt::Retry,
            };
            match written {
                Some(w) => match this.publish(table, chain, Some(&old), w, h, false) {
                    Ok(()) => {
                        if let Some(at_least) = new_cas {
                            this.bump_chain_cas(chain, at_least);
                        }
                        ChainAttempt::Done(())
                    }
                    Err(TableFull) => ChainAttempt::GrowTable(table.power()),
                },
                None => {
                    this.unpublish(chain, &old);
                    ChainAttempt::Done(())
                }
            }
        })
    }

    /// Runs `f` under the key's chain lock until it neither needs a bigger table nor a retry.
    pub(crate) fn locked<T>(
        &self,
        h: u64,
        mut f: impl FnMut(&Self, &Table, &ChainGuard<'_>) -> ChainAttempt<T>,
    ) -> Option<T> {
        loop {
            match self.with_chain(h, |table, chain| f(self, table, chain)) {
                ChainAttempt::Done(v) => {
                    if let Some(power) = self.grow_hint.take() {
                        self.grow_table(power);
                    }
                    return Some(v);
                }
                ChainAttempt::GrowTable(power) => self.grow_table(power),
                ChainAttempt::Retry => return None,
            }
        }
    }

    /// memcached's `set`.
    pub fn set(
        &mut self,
        key: &[u8],
        value: &[u8],
        flags: u32,
        expiry: Expiry,
    ) -> Result<StoreStatus, StoreError> {
        self.store(StoreMode::Set, key, value, flags, expiry)
    }

    /// Any storage command (`set`, `add`, `replace`, `append`, `prepend`, `cas`).
    pub fn store(
        &mut self,
        mode: StoreMode,
        key: &[u8],
        value: &[u8],
        flags: u32,
        expiry: Expiry,
    ) -> Result<StoreStatus, StoreError> {
        self.store_with_cas(mode, key, value, flags, expiry, None)
    }

    /// [`Handle::store`], the new item taking `cas` as its CAS unique when given (meta
    /// `E<cas>`; not for append and prepend, which keep the engine's).
    pub fn store_with_cas(
        &mut self,
        mode: StoreMode,
        key: &[u8],
        value: &[u8],
        flags: u32,
        expiry: Expiry,
        cas: Option<u64>,
    ) -> Result<StoreStatus, StoreError> {
        check_key(key)?;
        if matches!(mode, StoreMode::Append | StoreMode::Prepend) {
            return self.concat(mode == StoreMode::Append, key, value);
        }
        let now = self.engine.clock().now();
        let h = hash(key);
        if let Some(status) = self.precheck(mode, key, h, now) {
            return Ok(status);
        }
        let deadline = self.engine.clock().deadline(expiry, now);
        let written = match deadline {
            Some(d) => {
                let extras = Extras {
                    lease: cas.map(Lease::explicit_cas),
                    ..Extras::default()
                };
                Some(self.append(key, &[value], flags, d, extras)?)
            }
            None => None,
        };
        let status = self.locked(h, |this, table, chain| {
            let engine = &*this.engine;
            let old = existing(engine, chain, key, h, now);
            // Only a `cas` compares the unique (a few instructions a `set` need not spend).
            let bucket_cas = match mode {
                StoreMode::Cas(_) => chain.cas(engine.cas_sequence()),
                _ => 0,
            };
            let verdict = verdict(mode, old.as_ref().and_then(|o| o.seen(bucket_cas)));
            if let Err(status) = verdict {
                return ChainAttempt::Done(status);
            }
            match &written {
                Some(w) => match this.publish(table, chain, old.as_ref(), w, h, true) {
                    Ok(()) => ChainAttempt::Done(StoreStatus::Stored),
                    Err(TableFull) => ChainAttempt::GrowTable(table.power()),
                },
                None => {
                    // Already expired: memcached stores it and it is gone at once.
                    if let Some(old) = &old {
                        this.unpublish(chain, old);
                    }
                    ChainAttempt::Done(StoreStatus::Stored)
                }
            }
        });
        self.finish(written);
        Ok(status.expect("store never retries"))
    }

    /// A lock-free look at the key that settles doomed conditional stores early.
    fn precheck(&self, mode: StoreMode, key: &[u8], h: u64, now: u32) -> Option<StoreStatus> {
        if matches!(
            mode,
            StoreMode::Set | StoreMode::Append | StoreMode::Prepend
        ) {
            return None;
        }
        let seen = self.find(key, h, now, false).map(|item| Seen {
            marks: item.marks(),
            lease: item.lease(),
            bucket_cas: item.bucket_cas(),
        });
        verdict(mode, seen).err()
    }
}
