//! [`FlashFiles`]: the open files, their writer threads (one per file) and reader threads,
//! and the bounded queues between the callers and them. No call waits on a queue.

use std::fmt;
use std::io;
use std::sync::atomic::Ordering::{Relaxed, Release};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::aligned::{AlignedBuf, BLOCK};
use crate::error::FlashError;
use crate::io::{check, read_range};
use crate::layout::Layout;
use crate::reader::{self, FlashRead, ReadJob};
use crate::spec::FlashSpec;
use crate::stats::{IoStats, Shared};
use crate::uring::UringReads;
use crate::writer::{self, WriteDone, WriteJob};

/// How the flash files are cut and served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlashOptions {
    /// Bytes per segment: a positive multiple of 4096, below 4 GiB. Default 1 MiB.
    pub segment_size: usize,
    /// Reader threads, at least 1. Default 4.
    pub read_threads: usize,
    /// Segments queued per file's writer, at least 1, besides the one being written; each
    /// holds its `Arc<[u8]>` until written. Default 2.
    pub write_queue: usize,
    /// Reads queued for the readers, at least 1, besides those being read. Default 1024.
    pub read_queue: usize,
    /// Slept before every pread and pwrite: a slow device, for tests. Default none.
    pub delay: Option<Duration>,
}

impl Default for FlashOptions {
    fn default() -> FlashOptions {
        FlashOptions {
            segment_size: 1 << 20,
            read_threads: 4,
            write_queue: 2,
            read_queue: 1024,
            delay: None,
        }
    }
}

/// The flash files and their I/O threads; `Send + Sync`, shared as an `Arc`. Dropping it
/// finishes the queued writes (their callbacks called), answers the queued reads with an
/// error and joins the threads.
pub struct FlashFiles {
    layout: Arc<Layout>,
    shared: Arc<Shared>,
    /// One queue per file, in file order; emptied on drop.
    writers: Vec<SyncSender<WriteJob>>,
    /// The readers' queue; `None` on drop.
    reads: Option<SyncSender<ReadJob>>,
    threads: Vec<JoinHandle<()>>,
}

impl FlashFiles {
    /// Opens (creating) each file, with O_DIRECT (if the filesystem refuses O_DIRECT, e.g.
    /// tmpfs gives EINVAL, opens it without and says so in [`direct`](Self::direct)), takes an
    /// exclusive non-blocking flock (a second server on the same file gets
    /// [`FlashError::Locked`]), sizes it to whole segments (floor(size / segment_size); fallocate,
    /// or set_len where fallocate is unsupported; a file with fewer than 1 segment is
    /// [`FlashError::TooSmall`]; what the file held below that size is kept), and starts one
    /// writer thread per file and `read_threads` reader threads. Physical segment numbers run
    /// across the files in order: file 0 holds 0..n0, file 1 n0..n0+n1, ...
    pub fn open(specs: &[FlashSpec], opts: FlashOptions) -> Result<FlashFiles, FlashError> {
        let segment_size = opts.segment_size;
        if segment_size == 0
            || !segment_size.is_multiple_of(BLOCK)
            || segment_size > u32::MAX as usize
        {
            return Err(FlashError::SegmentSize(segment_size));
        }
        for (name, value) in [
            ("read_threads", opts.read_threads),
            ("write_queue", opts.write_queue),
            ("read_queue", opts.read_queue),
        ] {
            if value == 0 {
                return Err(FlashError::Options(format!("{name} must be at least 1")));
            }
        }
        let layout = Arc::new(Layout::open(specs, segment_size)?);
        let (read_tx, read_rx) = sync_channel(opts.read_queue);
        // Built before the threads start, so a failed spawn stops those already started.
        let mut files = FlashFiles {
            layout,
            shared: Arc::new(Shared {
                delay: opts.delay,
                ..Shared::default()
            }),
            writers: Vec::new(),
            reads: Some(read_tx),
            threads: Vec::new(),
        };
        for index in 0..files.layout.files.len() {
            let (tx, rx) = sync_channel(opts.write_queue);
            let (layout, shared) = (files.layout.clone(), files.shared.clone());
            let thread = thread::Builder::new()
                .name(format!("memfleet-flash-w{index}"))
                .spawn(move || writer::run(layout, index, rx, shared))
                .map_err(FlashError::Spawn)?;
            files.writers.push(tx);
            files.threads.push(thread);
        }
        let read_rx = Arc::new(Mutex::new(read_rx));
        for index in 0..opts.read_threads {
            let (layout, shared, jobs) =
                (files.layout.clone(), files.shared.clone(), read_rx.clone());
            let thread = thread::Builder::new()
                .name(format!("memfleet-flash-r{index}"))
                .spawn(move || reader::run(layout, jobs, shared))
                .map_err(FlashError::Spawn)?;
            files.threads.push(thread);
        }
        Ok(files)
    }

    /// Physical segments in all the files.
    pub fn segments(&self) -> u32 {
        self.layout.segments
    }

    /// Bytes per segment.
    pub fn segment_size(&self) -> usize {
        self.layout.segment_size
    }

    /// Whether every file was opened with O_DIRECT (bypassing the page cache).
    pub fn direct(&self) -> bool {
        self.layout.files.iter().all(|f| f.direct)
    }

