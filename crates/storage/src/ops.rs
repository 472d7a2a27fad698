//! memcached's operations on top of the handle's read and append paths.
//!
//! Every write follows one pattern: check what it can without a lock (so a doomed `add` or
//! `cas` wastes no segment space), append the new item to an active segment, then
//! lock the key's hash chain, re-check the condition against what is there now, and publish.
//! Read-modify-write operations (append, prepend, incr, decr, touch) remember which item they
//! read and publish only if it is still the current one, retrying otherwise; a lost race
//! leaves dead bytes in a segment, never a lost update.

use crate::cache::Shared;
use crate::clock::{Expiry, NEVER};
use crate::handle::{client_cas, hash, Handle, HandleCounters, ItemRef, Written};
use crate::hashtable::{tag_of, ChainGuard, Slot, Table, TableFull};
use crate::item::{self, Extras, Header, Lease, MARK_DELETED, MARK_STALE, MARK_TOMBSTONE};
use crate::lease::Visibility;
use crate::numeric;
use std::sync::atomic::{AtomicU64, Ordering};

/// How a store treats an existing item (memcached's storage commands).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreMode {
    /// Store unconditionally.
    Set,
    /// Store only if the key holds nothing (a delete hold-off also blocks it).
    Add,
    /// Store only if the key holds a value.
    Replace,
    /// Add to the end of an existing value (flags and expiry unchanged).
    Append,
    /// Add to the start of an existing value (flags and expiry unchanged).
    Prepend,
    /// Store only if the key's CAS value is still this one (an item's CAS is its lease token
    /// while it has one, so this is also the meta protocol's lease-set).
    Cas(u64),
    /// mcrouter's `lease-set`: store if this token is the key's outstanding lease; otherwise
    /// (deleted since, token voided, reissued, or the key filled by someone else) refuse.
    Lease(u64),
}

/// What a store did, in memcached's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreStatus {
    /// STORED
    Stored,
    /// NOT_STORED: the condition of add, replace, append or prepend failed.
    NotStored,
    /// EXISTS: the CAS value changed since the client read it.
    Exists,
    /// NOT_FOUND: cas on a key that holds nothing.
    NotFound,
}

/// Why a write could not be done.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The key is empty or longer than the item format allows.
    #[error("bad key length")]
    BadKey,
    /// The item does not fit in a segment.
    #[error("object too large for cache")]
    TooLarge,
    /// No segment is free and none could be evicted.
    #[error("out of memory storing object")]
    OutOfMemory,
}

/// Why incr/decr failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeltaError {
    /// The stored value is not a decimal number.
    #[error("cannot increment or decrement non-numeric value")]
    NonNumeric,
    /// The write itself failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

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
    fn has_value(&self) -> bool {
        self.live && Visibility::of(self.header.marks).value
    }
    /// Whether this is still the item read at `expected` while its segment had `epoch`
    /// (a freed and reused segment could hold the same key at the same offset again).
    pub(crate) fn is(&self, shared: &Shared, expected: Slot, epoch: u32) -> bool {
        self.slot_value.same_location(expected)
            && shared.headers[expected.seg() as usize].epoch() == epoch
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

/// Which read-modify-write a [`Handle::rewrite`] is (they keep different parts of the item).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Rewrite {
    /// touch / gat: same value, new expiry.
    Touch,
    /// incr / decr; `in_place` unless a reader still holds the item (see
    /// [`Handle::delta_new_item`]).
    Delta { in_place: bool },
    /// append / prepend.
    Concat,
}

pub(crate) enum Outcome<T> {
    Done(T),
    Grow(u32),
    Retry,
}

