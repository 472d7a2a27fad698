//! The connection loop's sizes: how much a read asks for, how much output a batch may build
//! before it is written, how many batches a connection runs before yielding. Apart from
//! `connection.rs` because `stats settings` reports them too.

/// Bytes a read asks for at least.
pub const READ_CHUNK: usize = 16 * 1024;

/// Output size at which the server stops running requests and writes.
pub const WRITE_BUDGET: usize = 256 * 1024;

/// Batches a connection may run back to back before letting the worker's other connections
/// have a turn.
pub(crate) const BATCHES_BEFORE_YIELD: u32 = 32;
