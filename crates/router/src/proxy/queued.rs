//! What a connection's writer waits for, in request order ([`QueuedReply`]), and the reply a
//! forwarded request gives its client.

use memfleet_client::conn_stats::Stamp;
use memfleet_client::BackendError;
use std::future::Future;
use std::pin::Pin;

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

/// Replies known at once (a storm's refusals) that a reader keeps together: they go to the
/// writer as one message per run, not one each. The reader sends the run before any other
/// reply and before it waits for more input, so the order stays the requests'.
#[derive(Default)]
pub(super) struct ReadyRun {
    bytes: Vec<u8>,
    replies: u32,
    /// When the run's requests were read.
    read: Option<Stamp>,
}

impl ReadyRun {
    /// One more reply, for a request read at `read` (`None`: a `noreply` request's,
    /// nothing to write).
    pub(super) fn push(&mut self, reply: Option<&[u8]>, read: Stamp) {
        self.bytes.extend_from_slice(reply.unwrap_or_default());
        self.replies += 1;
        self.read = Some(read);
    }

    /// The run so far as one queued reply, if there is one; it starts again empty.
    pub(super) fn take(&mut self) -> Option<(QueuedReply, Stamp)> {
        let read = self.read.take()?;
        let run = QueuedReply::Ready {
            bytes: std::mem::take(&mut self.bytes),
            replies: std::mem::take(&mut self.replies),
        };
        Some((run, read))
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
