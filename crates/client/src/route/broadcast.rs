//! `broadcast` (§4.1): every write to every destination; reads from the first.

use super::combine::{all_deleted, all_sync};
use super::request::{ReplyFuture, RequestClass, RouteContext, RouteRequest};
use super::{ready, Build, Route, RouteNode, Step};
use memfleet_routing::{Broadcast, BroadcastMode};
use std::sync::Arc;

/// A `broadcast` route, ready to run.
pub(super) struct BroadcastRoute {
    /// The destinations.
    to: Vec<Arc<Route>>,
    /// How to answer.
    mode: BroadcastMode,
}

impl BroadcastRoute {
    pub(super) fn build(s: &Broadcast, b: &mut Build<'_, '_>) -> BroadcastRoute {
        BroadcastRoute {
            to: s.to.iter().map(|r| b.route(r)).collect(),
            mode: s.mode,
        }
    }
}

impl RouteNode for BroadcastRoute {
    fn call(&self, op: RouteRequest, ctx: RouteContext) -> ReplyFuture {
        if op.class == RequestClass::Get {
            // A read needs one answer: the first destination's.
            return self.to[0].call(op, ctx);
        }
        let calls: Vec<ReplyFuture> = self.to.iter().map(|r| r.call(op.clone(), ctx)).collect();
        match self.mode {
            BroadcastMode::AllSync if op.class == RequestClass::Delete => all_deleted(calls),
            BroadcastMode::AllSync => all_sync(calls),
            BroadcastMode::AllAsync => {
                tokio::spawn(futures_util::future::join_all(calls));
                ready(Ok(op.unconfirmed().to_vec()))
            }
        }
    }

    fn children(&self) -> Vec<&Arc<Route>> {
        self.to.iter().collect()
    }

    fn walk<'r, 'k>(&'r self, class: RequestClass, key: &'k [u8], _: RouteContext) -> Step<'r, 'k> {
        let mode = self.mode.name();
        if class == RequestClass::Get {
            let line = format!("broadcast|{mode}|read (first destination)");
            return Step::new(line).then(&self.to[0], key);
        }
        Step::new(format!("broadcast|{mode}")).then_all(&self.to, key)
    }

    fn get_target(&self, key: &[u8], ctx: RouteContext) -> Option<std::net::SocketAddr> {
        self.to[0].get_target(key, ctx)
    }
}
