//! What a connection's writer waits for, in request order ([`QueuedReply`]), and the reply a
//! forwarded request gives its client.

use memfleet_client::BackendError;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// A client's reply on its way.
type ClientReplyFuture = Pin<Box<dyn Future<Output = Vec<u8>> + Send>>;

/// What the writer waits for, in request order.
pub(crate) enum QueuedReply {
    /// A reply to send as it comes.
    Reply(ClientReplyFuture),
    /// A reply known at once and shared (a rate limit's refusal), or none (`noreply`):
    /// nothing to wait for.
    Ready(Option<Arc<[u8]>>),
    /// Close the connection after the replies before it.
    Close,
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
