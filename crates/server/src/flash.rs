//! The flash tier in the server (`--flash`, memcached's `-o ext_path`): `memfleet-flash`'s
//! files as the engine's [`FlashSink`], and the gate every keyed request passes before it
//! runs.
//!
//! **The gate.** Before a request runs, each of its keys that has a flash copy
//! ([`memfleet_storage::Handle::flash_candidate`]) is brought back into RAM
//! ([`memfleet_storage::Handle::promote`]), so every command (get, gat, cas, incr, append,
//! meta, leases) then runs on it as on any RAM item. A copy still in a write buffer comes
//! back at once; one on the device needs a read: the request stops before it runs
//! (`Flow::FlashRead`), the connection writes the replies so far, awaits the reads on the
//! reader threads (its worker serves other connections meanwhile), and runs the request
//! again, which now finds the bytes here. Replies stay in request order. A read that fails
//! is a miss (`get_aborted_extstore`), bytes that fail their check a miss too
//! (`badcrc_from_extstore`), never wrong bytes. `set` and `delete` pass without reading:
//! they replace or drop the copy without looking at it.

use memfleet_flash::{FlashFiles, UringReads};
use memfleet_protocol::{Request, StoreCommand};
use memfleet_storage::{
    FlashCandidate, FlashFetch, FlashItem, FlashRead, FlashSink, FlashWriteDone, Handle, Promotion,
};
use std::sync::{Arc, Mutex};

/// The flash files as the engine's sink.
pub struct FlashDevice(pub Arc<FlashFiles>);

impl std::fmt::Debug for FlashDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlashDevice")
            .field("segments", &self.0.segments())
            .finish_non_exhaustive()
    }
}

impl FlashSink for FlashDevice {
    fn places(&self) -> u32 {
        self.0.segments()
    }

    fn write(
        &self,
        place: u32,
        bytes: Arc<[u8]>,
        done: FlashWriteDone,
    ) -> Result<(), FlashWriteDone> {
        // The engine's callback, taken back if the writer refuses the job.
        let cell = Arc::new(Mutex::new(Some(done)));
        let inner = cell.clone();
        let callback = Box::new(move |result: std::io::Result<()>| {
            let done = inner.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(done) = done {
                if let Err(e) = &result {
                    tracing::warn!(place, error = %e, "flash write failed: its items are lost");
                }
                done.finish(result.is_ok());
            }
        });
        match self.0.try_write(place, bytes, callback) {
            Ok(()) => Ok(()),
            Err(_refused) => {
                let done = cell.lock().unwrap_or_else(|e| e.into_inner()).take();
                Err(done.expect("a refused write's callback was not called"))
            }
        }
    }

    fn sync(&self) -> std::io::Result<()> {
        self.0.sync()
    }
}

/// A device read a request waits for.
#[derive(Clone, Copy, Debug)]
pub struct PendingRead {
    location: u64,
    candidate: FlashCandidate,
    place: u32,
    offset: u32,
    len: u32,
    /// Started ahead for a pipelined request (`prefetch_key`): if it fails, the request
    /// reads again when it runs rather than miss.
    prefetched: bool,
}

impl PendingRead {
    /// The device read `fetch` asks for, if it is one.
    fn device(candidate: FlashCandidate, fetch: &FlashFetch, prefetched: bool) -> Option<Self> {
        match *fetch {
            FlashFetch::Device { place, offset, len } => Some(PendingRead {
                location: candidate.location(),
                candidate,
                place,
                offset,
                len,
                prefetched,
            }),
            _ => None,
        }
    }
}

/// A connection's flash reads: those to start, and those done (bytes, or `None`: failed).
#[derive(Debug, Default)]
pub struct FlashReads {
    pending: Vec<PendingRead>,
    done: Vec<(u64, Option<Vec<u8>>)>,
    /// A key dump's read of a whole flash segment (`dump.rs`): to start, then its result.
    segment: Option<SegmentRead>,
}

/// A key dump's read of one flash segment.
#[derive(Debug)]
enum SegmentRead {
    Pending { place: u32, len: u32 },
    Done(Option<Vec<u8>>),
}

impl FlashReads {
    /// After a request's keys went through [`gate_key`]: whether it must wait for device
    /// reads (then run it again once [`FlashReads::run`] is done).
    pub fn finish(&mut self) -> bool {
        !self.pending.is_empty()
    }

    /// Drops results nobody claimed: their slots changed before their request ran. The
    /// connection calls it once a batch ends other than for flash reads.
    pub fn forget_unclaimed(&mut self) {
        self.done.clear();
    }

    /// Starts every pending read on the reader threads and waits for them all (the worker
    /// serves other connections meanwhile); failures are counted on `handle`.
    pub async fn run(
        &mut self,
        files: &FlashFiles,
        ring: Option<&UringReads>,
        handle: &std::cell::RefCell<Handle>,
    ) {
        if let Some(SegmentRead::Pending { place, len }) = self.segment {
            let bytes = match read(files, ring, place, 0, len).await {
                Ok(bytes) => Some(bytes),
                Err(e) => {
                    tracing::warn!(place, error = %e, "flash read for a key dump failed: its items are not listed");
                    None
                }
            };
            self.segment = Some(SegmentRead::Done(bytes));
        }
        if self.done.len() > 4 * PREFETCH_LIMIT {
            // Unclaimed results of earlier rounds; a request that wants one reads it again.
            self.done.clear();
        }
        // All started before any is awaited: on a ring they go to the kernel together.
        let started: Vec<_> = self
            .pending
            .drain(..)
            .map(|p| (p, read(files, ring, p.place, p.offset, p.len)))
            .collect();
        for (p, read) in started {
            let bytes = match read.await {
                Ok(bytes) => Some(bytes),
                // E.g. the ring full of other connections' reads: read when it runs.
                Err(_) if p.prefetched => continue,
                Err(e) => {
                    tracing::debug!(error = %e, "flash read failed: a miss");
                    handle.borrow().flash_read_failed(&p.candidate);
                    None
                }
            };
            self.done.push((p.location, bytes));
        }
    }
}

