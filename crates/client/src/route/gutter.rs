//! `gutter` (§3.3): when main fails, gets and sets go to the gutter, sets there with their
//! TTL capped; deletes go to both.

use super::request::{ReplyFuture, RequestClass, RequestForm, RouteContext, RouteRequest};
use super::ttl::capped_exptime;
use super::{Build, Route, RouteCounters, RouteNode, Step};
use memfleet_protocol::reply::is_hit;
use memfleet_routing::Gutter;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A `gutter` route, ready to run.
pub(super) struct GutterRoute {
    /// While it answers.
    main: Arc<Route>,
    /// When it does not.
    gutter: Arc<Route>,
    /// Longest TTL in the gutter, seconds.
    ttl: u32,
    /// Gutter requests and hits.
    counters: Arc<RouteCounters>,
}

impl GutterRoute {
    pub(super) fn build(s: &Gutter, b: &mut Build<'_, '_>) -> GutterRoute {
        GutterRoute {
            main: b.route(&s.main),
            gutter: b.route(&s.gutter),
            ttl: s.ttl,
            counters: b.counters(&["gutter_requests", "gutter_gets", "gutter_hits"]),
        }
    }
}

impl RouteNode for GutterRoute {
    fn call(&self, op: RouteRequest, ctx: RouteContext) -> ReplyFuture {
        if op.class == RequestClass::Delete {
            // Deletes go to both: a value set into the gutter while main failed must not
            // outlive its invalidation. The answer is main's (spooled there, or an error:
            // the gutter taking it does not make it delivered).
            let main_call = self.main.call(op.clone(), ctx);
            let gutter_call = self.gutter.call(op, ctx);
            return Box::pin(async move {
                let (reply, _) = futures_util::future::join(main_call, gutter_call).await;
                reply
            });
        }
        let call = self.main.call(op.clone(), ctx);
        let gutter = self.gutter.clone();
        let (ttl, counters) = (self.ttl, self.counters.clone());
        Box::pin(async move {
            let failure = match call.await {
                Ok(r) => return Ok(r),
                Err(e) => e,
            };
            // Only what can be made to expire goes to the gutter: gets and storage
            // commands (with the TTL capped). A meta set or an increment could leave an
            // entry without the cap: those fail as they would.
            let op = match (&op.form, op.class) {
                (RequestForm::Store { .. }, _) => {
                    let mut op = op;
                    if let RequestForm::Store { exptime, .. } = &mut op.form {
                        *exptime = capped_exptime(*exptime, ttl);
                    }
                    op
                }
                (_, RequestClass::Get) => op,
                _ => return Err(failure),
            };
            counters.gutter_requests.fetch_add(1, Ordering::Relaxed);
            if op.class == RequestClass::Get {
                counters.gutter_gets.fetch_add(1, Ordering::Relaxed);
            }
            let reply = gutter.call(op, ctx).await;
            if matches!(&reply, Ok(r) if is_hit(r)) {
                counters.gutter_hits.fetch_add(1, Ordering::Relaxed);
            }
            reply
        })
    }

    fn children(&self) -> Vec<&Arc<Route>> {
        vec![&self.main, &self.gutter]
    }

    fn walk<'r, 'k>(&'r self, _: RequestClass, key: &'k [u8], _: RouteContext) -> Step<'r, 'k> {
        Step::new(format!("gutter|ttl={}", self.ttl)).then_all([&self.main, &self.gutter], key)
    }

    fn get_target(&self, key: &[u8], ctx: RouteContext) -> Option<std::net::SocketAddr> {
        self.main.get_target(key, ctx)
    }
}
