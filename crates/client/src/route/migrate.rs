//! `migrate` (mcrouter's `MigrateRoute`): keys move from one route to another at a given
//! time. Before `start_time` everything goes to `from`; for `interval` seconds deletes go
//! to both (answered by the delete rule of `combine.rs`), gets to `to` falling back to
//! `from` on a miss or a failure, everything else to `to`; then everything goes to `to`.

use super::combine::all_deleted;
use super::request::{ReplyFuture, RequestClass, RouteContext, RouteReply, RouteRequest};
use super::{Build, Route, RouteNode, Step};
use memfleet_routing::Migrate;
use std::sync::Arc;

/// A `migrate` route, ready to run.
pub(super) struct MigrateRoute {
    /// Where keys are before the move.
    from: Arc<Route>,
    /// Where they go.
    to: Arc<Route>,
    /// When the move starts, Unix seconds.
    start_time: u64,
    /// How long it lasts, seconds.
    interval: u64,
}

/// Where a migration stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
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
    pub(super) fn build(s: &Migrate, b: &mut Build<'_, '_>) -> MigrateRoute {
        MigrateRoute {
            from: b.route(&s.from),
            to: b.route(&s.to),
            start_time: s.start_time,
            interval: s.interval,
        }
    }

    /// The phase at `now` (Unix seconds).
    fn phase_at(&self, now: u64) -> Phase {
        if now < self.start_time {
            Phase::Before
        } else if now < self.start_time.saturating_add(self.interval) {
            Phase::During
        } else {
            Phase::After
        }
    }

    /// The phase now.
    fn phase(&self) -> Phase {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.phase_at(now)
    }
}

impl RouteNode for MigrateRoute {
    fn call(&self, op: RouteRequest, ctx: RouteContext) -> ReplyFuture {
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

    fn children(&self) -> Vec<&Arc<Route>> {
        vec![&self.from, &self.to]
    }

    fn walk<'r, 'k>(&'r self, class: RequestClass, key: &'k [u8], _: RouteContext) -> Step<'r, 'k> {
        let (to, from) = (&self.to, &self.from);
        match (self.phase(), class) {
            (Phase::Before, _) => Step::new("migrate|before (from)").then(from, key),
            (Phase::After, _) => Step::new("migrate|after (to)").then(to, key),
            (Phase::During, RequestClass::Delete) => {
                Step::new("migrate|moving: deletes to both").then_all([to, from], key)
            }
            (Phase::During, RequestClass::Get) => {
                Step::new("migrate|moving: to, then from on a miss").then_all([to, from], key)
            }
            (Phase::During, _) => Step::new("migrate|moving: to").then(to, key),
        }
    }

    fn get_target(&self, key: &[u8], ctx: RouteContext) -> Option<std::net::SocketAddr> {
        match self.phase() {
            Phase::Before => self.from.get_target(key, ctx),
            Phase::After => self.to.get_target(key, ctx),
            Phase::During => None, // a miss falls back: TCP decides
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_phase_follows_the_clock() {
        let m = MigrateRoute {
            from: Arc::new(Route::node(crate::route::answer::NullRoute)),
            to: Arc::new(Route::node(crate::route::answer::NullRoute)),
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
