//! Meta commands (`mg`, `ms`, `md`, `ma`, `me`) against the cache, as memcached 1.6.45
//! answers them: the item's fetched mark and last access (`h`, `l`, `u`), CAS and TTL flags,
//! and the lease extensions (`N`, `R`, `W`/`Z`/`X`) memfleet shares with memcached.

use super::pins::Pin;
use super::retrieval::{count_lookup, ttl_flag};
use super::storage::store_error;
use super::Executor;
use memfleet_protocol::response::{self, MetaDebug, MetaStatus, MetaWriter};
use memfleet_protocol::{KeyBytes, Meta, MetaArith, MetaFlags, MetaKey, MetaSet, StoreCommand};
use memfleet_storage::{
    DeltaError, Expiry, ItemRef, LeaseOutcome, LeaseRead, StoreMode, StoreStatus, MARK_DELETED,
    MARK_EMPTY, MARK_STALE,
};

impl Executor<'_> {
    pub(super) fn meta_get(&mut self, m: &Meta<'_>, out: &mut Vec<u8>) {
        self.counters.cmd_meta.incr();
        let key = m.key.bytes();
        let touch = m
            .flags
            .ttl()
            .map(|t| self.already_past(Expiry::from_memcached(t)));
        if let Some(expiry) = touch.filter(|e| *e != Expiry::Expired) {
            // Like gat: a new expiry first (a placeholder or stale value keeps its own).
            let _ = self.handle.touch(&key, expiry);
        }
        let ask = LeaseRead {
            vivify: m.flags.vivify_ttl().map(Expiry::from_memcached),
            recache_below: m
                .flags
                .recache_ttl()
                .map(|r| u32::try_from(r.max(0)).unwrap_or(u32::MAX)),
            // A deleted value kept as stale is offered only to a client that takes leases.
            see_deleted: m.flags.has(b'N'),
            read_only: self.read_only,
            no_update: m.flags.has(b'u'),
            vivify_cas: m.flags.new_cas(),
        };
        let c = self.counters;
        let now = self.handle.now();
        let mut held = None;
        let found = self.handle.lease_read(&key, ask, |found| {
            let LeaseOutcome::Found { item, won } = found else {
                return false;
            };
            held = Some(Pin::of(&item));
            if won {
                c.lease_grants.incr();
            }
            // memcached 1.6.45: `C<cas>` equal to the item's withholds the value (the client
            // already has it).
            let unchanged = m.flags.compare_cas() == Some(item.cas());
            let value = m.flags.has(b'v') && !unchanged;
            let status = if value {
                MetaStatus::Va(item.value().len())
            } else {
                MetaStatus::Hd
            };
            let mut w = MetaWriter::new(out, status);
            // memcached writes `t` as it goes: before `N` has given a new placeholder its
            // expiry, `t` says -1.
            let fresh = won && item.marks() & MARK_EMPTY != 0;
            item_flags(&mut w, m, &item, now, fresh);
            // memcached's order: Z (a token is out), X (stale), W (this client won).
            if item.lease().is_some() && !won {
                w.flag(b'Z');
            }
            if item.marks() & MARK_STALE != 0 {
                w.flag(b'X');
            }
            if won {
                w.flag(b'W');
            }
            if value {
                w.finish_with_value(item.value());
            } else {
                w.finish();
            }
            true
        });
        let found = match found {
            Ok(found) => found,
            Err(e) => {
                out.extend_from_slice(store_error(e));
                return;
            }
        };
        if let Some(pin) = held {
            // Until this reply is sent, memcached holds the item (see `pins.rs`).
            self.pins.hold(pin);
        }
        if touch == Some(Expiry::Expired) && found {
            self.handle.delete(&key);
        }
        count_lookup(c, touch.is_some(), found);
        if touch.is_some() && !found {
            // memcached's mg with T counts a miss as a get miss too.
            c.get_misses.incr();
        }
        if !found && !m.flags.quiet() {
            status_line(out, MetaStatus::En, &m.flags, &m.key);
        }
    }

    pub(super) fn meta_set(&mut self, m: &MetaSet<'_>, out: &mut Vec<u8>) {
        self.counters.cmd_meta.incr();
        let key = m.key.bytes();
        let flags = m.flags.client_flags().unwrap_or(0);
        let exptime = m.flags.ttl().unwrap_or(0);
        let compare = m.flags.compare_cas();
        let command = m.command();
        let result = if compare.is_some()
            && matches!(command, StoreCommand::Append | StoreCommand::Prepend)
            && !self.cas_matches(&key, compare)
        {
            // memcached checks the CAS of append/prepend too; the engine's concat has no
            // CAS mode, so check first (a race with another writer can slip between).
            match self.handle.peek_value(&key) {
                Some(_) => Ok(StoreStatus::Exists),
                None => Ok(StoreStatus::NotStored),
            }
        } else {
            let mode = match command {
                StoreCommand::Set => StoreMode::Set,
                StoreCommand::Add => StoreMode::Add,
                StoreCommand::Replace => StoreMode::Replace,
                StoreCommand::Append => StoreMode::Append,
                StoreCommand::Prepend => StoreMode::Prepend,
                StoreCommand::Cas => StoreMode::Cas(compare.unwrap_or(0)),
                StoreCommand::LeaseSet => unreachable!("ms has no lease-set mode"),
            };
            match (
                self.store(mode, &key, m.data, flags, exptime, m.flags.new_cas()),
                compare,
            ) {
                // `I` with a CAS older than the item's: memcached keeps the value as stale.
                (Ok(StoreStatus::Exists), Some(cas)) if m.flags.has(b'I') => self
                    .handle
                    .set_stale_if_older(&key, m.data, flags, cas)
                    .map(|done| match done {
                        Some(()) => StoreStatus::Stored,
                        None => StoreStatus::Exists,
                    }),
                (result, _) => result,
            }
        };
        let concat = matches!(command, StoreCommand::Append | StoreCommand::Prepend);
        let result = match (result, m.flags.vivify_ttl()) {
            // memcached 1.6.45: `N` on an append or prepend to a missing key stores the data
            // as a new item with that TTL.
            (Ok(StoreStatus::NotStored), Some(ttl)) if concat && compare.is_none() => {
                self.store(StoreMode::Add, &key, m.data, flags, ttl, m.flags.new_cas())
            }
            (result, _) => result,
        };
        let status = match result {
            Ok(StoreStatus::Stored) => MetaStatus::Hd,
            Ok(StoreStatus::NotStored) => MetaStatus::Ns,
            Ok(StoreStatus::Exists) => MetaStatus::Ex,
            Ok(StoreStatus::NotFound) => MetaStatus::Nf,
            Err(e) => {
                out.extend_from_slice(store_error(e));
                return;
            }
        };
        if status == MetaStatus::Hd && m.flags.quiet() {
            return;
        }
        // memcached answers `c` with the new CAS, or `c0` when nothing was stored.
        // memcached answers `c` with the new CAS, or `c0` when nothing was stored, and `s`
        // with the stored item's size (after an append, the whole value's).
        let stored = match status {
            MetaStatus::Hd => self.handle.peek(&key).map(|i| (i.cas(), i.value().len())),
            _ => None,
        };
        let cas = match status {
            MetaStatus::Hd => stored.map(|(cas, _)| cas),
            _ => Some(0),
        };
        let mut w = MetaWriter::new(out, status);
        let size = Some(stored.map_or(m.data.len(), |(_, len)| len) as u64);
        write_flags(&mut w, m.flags, &key, m.key.is_base64(), cas, None, size);
        w.finish();
    }

    pub(super) fn meta_delete(&mut self, m: &Meta<'_>, out: &mut Vec<u8>) {
        self.counters.cmd_meta.incr();
        let key = m.key.bytes();
        let compare = m.flags.compare_cas();
        let ttl = m.flags.ttl();
        let status = if compare.is_some() && !self.cas_matches(&key, compare) {
            if self.handle.peek_value(&key).is_some() {
                MetaStatus::Ex
            } else {
                self.counters.delete_misses.incr();
                MetaStatus::Nf
            }
        } else if m.flags.has(b'x') && !self.empty_value(&key) {
            MetaStatus::Nf
        } else if m.flags.has(b'I') {
            // Invalidate: keep the value as stale (memcached's md I, with T a new TTL).
            match self.handle.invalidate_as(
                &key,
                ttl.map(Expiry::from_memcached),
                m.flags.new_cas(),
            ) {
                Ok(true) => MetaStatus::Hd,
                Ok(false) => MetaStatus::Nf,
                Err(e) => {
                    out.extend_from_slice(store_error(e));
                    return;
                }
            }
        } else if let Some(secs) = ttl.filter(|t| *t > 0 && !m.flags.has(b'x')) {
            // T without I: memfleet's meta form of `delete <key> <seconds>` (a hold-off).
            match self.delete_holding_off(&key, u32::try_from(secs).unwrap_or(u32::MAX)) {
                Ok(true) => MetaStatus::Hd,
                Ok(false) => MetaStatus::Nf,
                Err(e) => {
                    out.extend_from_slice(store_error(e));
                    return;
                }
            }
        } else if m.flags.has(b'x') || self.delete(&key) {
            MetaStatus::Hd
        } else {
            MetaStatus::Nf
        };
        if status == MetaStatus::Hd && m.flags.quiet() {
            return;
        }
        status_line(out, status, &m.flags, &m.key);
    }

    pub(super) fn meta_arith(&mut self, m: &MetaArith<'_>, out: &mut Vec<u8>) {
        self.counters.cmd_meta.incr();
        let key = m.key.bytes();
        let delta = m.flags.delta().unwrap_or(1);
        let compare = m.flags.compare_cas();
        let mut status = MetaStatus::Hd;
        let mut result = if compare.is_some() && !self.cas_matches(&key, compare) {
            status = if self.handle.peek_value(&key).is_some() {
                MetaStatus::Ex
            } else {
                MetaStatus::Nf
            };
            Ok(None)
        } else {
            self.arith(m.mode, &key, delta)
        };
        if let (Ok(None), MetaStatus::Hd) = (result, status) {
            status = MetaStatus::Nf;
            if let Some(ttl) = m.flags.vivify_ttl() {
                // Autovivify: create the counter with the initial value (`J`, default 0).
                let initial = m.flags.initial().unwrap_or(0);
                let text = initial.to_string();
                match self.store(
                    StoreMode::Add,
                    &key,
                    text.as_bytes(),
                    0,
                    ttl,
                    m.flags.new_cas(),
                ) {
                    Ok(StoreStatus::Stored) => {
                        status = MetaStatus::Hd;
                        result = Ok(Some(initial));
                    }
                    Ok(_) => {
                        // Someone else created it meanwhile: apply the delta to theirs.
                        result = self.arith(m.mode, &key, delta);
                        status = match result {
                            Ok(Some(_)) => MetaStatus::Hd,
                            _ => MetaStatus::Ns,
                        };
                    }
                    Err(e) => result = Err(DeltaError::Store(e)),
                }
            }
        }
        let value = match result {
            Ok(v) => v,
            Err(DeltaError::NonNumeric) => {
                out.extend_from_slice(response::NON_NUMERIC);
                return;
            }
            Err(DeltaError::Store(e)) => {
                out.extend_from_slice(store_error(e));
                return;
            }
        };
        if status == MetaStatus::Hd {
            if let Some(ttl) = m.flags.ttl() {
                let _ = self.handle.touch(&key, Expiry::from_memcached(ttl));
            }
            if let Some(cas) = m.flags.new_cas() {
                self.set_cas(&key, cas);
            }
        }
        let item = if status == MetaStatus::Hd {
            self.handle.peek(&key)
        } else {
            None
        };
        let text = value.map(|v| v.to_string());
        let status = match (&text, status, m.flags.has(b'v')) {
            (Some(t), MetaStatus::Hd, true) => MetaStatus::Va(t.len()),
            _ => status,
        };
        if matches!(status, MetaStatus::Hd | MetaStatus::Va(_)) && m.flags.quiet() {
            // memcached's quiet `ma` says nothing on success, even with `v`.
            return;
        }
        let now = self.handle.now();
        let mut w = MetaWriter::new(out, status);
        let cas = item.as_ref().map(|i| i.cas());
        let ttl = item.as_ref().map(|i| ttl_flag(i, now));
        write_flags(&mut w, m.flags, &key, m.key.is_base64(), cas, ttl, None);
        match (status, &text) {
            (MetaStatus::Va(_), Some(t)) => w.finish_with_value(t.as_bytes()),
            _ => w.finish(),
        }
    }

    pub(super) fn meta_debug(&mut self, key: &MetaKey<'_>, out: &mut Vec<u8>) {
        let bytes = key.bytes();
        // A base64 key that does not decode names no item (memcached 1.6.45 says `EN`).
        let undecodable = key.is_base64() && matches!(bytes, KeyBytes::Borrowed(_));
        let Some(item) = self
            .handle
            .peek(&bytes)
            .filter(|i| i.marks() & MARK_DELETED == 0 && !undecodable)
        else {
            MetaWriter::new(out, MetaStatus::En).finish();
            return;
        };
        let now = self.handle.now();
        let exp = match item.ttl_remaining(now) {
            None => -1,
            Some(left) => i64::from(left),
        };
        let d = MetaDebug {
            exp,
            last_access: u64::from(item.idle_secs(now)),
            cas: item.cas(),
            fetched: item.fetched(),
            class: 1,
            size: item.stored_len() as u64,
        };
        response::meta_debug(out, &bytes, key.is_base64(), &d);
    }

    /// Gives the key's value the CAS unique `cas` (meta `ma ... E<cas>`) by rewriting it
    /// with the same value, flags and expiry. Not atomic with the arithmetic before it: a
    /// write in between takes the CAS instead.
    fn set_cas(&mut self, key: &[u8], cas: u64) {
        let now = self.handle.now();
        let Some((value, flags, expiry)) = self.handle.peek_value(key).map(|item| {
            let expiry = item
                .ttl_remaining(now)
                .map_or(Expiry::Never, |left| Expiry::After(left.max(1)));
            (item.value().to_vec(), item.flags(), expiry)
        }) else {
            return;
        };
        let _ =
            self.handle
                .store_with_cas(StoreMode::Replace, key, &value, flags, expiry, Some(cas));
    }

    /// `md <key> x` (memcached 1.6.45): the item stays, its value emptied (and its client
    /// flags zeroed), its expiry kept. False when there is no value.
    fn empty_value(&mut self, key: &[u8]) -> bool {
        let now = self.handle.now();
        let Some(expiry) = self.handle.peek_value(key).map(|item| {
            item.ttl_remaining(now)
                .map_or(Expiry::Never, |left| Expiry::After(left.max(1)))
        }) else {
            return false;
        };
        self.handle
            .store(StoreMode::Replace, key, b"", 0, expiry)
            .is_ok_and(|s| s == StoreStatus::Stored)
    }

    /// Whether the key's current CAS is `expected` (true when there is nothing to compare).
    /// A placeholder or stale value has a CAS too (its lease token once one is out).
    fn cas_matches(&self, key: &[u8], expected: Option<u64>) -> bool {
        match expected {
            None => true,
            Some(cas) => self.handle.peek(key).is_some_and(|i| i.cas() == cas),
        }
    }
}

