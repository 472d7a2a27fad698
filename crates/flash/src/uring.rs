//! Reads on io_uring, submitted and completed on the caller's own thread: [`UringReads`],
//! one per server worker. A flash read then costs the worker one `io_uring_enter` (several
//! reads share one) and one wake-up when the device answers, where the reader threads cost
//! two thread hand-offs (worker → reader → worker) and the reader's own sleep.
//!
//! ```text
//!  worker ──read()──► SQE ──(first poll: io_uring_enter)──► device
//!  device ──CQE──► eventfd ──► the worker's reaper task ──► the read's waker
//! ```
//!
//! The buffers being read into belong to the ring's table of operations, not to the futures:
//! a future dropped while its read is in flight leaves its buffer there until the completion
//! comes (then drops it), and dropping [`UringReads`] waits for every read in flight. So the
//! kernel never writes into freed memory; that is the one promise the `unsafe` below relies on.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use io_uring::{opcode, squeue, types, IoUring};
use tokio::io::unix::AsyncFd;

use crate::aligned::{AlignedBuf, BLOCK};
use crate::io::check;
use crate::layout::Layout;
use crate::stats::Shared;

/// `user_data` of the timeouts that delay reads for tests (`FlashOptions::delay`): not a read.
const DELAY: u64 = u64::MAX;

/// One read in the table.
struct Op {
    buf: AlignedBuf,
    /// Where the wanted bytes start in `buf`, how many there are, and the file offset read.
    skip: usize,
    len: usize,
    at: u64,
    state: OpState,
}

enum OpState {
    /// In flight; the waker of the future waiting for it.
    Waiting(Option<Waker>),
    /// Answered; the future has not taken the result yet.
    Done(io::Result<Vec<u8>>),
    /// In flight, and its future is gone: free the slot when it completes.
    Abandoned,
}

struct Inner {
    ring: RefCell<IoUring>,
    event: AsyncFd<OwnedFd>,
    ops: RefCell<Vec<Option<Op>>>,
    free: RefCell<Vec<usize>>,
    /// Reads pushed to the submission queue and not yet handed to the kernel.
    unsubmitted: Cell<bool>,
    in_flight: Cell<usize>,
    /// Reads in flight at most (the completion queue holds twice the ring's entries).
    limit: usize,
    /// The test delay's timespec, which every delayed read's timeout points at: it lives as
    /// long as the ring, so an entry still queued never points at freed memory.
    delay: Option<Box<types::Timespec>>,
    layout: Arc<Layout>,
    shared: Arc<Shared>,
}

/// A worker's io_uring for flash reads. Not `Send`: made, used and dropped on one thread,
/// inside a tokio runtime with a `LocalSet` (its reaper is a local task).
pub struct UringReads {
    inner: Rc<Inner>,
}

impl std::fmt::Debug for UringReads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UringReads")
            .field("in_flight", &self.inner.in_flight.get())
            .finish_non_exhaustive()
    }
}

impl UringReads {
    /// A ring of `entries` submission entries over `layout`'s files, its eventfd registered
    /// with the current runtime, and its reaper spawned on the current `LocalSet`. An error
    /// when the kernel refuses io_uring (old, or disabled by `kernel.io_uring_disabled`): use
    /// the reader threads then.
    pub(crate) fn new(
        layout: Arc<Layout>,
        shared: Arc<Shared>,
        entries: u32,
        delay: Option<Duration>,
    ) -> io::Result<UringReads> {
        let ring = IoUring::new(entries)?;
        // SAFETY: eventfd takes only integer arguments; a non-negative result is a new
        // descriptor this function owns from here on (and gives to `OwnedFd` at once).
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by eventfd, is open, and nothing else owns it.
        let event = unsafe { OwnedFd::from_raw_fd(fd) };
        ring.submitter().register_eventfd(event.as_raw_fd())?;
        let limit = ring.params().cq_entries() as usize;
        // SAFETY: an `OwnedFd` always returns the descriptor it owns, which stays open (and
        // the same eventfd) until the `AsyncFd` that owns it is dropped.
        let event =
            unsafe { AsyncFd::register_with_interest(event, tokio::io::Interest::READABLE) }
                .map_err(io::Error::from)?;
        let inner = Rc::new(Inner {
            ring: RefCell::new(ring),
            event,
            ops: RefCell::new(Vec::new()),
            free: RefCell::new(Vec::new()),
            unsubmitted: Cell::new(false),
            in_flight: Cell::new(0),
            limit: limit / 2,
            delay: delay.map(|d| Box::new(types::Timespec::from(d))),
            layout,
            shared,
        });
        inner.shared.counters.uring_rings.fetch_add(1, Relaxed);
        tokio::task::spawn_local(reap_forever(inner.clone()));
        Ok(UringReads { inner })
    }

