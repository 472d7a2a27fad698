//! Why a trace could not be read, shared by the CSV reader (`trace`) and the binary readers
//! (`binary`) so that neither depends on the other. Not here: reading (those modules).

use std::io;

/// A trace could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The underlying reader failed.
    #[error("I/O error reading trace: {0}")]
    Io(#[from] io::Error),
    /// A CSV line did not have the expected shape.
    #[error("trace line {line}: {reason}")]
    Malformed {
        /// 1-based line number.
        line: u64,
        /// What was wrong.
        reason: String,
    },
    /// A binary record carried something impossible.
    #[error("trace record {index}: {reason}")]
    BadRecord {
        /// 0-based record index.
        index: u64,
        /// What was wrong.
        reason: String,
    },
    /// The file ended inside a binary record.
    #[error(
        "trace ends with {len} stray bytes after record {index} (records are {record_size} bytes)"
    )]
    Truncated {
        /// Number of complete records read.
        index: u64,
        /// Bytes of the partial record.
        len: usize,
        /// The format's record size.
        record_size: usize,
    },
}