/// The return flags of `ms` and `ma`, in request order: the opaque and key echoes, and the
/// item's CAS (`c`), remaining TTL (`t`) and size (`s`, `ms` only) when known.
fn write_flags(
    w: &mut MetaWriter<'_>,
    flags: MetaFlags<'_>,
    key: &[u8],
    base64: bool,
    cas: Option<u64>,
    ttl: Option<i64>,
    size: Option<u64>,
) {
    for f in flags.iter() {
        match (f.letter, cas, ttl) {
            (b's', _, _) => {
                if let Some(size) = size {
                    w.flag_u64(b's', size);
                }
            }
            (b'O', _, _) => {
                w.opaque(f.token);
            }
            (b'k', _, _) => {
                w.key(key, base64);
            }
            (b'c', Some(cas), _) => {
                w.flag_u64(b'c', cas);
            }
            (b't', _, Some(ttl)) => {
                w.flag_i64(b't', ttl);
            }
            _ => {}
        }
    }
}

/// Return flags of a meta-get hit, in request order.
fn item_flags(w: &mut MetaWriter<'_>, m: &Meta<'_>, item: &ItemRef<'_>, now: u32, fresh: bool) {
    let mut before_vivify = fresh;
    for f in m.flags.iter() {
        match f.letter {
            b'O' => {
                w.opaque(f.token);
            }
            b'k' => {
                w.key(item.key(), m.key.is_base64());
            }
            b'c' => {
                w.flag_u64(b'c', item.cas());
            }
            b'f' => {
                w.flag_u64(b'f', u64::from(item.flags()));
            }
            b's' => {
                w.flag_u64(b's', item.value().len() as u64);
            }
            b'N' => before_vivify = false,
            b't' if before_vivify => {
                w.flag_i64(b't', -1);
            }
            b't' => {
                w.flag_i64(b't', ttl_flag(item, now));
            }
            // Both as they were before this read (see `ItemRef::idle_secs` for the precision).
            b'h' => {
                w.flag_u64(b'h', u64::from(item.fetched()));
            }
            b'l' => {
                w.flag_u64(b'l', u64::from(item.idle_secs(now)));
            }
            _ => {}
        }
    }
}

/// A meta reply that is its status and the echoed flags (`O`, `k`, `b`) alone.
fn status_line(out: &mut Vec<u8>, status: MetaStatus, flags: &MetaFlags, key: &MetaKey<'_>) {
    let mut w = MetaWriter::new(out, status);
    w.echo(flags, key);
    w.finish();
}
