//! A pool leaf: the key's server, and the delete spool for what it cannot take.

use super::request::{ReplyFuture, RequestClass, RequestForm, RouteContext, RouteRequest};
use crate::backend::{Backend, BackendError};
use crate::spool::SpoolQueue;
use crate::Pool;
use memfleet_protocol::reply::ReplyKind;
use memfleet_protocol::{response, ParserConfig};
use std::sync::Arc;

/// A pool leaf: the key's server; a delete it cannot deliver waits in the spool, and so
/// does a copy for the key's own server while `auto_eject_hosts` has it out of the ring.
pub(super) fn pool_call(pool: &Arc<Pool>, op: RouteRequest, ctx: RouteContext) -> ReplyFuture {
    if let Some(refusal) = pool.rates().and_then(|r| r.refusal(op.class)) {
        return Box::pin(std::future::ready(Ok(refusal)));
    }
    if let Some((flags, len)) = op.stored_item() {
        let limit = ParserConfig::with_max_item_size(pool.config().item_size_max);
        if !limit.fits(op.key.len(), flags, len) {
            // What memcached running with `-I item_size_max` answers.
            return Box::pin(std::future::ready(Ok(response::TOO_LARGE.to_vec())));
        }
    }
    let (backend, queue) = pool.server_for(&op.key);
    let bytes = op.bytes();
    let Some(queue) = queue else {
        return Box::pin(backend.call(ctx.lane, bytes, op.reply_kind()));
    };
    if op.class != RequestClass::Delete {
        if op.class == RequestClass::Get && queue.holds_reads() {
            // Replay first, serve second: what it holds may be what the spool deletes.
            // Failing (not missing) lets a gutter or another replica answer instead.
            let name = backend.name().to_string();
            return Box::pin(async move { Err(BackendError::Replaying(name)) });
        }
        return Box::pin(backend.call(ctx.lane, bytes, op.reply_kind()));
    }
    let spooled_reply: &'static [u8] = match op.form {
        RequestForm::Raw { .. } => b"NF\r\n",
        _ => b"NOT_FOUND\r\n",
    };
    let home = pool
        .ejected_home_queue(&op.key)
        .filter(|home| !Arc::ptr_eq(home, &queue));
    let copy = home.as_ref().map(|_| bytes.clone());
    let delivery = deliver(
        backend,
        queue,
        bytes,
        op.reply_kind(),
        spooled_reply,
        ctx.lane,
    );
    let (Some(home), Some(copy)) = (home, copy) else {
        return delivery;
    };
    // An ejected server still holds what it had when it went: its copy of the delete
    // waits for it, so it cannot serve the old value when it is back.
    Box::pin(async move {
        let reply = delivery.await;
        home.append(copy).await.map_err(|e| {
            tracing::error!(error = %e, "cannot spool a delete");
            BackendError::Connection("spool".to_string())
        })?;
        reply
    })
}

/// A delete to `backend`, or into its `queue` when the queue already holds deletes (they
/// go first) or the server does not answer.
fn deliver(
    backend: Arc<Backend>,
    queue: Arc<SpoolQueue>,
    bytes: Vec<u8>,
    kind: ReplyKind,
    spooled_reply: &'static [u8],
    lane: usize,
) -> ReplyFuture {
    if queue.depth() > 0 {
        // Deletes already waiting for this server go first: keep the order.
        return Box::pin(async move {
            queue.append(bytes).await.map_err(|e| {
                tracing::error!(error = %e, "cannot spool a delete");
                BackendError::Connection(backend.name().to_string())
            })?;
            Ok(spooled_reply.to_vec())
        });
    }
    let call = backend.call(lane, bytes.clone(), kind);
    Box::pin(async move {
        match call.await {
            Ok(r) => Ok(r),
            Err(failure) => match queue.append(bytes).await {
                // mcrouter's asynclog answers a spooled delete with "not found" too.
                Ok(()) => Ok(spooled_reply.to_vec()),
                Err(e) => {
                    tracing::error!(error = %e, "cannot spool a delete");
                    Err(failure)
                }
            },
        }
    })
}
