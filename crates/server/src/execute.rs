//! Runs parsed text and meta requests against the cache and writes memcached's replies.
//!
//! Everything here is synchronous and I/O-free: a request and a worker's handle go in, reply
//! bytes come out in the caller's buffer. The connection loop (`connection.rs`) decides when
//! to read and write. The one wrinkle is a multi-get whose values would grow the output
//! buffer without bound: [`Executor::get`] stops at a byte budget and says where to resume.

mod binary;
mod meta;
mod pins;

pub use pins::ReadPins;

use crate::admin_stats::StatsReport;
use crate::state::ServerState;
use crate::stats::WorkerCounters;
use crate::version::VERSION;
use memfleet_protocol::response::{self, Status, HOT_MISS_TOKEN};
use memfleet_protocol::{ArithOp, Get, GetKind, Request, StoreCommand, Tokens};
use memfleet_storage::{
    DeltaError, Expiry, Handle, ItemRef, LeaseOutcome, LeaseRead, StoreError, StoreMode,
    StoreStatus, MARK_DELETED, MARK_EMPTY, MARK_STALE,
};

const NON_NUMERIC: &[u8] = b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n";
const OUT_OF_MEMORY: &[u8] = b"SERVER_ERROR out of memory storing object\r\n";
const TOO_LARGE: &[u8] = b"SERVER_ERROR object too large for cache\r\n";

/// What the connection should do after a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterRequest {
    /// Go on with the next request.
    Continue,
    /// Close the connection once the replies so far are written.
    Close,
    /// The request is a multi-get that stopped after this many keys because the output
    /// reached its budget: flush, then run the same request again from that key.
    Resume(usize),
}

/// A worker's view of the cache while it runs one batch of requests.
pub struct Executor<'w> {
    /// The worker's engine handle.
    pub handle: &'w mut Handle,
    /// The worker's counters.
    pub counters: &'w WorkerCounters,
    /// Server-wide state (settings, other workers' counters for `stats`).
    pub server: &'w ServerState,
    /// Serve reads without side effects: no lease tokens, placeholders or touches (UDP).
    pub read_only: bool,
    /// The items this batch's replies hold (how `incr` and `decr` write back).
    pub pins: ReadPins,
}

