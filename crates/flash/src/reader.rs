//! The reader threads, sharing one bounded queue, and [`FlashRead`], the future a read
//! returns. Once the files are closing, what is left in the queue is answered with an error.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use tokio::sync::oneshot;

use crate::aligned::AlignedBuf;
use crate::io::read_range;
use crate::layout::Layout;
use crate::stats::Shared;

/// The answer to one read.
pub(crate) type ReadResult = io::Result<Vec<u8>>;

/// One queued read (its range already checked).
pub(crate) struct ReadJob {
    pub(crate) phys: u32,
    pub(crate) offset: u32,
    pub(crate) len: u32,
    pub(crate) reply: oneshot::Sender<ReadResult>,
}

/// Runs one reader until the queue is closed and drained.
pub(crate) fn run(layout: Arc<Layout>, jobs: Arc<Mutex<Receiver<ReadJob>>>, shared: Arc<Shared>) {
    let mut buf = AlignedBuf::new(0);
    loop {
        // The lock is held while waiting, so one idle reader waits on the queue and the
        // others on the lock; it is released before the read.
        let job = jobs.lock().unwrap_or_else(PoisonError::into_inner).recv();
        let Ok(job) = job else { break };
        if job.reply.is_closed() {
            // The caller dropped its future: nobody wants the bytes.
            shared.counters.read_queue_depth.fetch_sub(1, Relaxed);
            continue;
        }
        let result = if shared.closing.load(Acquire) {
            Err(io::Error::other("flash files closed"))
        } else {
            shared.delay();
            read_range(&layout, job.phys, job.offset, job.len, &mut buf)
        };
        shared.counters.read_done(&result, job.len as usize);
        shared.counters.read_queue_depth.fetch_sub(1, Relaxed);
        // The caller may have dropped its future meanwhile; nothing to do then.
        let _ = job.reply.send(result);
    }
}

/// A read in flight: resolves to the bytes, or to the error that stopped them. Dropping it
/// cancels the read if no reader has started it yet.
#[derive(Debug)]
pub struct FlashRead(State);

#[derive(Debug)]
enum State {
    /// Answered without queueing (bad range, queue full); `None` once taken.
    Ready(Option<ReadResult>),
    /// Queued for a reader.
    Queued(oneshot::Receiver<ReadResult>),
}

impl FlashRead {
    /// A read answered at once.
    pub(crate) fn ready(result: ReadResult) -> FlashRead {
        FlashRead(State::Ready(Some(result)))
    }

    /// A read waiting for its reader.
    pub(crate) fn queued(reply: oneshot::Receiver<ReadResult>) -> FlashRead {
        FlashRead(State::Queued(reply))
    }
}

impl Future for FlashRead {
    type Output = ReadResult;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<ReadResult> {
        match &mut self.0 {
            State::Ready(result) => Poll::Ready(
                result
                    .take()
                    .unwrap_or_else(|| Err(io::Error::other("FlashRead polled after it resolved"))),
            ),
            State::Queued(reply) => Pin::new(reply).poll(cx).map(|answer| {
                answer.unwrap_or_else(|_| Err(io::Error::other("flash reader stopped")))
            }),
        }
    }
}
