//! `migrate` (mcrouter's `MigrateRoute`): keys move from one route to another at a given
//! time. Before `start_time` everything goes to `from`; for `interval` seconds deletes go
//! to both (answered by the delete rule of `combine.rs`), gets to `to` falling back to
//! `from` on a miss or a failure, everything else to `to`; then everything goes to `to`.

use super::combine::all_deleted;
use super::request::{ReplyFuture, RequestClass, RouteContext, RouteReply, RouteRequest};
use super::Route;
use std::sync::Arc;

/// A `migrate` route, ready to run.
pub struct MigrateRoute {
    /// Where keys are before the move.
    pub from: Arc<Route>,
    /// Where they go.
    pub to: Arc<Route>,
    /// When the move starts, Unix seconds.
    pub start_time: u64,
    /// How long it lasts, seconds.
    pub interval: u64,
}

/// Where a migration stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Not started: `from` serves.
    Before,
    /// Moving: deletes to both, gets from `to` then `from`, the rest to `to`.
    During,
    /// Done: `to` serves.
    After,
}

/// A get's miss (text or meta).
fn is_miss(reply: &RouteReply) -> bool {
    match reply {
        Err(_) => true,
        Ok(r) => r.as_slice() == b"END\r\n" || r.starts_with(b"EN\r\n") || r.starts_with(b"EN "),
    }
}

impl MigrateRoute {
    /// The phase at `now` (Unix seconds).
    pub fn phase_at(&self, now: u64) -> Phase {
        if now < self.start_time {
            Phase::Before
        } else if now < self.start_time.saturating_add(self.interval) {
            Phase::During
        } else {
            Phase::After
        }
    }

    /// The phase now.
    pub fn phase(&self) -> Phase {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.phase_at(now)
    }

    pub(super) fn call(&self, op: RouteRequest, ctx: RouteContext) -> ReplyFuture {
        match self.phase() {
            Phase::Before => self.from.call(op, ctx),
            Phase::After => self.to.call(op, ctx),
            Phase::During => match op.class {
                RequestClass::Delete => {
                    all_deleted(vec![self.to.call(op.clone(), ctx), self.from.call(op, ctx)])
                }
                RequestClass::Get => {
                    let first = self.to.call(op.clone(), ctx);
                    let from = self.from.clone();
                    Box::pin(async move {
                        let reply = first.await;
                        if !is_miss(&reply) {
                            return reply;
                        }
                        match from.call(op, ctx).await {
                            // The old route's failure is no better than the new one's miss.
                            Err(_) => reply,
                            old => old,
                        }
                    })
                }
                _ => self.to.call(op, ctx),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_phase_follows_the_clock() {
        let m = MigrateRoute {
            from: Arc::new(Route::Null),
            to: Arc::new(Route::Null),
            start_time: 100,
            interval: 10,
        };
        assert_eq!(m.phase_at(99), Phase::Before);
        assert_eq!(m.phase_at(100), Phase::During);
        assert_eq!(m.phase_at(109), Phase::During);
        assert_eq!(m.phase_at(110), Phase::After);
        assert!(is_miss(&Ok(b"EN\r\n".to_vec())) && !is_miss(&Ok(b"HD\r\n".to_vec())));
    }
}
