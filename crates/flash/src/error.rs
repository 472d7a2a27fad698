//! [`FlashError`]: why the flash files could not be opened.

use std::io;
use std::path::PathBuf;

/// Why `FlashFiles::open` failed.
#[derive(Debug, thiserror::Error)]
pub enum FlashError {
    /// The file could not be opened, locked, sized or allocated (no space, no permission, ...).
    #[error("failed to open ext_path file {}: {source}", path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: io::Error,
    },
    /// Another process (or another open in this one) holds the file's lock.
    #[error("ext_path file {} is locked: another server is using it", path.display())]
    Locked {
        /// The file.
        path: PathBuf,
    },
    /// The size given for the file holds no whole segment.
    #[error("ext_path file {} is too small: {size} bytes hold no {segment}-byte segment", path.display())]
    TooSmall {
        /// The file.
        path: PathBuf,
        /// The size given for it.
        size: u64,
        /// The segment size.
        segment: usize,
    },
    /// The segment size is zero, not a multiple of 4096, or over 4 GiB - 4096 (offsets are u32).
    #[error("flash segment size {0} must be a positive multiple of 4096 below 4 GiB")]
    SegmentSize(usize),
    /// Another option is out of range: no files, more than `u32::MAX` segments in all, or a
    /// zero thread count or queue depth.
    #[error("bad flash option: {0}")]
    Options(String),
    /// An I/O thread could not be started.
    #[error("failed to start a flash I/O thread: {0}")]
    Spawn(#[source] io::Error),
}
