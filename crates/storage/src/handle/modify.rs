//! Read-modify-write operations and deletes: append and prepend, incr and decr, touch and
//! gat, delete (with or without a hold-off), flush_all.
//!
//! A read-modify-write remembers which item it read and publishes its new copy only if that
//! item is still the current one, retrying otherwise: a lost race leaves dead bytes in a
//! segment, never a lost update.

use super::read::ItemRef;
use super::status::{DeltaError, StoreError, StoreStatus};
use super::store::{check_key, existing, ChainAttempt, Existing};
use super::Handle;
use crate::clock::{Expiry, NEVER};
use crate::counters::HandleCounters;
use crate::hashtable::{hash, TableFull};
use crate::item::{self, Extras, MARK_STALE, MARK_TOMBSTONE};
use crate::lease::Visibility;
use crate::numeric;

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

impl Handle {
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
        let mut buf = std::mem::take(&mut self.scratch);
        let result = loop {
            let now = self.engine.clock().now();
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
            let epoch = self.engine.segment(expected.seg()).epoch();
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
                Some(expiry) => match self.engine.clock().deadline(expiry, now) {
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
            let published = self.swap(
                key,
                h,
                now,
                written.as_ref(),
                bump_cas.then_some(0),
                |e, _| e.has_value() && e.is(&self.engine, expected, epoch),
            );
            self.finish(written);
            if published.is_some() {
                break Ok(Some(out));
            }
        };
        self.scratch = buf;
        result
    }

    pub(super) fn concat(
        &mut self,
        at_end: bool,
        key: &[u8],
        data: &[u8],
    ) -> Result<StoreStatus, StoreError> {
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
        // A flash copy goes without being read (no flash I/O for a delete).
        let purged = self.purge_flash_of(key);
        let removed = if self.engine.config().stale_after_delete > 0 {
            self.delete_keeping_stale(key)
        } else {
            self.remove_outright(key)
        } || purged;
        if removed {
            HandleCounters::bump(&self.counters.deletes, 1);
        }
        removed
    }

    /// Drops the key's item unless it is a hold-off; true when it was a value (or a lease
    /// placeholder, which memcached counts as an item).
    pub(crate) fn remove_outright(&self, key: &[u8]) -> bool {
        let h = hash(key);
        let now = self.engine.clock().now();
        let removed = self.locked(h, |this, _, chain| {
            let Some(old) = existing(&this.engine, chain, key, h, now) else {
                return ChainAttempt::Done(false);
            };
            if old.live && old.header.marks & MARK_TOMBSTONE != 0 {
                return ChainAttempt::Done(false);
            }
            this.unpublish(chain, &old);
            let vis = Visibility::of(old.header.marks);
            ChainAttempt::Done(old.live && vis.blocks_add)
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
        let now = self.engine.clock().now();
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
            let old = existing(&this.engine, chain, key, h, now);
            match this.publish(table, chain, old.as_ref(), &written, h, true) {
                Ok(()) => ChainAttempt::Done(old.as_ref().is_some_and(Existing::has_value)),
                Err(TableFull) => ChainAttempt::GrowTable(table.power()),
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
        self.engine.flush_all(delay);
    }
}