    /// Reads `len` bytes at `offset` of physical segment `phys`, as
    /// [`FlashFiles::read`](crate::FlashFiles::read) does (same checks, errors and counters),
    /// on this ring. The read is handed to the kernel when a read future is first polled, so
    /// reads made together share one system call.
    pub fn read(&self, phys: u32, offset: u32, len: u32) -> UringRead {
        let inner = &self.inner;
        let counters = &inner.shared.counters;
        let ready = |result| UringRead {
            inner: inner.clone(),
            id: None,
            ready: Some(result),
        };
        if let Err(e) = check(&inner.layout, phys, offset, len) {
            counters.read_errors.fetch_add(1, Relaxed);
            return ready(Err(e));
        }
        if inner.in_flight.get() >= inner.limit {
            counters.reads_rejected.fetch_add(1, Relaxed);
            return ready(Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "flash reads in flight at the ring's limit",
            )));
        }
        let Some((index, segment_at)) = inner.layout.locate(phys) else {
            counters.read_errors.fetch_add(1, Relaxed);
            return ready(Err(io::Error::other("segment out of range")));
        };
        let pos = segment_at + u64::from(offset);
        let start = pos / BLOCK as u64 * BLOCK as u64;
        let end = (pos + u64::from(len)).next_multiple_of(BLOCK as u64);
        let mut buf = AlignedBuf::new((end - start) as usize);
        let fd = inner.layout.files[index].file.as_raw_fd();
        let id = inner.slot();
        let read = opcode::Read::new(
            types::Fd(fd),
            buf.as_mut_slice().as_mut_ptr(),
            (end - start) as u32,
        )
        .offset(start)
        .build()
        .user_data(id as u64);
        inner.ops.borrow_mut()[id] = Some(Op {
            buf,
            skip: (pos - start) as usize,
            len: len as usize,
            at: start,
            state: OpState::Waiting(None),
        });
        if let Err(e) = inner.push(read) {
            inner.ops.borrow_mut()[id] = None;
            inner.free.borrow_mut().push(id);
            counters.read_errors.fetch_add(1, Relaxed);
            return ready(Err(e));
        }
        inner.in_flight.set(inner.in_flight.get() + 1);
        counters.read_queue_depth.fetch_add(1, Relaxed);
        UringRead {
            inner: inner.clone(),
            id: Some(id),
            ready: None,
        }
    }
}

impl Inner {
    /// A free slot in the table.
    fn slot(&self) -> usize {
        if let Some(id) = self.free.borrow_mut().pop() {
            return id;
        }
        let mut ops = self.ops.borrow_mut();
        ops.push(None);
        ops.len() - 1
    }

    /// Puts `read` (its buffer already in the table) on the submission queue, after a test
    /// delay if there is one, making room by submitting what is queued if it is full.
    fn push(&self, read: squeue::Entry) -> io::Result<()> {
        let mut ring = self.ring.borrow_mut();
        let mut entries = vec![read];
        if let Some(timespec) = &self.delay {
            // Hard-linked: the read starts when the timeout expires (as it does, with ETIME).
            let wait = opcode::Timeout::new(&**timespec)
                .build()
                .user_data(DELAY)
                .flags(squeue::Flags::IO_HARDLINK);
            entries.insert(0, wait);
        }
        let room = {
            let sq = ring.submission();
            sq.capacity() - sq.len()
        };
        if room < entries.len() {
            ring.submit()?;
        }
        for entry in &entries {
            // SAFETY: the read's buffer is owned by `self.ops` until its completion is reaped
            // (`complete`), and `Drop for Inner` waits for every read in flight (or leaks the
            // buffers); the file descriptor belongs to `self.layout`, which `self` holds; a
            // delay's timespec is `self.delay`, which lives as long as the ring.
            unsafe {
                ring.submission()
                    .push(entry)
                    .map_err(|_| io::Error::other("io_uring submission queue full"))?;
            }
        }
        self.unsubmitted.set(true);
        Ok(())
    }

    /// Hands queued reads to the kernel.
    fn submit(&self) {
        if self.unsubmitted.replace(false) {
            if let Err(e) = self.ring.borrow_mut().submit() {
                // EBUSY/EAGAIN: the kernel takes them at the next submit or completion.
                self.unsubmitted.set(true);
                tracing::debug!(error = %e, "io_uring submit deferred");
            }
        }
    }

    /// Takes every completion there is and answers its read.
    fn reap(&self) {
        let mut done = Vec::new();
        {
            let mut ring = self.ring.borrow_mut();
            for cqe in ring.completion() {
                if cqe.user_data() != DELAY {
                    done.push((cqe.user_data() as usize, cqe.result()));
                }
            }
        }
        for (id, result) in done {
            self.complete(id, result);
        }
    }

