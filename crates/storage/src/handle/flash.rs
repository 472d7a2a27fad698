//! A key's flash copy, from the caller's side: find it ([`Handle::flash_candidate`]), learn
//! how to read it ([`Handle::flash_fetch`]), and hand the bytes back ([`Handle::promote`]),
//! which checks them and moves the item into RAM, where every command then finds it. The
//! engine does no I/O: the server reads between the calls without blocking its worker.

use super::store::ChainAttempt;
use super::Handle;
use crate::flash::{
    record, FlashCandidate, FlashFetch, FlashItem, FlashRead, FlashTier, Promotion,
};
use crate::hashtable::{hash, Slot};
use crate::item::{self, Extras, Header, Lease};
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl Handle {
    /// Whether any key may have a flash copy: a flash tier that has taken an item. Until
    /// then a server skips looking (a flash tier costs nothing before it is used).
    #[inline]
    pub fn flash_in_use(&self) -> bool {
        self.engine.flash().is_some_and(|t| t.in_use())
    }

    /// The flash copy `key` may have: a flash slot of its tag in its chain (at most one; the
    /// key is checked once the bytes are read). `None` without a flash tier, and for most
    /// keys with one: a lookup of the chain, no I/O.
    pub fn flash_candidate(&self, key: &[u8]) -> Option<FlashCandidate> {
        let tier = self.engine.flash()?;
        if key.is_empty() || key.len() > item::MAX_KEY_LEN {
            return None;
        }
        let h = hash(key);
        let engine = &*self.engine;
        let table = self.table();
        let power = table.power();
        table.scan(table.head_of(h), |_, s| {
            (engine.is_flash_slot(s)
                && crate::demote::flash_slot_matches(s, h, power)
                && tier.resolve(s.seg()).is_some())
            .then(|| FlashCandidate {
                seg: s.seg(),
                offset: engine.offset_of(s) as u32,
                slot: s.0,
            })
        })
    }

    /// How to get the candidate's bytes: from a write buffer now, or from the device.
    pub fn flash_fetch(&self, candidate: &FlashCandidate) -> FlashFetch {
        match self.engine.flash() {
            Some(tier) => tier.fetch(candidate.seg, candidate.offset as usize),
            None => FlashFetch::Gone,
        }
    }

    /// Checks `bytes` read for `candidate` against `key`: the record's segment id and
    /// checksum, the key, the deadline and the flush generation. `Err` is what to tell the
    /// caller (bad or expired bytes also drop the slot).
    fn check(
        &self,
        tier: &FlashTier,
        key: &[u8],
        candidate: &FlashCandidate,
        bytes: &[u8],
    ) -> Result<(u32, Header), Promotion> {
        let c = &tier.counters;
        let (deadline, header) = match record::decode(bytes, candidate.seg) {
            record::Decoded::NeedMore(n) => return Err(Promotion::NeedMore(n as u32)),
            record::Decoded::Corrupt => {
                c.objects_read.fetch_add(1, Ordering::Relaxed);
                c.bad_checksums.fetch_add(1, Ordering::Relaxed);
                self.drop_flash_slot(key, candidate);
                return Err(Promotion::Corrupt);
            }
            record::Decoded::Item { deadline, header } => (deadline, header),
        };
        c.objects_read.fetch_add(1, Ordering::Relaxed);
        c.bytes_read
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        let item_bytes = &bytes[record::RECORD_HEADER..];
        if &item_bytes[header.key_offset..header.key_offset + header.key_len] != key {
            c.misses.fetch_add(1, Ordering::Relaxed);
            return Err(Promotion::NotThisKey);
        }
        let now = self.engine.clock().now();
        let generation = self.engine.current_generation(now);
        let flushed = tier
            .resolve(candidate.seg)
            .is_none_or(|place| tier.flushed(place, generation));
        if deadline <= now || flushed {
            c.misses.fetch_add(1, Ordering::Relaxed);
            self.drop_flash_slot(key, candidate);
            return Err(Promotion::Expired);
        }
        Ok((deadline, header))
    }

    /// A plain read of a flash item (`get`, `gets`): checks `bytes` as
    /// [`Handle::promote`] does and, the first time the item is read on flash, returns it to
    /// serve from the bytes, counting the read on its slot; a second read while it is still
    /// on flash (it is wanted again: extstore's recache) moves it into RAM
    /// ([`FlashRead::Promoted`]). Items with lease or hold-off marks are promoted, for the
    /// RAM path's rules to decide what they show.
    pub fn read_flash(
        &mut self,
        key: &[u8],
        candidate: &FlashCandidate,
        bytes: &[u8],
    ) -> FlashRead {
        let Some(tier) = self.engine.flash().cloned() else {
            return FlashRead::Other(Promotion::Gone);
        };
        let (deadline, header) = match self.check(&tier, key, candidate, bytes) {
            Ok(checked) => checked,
            Err(p) => return FlashRead::Other(p),
        };
        let expected = Slot(candidate.slot);
        // A lease, hold-off or stale mark: the RAM path's rules decide what it shows.
        let marked = header.marks != 0;
        if expected.counted() || marked {
            return match self.promote_checked(&tier, key, candidate, bytes, deadline, &header) {
                Promotion::Promoted => FlashRead::Promoted,
                other => FlashRead::Other(other),
            };
        }
        // Count this read on the slot (the next one promotes), and take the key's CAS.
        let h = hash(key);
        let counted = self.locked(h, |_, _, chain| {
            let Some((slot, s)) =
                chain.scan(|slot, s| s.same_location(expected).then_some((slot, s)))
            else {
                return ChainAttempt::Done(None);
            };
            // Read once on flash (`demote.rs`: the frequency byte keeps hash bits).
            chain.replace(slot, s.with_counted_freq(s.freq()).with_fetched(true));
            ChainAttempt::Done(Some(chain.cas(self.engine.cas_sequence())))
        });
        let Some(Some(bucket_cas)) = counted else {
            return FlashRead::Other(Promotion::Gone);
        };
        tier.counters.hits.fetch_add(1, Ordering::Relaxed);
        let item = &bytes[record::RECORD_HEADER..];
        let value_at = header.key_offset + header.key_len;
        FlashRead::Serve(FlashItem {
            key: key.to_vec(),
            flags: header.client_flags,
            value: item[value_at..value_at + header.value_len].to_vec(),
            cas: header.explicit_cas.unwrap_or(bucket_cas),
        })
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
        match self.check(&tier, key, candidate, bytes) {
            Ok((deadline, header)) => {
                self.promote_checked(&tier, key, candidate, bytes, deadline, &header)
            }
            Err(p) => p,
        }
    }

    /// [`Handle::promote`] of bytes [`Handle::check`] passed.
    fn promote_checked(
        &mut self,
        tier: &Arc<FlashTier>,
        key: &[u8],
        candidate: &FlashCandidate,
        bytes: &[u8],
        deadline: u32,
        header: &Header,
    ) -> Promotion {
        let c = &tier.counters;
        let item_bytes = &bytes[record::RECORD_HEADER..];
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
            // Read on flash: it starts in RAM as read once.
            let ram = Slot::new(written.seg, engine.units(written.offset), 1, s.tag());
            chain.replace(slot, ram.with_fetched(s.fetched()));
            engine.segment(written.seg).add_live(written.len);
            tier.forget(candidate.seg);
            ChainAttempt::Done(true)
        });
        self.finish(Some(written));
        if moved == Some(true) {
            c.hits.fetch_add(1, Ordering::Relaxed);
            c.promotions.fetch_add(1, Ordering::Relaxed);
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
            ChainAttempt::Done(crate::demote::purge_flash(&engine, chain, h))
        })
        .unwrap_or(false)
    }
}
