//! Retrieval: `get`, `gets`, `gat`, `gats` and mcrouter's `lease-get`, and the lookup
//! (with its touch and its counting) the meta and binary gets share.

use super::pins::Pin;
use super::{AfterRequest, Executor};
use crate::stats::WorkerCounters;
use memfleet_protocol::response::{self, HOT_MISS_TOKEN};
use memfleet_protocol::{Get, GetKind};
use memfleet_storage::{
    Expiry, ItemRef, LeaseOutcome, LeaseRead, MARK_DELETED, MARK_EMPTY, MARK_STALE,
};

impl Executor<'_> {
    /// A classic retrieval of `get`'s keys from the `start`-th on, pausing before a key once
    /// `out` has reached `budget`.
    pub(super) fn get(
        &mut self,
        get: &Get<'_>,
        out: &mut Vec<u8>,
        start: usize,
        budget: usize,
    ) -> AfterRequest {
        let touch = get
            .kind
            .touches()
            .then(|| Expiry::from_memcached(get.exptime));
        let with_cas = get.kind.returns_cas();
        let lease = get.kind == GetKind::LeaseGet;
        for (i, key) in get.keys.enumerate().skip(start) {
            if out.len() >= budget && i > start {
                return AfterRequest::Resume(i);
            }
            if lease {
                self.lease_get(key, out);
                continue;
            }
            if touch.is_none() {
                if let Some(i) = self.flash_items.iter().position(|f| f.key == key) {
                    // Read from flash by the gate and served from its bytes (`flash.rs`).
                    let item = self.flash_items.swap_remove(i);
                    let cas = with_cas.then_some(item.cas);
                    response::value(out, key, item.flags, &item.value, cas);
                    count_lookup(self.counters, false, true);
                    continue;
                }
            }
            let mut held = None;
            self.fetch(key, touch, |item, _| {
                let cas = with_cas.then(|| item.cas());
                response::value(out, key, item.flags(), item.value(), cas);
                held = Some(Pin::of(item));
            });
            if let Some(pin) = held {
                self.pins.hold(pin);
            }
        }
        response::end(out);
        AfterRequest::Continue
    }

    /// Looks `key` up, first giving it a new expiry when `touch` says so (gat, mg with `T`),
    /// and calls `f` with the item and the time if there is one. Counts as memcached does.
    /// An expiry already past returns the item one last time and removes it.
    pub(super) fn fetch(
        &mut self,
        key: &[u8],
        touch: Option<Expiry>,
        f: impl FnOnce(&ItemRef<'_>, u32),
    ) -> bool {
        let c = self.counters;
        let now = self.handle.now();
        let found = match touch.map(|e| self.already_past(e)) {
            None => self.handle.get(key).map(|item| f(&item, now)).is_some(),
            Some(Expiry::Expired) => {
                let found = self.handle.get(key).map(|item| f(&item, now)).is_some();
                if found {
                    self.handle.delete(key);
                }
                found
            }
            Some(expiry) => {
                // A touch that cannot rewrite the item (no memory) still serves what is there.
                if self.handle.touch(key, expiry) == Ok(false) {
                    false
                } else {
                    self.handle.get(key).map(|item| f(&item, now)).is_some()
                }
            }
        };
        count_lookup(c, touch.is_some(), found);
        found
    }

    /// An absolute expiry at or before now is as expired as a negative one: memcached's
    /// `gat` and `mg T` then return the item one last time too.
    pub(super) fn already_past(&self, expiry: Expiry) -> Expiry {
        match expiry {
            Expiry::AtUnix(t) if t <= self.server.cache.clock().unix_now() => Expiry::Expired,
            e => e,
        }
    }

    /// One key of mcrouter's `lease-get`: `VALUE` for a value; otherwise an `LVALUE` line
    /// with this caller's new token, or the hot-miss token 1 if another client holds the
    /// key's lease (or a hold-off is in force), and the stale value if there is one.
    pub(super) fn lease_get(&mut self, key: &[u8], out: &mut Vec<u8>) {
        let c = self.counters;
        c.cmd_get.incr();
        let ask = LeaseRead {
            vivify: Some(Expiry::After(self.server.settings.leases.interval)),
            recache_below: None,
            see_deleted: true,
            read_only: false,
            no_update: false,
            vivify_cas: None,
        };
        let done = self.handle.lease_read(key, ask, |found| match found {
            LeaseOutcome::Found { item, won } => {
                let marks = item.marks();
                if marks & (MARK_STALE | MARK_EMPTY | MARK_DELETED) == 0 {
                    c.get_hits.incr();
                    response::value(out, key, item.flags(), item.value(), None);
                    return;
                }
                c.get_misses.incr();
                if won {
                    c.lease_grants.incr();
                } else {
                    c.lease_hot_misses.incr();
                }
                if marks & MARK_STALE != 0 {
                    c.lease_stale_hits.incr();
                }
                let token = if won { item.cas() } else { HOT_MISS_TOKEN };
                response::lease_value(out, key, token, item.flags(), item.value());
            }
            LeaseOutcome::HeldOff | LeaseOutcome::Miss => {
                c.get_misses.incr();
                c.lease_hot_misses.incr();
                response::lease_value(out, key, HOT_MISS_TOKEN, 0, b"");
            }
        });
        if done.is_err() {
            // No memory for the placeholder: the client may read the database but cannot fill.
            c.get_misses.incr();
            c.lease_hot_misses.incr();
            response::lease_value(out, key, HOT_MISS_TOKEN, 0, b"");
        }
    }
}

/// Counts one key's lookup as memcached does: a touching one (gat, mg with T) as a touch
/// only, not as a get.
pub(super) fn count_lookup(c: &WorkerCounters, touched: bool, found: bool) {
    let (cmd, hit, miss) = if touched {
        (&c.cmd_touch, &c.touch_hits, &c.touch_misses)
    } else {
        (&c.cmd_get, &c.get_hits, &c.get_misses)
    };
    cmd.incr();
    if found {
        hit.incr();
    } else {
        miss.incr();
    }
}

/// The `t` flag: seconds left, or -1 for an item that never expires.
pub(super) fn ttl_flag(item: &ItemRef<'_>, now: u32) -> i64 {
    item.ttl_remaining(now).map_or(-1, i64::from)
}