    fn complete(&self, id: usize, result: i32) {
        let counters = &self.shared.counters;
        self.in_flight.set(self.in_flight.get() - 1);
        counters.read_queue_depth.fetch_sub(1, Relaxed);
        let mut ops = self.ops.borrow_mut();
        let Some(op) = ops[id].as_mut() else {
            return;
        };
        let answer = if result < 0 {
            Err(io::Error::from_raw_os_error(-result))
        } else if (result as usize) < op.skip + op.len {
            Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("flash file ends at byte {}", op.at + result as u64),
            ))
        } else {
            Ok(op.buf.as_slice()[op.skip..op.skip + op.len].to_vec())
        };
        counters.read_done(&answer, op.len);
        match std::mem::replace(&mut op.state, OpState::Abandoned) {
            OpState::Waiting(waker) => {
                op.state = OpState::Done(answer);
                op.buf = AlignedBuf::new(0);
                drop(ops);
                if let Some(waker) = waker {
                    waker.wake();
                }
            }
            OpState::Abandoned | OpState::Done(_) => {
                ops[id] = None;
                self.free.borrow_mut().push(id);
            }
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The kernel may still write into buffers of reads in flight: wait for them all.
        self.submit();
        let mut failures = 0;
        while self.in_flight.get() > 0 {
            if self.ring.borrow_mut().submit_and_wait(1).is_err() {
                failures += 1;
                if failures > 1000 {
                    // The ring no longer answers: leave the buffers to the kernel for good.
                    tracing::warn!(
                        in_flight = self.in_flight.get(),
                        "flash io_uring did not finish its reads; their buffers are leaked"
                    );
                    std::mem::forget(std::mem::take(&mut *self.ops.borrow_mut()));
                    break;
                }
                std::thread::yield_now();
            }
            self.reap();
        }
        self.shared.counters.uring_rings.fetch_sub(1, Relaxed);
    }
}

/// Waits on the ring's eventfd and answers completions, for as long as the worker's
/// `LocalSet` runs; the ring is dropped with this task (waiting for reads in flight).
async fn reap_forever(inner: Rc<Inner>) {
    loop {
        inner.submit();
        inner.reap();
        match inner.event.readable().await {
            Ok(mut guard) => {
                let mut count = [0u8; 8];
                // Resets the counter; nothing to read (WouldBlock) is fine.
                let _ = read_counter(inner.event.get_ref().as_raw_fd(), &mut count);
                guard.clear_ready();
            }
            Err(e) => {
                tracing::warn!(error = %e, "flash io_uring eventfd failed; its reads stop");
                return;
            }
        }
    }
}

/// A read of `buf` from `fd` (the eventfd's counter).
fn read_counter(fd: i32, buf: &mut [u8; 8]) -> io::Result<usize> {
    // SAFETY: `buf` is a valid, writable 8-byte buffer for the length given, and `fd` is the
    // eventfd the caller holds open.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// A read in flight on a [`UringReads`]: resolves to the bytes, or to the error that stopped
/// them. Dropping it leaves the read to finish into the ring's own buffer.
pub struct UringRead {
    inner: Rc<Inner>,
    id: Option<usize>,
    ready: Option<io::Result<Vec<u8>>>,
}

impl Future for UringRead {
    type Output = io::Result<Vec<u8>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Some(result) = self.ready.take() {
            return Poll::Ready(result);
        }
        let Some(id) = self.id else {
            return Poll::Ready(Err(io::Error::other("flash read polled after it ended")));
        };
        let inner = self.inner.clone();
        inner.submit();
        inner.reap();
        let mut ops = inner.ops.borrow_mut();
        let op = ops[id].as_mut().expect("a read in flight has its slot");
        match &mut op.state {
            OpState::Waiting(waker) => {
                *waker = Some(cx.waker().clone());
                Poll::Pending
            }
            OpState::Done(_) => {
                let Some(Op {
                    state: OpState::Done(result),
                    ..
                }) = ops[id].take()
                else {
                    unreachable!("matched just above");
                };
                drop(ops);
                inner.free.borrow_mut().push(id);
                self.id = None;
                Poll::Ready(result)
            }
            OpState::Abandoned => unreachable!("only a dropped future abandons its read"),
        }
    }
}

impl Drop for UringRead {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            let mut ops = self.inner.ops.borrow_mut();
            if let Some(op) = ops[id].as_mut() {
                if matches!(op.state, OpState::Done(_)) {
                    ops[id] = None;
                    drop(ops);
                    self.inner.free.borrow_mut().push(id);
                } else {
                    op.state = OpState::Abandoned;
                }
            }
        }
    }
}