pub(crate) fn existing<'a>(
    shared: &Shared,
    chain: &ChainGuard<'a>,
    key: &[u8],
    tag: u16,
    now: u32,
) -> Option<Existing<'a>> {
    let generation = shared.current_generation(now);
    chain.scan(|slot, s| {
        if s.tag() != tag {
            return None;
        }
        let seg = s.seg();
        let offset = shared.offset_of(s);
        // The locked chain points at the item, so its segment cannot be reused under us.
        let header = shared.header_at(seg, offset);
        if shared.key_at(seg, offset, &header) != key {
            return None;
        }
        let h = &shared.headers[seg as usize];
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
        let shared = &*self.shared;
        // A rewrite keeps the key's access frequency: popularity belongs to the key, and an
        // overwritten hot key must not look cold to the next merge. A new key starts with
        // what the ghosts remember of it (`ghost.rs`).
        let freq = old.map_or_else(|| shared.ghosts.recall(hash), |e| e.slot_value.freq());
        let slot = Slot::new(
            written.seg,
            shared.units(written.offset),
            freq,
            tag_of(hash),
        );
        match old {
            Some(e) => {
                chain.replace(e.slot, slot);
                shared.headers[e.slot_value.seg() as usize]
                    .remove_live(shared.aligned(e.header.len()));
            }
            None => {
                chain.insert(slot)?;
                if table.wants_growth() {
                    self.grow_hint.set(Some(table.power()));
                }
            }
        }
        shared.headers[written.seg as usize].add_live(written.len);
        // A write is an access: meta `l` (last access) counts from it, as memcached's does.
        chain.touch(shared.clock.now());
        if bump_cas {
            chain.bump_cas();
        }
        HandleCounters::bump(&self.counters.writes, 1);
        Ok(())
    }

    /// Drops an existing item's slot.
    pub(crate) fn unpublish(&self, chain: &ChainGuard<'_>, old: &Existing<'_>) {
        let shared = &*self.shared;
        chain.remove(old.slot);
        shared.headers[old.slot_value.seg() as usize].remove_live(shared.aligned(old.header.len()));
        chain.bump_cas();
    }

    /// Ends a write: the item is published or abandoned.
    pub(crate) fn finish(&self, written: Option<Written>) {
        if let Some(w) = written {
            let h = &self.shared.headers[w.seg as usize];
            h.writers.fetch_sub(1, Ordering::Release);
            h.release();
        }
    }

    /// Runs `f` under the key's chain lock until it neither needs a bigger table nor a retry.
    pub(crate) fn locked<T>(
        &self,
        h: u64,
        mut f: impl FnMut(&Self, &Table, &ChainGuard<'_>) -> Outcome<T>,
    ) -> Option<T> {
        loop {
            match self.with_chain(h, |table, chain| f(self, table, chain)) {
                Outcome::Done(v) => {
                    if let Some(power) = self.grow_hint.take() {
                        self.grow_table(power);
                    }
                    return Some(v);
                }
                Outcome::Grow(power) => self.grow_table(power),
                Outcome::Retry => return None,
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
        let now = self.shared.clock.now();
        let h = hash(key);
        let tag = tag_of(h);
        if let Some(status) = self.precheck(mode, key, h, now) {
            return Ok(status);
        }
        let deadline = self.shared.clock.deadline(expiry, now);
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
            let shared = &*this.shared;
            let old = existing(shared, chain, key, tag, now);
            let bucket_cas = client_cas(chain.cas(), h);
            let verdict = verdict(mode, old.as_ref().and_then(|o| o.seen(bucket_cas)));
            if let Err(status) = verdict {
                return Outcome::Done(status);
            }
            match &written {
                Some(w) => match this.publish(table, chain, old.as_ref(), w, h, true) {
                    Ok(()) => Outcome::Done(StoreStatus::Stored),
                    Err(TableFull) => Outcome::Grow(table.power()),
                },
                None => {
                    // Already expired: memcached stores it and it is gone at once.
                    if let Some(old) = &old {
                        this.unpublish(chain, old);
                    }
                    Outcome::Done(StoreStatus::Stored)
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

    /// Rewrites the key's current value with `rewrite`, keeping flags and (by default) expiry,
    /// and publishes it only if the key still holds the item that was read. Returns `None`
    /// when the key holds no value.
    fn rewrite<T>(
        &mut self,
        key: &[u8],
        new_expiry: Option<Expiry>,
        kind: Rewrite,
        mut rewrite: impl FnMut(&[u8], &mut Vec<u8>) -> Result<T, DeltaError>,
    ) -> Result<Option<T>, DeltaError> {
        let bump_cas = kind != Rewrite::Touch;
        check_key(key)?;
        let h = hash(key);
        let tag = tag_of(h);
        let mut buf = std::mem::take(&mut self.scratch);
        let result = loop {
            let now = self.shared.clock.now();
            let Some(item) = self.find(key, h, now, false) else {
                break Ok(None);
            };
            if !Visibility::of(item.marks()).value {
                break Ok(None);
            }
            let out = match rewrite(item.value(), &mut buf) {
                Ok(out) => out,
                Err(e) => break Err(e),
            };
            let flags = item.flags();
            let expected = item.slot;
            let epoch = self.shared.headers[expected.seg() as usize].epoch();
            // What memcached's in-place updates keep: touch keeps the whole item (stale mark
            // and lease); an incr or decr that fits the old length keeps the stale mark but,
            // having changed the value (and CAS), voids the lease; anything else is a new,
            // fresh item.
            let lease = if kind == Rewrite::Touch {
                item.lease()
            } else {
                None
            };
            let keep_stale = match kind {
                Rewrite::Touch => true,
                Rewrite::Delta { in_place } => in_place && buf.len() <= item.value().len(),
                Rewrite::Concat => false,
            };
            let marks = if keep_stale {
                item.marks() & MARK_STALE
            } else {
                0
            };
            // Keep the deadline the item had. An item from a plain set knows only its segment's
            // earliest deadline (at most one tolerance early); after this rewrite it carries
            // that deadline exactly, so repeated rewrites cannot drift it further.
            let kept = item.own_deadline().unwrap_or(item.deadline());
            drop(item);
            let (deadline, own) = match new_expiry {
                Some(expiry) => match self.shared.clock.deadline(expiry, now) {
                    Some(d) => (Some(d), None),
                    None => (None, None),
                },
                None if kept == NEVER => (Some(NEVER), None),
                None => (Some(kept), Some(kept)),
            };
            let written = match deadline {
                Some(d) if d > now => match self.append(
                    key,
                    &[&buf],
                    flags,
                    d,
                    Extras {
                        own_deadline: own,
                        lease,
                        marks,
                    },
                ) {
                    Ok(w) => Some(w),
                    Err(e) => break Err(e.into()),
                },
                _ => None,
            };
            let published = self.locked(h, |this, table, chain| {
                let old = existing(&this.shared, chain, key, tag, now);
                match &old {
                    Some(e) if e.has_value() && e.is(&this.shared, expected, epoch) => {}
                    _ => return Outcome::Retry,
                }
                match &written {
                    Some(w) => match this.publish(table, chain, old.as_ref(), w, h, bump_cas) {
                        Ok(()) => Outcome::Done(()),
                        Err(TableFull) => Outcome::Grow(table.power()),
                    },
                    None => {
                        this.unpublish(chain, old.as_ref().expect("checked above"));
                        Outcome::Done(())
                    }
                }
            });
            self.finish(written);
            if published.is_some() {
                break Ok(Some(out));
            }
        };
        self.scratch = buf;
        result
    }

    fn concat(&mut self, at_end: bool, key: &[u8], data: &[u8]) -> Result<StoreStatus, StoreError> {
        let done = self.rewrite(key, None, Rewrite::Concat, |old, buf| {
            if old.len() + data.len() > item::MAX_VALUE_LEN {
                return Err(StoreError::TooLarge.into());
            }
            buf.clear();
            if at_end {
                buf.extend_from_slice(old);
                buf.extend_from_slice(data);
            } else {
                buf.extend_from_slice(data);
                buf.extend_from_slice(old);
            }
            Ok(())
        });
        match done {
            Ok(Some(())) => Ok(StoreStatus::Stored),
            Ok(None) => Ok(StoreStatus::NotStored),
            Err(DeltaError::Store(e)) => Err(e),
            Err(DeltaError::NonNumeric) => unreachable!("concat never parses numbers"),
        }
    }

    /// memcached's `incr`: `Ok(None)` when the key holds nothing.
    pub fn incr(&mut self, key: &[u8], delta: u64) -> Result<Option<u64>, DeltaError> {
        self.delta(key, delta, true, true)
    }

    /// memcached's `decr` (stops at 0).
    pub fn decr(&mut self, key: &[u8], delta: u64) -> Result<Option<u64>, DeltaError> {
        self.delta(key, delta, false, true)
    }

    /// memcached's `incr` (`incr` true) or `decr` on an item a reader still holds (a reply
    /// not sent yet): memcached cannot update it in place, so the number becomes a new item
    /// exactly as long as its digits (never space padded), without the old item's stale mark.
    pub fn delta_new_item(
        &mut self,
        key: &[u8],
        delta: u64,
        incr: bool,
    ) -> Result<Option<u64>, DeltaError> {
        self.delta(key, delta, incr, false)
    }

    fn delta(
        &mut self,
        key: &[u8],
        delta: u64,
        incr: bool,
        in_place: bool,
    ) -> Result<Option<u64>, DeltaError> {
        self.rewrite(key, None, Rewrite::Delta { in_place }, |old, buf| {
            let current = numeric::parse_u64(old).ok_or(DeltaError::NonNumeric)?;
            let new = numeric::apply(current, delta, incr);
            numeric::render(new, if in_place { old.len() } else { 0 }, buf);
            Ok(new)
        })
    }

    /// memcached's `touch`: gives the item a new expiry; false when the key holds nothing.
    /// The CAS value does not change, as in memcached.
    pub fn touch(&mut self, key: &[u8], expiry: Expiry) -> Result<bool, StoreError> {
        let done = self.rewrite(key, Some(expiry), Rewrite::Touch, |old, buf| {
            buf.clear();
            buf.extend_from_slice(old);
            Ok(())
        });
        match done {
            Ok(found) => Ok(found.is_some()),
            Err(DeltaError::Store(e)) => Err(e),
            Err(DeltaError::NonNumeric) => unreachable!("touch never parses numbers"),
        }
    }

    /// memcached's `gat`: touch, then return the item. An already-expired time returns the
    /// value one last time and removes it, as memcached does.
    pub fn get_and_touch(
        &mut self,
        key: &[u8],
        expiry: Expiry,
    ) -> Result<Option<ItemRef<'_>>, StoreError> {
        if expiry == Expiry::Expired {
            let item = self.get(key);
            if item.is_some() {
                // The reference pins the old bytes; the delete only unlinks them.
                self.remove_outright(key);
            }
            return Ok(item);
        }
        if !self.touch(key, expiry)? {
            HandleCounters::bump(&self.counters.get_misses, 1);
            return Ok(None);
        }
        Ok(self.get(key))
    }

    /// memcached's `delete`: true when a value was removed. With
    /// [`crate::Config::stale_after_delete`] set, the value stays behind as a stale copy only
    /// lease reads see (see `lease.rs`); a hold-off stays in force either way.
    pub fn delete(&mut self, key: &[u8]) -> bool {
        if check_key(key).is_err() {
            return false;
        }
        let removed = if self.shared.config.stale_after_delete > 0 {
            self.delete_keeping_stale(key)
        } else {
            self.remove_outright(key)
        };
        if removed {
            HandleCounters::bump(&self.counters.deletes, 1);
        }
        removed
    }

    /// Drops the key's item unless it is a hold-off; true when it was a value (or a lease
    /// placeholder, which memcached counts as an item).
    pub(crate) fn remove_outright(&self, key: &[u8]) -> bool {
        let h = hash(key);
        let tag = tag_of(h);
        let now = self.shared.clock.now();
        let removed = self.locked(h, |this, _, chain| {
            let Some(old) = existing(&this.shared, chain, key, tag, now) else {
                return Outcome::Done(false);
            };
            if old.live && old.header.marks & MARK_TOMBSTONE != 0 {
                return Outcome::Done(false);
            }
            this.unpublish(chain, &old);
            let vis = Visibility::of(old.header.marks);
            Outcome::Done(old.live && vis.blocks_add)
        });
        removed.unwrap_or(false)
    }

    /// Deletes the key's value and holds the key off for `holdoff` seconds (Facebook §4.3,
    /// `delete <key> <seconds>`): until then gets miss and `add` is refused, while `set`
    /// replaces the hold-off. True when a value was removed.
    pub fn delete_with_holdoff(&mut self, key: &[u8], holdoff: u32) -> Result<bool, StoreError> {
        if holdoff == 0 {
            return Ok(self.delete(key));
        }
        check_key(key)?;
        let h = hash(key);
        let tag = tag_of(h);
        let now = self.shared.clock.now();
        let deadline = now.saturating_add(holdoff).min(NEVER - 1);
        let tombstone = Extras {
            marks: MARK_TOMBSTONE,
            ..Extras::default()
        };
        let written = match self.append(key, &[], 0, deadline, tombstone) {
            Ok(w) => w,
            Err(e) => {
                // No room for the tombstone: at least the value goes, and the caller hears
                // that the hold-off could not be set.
                self.remove_outright(key);
                return Err(e);
            }
        };
        let removed = self.locked(h, |this, table, chain| {
            let old = existing(&this.shared, chain, key, tag, now);
            match this.publish(table, chain, old.as_ref(), &written, h, true) {
                Ok(()) => Outcome::Done(old.as_ref().is_some_and(Existing::has_value)),
                Err(TableFull) => Outcome::Grow(table.power()),
            }
        });
        self.finish(Some(written));
        let removed = removed.unwrap_or(false);
        if removed {
            HandleCounters::bump(&self.counters.deletes, 1);
        }
        Ok(removed)
    }

    /// memcached's `flush_all [delay]`.
    pub fn flush_all(&self, delay: u32) {
        crate::Cache {
            shared: self.shared.clone(),
        }
        .flush_all(delay);
    }
}
