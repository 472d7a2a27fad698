//! A pool leaf: the key's server, and the delete spool for what it cannot take.

use super::{Class, Ctx, Form, Op, ReplyFuture};
use crate::backend::BackendError;
use crate::Pool;
use std::sync::Arc;

/// A pool leaf: the key's server; a delete it cannot deliver waits in the spool.
pub(super) fn pool_call(pool: &Arc<Pool>, op: Op, ctx: Ctx) -> ReplyFuture {
    let (backend, queue) = pool.server_for(&op.key);
    let bytes = op.bytes();
    let Some(queue) = queue else {
        return Box::pin(backend.call(ctx.lane, bytes, op.reply_kind()));
    };
    if op.class != Class::Delete {
        if op.class == Class::Get && queue.holds_reads() {
            // Replay first, serve second: what it holds may be what the spool deletes.
            // Failing (not missing) lets a gutter or another replica answer instead.
            let name = backend.name().to_string();
            return Box::pin(async move { Err(BackendError::Replaying(name)) });
        }
        return Box::pin(backend.call(ctx.lane, bytes, op.reply_kind()));
    }
    let spooled_reply: &'static [u8] = match op.form {
        Form::Raw { .. } => b"NF\r\n",
        _ => b"NOT_FOUND\r\n",
    };
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
    let call = backend.call(ctx.lane, bytes.clone(), op.reply_kind());
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
