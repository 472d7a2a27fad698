//! A key's flash copy, from the caller's side: find it ([`Handle::flash_candidate`]), learn
//! how to read it ([`Handle::flash_fetch`]), and hand the bytes back ([`Handle::promote`]),
//! which checks them and moves the item into RAM, where every command then finds it. The
//! engine does no I/O: the server reads between the calls without blocking its worker.

use super::store::ChainAttempt;
use super::Handle;
use crate::flash::{record, FlashCandidate, FlashFetch, Promotion};
use crate::hashtable::{hash, tag_of, Slot};
use crate::item::{self, Extras, Lease};
use std::sync::atomic::Ordering;

impl Handle {
    /// The flash copy `key` may have: a flash slot of its tag in its chain (at most one; the
    /// key is checked once the bytes are read). `None` without a flash tier, and for most
    /// keys with one: a lookup of the chain, no I/O.
    pub fn flash_candidate(&self, key: &[u8]) -> Option<FlashCandidate> {
        let tier = self.engine.flash()?;
        if key.is_empty() || key.len() > item::MAX_KEY_LEN {
            return None;
        }
        let h = hash(key);
        let tag = tag_of(h);
        let engine = &*self.engine;
        let table = self.table();
        table.scan(table.head_of(h), |_, s| {
            (s.tag() == tag && engine.is_flash_slot(s) && tier.resolve(s.seg()).is_some()).then(
                || FlashCandidate {
                    seg: s.seg(),
                    offset: engine.offset_of(s) as u32,
                    slot: s.0,
                },
            )
        })
    }

    /// How to get the candidate's bytes: from a write buffer now, or from the device.
    pub fn flash_fetch(&self, candidate: &FlashCandidate) -> FlashFetch {
        match self.engine.flash() {
            Some(tier) => tier.fetch(candidate.seg, candidate.offset as usize),
            None => FlashFetch::Gone,
        }
    }

    /// The caller read `bytes` for `candidate` (what [`Handle::flash_fetch`] said, or a
    /// device read that failed: call [`Handle::flash_read_failed`] instead). Checks them
    /// against the key and, if they are its live item, writes the item into RAM in place of
    /// its flash slot (same CAS, flags, deadline, lease), so the command that wanted it finds
    /// it there. Anything else is a miss and drops the flash slot where it is wrong.
    pub fn promote(&mut self, key: &[u8], candidate: &FlashCandidate, bytes: &[u8]) -> Promotion {
        let Some(tier) = self.engine.flash().cloned() else {
            return Promotion::Gone;
        };
        let c = &tier.counters;
        let (deadline, header) = match record::decode(bytes, candidate.seg) {
            record::Decoded::NeedMore(n) => return Promotion::NeedMore(n as u32),
            record::Decoded::Corrupt => {
                c.objects_read.fetch_add(1, Ordering::Relaxed);
                c.bad_checksums.fetch_add(1, Ordering::Relaxed);
                self.drop_flash_slot(key, candidate);
                return Promotion::Corrupt;
            }
            record::Decoded::Item { deadline, header } => (deadline, header),
        };
        c.objects_read.fetch_add(1, Ordering::Relaxed);
        c.bytes_read
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        let item_bytes = &bytes[record::RECORD_HEADER..];
        let stored_key = &item_bytes[header.key_offset..header.key_offset + header.key_len];
        if stored_key != key {
            c.misses.fetch_add(1, Ordering::Relaxed);
            return Promotion::NotThisKey;
        }
        let now = self.engine.clock().now();
        let generation = self.engine.current_generation(now);
        let flushed = tier
            .resolve(candidate.seg)
            .is_none_or(|place| tier.flushed(place, generation));
        if deadline <= now || flushed {
            c.misses.fetch_add(1, Ordering::Relaxed);
            self.drop_flash_slot(key, candidate);
            return Promotion::Expired;
        }
        let value_at = header.key_offset + header.key_len;
        let value = &item_bytes[value_at..value_at + header.value_len];
        let extras = Extras {
            own_deadline: header.own_deadline,
            lease: header
                .lease
                .or(header.explicit_cas.map(Lease::explicit_cas)),
            marks: header.marks,
        };
        let written = match self.append(key, &[value], header.client_flags, deadline, extras) {
            Ok(w) => w,
            Err(_) => return Promotion::NoMemory,
        };
        let h = hash(key);
        let engine = self.engine.clone();
        let expected = Slot(candidate.slot);
        let moved = self.locked(h, |_, _, chain| {
            let found = chain.scan(|slot, s| s.same_location(expected).then_some((slot, s)));
            let Some((slot, s)) = found else {
                return ChainAttempt::Done(false);
            };
            let ram = Slot::new(written.seg, engine.units(written.offset), s.freq(), s.tag());
            chain.replace(slot, ram.with_fetched(s.fetched()));
            engine.segment(written.seg).add_live(written.len);
            tier.forget(candidate.seg);
            ChainAttempt::Done(true)
        });
        self.finish(Some(written));
        if moved == Some(true) {
            c.hits.fetch_add(1, Ordering::Relaxed);
            Promotion::Promoted
        } else {
            Promotion::Gone
        }
    }

    /// A device read of `candidate` failed (an I/O error, a short read, a full queue): the
    /// key is a miss this time (memcached's `get_aborted_extstore`); the copy stays.
    pub fn flash_read_failed(&self, _candidate: &FlashCandidate) {
        if let Some(tier) = self.engine.flash() {
            tier.counters.aborted.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Drops the candidate's slot if it still points where it did (its bytes were bad).
    fn drop_flash_slot(&self, key: &[u8], candidate: &FlashCandidate) {
        let engine = self.engine.clone();
        let expected = Slot(candidate.slot);
        self.locked(hash(key), |_, _, chain| {
            if let Some(slot) = chain.scan(|slot, s| s.same_location(expected).then_some(slot)) {
                chain.remove(slot);
                if let Some(tier) = engine.flash() {
                    tier.forget(candidate.seg);
                }
            }
            ChainAttempt::Done(())
        });
    }

    /// Drops the flash copy `key` may have, without reading it (a delete: no flash I/O).
    /// True when a live flash slot of the key's tag was dropped.
    pub(crate) fn purge_flash_of(&self, key: &[u8]) -> bool {
        if self.engine.flash().is_none() {
            return false;
        }
        let h = hash(key);
        let engine = self.engine.clone();
        self.locked(h, |_, _, chain| {
            ChainAttempt::Done(crate::demote::purge_flash(&engine, chain, tag_of(h)))
        })
        .unwrap_or(false)
    }
}
