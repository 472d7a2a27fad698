//! What a connection's writer waits for, in request order ([`QueuedReply`]), and the reply a
//! forwarded request gives its client.

use memfleet_client::conn_stats::Stamp;
use memfleet_client::BackendError;
use std::future::Future;
use std::pin::Pin;
use tokio::sync::mpsc;

/// A client's reply on its way.
type ClientReplyFuture = Pin<Box<dyn Future<Output = Vec<u8>> + Send>>;

/// What the writer waits for, in request order.
pub(crate) enum QueuedReply {
    /// A reply to send as it comes.
    Reply(ClientReplyFuture),
    /// Replies known at once (a rate limit's refusals; none for `noreply`), `replies` of
    /// them one after another: nothing to wait for.
    Ready { bytes: Vec<u8>, replies: u32 },
    /// Close the connection after the replies before it.
    Close,
}

/// The reader's end of the writer's queue: replies in request order, each with when its
/// request was read; replies known at once (a storm's refusals) are kept together and go
/// as one message per run, not one each.
pub(super) struct Queue {
    tx: mpsc::Sender<(QueuedReply, Stamp)>,
    /// The ready replies not sent yet, and how many.
    run: (Vec<u8>, u32),
    /// When the run's requests were read.
    run_read: Stamp,
}

impl Queue {
    pub(super) fn new(tx: mpsc::Sender<(QueuedReply, Stamp)>) -> Queue {
        Queue {
            tx,
            run: (Vec::new(), 0),
            run_read: Stamp::now(),
        }
    }

    /// One more reply known at once, for a request read at `read` (`None`: a `noreply`
    /// request's, nothing to write).
    pub(super) fn ready(&mut self, reply: Option<&[u8]>, read: Stamp) {
        self.run.0.extend_from_slice(reply.unwrap_or_default());
        self.run.1 += 1;
        self.run_read = read;
    }

    /// Queues `reply` after the ready run before it; false once the writer is gone.
    pub(super) async fn send(&mut self, reply: QueuedReply, read: Stamp) -> bool {
        self.flush().await && self.tx.send((reply, read)).await.is_ok()
    }

    /// Queues the ready run, if any (before the reader waits for more input, so that no
    /// reply waits on the next read); false once the writer is gone.
    pub(super) async fn flush(&mut self) -> bool {
        if self.run.1 == 0 {
            return true;
        }
        let (bytes, replies) = std::mem::take(&mut self.run);
        let run = QueuedReply::Ready { bytes, replies };
        self.tx.send((run, self.run_read)).await.is_ok()
    }
}

/// A local reply.
pub(super) fn local(bytes: Vec<u8>) -> QueuedReply {
    QueuedReply::Reply(Box::pin(async move { bytes }))
}

/// memcached's reply for a server that did not answer.
pub(super) fn error_reply(e: &BackendError) -> Vec<u8> {
    format!("SERVER_ERROR {e}\r\n").into_bytes()
}

/// Reply prefixes a client's quiet mode drops (meta `q`).
pub(super) type Quiet = Option<&'static [&'static [u8]]>;

/// The client's reply to a forwarded request: the server's, or `SERVER_ERROR` when none
/// came; nothing when the client asked for no reply (`noreply`) or its quiet mode drops
/// this one (`quiet`).
pub(super) fn forwarded(
    call: impl Future<Output = Result<Vec<u8>, BackendError>> + Send + 'static,
    noreply: bool,
    quiet: Quiet,
) -> QueuedReply {
    QueuedReply::Reply(Box::pin(async move {
        let reply = call.await.unwrap_or_else(|e| error_reply(&e));
        let suppressed = quiet.is_some_and(|q| q.iter().any(|p| reply.starts_with(p)));
        if noreply || suppressed {
            Vec::new()
        } else {
            reply
        }
    }))
}