impl FlashReads {
    /// Queues a key dump's read of flash segment `place` (`len` bytes from its start), for
    /// the connection to run before it resumes the dump.
    pub fn read_segment(&mut self, place: u32, len: u32) {
        self.segment = Some(SegmentRead::Pending { place, len });
    }

    /// The result of the segment read [`FlashReads::read_segment`] queued, once it ran:
    /// `Some(None)` when it failed.
    pub fn take_segment(&mut self) -> Option<Option<Vec<u8>>> {
        match self.segment.take() {
            Some(SegmentRead::Done(bytes)) => Some(bytes),
            other => {
                self.segment = other;
                None
            }
        }
    }
}

/// Reads queued ahead for pipelined requests at most (`prefetch_key`), besides those the
/// waiting request needs: a connection holds at most this many blocks of results.
const PREFETCH_LIMIT: usize = 64;

/// Queues the device read of `key`'s flash copy, if it has one on the device and it is not
/// queued or read already, for a request pipelined behind one that waits for flash: when
/// that request runs, [`gate_key`] finds the bytes. Nothing is checked or counted here.
pub fn prefetch_key(handle: &Handle, key: &[u8], reads: &mut FlashReads) {
    if reads.pending.len() >= PREFETCH_LIMIT {
        return;
    }
    let Some(candidate) = handle.flash_candidate(key) else {
        return;
    };
    let location = candidate.location();
    if reads.pending.iter().any(|p| p.location == location)
        || reads.done.iter().any(|(l, _)| *l == location)
    {
        return;
    }
    reads.pending.extend(PendingRead::device(
        candidate,
        &handle.flash_fetch(&candidate),
        true,
    ));
}

/// A read on the worker's ring if it has one, else on the reader threads.
fn read(
    files: &FlashFiles,
    ring: Option<&UringReads>,
    place: u32,
    offset: u32,
    len: u32,
) -> ReadOn {
    match ring {
        Some(ring) => ReadOn::Ring(ring.read(place, offset, len)),
        None => ReadOn::Threads(files.read(place, offset, len)),
    }
}

/// A read on either path.
enum ReadOn {
    Ring(memfleet_flash::UringRead),
    Threads(memfleet_flash::FlashRead),
}

impl std::future::Future for ReadOn {
    type Output = std::io::Result<Vec<u8>>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        match self.get_mut() {
            ReadOn::Ring(r) => std::pin::Pin::new(r).poll(cx),
            ReadOn::Threads(r) => std::pin::Pin::new(r).poll(cx),
        }
    }
}

/// Whether a request may skip the gate: it replaces or drops a key's value without
/// looking at it, which needs no flash read.
pub fn blind(request: &Request<'_>) -> bool {
    match request {
        Request::Store(s) => s.command == StoreCommand::Set,
        Request::Delete { .. } | Request::MetaDelete(_) => true,
        Request::MetaSet(m) => m.mode == StoreCommand::Set,
        // `me` reports what RAM holds of the key; its flash copy is not read for it.
        Request::MetaDebug { .. } => true,
        _ => false,
    }
}

/// Whether a binary request may skip the gate (`Set`, `Delete` and their quiet forms).
pub fn blind_binary(command: &memfleet_protocol::binary::BinCommand<'_>) -> bool {
    use memfleet_protocol::binary::{BinCommand, SetOp};
    matches!(
        command,
        BinCommand::Store { op: SetOp::Set, .. } | BinCommand::Delete { .. }
    )
}

/// Brings `key`'s flash copy (for a request that is not [`blind`]) into RAM, or, with
/// `served` (a plain `get`/`gets`), reads it for the request to serve from its bytes (a
/// first read; a second moves the item into RAM, `Handle::read_flash`). A copy on the device
/// is queued in `reads`: after the request's keys, [`FlashReads::finish`] says whether it
/// must wait for them and run again.
pub fn gate_key(
    handle: &mut Handle,
    key: &[u8],
    reads: &mut FlashReads,
    served: Option<&mut Vec<FlashItem>>,
) {
    let Some(candidate) = handle.flash_candidate(key) else {
        return;
    };
    let location = candidate.location();
    let bytes = if let Some(i) = reads.done.iter().position(|(l, _)| *l == location) {
        match reads.done.swap_remove(i).1 {
            Some(bytes) => bytes,
            None => return, // the read failed: a miss this time
        }
    } else {
        match handle.flash_fetch(&candidate) {
            FlashFetch::Local(bytes) => bytes,
            fetch @ FlashFetch::Device { .. } => {
                reads
                    .pending
                    .extend(PendingRead::device(candidate, &fetch, false));
                return;
            }
            FlashFetch::Gone => return,
        }
    };
    let more = match served {
        Some(served) => match handle.read_flash(key, &candidate, &bytes) {
            FlashRead::Serve(item) => {
                served.push(item);
                None
            }
            FlashRead::Other(Promotion::NeedMore(len)) => Some(len),
            FlashRead::Promoted | FlashRead::Other(_) => None,
        },
        None => match handle.promote(key, &candidate, &bytes) {
            Promotion::NeedMore(len) => Some(len),
            _ => None,
        },
    };
    if let Some(len) = more {
        // A record longer than the block read first: read it whole.
        let whole = PendingRead::device(candidate, &handle.flash_fetch(&candidate), false);
        reads
            .pending
            .extend(whole.map(|read| PendingRead { len, ..read }));
    }
}