    /// Queues a write of one whole segment (`bytes.len() == segment_size`) at physical
    /// segment `phys`, without blocking: `Err(done)` gives the callback back, not called,
    /// when that file's write queue is full (or the files are closing). The writer thread
    /// copies the bytes into its own 4096-aligned buffer, pwrites them (retrying short writes
    /// and EINTR) and calls `done` with the result from the writer thread. A `phys` out of
    /// range or a wrong length is the caller's bug: `done` gets `InvalidInput`, from a writer
    /// thread like any other result.
    pub fn try_write(&self, phys: u32, bytes: Arc<[u8]>, done: WriteDone) -> Result<(), WriteDone> {
        let segment_size = self.layout.segment_size;
        let (index, at, invalid) = match self.layout.locate(phys) {
            None => (
                0,
                0,
                Some(format!(
                    "flash segment {phys} out of range (0..{})",
                    self.layout.segments
                )),
            ),
            Some((index, at)) if bytes.len() != segment_size => (
                index,
                at,
                Some(format!(
                    "flash write of {} bytes, not one {segment_size}-byte segment",
                    bytes.len()
                )),
            ),
            Some((index, at)) => (index, at, None),
        };
        let Some(queue) = self.writers.get(index) else {
            return Err(done);
        };
        let counters = &self.shared.counters;
        counters.write_queue_depth.fetch_add(1, Relaxed);
        let job = WriteJob {
            at,
            bytes,
            done,
            invalid,
        };
        match queue.try_send(job) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(job)) => {
                counters.write_queue_depth.fetch_sub(1, Relaxed);
                counters.writes_rejected.fetch_add(1, Relaxed);
                Err(job.done)
            }
            Err(TrySendError::Disconnected(job)) => {
                counters.write_queue_depth.fetch_sub(1, Relaxed);
                Err(job.done)
            }
        }
    }

    /// Reads `len` bytes at byte `offset` of physical segment `phys` (`offset + len <=
    /// segment_size`; unaligned is fine): a reader thread preads the covering 4096-aligned
    /// blocks and copies the range out. Never blocks: a full read queue resolves at once to
    /// `WouldBlock`, a bad range to `InvalidInput`; a file shorter than the range (truncated
    /// underneath) to `UnexpectedEof`, never zero-filled bytes.
    pub fn read(&self, phys: u32, offset: u32, len: u32) -> FlashRead {
        let counters = &self.shared.counters;
        if let Err(e) = check(&self.layout, phys, offset, len) {
            counters.read_errors.fetch_add(1, Relaxed);
            return FlashRead::ready(Err(e));
        }
        let Some(queue) = &self.reads else {
            counters.read_errors.fetch_add(1, Relaxed);
            return FlashRead::ready(Err(io::Error::other("flash files closed")));
        };
        let (reply, answer) = oneshot::channel();
        counters.read_queue_depth.fetch_add(1, Relaxed);
        let job = ReadJob {
            phys,
            offset,
            len,
            reply,
        };
        match queue.try_send(job) {
            Ok(()) => FlashRead::queued(answer),
            Err(TrySendError::Full(_)) => {
                counters.read_queue_depth.fetch_sub(1, Relaxed);
                counters.reads_rejected.fetch_add(1, Relaxed);
                FlashRead::ready(Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    "flash read queue full",
                )))
            }
            Err(TrySendError::Disconnected(_)) => {
                counters.read_queue_depth.fetch_sub(1, Relaxed);
                counters.read_errors.fetch_add(1, Relaxed);
                FlashRead::ready(Err(io::Error::other("flash readers stopped")))
            }
        }
    }

    /// An io_uring for this thread's reads ([`UringReads`]: `entries` submission entries),
    /// for a worker to read without the reader threads. Call it inside a tokio runtime with a
    /// `LocalSet`. An error when the kernel refuses io_uring: read with [`read`](Self::read).
    pub fn uring_reads(&self, entries: u32) -> io::Result<UringReads> {
        UringReads::new(
            self.layout.clone(),
            self.shared.clone(),
            entries,
            self.shared.delay,
        )
    }

    /// [`read`](Self::read) for callers that are not async (a warm restart checking
    /// segments): the same checks and errors, done on the calling thread, outside the queue.
    pub fn read_blocking(&self, phys: u32, offset: u32, len: u32) -> io::Result<Vec<u8>> {
        let result = check(&self.layout, phys, offset, len).and_then(|()| {
            self.shared.delay();
            read_range(&self.layout, phys, offset, len, &mut AlignedBuf::new(0))
        });
        self.shared.counters.read_done(&result, len as usize);
        result
    }

    /// fdatasync every file: the segments written so far survive a crash.
    pub fn sync(&self) -> io::Result<()> {
        for file in &self.layout.files {
            file.file.sync_data()?;
        }
        Ok(())
    }

    /// The I/O counters now.
    pub fn stats(&self) -> IoStats {
        self.shared.counters.snapshot()
    }
}

impl fmt::Debug for FlashFiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FlashFiles")
            .field(
                "paths",
                &self
                    .layout
                    .files
                    .iter()
                    .map(|f| &f.spec.path)
                    .collect::<Vec<_>>(),
            )
            .field("segments", &self.layout.segments)
            .field("segment_size", &self.layout.segment_size)
            .field("direct", &self.direct())
            .finish()
    }
}

impl Drop for FlashFiles {
    fn drop(&mut self) {
        self.shared.closing.store(true, Release);
        // Closing the queues ends each thread once it has drained its own.
        self.reads = None;
        self.writers.clear();
        for thread in self.threads.drain(..) {
            if thread.thread().id() == thread::current().id() {
                // Dropped by a write callback holding the last reference: this writer ends
                // once the callback returns and its queue is drained.
                continue;
            }
            let name = thread.thread().name().unwrap_or("?").to_string();
            if thread.join().is_err() {
                tracing::error!(thread = %name, "a flash I/O thread panicked");
            }
        }
    }
}
