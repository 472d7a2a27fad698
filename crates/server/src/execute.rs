//! Runs parsed requests against the cache and writes memcached's replies: [`Executor::run`]
//! dispatches a text or meta request to its command family, `run_binary` (`binary.rs`) a
//! binary one.
//!
//! | family | file |
//! |---|---|
//! | `get`, `gets`, `gat`, `gats`, `lease-get`; the shared lookup | `retrieval.rs` |
//! | `set`, `add`, `replace`, `append`, `prepend`, `cas`, `lease-set`, `delete`, `touch` | `storage.rs` |
//! | `incr`, `decr` | `arithmetic.rs` (write-back rule: `pins.rs`) |
//! | `flush_all`, `version`, `verbosity`, `stats`, `shutdown`, `debugtime` | `admin.rs` |
//! | `mg`, `ms`, `md`, `ma`, `me` | `meta.rs` |
//! | the binary protocol | `binary.rs` |
//!
//! Everything here is synchronous and I/O-free: a request and a worker's handle go in, reply
//! bytes come out in the caller's buffer, every reply's bytes from `memfleet_protocol`. The
//! connection loop (`connection.rs`) decides when to read and write. The one wrinkle is a
//! multi-get whose values would grow the output buffer without bound: `Executor::get`
//! stops at a byte budget and says where to resume.

mod admin;
mod arithmetic;
mod binary;
mod meta;
mod pins;
mod retrieval;
mod storage;

pub use pins::ReadPins;

use crate::state::ServerState;
use crate::stats::WorkerCounters;
use memfleet_protocol::response::{self, Status};
use memfleet_protocol::Request;
use memfleet_storage::Handle;

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
    /// The request (a key dump reaching the flash) queued a device read in the connection's
    /// [`crate::flash::FlashReads`]: write the replies so far, await it, then run the same
    /// request again.
    FlashRead,
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
    /// Flash items the flash gate read for the request about to run, served from their
    /// bytes without moving them into RAM (`flash.rs`); `get`/`gets` take them.
    pub flash_items: Vec<memfleet_storage::FlashItem>,
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
            Request::Store(s) => self.store_command(s, out),
            Request::Delete {
                key,
                holdoff,
                noreply,
            } => self.delete_command(key, *holdoff, *noreply, out),
            Request::Arith {
                op,
                key,
                delta,
                noreply,
            } => self.arith_command(*op, key, *delta, *noreply, out),
            Request::Touch {
                key,
                exptime,
                noreply,
            } => self.touch_command(key, *exptime, *noreply, out),
            Request::FlushAll { delay, noreply } => self.flush_all_command(*delay, *noreply, out),
            Request::Version => self.version(out),
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
            Request::Other { command, args } => self.other(command, *args, out),
        }
        AfterRequest::Continue
    }
}

/// Appends `status` unless the request said `noreply`.
fn reply_status(out: &mut Vec<u8>, status: Status, noreply: bool) {
    if !noreply {
        response::status(out, status);
    }
}
