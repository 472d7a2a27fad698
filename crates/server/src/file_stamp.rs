//! When a file the server reads again on change (the SASL password database, the
//! `--cluster-config` nodes) last changed: its modification time and size, `None` when it
//! cannot be read. A request that finds another stamp than the one last read reads the file
//! again.

use std::path::Path;
use std::time::SystemTime;

/// A file's modification time and size.
pub(crate) type FileStamp = Option<(SystemTime, u64)>;

/// `path`'s stamp now (one `stat`).
pub(crate) fn stamp(path: &Path) -> FileStamp {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}