impl Executor<'_> {
    /// Runs one request, appending its reply to `out`. For a multi-get, `start` is the key
    /// to begin with (0 the first time) and `budget` the output size at which to pause.
    pub fn run(
        &mut self,
        req: &Request<'_>,
        out: &mut Vec<u8>,
        start: usize,
        budget: usize,
    ) -> AfterRequest {
        self.pins.next_request();
        match req {
            Request::Get(get) => return self.get(get, out, start, budget),
            Request::Store(s) => {
                let mode = match s.command {
                    StoreCommand::Set => StoreMode::Set,
                    StoreCommand::Add => StoreMode::Add,
                    StoreCommand::Replace => StoreMode::Replace,
                    StoreCommand::Append => StoreMode::Append,
                    StoreCommand::Prepend => StoreMode::Prepend,
                    StoreCommand::Cas => StoreMode::Cas(s.cas),
                    StoreCommand::LeaseSet => StoreMode::Lease(s.cas),
                };
                let reply = self.store(mode, s.key, s.data, s.flags, s.exptime);
                if !s.noreply {
                    out.extend_from_slice(match reply {
                        Ok(status) => text_status(status).as_bytes(),
                        Err(e) => store_error(e),
                    });
                }
            }
            Request::Delete {
                key,
                holdoff,
                noreply,
            } => {
                let deleted = if *holdoff > 0 {
                    self.delete_holding_off(key, *holdoff)
                } else {
                    Ok(self.delete(key))
                };
                match deleted {
                    Ok(true) => reply_status(out, Status::Deleted, *noreply),
                    Ok(false) => reply_status(out, Status::NotFound, *noreply),
                    Err(e) if !*noreply => out.extend_from_slice(store_error(e)),
                    Err(_) => {}
                }
            }
            Request::Arith {
                op,
                key,
                delta,
                noreply,
            } => {
                let result = self.arith(*op, key, *delta);
                if !noreply {
                    match result {
                        Ok(Some(v)) => response::number(out, v),
                        Ok(None) => response::status(out, Status::NotFound),
                        Err(DeltaError::NonNumeric) => out.extend_from_slice(NON_NUMERIC),
                        Err(DeltaError::Store(e)) => out.extend_from_slice(store_error(e)),
                    }
                }
            }
            Request::Touch {
                key,
                exptime,
                noreply,
            } => {
                let reply = self.touch(key, *exptime);
                if !noreply {
                    match reply {
                        Ok(true) => response::status(out, Status::Touched),
                        Ok(false) => response::status(out, Status::NotFound),
                        Err(e) => out.extend_from_slice(store_error(e)),
                    }
                }
            }
            Request::FlushAll { noreply, .. } if self.server.settings.flush_disabled => {
                if !noreply {
                    out.extend_from_slice(b"CLIENT_ERROR flush_all not allowed\r\n");
                }
            }
            Request::FlushAll { delay, noreply } => {
                self.counters.cmd_flush.incr();
                self.flush_all(*delay);
                reply_status(out, Status::Ok, *noreply);
            }
            Request::Version => response::version(out, VERSION),
            Request::Verbosity { noreply, .. } => reply_status(out, Status::Ok, *noreply),
            Request::Stats { args } => self.stats(*args, out),
            Request::Quit => return AfterRequest::Close,
            Request::MetaGet(m) => self.meta_get(m, out),
            Request::MetaSet(m) => self.meta_set(m, out),
            Request::MetaDelete(m) => self.meta_delete(m, out),
            Request::MetaArithmetic(m) => self.meta_arith(m, out),
            Request::MetaNoop => {
                // memcached sends the replies so far at `mn`.
                self.pins.release();
                response::meta_noop(out);
            }
            Request::MetaDebug { key } => self.meta_debug(key, out),
            Request::Other { command, args } => match *command {
                b"shutdown" => out.extend_from_slice(b"SERVER_ERROR: shutdown not enabled\r\n"),
                b"debugtime" => out.extend_from_slice(match &self.server.debug_clock {
                    Some(clock) => clock.command({ *args }.next()),
                    None => b"ERROR\r\n",
                }),
                _ => response::status(out, Status::Error),
            },
        }
        AfterRequest::Continue
    }

    fn get(
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
            let mut held = None;
            self.fetch(key, touch, |item, _| {
                let cas = with_cas.then(|| item.cas());
                response::value(out, key, item.flags(), item.value(), cas);
                held = Some(item.cas());
            });
            if let Some(cas) = held {
                self.pins.hold(key, cas);
            }
        }
        response::end(out);
        AfterRequest::Continue
    }

    /// Looks `key` up, first giving it a new expiry when `touch` says so (gat, mg with `T`),
    /// and calls `f` with the item and the time if there is one. Counts as memcached does.
    /// An expiry already past returns the item one last time and removes it.
    fn fetch(
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
    fn already_past(&self, expiry: Expiry) -> Expiry {
        match expiry {
            Expiry::AtUnix(t) if t <= self.server.cache.clock().unix_now() => Expiry::Expired,
            e => e,
        }
    }

    /// One key of mcrouter's `lease-get`: `VALUE` for a value; otherwise an `LVALUE` line
    /// with this caller's new token, or the hot-miss token 1 if another client holds the
    /// key's lease (or a hold-off is in force), and the stale value if there is one.
    fn lease_get(&mut self, key: &[u8], out: &mut Vec<u8>) {
        let c = self.counters;
        c.cmd_get.incr();
        let ask = LeaseRead {
            vivify: Some(Expiry::After(self.server.settings.lease_interval)),
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

    /// `delete <key> <seconds>`: deletes and refuses `add` for the hold-off.
    fn delete_holding_off(&mut self, key: &[u8], secs: u32) -> Result<bool, StoreError> {
        self.counters.holdoff_deletes.incr();
        let deleted = self.handle.delete_with_holdoff(key, secs)?;
        if deleted {
            self.counters.delete_hits.incr();
        } else {
            self.counters.delete_misses.incr();
        }
        Ok(deleted)
    }

    fn store(
        &mut self,
        mode: StoreMode,
        key: &[u8],
        data: &[u8],
        flags: u32,
        exptime: i64,
    ) -> Result<StoreStatus, StoreError> {
        self.store_as(mode, key, data, flags, exptime, None)
    }

    /// [`Executor::store`], the new item taking `new_cas` as its CAS unique (meta `E`).
    fn store_as(
        &mut self,
        mode: StoreMode,
        key: &[u8],
        data: &[u8],
        flags: u32,
        exptime: i64,
        new_cas: Option<u64>,
    ) -> Result<StoreStatus, StoreError> {
        let c = self.counters;
        c.cmd_set.incr();
        if matches!(mode, StoreMode::Append | StoreMode::Prepend) {
            // memcached refuses a concatenation whose result would exceed the item size
            // limit with NOT_STORED (its allocation fails), not with an error.
            let too_large = self.handle.get(key).is_some_and(|old| {
                !self
                    .server
                    .parser
                    .fits(key.len(), old.flags(), old.value().len() + data.len())
            });
            if too_large {
                return Ok(StoreStatus::NotStored);
            }
        }
        let result = self.handle.store_with_cas(
            mode,
            key,
            data,
            flags,
            Expiry::from_memcached(exptime),
            new_cas,
        );
        let result = match (result, mode) {
            (Err(StoreError::TooLarge), StoreMode::Append | StoreMode::Prepend) => {
                Ok(StoreStatus::NotStored)
            }
            (result, _) => result,
        };
        match (&result, mode) {
            (Ok(StoreStatus::Stored), StoreMode::Cas(_)) => c.cas_hits.incr(),
            (Ok(StoreStatus::Exists), _) => c.cas_badval.incr(),
            (Ok(StoreStatus::NotFound), _) => c.cas_misses.incr(),
            (Err(StoreError::TooLarge), _) => c.store_too_large.incr(),
            (Err(StoreError::OutOfMemory), _) => c.store_no_memory.incr(),
            _ => {}
        }
        if let (Ok(StoreStatus::NotStored), StoreMode::Lease(_)) = (&result, mode) {
            c.lease_sets_refused.incr();
        }
        result
    }

    fn delete(&mut self, key: &[u8]) -> bool {
        let deleted = self.handle.delete(key);
        if deleted {
            self.counters.delete_hits.incr();
        } else {
            self.counters.delete_misses.incr();
        }
        deleted
    }

    fn arith(&mut self, op: ArithOp, key: &[u8], delta: u64) -> Result<Option<u64>, DeltaError> {
        let result = if self.pins.holds(self.handle, key) {
            // A reply of this batch holds the item: memcached writes a new one (`pins.rs`).
            self.handle.delta_new_item(key, delta, op == ArithOp::Incr)
        } else {
            match op {
                ArithOp::Incr => self.handle.incr(key, delta),
                ArithOp::Decr => self.handle.decr(key, delta),
            }
        };
        let c = self.counters;
        let hit = matches!(result, Ok(Some(_)));
        match (op, hit) {
            (ArithOp::Incr, true) => c.incr_hits.incr(),
            (ArithOp::Incr, false) => c.incr_misses.incr(),
            (ArithOp::Decr, true) => c.decr_hits.incr(),
            (ArithOp::Decr, false) => c.decr_misses.incr(),
        }
        result
    }

    fn touch(&mut self, key: &[u8], exptime: i64) -> Result<bool, StoreError> {
        self.counters.cmd_touch.incr();
        let found = self.handle.touch(key, Expiry::from_memcached(exptime))?;
        if found {
            self.counters.touch_hits.incr();
        } else {
            self.counters.touch_misses.incr();
        }
        Ok(found)
    }

    /// memcached's `flush_all [delay]`: a delay up to 30 days is relative, a larger one is a
    /// Unix time, zero or negative is now.
    fn flush_all(&mut self, delay: i64) {
        let secs = match Expiry::from_memcached(delay) {
            Expiry::After(s) => s,
            Expiry::AtUnix(t) => {
                let now = self.server.cache.clock().unix_now();
                u32::try_from(t.saturating_sub(now)).unwrap_or(u32::MAX)
            }
            Expiry::Never | Expiry::Expired => 0,
        };
        self.handle.flush_all(secs);
    }

    fn stats(&mut self, args: Tokens<'_>, out: &mut Vec<u8>) {
        let mut words = args;
        let report = StatsReport::new(self.server);
        match words.next() {
            Some(b"reset") => {
                report.reset();
                response::status(out, Status::Reset);
            }
            Some(b"detail") => match words.next() {
                Some(b"dump") => response::end(out),
                _ => response::status(out, Status::Ok),
            },
            group => match report.group(group.unwrap_or_default()) {
                Some(pairs) => StatsReport::write_text(&pairs, out),
                None => response::status(out, Status::Error),
            },
        }
    }
}

/// Counts one key's lookup as memcached does: a touching one (gat, mg with T) as a touch
/// only, not as a get.
fn count_lookup(c: &WorkerCounters, touched: bool, found: bool) {
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
fn ttl_flag(item: &ItemRef<'_>, now: u32) -> i64 {
    item.ttl_remaining(now).map_or(-1, i64::from)
}

fn text_status(status: StoreStatus) -> Status {
    match status {
        StoreStatus::Stored => Status::Stored,
        StoreStatus::NotStored => Status::NotStored,
        StoreStatus::Exists => Status::Exists,
        StoreStatus::NotFound => Status::NotFound,
    }
}

fn store_error(e: StoreError) -> &'static [u8] {
    match e {
        StoreError::TooLarge => TOO_LARGE,
        StoreError::OutOfMemory => OUT_OF_MEMORY,
        StoreError::BadKey => b"CLIENT_ERROR bad command line format\r\n",
    }
}

fn reply_status(out: &mut Vec<u8>, status: Status, noreply: bool) {
    if !noreply {
        response::status(out, status);
    }
}
