//! The flash tier's I/O: memfleet's counterpart of memcached's extstore files
//! (`memcached -o ext_path=PATH:SIZE`).
//!
//! The storage engine decides what goes to flash and where; this crate only moves bytes. Each
//! file given as `PATH:SIZE` ([`FlashSpec`]) is cut into whole segments (1 MiB by default);
//! physical segment numbers run across the files in the order given. [`FlashFiles`] writes
//! whole segments ([`FlashFiles::try_write`]) and reads arbitrary byte ranges of one segment
//! back ([`FlashFiles::read`], [`FlashFiles::read_blocking`]).
//!
//! It depends on no other memfleet crate and starts no async runtime: the I/O runs on plain
//! threads, so a slow device never blocks the caller.
//!
//! # Threads
//!
//! ```text
//!  try_write ──► [queue of file 0, write_queue deep] ──► memfleet-flash-w0 ──pwrite──► file 0
//!            ──► [queue of file 1, write_queue deep] ──► memfleet-flash-w1 ──pwrite──► file 1
//!  read      ──► [one queue, read_queue deep] ──► memfleet-flash-r0..r{read_threads-1} ──pread──► any file
//! ```
//!
//! A server worker may read on an io_uring of its own instead ([`FlashFiles::uring_reads`]):
//! submitted and completed on the worker's thread, with no hand-off to a reader thread.
//!
//! Callers never wait on a queue: a full one refuses at once (the write's callback is given
//! back; the read resolves to `WouldBlock`) and the refusal is counted in [`IoStats`].
//!
//! # Layout
//!
//! | module    | what it holds |
//! |-----------|---------------|
//! | `spec`    | [`FlashSpec`]: `PATH:SIZE` parsing, memcached's size suffixes |
//! | `error`   | [`FlashError`]: why the files could not be opened |
//! | `aligned` | 4096-aligned buffers without `unsafe` (O_DIRECT needs them) |
//! | `stats`   | [`IoStats`] and the counters the threads share |
//! | `layout`  | one file opened, locked and sized; physical segment → file and byte offset |
//! | `io`      | the pread of a range's covering blocks; short reads are errors |
//! | `writer`  | the writer thread of one file |
//! | `reader`  | the reader threads and [`FlashRead`], the future a read returns |
//! | `files`   | [`FlashFiles`]: the files, the threads and the queues between them |
//! | `uring`   | [`UringReads`]: reads on an io_uring of the calling worker's own |
//!
//! **Invariant:** every file is a whole number of segments, every segment a whole number of
//! 4096-byte blocks, so every pread and pwrite is block-aligned in offset, length and memory.

mod aligned;
mod error;
mod files;
mod io;
mod layout;
mod reader;
mod spec;
mod stats;
mod uring;
mod writer;

pub use error::FlashError;
pub use files::{FlashFiles, FlashOptions};
pub use reader::FlashRead;
pub use spec::{FlashSpec, SpecError};
pub use stats::IoStats;
pub use uring::{UringRead, UringReads};
pub use writer::WriteDone;
