//! [`IoStats`] and what the I/O threads share with the caller: the counters behind it, the
//! closing flag and the injected delay.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// A snapshot of the flash files' I/O counters (totals since open, and queue depths now).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoStats {
    /// Reads answered with bytes.
    pub reads: u64,
    /// Bytes those reads returned (the ranges asked for, not the blocks read).
    pub read_bytes: u64,
    /// Reads answered with an error (I/O, short file, bad range, closing).
    pub read_errors: u64,
    /// Reads refused because the read queue was full (`WouldBlock`).
    pub reads_rejected: u64,
    /// Segments written.
    pub writes: u64,
    /// Bytes those writes wrote.
    pub write_bytes: u64,
    /// Writes whose callback got an error.
    pub write_errors: u64,
    /// Writes refused because their file's queue was full (callback given back).
    pub writes_rejected: u64,
    /// Reads queued or being read now.
    pub read_queue_depth: u64,
    /// Writes queued or being written now, all files together.
    pub write_queue_depth: u64,
    /// Workers' io_uring rings open now ([`crate::UringReads`]).
    pub uring_rings: u64,
}

/// The live counters behind [`IoStats`].
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) reads: AtomicU64,
    pub(crate) read_bytes: AtomicU64,
    pub(crate) read_errors: AtomicU64,
    pub(crate) reads_rejected: AtomicU64,
    pub(crate) writes: AtomicU64,
    pub(crate) write_bytes: AtomicU64,
    pub(crate) write_errors: AtomicU64,
    pub(crate) writes_rejected: AtomicU64,
    pub(crate) read_queue_depth: AtomicU64,
    pub(crate) write_queue_depth: AtomicU64,
    pub(crate) uring_rings: AtomicU64,
}

impl Counters {
    /// Counts one finished read of `len` bytes, or its error.
    pub(crate) fn read_done<T>(&self, result: &std::io::Result<T>, len: usize) {
        match result {
            Ok(_) => {
                self.reads.fetch_add(1, Relaxed);
                self.read_bytes.fetch_add(len as u64, Relaxed);
            }
            Err(_) => {
                self.read_errors.fetch_add(1, Relaxed);
            }
        }
    }

    /// Counts one finished write of `len` bytes, or its error.
    pub(crate) fn write_done(&self, result: &std::io::Result<()>, len: usize) {
        match result {
            Ok(()) => {
                self.writes.fetch_add(1, Relaxed);
                self.write_bytes.fetch_add(len as u64, Relaxed);
            }
            Err(_) => {
                self.write_errors.fetch_add(1, Relaxed);
            }
        }
    }

    /// The snapshot.
    pub(crate) fn snapshot(&self) -> IoStats {
        IoStats {
            reads: self.reads.load(Relaxed),
            read_bytes: self.read_bytes.load(Relaxed),
            read_errors: self.read_errors.load(Relaxed),
            reads_rejected: self.reads_rejected.load(Relaxed),
            writes: self.writes.load(Relaxed),
            write_bytes: self.write_bytes.load(Relaxed),
            write_errors: self.write_errors.load(Relaxed),
            writes_rejected: self.writes_rejected.load(Relaxed),
            read_queue_depth: self.read_queue_depth.load(Relaxed),
            write_queue_depth: self.write_queue_depth.load(Relaxed),
            uring_rings: self.uring_rings.load(Relaxed),
        }
    }
}

/// What the caller and every I/O thread share.
#[derive(Default)]
pub(crate) struct Shared {
    pub(crate) counters: Counters,
    /// Set when the files are dropped: readers answer what is left with an error.
    pub(crate) closing: AtomicBool,
    /// Slept before each pread and pwrite (tests: a slow device).
    pub(crate) delay: Option<Duration>,
}

impl Shared {
    /// Sleeps the injected delay, if any.
    pub(crate) fn delay(&self) {
        if let Some(delay) = self.delay {
            std::thread::sleep(delay);
        }
    }
}
