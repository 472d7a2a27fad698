//! The writer thread of one file: takes whole segments from its bounded queue, copies each
//! into its own aligned buffer, pwrites it and calls the segment's callback. It stops once
//! its queue is closed and empty, so every queued write is finished.

use std::io;
use std::os::unix::fs::FileExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::Receiver;
use std::sync::Arc;

use crate::aligned::AlignedBuf;
use crate::layout::Layout;
use crate::stats::Shared;

/// The callback of one segment write, called with its result from the writer thread.
pub type WriteDone = Box<dyn FnOnce(io::Result<()>) + Send>;

/// One queued segment write.
pub(crate) struct WriteJob {
    /// Byte offset in the writer's file; meaningless when `invalid` is set.
    pub(crate) at: u64,
    pub(crate) bytes: Arc<[u8]>,
    pub(crate) done: WriteDone,
    /// Set for a caller's bad request: answered with `InvalidInput`, nothing written.
    pub(crate) invalid: Option<String>,
}

/// Runs the writer of file `index` until `jobs` is closed and drained.
pub(crate) fn run(
    layout: Arc<Layout>,
    index: usize,
    jobs: Receiver<WriteJob>,
    shared: Arc<Shared>,
) {
    let file = &layout.files[index].file;
    let mut buf = AlignedBuf::new(layout.segment_size);
    while let Ok(job) = jobs.recv() {
        let result = match job.invalid {
            Some(why) => Err(io::Error::new(io::ErrorKind::InvalidInput, why)),
            None => {
                shared.delay();
                buf.as_mut_slice().copy_from_slice(&job.bytes);
                // write_all_at retries short writes and EINTR.
                file.write_all_at(buf.as_slice(), job.at)
            }
        };
        if let Err(e) = &result {
            tracing::warn!(path = %layout.files[index].spec.path.display(), at = job.at, error = %e, "flash write failed");
        }
        shared.counters.write_done(&result, job.bytes.len());
        shared.counters.write_queue_depth.fetch_sub(1, Relaxed);
        let done = job.done;
        if catch_unwind(AssertUnwindSafe(move || done(result))).is_err() {
            tracing::error!("a flash write callback panicked; the writer goes on");
        }
    }
}
